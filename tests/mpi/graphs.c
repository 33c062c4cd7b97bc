/* Graph topologies and the neighbourhood collectives (tests/mpi/graphs.c): a ring
 * made by MPI_Graph_create and its queries; a distributed graph made adjacent and one
 * made by rank 0 alone (MPI_Dist_graph_create), with weights, a self-loop and a
 * repeated neighbour, seen the same from every rank; MPI_Neighbor_alltoall on a
 * periodic line of every size (on 1 and 2 ranks both neighbours are one rank, and
 * what a rank sends forward must still arrive in the neighbour's "back" block); a
 * non-periodic line whose ends leave their outer blocks alone; allgather, allgatherv,
 * alltoallv and alltoallw on the graphs, blocking and not; an MPI_Alltoallv whose
 * NULL sendbuf has zero counts on some ranks (no MPI_IN_PLACE). */
#include "check.h"

static int rank, size;

static void ring_graph(void) {
    WHERE("MPI_Graph_create of a ring");
    int index[64], edges[128];
    for (int r = 0; r < size; ++r) {
        index[r] = 2 * (r + 1);
        edges[2 * r] = (r + size - 1) % size;
        edges[2 * r + 1] = (r + 1) % size;
    }
    MPI_Comm ring;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &ring);
    int kind = -1, nnodes = 0, nedges = 0, count = 0, neighbors[2] = {-1, -1};
    MPI_Topo_test(ring, &kind);
    CHECK(kind == MPI_GRAPH, "Topo_test %d", kind);
    MPI_Graphdims_get(ring, &nnodes, &nedges);
    CHECK(nnodes == size && nedges == 2 * size, "graph dims %d %d", nnodes, nedges);
    MPI_Graph_neighbors_count(ring, rank, &count);
    MPI_Graph_neighbors(ring, rank, 2, neighbors);
    CHECK(count == 2 && neighbors[0] == (rank + size - 1) % size && neighbors[1] == (rank + 1) % size,
          "neighbours %d: %d %d", count, neighbors[0], neighbors[1]);
    /* allgather: each gets its two neighbours' ranks, in their order. */
    int got[2] = {-1, -1};
    MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, ring);
    CHECK(got[0] == neighbors[0] && got[1] == neighbors[1], "allgather %d %d", got[0], got[1]);
    MPI_Comm dup;
    MPI_Comm_dup(ring, &dup);
    MPI_Topo_test(dup, &kind);
    CHECK(kind == MPI_GRAPH, "a duplicate keeps the graph");
    MPI_Comm_free(&dup);
    MPI_Comm_free(&ring);
}

/* Rank r's destinations: r+1, itself, and r+1 again; sources the mirror image (r-1,
 * itself, r-1), weights 10 * destination + position. */
static void expect_lists(MPI_Comm g, int weighted) {
    int in = 0, out = 0, w = -1;
    MPI_Dist_graph_neighbors_count(g, &in, &out, &w);
    CHECK(in == 3 && out == 3 && w == weighted, "degrees %d %d weighted %d", in, out, w);
    int sources[3], sw[3], dests[3], dw[3];
    MPI_Dist_graph_neighbors(g, 3, sources, sw, 3, dests, dw);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int seen_self = 0, seen_prev = 0, seen_next = 0;
    for (int k = 0; k < 3; ++k) {
        seen_self += (sources[k] == rank) + (dests[k] == rank);
        seen_prev += sources[k] == prev;
        seen_next += dests[k] == next;
    }
    if (size > 1) CHECK(seen_prev >= 2 && seen_next >= 2 && seen_self >= 2, "lists");
}

