// The sender room of sci: the send side of one peer. A message is copied once,
// straight into a receive slot the peer granted (or, when larger than a slot, into
// the peer's large-message ring, or described in our broadcast region), then the
// signed note is written into our header at the peer; a message that cannot go now
// waits in the send queue, small ones staged into batches, and the queue moves with
// every send, flush and receive of the factory (the kit's progress driver).
// docs/sci-protocol.md.
#pragma once

#include <msgpass/kit/queued_buffer.hpp>
#include <msgpass/node.hpp>

#include "copy_choice.hpp"
#include "link.hpp"
#include <msgpass/kit/fast_lock.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace msgpass::kit {
class Progressing;
}

namespace msgpass::sci {

class Receiver;

// The bytes of a send_bytes, as Sender::send takes them: a buffer that views the
// caller's memory, copied into a send buffer of its own only when it has to wait in
// the queue outside a staged batch.
class CallerBytes {
public:
    explicit CallerBytes(std::span<const std::byte> bytes) noexcept : view_(bytes) {}
    const Buffer* operator->() const noexcept { return &view_; }
    const Buffer& operator*() const noexcept { return view_; }
    explicit operator bool() const noexcept { return true; }

private:
    class View final : public SingleBuffer {
    public:
        explicit View(std::span<const std::byte> b) noexcept
            : SingleBuffer(const_cast<std::byte*>(b.data()), b.size(), b.size()) {}
    };
    View view_;
};

class Sender {
public:
    // receiver: the receive side of the same peer, which grants it hot slots; node:
    // the facade, named by the errors.
    Sender(Links& links, Receiver& receiver, const Node& node);
    ~Sender();
    Sender(const Sender&) = delete;
    Sender& operator=(const Sender&) = delete;

    // Sends buffer (a BufferPtr, SharedBuffer or CallerBytes) or queues it; self is
    // the facade's place in the progress driver (its queue moves here, under the
    // send lock). Throws as Node::send.
    // A small message of one piece takes the usual cases first (fast_bytes): straight
    // into a granted slot, or into the staged batch at the back of the queue.
    template <class B>
    void send(B& buffer, const kit::Progressing* self);
    // Transfers queued messages while possible, unless another thread holds the send
    // lock. Whether the queue is empty. pause: the application's flush, after which
    // the sender neither holds nor stages until it finds its receiver behind again
    // (a message sent after it goes as soon as a slot or the open slot takes it).
    bool try_flush(bool pause = false);
    // Lets go of the links no side uses any more, unless a send holds the send lock
    // (the next send then lets them go).
    void try_reclaim();
    // Messages waiting in the send queue.
    [[nodiscard]] std::size_t queued() const noexcept { return queue_depth_.load(std::memory_order_relaxed); }

private:
    using Queued = kit::QueuedBuffer;
    class Staged; // small messages copied into a batch while they wait

