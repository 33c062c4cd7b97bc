// The C entry points of msgpass's MPI (mpi.h), process topologies. Cartesian: a
// communicator made by MPI_Cart_create carries a grid (its dimensions and which are
// periodic), its ranks numbered row-major over the grid (the last dimension varies
// fastest). Graphs: MPI_Graph_create's (every rank knows the whole graph) and the
// distributed graphs of MPI_Dist_graph_create_adjacent and MPI_Dist_graph_create
// (each rank knows its own sources and destinations, in the order given; the general
// form sends every edge to both its ends). Ranks keep their order (reorder is allowed
// to do nothing). A topology is kept here by communicator handle and goes with
// MPI_Comm_free; MPI_Comm_dup hands it on. neighbors_of gives the neighbourhood
// collectives (neighbors.cpp) their lists.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "api.hpp"
#include "topology.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

struct Grid {
    std::vector<int> dims;
    std::vector<bool> periods;
};

std::map<MPI_Comm, Grid> grids;

// A graph (MPI_Graph_create: index and edges of every rank) or a distributed graph
// (this rank's sources and destinations, with weights when given).
struct Graph {
    bool distributed = false;
    std::vector<int> index, edges;                 // MPI_Graph_create's arrays
    std::vector<int> sources, destinations;        // distributed
    std::vector<int> source_weights, dest_weights; // distributed and weighted
    bool weighted = false;
};

std::map<MPI_Comm, Graph> graphs;

const Graph& graph_of(MPI_Comm comm, bool distributed) {
    (void)engine->info(comm);
    const auto it = graphs.find(comm);
    if (it == graphs.end() || it->second.distributed != distributed)
        throw MpiError(MPI_ERR_TOPOLOGY, "communicator " + std::to_string(comm) + " has no " +
                                             (distributed ? "distributed graph" : "graph") + " topology");
    return it->second;
}

// Rank r's neighbours in a graph of MPI_Graph_create.
std::vector<int> graph_neighbors(const Graph& g, int r) {
    const int first = r == 0 ? 0 : g.index[static_cast<std::size_t>(r) - 1];
    return {g.edges.begin() + first, g.edges.begin() + g.index[static_cast<std::size_t>(r)]};
}

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
    if (const auto it = grids.find(from); it != grids.end()) grids[to] = it->second;
    if (const auto it = graphs.find(from); it != graphs.end()) graphs[to] = it->second;
}

void drop_topology(MPI_Comm comm) {
    grids.erase(comm);
    graphs.erase(comm);
}

Neighbors neighbors_of(MPI_Comm comm) {
    const auto c = engine->info(comm);
    Neighbors n;
    if (const auto it = grids.find(comm); it != grids.end()) {
        const Grid& g = it->second;
        n.cartesian = true;
        const auto here = coords_of(g, c.rank);
        for (std::size_t d = 0; d < g.dims.size(); ++d)
            for (int by : {-1, 1}) {
                auto at = here;
                at[d] += by;
                const int r = rank_at(g, at);
                n.sources.push_back(r < 0 ? MPI_PROC_NULL : r);
            }
        n.destinations = n.sources;
        return n;
    }
    if (const auto it = graphs.find(comm); it != graphs.end()) {
        const Graph& g = it->second;
        if (g.distributed) {
            n.sources = g.sources;
            n.destinations = g.destinations;
        } else {
            n.sources = n.destinations = graph_neighbors(g, c.rank);
        }
        return n;
    }
    throw MpiError(MPI_ERR_TOPOLOGY, "communicator " + std::to_string(comm) +
                                         " has no topology (a neighbourhood collective needs MPI_Cart_create, "
                                         "MPI_Graph_create or MPI_Dist_graph_create)");
}

} // namespace msgpass::mpi::api

namespace {

bool weighted_by(const int* weights) {
    return weights != MPI_UNWEIGHTED;
}

std::vector<int> weights_of(const int* weights, int degree) {
    if (!weighted_by(weights) || weights == MPI_WEIGHTS_EMPTY || degree == 0) return std::vector<int>(degree, 1);
    if (weights == nullptr) throw MpiError(MPI_ERR_ARG, "weights are NULL (MPI_UNWEIGHTED says there are none)");
    return {weights, weights + degree};
}

void check_ranks(const char* what, const int* ranks, int n, int size) {
    if (n < 0) throw MpiError(MPI_ERR_ARG, std::string("the number of ") + what + " is negative");
    if (n > 0 && ranks == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " is NULL");
    for (int i = 0; i < n; ++i)
        if (ranks[i] < 0 || ranks[i] >= size)
            throw MpiError(MPI_ERR_RANK, std::string(what) + "[" + std::to_string(i) + "] " + std::to_string(ranks[i]) +
                                             " is not a rank of the communicator (0 to " + std::to_string(size - 1) +
                                             ")");
}

// The distributed graph's communicator: a duplicate of comm_old with g.
int make_dist_graph(MPI_Comm comm_old, Graph g, MPI_Comm* made) {
    const int code = MPI_Comm_dup(comm_old, made);
    if (code != MPI_SUCCESS) return code;
    grids.erase(*made); // (comm_old's own topology, which the duplicate took)
    graphs[*made] = std::move(g);
    return MPI_SUCCESS;
}

} // namespace

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
        const auto g = graphs.find(comm);
        *status = grids.count(comm) != 0  ? MPI_CART
                  : g == graphs.end()     ? MPI_UNDEFINED
                  : g->second.distributed ? MPI_DIST_GRAPH
                                          : MPI_GRAPH;
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

