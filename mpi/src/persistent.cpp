// The C entry points of msgpass's MPI (mpi.h) for persistent requests (MPI_Send_init
// and its kin, MPI_Recv_init, MPI_Start, MPI_Startall) and buffered sends
// (MPI_Buffer_attach, MPI_Buffer_detach, MPI_Bsend, MPI_Ibsend). A persistent request
// keeps its arguments and posts them anew at each start (Engine::persistent). A
// buffered send copies its message at once and completes; the attached buffer bounds
// how many bytes (each message's plus MPI_BSEND_OVERHEAD) may wait to be delivered,
// the copies being kept by the requests themselves. Every entry point goes through
// api::guarded.
#include <algorithm>
#include <climits>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::CommInfo;
using msgpass::mpi::MpiError;

namespace {

// The buffer of MPI_Buffer_attach and the buffered messages not delivered yet.
struct Attached {
    void* buf = nullptr;
    int size = 0;
    bool attached = false;
    std::vector<std::pair<MPI_Request, std::size_t>> pending; // (send request, bytes it takes)
    std::size_t used = 0;
};
Attached attached;

// Forgets the buffered messages that were delivered.
void reap() {
    auto& p = attached.pending;
    for (auto it = p.begin(); it != p.end();) {
        MPI_Status status{};
        int error = MPI_SUCCESS;
        MPI_Request h = it->first;
        if (engine->test(&h, &status, &error)) {
            attached.used -= it->second;
            it = p.erase(it);
        } else {
            ++it;
        }
    }
}

// The buffered send of MPI_Bsend, MPI_Ibsend and a started MPI_Bsend_init: a copy of
// the message is posted, its room taken in the attached buffer.
void bsend(const CommInfo& c, const void* buf, int count, const msgpass::mpi::TypeMapPtr& m, std::size_t bytes,
           int dest, int tag) {
    if (dest == MPI_PROC_NULL) return;
    reap();
    const std::size_t needed = bytes + MPI_BSEND_OVERHEAD;
    const std::size_t room = attached.attached ? static_cast<std::size_t>(attached.size) : 0;
    if (attached.used + needed > room)
        throw MpiError(MPI_ERR_BUFFER, "the buffered message needs " + std::to_string(needed) + " bytes (" +
                                           std::to_string(bytes) + " + MPI_BSEND_OVERHEAD) of the attached buffer: " +
                                           (attached.attached ? std::to_string(room) + " bytes attached, " +
                                                                    std::to_string(attached.used) + " in use"
                                                              : std::string("none is attached (MPI_Buffer_attach)")));
    std::vector<std::byte> copy(bytes);
    if (bytes > 0) msgpass::mpi::pack(*m, buf, static_cast<std::size_t>(count), copy.data());
    const std::byte* data = copy.data();
    const MPI_Request h = engine->isend(c, dest, tag, data, bytes, false, std::move(copy));
    attached.pending.emplace_back(h, needed);
    attached.used += needed;
}

enum class Kind { send, ssend, bsend, recv };

int init_common(const char* name, Kind kind, const void* buf, int count, MPI_Datatype type, int peer, int tag,
                MPI_Comm comm, MPI_Request* request) {
    return guarded(name, comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        const auto m = msgpass::mpi::typemap_of(type); // committed now (MPI_ERR_TYPE), kept if it is freed
        check_rank(c, peer, kind == Kind::recv);
        if (kind == Kind::recv)
            check_recv_tag(tag);
        else
            check_send_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        void* data = const_cast<void*>(buf); // NOLINT(cppcoreguidelines-pro-type-const-cast): a send only reads it
        *request = engine->persistent([=]() -> MPI_Request {
            if (peer == MPI_PROC_NULL) return MPI_REQUEST_NULL;
            switch (kind) {
            case Kind::recv:
                return irecv_typed(c, peer, tag, data, count, m, bytes);
            case Kind::bsend:
                bsend(c, data, count, m, bytes, peer, tag);
                return engine->completed_send(peer, tag, bytes);
            default:
                return isend_typed(c, peer, tag, data, count, m, bytes, kind == Kind::ssend);
            }
        });
        return MPI_SUCCESS;
    });
}

} // namespace

