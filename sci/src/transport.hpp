// The transport room of sci, the seed's SCILocalNode (section 4): the factory-wide
// engine, one per factory. It owns the local segment (control block, header area, receive
// slots), hands out the local header reserved for each remote node, the receive
// slots (a pool shared by all peers) and the send buffers (a pre-allocated pool or
// the heap, per use_send_pool), each with its release, the broadcast region, the
// wait, and the kit's progress driver of the factory's nodes (it never calls a node).
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/config.hpp>
#include <msgpass/kit/pool.hpp>
#include <msgpass/kit/progress.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>
#include <msgpass/wait.hpp>

#include "remote_memory.hpp"
#include "send_pool.hpp"
#include "yield_gauge.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace msgpass::sci {

// Parameters of the local node (the seed's SCILocalNodePar), checked for
// consistency at construction.
struct TransportParameters {
    NodeId self = 0;
    std::size_t self_index = 0; // position of self in the nodes file
    std::size_t node_count = 0; // nodes in the nodes file
    // The nodes that reach this one by sci (all the others, or under auto those of
    // its machine), and the receive slots reserved for them: the sum of their
    // max_outst_buffers (a receiver grants each sender as many slots as its value).
    std::uint64_t partners = 0;
    std::uint64_t peer_outstanding = 0;
    Options sci; // the SCI context of this node
    std::uint64_t max_message_size = 64 * config::MiB;
    std::string partition;
    // The SCI node id of every node's machine (none without one), for segment names.
    std::map<NodeId, std::optional<std::uint32_t>> sci_node_ids;

    static TransportParameters from(const config::Configuration& configuration, NodeId self);
};

class Transport : public std::enable_shared_from_this<Transport> {
public:
    // Creates and maps the local segment and publishes it (epoch last). Throws
    // ConfigError for inconsistent parameters, ResourceError when the segment
    // cannot be made (another live process has this node id, no memory).
    explicit Transport(TransportParameters parameters);
    ~Transport();

    [[nodiscard]] const TransportParameters& parameters() const noexcept { return parameters_; }
    [[nodiscard]] const VirtualDevice& device() const noexcept { return device_; }
    [[nodiscard]] ControlBlock& control() const noexcept { return *control_; }
    [[nodiscard]] Doorbell& bell() const noexcept { return control_->bell; }
    [[nodiscard]] std::uint32_t epoch32() const noexcept { return static_cast<std::uint32_t>(control_->epoch); }

    // The ready marks of our control block (protocol.hpp): mark_ready sets the mark of
    // the node at a position of the nodes file, for work a later receive from it must
    // do (any thread); take_ready clears the marks of mask in word w and returns those
    // that were set (the receiving thread), with the messages published before them.
    void mark_ready(std::size_t position) noexcept {
        std::atomic_ref<std::uint64_t>(control_->ready[position / 64])
            .fetch_or(std::uint64_t{1} << (position % 64), std::memory_order_seq_cst);
    }
    std::uint64_t take_ready(std::size_t w, std::uint64_t mask) noexcept {
        std::atomic_ref<std::uint64_t> word(control_->ready[w]);
        if ((word.load(std::memory_order_relaxed) & mask) == 0) return 0; // no write to a line senders write
        return word.fetch_and(~mask, std::memory_order_acq_rel) & mask;
    }
    // Whether this process makes a process barrier when it announces a sleep (the
    // partners then write their notes without a fence).
    [[nodiscard]] bool makes_barriers() const noexcept { return barrier_; }

    // The header where the node at position index writes to us. Each index is
    // handed out once until released (exclusive access). Throws UsageError.
    Header* allocate_local_header(std::size_t index);
    void release_local_header(std::size_t index) noexcept;

