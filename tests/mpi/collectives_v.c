/* The collectives beyond the classic seven, and every non-blocking collective, against
 * results computed here: Gatherv, Scatterv and Allgatherv with uneven counts (zeros
 * among them) and displacements in reverse rank order with gaps that must stay
 * untouched; Alltoall, Alltoallv (uneven counts and gaps), Alltoallw (byte
 * displacements, two datatypes); Reduce_scatter (uneven counts), Reduce_scatter_block,
 * Scan, Exscan (rank 0's buffer untouched); MPI_IN_PLACE wherever the standard allows
 * it; every root; the logical and bitwise operations; on MPI_COMM_WORLD and
 * MPI_COMM_SELF.
 *
 * Run as `collectives_v` (the blocking calls), `collectives_v wait` (the MPI_I* call
 * then MPI_Wait) or `collectives_v test` (MPI_I* then MPI_Test until done); the
 * non-blocking modes also check what only they have: a non-blocking barrier or bcast
 * does not complete before the last rank entered it, several collectives in flight at
 * once complete in any order, and a wildcard receive posted across them takes only
 * the application's message. */
#include "check.h"

enum { blocking = 0, by_wait = 1, by_test = 2 };
static int mode;
static int rank, size;
static const int gap = -7; /* what the receive buffers hold outside the blocks */

