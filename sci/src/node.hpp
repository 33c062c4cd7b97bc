// SCINode (seed section 7): a peer process reached through its shared segment.
// Send copies the message once, straight into a receive slot of the peer that the
// peer granted earlier, then writes the signed size word into this node's header
// at the peer; receive finds the notification in the local header, hands out a
// buffer that points into the local segment (zero copy) and grants a fresh slot.
// docs/sci-protocol.md describes the protocol; msgpass/node.hpp the contract.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/kit/queued_buffer.hpp>
#include <msgpass/node.hpp>
#include <msgpass/sci/protocol.hpp>

#include "local_node.hpp"
#include "remote_memory.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace msgpass::sci {

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

    static NodeParameters from(const config::Configuration& configuration, const LocalNode& local, NodeId peer);
};

class SciNode final : public Node, public kit::FactoryBound, private kit::Progressing {
public:
    SciNode(std::shared_ptr<LocalNode> local, NodeParameters parameters);
    ~SciNode() override;

    [[nodiscard]] NodeId id() const noexcept override { return parameters_.peer; }
    [[nodiscard]] const std::string& name() const noexcept override { return parameters_.name; }
    void send(BufferPtr&& buffer) override;
    void send_shared(const SharedBuffer& buffer) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    // The Buffer-free path: send_bytes copies the caller's bytes straight into the
    // peer's slot (or into the staged batch of a queue), without a buffer; a view
    // of a message that shares its slot with others (a batch) is lent without any
    // object, the slot going back with the last of them.
    void send_bytes(std::span<const std::byte> bytes) override;
    [[nodiscard]] MessageView receive_view() override;
    [[nodiscard]] MessageView receive_view(std::chrono::nanoseconds timeout) override;
    [[nodiscard]] NodeStats stats() const noexcept override;

    bool flush(std::chrono::nanoseconds timeout) override;
    // Writes the grants a receive call would write (indices whose message was taken,
    // releases of large buffers), so that a peer sees every taken message
    // acknowledged when this process ends cleanly without receiving again.
    void publish_pending();
    // Messages waiting in the send queue.
    [[nodiscard]] std::size_t queued() const noexcept { return queue_depth_.load(std::memory_order_relaxed); }

private:
    struct Link;
    using Queued = kit::QueuedBuffer;
    struct Grants;       // shared with receive buffers
    struct LargeRelease; // shared with large receive buffers
    class RecvBuffer;
    class LargeRecvBuffer;
    class Staged;      // small messages copied into a batch while they wait (node_send.cpp)
    class CallerBytes; // the bytes of a send_bytes, as send_impl takes them (node_send.cpp)
    class SlotLender;  // takes back the views lent from a batch (node_parts.hpp)

    template <class B>
    void send_impl(B& buffer);
    Link* current_link();
    Link* establish_link();
    void introduce(Link& link);
    void sync_send_side(Link* link);
    bool try_transfer(Link& link, const Buffer& buffer, BufferPtr* owned = nullptr,
                      const SharedBuffer* shared = nullptr);
    bool reclaim_large(Link& link);
    bool choose_streaming();
    void record_copy(bool streaming, std::chrono::nanoseconds took, std::uint64_t size);
    std::size_t try_transfer_batch(Link& link);
    [[nodiscard]] bool coalescible(const Queued& q, std::uint64_t capacity) const;
    std::size_t try_transfer_coalesced(Link& link);
    [[nodiscard]] Staged* staged_of(const Queued& q) const;
    bool stage(const Link& link, const Buffer& buffer);
    std::size_t try_transfer_staged(Link& link, Staged& staged);
    std::optional<std::uint64_t> place_large(std::uint64_t size);
    void forget_large();
    std::byte* map_broadcast(Link& link, const LargeDescriptor& d);
    [[nodiscard]] bool slot_granted(const Link& link) const;
    // The grant word of the next message's index when it carries the signature of
    // its round (else 0, never a valid grant: a signature is never 0).
    [[nodiscard]] std::uint32_t next_grant() const;
    void advance_send(std::uint64_t n);
    void flush_locked(Link* link);
    void flush_deferring(Link* link);
    bool try_flush();
    void try_flush_queue() override { try_flush(); }
    // Declares the peer lost if its process is gone or restarted; at most every
    // peer_timeout / 4. Any thread, no lock held.
    void check_peer();
    void check_peer(Link* link); // a link the caller's send lock keeps
    [[nodiscard]] bool check_due();
    void check_link(Link& link);
    // Lets go of the links of earlier incarnations that neither side uses any more
    // (their mappings and descriptors; a buffer still received through one keeps it
    // until dropped). Send lock held.
    void reclaim_links();
    // The peer's process of this link is gone and said it ended cleanly.
    [[nodiscard]] bool ended_cleanly(const Link& link) const;
    void declare_lost(Link* link, const std::string& reason);
    void throw_if_lost();
    // Throws the error a flush outside a send met (no room in /dev/shm for a queued
    // message), once. Send lock held.
    void throw_if_deferred();
    std::uint64_t unacknowledged(const Link& link) const;
    BufferPtr take_next();
    BufferPtr take_message(Link& link);
    bool open_batch(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size, std::uint64_t number);
    BufferPtr next_in_batch();
    MessageView view_in_batch();
    BufferPtr receive_polled(); // receive() after the factory check and the progress of the queues
    void abandon_batch();
    bool grant_from_pool(Link& link, std::uint32_t index);
    void release_grants(std::uint32_t generation, std::uint32_t k);
    void publish_grants(Link& link, bool rang = false);
    void store_status(Link& link);
    void state_changed() override;
    void offer_hot(Link& link);