    void sync_send_side(Link* link);
    bool try_transfer(Link& link, const Buffer& buffer, BufferPtr* owned = nullptr,
                      const SharedBuffer* shared = nullptr);
    bool reclaim_large(Link& link);
    std::size_t try_transfer_batch(Link& link);
    [[nodiscard]] bool coalescible(const Queued& q, std::uint64_t capacity) const;
    std::size_t try_transfer_coalesced(Link& link);
    [[nodiscard]] Staged* staged_of(const Queued& q) const;
    bool stage(const Link& link, const Buffer& buffer);
    [[nodiscard]] bool fast_bytes(std::span<const std::byte> bytes);
    // Whether a message of size bytes may open a slot of link to records (with its
    // close record after it).
    [[nodiscard]] bool record_fits_slot(const Link& link, std::size_t size) const noexcept;
    // Appends the message to the open slot as its next record. Send lock held, room checked.
    void write_record(std::span<const std::byte> bytes);
    // Writes the open slot's close record (the receiver goes on to the next note) and
    // rings the receiver if it sleeps. Send lock held.
    void close_records();
    // The close record alone (after the staged records): the caller rings.
    void close_quietly();
    // At each quarter of the open slot the sender writes into: whether the receiver
    // is more than a quarter of the slot behind (two quarters while staging: staged
    // records reach it a quarter at a time), by the count of records it took that
    // it writes into our segment (protocol.hpp, "The taken word"). Then the next
    // records are staged.
    [[nodiscard]] bool receiver_behind() noexcept;
    // Appends the message to the open slot's staged records, in our memory laid out
    // as in the slot; published (copied) once a quarter of the slot is staged.
    void stage_record(std::span<const std::byte> bytes);
    // Copies the staged records into the open slot in one block, the first record's
    // word written last (their publication). Send lock held.
    void publish_records();
    [[nodiscard]] bool fast_buffer(BufferPtr& buffer);
    std::size_t try_transfer_staged(Link& link, Staged& staged);
    std::optional<std::uint64_t> place_large(std::uint64_t size);
    void forget_large();
    [[nodiscard]] bool slot_granted(const Link& link) const;
    // The grant word of the next message's index when it carries the signature of
    // its round (else 0, never a valid grant: a signature is never 0).
    [[nodiscard]] std::uint32_t next_grant() const;
    void advance_send(std::uint64_t n);
    // Whether the peer granted the slot of the message `ahead` after the next one
    // (grants come in order, but for drops by other threads: about whether that many
    // more are granted). A word of our own segment.
    [[nodiscard]] bool granted_ahead(std::uint32_t ahead) const;
    // The largest message a send holds (hold_small). Above it a held message would
    // cost more than it gains: it is copied twice (into the staged batch, then into
    // the slot), and at 256 B that made streams 0.56-0.86x of sending it at once
    // when the receiver kept up (docs/benchmarks.md, twelfth session).
    static constexpr std::uint64_t hold_max_size = 128;
    // Whether a send holds a small message back in the staged batch instead of
    // sending it now (docs/sci-protocol.md, "Holding small messages"): from the send
    // that finds no slot granted for its message (the receiver is a window behind)
    // until one finds the whole window granted (the receiver took everything) with
    // at most one message waiting. Never below 4 outstanding messages. Send lock held.
    [[nodiscard]] bool hold_small();
    // Whether a send leaves the queue as it is instead of transferring it: it is one
    // small message or the staged batch that still takes more, and hold_small().
    [[nodiscard]] bool holds_back(const Link& link);
    // Transfers queued messages while possible; holding: a send's flush, which leaves
    // a queue that holds_back alone.
    void flush_locked(Link* link, bool holding = false);
    void flush_deferring(Link* link, bool holding = false);
    // Throws the error a flush outside a send met (no room in /dev/shm for a queued
    // message), once. Send lock held.
    void throw_if_deferred();

    const Node& node_;
    Links& links_;
    Receiver& receiver_;
    Transport* const transport_;
    const NodeParameters& parameters_;
    Header* const local_header_;
    Grants* const grants_;
    Sequence& sequence_;
    StatsCounters& stats_;
    const std::uint32_t send_k_;
    const bool holds_;         // max_outst_buffers of 4 or more: small messages may be held (hold_small)
    bool holding_ = false;     // hold_small(): until a send finds the whole window granted
    const bool records_;       // sci.records: small messages as records of an open slot
    const std::uint32_t self_; // this node's id: it signs each record (record_check_of)