static void complete(MPI_Request* request) {
    if (mode == by_wait) {
        CHECK(MPI_Wait(request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait");
    } else {
        int flag = 0;
        while (!flag)
            CHECK(MPI_Test(request, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Test");
    }
    CHECK(*request == MPI_REQUEST_NULL, "the completed request is not MPI_REQUEST_NULL");
}

/* The blocking call, or the non-blocking one completed by MPI_Wait or MPI_Test. */
#define COLL(BLOCKING, NONBLOCKING, ...)                                                                               \
    do {                                                                                                               \
        if (mode == blocking) {                                                                                        \
            CHECK(BLOCKING(__VA_ARGS__) == MPI_SUCCESS, "%s", #BLOCKING);                                              \
        } else {                                                                                                       \
            MPI_Request req_ = MPI_REQUEST_NULL;                                                                       \
            CHECK(NONBLOCKING(__VA_ARGS__, &req_) == MPI_SUCCESS, "%s", #NONBLOCKING);                                 \
            CHECK(req_ != MPI_REQUEST_NULL, "%s gave no request", #NONBLOCKING);                                       \
            complete(&req_);                                                                                           \
        }                                                                                                              \
    } while (0)

static int value(int from, int to, int k) {
    return from * 1000 + to * 10 + k;
}

/* Counts of each rank's block (some zero) and displacements in reverse rank order with
 * a gap of 2 before each block; returns the buffer's length. */
static int layout(int n, int salt, int* counts, int* displs) {
    for (int i = 0; i < n; ++i)
        counts[i] = (i * 2 + salt) % 4;
    int at = 1;
    for (int i = n - 1; i >= 0; --i) {
        displs[i] = at;
        at += counts[i] + 2;
    }
    return at;
}

/* The blocks of layout filled with value(i, 0, k) + salt; everything else gap. */
static void check_layout(const int* buf, int len, int n, const int* counts, const int* displs, int salt,
                         const char* what) {
    for (int p = 0; p < len; ++p) {
        int want = gap;
        for (int i = 0; i < n; ++i)
            if (p >= displs[i] && p < displs[i] + counts[i]) want = value(i, 0, p - displs[i]) + salt;
        CHECK(buf[p] == want, "%s: element %d is %d, want %d", what, p, buf[p], want);
    }
}

static void fill(int* buf, int len, int v) {
    for (int i = 0; i < len; ++i)
        buf[i] = v;
}

static void test_gatherv_scatterv_allgatherv(MPI_Comm comm) {
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    int counts[16], displs[16], buf[128], own[8];
    for (int root = 0; root < n; ++root) {
        for (int in_place = 0; in_place < 2; ++in_place) {
            const int len = layout(n, root, counts, displs);
            WHERE("Gatherv root %d in_place %d size %d", root, in_place, n);
            fill(buf, len, gap);
            for (int k = 0; k < counts[me]; ++k)
                own[k] = value(me, 0, k) + root;
            const int place = in_place && me == root;
            if (place)
                for (int k = 0; k < counts[me]; ++k)
                    buf[displs[me] + k] = own[k];
            COLL(MPI_Gatherv, MPI_Igatherv, place ? MPI_IN_PLACE : own, counts[me], MPI_INT, buf, counts, displs,
                 MPI_INT, root, comm);
            if (me == root) check_layout(buf, len, n, counts, displs, root, "Gatherv");

            WHERE("Scatterv root %d in_place %d size %d", root, in_place, n);
            if (me == root) {
                fill(buf, len, gap);
                for (int i = 0; i < n; ++i)
                    for (int k = 0; k < counts[i]; ++k)
                        buf[displs[i] + k] = value(i, 0, k) + root;
            }
            fill(own, 8, gap);
            COLL(MPI_Scatterv, MPI_Iscatterv, buf, counts, displs, MPI_INT, place ? MPI_IN_PLACE : own, counts[me],
                 MPI_INT, root, comm);
            if (place) {
                check_layout(buf, len, n, counts, displs, root, "Scatterv in place (the root's buffer)");
            } else {
                for (int k = 0; k < 8; ++k)
                    CHECK(own[k] == (k < counts[me] ? value(me, 0, k) + root : gap), "Scatterv: element %d is %d", k,
                          own[k]);
            }

            WHERE("Allgatherv salt %d in_place %d size %d", root, in_place, n);
            fill(buf, len, gap);
            for (int k = 0; k < counts[me]; ++k)
                own[k] = value(me, 0, k) + root;
            if (in_place)
                for (int k = 0; k < counts[me]; ++k)
                    buf[displs[me] + k] = own[k];
            COLL(MPI_Allgatherv, MPI_Iallgatherv, in_place ? MPI_IN_PLACE : own, counts[me], MPI_INT, buf, counts,
                 displs, MPI_INT, comm);
            check_layout(buf, len, n, counts, displs, root, "Allgatherv");
        }
    }
}

static void test_alltoall(MPI_Comm comm) {
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    enum { b = 3 };
    int send[16 * b], recv[16 * b];
    for (int in_place = 0; in_place < 2; ++in_place) {
        WHERE("Alltoall in_place %d size %d", in_place, n);
        for (int j = 0; j < n; ++j)
            for (int k = 0; k < b; ++k)
                (in_place ? recv : send)[j * b + k] = value(me, j, k);
        if (!in_place) fill(recv, n * b, gap);
        COLL(MPI_Alltoall, MPI_Ialltoall, in_place ? MPI_IN_PLACE : send, b, MPI_INT, recv, b, MPI_INT, comm);
        for (int i = 0; i < n; ++i)
            for (int k = 0; k < b; ++k)
                CHECK(recv[i * b + k] == value(i, me, k), "Alltoall: block of rank %d element %d is %d", i, k,
                      recv[i * b + k]);
    }

    /* Alltoallv: rank i sends (i + j) % 3 elements to j, at displacements with gaps. */
    int scounts[16], sdispls[16], rcounts[16], rdispls[16];
    int at_s = 0, at_r = 1;
    for (int j = 0; j < n; ++j) {
        scounts[j] = (me + j) % 3;
        sdispls[j] = at_s;
        at_s += scounts[j] + 1;
        rcounts[j] = (j + me) % 3;
    }
    for (int j = n - 1; j >= 0; --j) {
        rdispls[j] = at_r;
        at_r += rcounts[j] + 2;
    }
    for (int in_place = 0; in_place < 2; ++in_place) {
        WHERE("Alltoallv in_place %d size %d", in_place, n);
        fill(recv, at_r, gap);
        for (int j = 0; j < n; ++j)
            for (int k = 0; k < scounts[j]; ++k) {
                send[sdispls[j] + k] = value(me, j, k);
                if (in_place) recv[rdispls[j] + k] = value(me, j, k); /* scounts == rcounts here */
            }
        COLL(MPI_Alltoallv, MPI_Ialltoallv, in_place ? MPI_IN_PLACE : send, scounts, sdispls, MPI_INT, recv, rcounts,
             rdispls, MPI_INT, comm);
        for (int p = 0; p < at_r; ++p) {
            int want = gap;
            for (int i = 0; i < n; ++i)
                if (p >= rdispls[i] && p < rdispls[i] + rcounts[i]) want = value(i, me, p - rdispls[i]);
            CHECK(recv[p] == want, "Alltoallv: element %d is %d, want %d", p, recv[p], want);
        }
    }

    /* Alltoallw: between i and j, (i + j) % 3 + 1 elements of MPI_SHORT when i + j is
     * odd, else of MPI_INT, at byte displacements. */
    WHERE("Alltoallw size %d", n);
    MPI_Datatype stypes[16], rtypes[16];
    unsigned char sbytes[1024], rbytes[1024];
    int sb = 0, rb = 0;
    for (int j = 0; j < n; ++j) {
        stypes[j] = rtypes[j] = (me + j) % 2 ? MPI_SHORT : MPI_INT;
        scounts[j] = rcounts[j] = (me + j) % 3 + 1;
        sdispls[j] = sb;
        rdispls[j] = rb + 3;
        const int elem = (me + j) % 2 ? 2 : 4;
        sb += scounts[j] * elem + 4;
        rb += rcounts[j] * elem + 4;
    }
    memset(rbytes, 0xee, sizeof rbytes);
    for (int j = 0; j < n; ++j)
        for (int k = 0; k < scounts[j]; ++k) {
            if (stypes[j] == MPI_SHORT) {
                short v = (short)value(me, j, k);
                memcpy(sbytes + sdispls[j] + k * 2, &v, 2);
            } else {
                int v = value(me, j, k);
                memcpy(sbytes + sdispls[j] + k * 4, &v, 4);
            }
        }
    COLL(MPI_Alltoallw, MPI_Ialltoallw, sbytes, scounts, sdispls, stypes, rbytes, rcounts, rdispls, rtypes, comm);
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < rcounts[i]; ++k) {
            int got;
            if (rtypes[i] == MPI_SHORT) {
                short v;
                memcpy(&v, rbytes + rdispls[i] + k * 2, 2);
                got = v;
            } else {
                memcpy(&got, rbytes + rdispls[i] + k * 4, 4);
            }
            CHECK(got == value(i, me, k), "Alltoallw: element %d from rank %d is %d", k, i, got);
        }
    for (int i = 0; i < 3; ++i)
        CHECK(rbytes[i] == 0xee, "Alltoallw wrote before the first displacement");
}

static void test_reduce_scatter_scan(MPI_Comm comm) {
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    int counts[16], total = 0, offset = 0;
    for (int i = 0; i < n; ++i) {
        counts[i] = i % 3 + 1;
        if (i < me) offset += counts[i];
        total += counts[i];
    }
    int in[64], out[64];
    double din[64], dout[64];
    for (int in_place = 0; in_place < 2; ++in_place) {
        WHERE("Reduce_scatter in_place %d size %d", in_place, n);
        for (int k = 0; k < total; ++k) {
            (in_place ? out : in)[k] = me + k;
            din[k] = (me * 7 + k * 3) % 11;
        }
        if (!in_place) fill(out, total, gap);
        COLL(MPI_Reduce_scatter, MPI_Ireduce_scatter, in_place ? MPI_IN_PLACE : in, out, counts, MPI_INT, MPI_SUM,
             comm);
        for (int k = 0; k < counts[me]; ++k)
            CHECK(out[k] == n * (offset + k) + n * (n - 1) / 2, "Reduce_scatter SUM: element %d is %d", k, out[k]);
        if (!in_place)
            for (int k = counts[me]; k < total; ++k)
                CHECK(out[k] == gap, "Reduce_scatter wrote past its block (element %d)", k);
        COLL(MPI_Reduce_scatter, MPI_Ireduce_scatter, din, dout, counts, MPI_DOUBLE, MPI_MAX, comm);
        for (int k = 0; k < counts[me]; ++k) {
            double want = 0;
            for (int r = 0; r < n; ++r)
                if ((r * 7 + (offset + k) * 3) % 11 > want) want = (r * 7 + (offset + k) * 3) % 11;
            CHECK(dout[k] == want, "Reduce_scatter MAX: element %d is %g, want %g", k, dout[k], want);
        }

        WHERE("Reduce_scatter_block in_place %d size %d", in_place, n);
        for (int k = 0; k < 2 * n; ++k)
            (in_place ? out : in)[k] = me * k + 1;
        COLL(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, in_place ? MPI_IN_PLACE : in, out, 2, MPI_INT,
             MPI_SUM, comm);
        for (int k = 0; k < 2; ++k) {
            const int e = me * 2 + k;
            CHECK(out[k] == e * n * (n - 1) / 2 + n, "Reduce_scatter_block: element %d is %d", k, out[k]);
        }

        WHERE("Scan and Exscan in_place %d size %d", in_place, n);
        enum { c = 5 };
        for (int k = 0; k < c; ++k)
            (in_place ? out : in)[k] = me * 10 + k;
        COLL(MPI_Scan, MPI_Iscan, in_place ? MPI_IN_PLACE : in, out, c, MPI_INT, MPI_SUM, comm);
        for (int k = 0; k < c; ++k)
            CHECK(out[k] == 10 * me * (me + 1) / 2 + (me + 1) * k, "Scan: element %d is %d", k, out[k]);
        for (int k = 0; k < c; ++k)
            (in_place ? out : in)[k] = me * 10 + k;
        if (!in_place) fill(out, c, gap);
        COLL(MPI_Exscan, MPI_Iexscan, in_place ? MPI_IN_PLACE : in, out, c, MPI_INT, MPI_SUM, comm);
        for (int k = 0; k < c; ++k) {
            const int want = me == 0 ? (in_place ? k : gap) : 10 * me * (me - 1) / 2 + me * k;
            CHECK(out[k] == want, "Exscan: element %d is %d, want %d", k, out[k], want);
        }
        for (int k = 0; k < c; ++k)
            din[k] = me + 1 + k;
        COLL(MPI_Scan, MPI_Iscan, din, dout, c, MPI_DOUBLE, MPI_PROD, comm);
        for (int k = 0; k < c; ++k) {
            double want = 1;
            for (int r = 0; r <= me; ++r)
                want *= r + 1 + k;
            CHECK(dout[k] == want, "Scan PROD: element %d is %g, want %g", k, dout[k], want);
        }
    }
}

/* MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR through Allreduce, Reduce
 * (every root) and Scan on int, unsigned char, long and MPI_BYTE, against the result
 * computed here; values with zeros among them so that the logical ones differ. */
static long long logical_value(int r, int i) {
    return ((r * 5 + i * 3) % 7 == 0) ? 0 : ((r * 37 + i * 11) & 0x7f);
}

static long long combine_here(MPI_Op op, long long a, long long b) {
    if (op == MPI_LAND) return a && b;
    if (op == MPI_LOR) return a || b;
    if (op == MPI_LXOR) return !a != !b;
    if (op == MPI_BAND) return a & b;
    if (op == MPI_BOR) return a | b;
    return a ^ b;
}

static void put(MPI_Datatype t, void* buf, int i, long long v) {
    if (t == MPI_INT)
        ((int*)buf)[i] = (int)v;
    else if (t == MPI_LONG)
        ((long*)buf)[i] = (long)v;
    else
        ((unsigned char*)buf)[i] = (unsigned char)v;
}

static long long take(MPI_Datatype t, const void* buf, int i) {
    if (t == MPI_INT) return ((const int*)buf)[i];
    if (t == MPI_LONG) return ((const long*)buf)[i];
    return ((const unsigned char*)buf)[i];
}

static void test_logical_bitwise(MPI_Comm comm) {
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    static const MPI_Op lops[] = {MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    static const char* const lop_names[] = {"LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"};
    static const MPI_Datatype ltypes[] = {MPI_INT, MPI_UNSIGNED_CHAR, MPI_LONG, MPI_BYTE};
    enum { count = 700 }; /* 2800 bytes of int: the large-vector allreduce too */
    static long in[count], out[count];
    for (int o = 0; o < 6; ++o) {
        for (int t = 0; t < 4; ++t) {
            WHERE("logical and bitwise: %s on type %d size %d", lop_names[o], t, n);
            for (int i = 0; i < count; ++i)
                put(ltypes[t], in, i, logical_value(me, i));
            COLL(MPI_Allreduce, MPI_Iallreduce, in, out, count, ltypes[t], lops[o], comm);
            for (int i = 0; i < count; ++i) {
                long long want = logical_value(0, i);
                for (int r = 1; r < n; ++r)
                    want = combine_here(lops[o], want, logical_value(r, i));
                CHECK(take(ltypes[t], out, i) == want, "Allreduce %s type %d [%d]: %lld, want %lld", lop_names[o], t, i,
                      take(ltypes[t], out, i), want);
            }
            const int root = (o + t) % n;
            COLL(MPI_Reduce, MPI_Ireduce, in, out, count, ltypes[t], lops[o], root, comm);
            if (me == root)
                for (int i = 0; i < count; ++i) {
                    long long want = logical_value(0, i);
                    for (int r = 1; r < n; ++r)
                        want = combine_here(lops[o], want, logical_value(r, i));
                    CHECK(take(ltypes[t], out, i) == want, "Reduce %s type %d [%d]", lop_names[o], t, i);
                }
            COLL(MPI_Scan, MPI_Iscan, in, out, 3, ltypes[t], lops[o], comm);
            for (int i = 0; i < 3; ++i) {
                long long want = logical_value(0, i);
                for (int r = 1; r <= me; ++r)
                    want = combine_here(lops[o], want, logical_value(r, i));
                CHECK(take(ltypes[t], out, i) == want, "Scan %s type %d [%d]", lop_names[o], t, i);
            }
        }
    }
}

/* The seven classic collectives through this mode (blocking ones are in collectives.c). */
static void test_classic(MPI_Comm comm) {
    int n, me;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    static int a[1024], b[1024];
    for (int root = 0; root < n; ++root) {
        WHERE("Bcast/Reduce/Gather/Scatter root %d size %d", root, n);
        for (int k = 0; k < 7; ++k)
            a[k] = me == root ? value(root, 0, k) : gap;
        COLL(MPI_Bcast, MPI_Ibcast, a, 7, MPI_INT, root, comm);
        for (int k = 0; k < 7; ++k)
            CHECK(a[k] == value(root, 0, k), "Bcast: element %d is %d", k, a[k]);
        for (int k = 0; k < 7; ++k)
            a[k] = me + k;
        fill(b, 7, gap);
        COLL(MPI_Reduce, MPI_Ireduce, a, b, 7, MPI_INT, MPI_SUM, root, comm);
        if (me == root)
            for (int k = 0; k < 7; ++k)
                CHECK(b[k] == n * k + n * (n - 1) / 2, "Reduce: element %d is %d", k, b[k]);
        if (me == root) { /* in place at the root */
            for (int k = 0; k < 7; ++k)
                b[k] = me + k;
            COLL(MPI_Reduce, MPI_Ireduce, MPI_IN_PLACE, b, 7, MPI_INT, MPI_MAX, root, comm);
            for (int k = 0; k < 7; ++k)
                CHECK(b[k] == n - 1 + k, "Reduce MAX in place: element %d is %d", k, b[k]);
        } else {
            COLL(MPI_Reduce, MPI_Ireduce, a, NULL, 7, MPI_INT, MPI_MAX, root, comm);
        }
        a[0] = value(me, 0, 0);
        a[1] = value(me, 0, 1);
        fill(b, 2 * n, gap);
        COLL(MPI_Gather, MPI_Igather, a, 2, MPI_INT, b, 2, MPI_INT, root, comm);
        if (me == root)
            for (int i = 0; i < 2 * n; ++i)
                CHECK(b[i] == value(i / 2, 0, i % 2), "Gather: element %d is %d", i, b[i]);
        for (int i = 0; i < 2 * n; ++i)
            b[i] = value(i / 2, 1, i % 2);
        fill(a, 2, gap);
        COLL(MPI_Scatter, MPI_Iscatter, b, 2, MPI_INT, a, 2, MPI_INT, root, comm);
        CHECK(a[0] == value(me, 1, 0) && a[1] == value(me, 1, 1), "Scatter: %d %d", a[0], a[1]);
    }
    WHERE("Allreduce/Allgather/Barrier size %d", n);
    /* 1000 ints: the large-vector allreduce (reduce-scatter then allgather) where the
     * world is a power of two. */
    static const int allreduce_counts[] = {1, 17, 33, 1000};
    for (int c = 0; c < 4; ++c) {
        const int count = allreduce_counts[c];
        for (int k = 0; k < count; ++k)
            a[k] = me * 3 + k;
        COLL(MPI_Allreduce, MPI_Iallreduce, a, b, count, MPI_INT, MPI_SUM, comm);
        for (int k = 0; k < count; ++k)
            CHECK(b[k] == 3 * n * (n - 1) / 2 + n * k, "Allreduce: element %d of %d is %d", k, count, b[k]);
        COLL(MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, a, count, MPI_INT, MPI_MIN, comm);
        for (int k = 0; k < count; ++k)
            CHECK(a[k] == k, "Allreduce MIN in place: element %d is %d", k, a[k]);
    }
    a[0] = value(me, 2, 0);
    COLL(MPI_Allgather, MPI_Iallgather, a, 1, MPI_INT, b, 1, MPI_INT, comm);
    for (int i = 0; i < n; ++i)
        CHECK(b[i] == value(i, 2, 0), "Allgather: element %d is %d", i, b[i]);
    if (mode == blocking) {
        CHECK(MPI_Barrier(comm) == MPI_SUCCESS, "MPI_Barrier");
    } else {
        MPI_Request r;
        CHECK(MPI_Ibarrier(comm, &r) == MPI_SUCCESS, "MPI_Ibarrier");
        complete(&r);
    }
}

static int me_value(void) {
    return rank == size - 1 ? 4242 : gap;
}

/* What only the non-blocking collectives have. */
static void test_nonblocking_only(void) {
    const int last = size - 1;
    if (size > 1) {
        /* No rank's Ibarrier or Ibcast completes before the last rank entered it: the
         * others test theirs many times, then let the last one in. */
        WHERE("Ibarrier and Ibcast wait for the last rank");
        int data = me_value();
        MPI_Request r[2];
        if (rank != last) {
            CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "MPI_Ibarrier");
            CHECK(MPI_Ibcast(&data, 1, MPI_INT, last, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "MPI_Ibcast");
            for (int i = 0; i < 200; ++i) {
                int flag = 1;
                CHECK(MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "MPI_Testall");
                CHECK(!flag, "the Ibarrier and Ibcast completed before the last rank called them");
                CHECK(!(MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag),
                      "Ibarrier completed before the last rank entered it");
            }
            CHECK(MPI_Send(NULL, 0, MPI_INT, last, 5, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send");
        } else {
            for (int i = 0; i < last; ++i)
                CHECK(MPI_Recv(NULL, 0, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS,
                      "MPI_Recv");
            data = 4242;
            CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "MPI_Ibarrier");
            CHECK(MPI_Ibcast(&data, 1, MPI_INT, last, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "MPI_Ibcast");
        }
        CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "MPI_Waitall");
        CHECK(data == 4242, "Ibcast gave %d", data);
    }

    /* Four collectives in flight at once, a wildcard receive posted across them;
     * completed in reverse order. */
    WHERE("collectives in flight together");
    int wild = -1;
    MPI_Request recv_any;
    CHECK(MPI_Irecv(&wild, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &recv_any) == MPI_SUCCESS,
          "MPI_Irecv");
    int sum_in[100], sum_out[100], bc[100], a2a_in[16], a2a_out[16], gat[16];
    for (int k = 0; k < 100; ++k) {
        sum_in[k] = rank + k;
        bc[k] = rank == 0 ? k * 3 : gap;
    }
    for (int j = 0; j < size; ++j)
        a2a_in[j] = value(rank, j, 0);
    MPI_Request r[5];
    CHECK(MPI_Iallreduce(sum_in, sum_out, 100, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "Iallreduce");
    CHECK(MPI_Ibcast(bc, 100, MPI_INT, 0, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "Ibcast");
    CHECK(MPI_Ialltoall(a2a_in, 1, MPI_INT, a2a_out, 1, MPI_INT, MPI_COMM_WORLD, &r[2]) == MPI_SUCCESS, "Ialltoall");
    CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r[3]) == MPI_SUCCESS, "Ibarrier");
    CHECK(MPI_Iallgather(&rank, 1, MPI_INT, gat, 1, MPI_INT, MPI_COMM_WORLD, &r[4]) == MPI_SUCCESS, "Iallgather");
    for (int i = 4; i >= 0; --i) {
        if (mode == by_wait) {
            CHECK(MPI_Wait(&r[i], MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait %d", i);
        } else {
            complete(&r[i]);
        }
    }
    for (int k = 0; k < 100; ++k) {
        CHECK(sum_out[k] == size * k + size * (size - 1) / 2, "Iallreduce: element %d is %d", k, sum_out[k]);
        CHECK(bc[k] == k * 3, "Ibcast: element %d is %d", k, bc[k]);
    }
    for (int i = 0; i < size; ++i) {
        CHECK(a2a_out[i] == value(i, rank, 0), "Ialltoall: element %d is %d", i, a2a_out[i]);
        CHECK(gat[i] == i, "Iallgather: element %d is %d", i, gat[i]);
    }
    /* (It may have completed already, with the message of the next lines from a
     * faster rank; what it took is checked below.) */
    const int to = (rank + 1) % size;
    const int payload = 777 + rank;
    CHECK(MPI_Send(&payload, 1, MPI_INT, to, 9, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Send");
    MPI_Status status;
    CHECK(MPI_Wait(&recv_any, &status) == MPI_SUCCESS, "MPI_Wait");
    const int from = (rank - 1 + size) % size;
    CHECK(wild == 777 + from && status.MPI_SOURCE == from && status.MPI_TAG == 9,
          "the wildcard receive got %d from %d tag %d", wild, status.MPI_SOURCE, status.MPI_TAG);

    /* MPI_Waitany over two collectives: each index once, then MPI_UNDEFINED. */
    WHERE("MPI_Waitany over collectives");
    int any_in = rank + 1, any_out = 0, any_bc = rank == 0 ? 99 : 0;
    MPI_Request two[2];
    CHECK(MPI_Iallreduce(&any_in, &any_out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &two[0]) == MPI_SUCCESS, "Iallreduce");
    CHECK(MPI_Ibcast(&any_bc, 1, MPI_INT, 0, MPI_COMM_WORLD, &two[1]) == MPI_SUCCESS, "Ibcast");
    int seen = 0;
    for (int i = 0; i < 3; ++i) {
        int index = -5;
        CHECK(MPI_Waitany(2, two, &index, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Waitany");
        if (i == 2) {
            CHECK(index == MPI_UNDEFINED, "MPI_Waitany with nothing active gave %d", index);
        } else {
            CHECK(index == 0 || index == 1, "MPI_Waitany gave index %d", index);
            CHECK(!(seen & (1 << index)), "MPI_Waitany gave index %d twice", index);
            seen |= 1 << index;
        }
    }
    CHECK(any_out == size && any_bc == 99, "Waitany: Iallreduce gave %d, Ibcast %d", any_out, any_bc);

    /* A collective request cannot be cancelled; one freed while pending still runs. */
    WHERE("MPI_Cancel and MPI_Request_free of a collective");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request c;
    CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &c) == MPI_SUCCESS, "MPI_Ibarrier");
    CHECK(MPI_Cancel(&c) == MPI_ERR_REQUEST, "MPI_Cancel of a collective's request did not fail");
    CHECK(MPI_Wait(&c, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait");
    int x = rank == 0 ? 31 : 0;
    CHECK(MPI_Ibcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, &c) == MPI_SUCCESS, "MPI_Ibcast");
    CHECK(MPI_Request_free(&c) == MPI_SUCCESS && c == MPI_REQUEST_NULL, "MPI_Request_free");
    WHERE("a freed Ibcast completes by the progress of other calls");
    while (x != 31) { /* any call that makes progress runs it */
        int any = 0;
        CHECK(MPI_Iprobe(MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &any, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Iprobe");
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
    CHECK(MPI_Ibarrier(MPI_COMM_WORLD, NULL) == MPI_ERR_REQUEST, "MPI_Ibarrier without a request");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* A blocking collective on a rank with a non-blocking one in flight runs as a
 * schedule, while the other ranks run it on the calling thread without one (the
 * small Reduce_scatter(_block), Allreduce, Allgather, Alltoall, Barrier): the two
 * ways send the same messages with the same tag and meet. Rank 0 keeps an Ibarrier of
 * a duplicate of MPI_COMM_WORLD pending through them; the others enter it after. */
static void test_mixed_ways(void) {
    WHERE("blocking collectives beside an Ibarrier pending on rank 0");
    MPI_Comm dup;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS, "MPI_Comm_dup");
    MPI_Request pending = MPI_REQUEST_NULL;
    if (rank == 0) CHECK(MPI_Ibarrier(dup, &pending) == MPI_SUCCESS, "MPI_Ibarrier");
    int counts[16], offset = 0, total = 0;
    for (int i = 0; i < size; ++i) {
        counts[i] = (i + 1) % 3; /* a block of 0 among them */
        if (i < rank) offset += counts[i];
        total += counts[i];
    }
    int in[64], out[64];
    for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < total; ++k)
            in[k] = rank * 100 + k + round;
        fill(out, 64, gap);
        CHECK(MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
              "MPI_Reduce_scatter");
        for (int k = 0; k < counts[rank]; ++k)
            CHECK(out[k] == 100 * size * (size - 1) / 2 + size * (offset + k + round),
                  "Reduce_scatter beside a schedule: element %d is %d", k, out[k]);
        CHECK(out[counts[rank]] == gap, "Reduce_scatter wrote past its block");
    }
    /* A larger vector (up to 64 KiB at 16 ranks), MPI_MAX, in place. */
    enum { per = 512 };
    static double d[16 * per];
    for (int k = 0; k < size * per; ++k)
        d[k] = (double)((rank * 31 + k * 7) % 101);
    CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, d, per, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS,
          "MPI_Reduce_scatter_block in place");
    for (int k = 0; k < per; ++k) {
        double want = 0;
        for (int r = 0; r < size; ++r)
            if ((r * 31 + (rank * per + k) * 7) % 101 > want) want = (r * 31 + (rank * per + k) * 7) % 101;
        CHECK(d[k] == want, "Reduce_scatter_block MAX beside a schedule: element %d is %g, want %g", k, d[k], want);
    }
    int x = rank + 1, sum = 0;
    CHECK(MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Allreduce");
    CHECK(sum == size * (size + 1) / 2, "Allreduce beside a schedule gave %d", sum);
    int all[16], a2a_in[16], a2a_out[16];
    for (int j = 0; j < size; ++j)
        a2a_in[j] = value(rank, j, 3);
    CHECK(MPI_Allgather(&x, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Allgather");
    CHECK(MPI_Alltoall(a2a_in, 1, MPI_INT, a2a_out, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Alltoall");
    for (int i = 0; i < size; ++i) {
        CHECK(all[i] == i + 1, "Allgather beside a schedule: element %d is %d", i, all[i]);
        CHECK(a2a_out[i] == value(i, rank, 3), "Alltoall beside a schedule: element %d is %d", i, a2a_out[i]);
    }
    CHECK(MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS, "MPI_Barrier");
    if (rank != 0) CHECK(MPI_Ibarrier(dup, &pending) == MPI_SUCCESS, "MPI_Ibarrier");
    CHECK(MPI_Wait(&pending, MPI_STATUS_IGNORE) == MPI_SUCCESS, "MPI_Wait of the Ibarrier");
    CHECK(MPI_Comm_free(&dup) == MPI_SUCCESS, "MPI_Comm_free");
}

/* Bad arguments of the new calls: their class, under MPI_ERRORS_RETURN. */
static void test_errors(void) {
    WHERE("errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int counts[16], displs[16], buf[64];
    for (int i = 0; i < size; ++i) {
        counts[i] = 1;
        displs[i] = i;
    }
    counts[0] = -1;
    CHECK(MPI_Allgatherv(buf, 1, MPI_INT, buf + 16, counts, displs, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_COUNT,
          "a negative count");
    counts[0] = 1;
    displs[0] = -3;
    CHECK(MPI_Alltoallv(buf, counts, displs, MPI_INT, buf + 16, counts, displs, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_ARG,
          "a negative displacement");
    displs[0] = 0;
    CHECK(MPI_Gatherv(buf, 1, MPI_INT, buf + 16, counts, displs, MPI_INT, size, MPI_COMM_WORLD) == MPI_ERR_ROOT,
          "a root out of range");
    CHECK(MPI_Scan(buf, buf + 16, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD) == MPI_ERR_OP, "an invalid op");
    double d[2] = {1, 2};
    CHECK(MPI_Allreduce(d, d + 1, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD) == MPI_ERR_OP, "MPI_BAND on MPI_DOUBLE");
    CHECK(MPI_Reduce(d, d + 1, 1, MPI_FLOAT, MPI_LOR, 0, MPI_COMM_WORLD) == MPI_ERR_OP, "MPI_LOR on MPI_FLOAT");
    CHECK(MPI_Alltoall(buf, 1, MPI_INT, buf + 16, 1, MPI_DOUBLE, MPI_COMM_WORLD) == MPI_ERR_TRUNCATE,
          "blocks of different sizes");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);
    CHECK(size <= 16, "at most 16 ranks");
    if (argc > 1 && strcmp(argv[1], "wait") == 0) mode = by_wait;
    if (argc > 1 && strcmp(argv[1], "test") == 0) mode = by_test;
    const MPI_Comm comms[] = {MPI_COMM_WORLD, MPI_COMM_SELF};
    for (int c = 0; c < 2; ++c) {
        test_gatherv_scatterv_allgatherv(comms[c]);
        test_alltoall(comms[c]);
        test_reduce_scatter_scan(comms[c]);
        test_classic(comms[c]);
        test_logical_bitwise(comms[c]);
    }
    if (mode != blocking) test_nonblocking_only();
    test_mixed_ways();
    test_errors();
    WHERE("MPI_Finalize");
    MPI_Finalize();
    if (rank == 0) printf("collectives_v %s: all checks passed with %d ranks\n", argc > 1 ? argv[1] : "blocking", size);
    return 0;
}
