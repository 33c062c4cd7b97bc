// The C entry points of msgpass's MPI (mpi.h) whose collectives run as schedules
// (schedules.cpp): the v-variants, Alltoall(v,w), Reduce_scatter(_block), Scan,
// Exscan, Barrier, Allreduce, Allgather, and every non-blocking collective. Each
// collective's arguments are checked and turned into a schedule once (the make_*
// functions); the blocking call runs it to completion, the non-blocking one returns
// its request. Every entry point goes through api::guarded.
#include <array>
#include <climits>
#include <cstring>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::CommInfo;
using msgpass::mpi::MpiError;
using msgpass::mpi::Schedule;

namespace {

using Sched = std::unique_ptr<Schedule>;
using Sizes = std::vector<std::size_t>;

// counts[i] * size of each rank's block, in bytes.
Sizes sizes_of(const char* what, const int* counts, int n, std::size_t size) {
    if (counts == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " is NULL");
    Sizes out(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        if (counts[i] < 0)
            throw MpiError(MPI_ERR_COUNT, std::string(what) + "[" + std::to_string(i) + "] is negative (" +
                                              std::to_string(counts[i]) + ")");
        out[static_cast<std::size_t>(i)] = static_cast<std::size_t>(counts[i]) * size;
    }
    return out;
}

// Displacements (in units of size bytes) in bytes; negative ones are not provided.
Sizes displs_of(const char* what, const int* displs, int n, std::size_t size) {
    if (displs == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " is NULL");
    Sizes out(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        if (displs[i] < 0)
            throw MpiError(MPI_ERR_ARG, std::string(what) + "[" + std::to_string(i) + "] is negative (" +
                                            std::to_string(displs[i]) + "): not provided");
        out[static_cast<std::size_t>(i)] = static_cast<std::size_t>(displs[i]) * size;
    }
    return out;
}

Sizes uniform(int n, std::size_t block, bool displacements) {
    Sizes out(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = displacements ? i * block : block;
    return out;
}

void check_buffer(const void* buf, const Sizes& sizes, const char* what) {
    for (std::size_t s : sizes)
        if (s > 0 && buf == nullptr) throw MpiError(MPI_ERR_BUFFER, std::string(what) + " is NULL");
}

void check_own(std::size_t sent, std::size_t received) {
    if (sent != received)
        throw MpiError(MPI_ERR_TRUNCATE, "this rank's block is " + std::to_string(sent) + " bytes to send and " +
                                             std::to_string(received) + " bytes to receive");
}

// ---- intercommunicators (intercollectives.cpp): root is MPI_ROOT, MPI_PROC_NULL or a
// rank of the remote group; the blocks received come from the remote group.

void no_in_place(const void* buf, const char* what) {
    if (buf == MPI_IN_PLACE)
        throw MpiError(MPI_ERR_BUFFER, std::string("MPI_IN_PLACE as ") + what + " is not for an intercommunicator");
}

void check_block_buffer(const void* buf, std::size_t block, const char* what) {
    if (block > 0 && buf == nullptr) throw MpiError(MPI_ERR_BUFFER, std::string(what) + " is NULL");
}

Sched inter_bcast(void* buffer, int count, MPI_Datatype type, int root, const CommInfo& c) {
    if (root == MPI_PROC_NULL) return msgpass::mpi::inter_bcast_schedule(c, nullptr, 0, root);
    const auto bytes = bytes_of(buffer, count, type);
    Staging st;
    void* buf = root == MPI_ROOT ? const_cast<void*>(st.in(buffer, count, type)) // NOLINT: only read at the root
                                 : st.inout(buffer, count, type);
    return st.into(msgpass::mpi::inter_bcast_schedule(c, buf, bytes, root));
}

Sched inter_reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                   const CommInfo& c) {
    check_op(op, type);
    Staging st;
    if (root == MPI_PROC_NULL) return msgpass::mpi::inter_reduce_schedule(c, nullptr, nullptr, 0, type, op, root);
    if (root == MPI_ROOT) {
        no_in_place(recvbuf, "recvbuf");
        (void)bytes_of(recvbuf, count, type, "recvbuf");
        void* recv = st.inout(recvbuf, count, type);
        return st.into(msgpass::mpi::inter_reduce_schedule(c, nullptr, recv, count, type, op, root));
    }
    no_in_place(sendbuf, "sendbuf");
    (void)bytes_of(sendbuf, count, type, "sendbuf");
    const void* send = st.in(sendbuf, count, type);
    return st.into(msgpass::mpi::inter_reduce_schedule(c, send, nullptr, count, type, op, root));
}

Sched inter_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, const CommInfo& c) {
    check_op(op, type);
    no_in_place(sendbuf, "sendbuf");
    (void)bytes_of(sendbuf, count, type, "sendbuf");
    (void)bytes_of(recvbuf, count, type, "recvbuf");
    Staging st;
    void* recv = st.inout(recvbuf, count, type);
    const void* send = st.in(sendbuf, count, type);
    return st.into(msgpass::mpi::inter_allreduce_schedule(c, send, recv, count, type, op));
}