extern "C" {

int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  MPI_Request* request) {
    return init_common("MPI_Send_init", Kind::send, buf, count, type, dest, tag, comm, request);
}

int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
    return init_common("MPI_Ssend_init", Kind::ssend, buf, count, type, dest, tag, comm, request);
}

int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
    return init_common("MPI_Rsend_init", Kind::send, buf, count, type, dest, tag, comm, request);
}

int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                   MPI_Request* request) {
    return init_common("MPI_Bsend_init", Kind::bsend, buf, count, type, dest, tag, comm, request);
}

int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
    return init_common("MPI_Recv_init", Kind::recv, buf, count, type, source, tag, comm, request);
}

int MPI_Start(MPI_Request* request) {
    return guarded("MPI_Start", MPI_COMM_WORLD, [&] {
        if (request == nullptr || *request == MPI_REQUEST_NULL)
            throw MpiError(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be started");
        engine->start_persistent(*request);
        return MPI_SUCCESS;
    });
}

int MPI_Startall(int count, MPI_Request requests[]) {
    return guarded("MPI_Startall", MPI_COMM_WORLD, [&] {
        if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
        if (count > 0 && requests == nullptr) throw MpiError(MPI_ERR_REQUEST, "requests is NULL");
        for (int i = 0; i < count; ++i) {
            if (requests[i] == MPI_REQUEST_NULL)
                throw MpiError(MPI_ERR_REQUEST, "requests[" + std::to_string(i) + "] is MPI_REQUEST_NULL");
            engine->check_request(requests[i]);
            if (!engine->is_inactive(requests[i]))
                throw MpiError(MPI_ERR_REQUEST, "requests[" + std::to_string(i) + "] is active already");
        }
        for (int i = 0; i < count; ++i)
            engine->start_persistent(requests[i]);
        return MPI_SUCCESS;
    });
}

int MPI_Buffer_attach(void* buffer, int size) {
    return guarded("MPI_Buffer_attach", MPI_COMM_WORLD, [&] {
        if (attached.attached)
            throw MpiError(MPI_ERR_BUFFER, "a buffer is attached already (MPI_Buffer_detach it first)");
        if (size < 0) throw MpiError(MPI_ERR_ARG, "negative size " + std::to_string(size));
        if (size > 0 && buffer == nullptr) throw MpiError(MPI_ERR_BUFFER, "buffer is NULL");
        attached.buf = buffer;
        attached.size = size;
        attached.attached = true;
        return MPI_SUCCESS;
    });
}

int MPI_Buffer_detach(void* buffer_addr, int* size) {
    return guarded("MPI_Buffer_detach", MPI_COMM_WORLD, [&] {
        if (buffer_addr == nullptr || size == nullptr) throw MpiError(MPI_ERR_ARG, "buffer_addr or size is NULL");
        // The buffered messages leave before the buffer is given back.
        for (auto& [h, bytes] : attached.pending) {
            MPI_Status status{};
            (void)engine->wait(&h, &status);
        }
        attached.pending.clear();
        attached.used = 0;
        *static_cast<void**>(buffer_addr) = attached.attached ? attached.buf : nullptr;
        *size = attached.attached ? attached.size : 0;
        attached = Attached{};
        return MPI_SUCCESS;
    });
}

int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return guarded("MPI_Bsend", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        bsend(c, buf, count, msgpass::mpi::typemap_of(type), bytes, dest, tag);
        return MPI_SUCCESS;
    });
}

int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Ibsend", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        bsend(c, buf, count, msgpass::mpi::typemap_of(type), bytes, dest, tag);
        *request = dest == MPI_PROC_NULL ? MPI_REQUEST_NULL : engine->completed_send(dest, tag, bytes);
        return MPI_SUCCESS;
    });
}

} // extern "C"
