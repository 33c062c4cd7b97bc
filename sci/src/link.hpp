// The link room of sci: what one peer's sender and receiver share. A Link maps one
// incarnation of the peer's segment; Grants is the window of our receive slots that
// the peer may write into (shared with the buffers received from it); Links holds
// the incarnations of the peer (which one is current, its loss and restart, the
// mappings it lets go of) and the state both sides of the peer use: the transport,
// the peer's parameters, our header at which the peer writes, the transfers with
// their error injection, the counters and the loss latch. docs/sci-protocol.md.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/sci/protocol.hpp>
#include <msgpass/stats.hpp>

#include "remote_memory.hpp"
#include "transport.hpp"
#include <msgpass/kit/fast_lock.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

// Parameters of one SCINode (the seed's SCINodePar).
struct NodeParameters {
    NodeId peer = 0;
    std::string name;
    std::size_t peer_index = 0; // header of the peer in our segment
    std::uint32_t peer_segment_id = 8;
    std::uint64_t max_message_size = 64 * config::MiB;
    std::chrono::nanoseconds peer_timeout{std::chrono::seconds(1)};
    std::uint32_t send_queue_limit = 65536;
    double inject_error_rate = 0.0;
    std::uint64_t inject_error_seed = 1;

    static NodeParameters from(const config::Configuration& configuration, const Transport& local, NodeId peer);
};

struct Grants;

// How the messages to and from one peer went (docs/sci-protocol.md, "Path
// counters"): for measurements (MSGPASS_SCI_PATHS prints them when the node ends)
// and for tests. Relaxed counters; each is written by the side that holds its lock
// (a load and a store, no locked instruction on the data path), or, for the rings,
// only when a doorbell is rung (a system call anyway).
struct PathCounters {
    // Send side (the send lock).
    std::atomic<std::uint64_t> alone{0};   // notes of a small message alone in its slot
    std::atomic<std::uint64_t> batches{0}; // notes of a batch of small messages
    std::atomic<std::uint64_t> batched{0}; // messages in those batches
    std::atomic<std::uint64_t> records{0}; // records of an open slot
    std::atomic<std::uint64_t> waits{0};   // sends of small messages that found no slot granted (the queue starts)
    // Receive side (the receive lock).
    std::atomic<std::uint64_t> empty{0}; // receive calls that found no note
    // Acks written into the peer's segment, by the receiving thread or a dropping one
    // (two threads at once may count one).
    std::atomic<std::uint64_t> acks{0};
    // Either side: doorbells of the peer rung (it had said it sleeps).
    std::atomic<std::uint64_t> rings{0};

    static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
        c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    static void ring(std::atomic<std::uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
};

// A mapping of the peer's segment (and, lazily, of its large region for us), one per
// incarnation of the peer. Links owns them and lets go of one when neither the send
// side, the receive side nor the current link is that one (Links::reclaim);
// a received buffer keeps its link mapped until it is dropped, since its drop may
// write a grant through it.
struct Link : std::enable_shared_from_this<Link> {
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
struct Grants {
    static constexpr std::uint32_t no_slot = 0xffffffffu;
    static constexpr std::uint32_t unused_slot = 0xfffffffeu;
    static constexpr std::uint32_t generation_mask = (1u << 24) - 1;

    Grants(std::shared_ptr<Transport> l, Header* h, double rate, std::uint64_t seed)
        : transport(std::move(l)), local_header(h), injector(rate, seed),
          sequence(injector.enabled() ? &injector : nullptr), salt255(salt_of(transport->epoch32()) % 255) {}

    std::shared_ptr<Transport> transport;
    Header* local_header; // where the peer writes to us (its status: whether it sleeps)
    ErrorInjector injector;
    Sequence sequence;
    std::array<std::atomic<std::uint64_t>, max_outstanding> index{};
    std::uint32_t generation = 0; // of the last introduction; receiver thread
    std::uint32_t salt255;        // of our epoch, mod 255: the grants' signatures cost no division
    // The peer's path counters (here, where the grants and the rings are written).
    mutable PathCounters paths;

