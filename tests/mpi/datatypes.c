/* Derived datatypes that are not contiguous (vector, hvector, indexed, hindexed,
 * indexed_block, struct, resized, dup): their sizes, bounds and true extents; point
 * to point between a layout and its contiguous equivalent (each side packs or
 * unpacks alone: the message is the data in typemap order); MPI_Get_elements on a
 * partial message; the collectives (blocking and not) and the reductions with such
 * types, whose untouched gaps must stay as they were; MPI_Pack, MPI_Unpack,
 * MPI_Pack_size and MPI_PACKED; and the errors (a reduction on a type of two
 * predefined types, packing beyond the buffer). */
#include "check.h"

#include <stddef.h>

static int rank_;
static int size_;

/* The value the tests put at element i of rank r's data. */
static int value(int r, int i) {
    return r * 1000 + i;
}

static void expect_int(const char* what, int got, int want) {
    CHECK(got == want, "%s: %d, expected %d", what, got, want);
}

static void test_shapes(void) {
    WHERE("datatypes: shapes");
    MPI_Datatype v, hv, idx, hidx, blk, st, rs, dup;
    MPI_Aint lb = -1, extent = -1, tlb = -1, textent = -1;
    int size = -1;

    /* 3 blocks of 2 ints, stride 4 ints: data at 0,1, 4,5, 8,9; extent 10 ints. */
    CHECK(MPI_Type_vector(3, 2, 4, MPI_INT, &v) == MPI_SUCCESS, "vector");
    MPI_Type_size(v, &size);
    expect_int("vector size", size, 6 * (int)sizeof(int));
    MPI_Type_get_extent(v, &lb, &extent);
    expect_int("vector lb", (int)lb, 0);
    expect_int("vector extent", (int)extent, 10 * (int)sizeof(int));

    /* hvector: the stride in bytes (3 doubles between blocks of one). */
    CHECK(MPI_Type_create_hvector(4, 1, 3 * sizeof(double), MPI_DOUBLE, &hv) == MPI_SUCCESS, "hvector");
    MPI_Type_get_extent(hv, &lb, &extent);
    expect_int("hvector extent", (int)extent, 10 * (int)sizeof(double));

    /* indexed: blocks (1 at 5), (3 at 1): the lower bound is where the lowest begins. */
    const int lens[2] = {1, 3};
    const int displs[2] = {5, 1};
    CHECK(MPI_Type_indexed(2, lens, displs, MPI_INT, &idx) == MPI_SUCCESS, "indexed");
    MPI_Type_get_extent(idx, &lb, &extent);
    expect_int("indexed lb", (int)lb, (int)sizeof(int));
    expect_int("indexed extent", (int)extent, 5 * (int)sizeof(int));
    MPI_Type_size(idx, &size);
    expect_int("indexed size", size, 4 * (int)sizeof(int));

    const MPI_Aint hdispls[2] = {8, 0};
    CHECK(MPI_Type_create_hindexed(2, lens, hdispls, MPI_SHORT, &hidx) == MPI_SUCCESS, "hindexed");
    MPI_Type_get_extent(hidx, &lb, &extent);
    expect_int("hindexed lb", (int)lb, 0);
    expect_int("hindexed extent", (int)extent, 10);

    const int bdispls[3] = {0, 4, 2};
    CHECK(MPI_Type_create_indexed_block(3, 2, bdispls, MPI_FLOAT, &blk) == MPI_SUCCESS, "indexed_block");
    MPI_Type_size(blk, &size);
    expect_int("indexed_block size", size, 6 * (int)sizeof(float));

    /* struct { char c; double d; int i; }: extent padded to the double's alignment. */
    struct s {
        char c;
        double d;
        int i;
    };
    const int slens[3] = {1, 1, 1};
    const MPI_Aint sdispls[3] = {offsetof(struct s, c), offsetof(struct s, d), offsetof(struct s, i)};
    const MPI_Datatype stypes[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    CHECK(MPI_Type_create_struct(3, slens, sdispls, stypes, &st) == MPI_SUCCESS, "struct");
    MPI_Type_get_extent(st, &lb, &extent);
    expect_int("struct extent", (int)extent, (int)sizeof(struct s));
    MPI_Type_size(st, &size);
    expect_int("struct size", size, 1 + (int)sizeof(double) + (int)sizeof(int));
    MPI_Type_get_true_extent(st, &tlb, &textent);
    expect_int("struct true lb", (int)tlb, 0);
    expect_int("struct true extent", (int)textent, (int)(offsetof(struct s, i) + sizeof(int)));

    /* resized: the bounds change, the data does not. */
    CHECK(MPI_Type_create_resized(v, -4, 100, &rs) == MPI_SUCCESS, "resized");
    MPI_Type_get_extent(rs, &lb, &extent);
    expect_int("resized lb", (int)lb, -4);
    expect_int("resized extent", (int)extent, 100);
    MPI_Type_get_true_extent(rs, &tlb, &textent);
    expect_int("resized true extent", (int)textent, 10 * (int)sizeof(int));
    MPI_Type_size(rs, &size);
    expect_int("resized size", size, 6 * (int)sizeof(int));

    CHECK(MPI_Type_dup(idx, &dup) == MPI_SUCCESS, "dup");
    MPI_Type_get_extent(dup, &lb, &extent);
    expect_int("dup extent", (int)extent, 5 * (int)sizeof(int));

    /* A dup of a predefined type is committed already and usable at once. */
    MPI_Datatype dint;
    CHECK(MPI_Type_dup(MPI_INT, &dint) == MPI_SUCCESS, "dup of MPI_INT");
    int one = 7, got = 0;
    MPI_Status st_;
    CHECK(MPI_Sendrecv(&one, 1, dint, 0, 3, &got, 1, MPI_INT, 0, 3, MPI_COMM_SELF, &st_) == MPI_SUCCESS, "dup to self");
    expect_int("dup to self", got, 7);

    /* Not committed: refused in communication, named. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int buf[10];
    expect_error(MPI_Send(buf, 1, v, rank_, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "is not committed");
    expect_error(MPI_Type_vector(-1, 1, 1, MPI_INT, &dup), MPI_ERR_COUNT, "negative count");
    expect_error(MPI_Type_indexed(2, lens, displs, MPI_DATATYPE_NULL, &dup), MPI_ERR_TYPE, "invalid datatype");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    MPI_Datatype all[] = {v, hv, idx, hidx, blk, st, rs, dup, dint};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        MPI_Type_free(&all[i]);
}

/* A column of an N x N matrix of ints (vector of N blocks of 1, stride N) travels
 * to a contiguous array and back, with Send/Recv, Isend/Irecv, Sendrecv and
 * Sendrecv_replace; the elements of the matrix outside the column stay as they were. */
static void test_p2p(void) {
    WHERE("datatypes: point to point");
    enum { N = 6 };
    MPI_Datatype column;
    MPI_Type_vector(N, 1, N, MPI_INT, &column);
    MPI_Type_commit(&column);
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;

    int m[N * N];
    int col[N];
    for (int i = 0; i < N * N; ++i)
        m[i] = value(rank_, i);
    /* column 2 of my matrix to the next rank's contiguous array. */
    MPI_Request r[2];
    CHECK(MPI_Irecv(col, N, MPI_INT, prev, 1, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS, "irecv");
    CHECK(MPI_Isend(&m[2], 1, column, next, 1, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS, "isend column");
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    for (int i = 0; i < N; ++i)
        expect_int("column received contiguous", col[i], value(prev, i * N + 2));

    /* contiguous into column 4 of a matrix of -1: only the column changes. */
    int into[N * N];
    for (int i = 0; i < N * N; ++i)
        into[i] = -1;
    for (int i = 0; i < N; ++i)
        col[i] = value(rank_, 100 + i);
    MPI_Status status;
    CHECK(MPI_Sendrecv(col, N, MPI_INT, next, 2, &into[4], 1, column, prev, 2, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
          "sendrecv into a column");
    for (int i = 0; i < N * N; ++i)
        expect_int("column receive leaves the gaps", into[i], i % N == 4 ? value(prev, 100 + i / N) : -1);
    int count = -1;
    MPI_Get_count(&status, column, &count);
    expect_int("Get_count of a column", count, 1);
    MPI_Get_elements(&status, column, &count);
    expect_int("Get_elements of a column", count, N);

    /* A blocking Recv of a column, from a column (both sides non-dense). */
    if (size_ > 1) {
        if (rank_ == 0) {
            MPI_Send(&m[1], 1, column, 1, 3, MPI_COMM_WORLD);
        } else if (rank_ == 1) {
            for (int i = 0; i < N * N; ++i)
                into[i] = -1;
            MPI_Recv(&into[0], 1, column, 0, 3, MPI_COMM_WORLD, &status);
            for (int i = 0; i < N * N; ++i)
                expect_int("column to column", into[i], i % N == 0 ? value(0, i / N * N + 1) : -1);
        }
    }

    /* A short message: Get_count is MPI_UNDEFINED, Get_elements counts the ints. */
    int three[3] = {1, 2, 3};
    CHECK(MPI_Sendrecv(three, 3, MPI_INT, 0, 4, &into[0], 1, column, 0, 4, MPI_COMM_SELF, &status) == MPI_SUCCESS,
          "short into a column");
    MPI_Get_count(&status, column, &count);
    expect_int("Get_count of a partial column", count, MPI_UNDEFINED);
    MPI_Get_elements(&status, column, &count);
    expect_int("Get_elements of a partial column", count, 3);
    expect_int("partial column [0]", into[0], 1);
    expect_int("partial column [N]", into[N], 2);
    expect_int("partial column [2N]", into[2 * N], 3);

    /* Sendrecv_replace of column 0 around the ring. */
    for (int i = 0; i < N * N; ++i)
        m[i] = value(rank_, i);
    CHECK(MPI_Sendrecv_replace(&m[0], 1, column, next, 5, prev, 5, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
          "sendrecv_replace");
    for (int i = 0; i < N * N; ++i)
        expect_int("replace", m[i], i % N == 0 ? value(prev, i) : value(rank_, i));

    /* A struct array (with padding) to a contiguous pair of arrays by indexed types. */
    struct s {
        char c;
        double d;
        int i;
    };
    MPI_Datatype st;
    const int lens[3] = {1, 1, 1};
    const MPI_Aint displs[3] = {offsetof(struct s, c), offsetof(struct s, d), offsetof(struct s, i)};
    const MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    MPI_Type_create_struct(3, lens, displs, types, &st);
    MPI_Type_commit(&st);
    struct s out[4], in[4];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 4; ++i) {
        out[i].c = (char)('a' + i + rank_);
        out[i].d = 0.5 * value(rank_, i);
        out[i].i = value(rank_, i) + 7;
    }
    CHECK(MPI_Sendrecv(out, 4, st, next, 6, in, 4, st, prev, 6, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
          "struct array");
    for (int i = 0; i < 4; ++i) {
        CHECK(in[i].c == (char)('a' + i + prev) && in[i].d == 0.5 * value(prev, i) && in[i].i == value(prev, i) + 7,
              "struct element %d", i);
    }
    MPI_Get_elements(&status, st, &count);
    expect_int("Get_elements of 4 structs", count, 12);
    MPI_Type_free(&st);
    MPI_Type_free(&column);
}

/* The collectives with a strided type: each rank's contribution is the even
 * elements of its array (vector of stride 2), results land in the even elements. */
static void test_collectives(void) {
    WHERE("datatypes: collectives");
    enum { K = 5 };
    MPI_Datatype evens; /* K ints at stride 2, resized to 2 ints so that they interleave */
    MPI_Datatype even1;
    MPI_Type_vector(K, 1, 2, MPI_INT, &evens);
    MPI_Type_commit(&evens);
    MPI_Type_vector(1, 1, 2, MPI_INT, &even1);
    MPI_Datatype even;
    MPI_Type_create_resized(even1, 0, 2 * sizeof(int), &even);
    MPI_Type_commit(&even);
    MPI_Type_free(&even1);

    int mine[2 * K], got[2 * K];
    for (int i = 0; i < 2 * K; ++i)
        mine[i] = value(rank_, i);

    /* Bcast from the last rank. */
    for (int i = 0; i < 2 * K; ++i)
        got[i] = rank_ == size_ - 1 ? mine[i] : -1;
    CHECK(MPI_Bcast(got, 1, evens, size_ - 1, MPI_COMM_WORLD) == MPI_SUCCESS, "bcast");
    for (int i = 0; i < 2 * K; ++i)
        expect_int("bcast", got[i], i % 2 == 0 || rank_ == size_ - 1 ? value(size_ - 1, i) : -1);

    /* Allreduce (blocking and not), Reduce: sums of the even elements; odd ones untouched. */
    for (int mode = 0; mode < 3; ++mode) {
        for (int i = 0; i < 2 * K; ++i)
            got[i] = -1;
        if (mode == 0) {
            CHECK(MPI_Allreduce(mine, got, 1, evens, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "allreduce");
        } else if (mode == 1) {
            MPI_Request q;
            CHECK(MPI_Iallreduce(mine, got, K, even, MPI_SUM, MPI_COMM_WORLD, &q) == MPI_SUCCESS, "iallreduce");
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            CHECK(MPI_Reduce(mine, got, 1, evens, MPI_SUM, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "reduce");
        }
        if (mode == 2 && rank_ != 0) continue;
        for (int i = 0; i < 2 * K; ++i) {
            int sum = 0;
            for (int r = 0; r < size_; ++r)
                sum += value(r, i);
            expect_int(mode == 0 ? "allreduce" : mode == 1 ? "iallreduce" : "reduce", got[i], i % 2 == 0 ? sum : -1);
        }
    }

    /* Allgather of one even element per rank into interleaved slots; then Gather and
     * Scatter by the resized type at the root. */
    int all[2 * 16];
    for (int i = 0; i < 2 * size_; ++i)
        all[i] = -1;
    CHECK(MPI_Allgather(&mine[2], 1, even, all, 1, even, MPI_COMM_WORLD) == MPI_SUCCESS, "allgather");
    for (int i = 0; i < 2 * size_; ++i)
        expect_int("allgather", all[i], i % 2 == 0 ? value(i / 2, 2) : -1);
    MPI_Request q;
    for (int i = 0; i < 2 * size_; ++i)
        all[i] = -1;
    CHECK(MPI_Igather(&mine[4], 1, even, all, 1, even, 0, MPI_COMM_WORLD, &q) == MPI_SUCCESS, "igather");
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    if (rank_ == 0)
        for (int i = 0; i < 2 * size_; ++i)
            expect_int("igather", all[i], i % 2 == 0 ? value(i / 2, 4) : -1);
    CHECK(MPI_Gather(&mine[6], 1, even, all, 1, even, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "gather");
    if (rank_ == 0)
        for (int i = 0; i < 2 * size_; ++i)
            expect_int("gather", all[i], i % 2 == 0 ? value(i / 2, 6) : -1);
    int one = -1;
    CHECK(MPI_Scatter(all, 1, even, &one, 1, MPI_INT, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "scatter");
    expect_int("scatter", one, value(rank_, 6));

    /* Alltoallv: rank r gets from every rank q the element q*2 of... one even element each. */
    int send[2 * 16], recv[2 * 16], counts[16], displs[16];
    for (int i = 0; i < 2 * size_; ++i) {
        send[i] = value(rank_, i);
        recv[i] = -1;
    }
    for (int i = 0; i < size_; ++i) {
        counts[i] = 1;
        displs[i] = size_ - 1 - i; /* reversed: rank i's element is at slot size-1-i */
    }
    CHECK(MPI_Alltoallv(send, counts, displs, even, recv, counts, displs, even, MPI_COMM_WORLD) == MPI_SUCCESS,
          "alltoallv");
    for (int i = 0; i < 2 * size_; ++i) {
        const int from = size_ - 1 - i / 2;
        expect_int("alltoallv", recv[i], i % 2 == 0 ? value(from, 2 * (size_ - 1 - rank_)) : -1);
    }

    /* Alltoallw with the strided type on the receive side and MPI_INT on the send side. */
    int wsend[16], wrecv[2 * 16];
    int sd[16], rd[16], ones[16];
    MPI_Datatype st[16], rt[16];
    for (int i = 0; i < size_; ++i) {
        wsend[i] = value(rank_, 50 + i);
        wrecv[2 * i] = wrecv[2 * i + 1] = -1;
        ones[i] = 1;
        sd[i] = i * (int)sizeof(int);
        rd[i] = 2 * i * (int)sizeof(int);
        st[i] = MPI_INT;
        rt[i] = even;
    }
    CHECK(MPI_Alltoallw(wsend, ones, sd, st, wrecv, ones, rd, rt, MPI_COMM_WORLD) == MPI_SUCCESS, "alltoallw");
    for (int i = 0; i < 2 * size_; ++i)
        expect_int("alltoallw", wrecv[i], i % 2 == 0 ? value(i / 2, 50 + rank_) : -1);

    /* Scan: the even elements summed over ranks 0..rank. */
    for (int i = 0; i < 2 * K; ++i)
        got[i] = -1;
    CHECK(MPI_Scan(mine, got, K, even, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "scan");
    for (int i = 0; i < 2 * K; ++i) {
        int sum = 0;
        for (int r = 0; r <= rank_; ++r)
            sum += value(r, i);
        expect_int("scan", got[i], i % 2 == 0 ? sum : -1);
    }

    /* A reduction on a type of two predefined types is refused, named. */
    MPI_Datatype mixed;
    const int lens[2] = {1, 1};
    const MPI_Aint ds[2] = {0, 8};
    const MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, lens, ds, ts, &mixed);
    MPI_Type_commit(&mixed);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char in[16] = {0}, out[16];
    expect_error(MPI_Allreduce(in, out, 1, mixed, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE, "mixes predefined types");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&mixed);
    MPI_Type_free(&evens);
    MPI_Type_free(&even);
}

/* MPI_Pack of an int, a column and a double into one buffer sent as MPI_PACKED,
 * unpacked on the other side in the same order. */
static void test_pack(void) {
    WHERE("datatypes: pack");
    enum { N = 4 };
    MPI_Datatype column;
    MPI_Type_vector(N, 1, N, MPI_INT, &column);
    MPI_Type_commit(&column);
    int size_int = 0, size_col = 0, size_dbl = 0;
    MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &size_int);
    MPI_Pack_size(1, column, MPI_COMM_WORLD, &size_col);
    MPI_Pack_size(2, MPI_DOUBLE, MPI_COMM_WORLD, &size_dbl);
    expect_int("Pack_size column", size_col, N * (int)sizeof(int));
    const int total = size_int + size_col + size_dbl;
    char packed[256];
    int m[N * N];
    for (int i = 0; i < N * N; ++i)
        m[i] = value(rank_, i);
    const int head = value(rank_, 99);
    const double tail[2] = {0.25 * rank_, -1.5};
    int position = 0;
    CHECK(MPI_Pack(&head, 1, MPI_INT, packed, total, &position, MPI_COMM_WORLD) == MPI_SUCCESS, "pack int");
    CHECK(MPI_Pack(&m[3], 1, column, packed, total, &position, MPI_COMM_WORLD) == MPI_SUCCESS, "pack column");
    CHECK(MPI_Pack(tail, 2, MPI_DOUBLE, packed, total, &position, MPI_COMM_WORLD) == MPI_SUCCESS, "pack doubles");
    expect_int("position after packing", position, total);

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Pack(&head, 1, MPI_INT, packed, total, &position, MPI_COMM_WORLD), MPI_ERR_TRUNCATE,
                 "goes beyond outsize");
    int scratch = 0;
    int at = total - 2;
    expect_error(MPI_Unpack(packed, total, &at, &scratch, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TRUNCATE,
                 "goes beyond insize");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    char arrived[256];
    MPI_Status status;
    CHECK(MPI_Sendrecv(packed, position, MPI_PACKED, next, 7, arrived, (int)sizeof arrived, MPI_PACKED, prev, 7,
                       MPI_COMM_WORLD, &status) == MPI_SUCCESS,
          "sendrecv packed");
    int count = -1;
    MPI_Get_count(&status, MPI_PACKED, &count);
    expect_int("packed count", count, total);
    int h = 0;
    int col[N * N];
    for (int i = 0; i < N * N; ++i)
        col[i] = -1;
    double t[2] = {0, 0};
    position = 0;
    MPI_Unpack(arrived, count, &position, &h, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(arrived, count, &position, &col[0], 1, column, MPI_COMM_WORLD);
    MPI_Unpack(arrived, count, &position, t, 2, MPI_DOUBLE, MPI_COMM_WORLD);
    expect_int("unpacked head", h, value(prev, 99));
    for (int i = 0; i < N * N; ++i)
        expect_int("unpacked column", col[i], i % N == 0 ? value(prev, i + 3) : -1);
    CHECK(t[0] == 0.25 * prev && t[1] == -1.5, "unpacked doubles %g %g", t[0], t[1]);
    MPI_Type_free(&column);
}

/* A type of no data (hindexed of zero-length blocks) counts 0 of a message of no
 * bytes (it divided by zero once); MPI_Get_address gives the distance of two
 * elements of an array. */
static void test_zero_size(void) {
    WHERE("datatypes: zero-size type and MPI_Get_address");
    int lengths[2] = {0, 0};
    MPI_Aint displs[2] = {0, 16};
    MPI_Datatype empty;
    MPI_Type_create_hindexed(2, lengths, displs, MPI_INT, &empty);
    MPI_Type_commit(&empty);
    int size = -1;
    MPI_Type_size(empty, &size);
    CHECK(size == 0, "size %d", size);
    int dummy = 0;
    MPI_Status st;
    MPI_Sendrecv(&dummy, 1, empty, rank_, 11, &dummy, 1, empty, rank_, 11, MPI_COMM_WORLD, &st);
    int n = -1;
    CHECK(MPI_Get_count(&st, empty, &n) == MPI_SUCCESS && n == 0, "count %d of nothing", n);
    MPI_Type_free(&empty);
    int array[8];
    MPI_Aint first = 0, fourth = 0;
    MPI_Get_address(&array[0], &first);
    MPI_Get_address(&array[3], &fourth);
    CHECK(fourth - first == 3 * (MPI_Aint)sizeof(int), "address distance %ld", (long)(fourth - first));
}

/* Names of types, MPI_Reduce_local, the _x queries and the status setters. */
static void test_misc(void) {
    WHERE("datatypes: names");
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(strcmp(name, "MPI_DOUBLE") == 0 && len == 10, "MPI_DOUBLE is named '%s' (%d)", name, len);
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_get_name(pair, name, &len);
    CHECK(len == 0 && name[0] == '\0', "a derived type is named '%s'", name);
    MPI_Type_set_name(pair, "two ints");
    MPI_Type_get_name(pair, name, &len);
    CHECK(strcmp(name, "two ints") == 0 && len == 8, "renamed to '%s'", name);

    WHERE("datatypes: reduce_local");
    int in[4] = {1, 2, 3, 4}, inout[4] = {10, 20, 30, 40};
    MPI_Type_commit(&pair);
    CHECK(MPI_Reduce_local(in, inout, 2, pair, MPI_SUM) == MPI_SUCCESS, "reduce_local");
    CHECK(inout[0] == 11 && inout[1] == 22 && inout[2] == 33 && inout[3] == 44, "reduce_local: %d %d %d %d", inout[0],
          inout[1], inout[2], inout[3]);
    MPI_Reduce_local(in, inout, 4, MPI_INT, MPI_MAX);
    CHECK(inout[0] == 11 && inout[3] == 44, "reduce_local max");

    WHERE("datatypes: status setters and _x queries");
    MPI_Status st;
    memset(&st, 0, sizeof st);
    MPI_Status_set_elements(&st, pair, 6); /* 6 ints: 3 pairs */
    int n = -1;
    MPI_Get_count(&st, pair, &n);
    CHECK(n == 3, "count of 6 ints as pairs: %d", n);
    MPI_Count nx = -1;
    MPI_Get_elements_x(&st, pair, &nx);
    CHECK(nx == 6, "elements_x: %lld", (long long)nx);
    int flag = -1;
    MPI_Status_set_cancelled(&st, 1);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag == 1, "set_cancelled");
    MPI_Count lb = -1, extent = -1;
    MPI_Type_get_true_extent_x(pair, &lb, &extent);
    CHECK(lb == 0 && extent == 2 * (MPI_Count)sizeof(int), "true extent %lld %lld", (long long)lb, (long long)extent);
    MPI_Type_free(&pair);

    WHERE("datatypes: a struct of a char and a float complex is aligned as a float");
    int lengths[2] = {1, 1};
    MPI_Aint displs[2] = {0, 4};
    MPI_Datatype types[2] = {MPI_CHAR, MPI_C_FLOAT_COMPLEX};
    MPI_Datatype s;
    MPI_Type_create_struct(2, lengths, displs, types, &s);
    MPI_Aint slb = -1, sextent = -1;
    MPI_Type_get_extent(s, &slb, &sextent);
    CHECK(sextent == 12, "extent %ld, expected 12 (C lays out struct { char c; float complex z; } so)", (long)sextent);
    MPI_Type_free(&s);
}

/* MPI_BOTTOM: a struct of absolute addresses (MPI_Get_address) names variables that
 * are not next to each other; a ring sends them with MPI_BOTTOM as the buffer (twice:
 * count 2 steps one extent on) and receives into other variables the same way;
 * MPI_Pack and MPI_Unpack take it too. A NULL buffer with a type of small
 * displacements is still MPI_ERR_BUFFER. */
static void test_bottom(void) {
    WHERE("datatypes: MPI_BOTTOM");
    static struct {
        int id;
        double pad[7];
        double energy[3];
    } out[2], in[2];
    MPI_Aint at[2];
    MPI_Get_address(&out[0].id, &at[0]);
    MPI_Get_address(out[0].energy, &at[1]);
    const int lengths[2] = {1, 3};
    const MPI_Datatype kinds[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Datatype fields;
    MPI_Type_create_struct(2, lengths, at, kinds, &fields);
    MPI_Datatype two;
    MPI_Type_create_resized(fields, 0, (MPI_Aint)sizeof out[0], &two);
    MPI_Type_commit(&two);
    MPI_Aint in_at[2];
    MPI_Get_address(&in[0].id, &in_at[0]);
    MPI_Get_address(in[0].energy, &in_at[1]);
    MPI_Datatype in_fields;
    MPI_Datatype in_two;
    MPI_Type_create_struct(2, lengths, in_at, kinds, &in_fields);
    MPI_Type_create_resized(in_fields, 0, (MPI_Aint)sizeof in[0], &in_two);
    MPI_Type_commit(&in_two);
    for (int k = 0; k < 2; ++k) {
        out[k].id = rank_ * 10 + k;
        for (int i = 0; i < 3; ++i)
            out[k].energy[i] = rank_ + 0.25 * i + k;
        out[k].pad[0] = -1.0;
        in[k].pad[0] = -2.0;
    }
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    MPI_Status status;
    CHECK(MPI_Sendrecv(MPI_BOTTOM, 2, two, next, 9, MPI_BOTTOM, 2, in_two, prev, 9, MPI_COMM_WORLD, &status) ==
              MPI_SUCCESS,
          "MPI_Sendrecv from and to MPI_BOTTOM");
    for (int k = 0; k < 2; ++k) {
        expect_int("MPI_BOTTOM id", in[k].id, prev * 10 + k);
        for (int i = 0; i < 3; ++i)
            CHECK(in[k].energy[i] == prev + 0.25 * i + k, "energy[%d] of element %d: %g", i, k, in[k].energy[i]);
        CHECK(in[k].pad[0] == -2.0, "the padding between the fields was written");
    }
    int packed_size = 0;
    MPI_Pack_size(2, two, MPI_COMM_WORLD, &packed_size);
    char packed[256];
    int position = 0;
    CHECK(packed_size <= (int)sizeof packed, "pack size %d", packed_size);
    CHECK(MPI_Pack(MPI_BOTTOM, 2, two, packed, (int)sizeof packed, &position, MPI_COMM_WORLD) == MPI_SUCCESS &&
              position == packed_size,
          "MPI_Pack from MPI_BOTTOM: %d", position);
    memset(in, 0, sizeof in);
    position = 0;
    CHECK(MPI_Unpack(packed, packed_size, &position, MPI_BOTTOM, 2, in_two, MPI_COMM_WORLD) == MPI_SUCCESS,
          "MPI_Unpack to MPI_BOTTOM");
    for (int k = 0; k < 2; ++k) {
        expect_int("unpacked id", in[k].id, rank_ * 10 + k);
        CHECK(in[k].energy[2] == rank_ + 0.5 + k, "unpacked energy %g", in[k].energy[2]);
    }
    MPI_Datatype near;
    const int near_lengths[2] = {1, 1};
    const int near_disps[2] = {0, 4};
    MPI_Type_indexed(2, near_lengths, near_disps, MPI_INT, &near);
    MPI_Type_commit(&near);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Send(MPI_BOTTOM, 1, near, next, 9, MPI_COMM_WORLD), MPI_ERR_BUFFER, "absolute addresses");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&near);
    MPI_Type_free(&fields);
    MPI_Type_free(&two);
    MPI_Type_free(&in_fields);
    MPI_Type_free(&in_two);
}

/* MPI_Type_get_envelope and _contents give back each constructor's arguments. */
static void expect_envelope(MPI_Datatype t, int ni, int na, int nd, int combiner, const char* what) {
    int i = -1, a = -1, d = -1, c = -1;
    CHECK(MPI_Type_get_envelope(t, &i, &a, &d, &c) == MPI_SUCCESS, "envelope of %s", what);
    CHECK(i == ni && a == na && d == nd && c == combiner, "%s: envelope %d %d %d combiner %d, expected %d %d %d %d",
          what, i, a, d, c, ni, na, nd, combiner);
}

static void test_envelopes(void) {
    WHERE("datatypes: envelopes and contents");
    expect_envelope(MPI_DOUBLE_INT, 0, 0, 0, MPI_COMBINER_NAMED, "MPI_DOUBLE_INT");
    MPI_Datatype vec;
    MPI_Type_vector(3, 2, 5, MPI_INT, &vec);
    expect_envelope(vec, 3, 0, 1, MPI_COMBINER_VECTOR, "vector");
    int ints[16];
    MPI_Aint aints[8];
    MPI_Datatype types[4];
    CHECK(MPI_Type_get_contents(vec, 16, 8, 4, ints, aints, types) == MPI_SUCCESS, "vector contents");
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 5 && types[0] == MPI_INT, "vector contents %d %d %d %d", ints[0],
          ints[1], ints[2], (int)types[0]);
    const int bl[2] = {1, 4};
    const int di[2] = {0, 7};
    MPI_Datatype idx;
    MPI_Type_indexed(2, bl, di, vec, &idx);
    expect_envelope(idx, 5, 0, 1, MPI_COMBINER_INDEXED, "indexed");
    MPI_Type_get_contents(idx, 16, 8, 4, ints, aints, types);
    CHECK(ints[0] == 2 && ints[1] == 1 && ints[2] == 4 && ints[3] == 0 && ints[4] == 7, "indexed contents");
    CHECK(types[0] != vec, "a derived type comes back as a new handle");
    expect_envelope(types[0], 3, 0, 1, MPI_COMBINER_VECTOR, "the vector inside the indexed type");
    MPI_Type_free(&types[0]);
    const MPI_Aint sd[2] = {0, 16};
    const MPI_Datatype st[2] = {MPI_CHAR, idx};
    MPI_Datatype strct;
    MPI_Type_create_struct(2, bl, sd, st, &strct);
    expect_envelope(strct, 3, 2, 2, MPI_COMBINER_STRUCT, "struct");
    MPI_Type_free(&idx); /* its handle goes; the struct's contents still give a copy of it */
    MPI_Type_get_contents(strct, 16, 8, 4, ints, aints, types);
    CHECK(ints[0] == 2 && ints[1] == 1 && ints[2] == 4 && aints[0] == 0 && aints[1] == 16 && types[0] == MPI_CHAR,
          "struct contents");
    expect_envelope(types[1], 5, 0, 1, MPI_COMBINER_INDEXED, "the freed indexed type inside the struct");
    MPI_Type_free(&types[1]);
    MPI_Datatype resized, dup, hv, contig, sub;
    MPI_Type_create_resized(vec, -4, 100, &resized);
    expect_envelope(resized, 0, 2, 1, MPI_COMBINER_RESIZED, "resized");
    MPI_Type_get_contents(resized, 0, 2, 1, NULL, aints, types);
    CHECK(aints[0] == -4 && aints[1] == 100, "resized contents");
    MPI_Type_free(&types[0]);
    MPI_Type_dup(resized, &dup);
    expect_envelope(dup, 0, 0, 1, MPI_COMBINER_DUP, "dup");
    MPI_Type_create_hvector(2, 1, 24, MPI_DOUBLE, &hv);
    expect_envelope(hv, 2, 1, 1, MPI_COMBINER_HVECTOR, "hvector");
    MPI_Type_contiguous(4, MPI_SHORT, &contig);
    expect_envelope(contig, 1, 0, 1, MPI_COMBINER_CONTIGUOUS, "contiguous");
    const int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub);
    expect_envelope(sub, 8, 0, 1, MPI_COMBINER_SUBARRAY, "subarray");
    MPI_Type_get_contents(sub, 16, 8, 4, ints, aints, types);
    CHECK(ints[0] == 2 && ints[1] == 4 && ints[3] == 2 && ints[5] == 1 && ints[7] == MPI_ORDER_C, "subarray contents");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Type_get_contents(MPI_INT, 0, 0, 0, ints, aints, types), MPI_ERR_TYPE, "MPI_COMBINER_NAMED");
    expect_error(MPI_Type_get_contents(vec, 2, 0, 1, ints, aints, types), MPI_ERR_ARG, "the contents are 3, 0 and 1");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&vec);
    MPI_Type_free(&strct);
    MPI_Type_free(&resized);
    MPI_Type_free(&dup);
    MPI_Type_free(&hv);
    MPI_Type_free(&contig);
    MPI_Type_free(&sub);
}

/* MPI_Type_create_darray: a 5 x 7 array of ints over a grid of processes (size x 1,
 * or 2 x 2 on 4 ranks), rows BLOCK, columns CYCLIC(2), in C and in Fortran order:
 * every process's type packs exactly the elements the distribution gives it, in the
 * array's order, and the types of all processes cover the array once; the extent is
 * the whole array's. Then the blocks are gathered to rank 0 with the types. */
static void test_darray(void) {
    WHERE("MPI_Type_create_darray");
    enum { G0 = 5, G1 = 7 };
    const int gsizes[2] = {G0, G1};
    const int distribs[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    const int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2};
    const int psizes[2] = {size_ == 4 ? 2 : size_, size_ == 4 ? 2 : 1};
    int array[G0 * G1];
    for (int i = 0; i < G0 * G1; ++i)
        array[i] = i;
    for (int fortran = 0; fortran <= 1; ++fortran) {
        const int order = fortran ? MPI_ORDER_FORTRAN : MPI_ORDER_C;
        int covered[G0 * G1] = {0};
        for (int r = 0; r < size_; ++r) {
            MPI_Datatype t;
            MPI_Type_create_darray(size_, r, 2, gsizes, distribs, dargs, psizes, order, MPI_INT, &t);
            MPI_Type_commit(&t);
            MPI_Aint lb = -1, extent = 0;
            MPI_Type_get_extent(t, &lb, &extent);
            CHECK(lb == 0 && extent == (MPI_Aint)sizeof array, "darray extent %ld lb %ld", (long)extent, (long)lb);
            const int c0 = r / psizes[1], c1 = r % psizes[1];
            const int block0 = (G0 + psizes[0] - 1) / psizes[0];
            int expected[G0 * G1], n = 0;
            /* in the array's memory order: C row-major, Fortran column-major (index i + j * G0) */
            for (int outer = 0; outer < (fortran ? G1 : G0); ++outer)
                for (int inner = 0; inner < (fortran ? G0 : G1); ++inner) {
                    const int i = fortran ? inner : outer, j = fortran ? outer : inner;
                    if (i / block0 == c0 && (j / 2) % psizes[1] == c1)
                        expected[n++] = fortran ? i + j * G0 : i * G1 + j;
                }
            int size = 0;
            MPI_Type_size(t, &size);
            CHECK(size == n * (int)sizeof(int), "rank %d's block: %d bytes, %d elements expected", r, size, n);
            int packed[G0 * G1], position = 0;
            MPI_Pack(array, 1, t, packed, sizeof packed, &position, MPI_COMM_WORLD);
            CHECK(position == size, "packed %d bytes", position);
            for (int k = 0; k < n; ++k) {
                CHECK(packed[k] == expected[k], "order %d, rank %d: element %d is %d, %d expected", order, r, k,
                      packed[k], expected[k]);
                ++covered[packed[k]];
            }
            MPI_Type_free(&t);
        }
        for (int i = 0; i < G0 * G1; ++i)
            CHECK(covered[i] == 1, "element %d held %d times", i, covered[i]);
    }
    WHERE("gathering a distributed array with its darray types");
    MPI_Datatype mine;
    MPI_Type_create_darray(size_, rank_, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT, &mine);
    MPI_Type_commit(&mine);
    int local[G0 * G1];
    for (int i = 0; i < G0 * G1; ++i)
        local[i] = 1000 * (rank_ + 1) + i;
    int whole[G0 * G1];
    for (int i = 0; i < G0 * G1; ++i)
        whole[i] = -1;
    int count = 0;
    MPI_Type_size(mine, &count);
    count /= (int)sizeof(int);
    if (rank_ == 0) {
        for (int r = 0; r < size_; ++r) {
            MPI_Datatype theirs;
            MPI_Type_create_darray(size_, r, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT, &theirs);
            MPI_Type_commit(&theirs);
            if (r == 0)
                MPI_Sendrecv(local, 1, mine, 0, 9, whole, 1, theirs, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Recv(whole, 1, theirs, r, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Type_free(&theirs);
        }
        const int block0 = (G0 + psizes[0] - 1) / psizes[0];
        for (int i = 0; i < G0; ++i)
            for (int j = 0; j < G1; ++j) {
                const int owner = (i / block0) * psizes[1] + (j / 2) % psizes[1];
                CHECK(whole[i * G1 + j] == 1000 * (owner + 1) + i * G1 + j, "element (%d, %d) is %d", i, j,
                      whole[i * G1 + j]);
            }
    } else {
        MPI_Send(local, 1, mine, 0, 9, MPI_COMM_WORLD);
    }
    MPI_Type_free(&mine);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_deadline(120, rank_);
    CHECK(size_ <= 16, "at most 16 ranks");
    test_shapes();
    test_p2p();
    test_collectives();
    test_pack();
    test_zero_size();
    test_misc();
    test_bottom();
    test_envelopes();
    test_darray();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) printf("datatypes: passed on %d ranks\n", size_);
    MPI_Finalize();
    return 0;
}
