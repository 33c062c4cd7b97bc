/* Wildcards and probe. Every other rank sends rank 0 three messages with tags 1, 2, 3
 * and a payload of a size only it knows; rank 0 takes them with MPI_ANY_SOURCE and
 * MPI_ANY_TAG after MPI_Probe and MPI_Get_count told it the size, and checks that each
 * source came 3 times, its messages in send order (non-overtaking), each intact. Then
 * MPI_Iprobe of a tag nobody sent says no, MPI_ANY_TAG with a named source, and a
 * collective in the middle that an MPI_ANY_TAG receive must not take. */
#include "check.h"

#include <string.h>

static int secret_size(int rank, int k) {
    return 1 + (rank * 7919 + k * 104729) % 50000;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    WHERE("wildcards: start");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank != 0) {
        for (int k = 1; k <= 3; ++k) {
            const int n = secret_size(rank, k);
            unsigned char* buf = malloc((size_t)n);
            for (int i = 0; i < n; ++i)
                buf[i] = pattern(rank, k, n, i);
            CHECK(MPI_Send(buf, n, MPI_UNSIGNED_CHAR, 0, k, MPI_COMM_WORLD) == MPI_SUCCESS, "send");
            free(buf);
        }
    } else {
        int* seen = calloc((size_t)size, sizeof(int));
        for (int m = 0; m < 3 * (size - 1); ++m) {
            MPI_Status st;
            CHECK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS, "probe");
            int n = -1;
            MPI_Get_count(&st, MPI_UNSIGNED_CHAR, &n);
            const int from = st.MPI_SOURCE;
            CHECK(from > 0 && from < size, "probe source %d", from);
            CHECK(st.MPI_TAG == seen[from] + 1, "from rank %d tag %d after %d messages", from, st.MPI_TAG, seen[from]);
            CHECK(n == secret_size(from, st.MPI_TAG), "size %d from %d", n, from);
            /* The probed message is the one a receive naming the same envelope takes. */
            unsigned char* buf = malloc((size_t)n);
            MPI_Status got;
            CHECK(MPI_Recv(buf, n, MPI_UNSIGNED_CHAR, from, st.MPI_TAG, MPI_COMM_WORLD, &got) == MPI_SUCCESS, "recv");
            for (int i = 0; i < n; ++i)
                CHECK(buf[i] == pattern(from, st.MPI_TAG, n, i), "byte %d of %d from %d", i, n, from);
            free(buf);
            ++seen[from];
        }
        for (int r = 1; r < size; ++r)
            CHECK(seen[r] == 3, "rank %d: %d messages", r, seen[r]);
        int flag = 1;
        MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(flag == 0, "iprobe found a message nobody sent");
        free(seen);
    }
    WHERE("wildcards: A collective's messages are not for the application's ...");
    /* A collective's messages are not for the application's wildcards: the last rank
     * posts MPI_ANY_SOURCE/MPI_ANY_TAG first, then everybody broadcasts, then rank 0
     * sends it the message the receive is for. */
    if (size > 1) {
        int value = -1;
        MPI_Request r = MPI_REQUEST_NULL;
        if (rank == size - 1) MPI_Irecv(&value, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r);
        int b = rank == 0 ? 4242 : 0;
        MPI_Bcast(&b, 1, MPI_INT, 0, MPI_COMM_WORLD);
        CHECK(b == 4242, "bcast %d", b);
        if (rank == 0) MPI_Send(&rank, 1, MPI_INT, size - 1, 12345, MPI_COMM_WORLD);
        if (rank == size - 1) {
            MPI_Status st;
            MPI_Wait(&r, &st);
            CHECK(value == 0 && st.MPI_SOURCE == 0 && st.MPI_TAG == 12345, "wildcard took %d from %d tag %d", value,
                  st.MPI_SOURCE, st.MPI_TAG);
        }
        /* A named source with MPI_ANY_TAG, messages of two tags from it in order. */
        if (rank == 0) {
            int a = 1;
            int c = 2;
            MPI_Send(&a, 1, MPI_INT, 1, 50, MPI_COMM_WORLD);
            MPI_Send(&c, 1, MPI_INT, 1, 60, MPI_COMM_WORLD);
        } else if (rank == 1) {
            int x = 0;
            MPI_Status st;
            MPI_Recv(&x, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(x == 1 && st.MPI_TAG == 50, "first %d tag %d", x, st.MPI_TAG);
            MPI_Recv(&x, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(x == 2 && st.MPI_TAG == 60, "second %d tag %d", x, st.MPI_TAG);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("wildcards: %d ranks ok\n", size);
    WHERE("wildcards: MPI_Finalize");
    MPI_Finalize();
    return 0;
}
