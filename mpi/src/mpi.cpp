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
        if (handler != MPI_ERRORS_ARE_FATAL && handler != MPI_ERRORS_RETURN)
            throw MpiError(MPI_ERR_ARG, "invalid error handler " + std::to_string(handler) +
                                            " (MPI_ERRORS_ARE_FATAL and MPI_ERRORS_RETURN are provided)");
        if (comm == MPI_COMM_SELF)
            self_handler = handler;
        else if (comm == MPI_COMM_WORLD)
            world_handler = handler;
        else
            comm_handlers[comm] = handler;
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

int MPI_Error_string(int errorcode, char* string, int* resultlen) {
    const char* text = class_text(errorcode);
    std::string out = text != nullptr ? text : "unknown error code " + std::to_string(errorcode);
    if (errorcode != MPI_SUCCESS && errorcode == last_code && !last_message.empty()) out += ": " + last_message;
    if (out.size() >= MPI_MAX_ERROR_STRING) out.resize(MPI_MAX_ERROR_STRING - 1);
    std::memcpy(string, out.c_str(), out.size() + 1);
    *resultlen = static_cast<int>(out.size());
    return text != nullptr ? MPI_SUCCESS : MPI_ERR_ARG;
}

int MPI_Error_class(int errorcode, int* errorclass) {
    if (class_text(errorcode) == nullptr) return MPI_ERR_ARG;
    *errorclass = errorcode;
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
        type_free(*datatype);
        *datatype = MPI_DATATYPE_NULL;
        return MPI_SUCCESS;
    });
}

} // extern "C"
