// What the neighbourhood collectives (neighbors.cpp) need of a communicator's process
// topology (topology.cpp).
#pragma once

#include "mpi.h"

#include <vector>

namespace msgpass::mpi::api {

// A rank's neighbours, in the standard's order: a Cartesian grid's are, per
// dimension, the rank one step back then one step forward (MPI_PROC_NULL past the
// end of a dimension that is not periodic), both lists alike; a graph's its
// neighbours; a distributed graph's its sources and destinations as given.
struct Neighbors {
    bool cartesian = false;
    std::vector<int> sources, destinations;
};

// MPI_ERR_TOPOLOGY when comm has none.
Neighbors neighbors_of(MPI_Comm comm);

} // namespace msgpass::mpi::api
