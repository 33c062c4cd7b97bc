/* The contexts of communicators made at run time: MPI_Comm_free gives a
 * communicator's contexts back, so a program may make and free communicators
 * without end (more dup and free cycles than there are contexts, batches of many
 * alive at once whose messages never cross, splits where some ranks are
 * MPI_UNDEFINED); several agreements may be in flight on a rank at once, in different
 * orders on different ranks: two MPI_Comm_idup of communicators that overlap, each
 * rank starting them in the other order, and MPI_Comm_create_group while an idup is
 * pending on some ranks and not yet started on the others. Runs with any number of
 * ranks (1 too). */
#include "check.h"

/* Every rank sends its rank to the next on each of comms[0..n) (ranks of that
 * communicator), then receives from the previous on them in reverse order: a
 * message sent on one communicator is received on that one only. */
static void check_apart(MPI_Comm* comms, int n) {
    for (int i = 0; i < n; ++i) {
        int rank = 0, size = 0;
        MPI_Comm_rank(comms[i], &rank);
        MPI_Comm_size(comms[i], &size);
        const int v = rank * 1000 + i;
        MPI_Request send;
        MPI_Isend(&v, 1, MPI_INT, (rank + 1) % size, 0, comms[i], &send);
        MPI_Wait(&send, MPI_STATUS_IGNORE); /* (small: buffered) */
    }
    for (int i = n - 1; i >= 0; --i) {
        int rank = 0, size = 0;
        MPI_Comm_rank(comms[i], &rank);
        MPI_Comm_size(comms[i], &size);
        const int prev = (rank + size - 1) % size;
        int got = -1;
        MPI_Recv(&got, 1, MPI_INT, prev, 0, comms[i], MPI_STATUS_IGNORE);
        CHECK(got == prev * 1000 + i, "communicator %d received %d, not %d", i, got, prev * 1000 + i);
    }
}

int main(int argc, char** argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS, "init");
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(280, rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* comm has 65531 contexts for communicators, two per communicator: without
     * reuse the cycles below would run out. */
    WHERE("contexts: more dup and free cycles than there are contexts");
    enum { cycles = 33000 };
    for (int i = 0; i < cycles; ++i) {
        MPI_Comm c = MPI_COMM_NULL;
        const int code = MPI_Comm_dup(MPI_COMM_WORLD, &c);
        CHECK(code == MPI_SUCCESS, "dup %d of %d returned %d", i, cycles, code);
        CHECK(MPI_Comm_free(&c) == MPI_SUCCESS, "free %d", i);
    }

    WHERE("contexts: batches of communicators alive at once");
    enum { batch = 100 };
    MPI_Comm comms[batch];
    for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < batch; ++i)
            CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[i]) == MPI_SUCCESS, "dup %d of round %d", i, round);
        check_apart(comms, batch);
        for (int i = 0; i < batch; ++i)
            MPI_Comm_free(&comms[i]);
    }

    WHERE("contexts: splits where some ranks are MPI_UNDEFINED");
    for (int i = 0; i < 2000; ++i) {
        MPI_Comm part = MPI_COMM_NULL;
        const int color = (rank + i) % 3 == 0 ? MPI_UNDEFINED : (rank + i) % 2;
        CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &part) == MPI_SUCCESS, "split %d", i);
        CHECK((color == MPI_UNDEFINED) == (part == MPI_COMM_NULL), "split %d: color %d", i, color);
        if (part != MPI_COMM_NULL) {
            int n = 1;
            MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT, MPI_SUM, part);
            int expected = 0;
            for (int r = 0; r < size; ++r)
                expected += (r + i) % 3 != 0 && (r + i) % 2 == color;
            CHECK(n == expected, "split %d: %d members, not %d", i, n, expected);
            MPI_Comm_free(&part);
        }
    }

    WHERE("contexts: two idups in flight, started in the other order on odd ranks");
    MPI_Comm a = MPI_COMM_NULL, b = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &b); /* the same ranks, reversed */
    MPI_Comm made[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
    MPI_Request reqs[2];
    if (rank % 2 == 0) {
        CHECK(MPI_Comm_idup(a, &made[0], &reqs[0]) == MPI_SUCCESS, "idup of a");
        CHECK(MPI_Comm_idup(b, &made[1], &reqs[1]) == MPI_SUCCESS, "idup of b");
    } else {
        CHECK(MPI_Comm_idup(b, &made[1], &reqs[1]) == MPI_SUCCESS, "idup of b");
        CHECK(MPI_Comm_idup(a, &made[0], &reqs[0]) == MPI_SUCCESS, "idup of a");
    }
    CHECK(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "the idups completed");
    MPI_Comm four[4] = {a, b, made[0], made[1]};
    check_apart(four, 4);
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(made[0], a, &result);
    CHECK(result == MPI_CONGRUENT, "the idup of a is congruent to a: %d", result);
    int n = 1;
    MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT, MPI_SUM, made[1]);
    CHECK(n == size, "allreduce over the idup of b: %d", n);
    for (int i = 0; i < 2; ++i)
        MPI_Comm_free(&made[i]);

    WHERE("contexts: create_group while an idup is pending on odd ranks only");
    MPI_Group world_g;
    MPI_Comm_group(MPI_COMM_WORLD, &world_g);
    MPI_Comm grouped = MPI_COMM_NULL, copy = MPI_COMM_NULL;
    MPI_Request req;
    if (rank % 2 == 0) {
        CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, world_g, 5, &grouped) == MPI_SUCCESS, "create_group");
        CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup");
    } else {
        CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &copy, &req) == MPI_SUCCESS, "idup");
        CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, world_g, 5, &grouped) == MPI_SUCCESS, "create_group");
    }
    CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS, "the idup completed");
    MPI_Comm three[3] = {grouped, copy, a};
    check_apart(three, 3);
    MPI_Group_free(&world_g);
    MPI_Comm_free(&grouped);
    MPI_Comm_free(&copy);
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("contexts: %d ranks ok\n", size);
    MPI_Finalize();
    return 0;
}
