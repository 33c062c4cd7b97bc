// The collectives of msgpass's MPI as schedules of rounds of point-to-point transfers
// (engine.hpp, Schedule), run by the engine's progress: the non-blocking collectives
// return the request of one, the blocking ones of this file run one to completion.
// Algorithms: binomial trees for bcast and reduce, dissemination for barrier,
// recursive doubling for allreduce (with the fold of the ranks beyond the largest
// power of two; for large vectors in a power-of-two world a reduce-scatter by
// recursive halving then an allgather by recursive doubling) and for scan, a ring
// for allgather(v), all transfers at once (small worlds or blocks) or pairwise
// exchange for alltoall(v,w), linear for the v-variants of gather and scatter;
// reduce_scatter is recursive halving in a power-of-two world, else a reduce then a
// scatterv (docs/mpi.md).
#include "engine.hpp"

#include <algorithm>
#include <numeric>

namespace msgpass::mpi {

namespace {

int relative(const CommInfo& c, int rank, int root) {
    return (rank - root + c.size) % c.size;
}

int absolute(const CommInfo& c, int vrank, int root) {
    return (vrank + root) % c.size;
}

std::unique_ptr<Schedule> make(const CommInfo& c, const char* name) {
    auto s = std::make_unique<Schedule>();
    s->comm = c;
    s->name = name;
    return s;
}

std::size_t type_bytes(MPI_Datatype type) {
    return element_bytes(type);
}

// Binomial tree from root: the parent is vr without its lowest set bit, the
// children vr + each lower power of two.
void add_bcast(Schedule& s, void* buf, std::size_t bytes, int root) {
    const CommInfo& c = s.comm;
    if (c.size == 1) return;
    const int vr = relative(c, c.rank, root);
    int mask = 1;
    while (mask < c.size && (vr & mask) == 0)
        mask <<= 1;
    if (vr != 0) {
        s.next_round();
        s.recv(absolute(c, vr - mask, root), buf, bytes);
    }
    s.next_round();
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < c.size) s.send(absolute(c, vr + mask, root), buf, bytes);
}

// Binomial tree to root: the children's partial results come in together, are
// combined, and the sum of the subtree goes to the parent. At the root the result
// lands in recv; elsewhere recv is not touched.
void add_reduce(Schedule& s, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, int root) {
    const CommInfo& c = s.comm;
    const std::size_t bytes = static_cast<std::size_t>(count) * type_bytes(type);
    const int vr = relative(c, c.rank, root);
    std::vector<int> children;
    int parent = -1;
    for (int mask = 1; mask < c.size; mask <<= 1) {
        if ((vr & mask) != 0) {
            parent = absolute(c, vr - mask, root);
            break;
        }
        if (vr + mask < c.size) children.push_back(absolute(c, vr + mask, root));
    }
    if (children.empty()) { // a leaf sends its own data
        s.next_round();
        if (parent >= 0)
            s.send(parent, send, bytes);
        else
            s.copy(recv, send, bytes); // a world of one
        return;
    }
    std::byte* acc = vr == 0 ? static_cast<std::byte*>(recv) : s.alloc(bytes);
    s.next_round();
    s.copy(acc, send, bytes); // at the call: send may be recv (MPI_IN_PLACE)
    std::vector<std::byte*> in;
    for (int child : children) {
        in.push_back(s.alloc(bytes));
        s.recv(child, in.back(), bytes);
    }
    s.next_round();
    for (std::byte* block : in)
        s.reduce(acc, block, count, type, op);
    if (parent >= 0) s.send(parent, acc, bytes);
}

// Root's blocks at displs go to each rank; own receives the root's (unless nullptr).
void add_scatterv(Schedule& s, const void* send, const std::vector<std::size_t>& sizes,
                  const std::vector<std::size_t>& displs, void* own, std::size_t own_bytes, int root) {
    const CommInfo& c = s.comm;
    s.next_round();
    const auto* base = static_cast<const std::byte*>(send);
    if (c.rank == root) {
        for (int k = 1; k < c.size; ++k) {
            const int i = (root + k) % c.size;
            s.send(i, base + displs[static_cast<std::size_t>(i)], sizes[static_cast<std::size_t>(i)]);
        }
        if (own != nullptr)
            s.copy(own, base + displs[static_cast<std::size_t>(root)], sizes[static_cast<std::size_t>(root)]);
    } else {
        s.recv(root, own, own_bytes);
    }
}

// Recursive halving over a power-of-two world (reduce-scatter): rank r's block is
// elements [first[r], first[r] + count[r]) of acc, every block in rank order. In the
// round of mask m the group of 2m ranks around r splits in two halves; r sends the
// partner the half of the blocks it gives up and reduces the half it keeps with the
// partner's copy (in tmp, laid out as acc). Afterwards acc holds r's block reduced
// over every rank; the rest of acc is partial.
void add_halving(Schedule& s, std::byte* acc, std::byte* tmp, const std::vector<std::size_t>& first,
                 const std::vector<std::size_t>& count, std::size_t size, MPI_Datatype type, MPI_Op op) {
    const int r = s.comm.rank;
    auto begin = [&](int x) { return first[static_cast<std::size_t>(x)] * size; };
    auto end = [&](int x, int m) {
        const auto last = static_cast<std::size_t>(x + m - 1);
        return (first[last] + count[last]) * size;
    };
    for (int mask = s.comm.size / 2; mask >= 1; mask /= 2) {
        const int partner = r ^ mask;
        const int lo = r & ~(2 * mask - 1);
        const int keep = (r & mask) != 0 ? lo + mask : lo;
        const int give = (r & mask) != 0 ? lo : lo + mask;
        s.send(partner, acc + begin(give), end(give, mask) - begin(give));
        s.recv(partner, tmp + begin(keep), end(keep, mask) - begin(keep));
        s.next_round();
        s.reduce(acc + begin(keep), tmp + begin(keep), static_cast<int>((end(keep, mask) - begin(keep)) / size), type,
                 op);
    }
}

bool power_of_two(int n) {
    return n > 0 && (n & (n - 1)) == 0;
}

} // namespace

