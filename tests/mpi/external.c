/* Data for other machines and operations of the application (tests/mpi/external.c):
 * MPI_Pack_external's bytes are the standard's external32 (big-endian, fixed sizes,
 * no padding), checked byte by byte, and come back unchanged, through a derived
 * type too; a long that does not fit 4 bytes is refused; MPI_Type_match_size and the
 * C++ and Fortran names; generalized requests (MPI_Grequest_start): MPI_Test says
 * not done until MPI_Grequest_complete, then MPI_Wait's status is query_fn's and
 * free_fn ran once, MPI_Cancel calls cancel_fn, another thread may complete one;
 * then the ranks exchange external32 bytes as MPI_PACKED. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <float.h>
#include <pthread.h>
#include <stdint.h>

static void external32(void) {
    WHERE("external32 of basic types");
    const int ints[3] = {1, -2, 0x01020304};
    unsigned char buf[256];
    MPI_Aint position = 0, size = 0;
    CHECK(MPI_Pack_external_size("external32", 3, MPI_INT, &size) == MPI_SUCCESS && size == 12, "size %ld", (long)size);
    CHECK(MPI_Pack_external("external32", ints, 3, MPI_INT, buf, sizeof buf, &position) == MPI_SUCCESS, "pack ints");
    CHECK(position == 12, "position %ld", (long)position);
    const unsigned char want_ints[12] = {0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4};
    CHECK(memcmp(buf, want_ints, 12) == 0, "ints not big-endian");
    /* MPI_LONG is 4 bytes in external32; a double 8, IEEE, big-endian. */
    const long longs[2] = {-5, 70000};
    const double d = 1.0;
    const short pair_value = 7;
    struct {
        short value;
        int index;
    } si = {pair_value, 9};
    CHECK(MPI_Pack_external("external32", longs, 2, MPI_LONG, buf, sizeof buf, &position) == MPI_SUCCESS, "longs");
    CHECK(MPI_Pack_external("external32", &d, 1, MPI_DOUBLE, buf, sizeof buf, &position) == MPI_SUCCESS, "double");
    CHECK(MPI_Pack_external("external32", &si, 1, MPI_SHORT_INT, buf, sizeof buf, &position) == MPI_SUCCESS, "pair");
    CHECK(position == 12 + 8 + 8 + 6, "position %ld after the long, double and short-int pair", (long)position);
    const unsigned char want_rest[22] = {0xff, 0xff, 0xff, 0xfb, 0, 1, 0x11, 0x70, 0x3f, 0xf0, 0,
                                         0,    0,    0,    0,    0, 0, 7,    0,    0,    0,    9};
    CHECK(memcmp(buf + 12, want_rest, 22) == 0, "long, double or pair bytes wrong");
    /* long double: IEEE binary128, 1.5 is 0x3fff8000 0... */
    const long double ld[2] = {1.5L, -LDBL_MIN};
    MPI_Aint at = 0;
    unsigned char quad[32];
    CHECK(MPI_Pack_external("external32", ld, 2, MPI_LONG_DOUBLE, quad, sizeof quad, &at) == MPI_SUCCESS && at == 32,
          "long double");
    const unsigned char want_quad[4] = {0x3f, 0xff, 0x80, 0};
    CHECK(memcmp(quad, want_quad, 4) == 0 && quad[4] == 0 && quad[15] == 0, "1.5L as binary128");
    long double back[2] = {0, 0};
    at = 0;
    CHECK(MPI_Unpack_external("external32", quad, sizeof quad, &at, back, 2, MPI_LONG_DOUBLE) == MPI_SUCCESS,
          "unpack long double");
    CHECK(back[0] == 1.5L && back[1] == -LDBL_MIN, "long doubles back %Lg %Lg", back[0], back[1]);

    /* Back from external32. */
    int ints_back[3] = {0, 0, 0};
    long longs_back[2] = {0, 0};
    double d_back = 0;
    si.value = 0;
    si.index = 0;
    position = 0;
    CHECK(MPI_Unpack_external("external32", buf, 34, &position, ints_back, 3, MPI_INT) == MPI_SUCCESS, "unpack");
    CHECK(MPI_Unpack_external("external32", buf, 34, &position, longs_back, 2, MPI_LONG) == MPI_SUCCESS, "unpack");
    CHECK(MPI_Unpack_external("external32", buf, 34, &position, &d_back, 1, MPI_DOUBLE) == MPI_SUCCESS, "unpack");
    CHECK(MPI_Unpack_external("external32", buf, 34, &position, &si, 1, MPI_SHORT_INT) == MPI_SUCCESS, "unpack");
    CHECK(ints_back[0] == 1 && ints_back[1] == -2 && ints_back[2] == 0x01020304, "ints back");
    CHECK(longs_back[0] == -5 && longs_back[1] == 70000 && d_back == 1.0, "longs or double back");
    CHECK(si.value == 7 && si.index == 9, "pair back %d %d", si.value, si.index);

    WHERE("external32 of a vector");
    /* Every other int of 6: 3 ints, 12 bytes, in order. */
    MPI_Datatype every_other;
    MPI_Type_vector(3, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    const int six[6] = {10, -1, 20, -1, 30, -1};
    CHECK(MPI_Pack_external_size("external32", 1, every_other, &size) == MPI_SUCCESS && size == 12, "vector size");
    position = 0;
    CHECK(MPI_Pack_external("external32", six, 1, every_other, buf, sizeof buf, &position) == MPI_SUCCESS, "vector");
    CHECK(buf[3] == 10 && buf[7] == 20 && buf[11] == 30 && buf[0] == 0, "vector bytes");
    int six_back[6] = {0, 0, 0, 0, 0, 0};
    position = 0;
    CHECK(MPI_Unpack_external("external32", buf, 12, &position, six_back, 1, every_other) == MPI_SUCCESS, "unpack");
    CHECK(six_back[0] == 10 && six_back[1] == 0 && six_back[2] == 20 && six_back[4] == 30, "vector back");
    MPI_Type_free(&every_other);

    WHERE("external32 errors");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const long too_big = (long)INT32_MAX + 1;
    position = 0;
    expect_error(MPI_Pack_external("external32", &too_big, 1, MPI_LONG, buf, sizeof buf, &position), MPI_ERR_ARG,
                 "does not fit");
    position = 0;
    expect_error(MPI_Pack_external("native", ints, 1, MPI_INT, buf, sizeof buf, &position), MPI_ERR_ARG, "native");
    position = 0;
    expect_error(MPI_Pack_external("external32", ints, 3, MPI_INT, buf, 11, &position), MPI_ERR_TRUNCATE, "beyond");
    position = 4;
    expect_error(MPI_Unpack_external("external32", buf, 8, &position, ints_back, 2, MPI_INT), MPI_ERR_TRUNCATE,
                 "beyond");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void type_names(void) {
    WHERE("MPI_Type_match_size and the C++ and Fortran names");
    MPI_Datatype t;
    int size = 0;
    MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &t);
    CHECK(t == MPI_DOUBLE, "REAL 8");
    MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 2, &t);
    MPI_Type_size(t, &size);
    CHECK(size == 2, "INTEGER 2: %d bytes", size);
    MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &t);
    CHECK(t == MPI_DOUBLE_COMPLEX && t == MPI_C_DOUBLE_COMPLEX, "COMPLEX 16");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &t), MPI_ERR_ARG, "3 bytes");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_size(MPI_CXX_BOOL, &size);
    CHECK(size == 1, "MPI_CXX_BOOL %d", size);
    MPI_Type_size(MPI_CXX_LONG_DOUBLE_COMPLEX, &size);
    CHECK(size == (int)(2 * sizeof(long double)), "MPI_CXX_LONG_DOUBLE_COMPLEX %d", size);
    CHECK(MPI_Comm_f2c(MPI_Comm_c2f(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "c2f and f2c");
    CHECK(MPI_Type_f2c(MPI_Type_c2f(MPI_DOUBLE)) == MPI_DOUBLE, "c2f and f2c");
}

struct work {
    int queried, freed, cancelled_complete, cancel_calls;
};

static int query(void* extra, MPI_Status* status) {
    struct work* w = extra;
    ++w->queried;
    status->MPI_SOURCE = 5;
    status->MPI_TAG = 6;
    MPI_Status_set_elements(status, MPI_INT, 4);
    MPI_Status_set_cancelled(status, 0);
    return MPI_SUCCESS;
}

static int release(void* extra) {
    ++((struct work*)extra)->freed;
    return MPI_SUCCESS;
}

static int cancel(void* extra, int complete) {
    struct work* w = extra;
    ++w->cancel_calls;
    w->cancelled_complete = complete;
    return MPI_SUCCESS;
}

static void* complete_later(void* request) {
    MPI_Grequest_complete(*(MPI_Request*)request);
    return NULL;
}

static void generalized(int provided) {
    WHERE("a generalized request");
    struct work w = {0, 0, -1, 0};
    MPI_Request r;
    MPI_Grequest_start(query, release, cancel, &w, &r);
    int flag = 1;
    MPI_Status status;
    MPI_Test(&r, &flag, &status);
    CHECK(!flag && r != MPI_REQUEST_NULL, "completed before MPI_Grequest_complete");
    MPI_Cancel(&r);
    CHECK(w.cancel_calls == 1 && w.cancelled_complete == 0, "cancel_fn %d calls, complete %d", w.cancel_calls,
          w.cancelled_complete);
    MPI_Grequest_complete(r);
    MPI_Wait(&r, &status);
    CHECK(r == MPI_REQUEST_NULL, "request not released");
    CHECK(w.queried == 1 && w.freed == 1, "query_fn %d and free_fn %d calls", w.queried, w.freed);
    int count = 0;
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(status.MPI_SOURCE == 5 && status.MPI_TAG == 6 && count == 4, "status %d %d %d", status.MPI_SOURCE,
          status.MPI_TAG, count);

    WHERE("generalized requests in MPI_Waitall, one completed by another thread");
    struct work w2 = {0, 0, -1, 0};
    MPI_Request rs[2];
    MPI_Grequest_start(query, release, cancel, &w2, &rs[0]);
    MPI_Grequest_start(query, release, cancel, &w2, &rs[1]);
    MPI_Grequest_complete(rs[0]);
    pthread_t thread;
    const int threaded = provided == MPI_THREAD_MULTIPLE;
    if (threaded)
        CHECK(pthread_create(&thread, NULL, complete_later, &rs[1]) == 0, "pthread_create");
    else
        MPI_Grequest_complete(rs[1]);
    MPI_Request copy[2] = {rs[0], rs[1]};
    MPI_Waitall(2, copy, MPI_STATUSES_IGNORE);
    if (threaded) pthread_join(thread, NULL);
    CHECK(w2.queried == 2 && w2.freed == 2, "query_fn %d and free_fn %d calls", w2.queried, w2.freed);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Grequest_complete(rs[0]), MPI_ERR_REQUEST, "generalized");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(60, rank);
    external32();
    type_names();
    generalized(provided);

    WHERE("external32 bytes between ranks");
    /* Each rank sends its rank and rank * 1.5 in external32 to the next. */
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const double value = rank * 1.5;
    unsigned char out[12], in[12];
    MPI_Aint position = 0;
    MPI_Pack_external("external32", &rank, 1, MPI_INT, out, sizeof out, &position);
    MPI_Pack_external("external32", &value, 1, MPI_DOUBLE, out, sizeof out, &position);
    MPI_Sendrecv(out, 12, MPI_PACKED, next, 1, in, 12, MPI_PACKED, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int from = -1;
    double got = -1;
    position = 0;
    MPI_Unpack_external("external32", in, sizeof in, &position, &from, 1, MPI_INT);
    MPI_Unpack_external("external32", in, sizeof in, &position, &got, 1, MPI_DOUBLE);
    CHECK(from == prev && got == prev * 1.5, "from %d got %g", from, got);
    MPI_Finalize();
    return 0;
}