    // A free receive slot, or nullopt when all are in use. Any thread; no lock (the
    // pool is a lock-free stack: a receive takes a slot and a dropped buffer gives
    // one back on every round trip of a ping-pong). A slot's pages are taken from
    // /dev/shm when it is first handed out (the pool hands out the lowest slots
    // first, so the slots that ever held a message are those below the most ever
    // out at once, which follows the peers that talk to this node, not the nodes of
    // the file). nullopt too when they cannot be taken: slot_pages_error() says why.
    std::optional<std::uint32_t> allocate_recv_slot() noexcept;
    // Why the pages of a slot could not be taken from /dev/shm (empty: they could).
    [[nodiscard]] std::string slot_pages_error() const;
    // Returns a slot to the pool. Any thread; no lock.
    void release_recv_slot(std::uint32_t slot) noexcept;
    [[nodiscard]] std::byte* slot_address(std::uint32_t slot) const noexcept {
        return base_ + control_->slot_offset + static_cast<std::size_t>(slot) * control_->slot_size;
    }
    // The slots in the pool: exact when no slot moves meanwhile (for tests and checks).
    [[nodiscard]] std::uint32_t free_slots() const noexcept;
    // What a slot whose content was received needs until its last received buffer
    // is dropped: how many buffers still point into it, the outstanding index of the
    // sender it goes back to, and what keeps that sender's link (and through it this
    // node) alive. Written by the receiver thread before it hands the buffers out;
    // the last buffer dropped (any thread) takes the owner out and gives the slot back.
    struct SlotHold {
        std::atomic<std::uint32_t> refs{0};
        std::uint32_t index = 0;
        std::shared_ptr<void> owner;
    };
    [[nodiscard]] SlotHold& slot_hold(std::uint32_t slot) const noexcept { return holds_[slot]; }
    // Whether the pool has a slot per peer beyond their max_outst_buffers, so that
    // each may hold a hot slot without ever taking a slot an index waits for.
    [[nodiscard]] bool hot_slots() const noexcept { return hot_slots_; }

    // The kit's progress driver of this factory's nodes: every send or receive of
    // any node moves the queues of the others (kit/progress.hpp), and a change of
    // asleep() or closing() is handed to every node through it (announce), which
    // writes it into our header at its peer.
    [[nodiscard]] kit::ProgressDriver& driver() noexcept { return driver_; }

    // Whether a thread of this process sleeps on the doorbell, as every partner is
    // told: a partner rings the doorbell after writing a message or a grant here
    // only when our header in its segment says so, so no sender reads our segment.
    [[nodiscard]] bool asleep() const noexcept { return asleep_.load(std::memory_order_acquire); }
    // Whether this process ended cleanly (the factory's destructor, after its last
    // grants): partners that find it gone then forget it without reporting a loss.
    [[nodiscard]] bool closing() const noexcept { return closing_.load(std::memory_order_acquire); }
    void set_closing();

    // Waits as msgpass::wait_for does (spin 50 us, yield until 1 ms, sleep on this
    // node's doorbell), except while this process's CPU is shared, learnt from the
    // yields (one that gives the CPU to another task takes several times longer
    // than one that returns at once): then it spins only as long as a partner's
    // recent answers took and sleeps without yielding (shared_spin_ns_ below;
    // docs/sci-protocol.md, "How a node waits").
    template <class Poll>
    auto wait(Poll&& poll, std::chrono::nanoseconds timeout) -> decltype(poll());

    // A buffer of size bytes to send: from the send pool when use_send_pool is set
    // and size fits send_buffer_size and a buffer is free, else from the heap (a
    // small one from a per-thread cache of blocks). Neither takes a lock.
    BufferPtr allocate_send_buffer(std::size_t size);

