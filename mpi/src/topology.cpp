// The C entry points of msgpass's MPI (mpi.h), Cartesian topologies: a communicator
// made by MPI_Cart_create carries a grid (its dimensions and which are periodic), its
// ranks numbered row-major over the grid (the last dimension varies fastest); ranks
// keep their order (reorder is allowed to do nothing). The grid is kept here by
// communicator handle and goes with MPI_Comm_free; MPI_Comm_dup hands it on.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

struct Grid {
    std::vector<int> dims;
    std::vector<bool> periods;
};

std::map<MPI_Comm, Grid> grids;

const Grid& grid_of(MPI_Comm comm) {
    (void)engine->info(comm);
    const auto it = grids.find(comm);
    if (it == grids.end())
        throw MpiError(MPI_ERR_TOPOLOGY, "communicator " + std::to_string(comm) + " has no Cartesian topology");
    return it->second;
}

int product(const std::vector<int>& dims) {
    long long p = 1;
    for (int d : dims) {
        p *= d;
        if (p > 1 << 30) throw MpiError(MPI_ERR_DIMS, "the grid has more than 2^30 points");
    }
    return static_cast<int>(p);
}

void check_dims(int ndims, const int* dims, const int* periods) {
    if (ndims < 0) throw MpiError(MPI_ERR_DIMS, "ndims " + std::to_string(ndims) + " is negative");
    if (ndims > 0 && (dims == nullptr || periods == nullptr)) throw MpiError(MPI_ERR_ARG, "dims or periods is NULL");
    for (int i = 0; i < ndims; ++i)
        if (dims[i] <= 0)
            throw MpiError(MPI_ERR_DIMS, "dimension " + std::to_string(i) + " is " + std::to_string(dims[i]) +
                                             " (each must be positive)");
}

// The coordinates of rank (row-major: the last dimension fastest).
std::vector<int> coords_of(const Grid& g, int rank) {
    std::vector<int> c(g.dims.size());
    for (std::size_t i = g.dims.size(); i-- > 0;) {
        c[i] = rank % g.dims[i];
        rank /= g.dims[i];
    }
    return c;
}

// The rank at coords, wrapped along periodic dimensions; -1 when a coordinate of a
// dimension that is not periodic falls outside it.
int rank_at(const Grid& g, std::vector<int> coords) {
    int rank = 0;
    for (std::size_t i = 0; i < g.dims.size(); ++i) {
        int c = coords[i];
        if (g.periods[i])
            c = ((c % g.dims[i]) + g.dims[i]) % g.dims[i];
        else if (c < 0 || c >= g.dims[i])
            return -1;
        rank = rank * g.dims[i] + c;
    }
    return rank;
}

} // namespace

namespace msgpass::mpi::api {

void copy_topology(MPI_Comm from, MPI_Comm to) {
    const auto it = grids.find(from);
    if (it != grids.end()) grids[to] = it->second;
}

void drop_topology(MPI_Comm comm) {
    grids.erase(comm);
}

} // namespace msgpass::mpi::api

