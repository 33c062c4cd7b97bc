// mpi.h from C++ (C linkage): each rank adds its rank with MPI_Allreduce and checks
// the sum; built by the wrapper test with msgpass-mpicxx.
#include <mpi.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<long> mine{rank, 1};
    std::vector<long> sum(2);
    MPI_Allreduce(mine.data(), sum.data(), 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum[0] != static_cast<long>(size) * (size - 1) / 2 || sum[1] != size) {
        std::fprintf(stderr, "rank %d: sums %ld %ld\n", rank, sum[0], sum[1]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) std::printf("allreduce from C++: %d ranks ok\n", size);
    MPI_Finalize();
    return 0;
}