Sched inter_gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, int root, const CommInfo& c) {
    Staging st;
    if (root == MPI_PROC_NULL) return msgpass::mpi::inter_gather_schedule(c, nullptr, nullptr, 0, root);
    if (root == MPI_ROOT) {
        no_in_place(recvbuf, "recvbuf");
        const std::size_t block = block_of("recvcount", recvcount, recvtype, 0, false);
        check_block_buffer(recvbuf, block, "recvbuf");
        void* recv = st.inout(recvbuf, recvcount * c.size, recvtype);
        return st.into(msgpass::mpi::inter_gather_schedule(c, nullptr, recv, block, root));
    }
    no_in_place(sendbuf, "sendbuf");
    const std::size_t block = block_of("sendcount", sendcount, sendtype, 0, false);
    check_block_buffer(sendbuf, block, "sendbuf");
    const void* send = st.in(sendbuf, sendcount, sendtype);
    return st.into(msgpass::mpi::inter_gather_schedule(c, send, nullptr, block, root));
}

Sched inter_scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, int root, const CommInfo& c) {
    Staging st;
    if (root == MPI_PROC_NULL) return msgpass::mpi::inter_scatter_schedule(c, nullptr, nullptr, 0, root);
    if (root == MPI_ROOT) {
        no_in_place(sendbuf, "sendbuf");
        const std::size_t block = block_of("sendcount", sendcount, sendtype, 0, false);
        check_block_buffer(sendbuf, block, "sendbuf");
        const void* send = st.in(sendbuf, sendcount * c.size, sendtype);
        return st.into(msgpass::mpi::inter_scatter_schedule(c, send, nullptr, block, root));
    }
    no_in_place(recvbuf, "recvbuf");
    const std::size_t block = block_of("recvcount", recvcount, recvtype, 0, false);
    check_block_buffer(recvbuf, block, "recvbuf");
    void* recv = st.inout(recvbuf, recvcount, recvtype);
    return st.into(msgpass::mpi::inter_scatter_schedule(c, nullptr, recv, block, root));
}

Sched inter_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                      MPI_Datatype recvtype, const CommInfo& c) {
    no_in_place(sendbuf, "sendbuf");
    const std::size_t send_block = block_of("sendcount", sendcount, sendtype, 0, false);
    const std::size_t recv_block = block_of("recvcount", recvcount, recvtype, 0, false);
    check_block_buffer(sendbuf, send_block, "sendbuf");
    check_block_buffer(recvbuf, recv_block, "recvbuf");
    Staging st;
    void* recv = st.inout(recvbuf, recvcount * c.size, recvtype);
    const void* send = st.in(sendbuf, sendcount, sendtype);
    return st.into(msgpass::mpi::inter_allgather_schedule(c, send, send_block, recv, recv_block));
}

Sched inter_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, const CommInfo& c) {
    no_in_place(sendbuf, "sendbuf");
    const std::size_t send_block = block_of("sendcount", sendcount, sendtype, 0, false);
    const std::size_t recv_block = block_of("recvcount", recvcount, recvtype, 0, false);
    check_block_buffer(sendbuf, send_block, "sendbuf");
    check_block_buffer(recvbuf, recv_block, "recvbuf");
    Staging st;
    void* recv = st.inout(recvbuf, recvcount * c.size, recvtype);
    const void* send = st.in(sendbuf, sendcount * c.size, sendtype);
    return st.into(msgpass::mpi::inter_alltoall_schedule(c, send, send_block, recv, recv_block));
}

// ---- every communicator

// The communicator of a collective intercommunicators do not have (Scan and Exscan,
// which MPI defines on intracommunicators only): MPI_ERR_COMM before its arguments are
// read as a group of c.size ranks.
CommInfo intra_info(MPI_Comm comm, const char* name) {
    CommInfo c = engine->info(comm);
    if (c.local)
        throw MpiError(MPI_ERR_COMM, std::string(name) +
                                         " on an intercommunicator is not defined (MPI defines Scan and Exscan on "
                                         "intracommunicators only)");
    return c;
}

Sched make_barrier(MPI_Comm comm) {
    const auto c = engine->info(comm);
    return c.local ? msgpass::mpi::inter_barrier_schedule(c) : msgpass::mpi::barrier_schedule(c);
}

Sched make_bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_bcast(buffer, count, type, root, c);
    const auto bytes = bytes_of(buffer, count, type);
    check_root(c, root);
    Staging st;
    void* buf = c.rank == root ? const_cast<void*>(st.in(buffer, count, type)) // NOLINT: only read at the root
                               : st.inout(buffer, count, type);
    return st.into(msgpass::mpi::bcast_schedule(c, buf, bytes, root));
}

