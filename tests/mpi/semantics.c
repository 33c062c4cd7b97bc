/* Point-to-point semantics a program relies on, each checked by what a program can
 * observe (no timing), between ranks 0 and 1 (other ranks only take part in the
 * barriers):
 * - MPI_Issend is not complete while the receiver has not matched it, and MPI_Ssend
 *   returns only after the match;
 * - MPI_Get_count gives MPI_UNDEFINED when the bytes are not a whole number of the type;
 * - MPI_Waitall returns MPI_ERR_IN_STATUS when one request failed (a truncated receive),
 *   with that request's error in its status and the others' MPI_SUCCESS;
 * - MPI_Request_free of an active send still delivers the message, and of a posted
 *   receive still takes the message it matches (it is not left unexpected);
 * - MPI_Cancel of a send no receive has taken (a synchronous one, a large one, one to
 *   this rank itself) withdraws it: MPI_Test_cancelled says so and the receiver never
 *   sees it; of a small send already handed over it is no error, the message arrives
 *   and MPI_Test_cancelled says it was not cancelled.
 * `semantics abort`: rank 1 calls MPI_Abort with code 7 while rank 0 waits in a receive;
 * the launcher reports that rank's exit code 7 (the ctest checks the output).
 * `semantics dead`: rank 1 leaves at once; rank 0's receive from it returns
 * MPI_ERR_PROC_FAILED (under MPI_ERRORS_RETURN) instead of waiting forever. */
#include "check.h"

