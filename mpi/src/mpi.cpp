// The C entry points of msgpass's MPI (mpi.h), environment part: init and finalize,
// time, communicators' rank and size, error handlers and strings. Point to point is
// in p2p.cpp, the collectives in collective_calls.cpp; what they share in api.hpp.
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::CommInfo;
using msgpass::mpi::data_bytes;
using msgpass::mpi::MpiError;
using msgpass::mpi::type_commit;
using msgpass::mpi::type_contiguous;
using msgpass::mpi::type_free;

extern "C" {

// ------------------------------------------------------------------- environment

int MPI_Init(int* argc, char*** argv) {
    return init(argc, argv);
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    if (required < MPI_THREAD_SINGLE || required > MPI_THREAD_MULTIPLE)
        return fail("MPI_Init_thread", MPI_COMM_WORLD, MPI_ERR_ARG,
                    "required thread level " + std::to_string(required) + " is not one of MPI_THREAD_*");
    // SERIALIZED is given as MULTIPLE: the lock costs little and makes any use safe.
    const int level = required <= MPI_THREAD_FUNNELED ? required : MPI_THREAD_MULTIPLE;
    const int code = init(argc, argv);
    if (code == MPI_SUCCESS) {
        thread_level = level < MPI_THREAD_FUNNELED ? MPI_THREAD_FUNNELED : level;
        if (thread_level == MPI_THREAD_MULTIPLE) engine->set_lock(&big_lock);
        if (provided != nullptr) *provided = level;
    }
    return code;
}

int MPI_Query_thread(int* provided) {
    return guarded("MPI_Query_thread", MPI_COMM_WORLD, [&] {
        *provided = thread_level;
        return MPI_SUCCESS;
    });
}

int MPI_Finalize(void) {
    const int code = guarded("MPI_Finalize", MPI_COMM_WORLD, [&] {
        // First, as the standard says: MPI_COMM_SELF's attributes are deleted before
        // anything else is torn down (libraries hang their clean-up there).
        delete_attributes(MPI_COMM_SELF);
        delete_attributes(MPI_COMM_WORLD);
        engine->finalize();
        return MPI_SUCCESS;
    });
    engine.reset();
    phase = Phase::finalized;
    return code;
}

int MPI_Initialized(int* flag) {
    *flag = phase != Phase::before;
    return MPI_SUCCESS;
}

int MPI_Finalized(int* flag) {
    *flag = phase == Phase::finalized;
    return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm, int errorcode) {
    std::fflush(stdout);
    std::fprintf(stderr, "msgpass-mpi: rank %d called MPI_Abort with error code %d\n", world_rank(), errorcode);
    std::fflush(stderr);
    const int status = errorcode & 0xff;
    std::_Exit(status == 0 ? 1 : status);
}

double MPI_Wtime(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MPI_Wtick(void) {
    return 1e-9;
}

int MPI_Get_processor_name(char* name, int* resultlen) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
    std::strcpy(name, host);
    *resultlen = static_cast<int>(std::strlen(host));
    return MPI_SUCCESS;
}

int MPI_Get_version(int* version, int* subversion) {
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int* rank) {
    return guarded("MPI_Comm_rank", comm, [&] {
        *rank = engine->info(comm).rank;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_size(MPI_Comm comm, int* size) {
    return guarded("MPI_Comm_size", comm, [&] {
        const auto c = engine->info(comm);
        *size = c.local ? c.local->size : c.size; // an intercommunicator's: its local group's
        return MPI_SUCCESS;
    });
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler handler) {
    return guarded("MPI_Comm_set_errhandler", comm, [&] {
        (void)engine->info(comm);
        const auto user = user_handlers.find(handler);
        if (user != user_handlers.end() && user->second.freed)
            throw MpiError(MPI_ERR_ARG, "error handler " + std::to_string(handler) + " was freed");
        if (handler != MPI_ERRORS_ARE_FATAL && handler != MPI_ERRORS_RETURN && user == user_handlers.end())
            throw MpiError(MPI_ERR_ARG, "invalid error handler " + std::to_string(handler) +
                                            " (MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN and those of "
                                            "MPI_Comm_create_errhandler are provided)");
        if (comm == MPI_COMM_SELF)
            self_handler = handler;
        else if (comm == MPI_COMM_WORLD)
            world_handler = handler;
        else
            comm_handlers[comm] = handler;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function* function, MPI_Errhandler* errhandler) {
    return guarded("MPI_Comm_create_errhandler", MPI_COMM_WORLD, [&] {
        if (function == nullptr) throw MpiError(MPI_ERR_ARG, "the error handler function is NULL");
        if (errhandler == nullptr) throw MpiError(MPI_ERR_ARG, "errhandler is NULL");
        if (next_handler == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no error handler handle left");
        user_handlers.emplace(next_handler, UserHandler{function, false});
        *errhandler = next_handler++;
        return MPI_SUCCESS;
    });
}

// The handle is released; communicators that have the handler keep calling it. The
// predefined handlers (as MPI_Comm_get_errhandler gives them) are released as well.
int MPI_Errhandler_free(MPI_Errhandler* errhandler) {
    return guarded("MPI_Errhandler_free", MPI_COMM_WORLD, [&] {
        if (errhandler == nullptr) throw MpiError(MPI_ERR_ARG, "errhandler is NULL");
        const MPI_Errhandler h = *errhandler;
        if (h != MPI_ERRORS_ARE_FATAL && h != MPI_ERRORS_RETURN) {
            const auto it = user_handlers.find(h);
            if (it == user_handlers.end() || it->second.freed)
                throw MpiError(MPI_ERR_ARG, "invalid error handler " + std::to_string(h));
            it->second.freed = true;
        }
        *errhandler = MPI_ERRHANDLER_NULL;
        return MPI_SUCCESS;
    });
}

// The communicator's handler with errorcode, as if a call on it had failed with it:
// MPI_ERRORS_ARE_FATAL ends the process, MPI_ERRORS_RETURN and a handler of the
// application return here, and the call returns MPI_SUCCESS.
int MPI_Comm_call_errhandler(MPI_Comm comm, int errorcode) {
    return guarded("MPI_Comm_call_errhandler", comm, [&] {
        (void)engine->info(comm);
        const char* text = class_text(errorcode);
        (void)fail("MPI_Comm_call_errhandler", comm, errorcode,
                   text != nullptr && *text != '\0' ? text : "error code " + std::to_string(errorcode));
        return MPI_SUCCESS;
    });
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler* handler) {
    return guarded("MPI_Comm_get_errhandler", comm, [&] {
        (void)engine->info(comm);
        *handler = handler_of(comm);
        return MPI_SUCCESS;
    });
}

int MPI_Errhandler_set(MPI_Comm comm, MPI_Errhandler handler) {
    return MPI_Comm_set_errhandler(comm, handler);
}

int MPI_Errhandler_get(MPI_Comm comm, MPI_Errhandler* handler) {
    return MPI_Comm_get_errhandler(comm, handler);
}

int MPI_Error_string(int errorcode, char* string, int* resultlen) {
    const char* text = class_text(errorcode);
    std::string out = text != nullptr ? text : "unknown error code " + std::to_string(errorcode);
    if (errorcode != MPI_SUCCESS && added_codes.count(errorcode) == 0 && errorcode == last_code &&
        !last_message.empty())
        out += ": " + last_message;
    if (out.size() >= MPI_MAX_ERROR_STRING) out.resize(MPI_MAX_ERROR_STRING - 1);
    std::memcpy(string, out.c_str(), out.size() + 1);
    *resultlen = static_cast<int>(out.size());
    return text != nullptr ? MPI_SUCCESS : MPI_ERR_ARG;
}

int MPI_Error_class(int errorcode, int* errorclass) {
    if (const auto it = added_codes.find(errorcode); it != added_codes.end()) {
        *errorclass = it->second;
        return MPI_SUCCESS;
    }
    if (class_text(errorcode) == nullptr) return MPI_ERR_ARG;
    *errorclass = errorcode;
    return MPI_SUCCESS;
}

// Classes and codes of the application number up from MPI_ERR_LASTCODE + 1; the
// MPI_LASTUSEDCODE attribute of MPI_COMM_WORLD is the largest so far.
int MPI_Add_error_class(int* errorclass) {
    return guarded("MPI_Add_error_class", MPI_COMM_WORLD, [&] {
        if (errorclass == nullptr) throw MpiError(MPI_ERR_ARG, "errorclass is NULL");
        if (last_used_code == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no error class left");
        const int c = ++last_used_code;
        added_codes.emplace(c, c);
        *errorclass = c;
        return MPI_SUCCESS;
    });
}

int MPI_Add_error_code(int errorclass, int* errorcode) {
    return guarded("MPI_Add_error_code", MPI_COMM_WORLD, [&] {
        if (errorcode == nullptr) throw MpiError(MPI_ERR_ARG, "errorcode is NULL");
        const auto it = added_codes.find(errorclass);
        const bool added_class = it != added_codes.end() && it->second == errorclass;
        if (!added_class && (errorclass == MPI_SUCCESS || class_text(errorclass) == nullptr))
            throw MpiError(MPI_ERR_ARG, "error class " + std::to_string(errorclass) + " is not an error class");
        if (last_used_code == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no error code left");
        const int c = ++last_used_code;
        added_codes.emplace(c, errorclass);
        *errorcode = c;
        return MPI_SUCCESS;
    });
}

int MPI_Add_error_string(int errorcode, const char* string) {
    return guarded("MPI_Add_error_string", MPI_COMM_WORLD, [&] {
        if (string == nullptr) throw MpiError(MPI_ERR_ARG, "string is NULL");
        if (added_codes.count(errorcode) == 0)
            throw MpiError(MPI_ERR_ARG, "error code " + std::to_string(errorcode) +
                                            " is not one of MPI_Add_error_class or MPI_Add_error_code");
        const std::size_t n = std::strlen(string);
        if (n >= MPI_MAX_ERROR_STRING)
            throw MpiError(MPI_ERR_ARG, "the string has " + std::to_string(n) + " characters, more than " +
                                            std::to_string(MPI_MAX_ERROR_STRING - 1));
        added_strings[errorcode] = string;
        return MPI_SUCCESS;
    });
}

int MPI_Is_thread_main(int* flag) {
    return guarded("MPI_Is_thread_main", MPI_COMM_WORLD, [&] {
        if (flag == nullptr) throw MpiError(MPI_ERR_ARG, "flag is NULL");
        *flag = std::this_thread::get_id() == main_thread;
        return MPI_SUCCESS;
    });
}

int MPI_Get_library_version(char* version, int* resultlen) {
    if (version == nullptr || resultlen == nullptr) return MPI_ERR_ARG;
    const std::string text = "msgpass MPI " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION) +
                             " over msgpass::comm (sci, tcp, udp)";
    std::memcpy(version, text.c_str(), text.size() + 1);
    *resultlen = static_cast<int>(text.size());
    return MPI_SUCCESS;
}

int MPI_Type_size(MPI_Datatype datatype, int* size) {
    return guarded("MPI_Type_size", MPI_COMM_WORLD, [&] {
        if (size == nullptr) throw MpiError(MPI_ERR_ARG, "size is NULL");
        *size = static_cast<int>(data_bytes(datatype));
        return MPI_SUCCESS;
    });
}

int MPI_Type_size_x(MPI_Datatype datatype, MPI_Count* size) {
    return guarded("MPI_Type_size_x", MPI_COMM_WORLD, [&] {
        if (size == nullptr) throw MpiError(MPI_ERR_ARG, "size is NULL");
        *size = static_cast<MPI_Count>(data_bytes(datatype));
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint* lb, MPI_Aint* extent) {
    return guarded("MPI_Type_get_extent", MPI_COMM_WORLD, [&] {
        if (lb == nullptr || extent == nullptr) throw MpiError(MPI_ERR_ARG, "lb or extent is NULL");
        const auto& m = msgpass::mpi::type_info(datatype);
        *extent = static_cast<MPI_Aint>(m.extent());
        *lb = static_cast<MPI_Aint>(m.lb);
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_extent_x(MPI_Datatype datatype, MPI_Count* lb, MPI_Count* extent) {
    return guarded("MPI_Type_get_extent_x", MPI_COMM_WORLD, [&] {
        if (lb == nullptr || extent == nullptr) throw MpiError(MPI_ERR_ARG, "lb or extent is NULL");
        const auto& m = msgpass::mpi::type_info(datatype);
        *extent = static_cast<MPI_Count>(m.extent());
        *lb = static_cast<MPI_Count>(m.lb);
        return MPI_SUCCESS;
    });
}

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_contiguous", MPI_COMM_WORLD, [&] {
        if (newtype == nullptr) throw MpiError(MPI_ERR_ARG, "newtype is NULL");
        *newtype = type_contiguous(count, oldtype);
        record_contiguous(*newtype, count, oldtype);
        return MPI_SUCCESS;
    });
}

int MPI_Type_commit(MPI_Datatype* datatype) {
    return guarded("MPI_Type_commit", MPI_COMM_WORLD, [&] {
        if (datatype == nullptr) throw MpiError(MPI_ERR_ARG, "datatype is NULL");
        type_commit(*datatype);
        return MPI_SUCCESS;
    });
}

int MPI_Type_free(MPI_Datatype* datatype) {
    return guarded("MPI_Type_free", MPI_COMM_WORLD, [&] {
        if (datatype == nullptr) throw MpiError(MPI_ERR_ARG, "datatype is NULL");
        (void)msgpass::mpi::type_info(*datatype);
        delete_attributes(*datatype); // first (a failing delete function keeps the type)
        type_free(*datatype);
        *datatype = MPI_DATATYPE_NULL;
        return MPI_SUCCESS;
    });
}

} // extern "C"
