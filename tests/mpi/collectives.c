/* Every collective checked against the result computed here sequentially: Bcast,
 * Reduce and Allreduce (every predefined operation on every basic type it is defined
 * for: MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN on all of them, the logical operations on
 * the integer types, the bitwise ones on the integer types and MPI_BYTE),
 * Gather, Scatter and Allgather, with every root and odd counts, MPI_IN_PLACE, and
 * on MPI_COMM_SELF. The values are small integers, exact in every type, chosen so
 * that no sum or product leaves the range of a signed char. */
#include "check.h"

#include <complex.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <wchar.h>

static const MPI_Datatype types[] = {MPI_CHAR,
                                     MPI_SIGNED_CHAR,
                                     MPI_UNSIGNED_CHAR,
                                     MPI_BYTE,
                                     MPI_SHORT,
                                     MPI_UNSIGNED_SHORT,
                                     MPI_INT,
                                     MPI_UNSIGNED,
                                     MPI_LONG,
                                     MPI_UNSIGNED_LONG,
                                     MPI_LONG_LONG,
                                     MPI_UNSIGNED_LONG_LONG,
                                     MPI_FLOAT,
                                     MPI_DOUBLE,
                                     MPI_LONG_DOUBLE,
                                     MPI_INT8_T,
                                     MPI_INT16_T,
                                     MPI_INT32_T,
                                     MPI_INT64_T,
                                     MPI_UINT8_T,
                                     MPI_UINT16_T,
                                     MPI_UINT32_T,
                                     MPI_UINT64_T,
                                     MPI_C_BOOL,
                                     MPI_WCHAR,
                                     MPI_AINT,
                                     MPI_OFFSET,
                                     MPI_COUNT,
                                     MPI_C_FLOAT_COMPLEX,
                                     MPI_C_DOUBLE_COMPLEX,
                                     MPI_C_LONG_DOUBLE_COMPLEX};
static const char* const type_names[] = {"CHAR",
                                         "SIGNED_CHAR",
                                         "UNSIGNED_CHAR",
                                         "BYTE",
                                         "SHORT",
                                         "UNSIGNED_SHORT",
                                         "INT",
                                         "UNSIGNED",
                                         "LONG",
                                         "UNSIGNED_LONG",
                                         "LONG_LONG",
                                         "UNSIGNED_LONG_LONG",
                                         "FLOAT",
                                         "DOUBLE",
                                         "LONG_DOUBLE",
                                         "INT8_T",
                                         "INT16_T",
                                         "INT32_T",
                                         "INT64_T",
                                         "UINT8_T",
                                         "UINT16_T",
                                         "UINT32_T",
                                         "UINT64_T",
                                         "C_BOOL",
                                         "WCHAR",
                                         "AINT",
                                         "OFFSET",
                                         "COUNT",
                                         "C_FLOAT_COMPLEX",
                                         "C_DOUBLE_COMPLEX",
                                         "C_LONG_DOUBLE_COMPLEX"};
enum { n_types = sizeof types / sizeof types[0] };
static const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX,  MPI_MIN, MPI_LAND,
                             MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
static const char* const op_names[] = {"SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"};
enum { n_ops = sizeof ops / sizeof ops[0] };

/* Whether the standard defines op on type: arithmetic on every type here, logical on
 * the integer types, bitwise on the integer types and MPI_BYTE. */
static int defined(int op, MPI_Datatype t) {
    const int complex_type = t == MPI_C_FLOAT_COMPLEX || t == MPI_C_DOUBLE_COMPLEX || t == MPI_C_LONG_DOUBLE_COMPLEX;
    if (complex_type) return ops[op] == MPI_SUM || ops[op] == MPI_PROD;
    if (t == MPI_C_BOOL) return ops[op] == MPI_LAND || ops[op] == MPI_LOR || ops[op] == MPI_LXOR;
    const int floating = t == MPI_FLOAT || t == MPI_DOUBLE || t == MPI_LONG_DOUBLE;
    if (ops[op] == MPI_LAND || ops[op] == MPI_LOR || ops[op] == MPI_LXOR) return !floating && t != MPI_BYTE;
    if (ops[op] == MPI_BAND || ops[op] == MPI_BOR || ops[op] == MPI_BXOR) return !floating;
    return 1;
}
static const int counts[] = {1, 3, 17, 1001};

