/* An OSU-style latency and bandwidth program written against the standard MPI API
 * only (no msgpass name), so that any MPI's mpicc builds it unchanged; docs/mpi.md
 * gives its figures. Two ranks; rank 0 prints one line per point:
 *
 *   latency SIZE US      one-way latency: round trips of MPI_Send/MPI_Recv of SIZE
 *                        bytes, time / (2 x iterations) (osu_latency)
 *   bandwidth SIZE MBPS  rank 0 MPI_Isends a window of messages of SIZE bytes, rank 1
 *                        MPI_Irecvs them, both MPI_Waitall, rank 1 answers with 4
 *                        bytes; MB/s = 10^6 bytes per second over the iterations
 *                        (osu_bw; the window is 64 messages, fewer above 256 KiB so
 *                        that at most 16 MiB are in flight)
 *
 *   osu [quick] [SIZE...]   sizes in bytes (default 8 B to 4 MiB); quick: a few
 *                           iterations per point, to check that it runs (ctest) */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { max_window = 64, max_in_flight = 16 << 20, ack_bytes = 4 };

static void fail(const char* what) {
    fprintf(stderr, "osu: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static int window_of(long size) {
    long window = size > 0 ? max_in_flight / size : max_window;
    if (window > max_window) window = max_window;
    return window < 1 ? 1 : (int)window;
}

static double latency(int rank, char* buf, long size, int iterations, int skip) {
    double start = 0;
    for (int i = 0; i < iterations + skip; ++i) {
        if (i == skip) start = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - start) * 1e6 / (2.0 * iterations);
}

static double bandwidth(int rank, char* buf, long size, int iterations, int skip) {
    MPI_Request requests[max_window];
    const int window = window_of(size);
    char ack[ack_bytes] = {0};
    double start = 0;
    for (int i = 0; i < iterations + skip; ++i) {
        if (i == skip) start = MPI_Wtime();
        for (int w = 0; w < window; ++w) {
            char* slot = buf + (size_t)w * (size_t)size;
            if (rank == 0)
                MPI_Isend(slot, (int)size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &requests[w]);
            else
                MPI_Irecv(slot, (int)size, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &requests[w]);
        }
        MPI_Waitall(window, requests, MPI_STATUSES_IGNORE);
        if (rank == 0)
            MPI_Recv(ack, ack_bytes, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(ack, ack_bytes, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
    }
    const double seconds = MPI_Wtime() - start;
    return (double)size * window * iterations / seconds / 1e6;
}

int main(int argc, char** argv) {
    static const long default_sizes[] = {8, 64, 512, 1024, 4096, 8192, 65536, 262144, 1048576, 4194304};
    long sizes[64];
    int n_sizes = 0;
    int quick = 0;
    int rank = 0;
    int size = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) fail("needs exactly 2 ranks");
    for (int i = 1; i < argc; ++i) {
        char* end = NULL;
        if (strcmp(argv[i], "quick") == 0) {
            quick = 1;
            continue;
        }
        const long s = strtol(argv[i], &end, 10);
        if (*argv[i] == '\0' || *end != '\0' || s < 1 || s > (64L << 20) || n_sizes == 64)
            fail("expected 'quick' or sizes in bytes from 1 to 64 MiB (at most 64 of them)");
        sizes[n_sizes++] = s;
    }
    if (n_sizes == 0) {
        n_sizes = (int)(sizeof default_sizes / sizeof default_sizes[0]);
        memcpy(sizes, default_sizes, sizeof default_sizes);
    }
    long largest = 0;
    for (int i = 0; i < n_sizes; ++i)
        if ((long)window_of(sizes[i]) * sizes[i] > largest) largest = (long)window_of(sizes[i]) * sizes[i];
    char* buf = malloc((size_t)largest);
    if (buf == NULL) fail("out of memory");
    memset(buf, 'a', (size_t)largest);

    for (int i = 0; i < n_sizes; ++i) {
        const long s = sizes[i];
        const int iterations = quick ? 5 : (s <= 8192 ? 20000 : s <= 262144 ? 2000 : 200);
        MPI_Barrier(MPI_COMM_WORLD);
        const double us = latency(rank, buf, s, iterations, quick ? 1 : iterations / 10);
        if (rank == 0) printf("latency %ld %.3f\n", s, us);
    }
    for (int i = 0; i < n_sizes; ++i) {
        const long s = sizes[i];
        const int iterations = quick ? 2 : (s <= 8192 ? 2000 : s <= 262144 ? 200 : 40);
        MPI_Barrier(MPI_COMM_WORLD);
        const double mbps = bandwidth(rank, buf, s, iterations, quick ? 1 : iterations / 10);
        if (rank == 0) printf("bandwidth %ld %.1f\n", s, mbps);
    }
    fflush(stdout);
    free(buf);
    MPI_Finalize();
    return 0;
}
