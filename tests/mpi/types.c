/* Datatypes beyond the basic ones: the pair types (MPI_2INT, MPI_DOUBLE_INT, ...) with
 * MPI_MAXLOC and MPI_MINLOC in every reduction (ties go to the lower index, whatever
 * the rank order), their sizes and point-to-point counts, and the errors of an
 * operation a type does not have; contiguous derived types (size, extent, commit,
 * free) in point to point and collectives. Each result is checked against the fold computed
 * here over every rank's contribution. */
#include "check.h"

static int rank_;
static int size_;

/* The contribution of rank r at element i: few distinct values, so that ranks tie,
 * and indices that decrease with the rank, so that "lower index" is not "lower rank". */
static int pair_value(int r, int i) {
    return ((r * 5 + i * 3) % 4) - 1;
}
static int pair_index(int r, int i) {
    return 1000 - 10 * r + i;
}

/* The fold over ranks first..last of element i: MAXLOC (max != 0) or MINLOC. */
static void expect_loc(int max, int first, int last, int i, int* value, int* index) {
    *value = pair_value(first, i);
    *index = pair_index(first, i);
    for (int r = first + 1; r <= last; ++r) {
        const int v = pair_value(r, i);
        const int x = pair_index(r, i);
        if ((max ? v > *value : v < *value) || (v == *value && x < *index)) {
            *value = v;
            *index = x;
        }
    }
}