std::unique_ptr<Schedule> barrier_schedule(const CommInfo& c) {
    auto s = make(c, "barrier");
    for (int dist = 1; dist < c.size; dist <<= 1) { // dissemination: ceil(log2 n) rounds
        s->next_round();
        s->send((c.rank + dist) % c.size, nullptr, 0);
        s->recv((c.rank - dist + c.size) % c.size, nullptr, 0);
    }
    return s;
}

std::unique_ptr<Schedule> bcast_schedule(const CommInfo& c, void* buf, std::size_t bytes, int root) {
    auto s = make(c, "bcast");
    add_bcast(*s, buf, bytes, root);
    return s;
}

std::unique_ptr<Schedule> reduce_schedule(const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type,
                                          MPI_Op op, int root) {
    auto s = make(c, "reduce");
    if (root == 0 || is_commutative(op)) {
        add_reduce(*s, send, recv, count, type, op, root);
        return s;
    }
    // The tree combines in rank order from rank 0 only: there, then to the root.
    const std::size_t bytes = static_cast<std::size_t>(count) * type_bytes(type);
    std::byte* at0 = c.rank == 0 ? s->alloc(bytes) : nullptr;
    add_reduce(*s, send, at0, count, type, op, 0);
    s->next_round();
    if (c.rank == 0) s->send(root, at0, bytes);
    if (c.rank == root) s->recv(0, recv, bytes);
    return s;
}

std::unique_ptr<Schedule> allreduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                             MPI_Datatype type, MPI_Op op) {
    auto s = make(c, "allreduce");
    const std::size_t bytes = static_cast<std::size_t>(count) * type_bytes(type);
    auto* acc = static_cast<std::byte*>(recv);
    s->next_round();
    s->copy(acc, send, bytes);
    if (c.size == 1) return s;
    if (power_of_two(c.size) && count >= c.size && bytes >= 2048 && is_commutative(op)) {
        // Large vectors (Rabenseifner): a reduce-scatter by recursive halving, then an
        // allgather by recursive doubling; each rank reduces 1/n of the vector and
        // sends about twice the vector in all, whatever n.
        const auto n = static_cast<std::size_t>(c.size);
        std::vector<std::size_t> first(n), counts(n);
        for (std::size_t i = 0, at = 0; i < n; ++i) {
            counts[i] = static_cast<std::size_t>(count) / n + (i < static_cast<std::size_t>(count) % n ? 1 : 0);
            first[i] = at;
            at += counts[i];
        }
        const std::size_t size = type_bytes(type);
        add_halving(*s, acc, s->alloc(bytes), first, counts, size, type, op);
        for (int mask = 1; mask < c.size; mask *= 2) {
            const int partner = c.rank ^ mask;
            const auto mine = static_cast<std::size_t>(c.rank & ~(mask - 1));
            const auto theirs = static_cast<std::size_t>(partner & ~(mask - 1));
            const auto m = static_cast<std::size_t>(mask);
            s->send(partner, acc + first[mine] * size,
                    (first[mine + m - 1] + counts[mine + m - 1] - first[mine]) * size);
            s->recv(partner, acc + first[theirs] * size,
                    (first[theirs + m - 1] + counts[theirs + m - 1] - first[theirs]) * size);
            s->next_round();
        }
        return s;
    }
    std::byte* in = s->alloc(bytes);
    // Recursive doubling over the largest power of two pof2 <= n; of the first
    // 2 * (n - pof2) ranks the even ones hand their data to the next odd one first
    // and get the result from it at the end.
    int pof2 = 1;
    while (pof2 * 2 <= c.size)
        pof2 *= 2;
    const int rem = c.size - pof2;
    int newrank = c.rank - rem;
    if (c.rank < 2 * rem) {
        if (c.rank % 2 == 0) {
            s->send(c.rank + 1, acc, bytes);
            newrank = -1;
        } else {
            s->recv(c.rank - 1, in, bytes);
            s->next_round();
            s->reduce(acc, in, count, type, op, true);
            newrank = c.rank / 2;
        }
    }
    if (newrank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1) {
            const int newpartner = newrank ^ mask;
            const int partner = newpartner < rem ? newpartner * 2 + 1 : newpartner + rem;
            s->send(partner, acc, bytes);
            s->recv(partner, in, bytes);
            s->next_round();
            s->reduce(acc, in, count, type, op, partner < c.rank);
        }
    }
    if (c.rank < 2 * rem) {
        s->next_round();
        if (c.rank % 2 == 0)
            s->recv(c.rank + 1, acc, bytes);
        else
            s->send(c.rank - 1, acc, bytes);
    }
    return s;
}