Sched make_reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                  MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_reduce(sendbuf, recvbuf, count, type, op, root, c);
    check_root(c, root);
    check_op(op, type);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    if (in_place && c.rank != root) throw MpiError(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
    (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
    if (c.rank == root) (void)bytes_of(recvbuf, count, type, "recvbuf");
    Staging st;
    void* recv = c.rank == root ? st.inout(recvbuf, count, type) : recvbuf;
    const void* send = in_place ? recv : st.in(sendbuf, count, type);
    return st.into(msgpass::mpi::reduce_schedule(c, send, recv, count, type, op, root));
}

Sched make_allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_allreduce(sendbuf, recvbuf, count, type, op, c);
    check_op(op, type);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
    (void)bytes_of(recvbuf, count, type, "recvbuf");
    Staging st;
    void* recv = st.inout(recvbuf, count, type);
    const void* send = in_place ? recv : st.in(sendbuf, count, type);
    return st.into(msgpass::mpi::allreduce_schedule(c, send, recv, count, type, op));
}

// Stage: the receive buffer at the root as the schedule sees it (Staging).
template <class Stage>
Sched make_gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const Sizes& sizes,
                   const Sizes& displs, int root, const CommInfo& c, Stage&& stage_recv) {
    const bool in_place = sendbuf == MPI_IN_PLACE && c.rank == root;
    std::size_t own = 0;
    if (!in_place) {
        own = bytes_of(sendbuf, sendcount, sendtype, "sendbuf");
        if (c.rank == root) check_own(own, sizes[static_cast<std::size_t>(root)]);
    }
    if (c.rank == root) check_buffer(recvbuf, sizes, "recvbuf");
    Staging st;
    void* recv = c.rank == root ? stage_recv(st) : recvbuf;
    const void* send = in_place ? nullptr : st.in(sendbuf, sendcount, sendtype);
    return st.into(msgpass::mpi::gatherv_schedule(c, send, own, recv, sizes, displs, root));
}

Sched make_gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) {
        if (root == MPI_PROC_NULL) return msgpass::mpi::inter_gatherv_schedule(c, nullptr, 0, nullptr, {}, {}, root);
        Staging st;
        if (root == MPI_ROOT) {
            no_in_place(recvbuf, "recvbuf");
            const Sizes sizes = sizes_of("recvcounts", recvcounts, c.size, type_size(recvtype));
            const Sizes at = displs_of("displs", displs, c.size, type_size(recvtype));
            check_buffer(recvbuf, sizes, "recvbuf");
            void* recv = st.inout_v(recvbuf, recvcounts, displs, c.size, recvtype);
            return st.into(msgpass::mpi::inter_gatherv_schedule(c, nullptr, 0, recv, sizes, at, root));
        }
        no_in_place(sendbuf, "sendbuf");
        const std::size_t own = bytes_of(sendbuf, sendcount, sendtype, "sendbuf");
        const void* send = st.in(sendbuf, sendcount, sendtype);
        return st.into(msgpass::mpi::inter_gatherv_schedule(c, send, own, nullptr, {}, {}, root));
    }
    check_root(c, root);
    Sizes sizes(static_cast<std::size_t>(c.size));
    Sizes at(static_cast<std::size_t>(c.size));
    if (c.rank == root) { // significant at the root only
        sizes = sizes_of("recvcounts", recvcounts, c.size, type_size(recvtype));
        at = displs_of("displs", displs, c.size, type_size(recvtype));
    }
    return make_gatherv(sendbuf, sendcount, sendtype, recvbuf, sizes, at, root, c,
                        [&](Staging& st) { return st.inout_v(recvbuf, recvcounts, displs, c.size, recvtype); });
}

Sched make_gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, int root, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c);
    check_root(c, root);
    std::size_t block = 0;
    if (c.rank == root) block = block_of("recvcount", recvcount, recvtype, 0, false);
    return make_gatherv(sendbuf, sendcount, sendtype, recvbuf, uniform(c.size, block, false),
                        uniform(c.size, block, true), root, c,
                        [&](Staging& st) { return st.inout(recvbuf, recvcount * c.size, recvtype); });
}

template <class Stage>
Sched make_scatterv(const void* sendbuf, const Sizes& sizes, const Sizes& displs, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, int root, const CommInfo& c, Stage&& stage_send) {
    const bool in_place = recvbuf == MPI_IN_PLACE && c.rank == root;
    std::size_t own = 0;
    if (!in_place) {
        own = bytes_of(recvbuf, recvcount, recvtype, "recvbuf");
        if (c.rank == root) check_own(sizes[static_cast<std::size_t>(root)], own);
    }
    if (c.rank == root) check_buffer(sendbuf, sizes, "sendbuf");
    Staging st;
    const void* send = c.rank == root ? stage_send(st) : sendbuf;
    void* recv = in_place ? nullptr : st.inout(recvbuf, recvcount, recvtype);
    return st.into(msgpass::mpi::scatterv_schedule(c, send, sizes, displs, recv, own, root));
}

