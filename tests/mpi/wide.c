/* A partition wider than the seed's sci defaults served (64 nodes): msgpass-run -n 72
 * makes files that write no sci size, so the header area and the receive slots follow
 * the node count. A token goes once around the ring of all ranks (each rank adds its
 * rank), rank 0 checks the sum, and a reduction checks that every rank took part; the
 * ranks are otherwise idle. */
#include "check.h"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_deadline(240, rank); /* a hang fails naming the last WHERE */
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int right = (rank + 1) % size;
    const int left = (rank + size - 1) % size;

    WHERE("wide: the token around the ring");
    long token = 0;
    if (rank == 0) {
        MPI_Send(&token, 1, MPI_LONG, right, 7, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_LONG, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(token == (long)size * (size - 1) / 2, "token %ld for %d ranks", token, size);
    } else {
        MPI_Recv(&token, 1, MPI_LONG, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        MPI_Send(&token, 1, MPI_LONG, right, 7, MPI_COMM_WORLD);
    }

    WHERE("wide: the count of the ranks");
    int one = 1;
    int count = 0;
    MPI_Allreduce(&one, &count, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(count == size, "%d ranks counted of %d", count, size);

    MPI_Finalize();
    return 0;
}