    std::atomic<std::size_t> queue_depth_{0}; // queued_messages_, for readers without the lock
    std::atomic<std::uint64_t> sent_{0};      // written under send_mutex_; read by loss reports
    kit::FastLock send_mutex_;                // one atomic operation per send (fast_lock.hpp)
    // The memory of the staged batch that went last, for the next one (before queue_:
    // the batches in it give theirs back here when the node ends).
    struct StagedMemory {
        std::unique_ptr<std::byte[]> bytes;
        std::uint64_t capacity = 0;
        std::vector<std::uint32_t> lengths;
    };
    StagedMemory staged_spare_;
    std::deque<Queued> queue_;
    std::size_t queued_messages_ = 0; // in queue_, each message of a staged batch counted
    Staged* staged_back_ = nullptr;   // the staged batch at the back of queue_, while it takes more
    std::deque<Staged*> staged_;      // the staged batches in queue_, in its order
    Link* send_link_ = nullptr;
    // fast_bytes takes messages below this size to send_link_ (set by sync_send_side).
    std::uint64_t fast_size_limit_ = 0;
    [[nodiscard]] std::uint64_t fast_size_limit(const Link& link) const noexcept;
    std::uint64_t large_sent_ = 0;  // large messages sent to this incarnation
    std::uint64_t large_freed_ = 0; // of which the peer released (in order)
    std::uint64_t large_head_ = 0;  // where the next large message starts in the peer's region
    static constexpr std::uint64_t no_entry = ~std::uint64_t{0};
    struct LargeExtent {
        std::uint64_t begin;
        std::uint64_t end;
        std::uint64_t broadcast; // the entry in our broadcast region, or no_entry (in the peer's large region)
    };
    std::deque<LargeExtent> large_live_; // sent and not yet released, oldest first
    std::uint64_t hot_used_ = 0;         // hot slots of the peer used by this incarnation
    std::uint32_t hot_next_sig_ = 0;     // hot_signature(hot_used_, the peer's salt), kept as hot_used_ grows
    // Message sent_ goes on index send_index_ (sent_ mod send_k_), in round
    // send_round_[send_index_] (mod 255) of that index: counters, so that a message
    // costs no division (the signatures are signature_mod of these and the salts).
    std::uint32_t send_index_ = 0;
    std::array<std::uint8_t, max_outstanding> send_round_{};
    std::uint32_t peer_salt255_ = 0; // of the peer's epoch: its grants' signatures
    std::uint32_t own_salt255_ = 0;  // of ours: our notes' signatures
    CopyChoices copy_choice_;        // large copies through the cache or streamed
    std::array<std::uint32_t, max_outstanding> last_note_{};
    // The slot of the peer open to records (protocol.hpp, "An open slot"): small
    // messages sent while the queue is empty are appended to it, each a signed record,
    // without a note or a grant of their own. Closed before any other note is written.
    struct OpenSlot {
        Link* link = nullptr; // null: no slot is open
        std::byte* base = nullptr;
        std::uint64_t used = 0;      // where the next record goes
        std::uint64_t capacity = 0;  // the slot's size
        std::uint32_t sequence = 0;  // of the note that opened it (mod 2^32)
        std::uint32_t count = 0;     // records written
        std::uint64_t published = 0; // where the staged records start (all before it are in the slot)
        // Where the next quarter of the slot starts (receiver_behind looks then; never
        // without a taken word).
        std::uint64_t quarter_at = ~std::uint64_t{0};
    };
    // The last two quarters the sender started (a slot's opening counts as one): the
    // taken word the receiver writes there, the opening slot's check and the records
    // written before it. marks_[0] is the newest.
    struct QuarterMark {
        std::uint32_t check = 0;
        std::uint32_t count = 0;
    };
    std::array<QuarterMark, 2> marks_{};
    void mark_quarter(std::uint32_t check, std::uint32_t count) noexcept {
        marks_[1] = marks_[0];
        marks_[0] = {check, count};
    }
    OpenSlot open_;
    // Batched records: while the receiver is more than a quarter of the slot behind
    // (receiver_behind, asked at each quarter of the slot) small messages are staged
    // in records_stage_ and copied into the open slot a block at a time, so that a
    // lagging receiver costs the sender one copy per block as a staged batch does,
    // instead of each record's cache lines at the send lock. records_pending_: staged
    // and not yet published (try_flush publishes them; the progress driver counts
    // them as a queue).
    bool records_batched_ = false;
    std::atomic<bool> records_pending_{false};
    std::unique_ptr<std::byte[]> records_stage_;
    std::uint64_t records_stage_size_ = 0;
    std::vector<std::uint32_t> batch_table_; // header and lengths of the batch being sent
    std::vector<std::uint64_t> batch_sizes_; // of the messages it may take

    std::mutex deferred_mutex_;
    std::atomic<bool> deferred_pending_{false};
    std::exception_ptr deferred_error_;
};

} // namespace msgpass::sci