Sched make_scatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                    void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) {
        if (root == MPI_PROC_NULL) return msgpass::mpi::inter_scatterv_schedule(c, nullptr, {}, {}, nullptr, 0, root);
        Staging st;
        if (root == MPI_ROOT) {
            no_in_place(sendbuf, "sendbuf");
            const Sizes sizes = sizes_of("sendcounts", sendcounts, c.size, type_size(sendtype));
            const Sizes at = displs_of("displs", displs, c.size, type_size(sendtype));
            check_buffer(sendbuf, sizes, "sendbuf");
            const void* send = st.in_v(sendbuf, sendcounts, displs, c.size, sendtype);
            return st.into(msgpass::mpi::inter_scatterv_schedule(c, send, sizes, at, nullptr, 0, root));
        }
        no_in_place(recvbuf, "recvbuf");
        const std::size_t own = bytes_of(recvbuf, recvcount, recvtype, "recvbuf");
        void* recv = st.inout(recvbuf, recvcount, recvtype);
        return st.into(msgpass::mpi::inter_scatterv_schedule(c, nullptr, {}, {}, recv, own, root));
    }
    check_root(c, root);
    Sizes sizes(static_cast<std::size_t>(c.size));
    Sizes at(static_cast<std::size_t>(c.size));
    if (c.rank == root) {
        sizes = sizes_of("sendcounts", sendcounts, c.size, type_size(sendtype));
        at = displs_of("displs", displs, c.size, type_size(sendtype));
    }
    return make_scatterv(sendbuf, sizes, at, recvbuf, recvcount, recvtype, root, c,
                         [&](Staging& st) { return st.in_v(sendbuf, sendcounts, displs, c.size, sendtype); });
}

Sched make_scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, int root, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c);
    check_root(c, root);
    std::size_t block = 0;
    if (c.rank == root) block = block_of("sendcount", sendcount, sendtype, 0, false);
    return make_scatterv(sendbuf, uniform(c.size, block, false), uniform(c.size, block, true), recvbuf, recvcount,
                         recvtype, root, c, [&](Staging& st) { return st.in(sendbuf, sendcount * c.size, sendtype); });
}

template <class Stage>
Sched make_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const Sizes& sizes,
                      const Sizes& displs, const CommInfo& c, Stage&& stage_recv) {
    const bool in_place = sendbuf == MPI_IN_PLACE;
    if (!in_place)
        check_own(bytes_of(sendbuf, sendcount, sendtype, "sendbuf"), sizes[static_cast<std::size_t>(c.rank)]);
    check_buffer(recvbuf, sizes, "recvbuf");
    Staging st;
    void* recv = stage_recv(st);
    const void* send = in_place ? nullptr : st.in(sendbuf, sendcount, sendtype);
    return st.into(msgpass::mpi::allgatherv_schedule(c, send, recv, sizes, displs));
}

Sched make_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                      const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) {
        no_in_place(sendbuf, "sendbuf");
        const std::size_t own = bytes_of(sendbuf, sendcount, sendtype, "sendbuf");
        const Sizes sizes = sizes_of("recvcounts", recvcounts, c.size, type_size(recvtype));
        const Sizes at = displs_of("displs", displs, c.size, type_size(recvtype));
        check_buffer(recvbuf, sizes, "recvbuf");
        Staging st;
        void* recv = st.inout_v(recvbuf, recvcounts, displs, c.size, recvtype);
        const void* send = st.in(sendbuf, sendcount, sendtype);
        return st.into(msgpass::mpi::inter_allgatherv_schedule(c, send, own, recv, sizes, at));
    }
    return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf,
                           sizes_of("recvcounts", recvcounts, c.size, type_size(recvtype)),
                           displs_of("displs", displs, c.size, type_size(recvtype)), c,
                           [&](Staging& st) { return st.inout_v(recvbuf, recvcounts, displs, c.size, recvtype); });
}

Sched make_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c);
    const std::size_t block = block_of("recvcount", recvcount, recvtype, 0, false);
    return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, uniform(c.size, block, false),
                           uniform(c.size, block, true), c,
                           [&](Staging& st) { return st.inout(recvbuf, recvcount * c.size, recvtype); });
}

// Stage(st, send_displs, recv_displs): the send and receive buffers as the schedule
// sees them (Staging), displacements changed where the staging moved the blocks.
template <class Stage>
Sched make_alltoallw(const void* sendbuf, const Sizes& send_sizes, Sizes send_displs, void* recvbuf,
                     const Sizes& recv_sizes, Sizes recv_displs, const CommInfo& c, Stage&& stage) {
    if (c.local) no_in_place(sendbuf, "sendbuf");
    const bool in_place = sendbuf == MPI_IN_PLACE;
    if (!in_place) check_buffer(sendbuf, send_sizes, "sendbuf");
    check_buffer(recvbuf, recv_sizes, "recvbuf");
    Staging st;
    const auto [send, recv] = stage(st, send_displs, recv_displs);
    if (in_place) send_displs = recv_displs;
    if (c.local)
        return st.into(
            msgpass::mpi::inter_alltoallw_schedule(c, send, send_sizes, send_displs, recv, recv_sizes, recv_displs));
    // (the schedule takes a null send for MPI_IN_PLACE: a NULL sendbuf of zero counts,
    // which the standard allows, is no in-place call)
    static constexpr std::byte nothing{};
    const void* out = in_place ? nullptr : send != nullptr ? send : &nothing;
    return st.into(msgpass::mpi::alltoallw_schedule(c, out, send_sizes, send_displs, recv, recv_sizes, recv_displs));
}

