// The collectives of an intercommunicator (MPI 3.1, 5.2.2), as schedules: data flows
// from one group to the other. Each is built from the intracommunicator schedules of
// schedules.cpp run in the local group (spliced in as local transfers, in the local
// group's own contexts) and transfers between the groups' leaders (local rank 0 of
// each) or the root, in the intercommunicator's collective context. Rooted ones:
// the root passes MPI_ROOT, the other ranks of its group MPI_PROC_NULL (they take no
// part), the ranks of the other group the root's rank in the remote group.
// Every rank of both groups numbers the intercommunicator's collectives alike, so the
// engine's tag per collective (Engine::start) matches across the groups; the local
// phases use that tag in the local group's context, which nothing else uses.
#include "engine.hpp"

#include <string>

namespace msgpass::mpi {

namespace {

std::unique_ptr<Schedule> make_inter(const CommInfo& c, const char* name) {
    auto s = std::make_unique<Schedule>();
    s->comm = c;
    s->name = name;
    s->inter = true;
    return s;
}

const CommInfo& local_of(const CommInfo& c) {
    return *c.local;
}

// The root argument at a rank of the group that does not hold the root.
void check_remote_root(const CommInfo& c, int root) {
    if (root < 0 || root >= c.size)
        throw MpiError(MPI_ERR_ROOT, "root " + std::to_string(root) +
                                         " is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the remote group of " +
                                         std::to_string(c.size));
}

// The leaders swap bytes: each sends out and receives in, in one round.
void leaders_swap(Schedule& s, const CommInfo& c, const void* out, std::size_t out_bytes, void* in,
                  std::size_t in_bytes) {
    if (local_of(c).rank != 0) return;
    s.next_round();
    s.send(0, out, out_bytes);
    s.recv(0, in, in_bytes);
}

} // namespace

std::unique_ptr<Schedule> inter_barrier_schedule(const CommInfo& c) {
    auto s = make_inter(c, "barrier");
    // Every rank of this group arrived; the leaders tell each other; the leader tells
    // its group that every rank of the other one arrived too.
    s->splice(barrier_schedule(local_of(c)), true);
    leaders_swap(*s, c, nullptr, 0, nullptr, 0);
    s->splice(bcast_schedule(local_of(c), nullptr, 0, 0), true);
    return s;
}

std::unique_ptr<Schedule> inter_bcast_schedule(const CommInfo& c, void* buf, std::size_t bytes, int root) {
    auto s = make_inter(c, "bcast");
    if (root == MPI_PROC_NULL) return s;
    if (root == MPI_ROOT) {
        s->next_round();
        s->send(0, buf, bytes);
        return s;
    }
    check_remote_root(c, root);
    if (local_of(c).rank == 0) {
        s->next_round();
        s->recv(root, buf, bytes);
    }
    s->splice(bcast_schedule(local_of(c), buf, bytes, 0), true);
    return s;
}

std::unique_ptr<Schedule> inter_reduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                                MPI_Datatype type, MPI_Op op, int root) {
    auto s = make_inter(c, "reduce");
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    if (root == MPI_PROC_NULL) return s;
    if (root == MPI_ROOT) {
        s->next_round();
        s->recv(0, recv, bytes);
        return s;
    }
    check_remote_root(c, root);
    std::byte* sum = local_of(c).rank == 0 ? s->alloc(bytes) : nullptr;
    s->splice(reduce_schedule(local_of(c), send, sum, count, type, op, 0), true);
    if (sum != nullptr) {
        s->next_round();
        s->send(root, sum, bytes);
    }
    return s;
}

std::unique_ptr<Schedule> inter_allreduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                                   MPI_Datatype type, MPI_Op op) {
    auto s = make_inter(c, "allreduce");
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    std::byte* sum = local_of(c).rank == 0 ? s->alloc(bytes) : nullptr;
    s->splice(reduce_schedule(local_of(c), send, sum, count, type, op, 0), true);
    leaders_swap(*s, c, sum, bytes, recv, bytes); // this group's result for the other group's
    s->splice(bcast_schedule(local_of(c), recv, bytes, 0), true);
    return s;
}

std::unique_ptr<Schedule> inter_gather_schedule(const CommInfo& c, const void* send, void* recv, std::size_t block,
                                                int root) {
    auto s = make_inter(c, "gather");
    if (root == MPI_PROC_NULL) return s;
    if (root == MPI_ROOT) {
        s->next_round();
        s->recv(0, recv, block * static_cast<std::size_t>(c.size));
        return s;
    }
    check_remote_root(c, root);
    const CommInfo& l = local_of(c);
    const auto n = static_cast<std::size_t>(l.size);
    std::byte* all = l.rank == 0 ? s->alloc(block * n) : nullptr;
    std::vector<std::size_t> sizes(n, block), displs(n);
    for (std::size_t i = 0; i < n; ++i)
        displs[i] = i * block;
    s->splice(gatherv_schedule(l, send, block, all, sizes, displs, 0), true);
    if (all != nullptr) {
        s->next_round();
        s->send(root, all, block * n);
    }
    return s;
}

