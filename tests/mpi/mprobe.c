/* Matched probes: MPI_Mprobe takes the message out of matching (a probe and a
 * receive posted after it see the next message of the same source and tag, not it),
 * MPI_Mrecv receives it later, with its status; MPI_Improbe (nothing there: flag 0
 * and MPI_MESSAGE_NULL) and MPI_Imrecv into a strided type; a 1 MiB message (the
 * rendezvous path); a matched message larger than the receive buffer is
 * MPI_ERR_TRUNCATE; MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC; MPI_Mrecv of
 * MPI_MESSAGE_NULL is MPI_ERR_REQUEST. A completion of one request (MPI_Recv, MPI_Wait,
 * MPI_Test, MPI_Mrecv, the probes, MPI_Waitany) leaves the status' MPI_ERROR as the
 * program set it; MPI_Waitall and MPI_Testall write it only when they return
 * MPI_ERR_IN_STATUS. MPI_Irecv, MPI_Isend and MPI_Imrecv of MPI_PROC_NULL give a
 * request, complete at once with MPI_PROC_NULL's status. */
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

    WHERE("mprobe: MPI_ERROR left alone by a completion of one request");
    {
        MPI_Status st;
        int x = rank_, y = -1;
        MPI_Request q[2];
        /* MPI_Mprobe, MPI_Mrecv */
        MPI_Isend(&x, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &s[0]);
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Mprobe(prev, 5, MPI_COMM_WORLD, &m, &st);
        CHECK(st.MPI_ERROR == MPI_ERR_DIMS && st.MPI_SOURCE == prev, "mprobe wrote MPI_ERROR %d", st.MPI_ERROR);
        st.MPI_ERROR = MPI_ERR_TOPOLOGY;
        MPI_Mrecv(&y, 1, MPI_INT, &m, &st);
        CHECK(st.MPI_ERROR == MPI_ERR_TOPOLOGY && y == prev, "mrecv wrote MPI_ERROR %d", st.MPI_ERROR);
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Wait(&s[0], &st);
        CHECK(st.MPI_ERROR == MPI_ERR_DIMS, "wait of a send wrote MPI_ERROR %d", st.MPI_ERROR);
        /* MPI_Probe, MPI_Iprobe, MPI_Recv */
        MPI_Isend(&x, 1, MPI_INT, next, 6, MPI_COMM_WORLD, &s[0]);
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Probe(prev, 6, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_ERROR == MPI_ERR_DIMS, "probe wrote MPI_ERROR %d", st.MPI_ERROR);
        flag = 0;
        st.MPI_ERROR = MPI_ERR_TOPOLOGY;
        MPI_Iprobe(prev, 6, MPI_COMM_WORLD, &flag, &st);
        CHECK(flag && st.MPI_ERROR == MPI_ERR_TOPOLOGY, "iprobe wrote MPI_ERROR %d", st.MPI_ERROR);
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Recv(&y, 1, MPI_INT, prev, 6, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_ERROR == MPI_ERR_DIMS && st.MPI_TAG == 6, "recv wrote MPI_ERROR %d", st.MPI_ERROR);
        MPI_Wait(&s[0], MPI_STATUS_IGNORE);
        /* MPI_Test, MPI_Waitany; MPI_PROC_NULL */
        MPI_Irecv(&y, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, &r);
        MPI_Send(&x, 1, MPI_INT, next, 7, MPI_COMM_WORLD);
        flag = 0;
        while (!flag) {
            st.MPI_ERROR = MPI_ERR_TOPOLOGY;
            MPI_Test(&r, &flag, &st);
            CHECK(st.MPI_ERROR == MPI_ERR_TOPOLOGY, "test wrote MPI_ERROR %d", st.MPI_ERROR);
        }
        MPI_Irecv(&y, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, &q[0]);
        q[1] = MPI_REQUEST_NULL;
        MPI_Send(&x, 1, MPI_INT, next, 8, MPI_COMM_WORLD);
        int index = -1;
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Waitany(2, q, &index, &st);
        CHECK(index == 0 && st.MPI_ERROR == MPI_ERR_DIMS, "waitany wrote MPI_ERROR %d", st.MPI_ERROR);
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Recv(&y, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_ERROR == MPI_ERR_DIMS && st.MPI_SOURCE == MPI_PROC_NULL, "recv of MPI_PROC_NULL wrote MPI_ERROR");
        /* A non-blocking operation on MPI_PROC_NULL is a request, complete at once,
         * with the status of MPI_PROC_NULL. */
        MPI_Irecv(&y, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r);
        CHECK(r != MPI_REQUEST_NULL, "irecv of MPI_PROC_NULL gave MPI_REQUEST_NULL");
        flag = 0;
        st.MPI_ERROR = MPI_ERR_DIMS;
        MPI_Test(&r, &flag, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(flag && r == MPI_REQUEST_NULL && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG &&
                  count == 0 && st.MPI_ERROR == MPI_ERR_DIMS,
              "irecv of MPI_PROC_NULL: flag %d source %d tag %d count %d", flag, st.MPI_SOURCE, st.MPI_TAG, count);
        /* (nothing of MPI_DATATYPE_NULL from MPI_PROC_NULL is accepted too) */
        MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r);
        MPI_Waitall(1, &r, &st);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG, "irecv of MPI_DATATYPE_NULL: source %d",
              st.MPI_SOURCE);
        st.MPI_SOURCE = 0;
        MPI_Recv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "recv of MPI_DATATYPE_NULL: source %d", st.MPI_SOURCE);
        MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r);
        CHECK(r != MPI_REQUEST_NULL, "isend to MPI_PROC_NULL gave MPI_REQUEST_NULL");
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st);
        MPI_Imrecv(&y, 1, MPI_INT, &m, &r);
        CHECK(r != MPI_REQUEST_NULL && m == MPI_MESSAGE_NULL, "imrecv of MPI_MESSAGE_NO_PROC");
        st.MPI_SOURCE = 0;
        MPI_Wait(&r, &st);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "imrecv of MPI_MESSAGE_NO_PROC: source %d", st.MPI_SOURCE);
        /* MPI_Waitall that succeeds leaves them; one that fails writes every one. */
        MPI_Status sts[2];
        MPI_Irecv(&y, 1, MPI_INT, prev, 9, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(&x, 1, MPI_INT, next, 9, MPI_COMM_WORLD, &q[1]);
        sts[0].MPI_ERROR = sts[1].MPI_ERROR = MPI_ERR_DIMS;
        CHECK(MPI_Waitall(2, q, sts) == MPI_SUCCESS, "waitall");
        CHECK(sts[0].MPI_ERROR == MPI_ERR_DIMS && sts[1].MPI_ERROR == MPI_ERR_DIMS && sts[0].MPI_SOURCE == prev,
              "a waitall that succeeded wrote MPI_ERROR (%d, %d)", sts[0].MPI_ERROR, sts[1].MPI_ERROR);
        int small = 0, pair[2] = {x, x};
        MPI_Irecv(&small, 1, MPI_INT, prev, 10, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(pair, 2, MPI_INT, next, 10, MPI_COMM_WORLD, &q[1]);
        sts[0].MPI_ERROR = sts[1].MPI_ERROR = MPI_ERR_DIMS;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        CHECK(MPI_Waitall(2, q, sts) == MPI_ERR_IN_STATUS, "a truncated receive in waitall");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        CHECK(sts[0].MPI_ERROR == MPI_ERR_TRUNCATE && sts[1].MPI_ERROR == MPI_SUCCESS,
              "a failed waitall's errors (%d, %d)", sts[0].MPI_ERROR, sts[1].MPI_ERROR);
    }

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