extern "C" {

// Fills the zero entries of dims with a balanced factorisation of nnodes divided by
// the fixed entries: the largest factors first, so dims ends non-increasing there.
int MPI_Dims_create(int nnodes, int ndims, int dims[]) {
    return guarded("MPI_Dims_create", MPI_COMM_WORLD, [&] {
        if (nnodes <= 0) throw MpiError(MPI_ERR_ARG, "nnodes " + std::to_string(nnodes) + " is not positive");
        if (ndims < 0) throw MpiError(MPI_ERR_DIMS, "ndims " + std::to_string(ndims) + " is negative");
        if (ndims > 0 && dims == nullptr) throw MpiError(MPI_ERR_ARG, "dims is NULL");
        int fixed = 1;
        int free_dims = 0;
        for (int i = 0; i < ndims; ++i) {
            if (dims[i] < 0)
                throw MpiError(MPI_ERR_DIMS, "dims[" + std::to_string(i) + "] is " + std::to_string(dims[i]));
            if (dims[i] == 0)
                ++free_dims;
            else
                fixed *= dims[i];
        }
        if (nnodes % fixed != 0)
            throw MpiError(MPI_ERR_DIMS, "the fixed dimensions (product " + std::to_string(fixed) +
                                             ") do not divide nnodes " + std::to_string(nnodes));
        int rest = nnodes / fixed;
        if (free_dims == 0) {
            if (rest != 1)
                throw MpiError(MPI_ERR_DIMS, "the dimensions' product " + std::to_string(fixed) + " is not nnodes " +
                                                 std::to_string(nnodes));
            return MPI_SUCCESS;
        }
        // Prime factors, largest first, each given to the free dimension with the
        // smallest product so far.
        std::vector<int> primes;
        for (int p = 2; static_cast<long long>(p) * p <= rest; ++p)
            while (rest % p == 0) {
                primes.push_back(p);
                rest /= p;
            }
        if (rest > 1) primes.push_back(rest);
        std::sort(primes.rbegin(), primes.rend());
        std::vector<int> made(static_cast<std::size_t>(free_dims), 1);
        for (int p : primes)
            *std::min_element(made.begin(), made.end()) *= p;
        std::sort(made.rbegin(), made.rend());
        std::size_t k = 0;
        for (int i = 0; i < ndims; ++i)
            if (dims[i] == 0) dims[i] = made[k++];
        return MPI_SUCCESS;
    });
}

int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder,
                    MPI_Comm* comm_cart) {
    (void)reorder; // the ranks keep their order
    MPI_Comm made = MPI_COMM_NULL;
    int code = guarded("MPI_Cart_create", comm_old, [&] {
        if (comm_cart == nullptr) throw MpiError(MPI_ERR_ARG, "comm_cart is NULL");
        const auto c = engine->info(comm_old);
        if (c.local) throw MpiError(MPI_ERR_COMM, "a Cartesian topology on an intercommunicator");
        check_dims(ndims, dims, periods);
        const int n = product(std::vector<int>(dims, dims + ndims));
        if (n > c.size)
            throw MpiError(MPI_ERR_DIMS, "the grid has " + std::to_string(n) + " points, the communicator only " +
                                             std::to_string(c.size) + " ranks");
        return MPI_SUCCESS;
    });
    if (code != MPI_SUCCESS) return code;
    int rank = 0;
    MPI_Comm_rank(comm_old, &rank);
    const int n = product(std::vector<int>(dims, dims + ndims));
    // The first n ranks form the grid, the others get MPI_COMM_NULL.
    code = MPI_Comm_split(comm_old, rank < n ? 0 : MPI_UNDEFINED, rank, &made);
    if (code != MPI_SUCCESS) return code;
    if (made != MPI_COMM_NULL) {
        Grid g;
        g.dims.assign(dims, dims + ndims);
        for (int i = 0; i < ndims; ++i)
            g.periods.push_back(periods[i] != 0);
        grids[made] = std::move(g);
    }
    *comm_cart = made;
    return MPI_SUCCESS;
}

int MPI_Topo_test(MPI_Comm comm, int* status) {
    return guarded("MPI_Topo_test", comm, [&] {
        (void)engine->info(comm);
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL");
        *status = grids.count(comm) != 0 ? MPI_CART : MPI_UNDEFINED;
        return MPI_SUCCESS;
    });
}

int MPI_Cartdim_get(MPI_Comm comm, int* ndims) {
    return guarded("MPI_Cartdim_get", comm, [&] {
        if (ndims == nullptr) throw MpiError(MPI_ERR_ARG, "ndims is NULL");
        *ndims = static_cast<int>(grid_of(comm).dims.size());
        return MPI_SUCCESS;
    });
}

int MPI_Cart_get(MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[]) {
    return guarded("MPI_Cart_get", comm, [&] {
        const Grid& g = grid_of(comm);
        const int n = std::min(maxdims, static_cast<int>(g.dims.size()));
        if (n > 0 && (dims == nullptr || periods == nullptr || coords == nullptr))
            throw MpiError(MPI_ERR_ARG, "dims, periods or coords is NULL");
        const auto c = coords_of(g, engine->info(comm).rank);
        for (int i = 0; i < n; ++i) {
            dims[i] = g.dims[static_cast<std::size_t>(i)];
            periods[i] = g.periods[static_cast<std::size_t>(i)] ? 1 : 0;
            coords[i] = c[static_cast<std::size_t>(i)];
        }
        return MPI_SUCCESS;
    });
}

