/* Operations of the application (MPI_Op_create): a non-commutative one, the product
 * of 2x2 matrices of unsigned ints (a contiguous type of 4), must come out in rank
 * order from Reduce (every root), Allreduce (a vector long enough for the
 * large-vector algorithm of the predefined operations), Iallreduce, Scan, Exscan and
 * Reduce_scatter_block; its function gets the datatype of the call. A commutative
 * one (a sum) agrees with MPI_SUM, and on a strided type its function gets the
 * predefined type. MPI_Op_commutative, MPI_Op_free, and the errors of a freed or
 * predefined operation. */
#include "check.h"

static int rank_;
static int size_;
static MPI_Datatype mat; /* 4 unsigned: a b / c d */
static int wrong_type;

static void matmul(void* invec, void* inoutvec, int* len, MPI_Datatype* type) {
    if (*type != mat) wrong_type = 1;
    const unsigned* x = invec;
    unsigned* y = inoutvec;
    for (int i = 0; i < *len; ++i, x += 4, y += 4) {
        const unsigned a = x[0] * y[0] + x[1] * y[2], b = x[0] * y[1] + x[1] * y[3];
        const unsigned c = x[2] * y[0] + x[3] * y[2], d = x[2] * y[1] + x[3] * y[3];
        y[0] = a;
        y[1] = b;
        y[2] = c;
        y[3] = d;
    }
}

static MPI_Datatype sum_type_seen;
static void usum(void* invec, void* inoutvec, int* len, MPI_Datatype* type) {
    sum_type_seen = *type;
    const unsigned* x = invec;
    unsigned* y = inoutvec;
    for (int i = 0; i < *len; ++i)
        y[i] += x[i];
}

/* Rank r's matrix i. */
static void matrix(int r, int i, unsigned* m) {
    m[0] = (unsigned)(r + 1 + i);
    m[1] = 1;
    m[2] = 1;
    m[3] = (unsigned)(i % 3);
}

/* The product of ranks first..last of matrix i, in rank order. */
static void product(int first, int last, int i, unsigned* out) {
    unsigned acc[4] = {1, 0, 0, 1};
    for (int r = first; r <= last; ++r) {
        unsigned m[4], t[4];
        matrix(r, i, m);
        t[0] = acc[0] * m[0] + acc[1] * m[2];
        t[1] = acc[0] * m[1] + acc[1] * m[3];
        t[2] = acc[2] * m[0] + acc[3] * m[2];
        t[3] = acc[2] * m[1] + acc[3] * m[3];
        memcpy(acc, t, sizeof t);
    }
    memcpy(out, acc, sizeof acc);
}

