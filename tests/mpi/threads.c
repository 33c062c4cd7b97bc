/* MPI_THREAD_MULTIPLE: MPI_Init_thread gives it when asked; then 4 threads of each rank
 * call MPI at once. Ranks pair up (r with r ^ 1): thread t of the lower rank and
 * thread t of the higher one play 500 rounds of ping-pong on tag t (the higher one
 * receiving from MPI_ANY_SOURCE), alternately with MPI_Send/MPI_Recv and with
 * MPI_Isend/MPI_Irecv/MPI_Wait and an MPI_Test loop, every message's content checked;
 * while they play, the main thread runs MPI_Iallreduce and MPI_Wait, then an
 * MPI_Allreduce of the rounds each thread played. Several threads thus block in MPI
 * at once: only one waits in the communicator at a time, the others for its turn. */
#include "check.h"

#include <pthread.h>

enum { threads = 4, rounds = 500 };
static int rank, size;
static int played[threads];

static void* play(void* arg) {
    const int t = *(const int*)arg;
    const int partner = rank ^ 1;
    const int lower = rank < partner;
    long out[4], in[4];
    for (int i = 0; i < rounds; ++i) {
        for (int k = 0; k < 4; ++k)
            out[k] = (long)rank * 1000000 + t * 10000 + i * 4 + k;
        const int source = lower ? partner : MPI_ANY_SOURCE;
        if (i % 2 == 0) {
            if (lower) CHECK(MPI_Send(out, 4, MPI_LONG, partner, t, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send");
            MPI_Status status;
            CHECK(MPI_Recv(in, 4, MPI_LONG, source, t, MPI_COMM_WORLD, &status) == MPI_SUCCESS, "MPI_Recv");
            CHECK(status.MPI_SOURCE == partner && status.MPI_TAG == t, "status %d %d", status.MPI_SOURCE,
                  status.MPI_TAG);
            if (!lower) CHECK(MPI_Send(out, 4, MPI_LONG, partner, t, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send");
        } else {
            MPI_Request r[2];
            CHECK(MPI_Irecv(in, 4, MPI_LONG, source, t, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "MPI_Irecv");
            CHECK(MPI_Isend(out, 4, MPI_LONG, partner, t, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "MPI_Isend");
            int flag = 0;
            while (!flag)
                CHECK(MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test");
            CHECK(MPI_Wait(&r[1], MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait");
        }
        for (int k = 0; k < 4; ++k)
            CHECK(in[k] == (long)partner * 1000000 + t * 10000 + i * 4 + k, "thread %d round %d: element %d is %ld", t,
                  i, k, in[k]);
        played[t] = i + 1;
    }
    return NULL;
}

int main(int argc, char** argv) {
    int provided = -1;
    CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS, "MPI_Init_thread");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(120, rank); /* a hang fails naming the last WHERE */
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    int level = -1;
    CHECK(MPI_Query_thread(&level) == MPI_SUCCESS && level == MPI_THREAD_MULTIPLE, "MPI_Query_thread gave %d", level);
    CHECK(size % 2 == 0, "an even number of ranks");

    WHERE("threads: 4 threads of ping-pong per rank and a collective in the main thread");
    pthread_t thread[threads];
    int ids[threads];
    for (int t = 0; t < threads; ++t) {
        ids[t] = t;
        CHECK(pthread_create(&thread[t], NULL, play, &ids[t]) == 0, "pthread_create");
    }
    int one = 1, sum = 0;
    MPI_Request request;
    CHECK(MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Iallreduce");
    CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait");
    CHECK(sum == size, "MPI_Iallreduce gave %d", sum);
    for (int t = 0; t < threads; ++t)
        CHECK(pthread_join(thread[t], NULL) == 0, "pthread_join");

    WHERE("threads: the allreduce of the rounds played");
    int mine = 0, all = 0;
    for (int t = 0; t < threads; ++t)
        mine += played[t];
    CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Allreduce");
    CHECK(all == size * threads * rounds, "%d rounds played in all", all);
    WHERE("threads: MPI_Finalize");
    MPI_Finalize();
    if (rank == 0) printf("threads: %d threads x %d rounds on each of %d ranks\n", threads, rounds, size);
    return 0;
}
