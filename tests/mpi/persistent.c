/* Persistent requests and buffered sends. Persistent: a ring of MPI_Send_init /
 * MPI_Recv_init started 5 times by MPI_Startall (each start sends what the buffer
 * holds then), MPI_Ssend_init, MPI_Rsend_init, MPI_Recv_init from MPI_ANY_SOURCE, a
 * strided type; MPI_Wait, MPI_Test, MPI_Waitany on inactive requests return at once
 * with an empty status and leave the handle; starting an active request is
 * MPI_ERR_REQUEST; MPI_Request_free of one. Buffered: MPI_Bsend without a buffer and
 * beyond the attached one is MPI_ERR_BUFFER; two ranks MPI_Bsend 1 MiB to each other
 * before receiving (a standard send of that size would wait for the receive); the
 * message is the buffer as it was at the call; MPI_Ibsend's request is complete
 * before the receiver posted its receive; MPI_Bsend_init; MPI_Buffer_detach gives
 * the buffer back. */
#include "check.h"

static int rank_;
static int size_;

static int value(int r, int round, int i) {
    return r * 10000 + round * 100 + i;
}

static void expect_empty(const MPI_Status* s, const char* what) {
    int count = -1;
    MPI_Get_count(s, MPI_INT, &count);
    CHECK(s->MPI_SOURCE == MPI_ANY_SOURCE && s->MPI_TAG == MPI_ANY_TAG && s->MPI_ERROR == MPI_SUCCESS && count == 0,
          "%s: status (%d, %d, %d, count %d) is not empty", what, s->MPI_SOURCE, s->MPI_TAG, s->MPI_ERROR, count);
}

static void test_persistent(void) {
    WHERE("persistent: ring");
    enum { N = 8 };
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    int out[N], in[N];
    MPI_Request r[2];
    CHECK(MPI_Recv_init(in, N, MPI_INT, prev, 1, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "recv_init");
    CHECK(MPI_Send_init(out, N, MPI_INT, next, 1, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "send_init");

    /* Inactive: Wait, Test, Waitany and Testall return at once, the handles stay. */
    MPI_Status status;
    CHECK(MPI_Wait(&r[0], &status) == MPI_SUCCESS, "wait on inactive");
    expect_empty(&status, "wait on inactive");
    CHECK(r[0] != MPI_REQUEST_NULL, "an inactive request stays after wait");
    int flag = 0;
    CHECK(MPI_Test(&r[1], &flag, &status) == MPI_SUCCESS && flag == 1, "test on inactive");
    expect_empty(&status, "test on inactive");
    int index = 0;
    CHECK(MPI_Waitany(2, r, &index, &status) == MPI_SUCCESS && index == MPI_UNDEFINED, "waitany on inactive: %d",
          index);

    for (int round = 0; round < 5; ++round) {
        WHERE("persistent: round %d", round);
        for (int i = 0; i < N; ++i) {
            out[i] = value(rank_, round, i);
            in[i] = -1;
        }
        CHECK(MPI_Startall(2, r) == MPI_SUCCESS, "startall");
        if (round == 0) {
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            expect_error(MPI_Start(&r[0]), MPI_ERR_REQUEST, "is active already");
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        }
        MPI_Status st[2];
        CHECK(MPI_Waitall(2, r, st) == MPI_SUCCESS, "waitall");
        CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL, "handles stay after waitall");
        CHECK(st[0].MPI_SOURCE == prev && st[0].MPI_TAG == 1, "status of the receive: %d %d", st[0].MPI_SOURCE,
              st[0].MPI_TAG);
        for (int i = 0; i < N; ++i)
            CHECK(in[i] == value(prev, round, i), "round %d element %d: %d", round, i, in[i]);
    }
    CHECK(MPI_Request_free(&r[0]) == MPI_SUCCESS && r[0] == MPI_REQUEST_NULL, "free recv");
    CHECK(MPI_Request_free(&r[1]) == MPI_SUCCESS && r[1] == MPI_REQUEST_NULL, "free send");

    /* Ssend_init to the next, Recv_init from any source, tested until done. */
    WHERE("persistent: ssend, any source");
    MPI_Request s, a;
    int one = value(rank_, 9, 0), got = -1;
    CHECK(MPI_Ssend_init(&one, 1, MPI_INT, next, 2, MPI_COMM_WORLD, &s) == MPI_SUCCESS, "ssend_init");
    CHECK(MPI_Recv_init(&got, 1, MPI_INT, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &a) == MPI_SUCCESS, "recv_init any");
    for (int round = 0; round < 3; ++round) {
        got = -1;
        MPI_Start(&a);
        MPI_Start(&s);
        int done = 0;
        while (!done)
            MPI_Test(&a, &done, &status);
        CHECK(got == value(prev, 9, 0) && status.MPI_SOURCE == prev, "any source round %d: %d from %d", round, got,
              status.MPI_SOURCE);
        MPI_Wait(&s, MPI_STATUS_IGNORE);
    }
    MPI_Request_free(&s);
    MPI_Request_free(&a);

    /* Rsend_init: the receive is posted before the barrier, the ready send after. */
    WHERE("persistent: rsend");
    MPI_Request rr, rs;
    MPI_Recv_init(&got, 1, MPI_INT, prev, 3, MPI_COMM_WORLD, &rr);
    CHECK(MPI_Rsend_init(&one, 1, MPI_INT, next, 3, MPI_COMM_WORLD, &rs) == MPI_SUCCESS, "rsend_init");
    MPI_Start(&rr);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Start(&rs);
    MPI_Wait(&rs, MPI_STATUS_IGNORE);
    MPI_Wait(&rr, MPI_STATUS_IGNORE);
    CHECK(got == value(prev, 9, 0), "rsend: %d", got);
    MPI_Request_free(&rr);
    MPI_Request_free(&rs);

    /* A strided type: every other int of a 2N array into a contiguous one. */
    WHERE("persistent: strided");
    MPI_Datatype evens;
    MPI_Type_vector(N, 1, 2, MPI_INT, &evens);
    MPI_Type_commit(&evens);
    int wide[2 * N];
    for (int i = 0; i < 2 * N; ++i)
        wide[i] = value(rank_, 7, i);
    MPI_Send_init(wide, 1, evens, next, 4, MPI_COMM_WORLD, &r[1]);
    MPI_Recv_init(in, N, MPI_INT, prev, 4, MPI_COMM_WORLD, &r[0]);
    MPI_Type_free(&evens); /* the requests keep what they need */
    MPI_Startall(2, r);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; ++i)
        CHECK(in[i] == value(prev, 7, 2 * i), "strided element %d: %d", i, in[i]);
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
}