// ---------------------------------------------------------------------------- graphs

int MPI_Graph_create(MPI_Comm comm_old, int nnodes, const int index[], const int edges[], int reorder,
                     MPI_Comm* comm_graph) {
    (void)reorder; // the ranks keep their order
    Graph g;
    int code = guarded("MPI_Graph_create", comm_old, [&] {
        if (comm_graph == nullptr) throw MpiError(MPI_ERR_ARG, "comm_graph is NULL");
        const auto c = engine->info(comm_old);
        if (c.local) throw MpiError(MPI_ERR_COMM, "a graph topology on an intercommunicator");
        if (nnodes < 0 || nnodes > c.size)
            throw MpiError(MPI_ERR_ARG, "nnodes " + std::to_string(nnodes) + " is not between 0 and the " +
                                            std::to_string(c.size) + " ranks of the communicator");
        if (nnodes > 0 && (index == nullptr || edges == nullptr)) throw MpiError(MPI_ERR_ARG, "index or edges is NULL");
        int last = 0;
        for (int i = 0; i < nnodes; ++i) {
            if (index[i] < last)
                throw MpiError(MPI_ERR_ARG, "index[" + std::to_string(i) + "] " + std::to_string(index[i]) +
                                                " is below the one before it (index counts edges cumulatively)");
            last = index[i];
        }
        for (int e = 0; e < last; ++e)
            if (edges[e] < 0 || edges[e] >= nnodes)
                throw MpiError(MPI_ERR_ARG, "edges[" + std::to_string(e) + "] " + std::to_string(edges[e]) +
                                                " is not a node of the graph (0 to " + std::to_string(nnodes - 1) +
                                                ")");
        g.index.assign(index, index + nnodes);
        g.edges.assign(edges, edges + last);
        return MPI_SUCCESS;
    });
    if (code != MPI_SUCCESS) return code;
    int rank = 0;
    MPI_Comm_rank(comm_old, &rank);
    MPI_Comm made = MPI_COMM_NULL;
    code = MPI_Comm_split(comm_old, rank < nnodes ? 0 : MPI_UNDEFINED, rank, &made);
    if (code != MPI_SUCCESS) return code;
    if (made != MPI_COMM_NULL) graphs[made] = std::move(g);
    *comm_graph = made;
    return MPI_SUCCESS;
}

int MPI_Graphdims_get(MPI_Comm comm, int* nnodes, int* nedges) {
    return guarded("MPI_Graphdims_get", comm, [&] {
        const Graph& g = graph_of(comm, false);
        if (nnodes == nullptr || nedges == nullptr) throw MpiError(MPI_ERR_ARG, "nnodes or nedges is NULL");
        *nnodes = static_cast<int>(g.index.size());
        *nedges = static_cast<int>(g.edges.size());
        return MPI_SUCCESS;
    });
}

int MPI_Graph_get(MPI_Comm comm, int maxindex, int maxedges, int index[], int edges[]) {
    return guarded("MPI_Graph_get", comm, [&] {
        const Graph& g = graph_of(comm, false);
        const auto ni = std::min<std::size_t>(static_cast<std::size_t>(std::max(maxindex, 0)), g.index.size());
        const auto ne = std::min<std::size_t>(static_cast<std::size_t>(std::max(maxedges, 0)), g.edges.size());
        if ((ni > 0 && index == nullptr) || (ne > 0 && edges == nullptr))
            throw MpiError(MPI_ERR_ARG, "index or edges is NULL");
        std::copy_n(g.index.begin(), ni, index);
        std::copy_n(g.edges.begin(), ne, edges);
        return MPI_SUCCESS;
    });
}