static void set(MPI_Datatype t, void* buf, int i, long long v) {
    if (t == MPI_CHAR)
        ((char*)buf)[i] = (char)v;
    else if (t == MPI_SIGNED_CHAR)
        ((signed char*)buf)[i] = (signed char)v;
    else if (t == MPI_UNSIGNED_CHAR || t == MPI_BYTE)
        ((unsigned char*)buf)[i] = (unsigned char)v;
    else if (t == MPI_SHORT)
        ((short*)buf)[i] = (short)v;
    else if (t == MPI_UNSIGNED_SHORT)
        ((unsigned short*)buf)[i] = (unsigned short)v;
    else if (t == MPI_INT)
        ((int*)buf)[i] = (int)v;
    else if (t == MPI_UNSIGNED)
        ((unsigned*)buf)[i] = (unsigned)v;
    else if (t == MPI_LONG)
        ((long*)buf)[i] = (long)v;
    else if (t == MPI_UNSIGNED_LONG)
        ((unsigned long*)buf)[i] = (unsigned long)v;
    else if (t == MPI_LONG_LONG)
        ((long long*)buf)[i] = v;
    else if (t == MPI_UNSIGNED_LONG_LONG)
        ((unsigned long long*)buf)[i] = (unsigned long long)v;
    else if (t == MPI_FLOAT)
        ((float*)buf)[i] = (float)v;
    else if (t == MPI_DOUBLE)
        ((double*)buf)[i] = (double)v;
    else if (t == MPI_LONG_DOUBLE)
        ((long double*)buf)[i] = (long double)v;
    else if (t == MPI_INT8_T)
        ((int8_t*)buf)[i] = (int8_t)v;
    else if (t == MPI_INT16_T)
        ((int16_t*)buf)[i] = (int16_t)v;
    else if (t == MPI_INT32_T)
        ((int32_t*)buf)[i] = (int32_t)v;
    else if (t == MPI_INT64_T)
        ((int64_t*)buf)[i] = (int64_t)v;
    else if (t == MPI_UINT8_T)
        ((uint8_t*)buf)[i] = (uint8_t)v;
    else if (t == MPI_UINT16_T)
        ((uint16_t*)buf)[i] = (uint16_t)v;
    else if (t == MPI_UINT32_T)
        ((uint32_t*)buf)[i] = (uint32_t)v;
    else if (t == MPI_UINT64_T)
        ((uint64_t*)buf)[i] = (uint64_t)v;
    else if (t == MPI_C_BOOL)
        ((bool*)buf)[i] = v != 0;
    else if (t == MPI_WCHAR)
        ((wchar_t*)buf)[i] = (wchar_t)v;
    else if (t == MPI_AINT)
        ((MPI_Aint*)buf)[i] = (MPI_Aint)v;
    else if (t == MPI_OFFSET)
        ((MPI_Offset*)buf)[i] = (MPI_Offset)v;
    else if (t == MPI_COUNT)
        ((MPI_Count*)buf)[i] = (MPI_Count)v;
    else if (t == MPI_C_FLOAT_COMPLEX)
        ((float complex*)buf)[i] = (float)v;
    else if (t == MPI_C_DOUBLE_COMPLEX)
        ((double complex*)buf)[i] = (double)v;
    else
        ((long double complex*)buf)[i] = (long double)v;
}

