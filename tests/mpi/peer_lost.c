/* A collective with a rank that died: the last rank exits at once;
 * each other rank's collective then returns MPI_ERR_PROC_FAILED (under
 * MPI_ERRORS_RETURN) instead of waiting forever: `peer_lost` with MPI_Iallreduce and
 * MPI_Wait, `peer_lost blocking` with MPI_Allreduce. A survivor whose partner in the
 * schedule was another survivor learns of the loss when that one exits after its own
 * error, so every survivor returns. Then a receive naming the dead rank returns
 * MPI_ERR_PROC_FAILED too. They leave with _exit(0) (MPI_Finalize's barrier
 * cannot complete without the dead rank). */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(120, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int blocking = argc > 1 && strcmp(argv[1], "blocking") == 0;
    /* The last rank leaves once each other rank took its synchronous message: nothing
     * it sent is still on the way (a barrier's last message could be). */
    WHERE("peer_lost: the last rank's goodbye");
    if (rank == size - 1) {
        for (int r = 0; r < size - 1; ++r)
            CHECK(MPI_Ssend(NULL, 0, MPI_INT, r, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Ssend");
        _exit(0);
    }
    CHECK(MPI_Recv(NULL, 0, MPI_INT, size - 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Recv");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    WHERE("peer_lost: %s with a dead rank", blocking ? "MPI_Allreduce" : "MPI_Iallreduce and MPI_Wait");
    int in[64], out[64];
    for (int i = 0; i < 64; ++i)
        in[i] = rank + i;
    int code;
    if (blocking) {
        code = MPI_Allreduce(in, out, 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    } else {
        MPI_Request request;
        CHECK(MPI_Iallreduce(in, out, 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Iallreduce");
        code = MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    CHECK(code == MPI_ERR_PROC_FAILED, "the collective returned %d (%s), not MPI_ERR_PROC_FAILED", code, text);
    /* A receive naming the dead rank: MPI_ERR_PROC_FAILED, not a wait forever
     * (blocking: MPI_Recv, comm's blocking receive; else MPI_Irecv and MPI_Wait). */
    WHERE("peer_lost: a receive from the dead rank");
    int v = 0;
    MPI_Status st;
    st.MPI_ERROR = MPI_ERR_DIMS;
    if (blocking) {
        code = MPI_Recv(&v, 1, MPI_INT, size - 1, 2, MPI_COMM_WORLD, &st);
    } else {
        MPI_Request request;
        CHECK(MPI_Irecv(&v, 1, MPI_INT, size - 1, 2, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "MPI_Irecv");
        code = MPI_Wait(&request, &st);
    }
    /* (A completion of one request reports its error by its return code only: the
     * status' MPI_ERROR stays as the program set it.) */
    CHECK(code == MPI_ERR_PROC_FAILED && st.MPI_SOURCE == size - 1,
          "the receive from the dead rank returned %d (status source %d)", code, st.MPI_SOURCE);
    printf("peer_lost: rank %d: %s\n", rank, text);
    fflush(stdout);
    _exit(0);
}