static void dist_graphs(void) {
    WHERE("distributed graphs");
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const int dests[3] = {next, rank, next}, sources[3] = {prev, rank, prev};
    const int dw[3] = {10 * next, 10 * rank + 1, 10 * next + 2}, sw[3] = {1, 2, 3};
    MPI_Comm adj;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 3, sources, sw, 3, dests, dw, MPI_INFO_NULL, 0, &adj);
    int kind = -1;
    MPI_Topo_test(adj, &kind);
    CHECK(kind == MPI_DIST_GRAPH, "Topo_test %d", kind);
    expect_lists(adj, 1);
    int out_dw[3];
    int s3[3], d3[3], sw3[3];
    MPI_Dist_graph_neighbors(adj, 3, s3, sw3, 3, d3, out_dw);
    CHECK(out_dw[0] == 10 * next && out_dw[2] == 10 * next + 2 && sw3[1] == 2, "weights as given");

    /* alltoall: block k goes to destination k; the i-th block sent to a neighbour is
     * its i-th block from this rank. */
    int send[3] = {100 * rank + 0, 100 * rank + 1, 100 * rank + 2}, recv[3] = {-1, -1, -1};
    MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, adj);
    CHECK(recv[1] == 100 * rank + 1, "the self block %d", recv[1]);
    CHECK(recv[0] == 100 * prev + 0 && recv[2] == 100 * prev + 2, "from prev %d %d", recv[0], recv[2]);

    /* alltoallv with counts 1, 2, 0 and reversed displacements; Ineighbor_alltoallw
     * of ints to a strided type. */
    int vsend[3] = {7 * rank, 7 * rank + 1, 7 * rank + 2}, vrecv[4] = {-1, -1, -1, -1};
    const int scounts[3] = {1, 2, 0}, sdispls[3] = {0, 1, 0}, rcounts[3] = {1, 2, 0}, rdispls[3] = {3, 1, 0};
    MPI_Neighbor_alltoallv(vsend, scounts, sdispls, MPI_INT, vrecv, rcounts, rdispls, MPI_INT, adj);
    CHECK(vrecv[3] == 7 * prev && vrecv[1] == 7 * rank + 1 && vrecv[2] == 7 * rank + 2 && vrecv[0] == -1,
          "alltoallv %d %d %d %d", vrecv[0], vrecv[1], vrecv[2], vrecv[3]);
    MPI_Datatype strided;
    MPI_Type_vector(2, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    int wsend[6] = {rank, 1000 + rank, rank, 1000 + rank, rank, 1000 + rank};
    int wrecv[12];
    for (int i = 0; i < 12; ++i)
        wrecv[i] = -1;
    const int wsc[3] = {2, 2, 2}, wrc[3] = {1, 1, 1};
    const MPI_Aint wsd[3] = {0, 0, 0}, wrd[3] = {0, 4 * sizeof(int), 8 * sizeof(int)};
    const MPI_Datatype wst[3] = {MPI_INT, MPI_INT, MPI_INT}, wrt[3] = {strided, strided, strided};
    MPI_Request request;
    MPI_Ineighbor_alltoallw(wsend, wsc, wsd, wst, wrecv, wrc, wrd, wrt, adj, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    CHECK(wrecv[0] == prev && wrecv[2] == 1000 + prev && wrecv[1] == -1 && wrecv[3] == -1, "alltoallw block 0");
    CHECK(wrecv[4] == rank && wrecv[6] == 1000 + rank && wrecv[5] == -1, "alltoallw self block");
    MPI_Type_free(&strided);

    /* allgatherv into reversed places. */
    int gathered[3] = {-1, -1, -1};
    const int gcounts[3] = {1, 1, 1}, gdispls[3] = {2, 1, 0};
    MPI_Neighbor_allgatherv(&rank, 1, MPI_INT, gathered, gcounts, gdispls, MPI_INT, adj);
    CHECK(gathered[2] == prev && gathered[1] == rank && gathered[0] == prev, "allgatherv");
    MPI_Comm_free(&adj);

    WHERE("MPI_Dist_graph_create with rank 0 giving every edge");
    int all_sources[64], degrees[64], all_dests[192], weights[192], n = 0, e = 0;
    if (rank == 0)
        for (int r = 0; r < size; ++r) {
            all_sources[n] = r;
            degrees[n++] = 3;
            const int rn = (r + 1) % size;
            all_dests[e] = rn, weights[e++] = 5;
            all_dests[e] = r, weights[e++] = 6;
            all_dests[e] = rn, weights[e++] = 7;
        }
    MPI_Comm general;
    MPI_Dist_graph_create(MPI_COMM_WORLD, n, rank == 0 ? all_sources : NULL, rank == 0 ? degrees : NULL,
                          rank == 0 ? all_dests : NULL, rank == 0 ? weights : MPI_WEIGHTS_EMPTY, MPI_INFO_NULL, 0,
                          &general);
    expect_lists(general, 1);
    int one = rank, three[3] = {-1, -1, -1};
    MPI_Neighbor_allgather(&one, 1, MPI_INT, three, 1, MPI_INT, general);
    int from_self = 0, from_prev = 0;
    for (int k = 0; k < 3; ++k) {
        from_self += three[k] == rank;
        from_prev += three[k] == prev;
    }
    CHECK(size == 1 ? from_self == 3 : from_self == 1 && from_prev == 2, "general allgather %d %d %d", three[0],
          three[1], three[2]);
    MPI_Comm_free(&general);
}

static void lines(void) {
    WHERE("MPI_Neighbor_alltoall on a periodic line");
    const int dims[1] = {size}, periodic[1] = {1}, open[1] = {0};
    MPI_Comm line;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periodic, 0, &line);
    /* block 0 goes back, block 1 forward: the back block received is what the one
     * behind sent forward. */
    int send[2] = {-(rank + 1), rank + 1}, recv[2] = {0, 0};
    MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, line);
    const int prev = (rank + size - 1) % size, next = (rank + 1) % size;
    CHECK(recv[0] == prev + 1 && recv[1] == -(next + 1), "periodic: back %d forward %d", recv[0], recv[1]);
    MPI_Request request;
    recv[0] = recv[1] = 0;
    MPI_Ineighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, line, &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
    CHECK(recv[0] == prev + 1 && recv[1] == -(next + 1), "non-blocking: back %d forward %d", recv[0], recv[1]);
    MPI_Comm_free(&line);

    WHERE("MPI_Neighbor_alltoall on an open line");
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, open, 0, &line);
    recv[0] = recv[1] = 12345;
    MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, line);
    CHECK(rank == 0 ? recv[0] == 12345 : recv[0] == rank, "back block %d", recv[0]);
    CHECK(rank == size - 1 ? recv[1] == 12345 : recv[1] == -(rank + 2), "forward block %d", recv[1]);
    MPI_Comm_free(&line);
}

static void null_sendbuf(void) {
    WHERE("MPI_Alltoallv with a NULL sendbuf of zero counts");
    int counts[64], displs[64], rcounts[64], rdispls[64], out[64], in[64];
    for (int r = 0; r < size; ++r) {
        counts[r] = rank == 0 ? 1 : 0;
        displs[r] = r;
        out[r] = 50 + r;
        rcounts[r] = r == 0 ? 1 : 0;
        rdispls[r] = 0;
    }
    in[0] = -1;
    MPI_Alltoallv(rank == 0 ? out : NULL, counts, displs, MPI_INT, in, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
    CHECK(in[0] == 50 + rank, "got %d", in[0]);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(60, rank);
    ring_graph();
    dist_graphs();
    lines();
    null_sendbuf();
    MPI_Finalize();
    return 0;
}
