/* Matched probes: MPI_Mprobe takes the message out of matching (a probe and a
 * receive posted after it see the next message of the same source and tag, not it),
 * MPI_Mrecv receives it later, with its status; MPI_Improbe (nothing there: flag 0
 * and MPI_MESSAGE_NULL) and MPI_Imrecv into a strided type; a 1 MiB message (the
 * rendezvous path); a matched message larger than the receive buffer is
 * MPI_ERR_TRUNCATE; MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC; MPI_Mrecv of
 * MPI_MESSAGE_NULL is MPI_ERR_REQUEST. */
#include "check.h"

static int rank_;
static int size_;

static int value(int r, int tag, int i) {
    return r * 100000 + tag * 1000 + i;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_deadline(120, rank_);
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;

    WHERE("mprobe: taken out of matching");
    int a[3], b[5], got_a[3], got_b[5];
    for (int i = 0; i < 5; ++i) {
        if (i < 3) a[i] = value(rank_, 1, i);
        b[i] = value(rank_, 1, 10 + i);
    }
    MPI_Request s[2];
    MPI_Isend(a, 3, MPI_INT, next, 1, MPI_COMM_WORLD, &s[0]);
    MPI_Isend(b, 5, MPI_INT, next, 1, MPI_COMM_WORLD, &s[1]);
    MPI_Message m = MPI_MESSAGE_NULL;
    MPI_Status status;
    CHECK(MPI_Mprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &m, &status) == MPI_SUCCESS, "mprobe");
    int count = -1;
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(status.MPI_SOURCE == prev && status.MPI_TAG == 1 && count == 3, "mprobe status (%d, %d, %d)",
          status.MPI_SOURCE, status.MPI_TAG, count);
    CHECK(m != MPI_MESSAGE_NULL && m != MPI_MESSAGE_NO_PROC, "a message");
    /* The matched message is out of matching: a probe now sees the second one. */
    MPI_Probe(prev, 1, MPI_COMM_WORLD, &status);
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == 5, "probe after mprobe sees the next message: count %d", count);
    MPI_Request r;
    MPI_Irecv(got_b, 5, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, &status);
    for (int i = 0; i < 5; ++i)
        CHECK(got_b[i] == value(prev, 1, 10 + i), "second message %d: %d", i, got_b[i]);
    CHECK(MPI_Mrecv(got_a, 3, MPI_INT, &m, &status) == MPI_SUCCESS, "mrecv");
    CHECK(m == MPI_MESSAGE_NULL, "mrecv sets MPI_MESSAGE_NULL");
    CHECK(status.MPI_SOURCE == prev && status.MPI_TAG == 1, "mrecv status");
    for (int i = 0; i < 3; ++i)
        CHECK(got_a[i] == value(prev, 1, i), "matched message %d: %d", i, got_a[i]);
    MPI_Waitall(2, s, MPI_STATUSES_IGNORE);

    WHERE("mprobe: improbe, imrecv into a strided type");
    int flag = 1;
    m = 5;
    CHECK(MPI_Improbe(prev, 99, MPI_COMM_WORLD, &flag, &m, &status) == MPI_SUCCESS && flag == 0 &&
              m == MPI_MESSAGE_NULL,
          "improbe of nothing: flag %d message %d", flag, m);
    int four[4] = {value(rank_, 2, 0), value(rank_, 2, 1), value(rank_, 2, 2), value(rank_, 2, 3)};
    MPI_Isend(four, 4, MPI_INT, next, 2, MPI_COMM_WORLD, &s[0]);
    flag = 0;
    while (!flag)
        MPI_Improbe(MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &flag, &m, &status);
    MPI_Datatype evens;
    MPI_Type_vector(4, 1, 2, MPI_INT, &evens);
    MPI_Type_commit(&evens);
    int wide[8];
    for (int i = 0; i < 8; ++i)
        wide[i] = -1;
    CHECK(MPI_Imrecv(wide, 1, evens, &m, &r) == MPI_SUCCESS && m == MPI_MESSAGE_NULL, "imrecv");
    MPI_Wait(&r, &status);
    for (int i = 0; i < 8; ++i)
        CHECK(wide[i] == (i % 2 == 0 ? value(prev, 2, i / 2) : -1), "imrecv element %d: %d", i, wide[i]);
    MPI_Type_free(&evens);
    MPI_Wait(&s[0], MPI_STATUS_IGNORE);

    WHERE("mprobe: 1 MiB");
    enum { M = 1 << 18 };
    int* big = malloc(M * sizeof(int));
    int* in = malloc(M * sizeof(int));
    CHECK(big != NULL && in != NULL, "malloc");
    for (int i = 0; i < M; ++i)
        big[i] = value(rank_, 3, i);
    MPI_Isend(big, M, MPI_INT, next, 3, MPI_COMM_WORLD, &s[0]);
    MPI_Mprobe(prev, 3, MPI_COMM_WORLD, &m, &status);
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == M, "1 MiB count %d", count);
    MPI_Mrecv(in, M, MPI_INT, &m, &status);
    for (int i = 0; i < M; ++i)
        if (in[i] != value(prev, 3, i)) CHECK(0, "1 MiB element %d: %d", i, in[i]);
    MPI_Wait(&s[0], MPI_STATUS_IGNORE);
    free(big);
    free(in);

    WHERE("mprobe: errors");
    MPI_Isend(four, 4, MPI_INT, next, 4, MPI_COMM_WORLD, &s[0]);
    MPI_Mprobe(prev, 4, MPI_COMM_WORLD, &m, &status);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int two[2];
    expect_error(MPI_Mrecv(two, 2, MPI_INT, &m, &status), MPI_ERR_TRUNCATE, "larger than the receive buffer");
    expect_error(MPI_Mrecv(two, 2, MPI_INT, &m, &status), MPI_ERR_REQUEST, "MPI_MESSAGE_NULL");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Wait(&s[0], MPI_STATUS_IGNORE);
    CHECK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &status) == MPI_SUCCESS && m == MPI_MESSAGE_NO_PROC &&
              status.MPI_SOURCE == MPI_PROC_NULL,
          "mprobe of MPI_PROC_NULL");
    CHECK(MPI_Mrecv(two, 2, MPI_INT, &m, &status) == MPI_SUCCESS && m == MPI_MESSAGE_NULL &&
              status.MPI_SOURCE == MPI_PROC_NULL,
          "mrecv of MPI_MESSAGE_NO_PROC");

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) printf("mprobe: passed on %d ranks\n", size_);
    MPI_Finalize();
    return 0;
}