static long long get(MPI_Datatype t, const void* buf, int i) {
    if (t == MPI_CHAR) return ((const char*)buf)[i];
    if (t == MPI_SIGNED_CHAR) return ((const signed char*)buf)[i];
    if (t == MPI_UNSIGNED_CHAR || t == MPI_BYTE) return ((const unsigned char*)buf)[i];
    if (t == MPI_SHORT) return ((const short*)buf)[i];
    if (t == MPI_UNSIGNED_SHORT) return ((const unsigned short*)buf)[i];
    if (t == MPI_INT) return ((const int*)buf)[i];
    if (t == MPI_UNSIGNED) return ((const unsigned*)buf)[i];
    if (t == MPI_LONG) return ((const long*)buf)[i];
    if (t == MPI_UNSIGNED_LONG) return (long long)((const unsigned long*)buf)[i];
    if (t == MPI_LONG_LONG) return ((const long long*)buf)[i];
    if (t == MPI_UNSIGNED_LONG_LONG) return (long long)((const unsigned long long*)buf)[i];
    if (t == MPI_FLOAT) return (long long)((const float*)buf)[i];
    if (t == MPI_DOUBLE) return (long long)((const double*)buf)[i];
    if (t == MPI_LONG_DOUBLE) return (long long)((const long double*)buf)[i];
    if (t == MPI_INT8_T) return ((const int8_t*)buf)[i];
    if (t == MPI_INT16_T) return ((const int16_t*)buf)[i];
    if (t == MPI_INT32_T) return ((const int32_t*)buf)[i];
    if (t == MPI_INT64_T) return ((const int64_t*)buf)[i];
    if (t == MPI_UINT8_T) return ((const uint8_t*)buf)[i];
    if (t == MPI_UINT16_T) return ((const uint16_t*)buf)[i];
    if (t == MPI_UINT32_T) return ((const uint32_t*)buf)[i];
    if (t == MPI_UINT64_T) return (long long)((const uint64_t*)buf)[i];
    if (t == MPI_C_BOOL) return ((const bool*)buf)[i];
    if (t == MPI_WCHAR) return ((const wchar_t*)buf)[i];
    if (t == MPI_AINT) return ((const MPI_Aint*)buf)[i];
    if (t == MPI_OFFSET) return ((const MPI_Offset*)buf)[i];
    if (t == MPI_COUNT) return ((const MPI_Count*)buf)[i];
    /* the complex types: the values are real, so is every sum and product; a stray
     * imaginary part shows as a wrong value */
    if (t == MPI_C_FLOAT_COMPLEX) {
        const float complex z = ((const float complex*)buf)[i];
        return cimagf(z) != 0 ? -999 : (long long)crealf(z);
    }
    if (t == MPI_C_DOUBLE_COMPLEX) {
        const double complex z = ((const double complex*)buf)[i];
        return cimag(z) != 0 ? -999 : (long long)creal(z);
    }
    const long double complex z = ((const long double complex*)buf)[i];
    return cimagl(z) != 0 ? -999 : (long long)creall(z);
}

/* The value rank r contributes at position i for op. */
static long long value(int op, int r, int i) {
    if (ops[op] == MPI_PROD) return (r + i) % 3 == 0 ? 2 : 1; /* at most 2^3 with 8 ranks */
    if (ops[op] == MPI_SUM) return (r + i) % 5;               /* at most 32 */
    /* logical: zero often enough that LAND, LOR and LXOR each give both answers */
    if (ops[op] == MPI_LAND || ops[op] == MPI_LOR || ops[op] == MPI_LXOR) return (r + i) % 3 == 0 ? 0 : 1 + (r + i) % 4;
    if (ops[op] == MPI_BAND) return 0x7f & ~(1 << ((r + i) % 7)); /* one bit cleared per rank */
    if (ops[op] == MPI_BOR || ops[op] == MPI_BXOR) return 1 << ((r * 3 + i) % 7);
    return (r * 7 + i * 3) % 11;
}

static long long expected(int op, int size, int i) {
    long long acc = value(op, 0, i);
    for (int r = 1; r < size; ++r) {
        const long long v = value(op, r, i);
        if (ops[op] == MPI_SUM)
            acc += v;
        else if (ops[op] == MPI_PROD)
            acc *= v;
        else if (ops[op] == MPI_MAX)
            acc = v > acc ? v : acc;
        else if (ops[op] == MPI_MIN)
            acc = v < acc ? v : acc;
        else if (ops[op] == MPI_LAND)
            acc = acc && v;
        else if (ops[op] == MPI_LOR)
            acc = acc || v;
        else if (ops[op] == MPI_LXOR)
            acc = !acc != !v;
        else if (ops[op] == MPI_BAND)
            acc &= v;
        else if (ops[op] == MPI_BOR)
            acc |= v;
        else
            acc ^= v;
    }
    return acc;
}

/* What type t holds of the expected value (C's bool keeps only whether it is 0). */
static long long want(MPI_Datatype t, int op, int size, int i) {
    const long long e = expected(op, size, i);
    return t == MPI_C_BOOL ? e != 0 : e;
}

