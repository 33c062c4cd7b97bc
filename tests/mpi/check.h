/* What the MPI test programs share: CHECK names the rank, the place and the condition,
 * then ends every rank through MPI_Abort, so that msgpass-run (and ctest) report the
 * failure. */
#ifndef MSGPASS_MPI_TEST_CHECK_H
#define MSGPASS_MPI_TEST_CHECK_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static inline int check_rank(void) {
    int initialized = 0;
    int rank = -1;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", check_rank(), __FILE__, __LINE__, #cond);            \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            MPI_Abort(MPI_COMM_WORLD, 3);                                                                              \
        }                                                                                                              \
    } while (0)

/* The byte i of a message of (from, tag, size) in the tests: any mistake of source,
 * tag, size or offset shows. */
static inline unsigned char pattern(int from, int tag, int size, int i) {
    return (unsigned char)(from * 31 + tag * 7 + size * 3 + i * 13 + (i >> 8));
}

#endif
