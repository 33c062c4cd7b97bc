// What the C entry points of msgpass's MPI share (mpi.cpp: the environment,
// p2p.cpp: point to point, collective_calls.cpp: the collectives): the library's
// state, the argument checks, and the error handling every entry point goes through
// (guarded: an error becomes an MPI error code under the communicator's handler,
// never an exception through C).
#pragma once

#include "engine.hpp"

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>

namespace msgpass::mpi::api {

enum class Phase { before, running, finalized };

inline Phase phase = Phase::before;
inline std::unique_ptr<Engine> engine;
inline MPI_Errhandler world_handler = MPI_ERRORS_ARE_FATAL;
inline MPI_Errhandler self_handler = MPI_ERRORS_ARE_FATAL;
// The error handlers of the communicators made at run time.
inline std::map<MPI_Comm, MPI_Errhandler> comm_handlers;
// comm's error handler (MPI_COMM_WORLD's for a handle that is no communicator).
inline MPI_Errhandler handler_of(MPI_Comm comm) {
    if (comm == MPI_COMM_SELF) return self_handler;
    const auto it = comm_handlers.find(comm);
    return it != comm_handlers.end() ? it->second : world_handler;
}
// Error handlers of the application (MPI_Comm_create_errhandler), by handle. A freed
// one keeps serving the communicators it is set on; it cannot be set again.
struct UserHandler {
    MPI_Comm_errhandler_function* function;
    bool freed;
};
inline std::map<MPI_Errhandler, UserHandler> user_handlers;
inline MPI_Errhandler next_handler = 0x54000101;
// Error classes and codes the application added (MPI_Add_error_class/_code): each
// code's class (a class is its own), and the strings of MPI_Add_error_string.
inline std::map<int, int> added_codes;
inline std::map<int, std::string> added_strings;
inline int last_used_code = MPI_ERR_LASTCODE; // the MPI_LASTUSEDCODE attribute's value
inline int last_code = MPI_SUCCESS;
// The level MPI_Init_thread gave; with MPI_THREAD_MULTIPLE every entry point holds
// big_lock (Engine::set_lock).
inline int thread_level = MPI_THREAD_FUNNELED;
inline std::recursive_mutex big_lock;
inline std::string last_message;
inline const auto start = std::chrono::steady_clock::now();

// The thread that called MPI_Init (MPI_Is_thread_main).
inline std::thread::id main_thread;

// The text of an error class, or nullptr for a code that is not one.
const char* class_text(int code);
int world_rank();
// Reports an error as the communicator's handler says: MPI_ERRORS_ARE_FATAL prints
// the call, the rank and what went wrong, and ends the process with exit code 1.
int fail(const char* call, MPI_Comm comm, int code, const std::string& what);

std::size_t type_size(MPI_Datatype type);
// The errors of the checks below (inline: every point-to-point call makes them).
[[noreturn]] void bad_count(int count, const char* what);
[[noreturn]] void bad_buffer(int count, const char* what);
[[noreturn]] void bad_tag(int tag);
[[noreturn]] void bad_rank(const CommInfo& c, int rank);
inline std::size_t bytes_of(const void* buf, int count, MPI_Datatype type, const char* what = "buffer") {
    if (count < 0) bad_count(count, what);
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    if (bytes > 0 && buf == nullptr && !absolute_addresses(*typemap_of(type))) bad_buffer(count, what);
    return bytes;
}
inline void check_send_tag(int tag) {
    if (tag < 0 || tag > MPI_TAG_UB_VALUE) bad_tag(tag);
}
inline void check_recv_tag(int tag) {
    if (tag != MPI_ANY_TAG) check_send_tag(tag);
}
inline void check_rank(const CommInfo& c, int rank, bool any_allowed) {
    if (rank == MPI_PROC_NULL || (any_allowed && rank == MPI_ANY_SOURCE)) return;
    if (rank < 0 || rank >= c.size) bad_rank(c, rank);
}
void check_root(const CommInfo& c, int root);
// The operation is one of mpi.h and defined on the type.
void check_op(MPI_Op op, MPI_Datatype type);
void proc_null_status(MPI_Status* status);
// A request's own error, with the message of what happened to it (inline: the
// success of every blocking call).
int request_error_message(int code, const MPI_Status& status);
inline int request_error(int code, const MPI_Status& status) {
    return code == MPI_SUCCESS ? code : request_error_message(code, status);
}
int init(int* argc, char*** argv);
// Deletes the attributes of the application on comm, each through its keyval's delete
// function (comm_calls.cpp); MPI_Finalize calls it for MPI_COMM_SELF, then MPI_COMM_WORLD.
void delete_attributes(MPI_Comm comm);
// MPI_Comm_dup and MPI_Type_dup: the attributes of from, as their copy functions say, on to.
void copy_attributes(int from, int to);
// A communicator's Cartesian grid (topology.cpp): MPI_Comm_dup hands it on,
// MPI_Comm_free drops it.
void copy_topology(MPI_Comm from, MPI_Comm to);
void drop_topology(MPI_Comm comm);
// MPI_Type_contiguous's envelope (type_calls.cpp keeps every constructor's).
void record_contiguous(MPI_Datatype made, int count, MPI_Datatype old);
int send_common(const char* call, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                bool sync);
// The block of one rank in a gather, scatter or allgather: the send side's and the
// receive side's must have the same size.
std::size_t block_of(const char* side, int count, MPI_Datatype type, std::size_t other, bool check_other);

// Point to point of any committed type (bytes: count * its packed size, from
// bytes_of): a dense type's buffer is the message; another is packed into memory the
// request keeps (send) or received there and unpacked when it arrives (receive).
MPI_Request isend_typed(const CommInfo& c, int dest, int tag, const void* buf, int count, MPI_Datatype type,
                        std::size_t bytes, bool sync);
MPI_Request irecv_typed(const CommInfo& c, int source, int tag, void* buf, int count, MPI_Datatype type,
                        std::size_t bytes);
// The same with the type's map (a persistent request keeps it: the type may be freed).
MPI_Request isend_typed(const CommInfo& c, int dest, int tag, const void* buf, int count, const TypeMapPtr& m,
                        std::size_t bytes, bool sync);
MPI_Request irecv_typed(const CommInfo& c, int source, int tag, void* buf, int count, const TypeMapPtr& m,
                        std::size_t bytes);

// The buffers of a collective as its schedule or tree sees them: dense bytes. A
// buffer of a dense type is itself; another is packed into memory of its own now,
// and (inout) unpacked back when the collective completed (finish, or the schedule's
// finish after into). MPI_IN_PLACE, NULL and empty buffers pass as they are. The v
// forms stage rank i's counts[i] elements at displs[i] extents to displs[i] packed
// elements, so the byte sizes and displacements of sizes_of/displs_of hold.
class Staging {
public:
    const void* in(const void* buf, int count, MPI_Datatype type);
    void* inout(void* buf, int count, MPI_Datatype type);
    const void* in_v(const void* buf, const int* counts, const int* displs, int n, MPI_Datatype type);
    void* inout_v(void* buf, const int* counts, const int* displs, int n, MPI_Datatype type);
    // Alltoallw: region i is counts[i] of types[i] at displs[i] bytes; when one type is
    // not dense, the regions are staged one after another and displs_out (bytes) says where.
    void* inout_w(const void* buf, const int* counts, const int* displs, const MPI_Datatype* types, int n,
                  std::vector<std::size_t>& displs_out, bool unpack);
    void finish();
    std::unique_ptr<Schedule> into(std::unique_ptr<Schedule> s);

private:
    std::byte* alloc(std::size_t bytes);
    void* stage_v(const void* buf, const int* counts, const int* displs, int n, MPI_Datatype type, bool unpack);
    std::vector<std::unique_ptr<std::byte[]>> memory_;
    std::vector<std::function<void()>> unpacks_;
};

// any_phase: a call MPI allows before MPI_Init and after MPI_Finalize (the MPI_Info
// calls, MPI-4 11.2.1).
template <class F>
int guarded(const char* call, MPI_Comm comm, F&& body, bool any_phase = false) {
    std::unique_lock<std::recursive_mutex> hold(big_lock, std::defer_lock);
    if (thread_level == MPI_THREAD_MULTIPLE) hold.lock();
    try {
        if (phase == Phase::before && !any_phase) throw MpiError(MPI_ERR_OTHER, "called before MPI_Init");
        if (phase == Phase::finalized && !any_phase) throw MpiError(MPI_ERR_OTHER, "called after MPI_Finalize");
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

// A collective's entry point: make builds its schedule (checking the arguments);
// blocking runs it to completion, nonblocking starts it and returns its request.
template <class Make>
int blocking(const char* call, MPI_Comm comm, Make&& make) {
    return guarded(call, comm, [&] {
        engine->run(make());
        return MPI_SUCCESS;
    });
}

template <class Make>
int nonblocking(const char* call, MPI_Comm comm, MPI_Request* request, Make&& make) {
    return guarded(call, comm, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = engine->start(make());
        return MPI_SUCCESS;
    });
}

// A persistent collective's entry point (MPI_Bcast_init...): make (which keeps copies
// of the arguments) is checked now and builds the schedule anew at each MPI_Start,
// with the collective number the call took (Engine::next_tag).
template <class Make>
int persistent_collective(const char* call, MPI_Comm comm, MPI_Request* request, Make make) {
    return guarded(call, comm, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        const auto first = make();
        if (first->comm.local && !first->inter)
            throw MpiError(MPI_ERR_COMM, std::string(first->name) + " on an intercommunicator is not provided");
        const int tag = engine->next_tag(first->comm);
        *request = engine->persistent([make, tag] { return engine->start_tagged(make(), tag); });
        return MPI_SUCCESS;
    });
}

} // namespace msgpass::mpi::api
