// The C entry points of msgpass's MPI (mpi.h), the blocking collectives with trees of
// their own (collectives.cpp): Bcast, Reduce, Gather, Scatter; argument checks, then
// the algorithm. The other collectives run as schedules (schedule_calls.cpp). Every entry point goes through
// api::guarded.
#include <cstring>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::CommInfo;
using msgpass::mpi::MpiError;

namespace {

// The communicator of a collective with its own tree (the callers below route an
// intercommunicator to the schedules of intercollectives.cpp first).
CommInfo intra(MPI_Comm comm) {
    CommInfo c = engine->info(comm);
    if (c.local) throw MpiError(MPI_ERR_INTERN, "an intercommunicator reached a tree of collectives.cpp");
    return c;
}

// True for a valid intercommunicator (an invalid handle is reported by the call).
bool is_inter(MPI_Comm comm) noexcept {
    try {
        std::unique_lock<std::recursive_mutex> hold(big_lock, std::defer_lock);
        if (thread_level == MPI_THREAD_MULTIPLE) hold.lock();
        return phase == Phase::running && engine && engine->info(comm).local != nullptr;
    } catch (...) {
        return false;
    }
}

// An intercommunicator's Bcast, Reduce, Gather and Scatter: the schedule of the
// non-blocking form (schedule_calls.cpp), waited for.
int wait_for(int code, MPI_Request& request) {
    return code != MPI_SUCCESS ? code : MPI_Wait(&request, MPI_STATUS_IGNORE);
}

} // namespace

extern "C" {

// ------------------------------------------------------------------- collectives

int MPI_Bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    if (MPI_Request r = MPI_REQUEST_NULL; is_inter(comm))
        return wait_for(MPI_Ibcast(buffer, count, type, root, comm, &r), r);
    return guarded("MPI_Bcast", comm, [&] {
        const auto c = intra(comm);
        const auto bytes = bytes_of(buffer, count, type);
        check_root(c, root);
        Staging st;
        void* buf = c.rank == root ? const_cast<void*>(st.in(buffer, count, type)) // NOLINT: only read at the root
                                   : st.inout(buffer, count, type);
        msgpass::mpi::bcast(*engine, c, buf, bytes, root);
        st.finish();
        return MPI_SUCCESS;
    });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
    if (MPI_Request r = MPI_REQUEST_NULL; is_inter(comm))
        return wait_for(MPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, &r), r);
    return guarded("MPI_Reduce", comm, [&] {
        const auto c = intra(comm);
        check_root(c, root);
        check_op(op, type);
        const bool in_place = sendbuf == MPI_IN_PLACE;
        if (in_place && c.rank != root) throw MpiError(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
        (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
        if (c.rank == root) (void)bytes_of(recvbuf, count, type, "recvbuf");
        Staging st;
        void* recv = c.rank == root ? st.inout(recvbuf, count, type) : recvbuf;
        const void* send = in_place ? recv : st.in(sendbuf, count, type);
        if (msgpass::mpi::is_commutative(op))
            msgpass::mpi::reduce(*engine, c, send, recv, count, type, op, root);
        else // (the schedule's tree keeps the rank order)
            engine->run(msgpass::mpi::reduce_schedule(c, send, recv, count, type, op, root));
        st.finish();
        return MPI_SUCCESS;
    });
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
    if (MPI_Request r = MPI_REQUEST_NULL; is_inter(comm))
        return wait_for(MPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, &r), r);
    return guarded("MPI_Gather", comm, [&] {
        const auto c = intra(comm);
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
        Staging st;
        void* recv = c.rank == root ? st.inout(recvbuf, recvcount * c.size, recvtype) : recvbuf;
        const void* own = in_place ? static_cast<const std::byte*>(recv) + block * static_cast<std::size_t>(root)
                                   : st.in(sendbuf, sendcount, sendtype);
        msgpass::mpi::gather(*engine, c, own, block, recv, root);
        st.finish();
        return MPI_SUCCESS;
    });
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm) {
    if (MPI_Request r = MPI_REQUEST_NULL; is_inter(comm))
        return wait_for(MPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, &r), r);
    return guarded("MPI_Scatter", comm, [&] {
        const auto c = intra(comm);
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
        Staging st;
        const void* send = c.rank == root ? st.in(sendbuf, sendcount * c.size, sendtype) : sendbuf;
        void* recv = in_place ? nullptr : st.inout(recvbuf, recvcount, recvtype);
        msgpass::mpi::scatter(*engine, c, send, block, recv, root);
        st.finish();
        return MPI_SUCCESS;
    });
}

// ------------------------------------------------------------------- operations

int MPI_Op_create(MPI_User_function* user_fn, int commute, MPI_Op* op) {
    return guarded("MPI_Op_create", MPI_COMM_WORLD, [&] {
        if (op == nullptr) throw MpiError(MPI_ERR_ARG, "op is NULL");
        *op = msgpass::mpi::op_create(user_fn, commute != 0);
        return MPI_SUCCESS;
    });
}

int MPI_Op_free(MPI_Op* op) {
    return guarded("MPI_Op_free", MPI_COMM_WORLD, [&] {
        if (op == nullptr) throw MpiError(MPI_ERR_ARG, "op is NULL");
        msgpass::mpi::op_free(*op);
        *op = MPI_OP_NULL;
        return MPI_SUCCESS;
    });
}

int MPI_Op_commutative(MPI_Op op, int* commute) {
    return guarded("MPI_Op_commutative", MPI_COMM_WORLD, [&] {
        if (commute == nullptr) throw MpiError(MPI_ERR_ARG, "commute is NULL");
        if (msgpass::mpi::is_user_op(op))
            msgpass::mpi::check_user_op(op);
        else if (op < MPI_MAX || op > MPI_MINLOC)
            throw MpiError(MPI_ERR_OP, "invalid operation " + std::to_string(op));
        *commute = msgpass::mpi::is_commutative(op) ? 1 : 0;
        return MPI_SUCCESS;
    });
}

} // extern "C"