std::unique_ptr<Schedule> inter_scatter_schedule(const CommInfo& c, const void* send, void* recv, std::size_t block,
                                                 int root) {
    auto s = make_inter(c, "scatter");
    if (root == MPI_PROC_NULL) return s;
    if (root == MPI_ROOT) {
        s->next_round();
        s->send(0, send, block * static_cast<std::size_t>(c.size));
        return s;
    }
    check_remote_root(c, root);
    const CommInfo& l = local_of(c);
    const auto n = static_cast<std::size_t>(l.size);
    std::byte* all = l.rank == 0 ? s->alloc(block * n) : nullptr;
    if (all != nullptr) {
        s->next_round();
        s->recv(root, all, block * n);
    }
    std::vector<std::size_t> sizes(n, block), displs(n);
    for (std::size_t i = 0; i < n; ++i)
        displs[i] = i * block;
    s->splice(scatterv_schedule(l, all, sizes, displs, recv, block, 0), true);
    return s;
}

std::unique_ptr<Schedule> inter_allgather_schedule(const CommInfo& c, const void* send, std::size_t send_block,
                                                   void* recv, std::size_t recv_block) {
    auto s = make_inter(c, "allgather");
    const CommInfo& l = local_of(c);
    const auto n = static_cast<std::size_t>(l.size);
    std::byte* mine = l.rank == 0 ? s->alloc(send_block * n) : nullptr;
    std::vector<std::size_t> sizes(n, send_block), displs(n);
    for (std::size_t i = 0; i < n; ++i)
        displs[i] = i * send_block;
    s->splice(gatherv_schedule(l, send, send_block, mine, sizes, displs, 0), true);
    const std::size_t theirs = recv_block * static_cast<std::size_t>(c.size);
    leaders_swap(*s, c, mine, send_block * n, recv, theirs);
    s->splice(bcast_schedule(l, recv, theirs, 0), true);
    return s;
}

std::unique_ptr<Schedule> inter_alltoall_schedule(const CommInfo& c, const void* send, std::size_t send_block,
                                                  void* recv, std::size_t recv_block) {
    const auto n = static_cast<std::size_t>(c.size);
    std::vector<std::size_t> send_sizes(n, send_block), send_displs(n), recv_sizes(n, recv_block), recv_displs(n);
    for (std::size_t i = 0; i < n; ++i) {
        send_displs[i] = i * send_block;
        recv_displs[i] = i * recv_block;
    }
    return inter_alltoallw_schedule(c, send, send_sizes, send_displs, recv, recv_sizes, recv_displs);
}

std::unique_ptr<Schedule> inter_gatherv_schedule(const CommInfo& c, const void* send, std::size_t send_bytes,
                                                 void* recv, const std::vector<std::size_t>& sizes,
                                                 const std::vector<std::size_t>& displs, int root) {
    auto s = make_inter(c, "gatherv");
    if (root == MPI_PROC_NULL) return s;
    s->next_round();
    if (root == MPI_ROOT) {
        for (int r = 0; r < c.size; ++r)
            s->recv(r, static_cast<std::byte*>(recv) + displs[static_cast<std::size_t>(r)],
                    sizes[static_cast<std::size_t>(r)]);
        return s;
    }
    check_remote_root(c, root);
    s->send(root, send, send_bytes);
    return s;
}

std::unique_ptr<Schedule> inter_scatterv_schedule(const CommInfo& c, const void* send,
                                                  const std::vector<std::size_t>& sizes,
                                                  const std::vector<std::size_t>& displs, void* recv,
                                                  std::size_t recv_bytes, int root) {
    auto s = make_inter(c, "scatterv");
    if (root == MPI_PROC_NULL) return s;
    s->next_round();
    if (root == MPI_ROOT) {
        for (int r = 0; r < c.size; ++r)
            s->send(r, static_cast<const std::byte*>(send) + displs[static_cast<std::size_t>(r)],
                    sizes[static_cast<std::size_t>(r)]);
        return s;
    }
    check_remote_root(c, root);
    s->recv(root, recv, recv_bytes);
    return s;
}

std::unique_ptr<Schedule> inter_allgatherv_schedule(const CommInfo& c, const void* send, std::size_t send_bytes,
                                                    void* recv, const std::vector<std::size_t>& sizes,
                                                    const std::vector<std::size_t>& displs) {
    auto s = make_inter(c, "allgatherv");
    s->next_round();
    for (int r = 0; r < c.size; ++r) {
        s->send(r, send, send_bytes);
        s->recv(r, static_cast<std::byte*>(recv) + displs[static_cast<std::size_t>(r)],
                sizes[static_cast<std::size_t>(r)]);
    }
    return s;
}

std::unique_ptr<Schedule> inter_alltoallw_schedule(const CommInfo& c, const void* send,
                                                   const std::vector<std::size_t>& send_sizes,
                                                   const std::vector<std::size_t>& send_displs, void* recv,
                                                   const std::vector<std::size_t>& recv_sizes,
                                                   const std::vector<std::size_t>& recv_displs) {
    auto s = make_inter(c, "alltoallw");
    s->next_round();
    for (int r = 0; r < c.size; ++r) {
        const auto i = static_cast<std::size_t>(r);
        s->send(r, static_cast<const std::byte*>(send) + send_displs[i], send_sizes[i]);
        s->recv(r, static_cast<std::byte*>(recv) + recv_displs[i], recv_sizes[i]);
    }
    return s;
}

} // namespace msgpass::mpi
