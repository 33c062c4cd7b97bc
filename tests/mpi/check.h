/* What the MPI test programs share: CHECK names the rank, the place and the condition,
 * then ends every rank through MPI_Abort, so that msgpass-run (and ctest) report the
 * failure. check_deadline(seconds, rank) arms a deadline: when it passes, the program prints the
 * last place WHERE named and exits with code 4 (a hang becomes a failure that says
 * where it was). */
#ifndef MSGPASS_MPI_TEST_CHECK_H
#define MSGPASS_MPI_TEST_CHECK_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char check_where[256] = "before the first WHERE";
static char check_deadline_line[64] = "deadline passed at: ";

/* Only write(2) in the handler: the place was formatted when it was set. */
static void check_deadline_hit(int sig) {
    (void)sig;
    ssize_t n = write(2, check_deadline_line, strlen(check_deadline_line));
    n += write(2, check_where, strlen(check_where));
    n += write(2, "\n", 1);
    (void)n;
    _exit(4);
}

static inline void check_deadline(unsigned seconds, int rank) {
    snprintf(check_deadline_line, sizeof check_deadline_line, "rank %d: deadline of %u s passed at: ", rank, seconds);
    signal(SIGALRM, check_deadline_hit);
    alarm(seconds);
}

#define WHERE(...) snprintf(check_where, sizeof check_where, __VA_ARGS__)

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

/* An MPI call returned code: its class must be expected_class and its text (whose
 * length MPI_Error_string gives) must say words. */
static inline void expect_error(int code, int expected_class, const char* words) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    int cls = -1;
    MPI_Error_class(code, &cls);
    MPI_Error_string(code, text, &length);
    CHECK(cls == expected_class, "error class %d, expected %d (%s)", cls, expected_class, text);
    CHECK(strstr(text, words) != NULL, "'%s' does not say '%s'", text, words);
    CHECK(length == (int)strlen(text), "length %d", length);
}

/* The byte i of a message of (from, tag, size) in the tests: any mistake of source,
 * tag, size or offset shows. */
static inline unsigned char pattern(int from, int tag, int size, int i) {
    return (unsigned char)(from * 31 + tag * 7 + size * 3 + i * 13 + (i >> 8));
}

#endif