    // Grants in batches (docs/sci-protocol.md, "Grants in batches"): a slot that the
    // receiving thread itself gives back while the peer's next note is already in
    // our header (the stream goes on: that thread's next receive call takes it) is
    // granted in the index word at once, but its ack is written into the peer's
    // segment only with the others, by a receive call of that thread
    // (Receiver::publish_deferred): when half the window waits so, or when the call
    // finds nothing to hand out. A stream whose receiver keeps up then moves the
    // line of the acks once per half window instead of once per message. Other
    // threads' drops write their ack at once, as before, and so does every drop
    // with no next note waiting, while the receiver takes marks (a group), with
    // fewer than 4 outstanding messages, or before the receiving thread's first call.
    std::array<std::atomic<std::uint8_t>, max_outstanding> deferred{}; // index i's ack waits; set by its giver
    std::atomic<std::uint32_t> deferred_count{0};                      // a hint: written by the receiving thread
    std::atomic<const void*> receiving_thread{nullptr};                // thread_tag() of the last receive call
    std::atomic<bool> batch_grants{false};                             // the receiver defers (no marks)
    // The note the receiver takes next: index << 8 | the signature of its round (0:
    // none known). Written by the receiver as it takes notes.
    std::atomic<std::uint32_t> next_note{0};
    [[nodiscard]] bool next_note_waits() const noexcept {
        const std::uint32_t n = next_note.load(std::memory_order_relaxed);
        return n != 0 && sig_of(load(local_header->index[n >> 8].note)) == (n & 0xff);
    }
    static const void* thread_tag() noexcept {
        static thread_local char tag;
        return &tag;
    }
    // How many acks a drop may leave waiting: half the window, none below 4.
    static std::uint32_t defer_limit(std::uint32_t k) noexcept { return k >= 4 ? k / 2 : 0; }

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
        PathCounters::bump(paths.acks); // not locked: drops of other threads at once may go uncounted
        sequence.write_word(&link.header->index[i].ack, make_ack(signature_mod(round, salt255), slot),
                            make_ack(signature_mod(round == 0 ? 254 : round - 1, salt255), slot));
    }
    // Grants slot to index i if it waits for one in this generation. defer: the ack
    // is left for publish_deferred (the receiving thread's drop).
    bool give(Link& link, std::uint32_t i, std::uint32_t slot, bool defer = false) {
        std::uint64_t w = index[i].load(std::memory_order_acquire);
        if (generation_of(w) != link.generation || slot_of(w) != no_slot) return false;
        if (!index[i].compare_exchange_strong(w, pack(link.generation, round_of(w), slot), std::memory_order_acq_rel,
                                              std::memory_order_acquire))
            return false;
        if (defer) {
            // Only the receiving thread sets these, and only lock holders clear them:
            // no read-modify-write (the index is frozen until its ack is written).
            deferred[i].store(1, std::memory_order_release);
            deferred_count.store(deferred_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        } else {
            write_ack(link, i, round_of(w), slot);
        }
        return true;
    }
    // Writes the acks the receiving thread's drops left waiting, in index order (the
    // receive lock held: lock holders are the only ones that clear a flag). An ack
    // of an index no longer granted in this generation is not written; one written
    // twice carries the same word. Whether any was written (the caller rings).
    bool publish_deferred(Link& link) {
        bool wrote = false;
        for (std::uint32_t i = 0; i < link.k; ++i) {
            if (deferred[i].load(std::memory_order_acquire) == 0) continue;
            deferred[i].store(0, std::memory_order_relaxed);
            const std::uint64_t w = index[i].load(std::memory_order_acquire);
            const std::uint32_t slot = slot_of(w);
            if (generation_of(w) != link.generation || slot == no_slot || slot == unused_slot) continue;
            write_ack(link, i, round_of(w), slot);
            wrote = true;
        }
        deferred_count.store(0, std::memory_order_relaxed);
        return wrote;
    }
    // After a note or a grant was written to the peer: rings its doorbell if it said
    // it sleeps. That word is in our own segment (the peer wrote it there), so no
    // remote memory is read. Either the peer's last poll sees what we wrote or we
    // see that it sleeps: our fence pairs with the one of the peer's announcement
    // (Transport::announce_sleep), or, when the peer makes process barriers and we
    // registered for them, its barrier stands for our fence, and a message costs
    // none (the store of the note then need not leave this core before we go on).
    void wake(Link& link) const {
        if (link.barrier) {
            std::atomic_signal_fence(std::memory_order_seq_cst);
        } else {
            std::atomic_thread_fence(std::memory_order_seq_cst);
        }
        if (asleep_of(load(local_header->status))) {
            PathCounters::ring(paths.rings);
            link.control->bell.wake();
        }
    }
    // After a note was written to the peer: when the peer receives from us through a
    // group (the marks bit of the status it wrote here), our ready mark in its control
    // block, then the peer's doorbell as wake rings it. The status is read after the
    // fence of wake, so that a peer that asked for marks meanwhile either is seen
    // asking or sees the note (SciGroup marks a new member itself after asking); it is
    // read again after the mark, a full barrier, so that a peer whose last poll before
    // its sleep missed the mark is seen asleep (docs/sci-protocol.md, "Ready marks").
    void notify(Link& link) const {
        if (link.barrier) {
            std::atomic_signal_fence(std::memory_order_seq_cst);
        } else {
            std::atomic_thread_fence(std::memory_order_seq_cst);
        }
        std::uint32_t status = load(local_header->status);
        if (marks_of(status)) {
            const std::size_t position = transport->parameters().self_index;
            std::atomic_ref<std::uint64_t>(link.control->ready[position / 64])
                .fetch_or(std::uint64_t{1} << (position % 64), std::memory_order_seq_cst);
            status = std::atomic_ref<std::uint32_t>(local_header->status).load(std::memory_order_seq_cst);
        }
        if (asleep_of(status)) {
            PathCounters::ring(paths.rings);
            link.control->bell.wake();
        }
    }
    // The last received buffer of slot is gone: the slot goes to the index its hold
    // names, or to the pool. The slot may be granted and filled again as soon as it
    // is offered, so its hold is emptied first. Any thread.
    void give_back(Link& link, std::uint32_t slot) {
        Transport::SlotHold& hold = transport->slot_hold(slot);
        const std::shared_ptr<void> keep = std::move(hold.owner); // the link, and through it this and the local node
        const std::uint32_t i = hold.index;
        if (!offer(link, i, slot)) transport->release_recv_slot(slot);
    }
    // Grants slot to the first index that waits for one, from index `first` on.
    // False when none does (the slot then goes back to the pool). Any thread.
    bool offer(Link& link, std::uint32_t first, std::uint32_t slot) {
        const bool defer = batch_grants.load(std::memory_order_relaxed) &&
                           receiving_thread.load(std::memory_order_relaxed) == thread_tag() &&
                           deferred_count.load(std::memory_order_relaxed) < defer_limit(link.k) && next_note_waits();
        std::uint32_t i = first;
        for (std::uint32_t k = 0; k < link.k; ++k) {
            if (i >= link.k) i = 0;
            if (give(link, i, slot, defer)) {
                if (!defer) wake(link);
                return true;
            }
            ++i;
        }
        return false;
    }
};

// What the link asks of the receive side of the same peer (the receiver implements
// it; the link never names it).
class ReceiveSide {
public:
    // Moves the receive side to link when it has none yet (the first incarnation is
    // introduced at once; a later one only when the receive side has taken every
    // message of the previous one). The link's lock held.
    virtual void adopt(Link& link) = 0;
    // Locks the receive side; in_use is then the link it uses (null when none).
    [[nodiscard]] virtual std::unique_lock<kit::FastLock> hold(const Link*& in_use) = 0;

protected:
    ~ReceiveSide() = default;
};

// The incarnations of one peer and what its sender and receiver share.
class Links {
public:
    Links(std::shared_ptr<Transport> transport_of_factory, NodeParameters parameters_of_peer);
    ~Links();
    Links(const Links&) = delete;
    Links& operator=(const Links&) = delete;

