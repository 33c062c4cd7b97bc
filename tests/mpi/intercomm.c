/* Intercommunicators: the world split by parity, the halves joined by
 * MPI_Intercomm_create (leaders world ranks 0 and 1): MPI_Comm_test_inter, sizes
 * (local and remote), MPI_Comm_remote_group; point to point across (each rank to
 * remote rank r % remote size, received from MPI_ANY_SOURCE with the sender's rank in
 * the remote group); its collectives (collectives() below), MPI_IN_PLACE and a bad
 * root refused, a Scan on it MPI_ERR_COMM (MPI defines it on intracommunicators only); MPI_Intercomm_merge with
 * the odd half high: the evens first, then an Allreduce over the union. */
#include "check.h"

/* World rank of rank q of the group of colour c. */
static int world_of(int q, int c) {
    return 2 * q + c;
}

/* The collectives of an intercommunicator (MPI 3.1, 5.2.2): data flows between the
 * groups; a rooted one's root passes MPI_ROOT, the rest of its group MPI_PROC_NULL,
 * the other group the root's rank in it. */
static void collectives(MPI_Comm inter, int rank, int color, int r, int local, int remote) {
    const int other = 1 - color;
    WHERE("intercomm collectives: bcast from even rank 0, then from the last odd rank, small and large");
    enum { large = 70000 }; /* 280 KB: above the eager limit */
    static int big[large];
    for (int pass = 0; pass < 2; ++pass) {
        const int root_color = pass; /* evens' rank 0, then the odds' last rank */
        const int root_rank = root_color == 0 ? 0 : (color == 1 ? local - 1 : remote - 1);
        int root;
        if (color == root_color)
            root = r == root_rank ? MPI_ROOT : MPI_PROC_NULL;
        else
            root = root_rank;
        int value = color == root_color && r == root_rank ? 4200 + rank : -1;
        for (int i = 0; i < large; ++i)
            big[i] = color == root_color && r == root_rank ? i * 3 + rank : -1;
        MPI_Bcast(&value, 1, MPI_INT, root, inter);
        MPI_Bcast(big, large, MPI_INT, root, inter);
        const int root_world = world_of(root_rank, root_color);
        if (color != root_color) {
            CHECK(value == 4200 + root_world, "bcast %d: got %d", pass, value);
            for (int i = 0; i < large; ++i)
                CHECK(big[i] == i * 3 + root_world, "bcast %d: big[%d] = %d", pass, i, big[i]);
        } else if (r != root_rank) {
            CHECK(value == -1 && big[0] == -1, "bcast %d: MPI_PROC_NULL rank's buffer changed", pass);
        }
    }

    WHERE("intercomm collectives: reduce to even rank 0 of the odds' world ranks + 1");
    int sum = -1;
    const int mine = rank + 1;
    int root = color == 0 ? (r == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Reduce(&mine, &sum, 1, MPI_INT, MPI_SUM, root, inter);
    if (color == 0 && r == 0) {
        int expected = 0;
        for (int q = 0; q < remote; ++q)
            expected += world_of(q, 1) + 1;
        CHECK(sum == expected, "reduce: %d, expected %d", sum, expected);
    }

    WHERE("intercomm collectives: allreduce gives each group the other's sum");
    int all = -1;
    MPI_Allreduce(&rank, &all, 1, MPI_INT, MPI_SUM, inter);
    int expected = 0;
    for (int q = 0; q < remote; ++q)
        expected += world_of(q, other);
    CHECK(all == expected, "allreduce: %d, expected %d", all, expected);
    all = -1;
    MPI_Request req;
    MPI_Iallreduce(&rank, &all, 1, MPI_INT, MPI_MAX, inter, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(all == world_of(remote - 1, other), "iallreduce max: %d", all);

    WHERE("intercomm collectives: reduce_scatter gives each rank its block of the other group's sum");
    {
        /* Both groups reduce local * remote elements: each rank keeps remote of the
         * other group's sum here (the other group's counts are local each). */
        const int total = local * remote;
        int send[256];
        int got[64];
        int counts[64];
        CHECK(total <= 256 && local <= 64, "too many ranks for this test");
        for (int j = 0; j < total; ++j)
            send[j] = rank + j;
        for (int i = 0; i < local; ++i)
            counts[i] = remote;
        int others = 0; /* the other group's world ranks, summed */
        for (int q = 0; q < remote; ++q)
            others += world_of(q, other);
        MPI_Reduce_scatter(send, got, counts, MPI_INT, MPI_SUM, inter);
        for (int k = 0; k < remote; ++k)
            CHECK(got[k] == others + remote * (r * remote + k), "reduce_scatter element %d: %d", k, got[k]);
        if (local == remote) {
            MPI_Request rq;
            MPI_Ireduce_scatter_block(send, got, remote, MPI_INT, MPI_SUM, inter, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            for (int k = 0; k < remote; ++k)
                CHECK(got[k] == others + remote * (r * remote + k), "ireduce_scatter_block element %d: %d", k, got[k]);
        }
    }

    WHERE("intercomm collectives: gather at odd rank 0, scatter from even rank 0");
    int gathered[64];
    for (int i = 0; i < 64; ++i)
        gathered[i] = -1;
    root = color == 1 ? (r == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    const int pair[2] = {rank, -rank};
    MPI_Gather(pair, 2, MPI_INT, gathered, 2, MPI_INT, root, inter);
    if (color == 1 && r == 0)
        for (int q = 0; q < remote; ++q)
            CHECK(gathered[2 * q] == world_of(q, 0) && gathered[2 * q + 1] == -world_of(q, 0),
                  "gather: block %d is %d %d", q, gathered[2 * q], gathered[2 * q + 1]);
    int scattered[64];
    for (int q = 0; q < 64; ++q)
        scattered[q] = 100 + q;
    int got = -1;
    root = color == 0 ? (r == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Scatter(scattered, 1, MPI_INT, &got, 1, MPI_INT, root, inter);
    if (color == 1) CHECK(got == 100 + r, "scatter: %d", got);

    WHERE("intercomm collectives: allgather and alltoall");
    int blocks[64];
    MPI_Allgather(&rank, 1, MPI_INT, blocks, 1, MPI_INT, inter);
    for (int q = 0; q < remote; ++q)
        CHECK(blocks[q] == world_of(q, other), "allgather: block %d is %d", q, blocks[q]);
    int out[64], in[64];
    for (int q = 0; q < remote; ++q) {
        out[q] = 1000 * rank + q;
        in[q] = -1;
    }
    MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, inter);
    for (int q = 0; q < remote; ++q)
        CHECK(in[q] == 1000 * world_of(q, other) + r, "alltoall: from %d got %d", q, in[q]);

    WHERE("intercomm collectives: the v and w forms");
    /* Remote rank q contributes q + 1 ints, placed in reverse order with a gap of one. */
    int vcounts[64], vdispls[64], vbuf[512], mine_v[64];
    int at = 0;
    for (int q = remote - 1; q >= 0; --q) {
        vcounts[q] = q + 1;
        vdispls[q] = at;
        at += q + 2;
    }
    for (int i = 0; i < r + 1; ++i)
        mine_v[i] = 100 * rank + i;
    /* Gatherv at even rank 0 */
    for (int i = 0; i < 512; ++i)
        vbuf[i] = -1;
    root = color == 0 ? (r == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Gatherv(mine_v, r + 1, MPI_INT, vbuf, vcounts, vdispls, MPI_INT, root, inter);
    if (color == 0 && r == 0)
        for (int q = 0; q < remote; ++q)
            for (int i = 0; i <= q + 1; ++i)
                CHECK(vbuf[vdispls[q] + i] == (i <= q ? 100 * world_of(q, 1) + i : -1), "gatherv: block %d [%d] = %d",
                      q, i, vbuf[vdispls[q] + i]);
    /* Scatterv from odd rank 0: remote q gets q + 1 ints */
    for (int i = 0; i < 512; ++i)
        vbuf[i] = i;
    int got_v[64];
    for (int i = 0; i < 64; ++i)
        got_v[i] = -1;
    root = color == 1 ? (r == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Scatterv(vbuf, vcounts, vdispls, MPI_INT, got_v, r + 1, MPI_INT, root, inter);
    if (color == 0) {
        int disp = 0; /* where the odd root's layout (over the evens) put this rank's block */
        for (int q = local - 1; q > r; --q)
            disp += q + 2;
        for (int i = 0; i <= r + 1; ++i)
            CHECK(got_v[i] == (i <= r ? disp + i : -1), "scatterv: [%d] = %d", i, got_v[i]);
    }
    /* Allgatherv: every rank gets every remote rank's block */
    for (int i = 0; i < 512; ++i)
        vbuf[i] = -1;
    MPI_Allgatherv(mine_v, r + 1, MPI_INT, vbuf, vcounts, vdispls, MPI_INT, inter);
    for (int q = 0; q < remote; ++q)
        for (int i = 0; i <= q; ++i)
            CHECK(vbuf[vdispls[q] + i] == 100 * world_of(q, other) + i, "allgatherv: block %d [%d] = %d", q, i,
                  vbuf[vdispls[q] + i]);
    /* Alltoallv: to remote q, q + 1 ints; from remote q, r + 1 ints */
    int scounts[64], sdispls[64], rcounts[64], rdispls[64], sbuf[512];
    at = 0;
    for (int q = 0; q < remote; ++q) {
        scounts[q] = q + 1;
        sdispls[q] = at;
        for (int i = 0; i <= q; ++i)
            sbuf[at + i] = 1000 * rank + 10 * q + i;
        at += q + 1;
        rcounts[q] = r + 1;
        rdispls[q] = q * (r + 1);
    }
    for (int i = 0; i < 512; ++i)
        vbuf[i] = -1;
    MPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, vbuf, rcounts, rdispls, MPI_INT, inter);
    for (int q = 0; q < remote; ++q)
        for (int i = 0; i <= r; ++i)
            CHECK(vbuf[rdispls[q] + i] == 1000 * world_of(q, other) + 10 * r + i, "alltoallv: from %d [%d] = %d", q, i,
                  vbuf[rdispls[q] + i]);
    /* Alltoallw with byte displacements, the same exchange */
    MPI_Datatype stypes[64], rtypes[64];
    int sbytes[64], rbytes[64];
    for (int q = 0; q < remote; ++q) {
        stypes[q] = rtypes[q] = MPI_INT;
        sbytes[q] = sdispls[q] * (int)sizeof(int);
        rbytes[q] = rdispls[q] * (int)sizeof(int);
    }
    for (int i = 0; i < 512; ++i)
        vbuf[i] = -1;
    MPI_Alltoallw(sbuf, scounts, sbytes, stypes, vbuf, rcounts, rbytes, rtypes, inter);
    for (int q = 0; q < remote; ++q)
        CHECK(vbuf[rdispls[q] + r] == 1000 * world_of(q, other) + 10 * r + r, "alltoallw: from %d", q);

    WHERE("intercomm collectives: barrier, blocking and not");
    MPI_Barrier(inter);
    MPI_Ibarrier(inter, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

/* MPI_Comm_dup, _split and _create of an intercommunicator: each group splits (or
 * picks a group) alike, and the new intercommunicator joins the local ranks of a
 * colour with the remote ranks of that colour; checked by an Allgather across it of
 * the world ranks (the remote group's, in the order of their keys). */
static void derived(MPI_Comm inter, int rank, int color, int r, int local, int remote) {
    const int other = 1 - color;
    WHERE("intercomm: dup");
    MPI_Comm dup = MPI_COMM_NULL;
    CHECK(MPI_Comm_dup(inter, &dup) == MPI_SUCCESS, "dup of an intercommunicator");
    int flag = 0, n = -1, rr = -1;
    MPI_Comm_test_inter(dup, &flag);
    MPI_Comm_remote_size(dup, &n);
    MPI_Comm_rank(dup, &rr);
    CHECK(flag == 1 && n == remote && rr == r, "dup: inter %d, remote size %d, rank %d", flag, n, rr);
    int worlds[64];
    MPI_Allgather(&rank, 1, MPI_INT, worlds, 1, MPI_INT, dup);
    for (int q = 0; q < remote; ++q)
        CHECK(worlds[q] == world_of(q, other), "dup: remote rank %d is world %d", q, worlds[q]);
    /* Its messages stay on it: one on dup and one on inter, the same tag, received
     * from inter first. */
    const int peer = r % remote;
    int a = 1, b = 2, got_a = 0, got_b = 0;
    MPI_Request sends[2];
    MPI_Isend(&a, 1, MPI_INT, peer, 9, dup, &sends[0]);
    MPI_Isend(&b, 1, MPI_INT, peer, 9, inter, &sends[1]);
    for (int q = 0; q < remote; ++q) {
        if (q % local != r) continue;
        MPI_Recv(&got_b, 1, MPI_INT, q, 9, inter, MPI_STATUS_IGNORE);
        MPI_Recv(&got_a, 1, MPI_INT, q, 9, dup, MPI_STATUS_IGNORE);
        CHECK(got_a == 1 && got_b == 2, "dup: %d on dup, %d on inter", got_a, got_b);
    }
    MPI_Waitall(2, sends, MPI_STATUSES_IGNORE);
    MPI_Comm_free(&dup);

    WHERE("intercomm: idup, the groups' leaders exchanging a synchronous message meanwhile");
    /* The odd leader joins the idup only after the even leader received its
     * synchronous message, which the even leader receives after starting its idup. */
    MPI_Request idup_req = MPI_REQUEST_NULL;
    int token = 0;
    if (r == 0 && color == 0) {
        CHECK(MPI_Comm_idup(inter, &dup, &idup_req) == MPI_SUCCESS, "idup of an intercommunicator");
        MPI_Recv(&token, 1, MPI_INT, 0, 71, inter, MPI_STATUS_IGNORE);
        CHECK(token == 71, "token %d", token);
    } else if (r == 0) {
        token = 71;
        MPI_Ssend(&token, 1, MPI_INT, 0, 71, inter);
        CHECK(MPI_Comm_idup(inter, &dup, &idup_req) == MPI_SUCCESS, "idup of an intercommunicator");
    } else {
        CHECK(MPI_Comm_idup(inter, &dup, &idup_req) == MPI_SUCCESS, "idup of an intercommunicator");
    }
    MPI_Wait(&idup_req, MPI_STATUS_IGNORE);
    MPI_Comm_test_inter(dup, &flag);
    MPI_Comm_remote_size(dup, &n);
    MPI_Comm_rank(dup, &rr);
    CHECK(flag == 1 && n == remote && rr == r, "idup: inter %d, remote size %d, rank %d", flag, n, rr);
    MPI_Allgather(&rank, 1, MPI_INT, worlds, 1, MPI_INT, dup);
    for (int q = 0; q < remote; ++q)
        CHECK(worlds[q] == world_of(q, other), "idup: remote rank %d is world %d", q, worlds[q]);
    MPI_Comm_free(&dup);

    WHERE("intercomm: split by local rank parity, keys reversed");
    MPI_Comm half = MPI_COMM_NULL;
    CHECK(MPI_Comm_split(inter, r % 2, -r, &half) == MPI_SUCCESS, "split of an intercommunicator");
    int same = 0; /* remote ranks of my colour */
    for (int q = 0; q < remote; ++q)
        if (q % 2 == r % 2) ++same;
    if (same == 0) {
        CHECK(half == MPI_COMM_NULL, "split: no remote rank of colour %d, yet a communicator", r % 2);
    } else {
        MPI_Comm_remote_size(half, &n);
        CHECK(n == same, "split: remote size %d, expected %d", n, same);
        MPI_Allgather(&rank, 1, MPI_INT, worlds, 1, MPI_INT, half);
        /* the remote ranks of my colour, by key -q: highest q first */
        int k = 0;
        for (int q = remote - 1; q >= 0; --q)
            if (q % 2 == r % 2) {
                CHECK(worlds[k] == world_of(q, other), "split: remote rank %d is world %d, expected %d", k, worlds[k],
                      world_of(q, other));
                ++k;
            }
        MPI_Comm_free(&half);
    }

    WHERE("intercomm: create from the local group without its rank 0");
    MPI_Group g, without;
    MPI_Comm_group(inter, &g);
    const int zero = 0;
    MPI_Group_excl(g, 1, &zero, &without);
    MPI_Comm made = MPI_COMM_NULL;
    CHECK(MPI_Comm_create(inter, without, &made) == MPI_SUCCESS, "create of an intercommunicator");
    if (r == 0 || local == 1 || remote == 1) {
        CHECK(made == MPI_COMM_NULL, "create: rank %d of %d (remote %d) got a communicator", r, local, remote);
    } else {
        MPI_Comm_remote_size(made, &n);
        MPI_Comm_rank(made, &rr);
        CHECK(n == remote - 1 && rr == r - 1, "create: remote size %d, rank %d", n, rr);
        MPI_Allgather(&rank, 1, MPI_INT, worlds, 1, MPI_INT, made);
        for (int q = 0; q < remote - 1; ++q)
            CHECK(worlds[q] == world_of(q + 1, other), "create: remote rank %d is world %d", q, worlds[q]);
        MPI_Comm_free(&made);
    }
    MPI_Group_free(&without);
    MPI_Group_free(&g);
}

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

    collectives(inter, rank, color, r, local, remote);
    derived(inter, rank, color, r, local, remote);

    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int x = 1, y = 0;
    expect_error(MPI_Allreduce(MPI_IN_PLACE, &y, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_BUFFER,
                 "not for an intercommunicator");
    expect_error(MPI_Bcast(&x, 1, MPI_INT, remote, inter), MPI_ERR_ROOT, "remote group");
    expect_error(MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, inter), MPI_ERR_COMM, "on intracommunicators only");
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
