/* Ping-pong between the ranks of each pair (0 and 1, 2 and 3, ...; an odd last rank
 * waits in the barrier): blocking Send/Recv of sizes from 0 B to 1 MiB and back,
 * content, status and count checked; then MPI_Ssend, MPI_Sendrecv around the ring
 * and MPI_PROC_NULL. */
#include "check.h"

#include <string.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    WHERE("pingpong: start");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int sizes[] = {0, 1, 7, 64, 1000, 4096, 65536, 300000, 1 << 20};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    unsigned char* buf = malloc(1 << 20);
    CHECK(buf != NULL, "out of memory");
    const int peer = rank ^ 1;
    if (peer < size) {
        for (int s = 0; s < n_sizes; ++s) {
            const int n = sizes[s];
            for (int round = 0; round < 3; ++round) {
                const int tag = s * 10 + round;
                if (rank % 2 == 0) {
                    for (int i = 0; i < n; ++i)
                        buf[i] = pattern(rank, tag, n, i);
                    CHECK(MPI_Send(buf, n, MPI_BYTE, peer, tag, MPI_COMM_WORLD) == MPI_SUCCESS, "send");
                    MPI_Status st;
                    memset(buf, 0, (size_t)n);
                    CHECK(MPI_Recv(buf, n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv");
                    int count = -1;
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    CHECK(count == n && st.MPI_SOURCE == peer && st.MPI_TAG == tag, "status %d %d %d", count,
                          st.MPI_SOURCE, st.MPI_TAG);
                    for (int i = 0; i < n; ++i)
                        CHECK(buf[i] == pattern(peer, tag, n, i), "byte %d of %d", i, n);
                } else {
                    MPI_Status st;
                    CHECK(MPI_Recv(buf, 1 << 20, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv");
                    int count = -1;
                    MPI_Get_count(&st, MPI_BYTE, &count);
                    CHECK(count == n, "count %d, expected %d", count, n);
                    for (int i = 0; i < n; ++i)
                        CHECK(buf[i] == pattern(peer, tag, n, i), "byte %d of %d", i, n);
                    for (int i = 0; i < n; ++i)
                        buf[i] = pattern(rank, tag, n, i);
                    CHECK(MPI_Send(buf, n, MPI_BYTE, peer, tag, MPI_COMM_WORLD) == MPI_SUCCESS, "send");
                }
            }
        }
        /* Ssend returns only once the receiver matched it. */
        double value = 2.5 + rank;
        if (rank % 2 == 0) {
            CHECK(MPI_Ssend(&value, 1, MPI_DOUBLE, peer, 77, MPI_COMM_WORLD) == MPI_SUCCESS, "ssend");
        } else {
            double got = 0;
            MPI_Recv(&got, 1, MPI_DOUBLE, peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(got == 2.5 + peer, "ssend value %g", got);
        }
    }
    WHERE("pingpong: Sendrecv around the ring (also to itself with one rank)");
    /* Sendrecv around the ring (also to itself with one rank). */
    int out = 1000 + rank;
    int in = -1;
    MPI_Status st;
    CHECK(MPI_Sendrecv(&out, 1, MPI_INT, (rank + 1) % size, 5, &in, 1, MPI_INT, (rank + size - 1) % size, 5,
                       MPI_COMM_WORLD, &st) == MPI_SUCCESS,
          "sendrecv");
    CHECK(in == 1000 + (rank + size - 1) % size && st.MPI_SOURCE == (rank + size - 1) % size, "sendrecv got %d", in);
    WHERE("pingpong: MPI_PROC_NULL: nothing moves, the status says so");
    /* MPI_PROC_NULL: nothing moves, the status says so. */
    CHECK(MPI_Send(&out, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "send to PROC_NULL");
    CHECK(MPI_Recv(&in, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv from PROC_NULL");
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "PROC_NULL status source %d", st.MPI_SOURCE);
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("pingpong: %d ranks ok\n", size);
    WHERE("pingpong: MPI_Finalize");
    MPI_Finalize();
    return 0;
}
