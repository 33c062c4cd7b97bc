// The blocking collectives of msgpass's MPI over its point-to-point transfers, with
// binomial trees rooted at the root (ranks renumbered relative to it): Bcast, Reduce,
// Gather and Scatter take ceil(log2 n) rounds; barrier (MPI_Finalize's) is a reduce of
// nothing then a bcast of nothing; the others are schedules (schedules.cpp). Their
// messages travel in the communicator's collective context, so no receive of the
// application can take them (docs/mpi.md).
#include "engine.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace msgpass::mpi {

namespace {

enum CollectiveTag : int { tag_barrier_in = 1, tag_barrier_out, tag_bcast, tag_reduce, tag_gather, tag_scatter };

// Reduce accumulates up to this many bytes in memory on the stack.
constexpr std::size_t small_reduce = 1024;

template <class T>
void combine_as(MPI_Op op, std::byte* inout, const std::byte* in, int count) {
    for (int i = 0; i < count; ++i) {
        T a;
        T b;
        std::memcpy(&a, inout + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        std::memcpy(&b, in + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        switch (op) {
        case MPI_SUM:
            a = static_cast<T>(a + b);
            break;
        case MPI_PROD:
            a = static_cast<T>(a * b);
            break;
        case MPI_MAX:
            a = b > a ? b : a;
            break;
        case MPI_MIN:
            a = b < a ? b : a;
            break;
        case MPI_LAND:
            a = static_cast<T>(a != T{} && b != T{});
            break;
        case MPI_LOR:
            a = static_cast<T>(a != T{} || b != T{});
            break;
        case MPI_LXOR:
            a = static_cast<T>((a != T{}) != (b != T{}));
            break;
        case MPI_BAND:
        case MPI_BOR:
        case MPI_BXOR:
            if constexpr (std::is_integral_v<T>) {
                a = static_cast<T>(op == MPI_BAND ? (a & b) : op == MPI_BOR ? (a | b) : (a ^ b));
                break;
            } else {
                throw MpiError(MPI_ERR_OP, "a bitwise operation on a floating-point type");
            }
        default:
            throw MpiError(MPI_ERR_OP, "invalid operation " + std::to_string(op));
        }
        std::memcpy(inout + static_cast<std::size_t>(i) * sizeof(T), &a, sizeof(T));
    }
}

// The element of a pair type: mpi.h's layout, the C struct {value; int index;}.
template <class T>
struct Pair {
    T value;
    int index;
};
static_assert(sizeof(Pair<int>) == (MPI_2INT & 0xff) && sizeof(Pair<float>) == (MPI_FLOAT_INT & 0xff) &&
                  sizeof(Pair<double>) == (MPI_DOUBLE_INT & 0xff) && sizeof(Pair<long>) == (MPI_LONG_INT & 0xff) &&
                  sizeof(Pair<short>) == (MPI_SHORT_INT & 0xff) &&
                  sizeof(Pair<long double>) == (MPI_LONG_DOUBLE_INT & 0xff),
              "mpi.h's pair types do not have this target's layout");

// complex: SUM and PROD only (check_op refuses the rest).
template <class T>
void combine_complex(MPI_Op op, std::byte* inout, const std::byte* in, int count) {
    for (int i = 0; i < count; ++i) {
        T a;
        T b;
        std::memcpy(&a, inout + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        std::memcpy(&b, in + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
        if (op == MPI_SUM)
            a += b;
        else if (op == MPI_PROD)
            a *= b;
        else
            throw MpiError(MPI_ERR_OP, "only MPI_SUM and MPI_PROD are defined on the complex types");
        std::memcpy(inout + static_cast<std::size_t>(i) * sizeof(T), &a, sizeof(T));
    }
}

static_assert(sizeof(long double) == (MPI_LONG_DOUBLE & 0xff) && sizeof(std::int8_t) == (MPI_INT8_T & 0xff) &&
                  sizeof(std::int16_t) == (MPI_INT16_T & 0xff) && sizeof(std::int32_t) == (MPI_INT32_T & 0xff) &&
                  sizeof(std::int64_t) == (MPI_INT64_T & 0xff) && sizeof(std::uint8_t) == (MPI_UINT8_T & 0xff) &&
                  sizeof(std::uint16_t) == (MPI_UINT16_T & 0xff) && sizeof(std::uint32_t) == (MPI_UINT32_T & 0xff) &&
                  sizeof(std::uint64_t) == (MPI_UINT64_T & 0xff) && sizeof(bool) == (MPI_C_BOOL & 0xff) &&
                  sizeof(wchar_t) == (MPI_WCHAR & 0xff) && sizeof(MPI_Aint) == (MPI_AINT & 0xff) &&
                  sizeof(MPI_Offset) == (MPI_OFFSET & 0xff) && sizeof(MPI_Count) == (MPI_COUNT & 0xff) &&
                  sizeof(std::complex<float>) == (MPI_C_FLOAT_COMPLEX & 0xff) &&
                  sizeof(std::complex<double>) == (MPI_C_DOUBLE_COMPLEX & 0xff) &&
                  sizeof(std::complex<long double>) == (MPI_C_LONG_DOUBLE_COMPLEX & 0xff),
              "mpi.h's fixed-size, bool, wchar, address and complex types do not have this target's sizes");

// MPI_MAXLOC / MPI_MINLOC: the larger (smaller) value with its index; on equal values
// the lower index (as the standard says, so the result does not depend on the order).
template <class T>
void combine_loc(MPI_Op op, std::byte* inout, const std::byte* in, int count) {
    if (op != MPI_MAXLOC && op != MPI_MINLOC)
        throw MpiError(MPI_ERR_OP, "only MPI_MAXLOC and MPI_MINLOC are defined on the pair types");
    for (int i = 0; i < count; ++i) {
        std::byte* at = inout + static_cast<std::size_t>(i) * sizeof(Pair<T>);
        const std::byte* from = in + static_cast<std::size_t>(i) * sizeof(Pair<T>);
        T a;
        T b;
        int ia = 0;
        int ib = 0;
        std::memcpy(&a, at + offsetof(Pair<T>, value), sizeof(T));
        std::memcpy(&b, from + offsetof(Pair<T>, value), sizeof(T));
        std::memcpy(&ia, at + offsetof(Pair<T>, index), sizeof(int));
        std::memcpy(&ib, from + offsetof(Pair<T>, index), sizeof(int));
        const bool better = op == MPI_MAXLOC ? b > a : b < a;
        if (better || (b == a && ib < ia)) {
            std::memcpy(at + offsetof(Pair<T>, value), &b, sizeof(T));
            std::memcpy(at + offsetof(Pair<T>, index), &ib, sizeof(int));
        }
    }
}

} // namespace

// inout[i] = inout[i] op in[i] for count elements of type.
void combine(MPI_Datatype type, MPI_Op op, std::byte* inout, const std::byte* in, int count, bool in_first) {
    if (is_user_op(op)) return combine_user(op, type, inout, in, count, in_first);
    if (const auto [base, n] = predefined_of(type); n != 1 || base != type) {
        const std::size_t elements = static_cast<std::size_t>(count) * n;
        if (elements > static_cast<std::size_t>(INT_MAX))
            throw MpiError(MPI_ERR_COUNT, "reduction beyond INT_MAX elements");
        return combine(base, op, inout, in, static_cast<int>(elements));
    }
    switch (type) {
    case MPI_CHAR:
    case MPI_SIGNED_CHAR:
        return combine_as<signed char>(op, inout, in, count);
    case MPI_UNSIGNED_CHAR:
    case MPI_BYTE:
        return combine_as<unsigned char>(op, inout, in, count);
    case MPI_SHORT:
        return combine_as<short>(op, inout, in, count);
    case MPI_UNSIGNED_SHORT:
        return combine_as<unsigned short>(op, inout, in, count);
    case MPI_INT:
        return combine_as<int>(op, inout, in, count);
    case MPI_UNSIGNED:
        return combine_as<unsigned>(op, inout, in, count);
    case MPI_LONG:
        return combine_as<long>(op, inout, in, count);
    case MPI_UNSIGNED_LONG:
        return combine_as<unsigned long>(op, inout, in, count);
    case MPI_LONG_LONG:
        return combine_as<long long>(op, inout, in, count);
    case MPI_UNSIGNED_LONG_LONG:
        return combine_as<unsigned long long>(op, inout, in, count);
    case MPI_FLOAT:
        return combine_as<float>(op, inout, in, count);
    case MPI_DOUBLE:
        return combine_as<double>(op, inout, in, count);
    case MPI_2INT:
        return combine_loc<int>(op, inout, in, count);
    case MPI_FLOAT_INT:
        return combine_loc<float>(op, inout, in, count);
    case MPI_DOUBLE_INT:
        return combine_loc<double>(op, inout, in, count);
    case MPI_LONG_INT:
        return combine_loc<long>(op, inout, in, count);
    case MPI_SHORT_INT:
        return combine_loc<short>(op, inout, in, count);
    case MPI_LONG_DOUBLE_INT:
        return combine_loc<long double>(op, inout, in, count);
    case MPI_LONG_DOUBLE:
        return combine_as<long double>(op, inout, in, count);
    case MPI_INT8_T:
        return combine_as<std::int8_t>(op, inout, in, count);
    case MPI_INT16_T:
        return combine_as<std::int16_t>(op, inout, in, count);
    case MPI_INT32_T:
        return combine_as<std::int32_t>(op, inout, in, count);
    case MPI_INT64_T:
        return combine_as<std::int64_t>(op, inout, in, count);
    case MPI_UINT8_T:
        return combine_as<std::uint8_t>(op, inout, in, count);
    case MPI_UINT16_T:
        return combine_as<std::uint16_t>(op, inout, in, count);
    case MPI_UINT32_T:
        return combine_as<std::uint32_t>(op, inout, in, count);
    case MPI_UINT64_T:
        return combine_as<std::uint64_t>(op, inout, in, count);
    case MPI_C_BOOL:
        return combine_as<bool>(op, inout, in, count);
    case MPI_WCHAR:
        return combine_as<wchar_t>(op, inout, in, count);
    case MPI_AINT:
        return combine_as<MPI_Aint>(op, inout, in, count);
    case MPI_OFFSET:
        return combine_as<MPI_Offset>(op, inout, in, count);
    case MPI_COUNT:
        return combine_as<MPI_Count>(op, inout, in, count);
    case MPI_C_FLOAT_COMPLEX:
        return combine_complex<std::complex<float>>(op, inout, in, count);
    case MPI_C_DOUBLE_COMPLEX:
        return combine_complex<std::complex<double>>(op, inout, in, count);
    case MPI_C_LONG_DOUBLE_COMPLEX:
        return combine_complex<std::complex<long double>>(op, inout, in, count);
    default:
        throw MpiError(MPI_ERR_TYPE, "invalid datatype " + std::to_string(type));
    }
}

namespace {

int relative(const CommInfo& c, int root) {
    return (c.rank - root + c.size) % c.size;
}

int absolute(const CommInfo& c, int vrank, int root) {
    return (vrank + root) % c.size;
}

void check_size(std::size_t got, std::size_t want, int from) {
    if (got != want)
        throw MpiError(MPI_ERR_TRUNCATE, "collective: rank " + std::to_string(from) + " sent " + std::to_string(got) +
                                             " bytes where " + std::to_string(want) +
                                             " were expected (the ranks' counts or types differ)");
}

void bcast_tagged(Engine& e, const CommInfo& c, void* buf, std::size_t bytes, int root, int tag) {
    if (c.size == 1) return;
    const int vr = relative(c, root);
    int mask = 1;
    while (mask < c.size) { // receive from the parent: vr without its lowest set bit
        if ((vr & mask) != 0) {
            const int parent = absolute(c, vr - mask, root);
            check_size(e.recv_bytes(c, parent, tag, buf, bytes), bytes, parent);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) // send to the children: vr + each lower bit
        if (vr + mask < c.size) e.send_bytes(c, absolute(c, vr + mask, root), tag, buf, bytes);
}

} // namespace

void bcast(Engine& e, const CommInfo& c, void* buf, std::size_t bytes, int root) {
    bcast_tagged(e, c, buf, bytes, root, tag_bcast);
}

void barrier(Engine& e, const CommInfo& c) {
    if (c.size == 1) return;
    const int vr = c.rank;
    for (int mask = 1; mask < c.size; mask <<= 1) { // fan in to rank 0
        if ((vr & mask) != 0) {
            e.send_bytes(c, vr - mask, tag_barrier_in, nullptr, 0);
            break;
        }
        if (vr + mask < c.size) check_size(e.recv_bytes(c, vr + mask, tag_barrier_in, nullptr, 0), 0, vr + mask);
    }
    bcast_tagged(e, c, nullptr, 0, 0, tag_barrier_out);
}

void barrier_now(Engine& e, const CommInfo& c, int tag) {
    for (int dist = 1; dist < c.size; dist <<= 1) { // dissemination, as barrier_schedule
        e.send_bytes(c, (c.rank + dist) % c.size, tag, nullptr, 0);
        check_size(e.recv_bytes(c, (c.rank - dist + c.size) % c.size, tag, nullptr, 0), 0,
                   (c.rank - dist + c.size) % c.size);
    }
}

void exchange_now(Engine& e, const CommInfo& c, int tag, int peer, const void* out, void* in, std::size_t bytes) {
    e.send_bytes(c, peer, tag, out, bytes);
    check_size(e.recv_bytes(c, peer, tag, in, bytes), bytes, peer);
}

void allreduce_now(Engine& e, const CommInfo& c, int tag, const void* send, void* recv, int count, MPI_Datatype type,
                   MPI_Op op) {
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    auto* acc = static_cast<std::byte*>(recv);
    if (bytes > 0 && send != recv) std::memcpy(acc, send, bytes);
    std::array<std::byte, allreduce_now_limit> in;  // (not zeroed: every byte read was received first)
    for (int mask = 1; mask < c.size; mask <<= 1) { // recursive doubling, as allreduce_schedule
        const int partner = c.rank ^ mask;
        e.send_bytes(c, partner, tag, acc, bytes);
        check_size(e.recv_bytes(c, partner, tag, in.data(), bytes), bytes, partner);
        combine(type, op, acc, in.data(), count, partner < c.rank);
    }
}

void reduce_scatter_now(Engine& e, const CommInfo& c, int tag, const void* send, void* recv, const int* counts,
                        MPI_Datatype type, MPI_Op op) {
    const std::size_t size = element_bytes(type);
    const auto n = static_cast<std::size_t>(c.size);
    // Kept from call to call: no allocation per call (the calling thread only,
    // Engine::can_recv_now excludes MPI_THREAD_MULTIPLE).
    static std::vector<std::size_t> at; // at[x]: the byte where rank x's block begins; at[n]: the total
    static std::vector<std::byte> scratch;
    at.resize(n + 1);
    at[0] = 0;
    for (std::size_t i = 0; i < n; ++i)
        at[i + 1] = at[i] + static_cast<std::size_t>(counts[i]) * size;
    const std::size_t total = at[n];
    if (scratch.size() < 2 * total) scratch.resize(2 * total);
    std::byte* acc = scratch.data();
    std::byte* in = acc + total;
    if (total > 0) std::memcpy(acc, send, total);
    const int r = c.rank;
    for (int mask = c.size / 2; mask >= 1; mask /= 2) { // as add_halving: each round halves what a rank holds
        const int partner = r ^ mask;
        const int lo = r & ~(2 * mask - 1);
        const auto keep = static_cast<std::size_t>((r & mask) != 0 ? lo + mask : lo);
        const auto give = static_cast<std::size_t>((r & mask) != 0 ? lo : lo + mask);
        const auto m = static_cast<std::size_t>(mask);
        e.send_bytes(c, partner, tag, acc + at[give], at[give + m] - at[give]);
        const std::size_t kept = at[keep + m] - at[keep];
        check_size(e.recv_bytes(c, partner, tag, in + at[keep], kept), kept, partner);
        combine(type, op, acc + at[keep], in + at[keep], static_cast<int>(kept / size));
    }
    const auto me = static_cast<std::size_t>(r);
    if (at[me + 1] > at[me]) std::memcpy(recv, acc + at[me], at[me + 1] - at[me]);
}

void reduce(Engine& e, const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
            int root) {
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    const int vr = relative(c, root);
    if ((vr & 1) != 0) { // a leaf: its own data, as it is, to its parent (no copy)
        e.send_bytes(c, absolute(c, vr - 1, root), tag_reduce, send, bytes);
        return;
    }
    // The root accumulates in recv itself (send is recv in place); another rank in
    // memory of its own. Up to small_reduce bytes on the stack: no allocation per call
    // for the small messages whose cost is the call's (osu_reduce at 8 bytes).
    std::array<std::byte, small_reduce> acc_small;
    std::array<std::byte, small_reduce> in_small;
    std::vector<std::byte> acc_large;
    std::vector<std::byte> in_large;
    std::byte* acc = nullptr;
    if (vr == 0) {
        acc = static_cast<std::byte*>(recv);
    } else if (bytes <= small_reduce) {
        acc = acc_small.data();
    } else {
        acc_large.resize(bytes);
        acc = acc_large.data();
    }
    if (bytes > 0 && acc != send) std::memcpy(acc, send, bytes);
    std::byte* in = in_small.data();
    if (bytes > small_reduce) {
        in_large.resize(bytes);
        in = in_large.data();
    }
    for (int mask = 1; mask < c.size; mask <<= 1) {
        if ((vr & mask) != 0) {
            e.send_bytes(c, absolute(c, vr - mask, root), tag_reduce, acc, bytes);
            return;
        }
        if (vr + mask < c.size) {
            const int child = absolute(c, vr + mask, root);
            check_size(e.recv_bytes(c, child, tag_reduce, in, bytes), bytes, child);
            combine(type, op, acc, in, count);
        }
    }
}

namespace {

// Whether the blocks of relative ranks [first, first + n) lie in rank order, one after
// another, in a buffer of the communicator's blocks (no wrap past the last rank).
bool in_rank_order(const CommInfo& c, int first, int n, int root) {
    return absolute(c, first, root) + n <= c.size;
}

} // namespace

// Each rank of the subtree of vr holds the blocks of vr .. vr+n-1 in relative order.
// A leaf sends its own block as it is, and the root receives each child's blocks
// straight into recv where they lie there in rank order: at two ranks no copy and no
// memory of its own (osu_gather at 8 bytes).
void gather(Engine& e, const CommInfo& c, const void* send, std::size_t block, void* recv, int root) {
    const int vr = relative(c, root);
    if ((vr & 1) != 0) {
        e.send_bytes(c, absolute(c, vr - 1, root), tag_gather, send, block);
        return;
    }
    auto* out = static_cast<std::byte*>(recv);
    if (vr == 0) {
        bool direct = true;
        for (int mask = 1; mask < c.size && direct; mask <<= 1)
            direct = in_rank_order(c, mask, std::min(mask, c.size - mask), root);
        if (direct) {
            for (int mask = 1; mask < c.size; mask <<= 1) {
                const int n = std::min(mask, c.size - mask);
                const int child = absolute(c, mask, root);
                std::byte* at = out + static_cast<std::size_t>(child) * block;
                const std::size_t want = static_cast<std::size_t>(n) * block;
                check_size(e.recv_bytes(c, child, tag_gather, at, want), want, child);
            }
            std::byte* own = out + static_cast<std::size_t>(root) * block;
            if (block > 0 && own != send) std::memcpy(own, send, block);
            return;
        }
    }
    std::vector<std::byte> held(block * static_cast<std::size_t>(c.size - vr));
    if (block > 0) std::memcpy(held.data(), send, block);
    std::size_t have = 1;
    for (int mask = 1; mask < c.size; mask <<= 1) {
        if ((vr & mask) != 0) {
            e.send_bytes(c, absolute(c, vr - mask, root), tag_gather, held.data(), have * block);
            return;
        }
        if (vr + mask < c.size) {
            const std::size_t n = static_cast<std::size_t>(std::min(mask, c.size - vr - mask));
            const int child = absolute(c, vr + mask, root);
            check_size(
                e.recv_bytes(c, child, tag_gather, held.data() + static_cast<std::size_t>(mask) * block, n * block),
                n * block, child);
            have = static_cast<std::size_t>(mask) + n;
        }
    }
    for (int v = 0; v < c.size && block > 0; ++v) // the root: relative order to rank order
        std::memcpy(out + static_cast<std::size_t>(absolute(c, v, root)) * block,
                    held.data() + static_cast<std::size_t>(v) * block, block);
}

// The reverse of gather: each rank receives the blocks of its subtree from its parent
// and hands its children theirs. recv nullptr: the root keeps its block in place. A
// leaf receives its block straight into recv, and the root sends each child's blocks
// straight from send where they lie there in rank order.
void scatter(Engine& e, const CommInfo& c, const void* send, std::size_t block, void* recv, int root) {
    const int vr = relative(c, root);
    if ((vr & 1) != 0) {
        const int parent = absolute(c, vr - 1, root);
        check_size(e.recv_bytes(c, parent, tag_scatter, recv, block), block, parent);
        return;
    }
    const auto* in = static_cast<const std::byte*>(send);
    if (vr == 0) {
        bool direct = true;
        for (int mask = 1; mask < c.size && direct; mask <<= 1)
            direct = in_rank_order(c, mask, std::min(mask, c.size - mask), root);
        if (direct) {
            int top = 1;
            while (top < c.size)
                top <<= 1;
            for (int mask = top >> 1; mask > 0; mask >>= 1) { // the order of the tree below
                const int n = std::min(mask, c.size - mask);
                const int child = absolute(c, mask, root);
                e.send_bytes(c, child, tag_scatter, in + static_cast<std::size_t>(child) * block,
                             static_cast<std::size_t>(n) * block);
            }
            if (recv != nullptr && block > 0) std::memcpy(recv, in + static_cast<std::size_t>(root) * block, block);
            return;
        }
    }
    const std::size_t mine = static_cast<std::size_t>(c.size - vr);
    std::vector<std::byte> held;
    int mask = 1;
    if (vr == 0) {
        held.resize(block * static_cast<std::size_t>(c.size));
        for (int v = 0; v < c.size && block > 0; ++v)
            std::memcpy(held.data() + static_cast<std::size_t>(v) * block,
                        in + static_cast<std::size_t>(absolute(c, v, root)) * block, block);
        while (mask < c.size)
            mask <<= 1;
    } else {
        mask = vr & -vr; // the lowest set bit: the subtree's span
        const std::size_t n = std::min(static_cast<std::size_t>(mask), mine);
        held.resize(n * block);
        const int parent = absolute(c, vr - mask, root);
        check_size(e.recv_bytes(c, parent, tag_scatter, held.data(), n * block), n * block, parent);
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (vr + mask >= c.size) continue;
        const std::size_t n = static_cast<std::size_t>(std::min(mask, c.size - vr - mask));
        e.send_bytes(c, absolute(c, vr + mask, root), tag_scatter, held.data() + static_cast<std::size_t>(mask) * block,
                     n * block);
    }
    if (recv != nullptr && block > 0) std::memcpy(recv, held.data(), block);
}

} // namespace msgpass::mpi
