/* Non-blocking: a ring where every rank posts MPI_Irecv from its left and MPI_Isend
 * to its right and completes both with MPI_Waitall, many times; then a storm of 10 000
 * requests each way (receives posted after the sends, so most messages wait
 * unexpected), completed by MPI_Waitall, checked for order and content; then
 * MPI_Waitany, MPI_Test, MPI_Testany, MPI_Testsome, MPI_Waitsome, MPI_Sendrecv_replace,
 * MPI_Testall and MPI_Cancel of a receive. */
#include "check.h"

#include <string.h>

enum { storm = 10000 };

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    WHERE("ring: start");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int right = (rank + 1) % size;
    const int left = (rank + size - 1) % size;

    WHERE("ring: The token ring: each round the value grows by one at each ...");
    /* The token ring: each round the value grows by one at each rank. */
    for (int round = 0; round < 100; ++round) {
        long out[3] = {rank, round, (long)rank * round};
        long in[3] = {-1, -1, -1};
        MPI_Request req[2];
        MPI_Status st[2];
        MPI_Irecv(in, 3, MPI_LONG, left, round, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(out, 3, MPI_LONG, right, round, MPI_COMM_WORLD, &req[1]);
        CHECK(MPI_Waitall(2, req, st) == MPI_SUCCESS, "waitall");
        CHECK(req[0] == MPI_REQUEST_NULL && req[1] == MPI_REQUEST_NULL, "requests not released");
        CHECK(in[0] == left && in[1] == round && in[2] == (long)left * round, "round %d got %ld %ld %ld", round, in[0],
              in[1], in[2]);
        CHECK(st[0].MPI_SOURCE == left && st[0].MPI_TAG == round, "status");
    }

    WHERE("ring: The storm: 10 000 sends of 1..64 ints to the right before ...");
    /* The storm: 10 000 sends of 1..64 ints to the right before any receive. */
    int* out = malloc(sizeof(int) * storm * 64);
    int* in = malloc(sizeof(int) * storm * 64);
    MPI_Request* sends = malloc(sizeof(MPI_Request) * storm);
    MPI_Request* recvs = malloc(sizeof(MPI_Request) * storm);
    MPI_Status* statuses = malloc(sizeof(MPI_Status) * storm);
    for (int k = 0; k < storm; ++k) {
        const int n = 1 + k % 64;
        for (int i = 0; i < n; ++i)
            out[k * 64 + i] = rank * 1000003 + k * 64 + i;
        CHECK(MPI_Isend(&out[k * 64], n, MPI_INT, right, 7, MPI_COMM_WORLD, &sends[k]) == MPI_SUCCESS, "isend %d", k);
    }
    for (int k = 0; k < storm; ++k)
        CHECK(MPI_Irecv(&in[k * 64], 64, MPI_INT, left, 7, MPI_COMM_WORLD, &recvs[k]) == MPI_SUCCESS, "irecv %d", k);
    CHECK(MPI_Waitall(storm, recvs, statuses) == MPI_SUCCESS, "waitall receives");
    CHECK(MPI_Waitall(storm, sends, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall sends");
    for (int k = 0; k < storm; ++k) {
        const int n = 1 + k % 64;
        int count = -1;
        MPI_Get_count(&statuses[k], MPI_INT, &count);
        CHECK(count == n, "storm message %d: %d ints, expected %d", k, count, n);
        for (int i = 0; i < n; ++i)
            CHECK(in[k * 64 + i] == left * 1000003 + k * 64 + i, "storm message %d int %d", k, i);
    }

    WHERE("ring: Waitany: two receives, only the second (tag 2) can ...");
    /* Waitany: two receives, only the second (tag 2) can complete. */
    int a = -1;
    int b = -1;
    MPI_Request two[2];
    MPI_Irecv(&a, 1, MPI_INT, left, 1, MPI_COMM_WORLD, &two[0]);
    MPI_Irecv(&b, 1, MPI_INT, left, 2, MPI_COMM_WORLD, &two[1]);
    int v2 = 20 + rank;
    MPI_Send(&v2, 1, MPI_INT, right, 2, MPI_COMM_WORLD);
    int index = -1;
    MPI_Status st;
    CHECK(MPI_Waitany(2, two, &index, &st) == MPI_SUCCESS, "waitany");
    CHECK(index == 1 && b == 20 + left && two[1] == MPI_REQUEST_NULL, "waitany index %d b %d a %d source %d tag %d",
          index, b, a, st.MPI_SOURCE, st.MPI_TAG);
    MPI_Barrier(MPI_COMM_WORLD); /* no tag 1 message before every Waitany returned */
    int v1 = 10 + rank;
    MPI_Send(&v1, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
    int flag = 0;
    while (!flag) /* MPI_Test until done (each test makes progress) */
        CHECK(MPI_Test(&two[0], &flag, &st) == MPI_SUCCESS, "test");
    CHECK(a == 10 + left && st.MPI_TAG == 1, "test got %d", a);
    CHECK(MPI_Waitany(2, two, &index, MPI_STATUS_IGNORE) == MPI_SUCCESS && index == MPI_UNDEFINED,
          "waitany of nothing active: %d", index);

    WHERE("ring: Testany, Testsome and Waitsome");
    /* Nothing completes before the left rank sends (after a barrier), then exactly
     * the request whose message came; with no active request Testany is true with
     * MPI_UNDEFINED, Testsome and Waitsome give an outcount of MPI_UNDEFINED. */
    {
        int c = -1, d = -1, idx = -5, fl = 1, outcount = -5, indices[3];
        MPI_Status sts[3];
        MPI_Request req[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        MPI_Irecv(&c, 1, MPI_INT, left, 3, MPI_COMM_WORLD, &req[0]);
        MPI_Irecv(&d, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &req[2]);
        CHECK(MPI_Testany(3, req, &idx, &fl, MPI_STATUS_IGNORE) == MPI_SUCCESS && !fl && idx == MPI_UNDEFINED,
              "Testany before any message: flag %d index %d", fl, idx);
        CHECK(MPI_Testsome(3, req, &outcount, indices, sts) == MPI_SUCCESS && outcount == 0,
              "Testsome before any message: %d", outcount);
        MPI_Barrier(MPI_COMM_WORLD);
        const int v4 = 40 + rank;
        MPI_Send(&v4, 1, MPI_INT, right, 4, MPI_COMM_WORLD);
        CHECK(MPI_Waitsome(3, req, &outcount, indices, sts) == MPI_SUCCESS, "Waitsome");
        CHECK(outcount == 1 && indices[0] == 2 && d == 40 + left && sts[0].MPI_TAG == 4 && req[2] == MPI_REQUEST_NULL,
              "Waitsome: %d completed, index %d, value %d", outcount, indices[0], d);
        MPI_Barrier(MPI_COMM_WORLD);
        const int v3 = 30 + rank;
        MPI_Send(&v3, 1, MPI_INT, right, 3, MPI_COMM_WORLD);
        fl = 0;
        while (!fl)
            CHECK(MPI_Testany(3, req, &idx, &fl, &st) == MPI_SUCCESS, "Testany");
        CHECK(idx == 0 && c == 30 + left && st.MPI_SOURCE == left && st.MPI_TAG == 3, "Testany: index %d value %d", idx,
              c);
        CHECK(MPI_Testany(3, req, &idx, &fl, MPI_STATUS_IGNORE) == MPI_SUCCESS && fl && idx == MPI_UNDEFINED,
              "Testany with nothing active: flag %d index %d", fl, idx);
        CHECK(MPI_Testsome(3, req, &outcount, indices, sts) == MPI_SUCCESS && outcount == MPI_UNDEFINED,
              "Testsome with nothing active: %d", outcount);
        CHECK(MPI_Waitsome(3, req, &outcount, indices, sts) == MPI_SUCCESS && outcount == MPI_UNDEFINED,
              "Waitsome with nothing active: %d", outcount);
    }

    WHERE("ring: Sendrecv_replace around the ring");
    {
        int x[5];
        for (int k = 0; k < 5; ++k)
            x[k] = rank * 100 + k;
        CHECK(MPI_Sendrecv_replace(x, 5, MPI_INT, right, 7, left, 7, MPI_COMM_WORLD, &st) == MPI_SUCCESS,
              "Sendrecv_replace");
        for (int k = 0; k < 5; ++k)
            CHECK(x[k] == left * 100 + k, "Sendrecv_replace: element %d is %d", k, x[k]);
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 7, "Sendrecv_replace status %d %d", st.MPI_SOURCE, st.MPI_TAG);
    }

    WHERE("ring: Testall: false until both arrived");
    /* Testall: false until both arrived. */
    MPI_Request pair[2];
    int p = -1;
    int q = -1;
    MPI_Irecv(&p, 1, MPI_INT, left, 3, MPI_COMM_WORLD, &pair[0]);
    MPI_Irecv(&q, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &pair[1]);
    MPI_Send(&v1, 1, MPI_INT, right, 3, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD); /* the tag 3 messages are in; no tag 4 message was sent */
    MPI_Testall(2, pair, &flag, MPI_STATUSES_IGNORE);
    CHECK(flag == 0 && pair[0] != MPI_REQUEST_NULL, "testall completed without the tag 4 message");
    MPI_Barrier(MPI_COMM_WORLD); /* no tag 4 message before every Testall looked */
    MPI_Send(&v2, 1, MPI_INT, right, 4, MPI_COMM_WORLD);
    for (flag = 0; !flag;)
        MPI_Testall(2, pair, &flag, MPI_STATUSES_IGNORE);
    CHECK(p == 10 + left && q == 20 + left, "testall %d %d", p, q);

    WHERE("ring: Cancel a receive nobody will answer");
    /* Cancel a receive nobody will answer. */
    MPI_Request lone;
    MPI_Irecv(&p, 1, MPI_INT, left, 99, MPI_COMM_WORLD, &lone);
    CHECK(MPI_Cancel(&lone) == MPI_SUCCESS, "cancel");
    MPI_Wait(&lone, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 1, "not cancelled");

    free(out);
    free(in);
    free(sends);
    free(recvs);
    free(statuses);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("ring: %d ranks ok\n", size);
    WHERE("ring: MPI_Finalize");
    MPI_Finalize();
    return 0;
}
