/* Persistent collectives (MPI-4: MPI_Bcast_init and kin): the call makes an inactive
 * request (MPI_Test of it: flag 1, an empty status); each MPI_Start runs the
 * collective with the buffers' contents of that moment; the ranks may start their
 * persistent collectives in different orders (each took its place among the
 * communicator's collectives when it was made); MPI_Startall; a v-variant and a
 * neighbourhood one; MPI_Request_free. Runs with any number of ranks (1 too). */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(120, rank);

    WHERE("persistent_collectives: inactive when made");
    int value = 0;
    MPI_Request bcast, barrier;
    CHECK(MPI_Bcast_init(&value, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &bcast) == MPI_SUCCESS, "bcast_init");
    CHECK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &barrier) == MPI_SUCCESS, "barrier_init");
    int flag = 0;
    MPI_Status st;
    st.MPI_SOURCE = 42;
    st.MPI_TAG = 42;
    CHECK(MPI_Test(&bcast, &flag, &st) == MPI_SUCCESS && flag == 1 && bcast != MPI_REQUEST_NULL, "test of inactive");
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG, "an empty status (%d, %d)", st.MPI_SOURCE,
          st.MPI_TAG);

    WHERE("persistent_collectives: started in the other order on odd ranks, the buffer read at each start");
    for (int round = 0; round < 20; ++round) {
        value = rank == 0 ? 1000 + round : -1;
        if (rank % 2 == 0) {
            MPI_Start(&bcast);
            MPI_Start(&barrier);
        } else {
            MPI_Start(&barrier);
            MPI_Start(&bcast);
        }
        MPI_Request both[2] = {bcast, barrier};
        CHECK(MPI_Waitall(2, both, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall of round %d", round);
        CHECK(both[0] == bcast && both[1] == barrier, "persistent requests stay after completion");
        CHECK(value == 1000 + round, "round %d: bcast gave %d", round, value);
    }

    WHERE("persistent_collectives: allreduce and gatherv by MPI_Startall");
    int in = 0, sum = 0;
    int* counts = malloc((size_t)size * sizeof(int));
    int* displs = malloc((size_t)size * sizeof(int));
    int* gathered = malloc((size_t)size * (size_t)size * sizeof(int));
    int mine[64];
    CHECK(counts && displs && gathered && size <= 64, "malloc");
    for (int r = 0, at = 0; r < size; ++r) {
        counts[r] = r + 1;
        displs[r] = at;
        at += r + 1;
    }
    MPI_Request two[2];
    MPI_Allreduce_init(&in, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &two[0]);
    MPI_Gatherv_init(mine, rank + 1, MPI_INT, gathered, counts, displs, MPI_INT, size - 1, MPI_COMM_WORLD,
                     MPI_INFO_NULL, &two[1]);
    for (int round = 0; round < 5; ++round) {
        in = rank * round;
        for (int i = 0; i <= rank; ++i)
            mine[i] = rank * 100 + round;
        CHECK(MPI_Startall(2, two) == MPI_SUCCESS, "startall");
        CHECK(MPI_Waitall(2, two, MPI_STATUSES_IGNORE) == MPI_SUCCESS, "waitall");
        CHECK(sum == round * size * (size - 1) / 2, "round %d: allreduce gave %d", round, sum);
        if (rank == size - 1)
            for (int r = 0; r < size; ++r)
                for (int i = 0; i <= r; ++i)
                    CHECK(gathered[displs[r] + i] == r * 100 + round, "round %d: gatherv from %d: %d", round, r,
                          gathered[displs[r] + i]);
    }

    WHERE("persistent_collectives: a neighbourhood allgather on a ring");
    MPI_Comm ring;
    const int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    int ring_rank = 0;
    MPI_Comm_rank(ring, &ring_rank);
    int out = 0, around[2] = {-1, -1};
    MPI_Request nb;
    MPI_Neighbor_allgather_init(&out, 1, MPI_INT, around, 1, MPI_INT, ring, MPI_INFO_NULL, &nb);
    for (int round = 0; round < 3; ++round) {
        out = ring_rank + 10 * round;
        MPI_Start(&nb);
        MPI_Wait(&nb, MPI_STATUS_IGNORE);
        const int left = (ring_rank + size - 1) % size, right = (ring_rank + 1) % size;
        CHECK(around[0] == left + 10 * round && around[1] == right + 10 * round, "round %d: neighbours %d %d", round,
              around[0], around[1]);
    }

    WHERE("persistent_collectives: free");
    CHECK(MPI_Request_free(&nb) == MPI_SUCCESS && nb == MPI_REQUEST_NULL, "free");
    MPI_Request_free(&two[0]);
    MPI_Request_free(&two[1]);
    MPI_Request_free(&bcast);
    MPI_Request_free(&barrier);
    MPI_Comm_free(&ring);
    free(counts);
    free(displs);
    free(gathered);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("persistent_collectives: %d ranks ok\n", size);
    MPI_Finalize();
    return 0;
}