Sched make_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local) return inter_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c);
    const std::size_t rblock = block_of("recvcount", recvcount, recvtype, 0, false);
    std::size_t sblock = rblock;
    if (sendbuf != MPI_IN_PLACE) sblock = block_of("sendcount", sendcount, sendtype, rblock, true);
    return make_alltoallw(sendbuf, uniform(c.size, sblock, false), uniform(c.size, sblock, true), recvbuf,
                          uniform(c.size, rblock, false), uniform(c.size, rblock, true), c,
                          [&](Staging& st, Sizes&, Sizes&) {
                              return std::pair{st.in(sendbuf, sendcount * c.size, sendtype),
                                               st.inout(recvbuf, recvcount * c.size, recvtype)};
                          });
}

Sched make_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                     void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
    const auto c = engine->info(comm); // (an intercommunicator's: per remote rank)
    const Sizes recv_sizes = sizes_of("recvcounts", recvcounts, c.size, type_size(recvtype));
    const Sizes recv_displs = displs_of("rdispls", rdispls, c.size, type_size(recvtype));
    auto stage = [&](Staging& st, Sizes&, Sizes&) {
        return std::pair{st.in_v(sendbuf, sendcounts, sdispls, c.size, sendtype),
                         st.inout_v(recvbuf, recvcounts, rdispls, c.size, recvtype)};
    };
    if (sendbuf == MPI_IN_PLACE)
        return make_alltoallw(sendbuf, recv_sizes, recv_displs, recvbuf, recv_sizes, recv_displs, c, stage);
    return make_alltoallw(sendbuf, sizes_of("sendcounts", sendcounts, c.size, type_size(sendtype)),
                          displs_of("sdispls", sdispls, c.size, type_size(sendtype)), recvbuf, recv_sizes, recv_displs,
                          c, stage);
}

Sizes sizes_of_types(const char* what, const int* counts, const MPI_Datatype* types, int n) {
    if (types == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " types are NULL");
    Sizes out = sizes_of(what, counts, n, 1);
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] *= type_size(types[i]);
    return out;
}

Sched make_alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                     void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                     MPI_Comm comm) {
    const auto c = engine->info(comm); // (an intercommunicator's: per remote rank)
    const Sizes recv_sizes = sizes_of_types("recvcounts", recvcounts, recvtypes, c.size);
    const Sizes recv_displs = displs_of("rdispls", rdispls, c.size, 1);
    auto stage = [&](Staging& st, Sizes& send_displs, Sizes& rdispls_out) {
        const void* send = sendbuf == MPI_IN_PLACE
                               ? sendbuf
                               : st.inout_w(sendbuf, sendcounts, sdispls, sendtypes, c.size, send_displs, false);
        return std::pair{send, st.inout_w(recvbuf, recvcounts, rdispls, recvtypes, c.size, rdispls_out, true)};
    };
    if (sendbuf == MPI_IN_PLACE)
        return make_alltoallw(sendbuf, recv_sizes, recv_displs, recvbuf, recv_sizes, recv_displs, c, stage);
    return make_alltoallw(sendbuf, sizes_of_types("sendcounts", sendcounts, sendtypes, c.size),
                          displs_of("sdispls", sdispls, c.size, 1), recvbuf, recv_sizes, recv_displs, c, stage);
}

Sched make_reduce_scatter(const void* sendbuf, void* recvbuf, const std::vector<int>& counts, MPI_Datatype type,
                          MPI_Op op, const CommInfo& c) {
    check_op(op, type);
    const std::size_t size = type_size(type);
    std::size_t total = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] < 0)
            throw MpiError(MPI_ERR_COUNT,
                           "recvcounts[" + std::to_string(i) + "] is negative (" + std::to_string(counts[i]) + ")");
        total += static_cast<std::size_t>(counts[i]);
    }
    if (total > static_cast<std::size_t>(INT_MAX)) throw MpiError(MPI_ERR_COUNT, "the counts add up beyond INT_MAX");
    const bool in_place = sendbuf == MPI_IN_PLACE;
    if (total > 0 && (in_place ? recvbuf : sendbuf) == nullptr) throw MpiError(MPI_ERR_BUFFER, "sendbuf is NULL");
    if (counts[static_cast<std::size_t>(c.rank)] > 0 && recvbuf == nullptr)
        throw MpiError(MPI_ERR_BUFFER, "recvbuf is NULL");
    (void)size;
    Staging st;
    void* recv = st.inout(recvbuf, in_place ? static_cast<int>(total) : counts[static_cast<std::size_t>(c.rank)], type);
    const void* send = in_place ? nullptr : st.in(sendbuf, static_cast<int>(total), type);
    return st.into(msgpass::mpi::reduce_scatter_schedule(c, send, recv, counts, type, op));
}