static void check_reductions(MPI_Comm comm) {
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    void* send = malloc(1001 * 32);
    void* recv = malloc(1001 * 32);
    void* kept = malloc(1001 * 32);
    memset(send, 0, 1001 * 32);
    for (int t = 0; t < n_types; ++t) {
        for (int o = 0; o < n_ops; ++o) {
            if (!defined(o, types[t])) continue;
            for (int c = 0; c < 4; ++c) {
                const int n = counts[c];
                const int root = (t + o + c) % size;
                WHERE("collectives: Reduce/Allreduce %s %s count %d size %d", op_names[o], type_names[t], n, size);
                for (int i = 0; i < n; ++i) {
                    set(types[t], send, i, value(o, rank, i));
                    set(types[t], recv, i, -1);
                }
                memcpy(kept, send, 1001 * 32);
                CHECK(MPI_Reduce(send, recv, n, types[t], ops[o], root, comm) == MPI_SUCCESS, "reduce");
                if (rank == root)
                    for (int i = 0; i < n; ++i)
                        CHECK(get(types[t], recv, i) == want(types[t], o, size, i),
                              "Reduce %s %s count %d root %d [%d]: %lld, expected %lld", op_names[o], type_names[t], n,
                              root, i, get(types[t], recv, i), want(types[t], o, size, i));
                CHECK(memcmp(send, kept, 1001 * 32) == 0, "Reduce %s %s count %d changed sendbuf", op_names[o],
                      type_names[t], n); /* the send buffer is only read */
                /* in place at the root: its recvbuf holds its own data */
                if (rank == root)
                    for (int i = 0; i < n; ++i)
                        set(types[t], recv, i, value(o, rank, i));
                CHECK(MPI_Reduce(rank == root ? MPI_IN_PLACE : send, recv, n, types[t], ops[o], root, comm) ==
                          MPI_SUCCESS,
                      "reduce in place");
                if (rank == root)
                    for (int i = 0; i < n; ++i)
                        CHECK(get(types[t], recv, i) == want(types[t], o, size, i),
                              "Reduce in place %s %s count %d root %d [%d]: %lld, expected %lld", op_names[o],
                              type_names[t], n, root, i, get(types[t], recv, i), want(types[t], o, size, i));
                CHECK(MPI_Allreduce(send, recv, n, types[t], ops[o], comm) == MPI_SUCCESS, "allreduce");
                for (int i = 0; i < n; ++i)
                    CHECK(get(types[t], recv, i) == want(types[t], o, size, i),
                          "Allreduce %s %s count %d [%d]: %lld, expected %lld", op_names[o], type_names[t], n, i,
                          get(types[t], recv, i), want(types[t], o, size, i));
                /* in place */
                for (int i = 0; i < n; ++i)
                    set(types[t], recv, i, value(o, rank, i));
                CHECK(MPI_Allreduce(MPI_IN_PLACE, recv, n, types[t], ops[o], comm) == MPI_SUCCESS,
                      "allreduce in place");
                for (int i = 0; i < n; ++i)
                    CHECK(get(types[t], recv, i) == want(types[t], o, size, i), "Allreduce in place %s %s [%d]",
                          op_names[o], type_names[t], i);
            }
        }
    }
    free(send);
    free(recv);
    free(kept);
}

