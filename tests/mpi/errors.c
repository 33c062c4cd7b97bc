/* Errors. With MPI_ERRORS_RETURN every bad argument comes back as its MPI error class
 * with a message from MPI_Error_string naming what was wrong; a truncated receive is
 * MPI_ERR_TRUNCATE with the bytes that fitted; a receive only this rank could answer
 * fails instead of hanging; MPI_COMM_SELF works alone. With the argument "fatal", a
 * bad call under the default MPI_ERRORS_ARE_FATAL ends the process (ctest checks the
 * message and the exit code through msgpass-run). */
#include "check.h"

#include <string.h>

int main(int argc, char** argv) {
    int provided = -1;
    CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS, "init");
    CHECK(provided == MPI_THREAD_FUNNELED, "provided %d", provided);
    int flag = 0;
    MPI_Initialized(&flag);
    CHECK(flag == 1, "not initialized");
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    WHERE("errors: start");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int x[10] = {0};
    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        if (rank == size - 1) MPI_Send(x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD); /* the others wait here until the launcher stops them */
        return 0;
    }
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &handler);
    CHECK(handler == MPI_ERRORS_ARE_FATAL, "default handler");
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) == MPI_SUCCESS, "set handler");
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN) == MPI_SUCCESS, "set handler");

    expect_error(MPI_Send(x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK, "MPI_Send: rank");
    expect_error(MPI_Send(x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG, "tag -5");
    expect_error(MPI_Send(x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT, "negative count");
    expect_error(MPI_Send(x, 1, 12345, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "invalid datatype 12345");
    expect_error(MPI_Send(NULL, 3, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER, "NULL");
    expect_error(MPI_Send(x, 1, MPI_INT, 0, 0, 777), MPI_ERR_COMM, "invalid communicator 777");
    expect_error(MPI_Recv(x, 1, MPI_INT, size + 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK, "rank");
    expect_error(MPI_Allreduce(x, x + 1, 1, MPI_INT, 999, MPI_COMM_WORLD), MPI_ERR_OP, "invalid operation 999");
    expect_error(MPI_Bcast(x, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT, "root");
    MPI_Request bogus = 424242;
    expect_error(MPI_Wait(&bogus, MPI_STATUS_IGNORE), MPI_ERR_REQUEST, "invalid request 424242");
    expect_error(MPI_Comm_set_errhandler(MPI_COMM_WORLD, 99), MPI_ERR_ARG, "error handler");
    WHERE("errors: Only this rank could send it: an error, not a hang");
    /* Only this rank could send it: an error, not a hang. */
    expect_error(MPI_Recv(x, 1, MPI_INT, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_OTHER, "wait forever");
    expect_error(MPI_Recv(x, 1, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE), MPI_ERR_OTHER, "wait forever");

    WHERE("errors: MPI_COMM_SELF: rank 0 of 1, messages to itself, kept ...");
    /* MPI_COMM_SELF: rank 0 of 1, messages to itself, kept apart from MPI_COMM_WORLD. */
    int self_rank = -1;
    int self_size = -1;
    MPI_Comm_rank(MPI_COMM_SELF, &self_rank);
    MPI_Comm_size(MPI_COMM_SELF, &self_size);
    CHECK(self_rank == 0 && self_size == 1, "self %d of %d", self_rank, self_size);
    int v = 31;
    int w = 0;
    CHECK(MPI_Send(&v, 1, MPI_INT, 0, 3, MPI_COMM_SELF) == MPI_SUCCESS, "self send");
    MPI_Iprobe(MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); /* nobody sends tag 3 there */
    CHECK(flag == 0, "a message on MPI_COMM_SELF is visible on MPI_COMM_WORLD");
    MPI_Status st;
    CHECK(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &st) == MPI_SUCCESS, "self recv");
    CHECK(w == 31 && st.MPI_SOURCE == 0 && st.MPI_TAG == 3, "self got %d", w);

    WHERE("errors: Truncation: 10 ints into room for 4");
    /* Truncation: 10 ints into room for 4. */
    if (size > 1) {
        if (rank == 0) {
            for (int i = 0; i < 10; ++i)
                x[i] = i + 1;
            MPI_Send(x, 10, MPI_INT, 1, 8, MPI_COMM_WORLD);
        } else if (rank == 1) {
            int room[4] = {0};
            const int code = MPI_Recv(room, 4, MPI_INT, 0, 8, MPI_COMM_WORLD, &st);
            expect_error(code, MPI_ERR_TRUNCATE, "larger than the receive buffer");
            int count = -1;
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(count == 4 && room[0] == 1 && room[3] == 4, "truncated: %d ints, %d..%d", count, room[0], room[3]);
        }
    }
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_Get_processor_name(name, &length);
    CHECK(length > 0 && (int)strlen(name) == length, "processor name");
    const double t0 = MPI_Wtime();
    CHECK(MPI_Wtime() >= t0 && MPI_Wtick() > 0, "clock");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("errors: %d ranks ok\n", size);
    WHERE("errors: MPI_Finalize");
    MPI_Finalize();
    MPI_Finalized(&flag);
    CHECK(flag == 1, "not finalized");
    return 0;
}
