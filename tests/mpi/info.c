/* MPI_Info: set, get (truncated to valuelen), replace, count and list keys in the
 * order they were first set, delete, dup (an independent copy), free; the limits
 * MPI_MAX_INFO_KEY and MPI_MAX_INFO_VAL and the error class of each bad use. */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(120, rank);
    WHERE("info: set and get");
    MPI_Info info = MPI_INFO_NULL;
    CHECK(MPI_Info_create(&info) == MPI_SUCCESS && info != MPI_INFO_NULL, "create");
    int n = -1;
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 0, "nkeys %d", n);
    CHECK(MPI_Info_set(info, "cb_nodes", "4") == MPI_SUCCESS, "set");
    CHECK(MPI_Info_set(info, "host", "node-a") == MPI_SUCCESS, "set");
    CHECK(MPI_Info_set(info, "wdir", "/tmp") == MPI_SUCCESS, "set");
    CHECK(MPI_Info_set(info, "cb_nodes", "16") == MPI_SUCCESS, "set again replaces");
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 3, "nkeys %d", n);
    char value[MPI_MAX_INFO_VAL + 1];
    char key[MPI_MAX_INFO_KEY + 1];
    int flag = -1;
    CHECK(MPI_Info_get(info, "cb_nodes", MPI_MAX_INFO_VAL, value, &flag) == MPI_SUCCESS && flag == 1 &&
              strcmp(value, "16") == 0,
          "get cb_nodes: flag %d '%s'", flag, value);
    memset(value, 'x', sizeof value);
    CHECK(MPI_Info_get(info, "host", 3, value, &flag) == MPI_SUCCESS && flag == 1 && strcmp(value, "nod") == 0,
          "get truncated: '%.8s'", value);
    CHECK(MPI_Info_get(info, "absent", MPI_MAX_INFO_VAL, value, &flag) == MPI_SUCCESS && flag == 0, "absent");
    int length = -1;
    CHECK(MPI_Info_get_valuelen(info, "host", &length, &flag) == MPI_SUCCESS && flag == 1 && length == 6, "valuelen %d",
          length);
    const char* order[3] = {"cb_nodes", "host", "wdir"};
    for (int i = 0; i < 3; ++i) {
        CHECK(MPI_Info_get_nthkey(info, i, key) == MPI_SUCCESS && strcmp(key, order[i]) == 0, "key %d: '%s'", i, key);
    }

    WHERE("info: dup, delete, free");
    MPI_Info copy = MPI_INFO_NULL;
    CHECK(MPI_Info_dup(info, &copy) == MPI_SUCCESS && copy != info, "dup");
    CHECK(MPI_Info_delete(info, "host") == MPI_SUCCESS, "delete");
    CHECK(MPI_Info_get_nkeys(info, &n) == MPI_SUCCESS && n == 2, "nkeys after delete %d", n);
    CHECK(MPI_Info_get_nthkey(info, 1, key) == MPI_SUCCESS && strcmp(key, "wdir") == 0, "key 1 after delete '%s'", key);
    CHECK(MPI_Info_get(copy, "host", MPI_MAX_INFO_VAL, value, &flag) == MPI_SUCCESS && flag == 1 &&
              strcmp(value, "node-a") == 0,
          "the copy keeps the deleted key");
    CHECK(MPI_Info_set(copy, "wdir", "/var") == MPI_SUCCESS, "set on the copy");
    CHECK(MPI_Info_get(info, "wdir", MPI_MAX_INFO_VAL, value, &flag) == MPI_SUCCESS && strcmp(value, "/tmp") == 0,
          "the original is untouched by the copy's set: '%s'", value);

    WHERE("info: limits and errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    memset(key, 'k', MPI_MAX_INFO_KEY - 1);
    key[MPI_MAX_INFO_KEY - 1] = '\0'; /* the longest key */
    memset(value, 'v', MPI_MAX_INFO_VAL - 1);
    value[MPI_MAX_INFO_VAL - 1] = '\0'; /* the longest value */
    CHECK(MPI_Info_set(info, key, value) == MPI_SUCCESS, "the longest key and value");
    char back[MPI_MAX_INFO_VAL + 1];
    CHECK(MPI_Info_get(info, key, MPI_MAX_INFO_VAL, back, &flag) == MPI_SUCCESS && flag == 1 &&
              strcmp(back, value) == 0,
          "the longest value back");
    CHECK(MPI_Info_get_nthkey(info, 2, back) == MPI_SUCCESS && strcmp(back, key) == 0, "the longest key back");
    key[MPI_MAX_INFO_KEY - 1] = 'k';
    key[MPI_MAX_INFO_KEY] = '\0';
    expect_error(MPI_Info_set(info, key, "1"), MPI_ERR_INFO_KEY, "more than 254 (MPI_MAX_INFO_KEY - 1)");
    value[MPI_MAX_INFO_VAL - 1] = 'v';
    value[MPI_MAX_INFO_VAL] = '\0';
    expect_error(MPI_Info_set(info, "k", value), MPI_ERR_INFO_VALUE, "more than 1023 (MPI_MAX_INFO_VAL - 1)");
    expect_error(MPI_Info_set(info, "", "1"), MPI_ERR_INFO_KEY, "empty");
    expect_error(MPI_Info_set(info, "k", ""), MPI_ERR_INFO_VALUE, "empty");
    expect_error(MPI_Info_delete(info, "absent"), MPI_ERR_INFO_NOKEY, "no key 'absent'");
    expect_error(MPI_Info_get_nthkey(info, 3, back), MPI_ERR_ARG, "key number 3 of an info with 3 keys");
    expect_error(MPI_Info_get(info, "wdir", -1, back, &flag), MPI_ERR_ARG, "negative valuelen");
    expect_error(MPI_Info_set(MPI_INFO_NULL, "k", "1"), MPI_ERR_INFO, "MPI_INFO_NULL");

    MPI_Info freed = info;
    CHECK(MPI_Info_free(&info) == MPI_SUCCESS && info == MPI_INFO_NULL, "free");
    expect_error(MPI_Info_get_nkeys(freed, &n), MPI_ERR_INFO, "invalid info object");
    CHECK(MPI_Info_get_nkeys(copy, &n) == MPI_SUCCESS && n == 3, "the copy outlives the original: %d", n);
    CHECK(MPI_Info_free(&copy) == MPI_SUCCESS, "free the copy");

    /* MPI_INFO_ENV: the command this program was started as, the world's size, read only. */
    CHECK(MPI_Info_get(MPI_INFO_ENV, "command", MPI_MAX_INFO_VAL, back, &flag) == MPI_SUCCESS && flag == 1 &&
              strstr(back, "mpi_info") != NULL,
          "MPI_INFO_ENV command '%s'", back);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(MPI_Info_get(MPI_INFO_ENV, "maxprocs", MPI_MAX_INFO_VAL, back, &flag) == MPI_SUCCESS && flag == 1 &&
              atoi(back) == size,
          "MPI_INFO_ENV maxprocs '%s' of %d", back, size);
    CHECK(MPI_Info_get(MPI_INFO_ENV, "thread_level", MPI_MAX_INFO_VAL, back, &flag) == MPI_SUCCESS && flag == 1 &&
              strncmp(back, "MPI_THREAD_", 11) == 0,
          "MPI_INFO_ENV thread_level '%s'", back);
    expect_error(MPI_Info_set(MPI_INFO_ENV, "k", "1"), MPI_ERR_INFO, "MPI_INFO_ENV is read only");
    MPI_Info env = MPI_INFO_ENV;
    expect_error(MPI_Info_free(&env), MPI_ERR_INFO, "read only");

    /* A communicator's hints: none is used, none comes back; a bad info object is refused. */
    MPI_Info hints = MPI_INFO_NULL;
    MPI_Info_create(&hints);
    MPI_Info_set(hints, "no_such_hint", "true");
    MPI_Comm dup = MPI_COMM_NULL;
    CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, hints, &dup) == MPI_SUCCESS && dup != MPI_COMM_NULL, "dup_with_info");
    CHECK(MPI_Comm_set_info(dup, hints) == MPI_SUCCESS, "set_info");
    MPI_Info used = MPI_INFO_NULL;
    CHECK(MPI_Comm_get_info(dup, &used) == MPI_SUCCESS && used != MPI_INFO_NULL, "get_info");
    CHECK(MPI_Info_get_nkeys(used, &n) == MPI_SUCCESS && n == 0, "hints used: %d", n);
    MPI_Info_free(&used);
    int token = rank;
    MPI_Allreduce(MPI_IN_PLACE, &token, 1, MPI_INT, MPI_SUM, dup);
    CHECK(token == size * (size - 1) / 2, "the duplicate works: %d", token);
    expect_error(MPI_Comm_set_info(dup, freed), MPI_ERR_INFO, "invalid info object");
    MPI_Comm none = MPI_COMM_NULL;
    expect_error(MPI_Comm_dup_with_info(dup, freed, &none), MPI_ERR_INFO, "invalid info object");
    MPI_Info_free(&hints);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    if (rank == 0) printf("info: all checks passed\n");
    return 0;
}