#define PAIR_TEST(NAME, T, TYPE, DATA_SIZE)                                                                            \
    typedef struct {                                                                                                   \
        T value;                                                                                                       \
        int index;                                                                                                     \
    } NAME##_pair;                                                                                                     \
    static void fill_##NAME(NAME##_pair* p, int n) {                                                                   \
        for (int i = 0; i < n; ++i) {                                                                                  \
            p[i].value = (T)pair_value(rank_, i);                                                                      \
            p[i].index = pair_index(rank_, i);                                                                         \
        }                                                                                                              \
    }                                                                                                                  \
    static void check_##NAME(const char* what, int max, int first, int last, const NAME##_pair* p, int from, int n) {  \
        for (int i = 0; i < n; ++i) {                                                                                  \
            int v = 0;                                                                                                 \
            int x = 0;                                                                                                 \
            expect_loc(max, first, last, from + i, &v, &x);                                                            \
            CHECK(p[i].value == (T)v && p[i].index == x, "%s %s %s element %d: (%g, %d), expected (%d, %d)", #TYPE,    \
                  what, max ? "MAXLOC" : "MINLOC", from + i, (double)p[i].value, p[i].index, v, x);                    \
        }                                                                                                              \
    }                                                                                                                  \
    static void test_##NAME(void) {                                                                                    \
        WHERE("types: %s", #TYPE);                                                                                     \
        int data_size = 0;                                                                                             \
        CHECK(MPI_Type_size(TYPE, &data_size) == MPI_SUCCESS && data_size == (int)(DATA_SIZE), "%s size %d", #TYPE,    \
              data_size);                                                                                              \
        enum { N = 24 };                                                                                               \
        NAME##_pair send[N];                                                                                           \
        NAME##_pair recv[N];                                                                                           \
        const MPI_Op ops[2] = {MPI_MINLOC, MPI_MAXLOC};                                                                \
        for (int o = 0; o < 2; ++o) {                                                                                  \
            const int max = o;                                                                                         \
            for (int root = 0; root<size_; root += size_ - 1> 0 ? size_ - 1 : 1) {                                     \
                fill_##NAME(send, N);                                                                                  \
                memset(recv, 0, sizeof recv);                                                                          \
                CHECK(MPI_Reduce(send, recv, N, TYPE, ops[o], root, MPI_COMM_WORLD) == MPI_SUCCESS, "Reduce");         \
                if (rank_ == root) check_##NAME("Reduce", max, 0, size_ - 1, recv, 0, N);                              \
                if (rank_ == root) {                                                                                   \
                    fill_##NAME(recv, N);                                                                              \
                    MPI_Request request = MPI_REQUEST_NULL;                                                            \
                    CHECK(MPI_Ireduce(MPI_IN_PLACE, recv, N, TYPE, ops[o], root, MPI_COMM_WORLD, &request) ==          \
                              MPI_SUCCESS,                                                                             \
                          "Ireduce");                                                                                  \
                    MPI_Wait(&request, MPI_STATUS_IGNORE);                                                             \
                    check_##NAME("Ireduce in place", max, 0, size_ - 1, recv, 0, N);                                   \
                } else {                                                                                               \
                    MPI_Request request = MPI_REQUEST_NULL;                                                            \
                    CHECK(MPI_Ireduce(send, NULL, N, TYPE, ops[o], root, MPI_COMM_WORLD, &request) == MPI_SUCCESS,     \
                          "Ireduce");                                                                                  \
                    MPI_Wait(&request, MPI_STATUS_IGNORE);                                                             \
                }                                                                                                      \
                if (size_ == 1) break;                                                                                 \
            }                                                                                                          \
            memset(recv, 0, sizeof recv);                                                                              \
            CHECK(MPI_Allreduce(send, recv, N, TYPE, ops[o], MPI_COMM_WORLD) == MPI_SUCCESS, "Allreduce");             \
            check_##NAME("Allreduce", max, 0, size_ - 1, recv, 0, N);                                                  \
            memset(recv, 0, sizeof recv);                                                                              \
            CHECK(MPI_Scan(send, recv, N, TYPE, ops[o], MPI_COMM_WORLD) == MPI_SUCCESS, "Scan");                       \
            check_##NAME("Scan", max, 0, rank_, recv, 0, N);                                                           \
            memset(recv, 0, sizeof recv);                                                                              \
            CHECK(MPI_Exscan(send, recv, N, TYPE, ops[o], MPI_COMM_WORLD) == MPI_SUCCESS, "Exscan");                   \
            if (rank_ > 0) check_##NAME("Exscan", max, 0, rank_ - 1, recv, 0, N);                                      \
            /* Reduce_scatter: rank r gets 1 + r % 2 elements, after those of the ranks before it. */                  \
            int counts[64];                                                                                            \
            int total = 0;                                                                                             \
            int mine_at = 0;                                                                                           \
            for (int r = 0; r < size_; ++r) {                                                                          \
                counts[r] = 1 + r % 2;                                                                                 \
                if (r == rank_) mine_at = total;                                                                       \
                total += counts[r];                                                                                    \
            }                                                                                                          \
            CHECK(total <= N, "too many ranks for the test");                                                          \
            memset(recv, 0, sizeof recv);                                                                              \
            CHECK(MPI_Reduce_scatter(send, recv, counts, TYPE, ops[o], MPI_COMM_WORLD) == MPI_SUCCESS,                 \
                  "Reduce_scatter");                                                                                   \
            check_##NAME("Reduce_scatter", max, 0, size_ - 1, recv, mine_at, counts[rank_]);                           \
            memset(recv, 0, sizeof recv);                                                                              \
            CHECK(MPI_Reduce_scatter_block(send, recv, 2, TYPE, ops[o], MPI_COMM_WORLD) == MPI_SUCCESS,                \
                  "Reduce_scatter_block");                                                                             \
            check_##NAME("Reduce_scatter_block", max, 0, size_ - 1, recv, 2 * rank_, 2);                               \
        }                                                                                                              \
        /* Point to point: elements of the struct's size, counted as elements. */                                      \
        if (size_ > 1 && rank_ < 2) {                                                                                  \
            const int peer = 1 - rank_;                                                                                \
            fill_##NAME(send, N);                                                                                      \
            MPI_Status status;                                                                                         \
            CHECK(MPI_Sendrecv(send, 5, TYPE, peer, 3, recv, N, TYPE, peer, 3, MPI_COMM_WORLD, &status) ==             \
                      MPI_SUCCESS,                                                                                     \
                  "Sendrecv");                                                                                         \
            int count = -1;                                                                                            \
            MPI_Get_count(&status, TYPE, &count);                                                                      \
            CHECK(count == 5, "%s Get_count %d", #TYPE, count);                                                        \
            for (int i = 0; i < 5; ++i)                                                                                \
                CHECK(recv[i].value == (T)pair_value(peer, i) && recv[i].index == pair_index(peer, i),                 \
                      "%s element %d from rank %d", #TYPE, i, peer);                                                   \
        }                                                                                                              \
    }

PAIR_TEST(two_int, int, MPI_2INT, 2 * sizeof(int))
PAIR_TEST(float_int, float, MPI_FLOAT_INT, sizeof(float) + sizeof(int))
PAIR_TEST(double_int, double, MPI_DOUBLE_INT, sizeof(double) + sizeof(int))
PAIR_TEST(long_int, long, MPI_LONG_INT, sizeof(long) + sizeof(int))
PAIR_TEST(short_int, short, MPI_SHORT_INT, sizeof(short) + sizeof(int))
PAIR_TEST(long_double_int, long double, MPI_LONG_DOUBLE_INT, sizeof(long double) + sizeof(int))

static void test_pair_errors(void) {
    WHERE("types: pair errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    double_int_pair p[2] = {{1.0, 1}, {2.0, 2}};
    double_int_pair q[2];
    int x[2] = {1, 2};
    int y[2];
    expect_error(MPI_Allreduce(p, q, 2, MPI_DOUBLE_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP,
                 "only MPI_MAXLOC and MPI_MINLOC are defined on the pair type MPI_DOUBLE_INT");
    expect_error(MPI_Reduce(p, q, 2, MPI_2INT, MPI_MAX, 0, MPI_COMM_WORLD), MPI_ERR_OP, "pair type MPI_2INT");
    expect_error(MPI_Allreduce(x, y, 2, MPI_INT, MPI_MAXLOC, MPI_COMM_WORLD), MPI_ERR_OP,
                 "defined on the pair types only (MPI_2INT, MPI_DOUBLE_INT, ...), not on MPI_INT");
    expect_error(MPI_Scan(x, y, 2, MPI_DOUBLE, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP, "not on MPI_DOUBLE");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Contiguous derived types: n elements of contiguous(k, T) are n * k T everywhere. */
static void test_contiguous(void) {
    WHERE("types: contiguous");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype three = MPI_DATATYPE_NULL;
    CHECK(MPI_Type_contiguous(3, MPI_INT, &three) == MPI_SUCCESS, "contiguous");
    int size = 0;
    MPI_Aint lb = -1;
    MPI_Aint extent = -1;
    MPI_Count size_x = 0;
    MPI_Count lb_x = -1;
    MPI_Count extent_x = -1;
    /* Size and extent are known before the commit; communication is not. */
    CHECK(MPI_Type_size(three, &size) == MPI_SUCCESS && size == 3 * (int)sizeof(int), "size %d", size);
    CHECK(MPI_Type_get_extent(three, &lb, &extent) == MPI_SUCCESS && lb == 0 && extent == 3 * (MPI_Aint)sizeof(int),
          "extent %ld", (long)extent);
    int ints[64];
    int got[64];
    expect_error(MPI_Send(ints, 1, three, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "is not committed");
    expect_error(MPI_Allreduce(ints, got, 1, three, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_TYPE, "is not committed");
    CHECK(MPI_Type_commit(&three) == MPI_SUCCESS, "commit");
    MPI_Datatype six = MPI_DATATYPE_NULL; /* made of a derived type */
    CHECK(MPI_Type_contiguous(2, three, &six) == MPI_SUCCESS && MPI_Type_commit(&six) == MPI_SUCCESS, "six");
    CHECK(MPI_Type_size_x(six, &size_x) == MPI_SUCCESS && size_x == 6 * (MPI_Count)sizeof(int), "size_x");
    CHECK(MPI_Type_get_extent_x(six, &lb_x, &extent_x) == MPI_SUCCESS && lb_x == 0 &&
              extent_x == 6 * (MPI_Count)sizeof(int),
          "extent_x");
    MPI_Datatype pairs = MPI_DATATYPE_NULL; /* of a pair type: its padding is in the extent, not the size */
    CHECK(MPI_Type_contiguous(2, MPI_DOUBLE_INT, &pairs) == MPI_SUCCESS && MPI_Type_commit(&pairs) == MPI_SUCCESS,
          "pairs");
    CHECK(MPI_Type_size(pairs, &size) == MPI_SUCCESS && size == 2 * (int)(sizeof(double) + sizeof(int)), "size %d",
          size);
    CHECK(MPI_Type_get_extent(pairs, &lb, &extent) == MPI_SUCCESS && extent == 2 * (MPI_Aint)sizeof(double_int_pair),
          "extent %ld", (long)extent);

    /* Point to point: 2 of three arrive as 6 MPI_INT; Get_count in either type. */
    if (size_ > 1 && rank_ < 2) {
        const int peer = 1 - rank_;
        for (int i = 0; i < 6; ++i)
            ints[i] = rank_ * 100 + i;
        MPI_Status status;
        CHECK(MPI_Sendrecv(ints, 2, three, peer, 5, got, 64, MPI_INT, peer, 5, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
              "Sendrecv");
        int count = -1;
        MPI_Get_count(&status, MPI_INT, &count);
        CHECK(count == 6, "Get_count MPI_INT %d", count);
        MPI_Get_count(&status, three, &count);
        CHECK(count == 2, "Get_count three %d", count);
        MPI_Get_count(&status, six, &count);
        CHECK(count == 1, "Get_count six %d", count);
        for (int i = 0; i < 6; ++i)
            CHECK(got[i] == peer * 100 + i, "element %d: %d", i, got[i]);
        CHECK(MPI_Sendrecv(ints, 4, MPI_INT, peer, 6, got, 2, three, peer, 6, MPI_COMM_WORLD, &status) == MPI_SUCCESS,
              "Sendrecv");
        MPI_Get_count(&status, three, &count);
        CHECK(count == MPI_UNDEFINED, "4 ints as three: %d", count);
    }

    /* Collectives: Bcast, Allreduce with a predefined op, Gather with different types
     * of one signature, MAXLOC on a contiguous pair type. */
    for (int i = 0; i < 12; ++i)
        ints[i] = rank_ == 0 ? 7 * i : -1;
    CHECK(MPI_Bcast(ints, 2, six, 0, MPI_COMM_WORLD) == MPI_SUCCESS, "Bcast");
    for (int i = 0; i < 12; ++i)
        CHECK(ints[i] == 7 * i, "Bcast element %d: %d", i, ints[i]);
    for (int i = 0; i < 6; ++i)
        ints[i] = rank_ + i;
    CHECK(MPI_Allreduce(ints, got, 2, three, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS, "Allreduce");
    for (int i = 0; i < 6; ++i)
        CHECK(got[i] == size_ * (size_ - 1) / 2 + size_ * i, "Allreduce element %d: %d", i, got[i]);
    CHECK(MPI_Allreduce(ints, got, 1, six, MPI_BXOR, MPI_COMM_WORLD) == MPI_SUCCESS, "Allreduce BXOR");
    for (int i = 0; i < 6; ++i) {
        int want = 0;
        for (int r = 0; r < size_; ++r)
            want ^= r + i;
        CHECK(got[i] == want, "Allreduce BXOR element %d: %d, expected %d", i, got[i], want);
    }
    CHECK(MPI_Gather(ints, 1, three, got, 3, MPI_INT, size_ - 1, MPI_COMM_WORLD) == MPI_SUCCESS, "Gather");
    if (rank_ == size_ - 1)
        for (int r = 0; r < size_; ++r)
            for (int i = 0; i < 3; ++i)
                CHECK(got[3 * r + i] == r + i, "Gather rank %d element %d: %d", r, i, got[3 * r + i]);
    double_int_pair mine[4];
    double_int_pair best[4];
    fill_double_int(mine, 4);
    CHECK(MPI_Allreduce(mine, best, 2, pairs, MPI_MAXLOC, MPI_COMM_WORLD) == MPI_SUCCESS, "Allreduce MAXLOC");
    check_double_int("Allreduce of contiguous", 1, 0, size_ - 1, best, 0, 4);
    expect_error(MPI_Allreduce(mine, best, 2, pairs, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_OP, "MPI_DOUBLE_INT");
    expect_error(MPI_Allreduce(ints, got, 2, three, MPI_MAXLOC, MPI_COMM_WORLD), MPI_ERR_OP, "not on MPI_INT");

    /* A non-blocking reduction keeps working when its type is freed before it completes. */
    MPI_Datatype two = MPI_DATATYPE_NULL;
    CHECK(MPI_Type_contiguous(2, MPI_INT, &two) == MPI_SUCCESS && MPI_Type_commit(&two) == MPI_SUCCESS, "two");
    MPI_Request request = MPI_REQUEST_NULL;
    CHECK(MPI_Iallreduce(ints, got, 3, two, MPI_MAX, MPI_COMM_WORLD, &request) == MPI_SUCCESS, "Iallreduce");
    CHECK(MPI_Type_free(&two) == MPI_SUCCESS && two == MPI_DATATYPE_NULL, "free two");
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    const int waited = MPI_Wait(&request, MPI_STATUS_IGNORE);
    MPI_Error_string(waited, text, &length);
    CHECK(waited == MPI_SUCCESS, "Wait: %s", text);
    for (int i = 0; i < 6; ++i)
        CHECK(got[i] == size_ - 1 + i, "Iallreduce MAX element %d: %d", i, got[i]);

    /* Freed: a use is MPI_ERR_TYPE; a type made of it stays valid; a predefined type
     * cannot be freed. */
    MPI_Datatype old_three = three;
    CHECK(MPI_Type_free(&three) == MPI_SUCCESS && three == MPI_DATATYPE_NULL, "free");
    expect_error(MPI_Send(ints, 1, old_three, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE, "was freed");
    expect_error(MPI_Type_size(old_three, &size), MPI_ERR_TYPE, "was freed");
    expect_error(MPI_Type_free(&old_three), MPI_ERR_TYPE, "was freed");
    CHECK(MPI_Allreduce(ints, got, 1, six, MPI_MIN, MPI_COMM_WORLD) == MPI_SUCCESS, "six after three was freed");
    for (int i = 0; i < 6; ++i)
        CHECK(got[i] == i, "Allreduce MIN element %d: %d", i, got[i]);
    MPI_Datatype predefined = MPI_INT;
    expect_error(MPI_Type_free(&predefined), MPI_ERR_TYPE, "the predefined MPI_INT cannot be freed");
    expect_error(MPI_Type_contiguous(-1, MPI_INT, &two), MPI_ERR_COUNT, "negative count");
    expect_error(MPI_Type_contiguous(2, 12345, &two), MPI_ERR_TYPE, "invalid datatype 12345");
    CHECK(MPI_Type_free(&six) == MPI_SUCCESS && MPI_Type_free(&pairs) == MPI_SUCCESS, "free the others");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check_deadline(240, rank_);
    test_two_int();
    test_float_int();
    test_double_int();
    test_long_int();
    test_short_int();
    test_long_double_int();
    test_pair_errors();
    test_contiguous();
    WHERE("types: finalize");
    MPI_Finalize();
    if (rank_ == 0) printf("types: all checks passed\n");
    return 0;
}