static void check_moves(MPI_Comm comm) {
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int c = 0; c < 4; ++c) {
        const int n = counts[c];
        int* mine = malloc(sizeof(int) * (size_t)n);
        int* all = malloc(sizeof(int) * (size_t)n * (size_t)size);
        for (int root = 0; root < size; ++root) {
            WHERE("collectives: Bcast/Gather/Scatter/Allgather count %d root %d size %d", n, root, size);
            /* Bcast */
            for (int i = 0; i < n; ++i)
                mine[i] = rank == root ? root * 100000 + i : -1;
            CHECK(MPI_Bcast(mine, n, MPI_INT, root, comm) == MPI_SUCCESS, "bcast");
            for (int i = 0; i < n; ++i)
                CHECK(mine[i] == root * 100000 + i, "Bcast count %d root %d [%d]: %d", n, root, i, mine[i]);
            /* Gather: block r of the root's buffer is rank r's */
            for (int i = 0; i < n; ++i)
                mine[i] = rank * 100000 + i;
            for (int i = 0; i < n * size; ++i)
                all[i] = -1;
            CHECK(MPI_Gather(mine, n, MPI_INT, all, n, MPI_INT, root, comm) == MPI_SUCCESS, "gather");
            if (rank == root)
                for (int r = 0; r < size; ++r)
                    for (int i = 0; i < n; ++i)
                        CHECK(all[r * n + i] == r * 100000 + i, "Gather count %d root %d block %d [%d]: %d", n, root, r,
                              i, all[r * n + i]);
            /* Scatter: rank r gets block r of the root's */
            for (int r = 0; r < size; ++r)
                for (int i = 0; i < n; ++i)
                    all[r * n + i] = rank == root ? 7 * r + 1000 * i + root : -1;
            for (int i = 0; i < n; ++i)
                mine[i] = -1;
            CHECK(MPI_Scatter(all, n, MPI_INT, mine, n, MPI_INT, root, comm) == MPI_SUCCESS, "scatter");
            for (int i = 0; i < n; ++i)
                CHECK(mine[i] == 7 * rank + 1000 * i + root, "Scatter count %d root %d [%d]: %d", n, root, i, mine[i]);
            /* Gather in place: the root's own block is already where it goes */
            for (int i = 0; i < n * size; ++i)
                all[i] = rank == root && i / n == root ? root * 100000 + i % n : -1;
            for (int i = 0; i < n; ++i)
                mine[i] = rank * 100000 + i;
            CHECK(MPI_Gather(rank == root ? MPI_IN_PLACE : mine, n, MPI_INT, all, n, MPI_INT, root, comm) ==
                      MPI_SUCCESS,
                  "gather in place");
            if (rank == root)
                for (int r = 0; r < size; ++r)
                    for (int i = 0; i < n; ++i)
                        CHECK(all[r * n + i] == r * 100000 + i, "Gather in place count %d root %d block %d [%d]: %d", n,
                              root, r, i, all[r * n + i]);
            /* Scatter in place: the root receives nothing, its buffer stays as it was */
            for (int r = 0; r < size; ++r)
                for (int i = 0; i < n; ++i)
                    all[r * n + i] = rank == root ? 7 * r + 1000 * i + root : -1;
            for (int i = 0; i < n; ++i)
                mine[i] = -1;
            CHECK(MPI_Scatter(all, n, MPI_INT, rank == root ? MPI_IN_PLACE : mine, n, MPI_INT, root, comm) ==
                      MPI_SUCCESS,
                  "scatter in place");
            for (int i = 0; i < n; ++i)
                CHECK(mine[i] == (rank == root ? -1 : 7 * rank + 1000 * i + root),
                      "Scatter in place count %d root %d [%d]: %d", n, root, i, mine[i]);
            if (rank == root)
                for (int r = 0; r < size; ++r)
                    for (int i = 0; i < n; ++i)
                        CHECK(all[r * n + i] == 7 * r + 1000 * i + root, "Scatter in place changed sendbuf block %d",
                              r);
        }
        /* Allgather, and in place */
        for (int i = 0; i < n; ++i)
            mine[i] = rank * 3 + i * 11;
        CHECK(MPI_Allgather(mine, n, MPI_INT, all, n, MPI_INT, comm) == MPI_SUCCESS, "allgather");
        for (int r = 0; r < size; ++r)
            for (int i = 0; i < n; ++i)
                CHECK(all[r * n + i] == r * 3 + i * 11, "Allgather count %d block %d [%d]", n, r, i);
        for (int i = 0; i < n * size; ++i)
            all[i] = i / n == rank ? rank * 5 + (i % n) : -1;
        CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, n, MPI_INT, comm) == MPI_SUCCESS,
              "allgather in place");
        for (int r = 0; r < size; ++r)
            for (int i = 0; i < n; ++i)
                CHECK(all[r * n + i] == r * 5 + i, "Allgather in place count %d block %d [%d]", n, r, i);
        free(mine);
        free(all);
    }
    /* A double gather with a count of 0 on every rank moves nothing and succeeds. */
    double nothing = 0;
    CHECK(MPI_Gather(&nothing, 0, MPI_DOUBLE, &nothing, 0, MPI_DOUBLE, 0, comm) == MPI_SUCCESS, "empty gather");
    for (int k = 0; k < 50; ++k)
        CHECK(MPI_Barrier(comm) == MPI_SUCCESS, "barrier");
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    WHERE("collectives: start");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_reductions(MPI_COMM_WORLD);
    check_moves(MPI_COMM_WORLD);
    check_reductions(MPI_COMM_SELF);
    check_moves(MPI_COMM_SELF);
    if (rank == 0) printf("collectives: %d ranks ok\n", size);
    WHERE("collectives: MPI_Finalize");
    MPI_Finalize();
    return 0;
}
