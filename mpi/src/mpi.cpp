// The C entry points of msgpass's MPI (mpi.h): argument checks, error handlers, and
// the calls into the engine (engine.hpp). Every entry point catches everything: an
// error becomes an MPI error code, never an exception through C.
#include "engine.hpp"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

using msgpass::mpi::CommInfo;
using msgpass::mpi::Engine;
using msgpass::mpi::MpiError;

namespace {

enum class Phase { before, running, finalized };

Phase phase = Phase::before;
std::unique_ptr<Engine> engine;
MPI_Errhandler world_handler = MPI_ERRORS_ARE_FATAL;
MPI_Errhandler self_handler = MPI_ERRORS_ARE_FATAL;
int last_code = MPI_SUCCESS;
std::string last_message;
const auto start = std::chrono::steady_clock::now();

const char* class_text(int code) {
    switch (code) {
    case MPI_SUCCESS:
        return "no error";
    case MPI_ERR_BUFFER:
        return "invalid buffer pointer";
    case MPI_ERR_COUNT:
        return "invalid count argument";
    case MPI_ERR_TYPE:
        return "invalid datatype";
    case MPI_ERR_TAG:
        return "invalid tag";
    case MPI_ERR_COMM:
        return "invalid communicator";
    case MPI_ERR_RANK:
        return "invalid rank";
    case MPI_ERR_REQUEST:
        return "invalid request";
    case MPI_ERR_ROOT:
        return "invalid root";
    case MPI_ERR_GROUP:
        return "invalid group";
    case MPI_ERR_OP:
        return "invalid reduction operation";
    case MPI_ERR_TOPOLOGY:
        return "invalid topology";
    case MPI_ERR_DIMS:
        return "invalid dimensions";
    case MPI_ERR_ARG:
        return "invalid argument";
    case MPI_ERR_UNKNOWN:
        return "unknown error";
    case MPI_ERR_TRUNCATE:
        return "message truncated";
    case MPI_ERR_OTHER:
        return "other error";
    case MPI_ERR_INTERN:
        return "internal error";
    case MPI_ERR_IN_STATUS:
        return "error code is in status";
    case MPI_ERR_PENDING:
        return "pending request";
    case MPI_ERR_UNSUPPORTED_OPERATION:
        return "operation not supported by msgpass's MPI";
    case MPI_ERR_PROC_FAILED:
        return "a peer process failed";
    default:
        return nullptr;
    }
}

int world_rank() {
    return engine ? engine->world_rank() : -1;
}

// Reports an error as the communicator's handler says: MPI_ERRORS_ARE_FATAL prints
// the call, the rank and what went wrong, and ends the process with exit code 1.
int fail(const char* call, MPI_Comm comm, int code, const std::string& what) {
    last_code = code;
    last_message = std::string(call) + ": " + what;
    const MPI_Errhandler handler = comm == MPI_COMM_SELF ? self_handler : world_handler;
    if (handler == MPI_ERRORS_ARE_FATAL) {
        std::fflush(stdout);
        std::fprintf(stderr, "msgpass-mpi: rank %d: %s: %s (%s)\n", world_rank(), call, what.c_str(), class_text(code));
        std::fflush(stderr);
        std::_Exit(1);
    }
    return code;
}

template <class F>
int guarded(const char* call, MPI_Comm comm, F&& body) {
    try {
        if (phase == Phase::before) throw MpiError(MPI_ERR_OTHER, "called before MPI_Init");
        if (phase == Phase::finalized) throw MpiError(MPI_ERR_OTHER, "called after MPI_Finalize");
        const int code = body();
        if (code != MPI_SUCCESS) return fail(call, comm, code, last_message.empty() ? class_text(code) : last_message);
        return MPI_SUCCESS;
    } catch (const MpiError& e) {
        return fail(call, comm, e.code(), e.what());
    } catch (const msgpass::PeerLost& e) {
        return fail(call, comm, MPI_ERR_PROC_FAILED, e.what());
    } catch (const msgpass::Error& e) {
        return fail(call, comm, MPI_ERR_OTHER, e.what());
    } catch (const std::bad_alloc&) {
        return fail(call, comm, MPI_ERR_OTHER, "out of memory");
    } catch (const std::exception& e) {
        return fail(call, comm, MPI_ERR_INTERN, e.what());
    }
}

std::size_t type_size(MPI_Datatype type) {
    switch (type) {
    case MPI_CHAR:
    case MPI_SIGNED_CHAR:
    case MPI_UNSIGNED_CHAR:
    case MPI_BYTE:
    case MPI_SHORT:
    case MPI_UNSIGNED_SHORT:
    case MPI_INT:
    case MPI_UNSIGNED:
    case MPI_LONG:
    case MPI_UNSIGNED_LONG:
    case MPI_LONG_LONG:
    case MPI_UNSIGNED_LONG_LONG:
    case MPI_FLOAT:
    case MPI_DOUBLE:
        return static_cast<std::size_t>(type & 0xff);
    default:
        throw MpiError(MPI_ERR_TYPE, "invalid datatype " + std::to_string(type) +
                                         " (only the basic datatypes of mpi.h are provided)");
    }
}

std::size_t bytes_of(const void* buf, int count, MPI_Datatype type, const char* what = "buffer") {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
    const std::size_t bytes = static_cast<std::size_t>(count) * type_size(type);
    if (bytes > 0 && buf == nullptr)
        throw MpiError(MPI_ERR_BUFFER, std::string(what) + " is NULL with a count of " + std::to_string(count));
    return bytes;
}

void check_send_tag(int tag) {
    if (tag < 0 || tag > MPI_TAG_UB_VALUE)
        throw MpiError(MPI_ERR_TAG,
                       "tag " + std::to_string(tag) + " is not between 0 and " + std::to_string(MPI_TAG_UB_VALUE));
}

void check_recv_tag(int tag) {
    if (tag != MPI_ANY_TAG) check_send_tag(tag);
}

void check_rank(const CommInfo& c, int rank, bool any_allowed) {
    if (rank == MPI_PROC_NULL || (any_allowed && rank == MPI_ANY_SOURCE)) return;
    if (rank < 0 || rank >= c.size)
        throw MpiError(MPI_ERR_RANK, "rank " + std::to_string(rank) + " is not between 0 and " +
                                         std::to_string(c.size - 1) + " (the communicator's size is " +
                                         std::to_string(c.size) + ")");
}

void check_root(const CommInfo& c, int root) {
    if (root < 0 || root >= c.size)
        throw MpiError(MPI_ERR_ROOT,
                       "root " + std::to_string(root) + " is not between 0 and " + std::to_string(c.size - 1));
}

void check_op(MPI_Op op) {
    if (op != MPI_SUM && op != MPI_PROD && op != MPI_MAX && op != MPI_MIN)
        throw MpiError(MPI_ERR_OP, "invalid operation " + std::to_string(op) +
                                       " (MPI_SUM, MPI_PROD, MPI_MAX and MPI_MIN are provided)");
}

void proc_null_status(MPI_Status* status) {
    if (status != MPI_STATUS_IGNORE) *status = MPI_Status{MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS, 0, 0};
}

// A request's own error, with the message of what happened to it.
int request_error(int code, const MPI_Status& status) {
    if (code == MPI_SUCCESS) return code;
    if (code == MPI_ERR_TRUNCATE)
        last_message = "the message from rank " + std::to_string(status.MPI_SOURCE) + " (tag " +
                       std::to_string(status.MPI_TAG) + ") is larger than the receive buffer";
    else if (code == MPI_ERR_PROC_FAILED)
        last_message = "rank " + std::to_string(status.MPI_SOURCE) + " was lost";
    else
        last_message.clear();
    return code;
}

int init(int* argc, char*** argv) {
    if (phase == Phase::running) return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, "called twice");
    if (phase == Phase::finalized) return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, "called after MPI_Finalize");
    const char* program = (argc != nullptr && argv != nullptr && *argc > 0 && *argv != nullptr) ? (*argv)[0] : nullptr;
    try {
        engine = std::make_unique<Engine>(program);
    } catch (const MpiError& e) {
        return fail("MPI_Init", MPI_COMM_WORLD, e.code(), e.what());
    } catch (const std::exception& e) {
        return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, e.what());
    }
    phase = Phase::running;
    return MPI_SUCCESS;
}