    // The receive side to introduce and to ask which link it uses; before current().
    void attach(ReceiveSide& receive_side) noexcept { receive_side_ = &receive_side; }
    // What the send side publishes for the checks and the loss report: messages sent
    // to this incarnation and messages queued (written under the send lock).
    void watch(const std::atomic<std::uint64_t>& sent, const std::atomic<std::size_t>& queue_depth) noexcept {
        sent_ = &sent;
        queue_depth_ = &queue_depth;
    }

    // The current link, connecting to the peer when there is none (at most every 2 ms);
    // null while the peer's segment is not there. Any thread.
    Link* current() {
        if (Link* link = link_.load(std::memory_order_acquire)) return link;
        return establish();
    }
    // The current link without connecting (null when there is none).
    [[nodiscard]] Link* current_if_any() const noexcept { return link_.load(std::memory_order_acquire); }
    // Declares the peer lost if its process is gone or restarted; at most every
    // peer_timeout / 4. Any thread, no lock held.
    void check_peer();
    void check_peer(Link* link); // a link the caller's send lock keeps
    void declare_lost(Link* link, const std::string& reason);
    void throw_if_lost();
    // Whether links of earlier incarnations wait to be let go of.
    [[nodiscard]] bool retired() const noexcept { return retired_.load(std::memory_order_relaxed); }
    // Lets go of the links of earlier incarnations that neither side uses any more
    // (their mappings and descriptors; a buffer still received through one keeps it
    // until dropped). send_side: the link of the send side, whose lock the caller holds.
    void reclaim(const Link* send_side);
    // The peer's broadcast region, mapped when first needed (normally when the link is
    // made); null when it cannot be mapped or the descriptor points outside it.
    std::byte* map_broadcast(Link& link, const LargeDescriptor& d);

