// Private to sci/src: the pieces of an sci node that its source files share: the
// link to the peer's segment, the grants of our receive slots, the release count of
// large messages, the received buffers, and the word helpers.
#pragma once

#include "node.hpp"
#include <msgpass/kit/block_cache.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace msgpass::sci {

namespace {
using Clock = std::chrono::steady_clock;

// The clock of the peer checks (at most every peer_timeout / 4, looked at by every
// send that queues): CLOCK_MONOTONIC_COARSE, which the vDSO reads without the
// hardware clock. On this VM's kvm-clock steady_clock costs about 150 ns, more than
// a whole small message; the coarse one 15 ns, with a resolution of a few
// milliseconds.
inline std::int64_t coarse_now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline std::uint32_t load(const std::uint32_t& word) {
    return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(word)).load(std::memory_order_acquire);
}

inline void store(std::uint32_t& word, std::uint32_t value) {
    std::atomic_ref<std::uint32_t>(word).store(value, std::memory_order_release);
}

inline std::size_t round_up(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
}
} // namespace

// A mapping of the peer's segment (and, lazily, of its large region for us), one per
// incarnation of the peer. The node owns its links and lets go of one when neither
// its send side, its receive side nor the current link is that one (reclaim_links);
// a received buffer keeps its link mapped until it is dropped, since its drop may
// write a grant through it.
struct SciNode::Link : std::enable_shared_from_this<SciNode::Link> {
    explicit Link(std::shared_ptr<Grants> g) : grants(std::move(g)) {}
    std::shared_ptr<Grants> grants;
    RemoteSegment segment;
    ControlBlock* control = nullptr;
    Header* header = nullptr; // our header in the peer's segment
    std::byte* base = nullptr;
    std::uint32_t epoch32 = 0;
    std::uint32_t k = 1;           // outstanding messages the peer may have towards us: its max_outst_buffers
    std::uint32_t generation = 0;  // of the receive side's introduction to this link (Grants)
    std::uint64_t slot_offset = 0; // the geometry is read once, when connecting
    std::uint64_t slot_size = 0;
    std::uint32_t slot_count = 0;
    std::uint64_t max_message_size = 0;
    // The peer makes a process barrier when it announces a sleep, and this process
    // registered for them: a write to the peer needs no fence before the look at
    // whether it sleeps (Grants::wake).
    bool barrier = false;
    RemoteSegment large;
    std::byte* large_base = nullptr;
    std::uint64_t large_capacity = 0; // the largest message its large region takes
    // The peer's broadcast region (receiver side), shared with the buffers that
    // point into it so that they outlive the link.
    std::shared_ptr<RemoteSegment> broadcast;
    [[nodiscard]] std::byte* slot(std::uint32_t s) const {
        return base + slot_offset + static_cast<std::size_t>(s) * slot_size;
    }
};

// Counts the large buffers the application released, in the order the peer sent
// them, so that the receiver thread can tell the sender which part of the ring is
// free again. Buffers may be dropped in any order and by any thread; one dropped
// before an older one is remembered until the older one goes too.
struct SciNode::LargeRelease {
    std::shared_ptr<LocalNode> local;
    LocalSegment region; // where the peer writes large messages to us; lives as long as its buffers
    std::mutex mutex;
    std::uint64_t generation = 0;                  // one per introduction: buffers of an earlier one count for nothing
    std::uint64_t freed = 0;                       // messages released in order since the introduction
    std::array<bool, large_in_flight> early{};     // released ahead of an older one, by sequence mod large_in_flight
    std::atomic<std::uint64_t> freed_published{0}; // freed, for the receiver thread

    void release(std::uint64_t of_generation, std::uint64_t sequence) {
        std::lock_guard lock(mutex);
        if (of_generation != generation || sequence < freed || sequence - freed >= large_in_flight) return;
        early[sequence % large_in_flight] = true;
        while (early[freed % large_in_flight]) {
            early[freed % large_in_flight] = false;
            ++freed;
        }
        freed_published.store(freed, std::memory_order_release);
    }
    // A new introduction: numbering starts again at 0. Returns the new generation.
    std::uint64_t restart() {
        std::lock_guard lock(mutex);
        early.fill(false);
        freed = 0;
        freed_published.store(0, std::memory_order_release);
        return ++generation;
    }
};