static void expect_products(const char* what, const unsigned* got, int first, int last, int from, int n) {
    for (int i = 0; i < n; ++i) {
        unsigned want[4];
        product(first, last, from + i, want);
        CHECK(memcmp(got + 4 * i, want, sizeof want) == 0, "%s matrix %d: (%u %u %u %u), expected (%u %u %u %u)", what,
              from + i, got[4 * i], got[4 * i + 1], got[4 * i + 2], got[4 * i + 3], want[0], want[1], want[2], want[3]);
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_deadline(120, rank_);
    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat);
    MPI_Type_commit(&mat);
    MPI_Op mul;
    CHECK(MPI_Op_create(matmul, 0, &mul) == MPI_SUCCESS, "op_create");
    int commute = -1;
    CHECK(MPI_Op_commutative(mul, &commute) == MPI_SUCCESS && commute == 0, "matmul does not commute");
    CHECK(MPI_Op_commutative(MPI_SUM, &commute) == MPI_SUCCESS && commute == 1, "MPI_SUM commutes");

    enum { K = 200 }; /* 3200 bytes: beyond the large-vector threshold */
    static unsigned mine[4 * K], got[4 * K];
    for (int i = 0; i < K; ++i)
        matrix(rank_, i, mine + 4 * i);

    for (int root = 0; root < size_; ++root) {
        WHERE("ops: reduce root %d", root);
        memset(got, 0, sizeof got);
        CHECK(MPI_Reduce(mine, got, K, mat, mul, root, MPI_COMM_WORLD) == MPI_SUCCESS, "reduce");
        if (rank_ == root) expect_products("reduce", got, 0, size_ - 1, 0, K);
        MPI_Request q;
        memset(got, 0, sizeof got);
        CHECK(MPI_Ireduce(mine, got, 3, mat, mul, root, MPI_COMM_WORLD, &q) == MPI_SUCCESS, "ireduce");
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        if (rank_ == root) expect_products("ireduce", got, 0, size_ - 1, 0, 3);
    }
    WHERE("ops: allreduce");
    memset(got, 0, sizeof got);
    CHECK(MPI_Allreduce(mine, got, K, mat, mul, MPI_COMM_WORLD) == MPI_SUCCESS, "allreduce");
    expect_products("allreduce", got, 0, size_ - 1, 0, K);
    memset(got, 0, sizeof got);
    CHECK(MPI_Allreduce(mine, got, 1, mat, mul, MPI_COMM_WORLD) == MPI_SUCCESS, "allreduce of 1");
    expect_products("allreduce of 1", got, 0, size_ - 1, 0, 1);
    MPI_Request q;
    memcpy(got, mine, sizeof got);
    CHECK(MPI_Iallreduce(MPI_IN_PLACE, got, 5, mat, mul, MPI_COMM_WORLD, &q) == MPI_SUCCESS, "iallreduce");
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    expect_products("iallreduce in place", got, 0, size_ - 1, 0, 5);

    WHERE("ops: scan");
    CHECK(MPI_Scan(mine, got, 7, mat, mul, MPI_COMM_WORLD) == MPI_SUCCESS, "scan");
    expect_products("scan", got, 0, rank_, 0, 7);
    memset(got, 0xff, sizeof got);
    CHECK(MPI_Exscan(mine, got, 7, mat, mul, MPI_COMM_WORLD) == MPI_SUCCESS, "exscan");
    if (rank_ > 0) expect_products("exscan", got, 0, rank_ - 1, 0, 7);

    WHERE("ops: reduce_scatter_block");
    CHECK(MPI_Reduce_scatter_block(mine, got, 2, mat, mul, MPI_COMM_WORLD) == MPI_SUCCESS, "reduce_scatter_block");
    expect_products("reduce_scatter_block", got, 0, size_ - 1, 2 * rank_, 2);
    CHECK(!wrong_type, "the function got another datatype than the call's");

    WHERE("ops: commutative sum");
    MPI_Op sum;
    MPI_Op_create(usum, 1, &sum);
    unsigned a[16], b[16], c[16];
    for (int i = 0; i < 16; ++i)
        a[i] = (unsigned)(rank_ * 7 + i);
    MPI_Allreduce(a, b, 16, MPI_UNSIGNED, sum, MPI_COMM_WORLD);
    MPI_Allreduce(a, c, 16, MPI_UNSIGNED, MPI_SUM, MPI_COMM_WORLD);
    CHECK(memcmp(b, c, sizeof b) == 0, "a user sum agrees with MPI_SUM");
    /* (a rank whose data another rank combines never calls the function) */
    CHECK(sum_type_seen == MPI_DATATYPE_NULL || sum_type_seen == MPI_UNSIGNED, "the sum got datatype %d",
          sum_type_seen);
    /* On a strided type (every other unsigned), the function gets MPI_UNSIGNED. */
    MPI_Datatype evens;
    MPI_Type_vector(8, 1, 2, MPI_UNSIGNED, &evens);
    MPI_Type_commit(&evens);
    for (int i = 0; i < 16; ++i)
        b[i] = 12345;
    sum_type_seen = MPI_DATATYPE_NULL;
    MPI_Allreduce(a, b, 1, evens, sum, MPI_COMM_WORLD);
    for (int i = 0; i < 16; ++i)
        CHECK(b[i] == (i % 2 == 0 ? c[i] : 12345u), "strided user sum element %d: %u", i, b[i]);
    CHECK(sum_type_seen == MPI_DATATYPE_NULL || sum_type_seen == MPI_UNSIGNED, "the strided sum got datatype %d",
          sum_type_seen);
    MPI_Type_free(&evens);

    WHERE("ops: freed while a reduction uses it");
    MPI_Op inflight;
    MPI_Op_create(usum, 1, &inflight);
    MPI_Request pending;
    MPI_Iallreduce(a, b, 16, MPI_UNSIGNED, inflight, MPI_COMM_WORLD, &pending);
    CHECK(MPI_Op_free(&inflight) == MPI_SUCCESS && inflight == MPI_OP_NULL, "free during the reduction");
    CHECK(MPI_Wait(&pending, MPI_STATUS_IGNORE) == MPI_SUCCESS, "the reduction whose operation was freed meanwhile");
    CHECK(memcmp(b, c, sizeof b) == 0, "the reduction whose operation was freed meanwhile agrees with MPI_SUM");

    WHERE("ops: free");
    CHECK(MPI_Op_free(&sum) == MPI_SUCCESS && sum == MPI_OP_NULL, "op_free");
    MPI_Op old = mul;
    MPI_Op_free(&mul);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Allreduce(mine, got, 1, mat, old, MPI_COMM_WORLD), MPI_ERR_OP, "was freed");
    MPI_Op predefined = MPI_SUM;
    expect_error(MPI_Op_free(&predefined), MPI_ERR_OP, "cannot be freed");
    expect_error(MPI_Op_create(NULL, 1, &old), MPI_ERR_ARG, "user_fn is NULL");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free(&mat);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) printf("ops: passed on %d ranks\n", size_);
    MPI_Finalize();
    return 0;
}