int send_common(const char* call, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                bool sync) {
    return guarded(call, comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
        MPI_Request h = engine->isend(c, dest, tag, buf, bytes, sync);
        MPI_Status status{};
        return request_error(engine->wait(&h, &status), status);
    });
}

// The block of one rank in a gather, scatter or allgather: the send side's and the
// receive side's must have the same size.
std::size_t block_of(const char* side, int count, MPI_Datatype type, std::size_t other, bool check_other) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, std::string(side) + ": negative count " + std::to_string(count));
    const std::size_t bytes = static_cast<std::size_t>(count) * type_size(type);
    if (check_other && bytes != other)
        throw MpiError(MPI_ERR_TRUNCATE, "the send block (" + std::to_string(other) +
                                             " bytes) and the receive block (" + std::to_string(bytes) +
                                             " bytes) differ");
    return bytes;
}
} // namespace

extern "C" {

// ------------------------------------------------------------------- environment

int MPI_Init(int* argc, char*** argv) {
    return init(argc, argv);
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    if (required < MPI_THREAD_SINGLE || required > MPI_THREAD_MULTIPLE)
        return fail("MPI_Init_thread", MPI_COMM_WORLD, MPI_ERR_ARG,
                    "required thread level " + std::to_string(required) + " is not one of MPI_THREAD_*");
    const int code = init(argc, argv);
    if (code == MPI_SUCCESS && provided != nullptr)
        *provided = required < MPI_THREAD_FUNNELED ? required : MPI_THREAD_FUNNELED;
    return code;
}

int MPI_Query_thread(int* provided) {
    return guarded("MPI_Query_thread", MPI_COMM_WORLD, [&] {
        *provided = MPI_THREAD_FUNNELED;
        return MPI_SUCCESS;
    });
}

int MPI_Finalize(void) {
    const int code = guarded("MPI_Finalize", MPI_COMM_WORLD, [&] {
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
        *size = engine->info(comm).size;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler handler) {
    return guarded("MPI_Comm_set_errhandler", comm, [&] {
        (void)engine->info(comm);
        if (handler != MPI_ERRORS_ARE_FATAL && handler != MPI_ERRORS_RETURN)
            throw MpiError(MPI_ERR_ARG, "invalid error handler " + std::to_string(handler) +
                                            " (MPI_ERRORS_ARE_FATAL and MPI_ERRORS_RETURN are provided)");
        (comm == MPI_COMM_SELF ? self_handler : world_handler) = handler;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler* handler) {
    return guarded("MPI_Comm_get_errhandler", comm, [&] {
        (void)engine->info(comm);
        *handler = comm == MPI_COMM_SELF ? self_handler : world_handler;
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
        *size = static_cast<int>(type_size(datatype));
        return MPI_SUCCESS;
    });
}

// ------------------------------------------------------------------- point to point

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Isend", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = dest == MPI_PROC_NULL ? MPI_REQUEST_NULL : engine->isend(c, dest, tag, buf, bytes, false);
        return MPI_SUCCESS;
    });
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return send_common("MPI_Send", buf, count, type, dest, tag, comm, false);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return send_common("MPI_Ssend", buf, count, type, dest, tag, comm, true);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Irecv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = source == MPI_PROC_NULL ? MPI_REQUEST_NULL : engine->irecv(c, source, tag, buf, bytes);
        return MPI_SUCCESS;
    });
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Recv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        MPI_Request h = engine->irecv(c, source, tag, buf, bytes);
        MPI_Status own{};
        const int code = engine->wait(&h, &own);
        if (status != MPI_STATUS_IGNORE) *status = own;
        return request_error(code, own);
    });
}

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Sendrecv", comm, [&] {
        const auto c = engine->info(comm);
        const auto send_bytes = bytes_of(sendbuf, sendcount, sendtype, "sendbuf");
        const auto recv_bytes = bytes_of(recvbuf, recvcount, recvtype, "recvbuf");
        check_rank(c, dest, false);
        check_rank(c, source, true);
        check_send_tag(sendtag);
        check_recv_tag(recvtag);
        MPI_Request r =
            source == MPI_PROC_NULL ? MPI_REQUEST_NULL : engine->irecv(c, source, recvtag, recvbuf, recv_bytes);
        MPI_Request s =
            dest == MPI_PROC_NULL ? MPI_REQUEST_NULL : engine->isend(c, dest, sendtag, sendbuf, send_bytes, false);
        MPI_Status sent{};
        const int send_code = engine->wait(&s, &sent);
        MPI_Status own{};
        const int recv_code = engine->wait(&r, &own);
        if (source == MPI_PROC_NULL) proc_null_status(&own);
        if (status != MPI_STATUS_IGNORE) *status = own;
        if (send_code != MPI_SUCCESS) return request_error(send_code, sent);
        return request_error(recv_code, own);
    });
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
    return guarded("MPI_Wait", MPI_COMM_WORLD, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        MPI_Status own{};
        const int code = engine->wait(request, &own);
        if (status != MPI_STATUS_IGNORE) *status = own;
        return request_error(code, own);
    });
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    return guarded("MPI_Waitall", MPI_COMM_WORLD, [&] {
        if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
        if (count > 0 && requests == nullptr) throw MpiError(MPI_ERR_REQUEST, "requests is NULL");
        for (int i = 0; i < count; ++i)
            if (requests[i] != MPI_REQUEST_NULL) engine->check_request(requests[i]);
        bool failed = false;
        for (int i = 0; i < count; ++i) { // in order: each wait makes progress for all
            MPI_Status own{};
            const int code = engine->wait(&requests[i], &own);
            own.MPI_ERROR = code;
            if (statuses != MPI_STATUSES_IGNORE) statuses[i] = own;
            if (code != MPI_SUCCESS) failed = true;
        }
        if (failed) last_message = "a request failed; see the MPI_ERROR of its status";
        return failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
    });
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
    return guarded("MPI_Waitany", MPI_COMM_WORLD, [&] {
        if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
        if (count > 0 && requests == nullptr) throw MpiError(MPI_ERR_REQUEST, "requests is NULL");
        for (int i = 0; i < count; ++i)
            if (requests[i] != MPI_REQUEST_NULL) engine->check_request(requests[i]);
        *index = engine->wait_any(count, requests);
        if (*index == MPI_UNDEFINED) {
            if (status != MPI_STATUS_IGNORE) *status = MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0};
            return MPI_SUCCESS;
        }
        MPI_Status own{};
        const int code = engine->wait(&requests[*index], &own);
        if (status != MPI_STATUS_IGNORE) *status = own;
        return request_error(code, own);
    });
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
    return guarded("MPI_Test", MPI_COMM_WORLD, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        MPI_Status own{};
        int code = MPI_SUCCESS;
        *flag = engine->test(request, &own, &code) ? 1 : 0;
        if (*flag != 0 && status != MPI_STATUS_IGNORE) *status = own;
        return request_error(code, own);
    });
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
    return guarded("MPI_Testall", MPI_COMM_WORLD, [&] {
        if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
        if (count > 0 && requests == nullptr) throw MpiError(MPI_ERR_REQUEST, "requests is NULL");
        for (int i = 0; i < count; ++i)
            if (requests[i] != MPI_REQUEST_NULL) engine->check_request(requests[i]);
        engine->poke(); // one progress for all, then all or nothing
        for (int i = 0; i < count; ++i) {
            if (!engine->is_complete(requests[i])) {
                *flag = 0;
                return MPI_SUCCESS;
            }
        }
        bool failed = false;
        for (int i = 0; i < count; ++i) {
            MPI_Status own{};
            int code = MPI_SUCCESS;
            (void)engine->test(&requests[i], &own, &code);
            own.MPI_ERROR = code;
            if (statuses != MPI_STATUSES_IGNORE) statuses[i] = own;
            if (code != MPI_SUCCESS) failed = true;
        }
        *flag = 1;
        if (failed) last_message = "a request failed; see the MPI_ERROR of its status";
        return failed ? MPI_ERR_IN_STATUS : MPI_SUCCESS;
    });
}