    // The broadcast region: a message sent to several peers (send_shared, as a group
    // send does) is copied once into this process's own region, and each peer gets a
    // descriptor of it and reads it there. An entry lives until every peer that got
    // it released it and another shared message took its place as the current one.
    struct BroadcastPlace {
        std::uint64_t entry;
        std::uint64_t offset;
    };
    // A reference for one more peer to the shared message: copies it (through
    // sequence) when it is not the current entry. nullopt when the region has no
    // room or cannot be made: the caller then copies to the peer as usual.
    std::optional<BroadcastPlace> broadcast_acquire(const SharedBuffer& buffer, Sequence& sequence);
    void broadcast_release(std::uint64_t entry) noexcept;
    struct Broadcast;

private:
    TransportParameters parameters_;
    VirtualDevice device_;
    LocalSegment segment_;
    std::byte* base_ = nullptr;
    ControlBlock* control_ = nullptr;
    std::mutex headers_mutex_;
    // The pool of free receive slots, a lock-free stack (Treiber's) linked through
    // next_free_ (a slot's successor while it is in the pool). free_head_: the top
    // slot (low 32 bits; no_free when empty) and a count of the changes of the head
    // (high 32 bits), so that a head taken and given back between another thread's
    // load and its exchange is never taken for unchanged (ABA). A push publishes
    // (release) what its thread did with the slot to the thread that pops it.
    static constexpr std::uint32_t no_free = ~std::uint32_t{0};
    std::unique_ptr<std::atomic<std::uint32_t>[]> next_free_;
    std::atomic<std::uint64_t> free_head_{no_free};
    std::unique_ptr<SlotHold[]> holds_; // one per receive slot
    // The slots below slots_with_pages_ have their pages in /dev/shm (reserved before
    // any of them is granted, so that a full /dev/shm is an error here, never a
    // SIGBUS in the peer that writes the slot). Grown under slot_pages_mutex_.
    bool reserve_slot_pages(std::uint32_t slot) noexcept;
    std::atomic<std::uint32_t> slots_with_pages_{0};
    mutable std::mutex slot_pages_mutex_;
    std::string slot_pages_error_;
    std::vector<bool> headers_taken_;
    bool hot_slots_ = false;
    SendPool* send_pool_ = nullptr; // closed by the destructor (buffers may outlive this node)
    // Large send buffers (64 KiB and more, above the send pool) from recycled memory: a
    // fresh one per message cost a page fault per 4 KiB page in the copy to the peer.
    std::shared_ptr<kit::BufferPool> large_pool_ = std::make_shared<kit::BufferPool>();
    std::unique_ptr<Broadcast> broadcast_;
    kit::ProgressDriver driver_;
    YieldGauge yields_; // whether the CPU is shared, from the waits' yields
    // While the CPU is shared a wait spins about twice as long as the recent waits
    // that a partner answered within max_shared_spin took (at least min_shared_spin),
    // then sleeps without yielding: a yield hands the CPU to any runnable task, and a
    // busy one keeps it for the rest of its time slice (the 2 ms ping-pong of issue
    // 26 beside a build), while a partner that runs answers within the spin and one
    // that was descheduled is not brought back sooner by spinning longer.
    // More nodes in the partition than CPUs here: the CPU is shared by the
    // partition itself, not (only) by other programs' busy tasks (see wait()).
    const bool partition_fills_cpus_;
    // MSGPASS_SCI_WAIT=sleep in the environment: a wait sleeps on the doorbell after
    // its first poll, without spinning or yielding, so that msgpass-bench's fanin
    // pattern measures the receive's own CPU time rather than the wait's. For
    // measurements; a receiver that must not burn a core while it waits may use it.
    const bool sleep_at_once_;
    static constexpr std::chrono::nanoseconds min_shared_spin{5000};
    static constexpr std::chrono::nanoseconds max_shared_spin{100000};
    void learn_shared_spin(std::chrono::nanoseconds took) noexcept;
    std::atomic<std::int64_t> shared_spin_ns_{min_shared_spin.count()};
    std::atomic<std::int64_t> shared_took_ns_{0}; // the moving average of the answered waits
    // Whether the CPU is free again is not learnt from yields, which a shared wait no
    // longer makes (and which the kernel's EEVDF scheduler may return at once even
    // beside busy tasks): one shared wait in probe_every reads the process's
    // involuntary context switches, and free_after without one marks the CPU free.
    static constexpr std::uint32_t probe_every = 64; // a power of two
    static constexpr std::chrono::milliseconds free_after{20};
    void probe_shared() noexcept;
    std::atomic<std::uint32_t> shared_waits_{0};
    std::mutex probe_mutex_;
    std::int64_t probe_switches_ = -1; // at probe_since_ns_
    std::int64_t probe_since_ns_ = 0;
    // Sleep announcements: the first thread to sleep tells every partner, the last
    // to wake tells them again; announcements are made one at a time.
    class Asleep;
    class Sleeper;
    void announce_sleep();
    void withdraw_sleep();
    std::mutex sleep_mutex_; // order: sleep_mutex_ -> the driver's lock -> a node's receiver lock
    std::uint32_t sleepers_ = 0;
    std::atomic<bool> asleep_{false};
    std::atomic<bool> closing_{false};
    bool barrier_ = false; // this process makes barriers when it announces a sleep (control_barrier)
    // A barrier failed after all (it never did in a test): a note written without a
    // fence may then be missed by a sleep, which is therefore cut to short steps.
    std::atomic<bool> barrier_failed_{false};
};

