/* Large messages between two ranks (docs/mpi.md, "One copy"): above the 64 KiB eager
 * limit, over sci, the sender writes into the receiver's posted buffer itself; over tcp
 * (and with MSGPASS_SINGLE_COPY=0) the data goes through the technology. The program is
 * the same for every path: data whole at 64 KiB + 1, 1 MiB and 16 MiB by Send/Recv,
 * Isend/Irecv both ways at once (one message, and windows of them as osu_bibw), Ssend,
 * a receive from any source, a receive posted after the announcement came, the order
 * of large and eager messages of one tag, a receive into a non-contiguous type, and
 * MPI_ERR_TRUNCATE into a short buffer. */
#include "check.h"

static void fill(unsigned char* p, int from, int tag, int size) {
    for (int i = 0; i < size; ++i)
        p[i] = pattern(from, tag, size, i);
}

static void expect_pattern(const unsigned char* p, int from, int tag, int size, const char* what) {
    for (int i = 0; i < size; ++i)
        CHECK(p[i] == pattern(from, tag, size, i), "%s: byte %d of %d differs", what, i, size);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);
    CHECK(size == 2, "run with 2 ranks, not %d", size);
    const int other = 1 - rank;
    const int sizes[3] = {64 * 1024 + 1, 1024 * 1024, 16 * 1024 * 1024};
    unsigned char* a = malloc(16 * 1024 * 1024 + 64);
    unsigned char* b = malloc(16 * 1024 * 1024 + 64);
    CHECK(a != NULL && b != NULL, "memory");
    MPI_Status st;
    for (int k = 0; k < 3; ++k) {
        const int n = sizes[k];
        WHERE("single_copy: Send/Recv of %d bytes", n);
        if (rank == 0) {
            fill(a, 0, 1, n);
            CHECK(MPI_Send(a, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "send");
        } else {
            memset(b, 0, (size_t)n + 64);
            CHECK(MPI_Recv(b, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv");
            int count = -1;
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(count == n, "count %d", count);
            expect_pattern(b, 0, 1, n, "Send/Recv");
            for (int i = 0; i < 64; ++i)
                CHECK(b[n + i] == 0, "byte %d past the buffer written", i);
        }
        WHERE("single_copy: Isend/Irecv both ways, %d bytes", n);
        fill(a, rank, 2, n);
        MPI_Request r[2];
        MPI_Irecv(b, n, MPI_BYTE, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(a, n, MPI_BYTE, other, 2, MPI_COMM_WORLD, &r[1]);
        CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall");
        expect_pattern(b, other, 2, n, "Isend/Irecv from any source");
        WHERE("single_copy: Ssend of %d bytes", n);
        if (rank == 0) {
            fill(a, 0, 3, n);
            CHECK(MPI_Ssend(a, n, MPI_BYTE, 1, 3, MPI_COMM_WORLD) == MPI_SUCCESS, "ssend");
        } else {
            CHECK(MPI_Recv(b, n, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv of ssend");
            expect_pattern(b, 0, 3, n, "Ssend");
        }
    }
    /* osu_bibw's pattern: a window of receives, then of sends, both ranks at once; the
     * sends waited for first, then the receives. Each message whole, in order. */
    for (int round = 0; round < 2; ++round) {
        enum { window = 8, part = 256 * 1024 };
        WHERE("single_copy: windows of %d messages of %d bytes both ways, round %d", window, part, round);
        MPI_Request recvs[window], sends[window];
        for (int i = 0; i < window; ++i) {
            fill(a + (size_t)i * part, rank, 10 + i, part);
            memset(b + (size_t)i * part, 0, part);
            MPI_Irecv(b + (size_t)i * part, part, MPI_BYTE, other, 10, MPI_COMM_WORLD, &recvs[i]);
        }
        for (int i = 0; i < window; ++i)
            MPI_Isend(a + (size_t)i * part, part, MPI_BYTE, other, 10, MPI_COMM_WORLD, &sends[i]);
        CHECK(MPI_Waitall(window, sends, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall of the sends");
        CHECK(MPI_Waitall(window, recvs, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall of the receives");
        for (int i = 0; i < window; ++i)
            expect_pattern(b + (size_t)i * part, other, 10 + i, part, "a window both ways");
    }
    /* The receive posted after the announcement came: the small message sent after it
     * is received first. */
    WHERE("single_copy: a receive posted after the announcement");
    const int big = 1024 * 1024;
    if (rank == 0) {
        MPI_Request r;
        fill(a, 0, 4, big);
        MPI_Isend(a, big, MPI_BYTE, 1, 4, MPI_COMM_WORLD, &r);
        int token = 7;
        MPI_Send(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
        CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS, "wait");
    } else {
        int token = 0;
        MPI_Recv(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
        int flag = 0;
        while (!flag)
            MPI_Iprobe(0, 4, MPI_COMM_WORLD, &flag, &st); /* announced before the token */
        CHECK(MPI_Recv(b, big, MPI_BYTE, 0, 4, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv");
        expect_pattern(b, 0, 4, big, "posted after the announcement");
    }
    /* Large, eager, large of one tag: received in that order. */
    WHERE("single_copy: large, eager and large in order");
    if (rank == 0) {
        MPI_Request r[3];
        static unsigned char small[100];
        unsigned char* c = malloc((size_t)big);
        CHECK(c != NULL, "memory");
        fill(a, 0, 6, big);
        fill(small, 0, 6, 100);
        fill(c, 0, 6, big / 2);
        MPI_Isend(a, big, MPI_BYTE, 1, 6, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(small, 100, MPI_BYTE, 1, 6, MPI_COMM_WORLD, &r[1]);
        MPI_Isend(c, big / 2, MPI_BYTE, 1, 6, MPI_COMM_WORLD, &r[2]);
        CHECK(MPI_Waitall(3, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall");
        free(c);
    } else {
        const int expected[3] = {big, 100, big / 2};
        for (int i = 0; i < 3; ++i) {
            CHECK(MPI_Recv(b, big, MPI_BYTE, 0, 6, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv %d", i);
            int count = -1;
            MPI_Get_count(&st, MPI_BYTE, &count);
            CHECK(count == expected[i], "message %d: %d bytes, expected %d", i, count, expected[i]);
            expect_pattern(b, 0, 6, count, "in order");
        }
    }
    /* A receive into a vector type (not contiguous: through the technology). */
    WHERE("single_copy: a receive into a vector type");
    if (rank == 0) {
        fill(a, 0, 7, big);
        MPI_Send(a, big, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
    } else {
        MPI_Datatype every_other;
        MPI_Type_vector(big, 1, 2, MPI_BYTE, &every_other);
        MPI_Type_commit(&every_other);
        unsigned char* wide = calloc(2 * (size_t)big, 1);
        CHECK(wide != NULL, "memory");
        CHECK(MPI_Recv(wide, 1, every_other, 0, 7, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "recv vector");
        for (int i = 0; i < big; ++i)
            CHECK(wide[2 * i] == pattern(0, 7, big, i) && wide[2 * i + 1] == 0, "vector byte %d", i);
        free(wide);
        MPI_Type_free(&every_other);
    }
    /* Truncation: 1 MiB into 512 KiB. */
    WHERE("single_copy: 1 MiB into 512 KiB");
    if (rank == 0) {
        fill(a, 0, 8, big);
        MPI_Send(a, big, MPI_BYTE, 1, 8, MPI_COMM_WORLD);
    } else {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        memset(b, 0, (size_t)big);
        const int code = MPI_Recv(b, big / 2, MPI_BYTE, 0, 8, MPI_COMM_WORLD, &st);
        expect_error(code, MPI_ERR_TRUNCATE, "larger than the receive buffer");
        int count = -1;
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == big / 2, "truncated to %d bytes", count);
        for (int i = 0; i < big / 2; ++i)
            CHECK(b[i] == pattern(0, 8, big, i), "truncated byte %d", i);
        for (int i = big / 2; i < big; ++i)
            CHECK(b[i] == 0, "byte %d past the short buffer written", i);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