int MPI_Graph_neighbors_count(MPI_Comm comm, int rank, int* nneighbors) {
    return guarded("MPI_Graph_neighbors_count", comm, [&] {
        const Graph& g = graph_of(comm, false);
        if (nneighbors == nullptr) throw MpiError(MPI_ERR_ARG, "nneighbors is NULL");
        if (rank < 0 || rank >= static_cast<int>(g.index.size()))
            throw MpiError(MPI_ERR_RANK, "rank " + std::to_string(rank) + " is no node of the graph");
        *nneighbors = static_cast<int>(graph_neighbors(g, rank).size());
        return MPI_SUCCESS;
    });
}

int MPI_Graph_neighbors(MPI_Comm comm, int rank, int maxneighbors, int neighbors[]) {
    return guarded("MPI_Graph_neighbors", comm, [&] {
        const Graph& g = graph_of(comm, false);
        if (rank < 0 || rank >= static_cast<int>(g.index.size()))
            throw MpiError(MPI_ERR_RANK, "rank " + std::to_string(rank) + " is no node of the graph");
        const auto n = graph_neighbors(g, rank);
        const auto k = std::min<std::size_t>(static_cast<std::size_t>(std::max(maxneighbors, 0)), n.size());
        if (k > 0 && neighbors == nullptr) throw MpiError(MPI_ERR_ARG, "neighbors is NULL");
        std::copy_n(n.begin(), k, neighbors);
        return MPI_SUCCESS;
    });
}

int MPI_Graph_map(MPI_Comm comm, int nnodes, const int index[], const int edges[], int* newrank) {
    (void)index;
    (void)edges;
    return guarded("MPI_Graph_map", comm, [&] {
        const auto c = engine->info(comm);
        if (newrank == nullptr) throw MpiError(MPI_ERR_ARG, "newrank is NULL");
        if (nnodes < 0 || nnodes > c.size)
            throw MpiError(MPI_ERR_ARG, "nnodes " + std::to_string(nnodes) + " is not between 0 and the " +
                                            std::to_string(c.size) + " ranks");
        *newrank = c.rank < nnodes ? c.rank : MPI_UNDEFINED;
        return MPI_SUCCESS;
    });
}

int MPI_Dist_graph_create_adjacent(MPI_Comm comm_old, int indegree, const int sources[], const int sourceweights[],
                                   int outdegree, const int destinations[], const int destweights[], MPI_Info info,
                                   int reorder, MPI_Comm* comm_dist_graph) {
    (void)info;
    (void)reorder; // the ranks keep their order
    Graph g;
    const int code = guarded("MPI_Dist_graph_create_adjacent", comm_old, [&] {
        if (comm_dist_graph == nullptr) throw MpiError(MPI_ERR_ARG, "comm_dist_graph is NULL");
        const auto c = engine->info(comm_old);
        if (c.local) throw MpiError(MPI_ERR_COMM, "a graph topology on an intercommunicator");
        check_ranks("sources", sources, indegree, c.size);
        check_ranks("destinations", destinations, outdegree, c.size);
        g.distributed = true;
        g.sources.assign(sources, sources + indegree);
        g.destinations.assign(destinations, destinations + outdegree);
        g.weighted = weighted_by(sourceweights) && weighted_by(destweights);
        if (g.weighted) {
            g.source_weights = weights_of(sourceweights, indegree);
            g.dest_weights = weights_of(destweights, outdegree);
        }
        return MPI_SUCCESS;
    });
    if (code != MPI_SUCCESS) return code;
    return make_dist_graph(comm_old, std::move(g), comm_dist_graph);
}