int MPI_Request_free(MPI_Request* request) {
    return guarded("MPI_Request_free", MPI_COMM_WORLD, [&] {
        if (request == nullptr || *request == MPI_REQUEST_NULL)
            throw MpiError(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be freed");
        engine->free_request(request);
        return MPI_SUCCESS;
    });
}

int MPI_Cancel(MPI_Request* request) {
    return guarded("MPI_Cancel", MPI_COMM_WORLD, [&] {
        if (request == nullptr || *request == MPI_REQUEST_NULL)
            throw MpiError(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be cancelled");
        (void)engine->cancel(*request);
        return MPI_SUCCESS;
    });
}

int MPI_Test_cancelled(const MPI_Status* status, int* flag) {
    *flag = status != nullptr && status->msgpass_cancelled != 0;
    return MPI_SUCCESS;
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
    return guarded("MPI_Iprobe", comm, [&] {
        const auto c = engine->info(comm);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            *flag = 1;
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        *flag = engine->iprobe(c, source, tag, status) ? 1 : 0;
        return MPI_SUCCESS;
    });
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Probe", comm, [&] {
        const auto c = engine->info(comm);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        engine->probe(c, source, tag, status);
        return MPI_SUCCESS;
    });
}

int MPI_Get_count(const MPI_Status* status, MPI_Datatype type, int* count) {
    return guarded("MPI_Get_count", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL (MPI_STATUS_IGNORE has no count)");
        const std::size_t size = type_size(type);
        if (status->msgpass_bytes % size != 0 || status->msgpass_bytes / size > INT_MAX)
            *count = MPI_UNDEFINED;
        else
            *count = static_cast<int>(status->msgpass_bytes / size);
        return MPI_SUCCESS;
    });
}

