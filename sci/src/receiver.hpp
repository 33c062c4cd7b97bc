// The receiver room of sci: the receive side of one peer. It finds the peer's
// notifications in our header, hands out the messages as buffers (or lent views)
// that point into our own segment (zero copy), takes large messages from the
// peer's ring or broadcast region, and grants the peer fresh slots (the acks),
// from dropped buffers or from the pool. docs/sci-protocol.md.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/kit/block_cache.hpp>
#include <msgpass/message_view.hpp>

#include "link.hpp"
#include <msgpass/kit/fast_lock.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace msgpass::sci {

class Sender;

// Counts the large buffers the application released, in the order the peer sent
// them, so that the receiver thread can tell the sender which part of the ring is
// free again. Buffers may be dropped in any order and by any thread; one dropped
// before an older one is remembered until the older one goes too.
struct LargeRelease {
    std::shared_ptr<Transport> transport;
    LocalSegment region; // where the peer writes large messages to us; lives as long as its buffers
    std::mutex mutex;
    std::uint64_t generation = 0;                  // one per introduction: buffers of an earlier one count for nothing
    std::uint64_t freed = 0;                       // messages released in order since the introduction
    std::array<bool, large_in_flight> early{};     // released ahead of an older one, by sequence mod large_in_flight
    std::atomic<std::uint64_t> freed_published{0}; // freed, for the receiver thread
    std::size_t peer_position = 0;                 // of the peer in the nodes file: its ready mark

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

// SCIRecvBuffer: a received message in a receive slot of the local segment, alone
// or one of a batch that shares the slot. When the last buffer of a slot is
// dropped, the slot is granted to the sender again (or returns to the pool). The
// objects come from a per-thread cache of blocks, not from the heap, and hold no
// reference of their own: the slot's hold (Transport::SlotHold) keeps the link.
class RecvBuffer final : public SingleBuffer {
public:
    using Cache = kit::BlockCache<64>;
    // shared: other buffers point into the same slot (hold.refs counts them all).
    RecvBuffer(Link& link, std::uint32_t slot, std::byte* data, std::size_t size, bool shared) noexcept
        : SingleBuffer(data, size, size), link_(&link), slot_(slot), shared_(shared) {}
    ~RecvBuffer() override {
        if (shared_ && link_->grants->transport->slot_hold(slot_).refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
            return;
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

// Takes back a view lent from a batch (Receiver::view): as the drop of a
// RecvBuffer of that batch, without the object. context is the link (kept by the
// slot's hold), token the slot.
class SlotLender final : public MessageView::Lender {
public:
    // token: the slot, with alone_flag when the message was alone in it (no count
    // to take down: the slot goes back at once, as a RecvBuffer's that is not shared).
    static constexpr std::uint64_t alone_flag = std::uint64_t{1} << 32;
    void give_back(void* context, std::uint64_t token) noexcept override {
        auto& link = *static_cast<Link*>(context);
        const auto slot = static_cast<std::uint32_t>(token);
        if ((token & alone_flag) == 0 &&
            link.grants->transport->slot_hold(slot).refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
            return;
        link.grants->give_back(link, slot);
    }
};

// A received large message in the local large region of one sender.
class LargeRecvBuffer final : public SingleBuffer {
public:
    LargeRecvBuffer(std::shared_ptr<LargeRelease> release, std::uint64_t generation, std::uint64_t sequence,
                    std::byte* data, std::size_t size, std::shared_ptr<RemoteSegment> mapping)
        : SingleBuffer(data, size, size), release_(std::move(release)), generation_(generation), sequence_(sequence),
          mapping_(std::move(mapping)) {}
    ~LargeRecvBuffer() override {
        release_->release(generation_, sequence_);
        // The receiver thread publishes the release: a group looks at the peer for it.
        release_->transport->mark_ready(release_->peer_position);
        release_->transport->bell().ring();
    }

private:
    std::shared_ptr<LargeRelease> release_;
    std::uint64_t generation_;
    std::uint64_t sequence_;
    std::shared_ptr<RemoteSegment> mapping_; // the sender's broadcast region, or null
};

class Receiver final : public ReceiveSide {
public:
    // Creates the region where the peer writes large messages for us.
    Receiver(Links& links, Sender& sender);
    // Slots granted to the peer go back to the pool; received buffers keep the
    // transport alive on their own, and give their slots to the pool (a new generation).
    ~Receiver();
    Receiver(const Receiver&) = delete;
    Receiver& operator=(const Receiver&) = delete;

    // The next message, or null: receive() after the factory check and the progress
    // of the queues. The order a restarted peer's messages come in: every message of
    // the old incarnation, then its loss (once, unless a send raised it already),
    // then the messages of the new one.
    BufferPtr poll();
    // The next message lent without an object: one of an open batch (without the
    // receive lock: only one thread receives, and nothing else touches an open
    // batch), else the next note's when it is a batch or a message alone in its
    // slot. Empty when there is none or the next is of another kind (a large
    // message, a descriptor of a batch already taken, a restart, a violation): the
    // caller then polls. nothing (when given) is set when there was none and a poll
    // would find none either.
    MessageView view(bool* nothing = nullptr);
    // The next message as view() lends it, else as poll() takes it (a buffer the
    // view holds), with one look at the notes: when view() found nothing, what poll()
    // does then (the peer's checks, a loss, a new incarnation) without a second look.
    MessageView next_view();
    // Writes the grants a receive call would write (indices whose message was taken,
    // releases of large buffers), so that a peer sees every taken message
    // acknowledged when this process ends cleanly without receiving again.
    void publish_pending();
    // Writes this process's state (Transport::asleep, closing) into our header at the
    // peer, once the peer has been introduced to.
    void write_status();
    // Grants the peer a hot slot when it has none (before a send's note).
    void offer_hot(Link& link);
    // From now on the peer sets its ready mark in our control block after each
    // message (a group receives from it): written into our status at the peer, then
    // a barrier, then our own mark of the peer, so that a message the peer wrote
    // without seeing the request is found (docs/sci-protocol.md, "Ready marks").
    void want_marks();

    void adopt(Link& link) override;
    [[nodiscard]] std::unique_lock<kit::FastLock> hold(const Link*& in_use) override;

private:
    void introduce(Link& link);
    BufferPtr after_nothing(Link* link, const std::string& violation, const std::string& no_pages = {});
    BufferPtr take_next();
    BufferPtr take_message(Link& link);
    bool open_batch(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size, std::uint64_t number);
    bool open_records(Link& link, std::uint32_t i, std::uint32_t slot, std::uint64_t number);
    void lend_alone(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size);
    BufferPtr next_in_batch();
    MessageView view_in_batch();
    void abandon_batch();
    bool grant_from_pool(Link& link, std::uint32_t index);
    void release_grants(std::uint32_t generation, std::uint32_t k);
    void publish_grants(Link& link, bool rang = false);
    void publish_deferred(Link& link);
    void note_receiving_thread() noexcept;
    void store_status(Link& link);

    Links& links_;
    Sender& sender_;
    Transport* const transport_;
    const NodeParameters& parameters_;
    Header* const local_header_;
    Grants* const grants_;
    StatsCounters& stats_;
    kit::LossLatch& loss_;
    std::uint64_t large_capacity_ = 0;

    kit::FastLock recv_mutex_; // one atomic operation per locked receive (fast_lock.hpp)
    Link* recv_link_ = nullptr;
    std::shared_ptr<Link> recv_owner_; // recv_link_, for the holds of the slots its messages are in
    std::uint64_t received_ = 0;
    // Message received_ comes on index recv_index_ (received_ mod the peer's k) in
    // round recv_round_[recv_index_] (mod 255): counters, as on the send side.
    std::uint32_t recv_index_ = 0;
    std::array<std::uint8_t, max_outstanding> recv_round_{};
    std::uint32_t recv_salt255_ = 0; // of the peer's epoch: its notes' signatures
    std::uint64_t large_received_ = 0;
    static constexpr std::uint32_t no_slot = 0xffffffffu;
    std::array<bool, max_outstanding> resign_{}; // the slot stays granted; its ack awaits the next round's signature
    // Indices publish_grants has to look at (bit i: index i was emptied by a message
    // taken, or waits for its ack to be re-signed), so that a receive with nothing to
    // grant does not load every index's word. recv_mutex_ held.
    std::uint32_t attention_ = 0;
    std::shared_ptr<LargeRelease> large_release_;
    std::uint64_t large_published_ = 0;
    std::uint64_t large_generation_ = 0;
    std::uint32_t hot_slot_ = no_slot; // the hot slot granted to the peer, not used yet
    std::uint64_t hot_issued_ = 0;     // hot slots granted since the introduction
    std::atomic<bool> hot_out_{false}; // hot_slot_ != no_slot, read by senders without the lock
    bool marks_ = false;               // the peer is asked for ready marks (status_marks); recv_mutex_
    std::string violation_;            // a protocol violation seen by the receiver, reported outside the lock
    std::string no_pages_;             // why the last grant from the pool found no room in /dev/shm (empty: none)
    std::deque<BufferPtr> pending_;    // taken from a batch of descriptors, not handed out yet
    // The batch of small messages being handed out (link null when none): one per
    // receive call, each a view into the slot, which returns with the last of them.
    struct Batch {
        Link* link = nullptr; // kept by the slot's hold
        std::uint32_t slot = 0;
        std::uint32_t next = 0; // the message handed out next
        std::uint32_t count = 0;
        std::uint32_t offset = 0; // of message `next` in the slot
        bool alone = false;       // a message alone in its slot, lent (lend_alone): no count in the slot's hold
        // A slot open to records (protocol.hpp, "An open slot"): `next` counts the
        // records handed out, `offset` is where the next record's word is, and the
        // slot's hold starts at open_refs, taken down by the close.
        bool records = false;
        std::uint32_t sequence = 0; // of the note that opened it
        std::byte* base = nullptr;  // the slot's memory and size (records: read per message)
        std::uint64_t size = 0;
        // Records: the offset past which the taken word is written next (a quarter
        // of the slot after the last one; never, when the sender has no such word).
        std::uint64_t report_at = ~std::uint64_t{0};
    };
    // The hold of an open slot until its close record: more than it can have records,
    // so that releases before the close never bring it to 0.
    static constexpr std::uint32_t open_refs = 1u << 31;
    // The next record of the open slot, read without taking it.
    struct Record {
        enum Kind { none, message, closed, bad } kind = none;
        std::byte* data = nullptr;
        std::uint32_t length = 0;
    };
    [[nodiscard]] Record peek_record() const;
    // Takes the record peek_record found (a message): the slot's hold counts it,
    // and each quarter of the slot the sender is told how many were taken.
    void advance_record(const Record& r) noexcept;
    // Writes the count of records taken from the open slot into our header at the
    // sender (protocol.hpp, "The taken word").
    void report_taken() noexcept;
    // The open slot's close (or a bad record, or the node's end): the slot goes back
    // once the last of its messages is dropped.
    void close_records();
    // Under the receive lock: what the open slot has for the caller (a message, as a
    // buffer or lent), or nothing yet (false, batch_ still open), or it was closed
    // (false, batch_ closed: the next note may be looked at). A bad record is a violation.
    bool records_ready(Record& r);
    BufferPtr record_buffer(const Record& r);
    MessageView record_view(const Record& r);
    Batch batch_;
    std::vector<std::uint32_t> batch_lengths_; // of the open batch, copied out of the slot
    // take_message is called for view(): a batch is left open for view_in_batch and a
    // message alone in its slot is opened as a batch of one, instead of a RecvBuffer.
    bool lend_ = false;
};

} // namespace msgpass::sci