std::unique_ptr<Schedule> gatherv_schedule(const CommInfo& c, const void* own, std::size_t own_bytes, void* recv,
                                           const std::vector<std::size_t>& sizes,
                                           const std::vector<std::size_t>& displs, int root) {
    auto s = make(c, "gatherv");
    s->next_round();
    auto* base = static_cast<std::byte*>(recv);
    if (c.rank == root) {
        for (int k = 1; k < c.size; ++k) {
            const int i = (root + k) % c.size;
            s->recv(i, base + displs[static_cast<std::size_t>(i)], sizes[static_cast<std::size_t>(i)]);
        }
        if (own != nullptr)
            s->copy(base + displs[static_cast<std::size_t>(root)], own, sizes[static_cast<std::size_t>(root)]);
    } else {
        s->send(root, own, own_bytes);
    }
    return s;
}

std::unique_ptr<Schedule> scatterv_schedule(const CommInfo& c, const void* send, const std::vector<std::size_t>& sizes,
                                            const std::vector<std::size_t>& displs, void* own, std::size_t own_bytes,
                                            int root) {
    auto s = make(c, "scatterv");
    add_scatterv(*s, send, sizes, displs, own, own_bytes, root);
    return s;
}

std::unique_ptr<Schedule> allgatherv_schedule(const CommInfo& c, const void* own, void* recv,
                                              const std::vector<std::size_t>& sizes,
                                              const std::vector<std::size_t>& displs) {
    auto s = make(c, "allgatherv");
    auto* base = static_cast<std::byte*>(recv);
    auto block = [&](int i) { return base + displs[static_cast<std::size_t>((i + c.size) % c.size)]; };
    auto size = [&](int i) { return sizes[static_cast<std::size_t>((i + c.size) % c.size)]; };
    s->next_round();
    if (own != nullptr) s->copy(block(c.rank), own, size(c.rank));
    // A ring: in round k each rank passes on to its right the block it got in round
    // k - 1 (its own first) and gets the next one from its left.
    const int right = (c.rank + 1) % c.size;
    const int left = (c.rank - 1 + c.size) % c.size;
    for (int k = 0; k < c.size - 1; ++k) {
        if (k > 0) s->next_round();
        s->send(right, block(c.rank - k), size(c.rank - k));
        s->recv(left, block(c.rank - k - 1), size(c.rank - k - 1));
    }
    return s;
}