// On an intercommunicator (MPI 3.1, 5.10.1): each group's reduction of its
// sum(counts) elements is scattered over the other group by that group's counts
// (both groups' totals are the same). Built as the intercommunicator's Allreduce,
// which gives each rank the other group's whole reduction, then each keeps its block.
Sched inter_reduce_scatter(const void* sendbuf, void* recvbuf, const std::vector<int>& counts, MPI_Datatype type,
                           MPI_Op op, const CommInfo& c) {
    check_op(op, type);
    no_in_place(sendbuf, "sendbuf");
    std::size_t total = 0;
    std::size_t before = 0; // elements of the blocks of the lower local ranks
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] < 0)
            throw MpiError(MPI_ERR_COUNT,
                           "recvcounts[" + std::to_string(i) + "] is negative (" + std::to_string(counts[i]) + ")");
        if (i < static_cast<std::size_t>(c.rank)) before += static_cast<std::size_t>(counts[i]);
        total += static_cast<std::size_t>(counts[i]);
    }
    if (total > static_cast<std::size_t>(INT_MAX)) throw MpiError(MPI_ERR_COUNT, "the counts add up beyond INT_MAX");
    const int mine = counts[static_cast<std::size_t>(c.rank)];
    (void)bytes_of(sendbuf, static_cast<int>(total), type, "sendbuf");
    (void)bytes_of(recvbuf, mine, type, "recvbuf");
    const std::size_t size = type_size(type);
    Staging st;
    void* recv = st.inout(recvbuf, mine, type);
    const void* send = st.in(sendbuf, static_cast<int>(total), type);
    auto whole = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(total * size, 1));
    std::byte* all = whole.get();
    auto s = msgpass::mpi::inter_allreduce_schedule(c, send, all, static_cast<int>(total), type, op);
    s->scratch.push_back(std::move(whole));
    s->finish.push_back([recv, all, before, mine, size] {
        if (mine > 0) std::memcpy(recv, all + before * size, static_cast<std::size_t>(mine) * size);
    });
    return st.into(std::move(s)); // the staged receive buffer's unpacking runs after the copy
}

Sched make_reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                          MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (recvcounts == nullptr) throw MpiError(MPI_ERR_ARG, "recvcounts is NULL");
    if (c.local)
        return inter_reduce_scatter(sendbuf, recvbuf, std::vector<int>(recvcounts, recvcounts + c.local->size), type,
                                    op, c);
    return make_reduce_scatter(sendbuf, recvbuf, std::vector<int>(recvcounts, recvcounts + c.size), type, op, c);
}

Sched make_reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local)
        return inter_reduce_scatter(sendbuf, recvbuf,
                                    std::vector<int>(static_cast<std::size_t>(c.local->size), recvcount), type, op, c);
    return make_reduce_scatter(sendbuf, recvbuf, std::vector<int>(static_cast<std::size_t>(c.size), recvcount), type,
                               op, c);
}

Sched make_scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                bool exclusive) {
    const auto c = intra_info(comm, "scan");
    check_op(op, type);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    (void)bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
    (void)bytes_of(recvbuf, count, type, "recvbuf");
    Staging st;
    void* recv = st.inout(recvbuf, count, type);
    const void* send = in_place ? recv : st.in(sendbuf, count, type);
    return st.into(msgpass::mpi::scan_schedule(c, send, recv, count, type, op, exclusive));
}

// Whether an Allgather or Alltoall of an
// intracommunicator of two ranks can run on the calling thread (exchange_now): valid
// arguments of predefined types, equal blocks within the eager limit, not in place,
// nothing else in flight. Anything else takes the schedule, which reports the errors.
bool exchange_of_two(const CommInfo& c, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                     int recvcount, MPI_Datatype recvtype) {
    if (c.local || c.size != 2 || !engine->can_recv_now() || sendbuf == MPI_IN_PLACE || sendcount < 0 ||
        recvcount < 0 || sendtype == MPI_DATATYPE_NULL || recvtype == MPI_DATATYPE_NULL ||
        msgpass::mpi::is_derived(sendtype) || msgpass::mpi::is_derived(recvtype))
        return false;
    const std::size_t out = static_cast<std::size_t>(sendcount) * type_size(sendtype);
    const std::size_t block = static_cast<std::size_t>(recvcount) * type_size(recvtype);
    return out == block && block <= engine->eager_limit() && (block == 0 || (sendbuf != nullptr && recvbuf != nullptr));
}