    // The state both sides of the peer use (the sender and the receiver keep copies
    // of the pointers and references, as their own members of the same names).
    std::shared_ptr<Transport> transport;
    const NodeParameters parameters;
    Header* const local_header; // the peer writes here
    const std::uint32_t send_k; // outstanding messages towards the peer: our max_outst_buffers
    const std::shared_ptr<Grants> grants;
    Sequence& sequence; // grants->sequence: transfers to the peer, with their error injection
    StatsCounters stats;
    kit::LossLatch loss;

private:
    Link* establish();
    [[nodiscard]] bool check_due();
    void check_link(Link& link);
    // The peer's process of this link is gone and said it ended cleanly.
    [[nodiscard]] bool ended_cleanly(const Link& link) const;
    [[nodiscard]] std::uint64_t unacknowledged(const Link& link) const;

    ReceiveSide* receive_side_ = nullptr;
    const std::atomic<std::uint64_t>* sent_ = nullptr;
    const std::atomic<std::size_t>* queue_depth_ = nullptr;
    std::mutex link_mutex_; // order: the send lock -> link_mutex_ -> the receive lock
    std::atomic<Link*> link_{nullptr};
    std::vector<std::shared_ptr<Link>> links_; // every link not yet reclaimed; link_mutex_
    std::atomic<bool> retired_{false};         // links_ holds more than the current one
    std::atomic<std::uint32_t> dead_epoch_{0}; // the incarnation declared lost; read by checks without a lock
    std::chrono::steady_clock::time_point next_connect_{};
    std::atomic<std::int64_t> next_check_ns_{0};
};

} // namespace msgpass::sci