static void synchronous_sends(int rank) {
    WHERE("semantics: MPI_Issend before and after the match");
    if (rank == 0) {
        int value = 41;
        MPI_Request request;
        CHECK(MPI_Issend(&value, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Issend");
        /* Rank 1 posts the receive of tag 10 only after it got tag 11, sent below: until
         * then no test may find the synchronous send complete, however much progress
         * the tests make. */
        for (int i = 0; i < 200; ++i) {
            int flag = 1;
            CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test");
            CHECK(!flag, "MPI_Issend complete before the receiver matched it (test %d)", i);
        }
        int go = 1;
        CHECK(MPI_Send(&go, 1, MPI_INT, 1, 11, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send of tag 11");
        CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait of the MPI_Issend");
    } else if (rank == 1) {
        int go = 0;
        int value = 0;
        CHECK(MPI_Recv(&go, 1, MPI_INT, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 11");
        CHECK(MPI_Recv(&value, 1, MPI_INT, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 10");
        CHECK(value == 41, "MPI_Issend delivered %d", value);
    }

    WHERE("semantics: MPI_Ssend returns after the match");
    /* Rank 1 sends tag 13 and only then receives the synchronous tag 12: when rank 0's
     * MPI_Ssend returns, rank 1 has matched it, so tag 13 (sent before, on the same
     * ordered path) is there for rank 0. A send that returned early finds nothing. */
    if (rank == 0) {
        int value = 42;
        CHECK(MPI_Ssend(&value, 1, MPI_INT, 1, 12, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Ssend");
        int flag = 0;
        MPI_Status status;
        CHECK(MPI_Iprobe(1, 13, MPI_COMM_WORLD, &flag, &status) == MPI_SUCCESS, "MPI_Iprobe");
        CHECK(flag, "MPI_Ssend returned before rank 1 matched it (its earlier tag 13 is not here)");
        int ignored = 0;
        CHECK(MPI_Recv(&ignored, 1, MPI_INT, 1, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 13");
    } else if (rank == 1) {
        int value = 0;
        CHECK(MPI_Send(&value, 1, MPI_INT, 0, 13, MPI_COMM_WORLD) == MPI_SUCCESS, "send tag 13");
        CHECK(MPI_Recv(&value, 1, MPI_INT, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 12");
        CHECK(value == 42, "MPI_Ssend delivered %d", value);
    }
}

static void counts(int rank) {
    WHERE("semantics: MPI_Get_count of 6 bytes");
    if (rank == 0) {
        const char six[6] = {1, 2, 3, 4, 5, 6};
        CHECK(MPI_Send(six, 6, MPI_BYTE, 1, 20, MPI_COMM_WORLD) == MPI_SUCCESS, "send 6 bytes");
    } else if (rank == 1) {
        char buf[16];
        MPI_Status status;
        CHECK(MPI_Recv(buf, 16, MPI_BYTE, 0, 20, MPI_COMM_WORLD, &status) == MPI_SUCCESS, "recv 6 bytes");
        int count = -2;
        CHECK(MPI_Get_count(&status, MPI_BYTE, &count) == MPI_SUCCESS && count == 6, "bytes: %d", count);
        CHECK(MPI_Get_count(&status, MPI_SHORT, &count) == MPI_SUCCESS && count == 3, "shorts: %d", count);
        CHECK(MPI_Get_count(&status, MPI_INT, &count) == MPI_SUCCESS && count == MPI_UNDEFINED,
              "6 bytes as int: %d, not MPI_UNDEFINED", count);
        CHECK(MPI_Get_count(&status, MPI_DOUBLE, &count) == MPI_SUCCESS && count == MPI_UNDEFINED,
              "6 bytes as double: %d, not MPI_UNDEFINED", count);
    }
}

static void waitall_errors(int rank) {
    WHERE("semantics: MPI_Waitall with a truncated receive");
    if (rank == 0) {
        const int three[3] = {1, 2, 3};
        const int two[2] = {7, 8};
        CHECK(MPI_Send(three, 3, MPI_INT, 1, 30, MPI_COMM_WORLD) == MPI_SUCCESS, "send 3 ints");
        CHECK(MPI_Send(two, 2, MPI_INT, 1, 31, MPI_COMM_WORLD) == MPI_SUCCESS, "send 2 ints");
        CHECK(MPI_Send(two, 2, MPI_INT, 1, 32, MPI_COMM_WORLD) == MPI_SUCCESS, "send 2 ints");
    } else if (rank == 1) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int small[1] = {0};
        int big[4] = {0, 0, 0, 0};
        MPI_Request requests[2];
        MPI_Status statuses[2];
        CHECK(MPI_Irecv(big, 4, MPI_INT, 0, 31, MPI_COMM_WORLD, &requests[0]) == MPI_SUCCESS, "irecv 4 ints");
        CHECK(MPI_Irecv(small, 1, MPI_INT, 0, 30, MPI_COMM_WORLD, &requests[1]) == MPI_SUCCESS, "irecv 1 int");
        const int code = MPI_Waitall(2, requests, statuses);
        CHECK(code == MPI_ERR_IN_STATUS, "MPI_Waitall with a truncated receive returned %d", code);
        CHECK(statuses[0].MPI_ERROR == MPI_SUCCESS, "the good receive's status error %d", statuses[0].MPI_ERROR);
        CHECK(statuses[1].MPI_ERROR == MPI_ERR_TRUNCATE, "the truncated receive's status error %d",
              statuses[1].MPI_ERROR);
        CHECK(requests[0] == MPI_REQUEST_NULL && requests[1] == MPI_REQUEST_NULL, "requests not freed");
        int count = -2;
        CHECK(MPI_Get_count(&statuses[0], MPI_INT, &count) == MPI_SUCCESS && count == 2, "count %d", count);
        CHECK(big[0] == 7 && big[1] == 8, "the good receive got %d %d", big[0], big[1]);
        /* and without a failure, MPI_SUCCESS */
        CHECK(MPI_Irecv(big, 4, MPI_INT, 0, 32, MPI_COMM_WORLD, &requests[0]) == MPI_SUCCESS, "irecv");
        requests[1] = MPI_REQUEST_NULL;
        CHECK(MPI_Waitall(2, requests, statuses) == MPI_SUCCESS, "MPI_Waitall without a failure");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
}

static void freed_requests(int rank) {
    WHERE("semantics: MPI_Request_free of an active send and of a posted receive");
    static int sent = 55;
    if (rank == 0) {
        MPI_Request request;
        CHECK(MPI_Isend(&sent, 1, MPI_INT, 1, 40, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Isend");
        CHECK(MPI_Request_free(&request) == MPI_SUCCESS && request == MPI_REQUEST_NULL, "MPI_Request_free of a send");
        /* tag 41 leaves only once rank 1's receive of it is posted and freed: it must
         * arrive into that receive, not before it */
        int ready = 0;
        CHECK(MPI_Recv(&ready, 1, MPI_INT, 1, 43, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 43");
        int value = 66;
        CHECK(MPI_Send(&value, 1, MPI_INT, 1, 41, MPI_COMM_WORLD) == MPI_SUCCESS, "send tag 41");
        CHECK(MPI_Send(&value, 1, MPI_INT, 1, 42, MPI_COMM_WORLD) == MPI_SUCCESS, "send tag 42");
    } else if (rank == 1) {
        int freed_into = 0;
        MPI_Request request;
        CHECK(MPI_Irecv(&freed_into, 1, MPI_INT, 0, 41, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Irecv");
        CHECK(MPI_Request_free(&request) == MPI_SUCCESS && request == MPI_REQUEST_NULL,
              "MPI_Request_free of a receive");
        int ready = 1;
        CHECK(MPI_Send(&ready, 1, MPI_INT, 0, 43, MPI_COMM_WORLD) == MPI_SUCCESS, "send tag 43");
        int value = 0;
        /* the freed send's message arrives (a send that was dropped leaves this waiting
         * until the deadline) */
        CHECK(MPI_Recv(&value, 1, MPI_INT, 0, 40, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 40");
        CHECK(value == 55, "the freed send delivered %d", value);
        /* tag 42 left after tag 41: once it is here, tag 41 went into the freed receive */
        CHECK(MPI_Recv(&value, 1, MPI_INT, 0, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "recv tag 42");
        int flag = 1;
        CHECK(MPI_Iprobe(0, 41, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Iprobe");
        CHECK(!flag, "the message of the freed receive was left unexpected");
        CHECK(freed_into == 66, "the freed receive got %d", freed_into);
    }
}

/* MPI_Request_get_status says whether a request completed without completing it:
 * not before its message was sent (rank 1 sends after the barrier), then yes with the
 * message's status, and the request stays for MPI_Wait, which gives the same. */
static void request_status(int rank) {
    WHERE("semantics: MPI_Request_get_status");
    int value = 0;
    int flag = 1;
    MPI_Request r = MPI_REQUEST_NULL;
    if (rank == 0) {
        MPI_Irecv(&value, 1, MPI_INT, 1, 77, MPI_COMM_WORLD, &r);
        CHECK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag == 0,
              "complete before its message was sent");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        value = 4242;
        MPI_Send(&value, 1, MPI_INT, 0, 77, MPI_COMM_WORLD);
    }
    if (rank != 0) return;
    MPI_Status status;
    do /* the deadline of check_deadline bounds it */
        CHECK(MPI_Request_get_status(r, &flag, &status) == MPI_SUCCESS, "MPI_Request_get_status");
    while (!flag);
    CHECK(r != MPI_REQUEST_NULL, "MPI_Request_get_status released the request");
    CHECK(status.MPI_SOURCE == 1 && status.MPI_TAG == 77 && value == 4242, "status %d %d, value %d", status.MPI_SOURCE,
          status.MPI_TAG, value);
    CHECK(MPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag == 1, "asked again");
    MPI_Status waited;
    CHECK(MPI_Wait(&r, &waited) == MPI_SUCCESS && r == MPI_REQUEST_NULL, "MPI_Wait after it");
    int count = -1;
    MPI_Get_count(&waited, MPI_INT, &count);
    CHECK(waited.MPI_SOURCE == 1 && waited.MPI_TAG == 77 && count == 1, "the wait's status");
    CHECK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &status) == MPI_SUCCESS && flag == 1 &&
              status.MPI_SOURCE == MPI_ANY_SOURCE,
          "MPI_REQUEST_NULL: complete, empty status");
}

static void cancelled_sends(int rank) {
    WHERE("semantics: MPI_Cancel of sends");
    enum { large = 1 << 20 };
    static char big[large];
    int flag = -1;
    MPI_Status status;
    /* (a synchronous send to this rank itself, taken back after a probe saw it) */
    MPI_Request own;
    MPI_Issend(NULL, 0, MPI_BYTE, 0, 123, MPI_COMM_SELF, &own);
    MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &status);
    CHECK(status.MPI_TAG == 123, "probe of the send to itself: tag %d", status.MPI_TAG);
    CHECK(MPI_Cancel(&own) == MPI_SUCCESS, "cancel of a send to itself");
    MPI_Wait(&own, &status);
    MPI_Test_cancelled(&status, &flag);
    CHECK(flag == 1, "the send to itself was not cancelled");
    MPI_Iprobe(0, 123, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
    CHECK(flag == 0, "the cancelled send to itself can still be received");
    if (rank == 0) {
        int value = 5;
        MPI_Request sync, bulk, small;
        MPI_Issend(&value, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &sync);
        MPI_Isend(big, large, MPI_BYTE, 1, 31, MPI_COMM_WORLD, &bulk);
        MPI_Isend(&value, 1, MPI_INT, 1, 32, MPI_COMM_WORLD, &small);
        MPI_Wait(&small, &status); /* a small send completes once handed over */
        MPI_Cancel(&sync);
        MPI_Cancel(&bulk);
        MPI_Wait(&sync, &status);
        MPI_Test_cancelled(&status, &flag);
        CHECK(flag == 1, "the synchronous send nobody received was not cancelled");
        MPI_Wait(&bulk, &status);
        MPI_Test_cancelled(&status, &flag);
        CHECK(flag == 1, "the large send nobody received was not cancelled");
        MPI_Request late;
        MPI_Isend(&value, 1, MPI_INT, 1, 33, MPI_COMM_WORLD, &late);
        MPI_Barrier(MPI_COMM_WORLD); /* rank 1 has received tag 33 */
        CHECK(MPI_Cancel(&late) == MPI_SUCCESS, "MPI_Cancel of a send already received is no error");
        MPI_Wait(&late, &status);
        MPI_Test_cancelled(&status, &flag);
        CHECK(flag == 0, "a send the receiver took was called cancelled");
    } else if (rank == 1) {
        int value = 0;
        MPI_Recv(&value, 1, MPI_INT, 0, 32, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&value, 1, MPI_INT, 0, 33, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(value == 5, "tag 33 brought %d", value);
        MPI_Barrier(MPI_COMM_WORLD);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        for (int tag = 30; tag <= 31; ++tag) {
            MPI_Iprobe(0, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            CHECK(flag == 0, "the cancelled send of tag %d arrived", tag);
        }
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(120, rank);
    CHECK(size >= 2, "semantics needs 2 ranks, has %d", size);
    const char* mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "abort") == 0) {
        WHERE("semantics: MPI_Abort with code 7");
        if (rank == 1) MPI_Abort(MPI_COMM_WORLD, 7);
        int never = 0;
        if (rank == 0) MPI_Recv(&never, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        fprintf(stderr, "rank %d: MPI_Abort of rank 1 did not stop the partition\n", rank);
        _exit(5);
    }
    if (strcmp(mode, "dead") == 0) {
        WHERE("semantics: a receive from a rank that left");
        /* Rank 1 leaves once rank 0 took its synchronous message: nothing it sent is
         * still on the way. */
        if (rank == 1) {
            CHECK(MPI_Ssend(NULL, 0, MPI_INT, 0, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Ssend");
            _exit(0);
        }
        if (rank == 0) {
            CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Recv");
            MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
            int value = 0;
            MPI_Status status;
            const int code = MPI_Recv(&value, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &status);
            CHECK(code == MPI_ERR_PROC_FAILED, "a receive from a dead rank returned %d", code);
            printf("semantics: a receive from a dead rank returned MPI_ERR_PROC_FAILED\n");
            fflush(stdout);
        }
        _exit(0);
    }
    synchronous_sends(rank);
    counts(rank);
    waitall_errors(rank);
    freed_requests(rank);
    request_status(rank);
    cancelled_sends(rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("semantics: %d ranks ok\n", size);
    WHERE("semantics: MPI_Finalize");
    MPI_Finalize();
    return 0;
}