// MPI_Reduce_scatter (counts) or MPI_Reduce_scatter_block (one count for every
// rank, block) on the calling thread (reduce_scatter_now) when it can: an
// intracommunicator of a power-of-two number of ranks, nothing else in flight, a
// predefined type and a commutative operation, valid counts and buffers, at most the
// eager limit in all. True when it ran; false leaves the call to the schedule, which
// reports the errors.
bool reduce_scatter_of_power(const void* sendbuf, void* recvbuf, const int counts[], const int* block,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    const auto c = engine->info(comm);
    if (c.local || c.size < 2 || (c.size & (c.size - 1)) != 0 || !engine->can_recv_now() || type == MPI_DATATYPE_NULL ||
        msgpass::mpi::is_derived(type) || (counts == nullptr && block == nullptr))
        return false;
    check_op(op, type); // as make_reduce_scatter
    if (!msgpass::mpi::is_commutative(op)) return false;
    const auto n = static_cast<std::size_t>(c.size);
    // The counts, one per rank (block: all the same); few ranks on the stack.
    std::array<int, 64> few{};
    std::vector<int> many;
    int* each = few.data();
    if (n > few.size()) {
        many.resize(n);
        each = many.data();
    }
    std::size_t elements = 0;
    for (std::size_t i = 0; i < n; ++i) {
        each[i] = block != nullptr ? *block : counts[i];
        if (each[i] < 0) return false;
        elements += static_cast<std::size_t>(each[i]);
    }
    const std::size_t total = elements * type_size(type);
    const bool in_place = sendbuf == MPI_IN_PLACE;
    const void* send = in_place ? recvbuf : sendbuf;
    if (total > engine->eager_limit() || (total > 0 && send == nullptr) ||
        (each[static_cast<std::size_t>(c.rank)] > 0 && recvbuf == nullptr))
        return false;
    msgpass::mpi::reduce_scatter_now(*engine, c, engine->next_tag(c), send, recvbuf, each, type, op);
    return true;
}

} // namespace

extern "C" {

// ------------------------------------------------------------------- blocking

int MPI_Barrier(MPI_Comm comm) {
    return guarded("MPI_Barrier", comm, [&] {
        if (const auto c = engine->info(comm); !c.local && engine->can_recv_now()) {
            msgpass::mpi::barrier_now(*engine, c, engine->next_tag(c));
            return MPI_SUCCESS;
        }
        engine->run(make_barrier(comm));
        return MPI_SUCCESS;
    });
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    return guarded("MPI_Allreduce", comm, [&] {
        if (const auto c = engine->info(comm);
            !c.local && engine->can_recv_now() && (c.size & (c.size - 1)) == 0 && !msgpass::mpi::is_derived(type)) {
            // The checks of make_allreduce, then the small vector's way.
            check_op(op, type);
            const bool in_place = sendbuf == MPI_IN_PLACE;
            const std::size_t bytes = bytes_of(in_place ? recvbuf : sendbuf, count, type, "sendbuf");
            (void)bytes_of(recvbuf, count, type, "recvbuf");
            if (bytes < msgpass::mpi::allreduce_now_limit) {
                msgpass::mpi::allreduce_now(*engine, c, engine->next_tag(c), in_place ? recvbuf : sendbuf, recvbuf,
                                            count, type, op);
                return MPI_SUCCESS;
            }
        }
        engine->run(make_allreduce(sendbuf, recvbuf, count, type, op, comm));
        return MPI_SUCCESS;
    });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    return guarded("MPI_Allgather", comm, [&] {
        if (const auto c = engine->info(comm);
            exchange_of_two(c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype)) {
            // The ring of allgatherv_schedule at two ranks: one block each way.
            const std::size_t block = static_cast<std::size_t>(recvcount) * msgpass::mpi::api::type_size(recvtype);
            auto* out = static_cast<std::byte*>(recvbuf);
            const int other = 1 - c.rank;
            if (block > 0) std::memmove(out + static_cast<std::size_t>(c.rank) * block, sendbuf, block);
            msgpass::mpi::exchange_now(*engine, c, engine->next_tag(c), other,
                                       out + static_cast<std::size_t>(c.rank) * block,
                                       out + static_cast<std::size_t>(other) * block, block);
            return MPI_SUCCESS;
        }
        engine->run(make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
        return MPI_SUCCESS;
    });
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm) {
    return blocking("MPI_Gatherv", comm, [&] {
        return make_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    });
}

int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
    return blocking("MPI_Scatterv", comm, [&] {
        return make_scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                   const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    return blocking("MPI_Allgatherv", comm, [&] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
    return guarded("MPI_Alltoall", comm, [&] {
        if (const auto c = engine->info(comm);
            exchange_of_two(c, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype)) {
            // alltoallw_schedule at two ranks: the own block copied, the other's each way.
            const std::size_t block = static_cast<std::size_t>(recvcount) * msgpass::mpi::api::type_size(recvtype);
            const auto* in = static_cast<const std::byte*>(sendbuf);
            auto* out = static_cast<std::byte*>(recvbuf);
            const auto me = static_cast<std::size_t>(c.rank);
            const int other = 1 - c.rank;
            if (block > 0) std::memmove(out + me * block, in + me * block, block);
            msgpass::mpi::exchange_now(*engine, c, engine->next_tag(c), other,
                                       in + static_cast<std::size_t>(other) * block,
                                       out + static_cast<std::size_t>(other) * block, block);
            return MPI_SUCCESS;
        }
        engine->run(make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm));
        return MPI_SUCCESS;
    });
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
    return blocking("MPI_Alltoallv", comm, [&] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Alltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                  void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                  MPI_Comm comm) {
    return blocking("MPI_Alltoallw", comm, [&] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm) {
    return guarded("MPI_Reduce_scatter", comm, [&] {
        if (reduce_scatter_of_power(sendbuf, recvbuf, recvcounts, nullptr, type, op, comm)) return MPI_SUCCESS;
        engine->run(make_reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm));
        return MPI_SUCCESS;
    });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm) {
    return guarded("MPI_Reduce_scatter_block", comm, [&] {
        if (reduce_scatter_of_power(sendbuf, recvbuf, nullptr, &recvcount, type, op, comm)) return MPI_SUCCESS;
        engine->run(make_reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm));
        return MPI_SUCCESS;
    });
}

int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    return blocking("MPI_Scan", comm, [&] { return make_scan(sendbuf, recvbuf, count, type, op, comm, false); });
}

int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
    return blocking("MPI_Exscan", comm, [&] { return make_scan(sendbuf, recvbuf, count, type, op, comm, true); });
}

// ------------------------------------------------------------------- non-blocking

int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ibarrier", comm, request, [&] { return make_barrier(comm); });
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ibcast", comm, request, [&] { return make_bcast(buffer, count, type, root, comm); });
}

