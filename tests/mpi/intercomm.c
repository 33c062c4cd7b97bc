/* Intercommunicators: the world split by parity, the halves joined by
 * MPI_Intercomm_create (leaders world ranks 0 and 1): MPI_Comm_test_inter, sizes
 * (local and remote), MPI_Comm_remote_group; point to point across (each rank to
 * remote rank r % remote size, received from MPI_ANY_SOURCE with the sender's rank in
 * the remote group); a collective on it is MPI_ERR_COMM; MPI_Intercomm_merge with
 * the odd half high: the evens first, then an Allreduce over the union. */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(120, rank);
    CHECK(size >= 2, "at least 2 ranks");
    const int color = rank % 2;
    MPI_Comm half, inter, merged;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
    int flag = -1;
    MPI_Comm_test_inter(half, &flag);
    CHECK(flag == 0, "a split is no intercommunicator");
    WHERE("intercomm: create");
    CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 7, &inter) == MPI_SUCCESS, "intercomm_create");
    MPI_Comm_test_inter(inter, &flag);
    CHECK(flag == 1, "test_inter");
    const int evens = (size + 1) / 2, odds = size / 2;
    const int local = color == 0 ? evens : odds, remote = color == 0 ? odds : evens;
    int n = -1, r = -1;
    MPI_Comm_size(inter, &n);
    CHECK(n == local, "local size %d, expected %d", n, local);
    MPI_Comm_remote_size(inter, &n);
    CHECK(n == remote, "remote size %d, expected %d", n, remote);
    MPI_Comm_rank(inter, &r);
    CHECK(r == rank / 2, "rank %d, expected %d", r, rank / 2);
    MPI_Group g, w;
    int translated = -1, zero = 0;
    MPI_Comm_remote_group(inter, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_translate_ranks(g, 1, &zero, w, &translated);
    CHECK(translated == 1 - color, "the remote group's rank 0 is world rank %d", translated);
    MPI_Group_free(&g);
    MPI_Group_free(&w);

    WHERE("intercomm: point to point");
    /* Each rank sends to remote rank r % remote; each receives from every remote rank
     * q with q % local == r. */
    const int out = 1000 * rank + 5;
    MPI_Request s;
    MPI_Isend(&out, 1, MPI_INT, r % remote, 3, inter, &s);
    int expected = 0;
    for (int q = 0; q < remote; ++q)
        if (q % local == r) ++expected;
    for (int i = 0; i < expected; ++i) {
        int in = -1;
        MPI_Status st;
        MPI_Recv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 3, inter, &st);
        const int world_of_sender = 2 * st.MPI_SOURCE + (1 - color);
        CHECK(st.MPI_SOURCE % local == r && in == 1000 * world_of_sender + 5, "from remote %d: %d", st.MPI_SOURCE, in);
    }
    MPI_Wait(&s, MPI_STATUS_IGNORE);

    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int x = 1, y = 0;
    expect_error(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM, "on an intercommunicator");
    expect_error(MPI_Bcast(&x, 1, MPI_INT, 0, inter), MPI_ERR_COMM, "on an intercommunicator");
    MPI_Comm_set_errhandler(half, MPI_ERRORS_RETURN);
    expect_error(MPI_Comm_remote_size(half, &n), MPI_ERR_COMM, "not an intercommunicator");

    WHERE("intercomm: merge");
    const int merge_code = MPI_Intercomm_merge(inter, color, &merged);
    if (merge_code != MPI_SUCCESS) expect_error(merge_code, MPI_SUCCESS, "merge");
    MPI_Comm_size(merged, &n);
    MPI_Comm_rank(merged, &r);
    CHECK(n == size, "merged size %d", n);
    CHECK(r == (color == 0 ? rank / 2 : evens + rank / 2), "merged rank %d", r);
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged);
    CHECK(sum == size * (size - 1) / 2, "allreduce over the merged: %d", sum);
    int first = -1;
    int me = rank;
    MPI_Bcast(rank == 0 ? &me : &first, 1, MPI_INT, 0, merged);
    CHECK(rank == 0 || first == 0, "merged rank 0 is world rank 0: %d", first);

    MPI_Comm_free(&merged);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("intercomm: passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
