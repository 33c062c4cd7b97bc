/* Communicators and groups, by their documented behaviour: a duplicate's messages
 * never match receives of the original (and its collectives never mix with the
 * original's); split groups by color and orders by key; create makes a communicator
 * of a group, MPI_COMM_NULL elsewhere; compare tells IDENT, CONGRUENT, SIMILAR,
 * UNEQUAL; groups include, exclude, translate, unite; names and MPI_TAG_UB; a freed
 * communicator is MPI_ERR_COMM; many communicators made in turn by different subsets
 * agree on their contexts without a server; create_group is called by the group's
 * members only. Runs with any number of ranks (1 too). */
#include "check.h"

#include <string.h>

static int sum_to(int n) { /* 0 + 1 + ... + (n - 1) */
    return n * (n - 1) / 2;
}

int main(int argc, char** argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS, "init");
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);

    WHERE("comms: dup keeps ranks and size, with contexts of its own");
    MPI_Comm dup = MPI_COMM_NULL;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS && dup != MPI_COMM_NULL, "dup");
    int r = -1;
    int s = -1;
    MPI_Comm_rank(dup, &r);
    MPI_Comm_size(dup, &s);
    CHECK(r == rank && s == size, "dup: rank %d of %d", r, s);
    int result = -1;
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &result);
    CHECK(result == MPI_IDENT, "world vs world: %d", result);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &result);
    CHECK(result == MPI_CONGRUENT, "world vs dup: %d", result);

    /* The message on dup is sent first, yet a wildcard receive on the world takes
     * the world's; then the dup's comes on dup. Also to itself. */
    int next = (rank + 1) % size;
    int prev = (rank + size - 1) % size;
    int on_dup = 1000 + rank;
    int on_world = 2000 + rank;
    MPI_Request sends[2];
    MPI_Isend(&on_dup, 1, MPI_INT, next, 5, dup, &sends[0]);
    MPI_Isend(&on_world, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &sends[1]);
    int got = -1;
    MPI_Status st;
    /* Let the dup's message arrive before the world's receive is posted. */
    int flag = 0;
    while (!flag)
        MPI_Iprobe(prev, 5, dup, &flag, MPI_STATUS_IGNORE);
    CHECK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv world");
    CHECK(got == 2000 + prev && st.MPI_SOURCE == prev && st.MPI_TAG == 5, "world got %d from %d", got, st.MPI_SOURCE);
    CHECK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &st) == MPI_SUCCESS, "recv dup");
    CHECK(got == 1000 + prev && st.MPI_SOURCE == prev, "dup got %d from %d", got, st.MPI_SOURCE);
    MPI_Waitall(2, sends, MPI_STATUSES_IGNORE);

    WHERE("comms: collectives on a dup and on the world in flight together");
    MPI_Request coll[2];
    int in_dup = rank + 1;
    int out_dup = 0;
    int in_world = 1;
    int out_world = 0;
    MPI_Iallreduce(&in_dup, &out_dup, 1, MPI_INT, MPI_SUM, dup, &coll[0]);
    MPI_Iallreduce(&in_world, &out_world, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &coll[1]);
    MPI_Waitall(2, coll, MPI_STATUSES_IGNORE);
    CHECK(out_dup == sum_to(size + 1) && out_world == size, "dup sum %d, world sum %d", out_dup, out_world);

    WHERE("comms: names and attributes");
    char name[MPI_MAX_OBJECT_NAME];
    int length = -1;
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &length);
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && length == 14, "world's name '%s'", name);
    MPI_Comm_get_name(dup, name, &length);
    CHECK(length == 0 && name[0] == '\0', "a new communicator's name '%s'", name);
    MPI_Comm_set_name(dup, "the duplicate");
    MPI_Comm_get_name(dup, name, &length);
    CHECK(strcmp(name, "the duplicate") == 0 && length == 13, "dup's name '%s'", name);
    int* tag_ub = NULL;
    flag = 0;
    CHECK(MPI_Comm_get_attr(dup, MPI_TAG_UB, &tag_ub, &flag) == MPI_SUCCESS, "get_attr");
    CHECK(flag == 1 && tag_ub != NULL && *tag_ub == MPI_TAG_UB_VALUE && *tag_ub >= 32767, "MPI_TAG_UB");
    /* The largest tag works, one more does not. */
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int big = 7;
    CHECK(MPI_Sendrecv_replace(&big, 1, MPI_INT, rank, *tag_ub, rank, *tag_ub, dup, &st) == MPI_SUCCESS, "largest tag");
    CHECK(MPI_Send(&big, 1, MPI_INT, rank, *tag_ub + 1, dup) == MPI_ERR_TAG, "a tag above MPI_TAG_UB");
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    MPI_Comm second = MPI_COMM_NULL;
    MPI_Comm_dup(dup, &second);
    MPI_Comm_get_errhandler(second, &handler);
    CHECK(handler == MPI_ERRORS_RETURN, "a duplicate keeps the error handler");

    WHERE("comms: split by color, ranks by key");
    /* Two colors (even and odd world ranks), keys reversed: the highest world rank of
     * each color is rank 0 there. */
    MPI_Comm half = MPI_COMM_NULL;
    CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half) == MPI_SUCCESS, "split");
    int half_size = (size + 1 - rank % 2) / 2; /* ranks of my parity */
    MPI_Comm_size(half, &s);
    MPI_Comm_rank(half, &r);
    int expected_rank = (size - 1 - rank) / 2; /* those of my parity above me */
    CHECK(s == half_size && r == expected_rank, "split: rank %d of %d, expected %d of %d", r, s, expected_rank,
          half_size);
    int root_world = -1;
    if (r == 0) root_world = rank;
    MPI_Bcast(&root_world, 1, MPI_INT, 0, half);
    CHECK(root_world % 2 == rank % 2 && root_world >= size - 2, "rank 0 of my color is world %d", root_world);
    int world_sum = 0;
    MPI_Allreduce(&rank, &world_sum, 1, MPI_INT, MPI_SUM, half);
    int expected_sum = 0;
    for (int i = rank % 2; i < size; i += 2)
        expected_sum += i;
    CHECK(world_sum == expected_sum, "sum of my color %d, expected %d", world_sum, expected_sum);
    /* Point to point in the split: a ring, sources reported as ranks of the split. */
    int token = rank;
    int from = -1;
    MPI_Sendrecv(&token, 1, MPI_INT, (r + 1) % s, 1, &from, 1, MPI_INT, (r + s - 1) % s, 1, half, &st);
    CHECK(st.MPI_SOURCE == (r + s - 1) % s, "source %d in the split", st.MPI_SOURCE);
    if (size > 2) {
        MPI_Comm_compare(MPI_COMM_WORLD, half, &result);
        CHECK(result == MPI_UNEQUAL, "world vs half: %d", result);
    }
    /* One color, keys reversed: the same ranks in another order. */
    MPI_Comm reversed = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &reversed);
    MPI_Comm_rank(reversed, &r);
    CHECK(r == size - 1 - rank, "reversed rank %d", r);
    MPI_Comm_compare(MPI_COMM_WORLD, reversed, &result);
    CHECK(result == (size > 1 ? MPI_SIMILAR : MPI_CONGRUENT), "world vs reversed: %d", result);
    /* MPI_UNDEFINED: no communicator. */
    MPI_Comm none = dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    CHECK((rank == 0) == (none == MPI_COMM_NULL), "MPI_UNDEFINED gives MPI_COMM_NULL on rank 0 only");
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);

    WHERE("comms: groups");
    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_size(world_group, &s);
    MPI_Group_rank(world_group, &r);
    CHECK(s == size && r == rank, "world group: rank %d of %d", r, s);
    int all_reversed[64];
    for (int i = 0; i < size; ++i)
        all_reversed[i] = size - 1 - i;
    MPI_Group backwards = MPI_GROUP_NULL;
    MPI_Group_incl(world_group, size, all_reversed, &backwards);
    MPI_Group_rank(backwards, &r);
    CHECK(r == size - 1 - rank, "incl: rank %d", r);
    int world_ranks[64];
    MPI_Group_translate_ranks(backwards, size, all_reversed, world_group, world_ranks);
    for (int i = 0; i < size; ++i)
        CHECK(world_ranks[i] == i, "translate: rank %d of backwards is world %d", all_reversed[i], world_ranks[i]);
    int zero = 0;
    MPI_Group without_zero = MPI_GROUP_NULL;
    MPI_Group_excl(world_group, 1, &zero, &without_zero);
    MPI_Group_size(without_zero, &s);
    MPI_Group_rank(without_zero, &r);
    CHECK(s == size - 1 && r == (rank == 0 ? MPI_UNDEFINED : rank - 1), "excl: rank %d of %d", r, s);
    int probe[2] = {0, MPI_PROC_NULL};
    int out[2] = {-5, -5};
    MPI_Group_translate_ranks(world_group, 2, probe, without_zero, out);
    CHECK(out[0] == MPI_UNDEFINED && out[1] == MPI_PROC_NULL, "translate of an excluded rank: %d %d", out[0], out[1]);
    MPI_Group only_zero = MPI_GROUP_NULL;
    MPI_Group_incl(world_group, 1, &zero, &only_zero);
    MPI_Group united = MPI_GROUP_NULL;
    MPI_Group_union(without_zero, only_zero, &united); /* world 1..n-1, then 0 */
    MPI_Group_size(united, &s);
    MPI_Group_rank(united, &r);
    CHECK(s == size && r == (rank == 0 ? size - 1 : rank - 1), "union: rank %d of %d", r, s);
    int twice[2] = {0, 0};
    MPI_Group bad = MPI_GROUP_NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Group_incl(world_group, 2, twice, &bad) == MPI_ERR_RANK, "a rank given twice");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    WHERE("comms: create from a group");
    MPI_Comm without = dup;
    CHECK(MPI_Comm_create(MPI_COMM_WORLD, without_zero, &without) == MPI_SUCCESS, "create");
    if (rank == 0) {
        CHECK(without == MPI_COMM_NULL, "rank 0 is not in the group");
    } else {
        MPI_Comm_rank(without, &r);
        MPI_Comm_size(without, &s);
        CHECK(r == rank - 1 && s == size - 1, "created: rank %d of %d", r, s);
        int one = 1;
        int count = 0;
        MPI_Allreduce(&one, &count, 1, MPI_INT, MPI_SUM, without);
        CHECK(count == size - 1, "created: %d members answered", count);
        MPI_Comm_free(&without);
    }
    MPI_Group_free(&united);
    MPI_Group_free(&only_zero);
    MPI_Group_free(&without_zero);
    MPI_Group_free(&backwards);
    MPI_Group_free(&world_group);
    CHECK(world_group == MPI_GROUP_NULL, "freed group handle");

    WHERE("comms: contexts agreed by subsets in turn");
    /* Subsets make communicators in different numbers, then all make more: each new
     * one's messages stay apart from every other's. */
    MPI_Comm made[8];
    int which[8]; /* the same on sender and receiver of each communicator */
    int n_made = 0;
    for (int j = 0; j < (rank % 2 == 0 ? 2 : 1); ++j) {
        which[n_made] = 10 + j;
        MPI_Comm_dup(half, &made[n_made++]);
    }
    for (int round = 0; round < 4; ++round) {
        which[n_made] = 20 + round;
        MPI_Comm_dup(MPI_COMM_WORLD, &made[n_made++]);
    }
    /* A message on each, tag 0, from prev; each received on its own communicator in
     * reverse order. */
    MPI_Request reqs[8];
    int payload[8];
    for (int i = 0; i < n_made; ++i) {
        payload[i] = which[i] * 100 + rank;
        int rr = 0;
        int ss = 0;
        MPI_Comm_rank(made[i], &rr);
        MPI_Comm_size(made[i], &ss);
        MPI_Isend(&payload[i], 1, MPI_INT, (rr + 1) % ss, 0, made[i], &reqs[i]);
    }
    for (int i = n_made - 1; i >= 0; --i) {
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, made[i], &st);
        CHECK(v / 100 == which[i], "communicator %d got the message of communicator %d", which[i], v / 100);
    }
    MPI_Waitall(n_made, reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < n_made; ++i)
        MPI_Comm_free(&made[i]);

    WHERE("comms: create_group by the group's members only");
    /* Even and odd ranks each make a communicator of their own parity at once, the
     * other parity taking no part; then a subset of the evens (rank 0 and 2) makes one
     * with another tag while the odds do nothing: each works, and a world collective
     * after them still matches. */
    MPI_Group world_g;
    MPI_Comm_group(MPI_COMM_WORLD, &world_g);
    int parity_ranks[64];
    int n_parity = 0;
    for (int i = rank % 2; i < size && n_parity < 64; i += 2)
        parity_ranks[n_parity++] = i;
    MPI_Group parity_g;
    MPI_Group_incl(world_g, n_parity, parity_ranks, &parity_g);
    MPI_Comm parity = MPI_COMM_NULL;
    CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, parity_g, 5, &parity) == MPI_SUCCESS && parity != MPI_COMM_NULL,
          "create_group of parity %d", rank % 2);
    int prank = -1;
    int psize = -1;
    MPI_Comm_rank(parity, &prank);
    MPI_Comm_size(parity, &psize);
    CHECK(psize == n_parity && prank == rank / 2, "parity rank %d of %d", prank, psize);
    int wsum = rank;
    MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_INT, MPI_SUM, parity);
    int want = 0;
    for (int i = 0; i < n_parity; ++i)
        want += parity_ranks[i];
    CHECK(wsum == want, "the parity communicator's sum %d, expected %d", wsum, want);
    if (rank % 2 == 0 && rank <= 2) {
        const int pair[2] = {0, 2};
        MPI_Group pair_g;
        MPI_Group_incl(world_g, size > 2 ? 2 : 1, pair, &pair_g);
        MPI_Comm two = MPI_COMM_NULL;
        CHECK(MPI_Comm_create_group(parity, pair_g, 6, &two) == MPI_SUCCESS && two != MPI_COMM_NULL, "pair");
        int tsum = rank + 1;
        MPI_Allreduce(MPI_IN_PLACE, &tsum, 1, MPI_INT, MPI_SUM, two);
        CHECK(tsum == (size > 2 ? 4 : 1), "the pair's sum %d", tsum);
        MPI_Comm_free(&two);
        MPI_Group_free(&pair_g);
    }
    MPI_Comm empty = parity;
    CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_EMPTY, 7, &empty) == MPI_SUCCESS && empty == MPI_COMM_NULL,
          "an empty group gives MPI_COMM_NULL");
    wsum = 1;
    MPI_Allreduce(MPI_IN_PLACE, &wsum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(wsum == size, "the world's collective after create_group: %d", wsum);
    MPI_Comm_free(&parity);
    MPI_Group_free(&parity_g);
    MPI_Group_free(&world_g);

    WHERE("comms: free");
    MPI_Comm freed = second;
    CHECK(MPI_Comm_free(&second) == MPI_SUCCESS && second == MPI_COMM_NULL, "free");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Send(&big, 1, MPI_INT, 0, 0, freed) == MPI_ERR_COMM, "a freed communicator");
    MPI_Comm world = MPI_COMM_WORLD;
    CHECK(MPI_Comm_free(&world) == MPI_ERR_COMM, "MPI_COMM_WORLD cannot be freed");
    MPI_Comm_free(&reversed);
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("comms: %d ranks ok\n", size);
    MPI_Finalize();
    return 0;
}