// ------------------------------------------------------------------- collectives

int MPI_Barrier(MPI_Comm comm) {
    return guarded("MPI_Barrier", comm, [&] {
        msgpass::mpi::barrier(*engine, engine->info(comm));
        return MPI_SUCCESS;
    });
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    return guarded("MPI_Bcast", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buffer, count, type);
        check_root(c, root);
        msgpass::mpi::bcast(*engine, c, buffer, bytes, root);
        return MPI_SUCCESS;
    });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
    return guarded("MPI_Reduce", comm, [&] {
        const auto c = engine->info(comm);
        check_root(c, root);
        check_op(op);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        if (in_place && c.rank != root) throw MpiError(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
        if (c.rank == root) (void)bytes_of(recvbuf, count, type, "recvbuf");
        msgpass::mpi::reduce(*engine, c, in_place ? recvbuf : sendbuf, recvbuf, count, type, op, root);
        return MPI_SUCCESS;
    });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    return guarded("MPI_Allreduce", comm, [&] {
        const auto c = engine->info(comm);
        check_op(op);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
        (void)bytes_of(recvbuf, count, type, "recvbuf");
        msgpass::mpi::allreduce(*engine, c, in_place ? recvbuf : sendbuf, recvbuf, count, type, op);
        return MPI_SUCCESS;
    });
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
    return guarded("MPI_Gather", comm, [&] {
        const auto c = engine->info(comm);
        check_root(c, root);
        const bool in_place = sendbuf == MPI_IN_PLACE && c.rank == root;
        std::size_t block = 0;
        if (c.rank == root) {
            block = block_of("recvcount", recvcount, recvtype, 0, false);
            if (!in_place) (void)block_of("sendcount", sendcount, sendtype, block, true);
            if (block > 0 && recvbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "recvbuf is NULL");
        } else {
            block = block_of("sendcount", sendcount, sendtype, 0, false);
        }
        if (!in_place && block > 0 && sendbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "sendbuf is NULL");
        const void* own =
            in_place ? static_cast<const std::byte*>(recvbuf) + block * static_cast<std::size_t>(root) : sendbuf;
        msgpass::mpi::gather(*engine, c, own, block, recvbuf, root);
        return MPI_SUCCESS;
    });
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
    return guarded("MPI_Scatter", comm, [&] {
        const auto c = engine->info(comm);
        check_root(c, root);
        const bool in_place = recvbuf == MPI_IN_PLACE && c.rank == root;
        std::size_t block = 0;
        if (c.rank == root) {
            block = block_of("sendcount", sendcount, sendtype, 0, false);
            if (!in_place) (void)block_of("recvcount", recvcount, recvtype, block, true);
            if (block > 0 && sendbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "sendbuf is NULL");
        } else {
            block = block_of("recvcount", recvcount, recvtype, 0, false);
        }
        if (!in_place && block > 0 && recvbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "recvbuf is NULL");
        msgpass::mpi::scatter(*engine, c, sendbuf, block, in_place ? nullptr : recvbuf, root);
        return MPI_SUCCESS;
    });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    return guarded("MPI_Allgather", comm, [&] {
        const auto c = engine->info(comm);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        const std::size_t block = block_of("recvcount", recvcount, recvtype, 0, false);
        if (!in_place) (void)block_of("sendcount", sendcount, sendtype, block, true);
        if (block > 0 && (recvbuf == nullptr || (!in_place && sendbuf == nullptr)))
            throw MpiError(MPI_ERR_BUFFER, "sendbuf or recvbuf is NULL");
        const void* own =
            in_place ? static_cast<const std::byte*>(recvbuf) + block * static_cast<std::size_t>(c.rank) : sendbuf;
        msgpass::mpi::allgather(*engine, c, own, block, recvbuf);
        return MPI_SUCCESS;
    });
}

} // extern "C"
