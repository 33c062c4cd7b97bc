/* Cartesian topologies by their documented behaviour: MPI_Dims_create balances a
 * factorisation and keeps fixed entries; a grid numbers its ranks row-major; shifts
 * wrap along periodic dimensions and give MPI_PROC_NULL past the end of the others; a
 * halo exchange over the shifts moves each rank's value to its neighbours; Cart_sub
 * keeps rows; ranks beyond the grid get MPI_COMM_NULL; a duplicate keeps the grid.
 * Runs with any number of ranks (1 too). */
#include "check.h"

static void dims_create(void) {
    WHERE("topology: MPI_Dims_create");
    int d2[2] = {0, 0};
    MPI_Dims_create(12, 2, d2);
    CHECK(d2[0] == 4 && d2[1] == 3, "12 in 2: %d x %d", d2[0], d2[1]);
    int d3[3] = {0, 0, 0};
    MPI_Dims_create(8, 3, d3);
    CHECK(d3[0] == 2 && d3[1] == 2 && d3[2] == 2, "8 in 3: %d %d %d", d3[0], d3[1], d3[2]);
    int fixed[3] = {0, 3, 0};
    MPI_Dims_create(30, 3, fixed);
    CHECK(fixed[1] == 3 && fixed[0] * fixed[2] == 10 && fixed[0] >= fixed[2], "30 with 3 fixed: %d %d %d", fixed[0],
          fixed[1], fixed[2]);
    int prime[2] = {0, 0};
    MPI_Dims_create(7, 2, prime);
    CHECK(prime[0] == 7 && prime[1] == 1, "7 in 2: %d %d", prime[0], prime[1]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int bad[2] = {4, 0};
    expect_error(MPI_Dims_create(6, 2, bad), MPI_ERR_DIMS, "do not divide");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);
    dims_create();

    WHERE("topology: a grid of the world, periodic in its first dimension");
    int dims[2] = {0, 0};
    MPI_Dims_create(size, 2, dims);
    const int periods[2] = {1, 0};
    MPI_Comm grid = MPI_COMM_NULL;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &grid) == MPI_SUCCESS && grid != MPI_COMM_NULL,
          "cart_create %d x %d", dims[0], dims[1]);
    int status = -1;
    MPI_Topo_test(grid, &status);
    CHECK(status == MPI_CART, "topo_test %d", status);
    MPI_Topo_test(MPI_COMM_WORLD, &status);
    CHECK(status == MPI_UNDEFINED, "the world has no topology: %d", status);
    int nd = 0;
    MPI_Cartdim_get(grid, &nd);
    CHECK(nd == 2, "cartdim %d", nd);
    int gdims[2], gperiods[2], coords[2];
    MPI_Cart_get(grid, 2, gdims, gperiods, coords);
    CHECK(gdims[0] == dims[0] && gdims[1] == dims[1] && gperiods[0] == 1 && gperiods[1] == 0, "cart_get");
    CHECK(coords[0] == rank / dims[1] && coords[1] == rank % dims[1], "row-major coordinates %d %d of rank %d",
          coords[0], coords[1], rank);
    int back = -1;
    MPI_Cart_rank(grid, coords, &back);
    CHECK(back == rank, "cart_rank %d", back);
    int wrapped[2] = {coords[0] + dims[0], coords[1]};
    MPI_Cart_rank(grid, wrapped, &back);
    CHECK(back == rank, "a periodic dimension wraps: %d", back);
    int other[2] = {-1, -1};
    MPI_Cart_coords(grid, size - 1, 2, other);
    CHECK(other[0] == dims[0] - 1 && other[1] == dims[1] - 1, "the last rank's coordinates %d %d", other[0], other[1]);

    int up = -1, down = -1, left = -1, right = -1;
    MPI_Cart_shift(grid, 0, 1, &up, &down);
    MPI_Cart_shift(grid, 1, 1, &left, &right);
    CHECK(up == ((coords[0] + dims[0] - 1) % dims[0]) * dims[1] + coords[1], "shift source along 0: %d", up);
    CHECK(down == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1], "shift dest along 0: %d", down);
    CHECK(left == (coords[1] == 0 ? MPI_PROC_NULL : rank - 1), "shift source along 1: %d", left);
    CHECK(right == (coords[1] == dims[1] - 1 ? MPI_PROC_NULL : rank + 1), "shift dest along 1: %d", right);

    WHERE("topology: a halo exchange over the shifts");
    int mine = 1000 + rank;
    int from_up = -1, from_left = -7;
    MPI_Sendrecv(&mine, 1, MPI_INT, down, 3, &from_up, 1, MPI_INT, up, 3, grid, MPI_STATUS_IGNORE);
    MPI_Sendrecv(&mine, 1, MPI_INT, right, 4, &from_left, 1, MPI_INT, left, 4, grid, MPI_STATUS_IGNORE);
    CHECK(from_up == 1000 + up, "from the rank above: %d", from_up);
    CHECK(left == MPI_PROC_NULL ? from_left == -7 : from_left == 1000 + left, "from the left: %d", from_left);

    WHERE("topology: rows by MPI_Cart_sub, the grid kept by a duplicate");
    const int keep_columns[2] = {0, 1};
    MPI_Comm row = MPI_COMM_NULL;
    MPI_Cart_sub(grid, keep_columns, &row);
    int row_size = 0, row_rank = -1;
    MPI_Comm_size(row, &row_size);
    MPI_Comm_rank(row, &row_rank);
    CHECK(row_size == dims[1] && row_rank == coords[1], "row %d of %d", row_rank, row_size);
    MPI_Cartdim_get(row, &nd);
    CHECK(nd == 1, "a row has one dimension: %d", nd);
    int sum = rank;
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, row);
    const int first = coords[0] * dims[1];
    CHECK(sum == first * dims[1] + dims[1] * (dims[1] - 1) / 2, "the row's sum %d", sum);
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(grid, &copy);
    MPI_Cartdim_get(copy, &nd);
    CHECK(nd == 2, "a duplicate keeps the grid: %d", nd);

    WHERE("topology: ranks beyond a smaller grid");
    const int one[1] = {(size + 1) / 2};
    const int no[1] = {0};
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Cart_create(MPI_COMM_WORLD, 1, one, no, 0, &half);
    CHECK((rank < one[0]) == (half != MPI_COMM_NULL), "rank %d of a grid of %d: %s", rank, one[0],
          half == MPI_COMM_NULL ? "MPI_COMM_NULL" : "in it");
    int mapped = -2;
    MPI_Cart_map(MPI_COMM_WORLD, 1, one, no, &mapped);
    CHECK(mapped == (rank < one[0] ? rank : MPI_UNDEFINED), "cart_map %d", mapped);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    expect_error(MPI_Cartdim_get(MPI_COMM_WORLD, &nd), MPI_ERR_TOPOLOGY, "has no Cartesian topology");
    const int too_many[1] = {size + 1};
    MPI_Comm none = MPI_COMM_NULL;
    expect_error(MPI_Cart_create(MPI_COMM_WORLD, 1, too_many, no, 0, &none), MPI_ERR_DIMS, "only");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (half != MPI_COMM_NULL) MPI_Comm_free(&half);
    MPI_Comm_free(&copy);
    MPI_Comm_free(&row);
    MPI_Comm_free(&grid);
    MPI_Finalize();
    return 0;
}