// The grants of our receive slots to the peer (the ack words of our header at the
// peer), shared with the buffers received from it: a buffer that is dropped gives
// its slot back to the peer at once, from the dropping thread, when an index of its
// incarnation waits for one (seed, receive step 3), so that a sender waiting for an
// offset goes on while the receiver still works on earlier messages. The receiver
// thread grants from the pool on its next receive what no buffer gave back.
//
// Each index has one atomic word: generation:24 | round:8 | slot:32. generation
// names the receive side's introduction (a buffer of an earlier one never grants),
// round is that of the index's next grant (mod 255: the signature depends on no
// more), slot is the slot granted for it, no_slot while the index waits for one, or
// unused_slot beyond the peer's max_outst_buffers. The word goes from a slot to
// no_slot only in the receiver thread (a message taken), and from no_slot to a
// slot by a compare-exchange, so exactly one thread writes each grant.
struct SciNode::Grants {
    static constexpr std::uint32_t no_slot = 0xffffffffu;
    static constexpr std::uint32_t unused_slot = 0xfffffffeu;
    static constexpr std::uint32_t generation_mask = (1u << 24) - 1;

    Grants(std::shared_ptr<LocalNode> l, Header* h, double rate, std::uint64_t seed)
        : local(std::move(l)), local_header(h), injector(rate, seed),
          sequence(injector.enabled() ? &injector : nullptr), salt255(salt_of(local->epoch32()) % 255) {}

    std::shared_ptr<LocalNode> local;
    Header* local_header; // where the peer writes to us (its status: whether it sleeps)
    ErrorInjector injector;
    Sequence sequence;
    std::array<std::atomic<std::uint64_t>, max_outstanding> index{};
    std::uint32_t generation = 0; // of the last introduction; receiver thread
    std::uint32_t salt255;        // of our epoch, mod 255: the grants' signatures cost no division

    static std::uint64_t pack(std::uint32_t gen, std::uint32_t round, std::uint32_t slot) {
        return (std::uint64_t{gen & generation_mask} << 40) | (std::uint64_t{round} << 32) | slot;
    }
    static std::uint32_t generation_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 40); }
    static std::uint32_t round_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32) & 0xff; }
    static std::uint32_t slot_of(std::uint64_t w) { return static_cast<std::uint32_t>(w); }
    static std::uint32_t next_round(std::uint32_t round) { return next_round255(round); }

    // Writes the ack of index i. An injected error writes the word of the previous
    // round first (a repeated grant), which the sender does not take.
    void write_ack(Link& link, std::uint32_t i, std::uint32_t round, std::uint32_t slot) {
        sequence.write_word(&link.header->index[i].ack, make_ack(signature_mod(round, salt255), slot),
                            make_ack(signature_mod(round == 0 ? 254 : round - 1, salt255), slot));
    }
    // Grants slot to index i if it waits for one in this generation.
    bool give(Link& link, std::uint32_t i, std::uint32_t slot) {
        std::uint64_t w = index[i].load(std::memory_order_acquire);
        if (generation_of(w) != link.generation || slot_of(w) != no_slot) return false;
        if (!index[i].compare_exchange_strong(w, pack(link.generation, round_of(w), slot), std::memory_order_acq_rel,
                                              std::memory_order_acquire))
            return false;
        write_ack(link, i, round_of(w), slot);
        return true;
    }
    // After a note or a grant was written to the peer: rings its doorbell if it said
    // it sleeps. That word is in our own segment (the peer wrote it there), so no
    // remote memory is read. Either the peer's last poll sees what we wrote or we
    // see that it sleeps: our fence pairs with the one of the peer's announcement
    // (LocalNode::announce_sleep), or, when the peer makes process barriers and we
    // registered for them, its barrier stands for our fence, and a message costs
    // none (the store of the note then need not leave this core before we go on).
    void wake(Link& link) const {
        if (link.barrier) {
            std::atomic_signal_fence(std::memory_order_seq_cst);
        } else {
            std::atomic_thread_fence(std::memory_order_seq_cst);
        }
        if (asleep_of(load(local_header->status))) link.control->bell.wake();
    }
    // The last received buffer of slot is gone: the slot goes to the index its hold
    // names, or to the pool. The slot may be granted and filled again as soon as it
    // is offered, so its hold is emptied first. Any thread.
    void give_back(Link& link, std::uint32_t slot) {
        LocalNode::SlotHold& hold = local->slot_hold(slot);
        const std::shared_ptr<void> keep = std::move(hold.owner); // the link, and through it this and the local node
        const std::uint32_t i = hold.index;
        if (!offer(link, i, slot)) local->release_recv_slot(slot);
    }
    // Grants slot to the first index that waits for one, from index `first` on.
    // False when none does (the slot then goes back to the pool). Any thread.
    bool offer(Link& link, std::uint32_t first, std::uint32_t slot) {
        std::uint32_t i = first;
        for (std::uint32_t k = 0; k < link.k; ++k) {
            if (i >= link.k) i = 0;
            if (give(link, i, slot)) {
                wake(link);
                return true;
            }
            ++i;
        }
        return false;
    }
};

