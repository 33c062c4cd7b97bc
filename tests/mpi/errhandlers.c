/* Error handlers and error classes of the application. A handler made with
 * MPI_Comm_create_errhandler is called with the communicator and the code of the call
 * that failed on it, and that call then returns the code; a duplicate of the
 * communicator keeps the handler, a freed handler keeps serving where it is set but
 * cannot be set again; MPI_Comm_call_errhandler calls it on demand. Classes and codes
 * of MPI_Add_error_class/_code number up from MPI_ERR_LASTCODE + 1, map to their class,
 * have an empty string until MPI_Add_error_string, and MPI_LASTUSEDCODE follows them.
 * With the argument "fatal", MPI_Comm_call_errhandler under MPI_ERRORS_ARE_FATAL ends
 * the process naming the added code's string (ctest checks it through msgpass-run). */
#include "check.h"

static int calls = 0;
static MPI_Comm seen_comm = MPI_COMM_NULL;
static int seen_code = MPI_SUCCESS;

static void record(MPI_Comm* comm, int* code, ...) {
    ++calls;
    seen_comm = *comm;
    seen_code = *code;
}

static void expect_call(MPI_Comm comm, int code, const char* what) {
    CHECK(calls == 1, "%s: the handler ran %d times, expected once", what, calls);
    CHECK(seen_comm == comm, "%s: the handler got communicator %d, expected %d", what, (int)seen_comm, (int)comm);
    CHECK(seen_code == code, "%s: the handler got code %d, expected %d", what, seen_code, code);
    calls = 0;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_deadline(240, rank);
    WHERE("errhandlers: added classes and codes");

    int cls = 0;
    int code = 0;
    int other = 0;
    CHECK(MPI_Add_error_class(&cls) == MPI_SUCCESS && cls > MPI_ERR_LASTCODE, "new class %d", cls);
    CHECK(MPI_Add_error_code(cls, &code) == MPI_SUCCESS && code > cls, "new code %d of class %d", code, cls);
    CHECK(MPI_Add_error_code(MPI_ERR_ARG, &other) == MPI_SUCCESS && other > code, "code %d of MPI_ERR_ARG", other);
    int got = -1;
    CHECK(MPI_Error_class(code, &got) == MPI_SUCCESS && got == cls, "class of %d is %d, expected %d", code, got, cls);
    CHECK(MPI_Error_class(other, &got) == MPI_SUCCESS && got == MPI_ERR_ARG, "class of %d is %d", other, got);
    CHECK(MPI_Error_class(cls, &got) == MPI_SUCCESS && got == cls, "a class is its own class: %d", got);
    char text[MPI_MAX_ERROR_STRING];
    int length = -1;
    CHECK(MPI_Error_string(cls, text, &length) == MPI_SUCCESS && length == 0 && text[0] == '\0',
          "a new class's string is empty: '%s' (%d)", text, length);
    CHECK(MPI_Add_error_string(code, "the detector's crate is off") == MPI_SUCCESS, "add string");
    CHECK(MPI_Error_string(code, text, &length) == MPI_SUCCESS && strcmp(text, "the detector's crate is off") == 0 &&
              length == (int)strlen(text),
          "string of %d: '%s'", code, text);
    int* last = NULL;
    int flag = 0;
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag) == MPI_SUCCESS && flag && *last == other,
          "MPI_LASTUSEDCODE %d, expected %d", flag ? *last : -1, other);
    int* appnum = NULL;
    int* universe = NULL;
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag) == MPI_SUCCESS && flag && *appnum == 0,
          "MPI_APPNUM");
    CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &universe, &flag) == MPI_SUCCESS && flag &&
              *universe == size,
          "MPI_UNIVERSE_SIZE %d of %d", flag ? *universe : -1, size);
    int main_flag = 0;
    CHECK(MPI_Is_thread_main(&main_flag) == MPI_SUCCESS && main_flag == 1, "the thread of MPI_Init is the main one");
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    CHECK(MPI_Get_library_version(version, &length) == MPI_SUCCESS && length == (int)strlen(version) &&
              strstr(version, "msgpass") != NULL,
          "library version '%s'", version);

    if (argc > 1 && strcmp(argv[1], "fatal") == 0) {
        if (rank == size - 1) MPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
        MPI_Barrier(MPI_COMM_WORLD); /* the others wait here until the launcher stops them */
        return 0;
    }

    WHERE("errhandlers: a handler of the application");
    MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
    CHECK(MPI_Comm_create_errhandler(record, &handler) == MPI_SUCCESS && handler != MPI_ERRHANDLER_NULL, "create");
    CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler) == MPI_SUCCESS, "set");
    MPI_Errhandler now = MPI_ERRHANDLER_NULL;
    CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &now) == MPI_SUCCESS && now == handler, "get");
    int x = 0;
    int rc = MPI_Send(&x, 1, MPI_INT, size + 2, 0, MPI_COMM_WORLD);
    CHECK(rc == MPI_ERR_RANK, "the failed call returns its code: %d", rc);
    expect_call(MPI_COMM_WORLD, MPI_ERR_RANK, "bad rank on MPI_COMM_WORLD");
    CHECK(MPI_Comm_call_errhandler(MPI_COMM_WORLD, code) == MPI_SUCCESS, "call_errhandler returns");
    expect_call(MPI_COMM_WORLD, code, "MPI_Comm_call_errhandler");

    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(MPI_Errhandler_free(&handler) == MPI_SUCCESS && handler == MPI_ERRHANDLER_NULL, "free");
    rc = MPI_Recv(&x, 1, MPI_INT, 0, -7, dup, MPI_STATUS_IGNORE);
    CHECK(rc == MPI_ERR_TAG, "a duplicate's failed call returns its code: %d", rc);
    expect_call(dup, MPI_ERR_TAG, "a duplicate keeps the handler, freed or not");
    rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, now); /* the freed handle: refused through the handler */
    CHECK(rc == MPI_ERR_ARG, "setting a freed handler: %d", rc);
    expect_call(MPI_COMM_WORLD, MPI_ERR_ARG, "setting a freed handler");

    CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN) == MPI_SUCCESS, "back to MPI_ERRORS_RETURN");
    CHECK(MPI_Comm_call_errhandler(dup, other) == MPI_SUCCESS, "call_errhandler under MPI_ERRORS_RETURN");
    CHECK(calls == 0, "the replaced handler ran");
    MPI_Errhandler predefined = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(dup, &predefined);
    CHECK(MPI_Errhandler_free(&predefined) == MPI_SUCCESS && predefined == MPI_ERRHANDLER_NULL,
          "a predefined handler as MPI_Comm_get_errhandler gave it is released");
    MPI_Comm_free(&dup);

    /* The communicators go on working. */
    WHERE("errhandlers: a ring after the errors");
    int token = rank;
    MPI_Sendrecv_replace(&token, 1, MPI_INT, (rank + 1) % size, 5, (rank + size - 1) % size, 5, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
    CHECK(token == (rank + size - 1) % size, "token %d", token);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Finalize();
    return 0;
}