    std::shared_ptr<LocalNode> local_;
    NodeParameters parameters_;
    Header* local_header_; // the peer writes here
    std::uint32_t send_k_; // outstanding messages towards the peer: our max_outst_buffers
    std::shared_ptr<Grants> grants_;
    Sequence& sequence_; // grants_->sequence: transfers to the peer, with their error injection
    StatsCounters stats_;

    std::mutex link_mutex_; // order: send_mutex_ -> link_mutex_ -> recv_mutex_
    std::atomic<Link*> link_{nullptr};
    std::vector<std::shared_ptr<Link>> links_; // every link not yet reclaimed; link_mutex_
    std::atomic<bool> retired_{false};         // links_ holds more than the current one
    std::atomic<std::uint32_t> dead_epoch_{0}; // the incarnation declared lost; read by checks without a lock
    std::chrono::steady_clock::time_point next_connect_{};
    std::uint64_t large_capacity_ = 0;

    std::mutex send_mutex_;
    // The memory of the staged batch that went last, for the next one (before queue_:
    // the batches in it give theirs back here when the node ends).
    struct StagedMemory {
        std::unique_ptr<std::byte[]> bytes;
        std::uint64_t capacity = 0;
        std::vector<std::uint32_t> lengths;
    };
    StagedMemory staged_spare_;
    std::deque<Queued> queue_;
    std::size_t queued_messages_ = 0;         // in queue_, each message of a staged batch counted
    Staged* staged_back_ = nullptr;           // the staged batch at the back of queue_, while it takes more
    std::deque<Staged*> staged_;              // the staged batches in queue_, in its order
    std::atomic<std::size_t> queue_depth_{0}; // queued_messages_, for readers without the lock
    Link* send_link_ = nullptr;
    std::atomic<std::uint64_t> sent_{0}; // written under send_mutex_; read by loss reports
    std::uint64_t large_sent_ = 0;       // large messages sent to this incarnation
    std::uint64_t large_freed_ = 0;      // of which the peer released (in order)
    std::uint64_t large_head_ = 0;       // where the next large message starts in the peer's region
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
    std::uint64_t large_copies_ = 0;
    std::array<double, 2> copy_cost_{}; // ns per byte of large copies: cached, streaming (0: not measured)
    std::array<std::uint32_t, max_outstanding> last_note_{};
    std::vector<std::uint32_t> batch_table_; // header and lengths of the batch being sent
    std::vector<std::uint64_t> batch_sizes_; // of the messages it may take

    std::mutex recv_mutex_;
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
    std::shared_ptr<LargeRelease> large_release_;
    std::uint64_t large_published_ = 0;
    std::uint64_t large_generation_ = 0;
    std::uint32_t hot_slot_ = no_slot; // the hot slot granted to the peer, not used yet
    std::uint64_t hot_issued_ = 0;     // hot slots granted since the introduction
    std::atomic<bool> hot_out_{false}; // hot_slot_ != no_slot, read by senders without the lock
    std::string violation_;            // a protocol violation seen by the receiver, reported outside the lock
    std::deque<BufferPtr> pending_;    // taken from a batch of descriptors, not handed out yet
    // The batch of small messages being handed out (link null when none): one per
    // receive call, each a view into the slot, which returns with the last of them.
    struct Batch {
        Link* link = nullptr; // kept by the slot's hold
        std::uint32_t slot = 0;
        std::uint32_t next = 0; // the message handed out next
        std::uint32_t count = 0;
        std::uint32_t offset = 0; // of message `next` in the slot
    };
    Batch batch_;
    std::vector<std::uint32_t> batch_lengths_; // of the open batch, copied out of the slot

    kit::LossLatch loss_;
    std::mutex deferred_mutex_;
    std::atomic<bool> deferred_pending_{false};
    std::exception_ptr deferred_error_;
    std::atomic<std::int64_t> next_check_ns_{0};
};

} // namespace msgpass::sci
