/* Calls of MPI-4 and of MPI-1 that programs use, by their documented behaviour:
 * MPI_Info objects made and read before MPI_Init and after MPI_Finalize;
 * MPI_Info_create_env (the same before and after MPI_Init); MPI_Info_get_string (the length with its NUL, the value cut
 * to the buffer); MPI_Isendrecv (one request: the receive's status, complete when both are) and MPI_Isendrecv_replace
 * (the buffer sent, then received into), with MPI_PROC_NULL; MPI_Comm_idup_with_info; MPI_Comm_disconnect;
 * MPI_Errhandler_set and MPI_Errhandler_get as MPI_Comm_set_errhandler and _get. Runs with any number of ranks (1 too).
 */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Info before;
    CHECK(MPI_Info_create(&before) == MPI_SUCCESS, "MPI_Info_create before MPI_Init");
    CHECK(MPI_Info_set(before, "colour", "blue") == MPI_SUCCESS, "MPI_Info_set before MPI_Init");
    MPI_Info env_before;
    CHECK(MPI_Info_create_env(argc, argv, &env_before) == MPI_SUCCESS, "MPI_Info_create_env before MPI_Init");
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS, "init");
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(120, rank);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    WHERE("calls: MPI_Info_get_string");
    char value[16];
    int buflen = sizeof value, flag = 0;
    CHECK(MPI_Info_get_string(before, "colour", &buflen, value, &flag) == MPI_SUCCESS && flag == 1 && buflen == 5 &&
              strcmp(value, "blue") == 0,
          "get_string: flag %d buflen %d value %s", flag, buflen, value);
    buflen = 3;
    MPI_Info_get_string(before, "colour", &buflen, value, &flag);
    CHECK(flag == 1 && buflen == 5 && strcmp(value, "bl") == 0, "a short buffer: buflen %d value %s", buflen, value);
    buflen = 0;
    MPI_Info_get_string(before, "colour", &buflen, NULL, &flag);
    CHECK(flag == 1 && buflen == 5, "buflen 0: the length only (%d)", buflen);
    MPI_Info_get_string(before, "shape", &buflen, value, &flag);
    CHECK(flag == 0, "a missing key: flag %d", flag);

    WHERE("calls: MPI_Info_create_env, the same before MPI_Init and after");
    MPI_Info env_after;
    MPI_Info_create_env(argc, argv, &env_after);
    const char* keys[] = {"command", "argv", "host", "wdir"};
    for (int i = 0; i < 4; ++i) {
        char v1[MPI_MAX_INFO_VAL], v2[MPI_MAX_INFO_VAL];
        int n1 = MPI_MAX_INFO_VAL, n2 = MPI_MAX_INFO_VAL, f1 = 0, f2 = 0;
        MPI_Info_get_string(env_before, keys[i], &n1, v1, &f1);
        MPI_Info_get_string(env_after, keys[i], &n2, v2, &f2);
        CHECK(f1 == f2 && (!f1 || strcmp(v1, v2) == 0), "create_env's %s differs: %s, %s", keys[i], f1 ? v1 : "-",
              f2 ? v2 : "-");
    }
    int n_env = 0;
    MPI_Info_get_string(env_after, "command", &n_env, NULL, &flag);
    CHECK(flag == 1 && n_env > 1, "create_env has the command");
    MPI_Info_free(&env_before);
    MPI_Info_free(&env_after);

    WHERE("calls: MPI_Isendrecv");
    int out = rank, in = -1;
    MPI_Request req;
    CHECK(MPI_Isendrecv(&out, 1, MPI_INT, next, 3, &in, 1, MPI_INT, prev, 3, MPI_COMM_WORLD, &req) == MPI_SUCCESS,
          "isendrecv");
    MPI_Status st;
    CHECK(MPI_Wait(&req, &st) == MPI_SUCCESS && req == MPI_REQUEST_NULL, "wait");
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(in == prev && st.MPI_SOURCE == prev && st.MPI_TAG == 3 && count == 1, "isendrecv got %d from %d tag %d", in,
          st.MPI_SOURCE, st.MPI_TAG);
    /* A large one in both directions at once (neither side's receive is posted by a
     * blocking call): it completes. */
    enum { N = 1 << 18 };
    int* big_out = malloc(N * sizeof(int));
    int* big_in = malloc(N * sizeof(int));
    CHECK(big_out && big_in, "malloc");
    for (int i = 0; i < N; ++i)
        big_out[i] = rank * 7 + i;
    MPI_Isendrecv(big_out, N, MPI_INT, prev, 4, big_in, N, MPI_INT, next, 4, MPI_COMM_WORLD, &req);
    flag = 0;
    while (!flag)
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    for (int i = 0; i < N; ++i)
        if (big_in[i] != next * 7 + i) CHECK(0, "isendrecv of 1 MiB: element %d is %d", i, big_in[i]);
    MPI_Isendrecv(&out, 1, MPI_INT, MPI_PROC_NULL, 0, &in, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, &st);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "isendrecv with MPI_PROC_NULL: source %d", st.MPI_SOURCE);

    WHERE("calls: MPI_Isendrecv_replace");
    int pair[2] = {rank, -rank};
    MPI_Isendrecv_replace(pair, 2, MPI_INT, next, 5, prev, 5, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, &st);
    CHECK(pair[0] == prev && pair[1] == -prev && st.MPI_SOURCE == prev, "isendrecv_replace got (%d, %d)", pair[0],
          pair[1]);

    WHERE("calls: MPI_Comm_idup_with_info, MPI_Comm_disconnect");
    MPI_Comm copy;
    CHECK(MPI_Comm_idup_with_info(MPI_COMM_WORLD, before, &copy, &req) == MPI_SUCCESS, "idup_with_info");
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int n = 1;
    MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT, MPI_SUM, copy);
    CHECK(n == size, "allreduce over the copy: %d", n);
    CHECK(MPI_Comm_disconnect(&copy) == MPI_SUCCESS && copy == MPI_COMM_NULL, "disconnect");

    WHERE("calls: MPI_Errhandler_set, MPI_Errhandler_get");
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(MPI_Errhandler_set(dup, MPI_ERRORS_RETURN) == MPI_SUCCESS, "errhandler_set");
    MPI_Errhandler h = MPI_ERRHANDLER_NULL;
    CHECK(MPI_Errhandler_get(dup, &h) == MPI_SUCCESS && h == MPI_ERRORS_RETURN, "errhandler_get");
    CHECK(MPI_Send(&out, 1, MPI_INT, size, 0, dup) == MPI_ERR_RANK, "the handler set returns the error");
    MPI_Comm_free(&dup);

    free(big_out);
    free(big_in);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("calls: %d ranks ok\n", size);
    MPI_Finalize();
    buflen = sizeof value;
    CHECK(MPI_Info_get_string(before, "colour", &buflen, value, &flag) == MPI_SUCCESS && flag == 1,
          "MPI_Info_get_string after MPI_Finalize");
    CHECK(MPI_Info_free(&before) == MPI_SUCCESS && before == MPI_INFO_NULL, "MPI_Info_free after MPI_Finalize");
    return 0;
}