int MPI_Cart_rank(MPI_Comm comm, const int coords[], int* rank) {
    return guarded("MPI_Cart_rank", comm, [&] {
        const Grid& g = grid_of(comm);
        if (rank == nullptr || (!g.dims.empty() && coords == nullptr))
            throw MpiError(MPI_ERR_ARG, "coords or rank is NULL");
        const int r = rank_at(g, std::vector<int>(coords, coords + g.dims.size()));
        if (r < 0) throw MpiError(MPI_ERR_ARG, "the coordinates fall outside a dimension that is not periodic");
        *rank = r;
        return MPI_SUCCESS;
    });
}

int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int coords[]) {
    return guarded("MPI_Cart_coords", comm, [&] {
        const Grid& g = grid_of(comm);
        const int size = engine->info(comm).size;
        if (rank < 0 || rank >= size)
            throw MpiError(MPI_ERR_RANK,
                           "rank " + std::to_string(rank) + " is not between 0 and " + std::to_string(size - 1));
        if (maxdims < static_cast<int>(g.dims.size()))
            throw MpiError(MPI_ERR_ARG, "maxdims " + std::to_string(maxdims) + " is below the grid's " +
                                            std::to_string(g.dims.size()) + " dimensions");
        if (!g.dims.empty() && coords == nullptr) throw MpiError(MPI_ERR_ARG, "coords is NULL");
        const auto c = coords_of(g, rank);
        std::copy(c.begin(), c.end(), coords);
        return MPI_SUCCESS;
    });
}

// The ranks disp steps back (source) and forward (dest) along direction; past the end
// of a dimension that is not periodic, MPI_PROC_NULL.
int MPI_Cart_shift(MPI_Comm comm, int direction, int disp, int* rank_source, int* rank_dest) {
    return guarded("MPI_Cart_shift", comm, [&] {
        const Grid& g = grid_of(comm);
        if (rank_source == nullptr || rank_dest == nullptr)
            throw MpiError(MPI_ERR_ARG, "rank_source or rank_dest is NULL");
        if (direction < 0 || direction >= static_cast<int>(g.dims.size()))
            throw MpiError(MPI_ERR_ARG, "direction " + std::to_string(direction) + " is not between 0 and " +
                                            std::to_string(static_cast<int>(g.dims.size()) - 1));
        const auto here = coords_of(g, engine->info(comm).rank);
        auto moved = [&](int by) {
            auto c = here;
            c[static_cast<std::size_t>(direction)] += by;
            const int r = rank_at(g, c);
            return r < 0 ? MPI_PROC_NULL : r;
        };
        *rank_source = moved(-disp);
        *rank_dest = moved(disp);
        return MPI_SUCCESS;
    });
}

// The grids of the kept dimensions: ranks whose coordinates agree in every dropped
// dimension form one, ordered by their rank here.
int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* newcomm) {
    Grid sub;
    int color = 0;
    int code = guarded("MPI_Cart_sub", comm, [&] {
        const Grid& g = grid_of(comm);
        if (newcomm == nullptr || (!g.dims.empty() && remain_dims == nullptr))
            throw MpiError(MPI_ERR_ARG, "remain_dims or newcomm is NULL");
        const auto c = coords_of(g, engine->info(comm).rank);
        for (std::size_t i = 0; i < g.dims.size(); ++i) {
            if (remain_dims[i] != 0) {
                sub.dims.push_back(g.dims[i]);
                sub.periods.push_back(g.periods[i]);
            } else {
                color = color * g.dims[i] + c[i];
            }
        }
        return MPI_SUCCESS;
    });
    if (code != MPI_SUCCESS) return code;
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    code = MPI_Comm_split(comm, color, rank, newcomm);
    if (code != MPI_SUCCESS) return code;
    grids[*newcomm] = std::move(sub);
    return MPI_SUCCESS;
}

int MPI_Cart_map(MPI_Comm comm, int ndims, const int dims[], const int periods[], int* newrank) {
    return guarded("MPI_Cart_map", comm, [&] {
        const auto c = engine->info(comm);
        check_dims(ndims, dims, periods);
        if (newrank == nullptr) throw MpiError(MPI_ERR_ARG, "newrank is NULL");
        const int n = product(std::vector<int>(dims, dims + ndims));
        if (n > c.size)
            throw MpiError(MPI_ERR_DIMS, "the grid has " + std::to_string(n) + " points, the communicator only " +
                                             std::to_string(c.size) + " ranks");
        *newrank = c.rank < n ? c.rank : MPI_UNDEFINED;
        return MPI_SUCCESS;
    });
}

} // extern "C"