static void test_buffered(void) {
    WHERE("buffered: errors");
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    int x = 5;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Bsend(&x, 1, MPI_INT, next, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "none is attached");
    static char small[100 + MPI_BSEND_OVERHEAD];
    CHECK(MPI_Buffer_attach(small, (int)sizeof small) == MPI_SUCCESS, "attach small");
    expect_error(MPI_Buffer_attach(small, (int)sizeof small), MPI_ERR_BUFFER, "attached already");
    static int big[1 << 18]; /* 1 MiB */
    expect_error(MPI_Bsend(big, 1 << 18, MPI_INT, next, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "bytes attached, 0 in use");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    void* back = NULL;
    int back_size = 0;
    CHECK(MPI_Buffer_detach(&back, &back_size) == MPI_SUCCESS && back == small && back_size == (int)sizeof small,
          "detach small");

    /* Both directions at once, 1 MiB each, before either receives: buffered sends are local. */
    WHERE("buffered: exchange");
    enum { M = 1 << 18 };
    const int bytes = 2 * (M * (int)sizeof(int) + MPI_BSEND_OVERHEAD) + 4 * (16 + MPI_BSEND_OVERHEAD);
    char* attached = malloc((size_t)bytes);
    int* in = malloc(M * sizeof(int));
    CHECK(attached != NULL && in != NULL, "malloc");
    CHECK(MPI_Buffer_attach(attached, bytes) == MPI_SUCCESS, "attach");
    for (int i = 0; i < M; ++i)
        big[i] = value(rank_, 1, i);
    CHECK(MPI_Bsend(big, M, MPI_INT, next, 10, MPI_COMM_WORLD) == MPI_SUCCESS, "bsend 1 MiB");
    for (int i = 0; i < M; ++i)
        big[i] = -7; /* the message was copied at the call */
    CHECK(MPI_Recv(in, M, MPI_INT, prev, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv 1 MiB");
    for (int i = 0; i < M; ++i)
        if (in[i] != value(prev, 1, i)) CHECK(0, "buffered element %d: %d", i, in[i]);

    /* Ibsend of 1 MiB is complete before the receiver posted (it waits in a barrier). */
    WHERE("buffered: ibsend");
    for (int i = 0; i < M; ++i)
        big[i] = value(rank_, 2, i);
    MPI_Request q;
    CHECK(MPI_Ibsend(big, M, MPI_INT, next, 11, MPI_COMM_WORLD, &q) == MPI_SUCCESS, "ibsend");
    int flag = 0;
    MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 1 && q == MPI_REQUEST_NULL, "an Ibsend request is complete at once");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Recv(in, M, MPI_INT, prev, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < M; ++i)
        if (in[i] != value(prev, 2, i)) CHECK(0, "ibsend element %d: %d", i, in[i]);

    /* Bsend_init, started three times. */
    WHERE("buffered: bsend_init");
    int v = 0, got = -1;
    MPI_Request p;
    CHECK(MPI_Bsend_init(&v, 1, MPI_INT, next, 12, MPI_COMM_WORLD, &p) == MPI_SUCCESS, "bsend_init");
    for (int round = 0; round < 3; ++round) {
        v = value(rank_, 3, round);
        MPI_Start(&p);
        MPI_Wait(&p, MPI_STATUS_IGNORE);
        MPI_Recv(&got, 1, MPI_INT, prev, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(got == value(prev, 3, round), "bsend_init round %d: %d", round, got);
    }
    MPI_Request_free(&p);

    CHECK(MPI_Buffer_detach(&back, &back_size) == MPI_SUCCESS && back == attached && back_size == bytes, "detach");
    free(attached);
    free(in);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_deadline(120, rank_);
    test_persistent();
    test_buffered();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) printf("persistent: passed on %d ranks\n", size_);
    MPI_Finalize();
    return 0;
}