// Holds a sleep announcement for the time a wait may sleep.
class Transport::Asleep {
public:
    explicit Asleep(Transport& local) : transport_(local) { transport_.announce_sleep(); }
    ~Asleep() { transport_.withdraw_sleep(); }
    Asleep(const Asleep&) = delete;
    Asleep& operator=(const Asleep&) = delete;

private:
    Transport& transport_;
};

// How an sci wait sleeps: on the local segment's doorbell, after telling every
// partner so (a partner rings only a process that said it sleeps); its yields teach
// the local node whether the CPU is shared (then the wait does not yield).
class Transport::Sleeper : public DoorbellSleeper {
public:
    explicit Sleeper(Transport& local) : DoorbellSleeper{&local.bell()}, transport_(local) {}
    void yielded(std::chrono::nanoseconds took) noexcept { transport_.yields_.observe(took); }
    [[nodiscard]] Asleep announce() { return Asleep(transport_); }

private:
    Transport& transport_;
};

template <class Poll>
auto Transport::wait(Poll&& poll, std::chrono::nanoseconds timeout) -> decltype(poll()) {
    WaitPolicy policy;
    if (barrier_failed_.load(std::memory_order_relaxed)) policy.max_sleep = std::chrono::microseconds(1000);
    if (sleep_at_once_) {
        policy.spin = std::chrono::microseconds(0);
        policy.yield = std::chrono::microseconds(0);
        return wait_with(std::forward<Poll>(poll), timeout, Sleeper(*this), policy);
    }
    if (!yields_.shared()) return wait_with(std::forward<Poll>(poll), timeout, Sleeper(*this), policy);
    if (partition_fills_cpus_) {
        // The partition's own nodes share the CPUs (more nodes than CPUs): a yield
        // hands the CPU to a partner, whose answer is what this wait waits for, so
        // the wait yields (no spin) before it sleeps. A sleep per message halved the
        // DAQ example's rate (7 nodes on 2 CPUs: docs/benchmarks.md).
        policy.spin = std::chrono::microseconds(0);
        return wait_with(std::forward<Poll>(poll), timeout, Sleeper(*this), policy);
    }
    if ((shared_waits_.fetch_add(1, std::memory_order_relaxed) & (probe_every - 1)) == 0) probe_shared();
    policy.spin = std::chrono::ceil<std::chrono::microseconds>(
        std::chrono::nanoseconds(shared_spin_ns_.load(std::memory_order_relaxed)));
    policy.yield = policy.spin; // no yield phase
    const auto start = std::chrono::steady_clock::now();
    auto r = wait_with(std::forward<Poll>(poll), timeout, Sleeper(*this), policy);
    if (r) learn_shared_spin(std::chrono::steady_clock::now() - start);
    return r;
}

} // namespace msgpass::sci