// SCIRecvBuffer: a received message in a receive slot of the local segment, alone
// or one of a batch that shares the slot. When the last buffer of a slot is
// dropped, the slot is granted to the sender again (or returns to the pool). The
// objects come from a per-thread cache of blocks, not from the heap, and hold no
// reference of their own: the slot's hold (LocalNode::SlotHold) keeps the link.
class SciNode::RecvBuffer final : public SingleBuffer {
public:
    using Cache = kit::BlockCache<64>;
    // shared: other buffers point into the same slot (hold.refs counts them all).
    RecvBuffer(Link& link, std::uint32_t slot, std::byte* data, std::size_t size, bool shared) noexcept
        : SingleBuffer(data, size, size), link_(&link), slot_(slot), shared_(shared) {}
    ~RecvBuffer() override {
        if (shared_ && link_->grants->local->slot_hold(slot_).refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        link_->grants->give_back(*link_, slot_);
    }
    static void* operator new(std::size_t n) { return n <= Cache::block_size ? Cache::get() : ::operator new(n); }
    static void operator delete(void* p, std::size_t n) noexcept {
        if (n <= Cache::block_size) {
            Cache::put(p);
        } else {
            ::operator delete(p);
        }
    }

private:
    Link* link_; // kept by the slot's hold
    std::uint32_t slot_;
    bool shared_;
};

// Takes back a view lent from a batch (SciNode::receive_view): as the drop of a
// RecvBuffer of that batch, without the object. context is the link (kept by the
// slot's hold), token the slot.
class SciNode::SlotLender final : public MessageView::Lender {
public:
    void give_back(void* context, std::uint64_t token) noexcept override {
        auto& link = *static_cast<Link*>(context);
        const auto slot = static_cast<std::uint32_t>(token);
        if (link.grants->local->slot_hold(slot).refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        link.grants->give_back(link, slot);
    }
};

// A received large message in the local large region of one sender.
class SciNode::LargeRecvBuffer final : public SingleBuffer {
public:
    LargeRecvBuffer(std::shared_ptr<LargeRelease> release, std::uint64_t generation, std::uint64_t sequence,
                    std::byte* data, std::size_t size, std::shared_ptr<RemoteSegment> mapping)
        : SingleBuffer(data, size, size), release_(std::move(release)), generation_(generation), sequence_(sequence),
          mapping_(std::move(mapping)) {}
    ~LargeRecvBuffer() override {
        release_->release(generation_, sequence_);
        release_->local->bell().ring(); // the receiver thread publishes the release
    }

private:
    std::shared_ptr<LargeRelease> release_;
    std::uint64_t generation_;
    std::uint64_t sequence_;
    std::shared_ptr<RemoteSegment> mapping_; // the sender's broadcast region, or null
};

} // namespace msgpass::sci