// Each edge (sources[i] -> one of its degrees[i] destinations) given by any rank is
// sent to both its ends; a rank's lists are its edges in the order they arrive (by
// the giving rank, then the order given).
int MPI_Dist_graph_create(MPI_Comm comm_old, int n, const int sources[], const int degrees[], const int destinations[],
                          const int weights[], MPI_Info info, int reorder, MPI_Comm* comm_dist_graph) {
    (void)info;
    (void)reorder;
    int size = 0;
    std::vector<std::vector<int>> to; // per rank: (1 = an out-edge to, 0 = an in-edge from, rank, weight) triples
    bool weighted = false;
    int code = guarded("MPI_Dist_graph_create", comm_old, [&] {
        if (comm_dist_graph == nullptr) throw MpiError(MPI_ERR_ARG, "comm_dist_graph is NULL");
        const auto c = engine->info(comm_old);
        if (c.local) throw MpiError(MPI_ERR_COMM, "a graph topology on an intercommunicator");
        size = c.size;
        check_ranks("sources", sources, n, c.size);
        if (n > 0 && degrees == nullptr) throw MpiError(MPI_ERR_ARG, "degrees is NULL");
        int edges = 0;
        for (int i = 0; i < n; ++i) {
            if (degrees[i] < 0) throw MpiError(MPI_ERR_ARG, "degrees[" + std::to_string(i) + "] is negative");
            edges += degrees[i];
        }
        check_ranks("destinations", destinations, edges, c.size);
        weighted = weighted_by(weights);
        const auto w = weights_of(weights, edges);
        to.assign(static_cast<std::size_t>(c.size), {});
        int e = 0;
        for (int i = 0; i < n; ++i)
            for (int k = 0; k < degrees[i]; ++k, ++e) {
                const int s = sources[i];
                const int d = destinations[e];
                const int weight = w[static_cast<std::size_t>(e)];
                auto& at_s = to[static_cast<std::size_t>(s)];
                at_s.insert(at_s.end(), {1, d, weight});
                auto& at_d = to[static_cast<std::size_t>(d)];
                at_d.insert(at_d.end(), {0, s, weight});
            }
        return MPI_SUCCESS;
    });
    if (code != MPI_SUCCESS) return code;
    std::vector<int> send_counts(static_cast<std::size_t>(size)), recv_counts(static_cast<std::size_t>(size));
    std::vector<int> send_displs(static_cast<std::size_t>(size)), recv_displs(static_cast<std::size_t>(size));
    std::vector<int> out;
    for (std::size_t r = 0; r < to.size(); ++r) {
        send_displs[r] = static_cast<int>(out.size());
        send_counts[r] = static_cast<int>(to[r].size());
        out.insert(out.end(), to[r].begin(), to[r].end());
    }
    code = MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, comm_old);
    if (code != MPI_SUCCESS) return code;
    int total = 0;
    for (std::size_t r = 0; r < recv_counts.size(); ++r) {
        recv_displs[r] = total;
        total += recv_counts[r];
    }
    std::vector<int> in(static_cast<std::size_t>(std::max(total, 1)));
    code = MPI_Alltoallv(out.data(), send_counts.data(), send_displs.data(), MPI_INT, in.data(), recv_counts.data(),
                         recv_displs.data(), MPI_INT, comm_old);
    if (code != MPI_SUCCESS) return code;
    Graph g;
    g.distributed = true;
    g.weighted = weighted;
    for (int i = 0; i + 3 <= total; i += 3) {
        const bool outgoing = in[static_cast<std::size_t>(i)] == 1;
        const int peer = in[static_cast<std::size_t>(i) + 1];
        const int weight = in[static_cast<std::size_t>(i) + 2];
        (outgoing ? g.destinations : g.sources).push_back(peer);
        if (weighted) (outgoing ? g.dest_weights : g.source_weights).push_back(weight);
    }
    return make_dist_graph(comm_old, std::move(g), comm_dist_graph);
}

int MPI_Dist_graph_neighbors_count(MPI_Comm comm, int* indegree, int* outdegree, int* weighted) {
    return guarded("MPI_Dist_graph_neighbors_count", comm, [&] {
        const Graph& g = graph_of(comm, true);
        if (indegree == nullptr || outdegree == nullptr || weighted == nullptr)
            throw MpiError(MPI_ERR_ARG, "indegree, outdegree or weighted is NULL");
        *indegree = static_cast<int>(g.sources.size());
        *outdegree = static_cast<int>(g.destinations.size());
        *weighted = g.weighted ? 1 : 0;
        return MPI_SUCCESS;
    });
}

int MPI_Dist_graph_neighbors(MPI_Comm comm, int maxindegree, int sources[], int sourceweights[], int maxoutdegree,
                             int destinations[], int destweights[]) {
    return guarded("MPI_Dist_graph_neighbors", comm, [&] {
        const Graph& g = graph_of(comm, true);
        const auto ni = std::min<std::size_t>(static_cast<std::size_t>(std::max(maxindegree, 0)), g.sources.size());
        const auto no =
            std::min<std::size_t>(static_cast<std::size_t>(std::max(maxoutdegree, 0)), g.destinations.size());
        if ((ni > 0 && sources == nullptr) || (no > 0 && destinations == nullptr))
            throw MpiError(MPI_ERR_ARG, "sources or destinations is NULL");
        std::copy_n(g.sources.begin(), ni, sources);
        std::copy_n(g.destinations.begin(), no, destinations);
        if (g.weighted) {
            if (ni > 0 && weighted_by(sourceweights) && sourceweights != nullptr)
                std::copy_n(g.source_weights.begin(), ni, sourceweights);
            if (no > 0 && weighted_by(destweights) && destweights != nullptr)
                std::copy_n(g.dest_weights.begin(), no, destweights);
        }
        return MPI_SUCCESS;
    });
}

} // extern "C"