std::unique_ptr<Schedule> alltoallw_schedule(const CommInfo& c, const void* send,
                                             const std::vector<std::size_t>& send_sizes,
                                             const std::vector<std::size_t>& send_displs, void* recv,
                                             const std::vector<std::size_t>& recv_sizes,
                                             const std::vector<std::size_t>& recv_displs) {
    auto s = make(c, "alltoall");
    const auto n = static_cast<std::size_t>(c.size);
    const auto me = static_cast<std::size_t>(c.rank);
    auto* rbase = static_cast<std::byte*>(recv);
    std::vector<const std::byte*> out(n);
    s->next_round();
    if (send == nullptr) { // MPI_IN_PLACE: what goes out is copied away first
        for (std::size_t i = 0; i < n; ++i) {
            if (i == me) continue;
            std::byte* copy = s->alloc(recv_sizes[i]);
            s->copy(copy, rbase + recv_displs[i], recv_sizes[i]);
            out[i] = copy;
        }
    } else {
        const auto* sbase = static_cast<const std::byte*>(send);
        for (std::size_t i = 0; i < n; ++i)
            out[i] = sbase + send_displs[i];
        if (send_sizes[me] != recv_sizes[me])
            throw MpiError(MPI_ERR_TRUNCATE, "this rank's own block is " + std::to_string(send_sizes[me]) +
                                                 " bytes to send and " + std::to_string(recv_sizes[me]) +
                                                 " bytes to receive");
        s->copy(rbase + recv_displs[me], out[me], recv_sizes[me]);
    }
    const std::size_t largest = std::max(*std::max_element(send_sizes.begin(), send_sizes.end()),
                                         *std::max_element(recv_sizes.begin(), recv_sizes.end()));
    // Everything at once in small worlds or for small blocks; else pairwise rounds, so
    // that a rank has one peer's block in flight each way.
    const bool at_once = c.size <= 8 || largest <= 8192;
    const auto& out_sizes = send == nullptr ? recv_sizes : send_sizes;
    for (int k = 1; k < c.size; ++k) {
        const auto to = static_cast<std::size_t>((c.rank + k) % c.size);
        const auto from = static_cast<std::size_t>((c.rank - k + c.size) % c.size);
        if (!at_once && k > 1) s->next_round();
        s->recv(static_cast<int>(from), rbase + recv_displs[from], recv_sizes[from]);
        s->send(static_cast<int>(to), out[to], out_sizes[to]);
    }
    return s;
}

std::unique_ptr<Schedule> reduce_scatter_schedule(const CommInfo& c, const void* send, void* recv,
                                                  const std::vector<int>& counts, MPI_Datatype type, MPI_Op op) {
    auto s = make(c, "reduce_scatter");
    const std::size_t size = type_bytes(type);
    std::vector<std::size_t> sizes(counts.size());
    std::vector<std::size_t> displs(counts.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        sizes[i] = static_cast<std::size_t>(counts[i]) * size;
        displs[i] = total;
        total += sizes[i];
    }
    const void* in = send != nullptr ? send : recv;
    if (power_of_two(c.size) && c.size > 1 && is_commutative(op)) { // recursive halving, each keeping its block
        std::vector<std::size_t> first(counts.size()), elements(counts.size());
        for (std::size_t i = 0; i < counts.size(); ++i) {
            first[i] = displs[i] / size;
            elements[i] = static_cast<std::size_t>(counts[i]);
        }
        std::byte* acc = s->alloc(total);
        s->next_round();
        s->copy(acc, in, total);
        add_halving(*s, acc, s->alloc(total), first, elements, size, type, op);
        const auto me = static_cast<std::size_t>(c.rank);
        s->next_round();
        s->copy(recv, acc + displs[me], sizes[me]);
        return s;
    }
    const int all = static_cast<int>(total / size);
    std::byte* full = c.rank == 0 ? s->alloc(total) : nullptr;
    add_reduce(*s, in, full, all, type, op, 0);
    add_scatterv(*s, full, sizes, displs, recv, sizes[static_cast<std::size_t>(c.rank)], 0);
    return s;
}

std::unique_ptr<Schedule> scan_schedule(const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type,
                                        MPI_Op op, bool exclusive) {
    auto s = make(c, exclusive ? "exscan" : "scan");
    const std::size_t bytes = static_cast<std::size_t>(count) * type_bytes(type);
    std::byte* partial = s->alloc(bytes); // the reduction of the ranks this one heard of
    std::byte* in = s->alloc(bytes);
    s->next_round();
    s->copy(partial, send, bytes);
    if (!exclusive) s->copy(recv, send, bytes);
    bool have = !exclusive; // recv holds a result yet
    for (int mask = 1; mask < c.size; mask <<= 1) {
        const int partner = c.rank ^ mask;
        if (partner >= c.size) continue;
        s->send(partner, partial, bytes);
        s->recv(partner, in, bytes);
        s->next_round();
        if (partner < c.rank) {
            if (have)
                s->reduce(recv, in, count, type, op, true);
            else
                s->copy(recv, in, bytes);
            have = true;
        }
        s->reduce(partial, in, count, type, op, partner < c.rank);
    }
    return s;
}

} // namespace msgpass::mpi