int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request* request) {
    return nonblocking("MPI_Ireduce", comm, request,
                       [&] { return make_reduce(sendbuf, recvbuf, count, type, op, root, comm); });
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
    return nonblocking("MPI_Iallreduce", comm, request,
                       [&] { return make_allreduce(sendbuf, recvbuf, count, type, op, comm); });
}

int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Igather", comm, request, [&] {
        return make_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                 const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Igatherv", comm, request, [&] {
        return make_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    });
}

int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Iscatter", comm, request, [&] {
        return make_scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Iscatterv(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Iscatterv", comm, request, [&] {
        return make_scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Iallgather", comm, request, [&] {
        return make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                    const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Iallgatherv", comm, request, [&] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ialltoall", comm, request,
                       [&] { return make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                   void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request* request) {
    return nonblocking("MPI_Ialltoallv", comm, request, [&] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Ialltoallw(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                   void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                   MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ialltoallw", comm, request, [&] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                        MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ireduce_scatter", comm, request,
                       [&] { return make_reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm); });
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ireduce_scatter_block", comm, request,
                       [&] { return make_reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm); });
}

int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
              MPI_Request* request) {
    return nonblocking("MPI_Iscan", comm, request,
                       [&] { return make_scan(sendbuf, recvbuf, count, type, op, comm, false); });
}

int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                MPI_Request* request) {
    return nonblocking("MPI_Iexscan", comm, request,
                       [&] { return make_scan(sendbuf, recvbuf, count, type, op, comm, true); });
}

// ------------------------------------------------------------------- persistent (MPI-4)

int MPI_Barrier_init(MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Barrier_init", comm, request, [=] { return make_barrier(comm); });
}

int MPI_Bcast_init(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Info info,
                   MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Bcast_init", comm, request,
                                 [=] { return make_bcast(buffer, count, type, root, comm); });
}

int MPI_Reduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                    MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Reduce_init", comm, request,
                                 [=] { return make_reduce(sendbuf, recvbuf, count, type, op, root, comm); });
}

int MPI_Allreduce_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                       MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Allreduce_init", comm, request,
                                 [=] { return make_allreduce(sendbuf, recvbuf, count, type, op, comm); });
}

int MPI_Gather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Gather_init", comm, request, [=] {
        return make_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Gatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                     const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                     MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Gatherv_init", comm, request, [=] {
        return make_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    });
}

int MPI_Scatter_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Scatter_init", comm, request, [=] {
        return make_scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Scatterv_init(const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                      void* recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                      MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Scatterv_init", comm, request, [=] {
        return make_scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    });
}

int MPI_Allgather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                       MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Allgather_init", comm, request, [=] {
        return make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Allgatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                        const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                        MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Allgatherv_init", comm, request, [=] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Alltoall_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                      MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Alltoall_init", comm, request, [=] {
        return make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Alltoallv_init(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                       void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                       MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Alltoallv_init", comm, request, [=] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Alltoallw_init(const void* sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[],
                       void* recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[],
                       MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Alltoallw_init", comm, request, [=] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

int MPI_Reduce_scatter_init(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Reduce_scatter_init", comm, request,
                                 [=] { return make_reduce_scatter(sendbuf, recvbuf, recvcounts, type, op, comm); });
}

int MPI_Reduce_scatter_block_init(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op,
                                  MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Reduce_scatter_block_init", comm, request, [=] {
        return make_reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
    });
}

int MPI_Scan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                  MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Scan_init", comm, request,
                                 [=] { return make_scan(sendbuf, recvbuf, count, type, op, comm, false); });
}

int MPI_Exscan_init(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                    MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Exscan_init", comm, request,
                                 [=] { return make_scan(sendbuf, recvbuf, count, type, op, comm, true); });
}

} // extern "C"
