// The communicator's private state and the pieces its sources share
// (docs/communicator.md). Not installed.
//
// One lock, `mutex`, guards the queues and the requests. Taking messages from the
// nodes (Node::receive has one receiving thread at a time) happens under it when it
// does not wait; a thread that waits in a node (a blocking receive) sets `pulling`
// under it, lets it go while it waits, and takes it again to queue what came, so
// that the mutex is never held while blocking in a node (Pull). recv_into's fast
// path takes it once per receive: a message that is its own (nothing posted before
// it could match) is taken after the wait without it. Eager sends go to the nodes
// without it when no send waits in the backlog (send_now), others under it, so that
// a message's place in its destination's order is the order of the posts.
#pragma once

#include <msgpass/comm.hpp>
#include <msgpass/deadline.hpp>
#include <msgpass/kit/pool.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace msgpass::comm {

namespace detail {

using namespace std::chrono_literals;

// The envelope as it travels in front of the payload, in host byte order (the
// supported hosts are little-endian).
struct WireEnvelope {
    std::uint32_t magic;
    std::uint8_t version;
    std::uint8_t kind;
    std::uint16_t context; // the message's Context, matched exactly
    std::int32_t tag;
    std::uint32_t id; // rendezvous kinds: the sender's id of the exchange; else 0
    std::uint64_t size;
};
static_assert(sizeof(WireEnvelope) == 24);
constexpr std::uint32_t wire_magic = 0x4d43504d; // "MPCM"
constexpr std::uint8_t wire_version = 1;         // the context took the 16 flag bits, always 0 before: context 0
constexpr std::uint8_t kind_eager = 1;
constexpr std::uint8_t kind_unexpected = 2; // BMI's unexpected class: test_unexpected only
constexpr std::uint8_t kind_rts = 3;        // request-to-send: the envelope of a large message, no payload
constexpr std::uint8_t kind_cts = 4;        // clear-to-send: the receiver posted a matching receive
constexpr std::uint8_t kind_data = 5;       // the payload of a cleared large message
// The requested queue (EPOS): a receive of more than eager_limit bytes posted for one
// source before anything matched it tells that source (context, tag or any_tag, its
// capacity in size, no payload); the source's next large send it matches goes at once
// with its data, as an eager message, without the request-to-send round trip.
constexpr std::uint8_t kind_request = 6;
// A sender's cancel of a send whose announcement went (id: the announcement's), and
// the receiver's answer when it took the announcement out of its queue before any
// receive cleared it (id: the same). Envelopes alone.
constexpr std::uint8_t kind_withdraw = 7;
constexpr std::uint8_t kind_withdrawn = 8;
// Per-tag queues (BIP): the receiver's application took `size` bytes of the sender's
// messages of lane `tag` (Limits::tag_queues' index); the sender may send that much
// more of it. An envelope alone.
constexpr std::uint8_t kind_credit = 9;
// One copy (docs/communicator.md, "One copy"): a clear-to-send of a receive that gave
// its buffer, to a peer of this host: as kind_cts (id; size: the request it withdraws)
// followed by a SingleCopyTarget naming the receiver's process and buffer. The sender
// writes the data there itself (process_vm_writev) and answers kind_written (id; size
// and tag: the message's, an envelope alone), which completes the receive; or, when it
// cannot write, answers with kind_data as to kind_cts.
constexpr std::uint8_t kind_cts_target = 10;
constexpr std::uint8_t kind_written = 11;
constexpr std::uint8_t kind_last = kind_written;
constexpr std::size_t header_size = sizeof(WireEnvelope);

// Where a receive's buffer is: the receiving process (pid, and the kernel's boot id
// and pid namespace, so that a sender of another host or namespace never takes the
// pid for one of its own) and the buffer's address and length.
struct SingleCopyTarget {
    std::uint32_t pid;
    std::uint32_t reserved; // 0
    std::uint64_t boot;     // a hash of /proc/sys/kernel/random/boot_id
    std::uint64_t pid_namespace;
    std::uint64_t address;
    std::uint64_t length;
};
static_assert(sizeof(SingleCopyTarget) == 40);
// This process's target fields (pid, boot, pid_namespace), read once.
const SingleCopyTarget& local_process();
// Writes from into (pid's) [address, address + from.size()) with process_vm_writev;
// 0, or the errno of the failure (EFAULT as well for a short write).
int write_into_process(std::uint32_t pid, std::uint64_t address, std::span<const std::byte> from);
// MSGPASS_SINGLE_COPY=0 in the environment turns the one-copy path off (as
// comm.single_copy: false does).
bool single_copy_allowed_by_environment();

// A receive buffer of this process offered to a sender (a clear-to-send with its
// address), for as long as its request lives: a write into this process itself (two
// communicators of one process) lands only inside one of these, so that a peer naming
// this process's pid cannot make it write over its own memory. Move-only.
class OfferedRange {
public:
    OfferedRange() = default;
    OfferedRange(std::uint64_t address, std::uint64_t length);
    OfferedRange(OfferedRange&& other) noexcept;
    OfferedRange& operator=(OfferedRange&& other) noexcept;
    OfferedRange(const OfferedRange&) = delete;
    OfferedRange& operator=(const OfferedRange&) = delete;
    ~OfferedRange();

private:
    void withdraw() noexcept;
    std::uint64_t address_ = 0;
    std::uint64_t length_ = 0;
    bool live_ = false;
};

// How long one blocking pull lasts before a waiter looks at its requests again.
constexpr std::chrono::nanoseconds slice = 10ms;
// Messages taken from the nodes by one non-blocking progress call at most.
constexpr int drain_limit = 256;

// Writes an envelope at `at` (header_size bytes).
void write_envelope(std::byte* at, Context context, Tag tag, std::size_t size, std::uint8_t kind = kind_eager,
                    std::uint32_t id = 0);

// Up to this many payload bytes, a Buffer payload without room for the envelope is
// copied behind a fresh envelope (one buffer); a larger one is sent as a gather list
// of envelope and payload (no copy here).
constexpr std::size_t gather_above = 4096;

// Messages of bytes of this size or more (envelope and payload) are made in recycled
// memory (kit::BufferPool), which keeps up to pool_keep_bytes of freed blocks: a
// window of 16 MiB in flight reuses it whole.
constexpr std::size_t pooled_from = 4096;
// The largest payload send() puts together on the stack for Node::send_bytes (an
// MPI_Send's small message: no Buffer object to make and free per message).
constexpr std::size_t bytes_send_limit = 1024;
constexpr std::size_t pool_keep_bytes = 32 * 1024 * 1024;

// The payload of a message: a view past the envelope, owning the whole (a received
// message, or Communicator::create_buffer's). The envelope's room in front of the
// payload lets a send write its envelope in place and send the whole, without a copy
// or a gather list (release()).
class PayloadBuffer final : public SingleBuffer {
public:
    PayloadBuffer(BufferPtr whole, std::size_t size) : whole_(std::move(whole)) {
        auto* s = whole_->single();
        reset(s->data() + header_size, size, s->capacity() - header_size);
        set_source(whole_->source());
    }

    // The whole (envelope room and payload), sized to the payload's size now.
    BufferPtr release() {
        auto* s = whole_->single();
        if (s->size() != header_size + size()) s->resize(header_size + size());
        return std::move(whole_);
    }

    // One per message: kept in a small cache of the thread that freed it.
    static void* operator new(std::size_t n);
    static void operator delete(void* p, std::size_t n) noexcept;

private:
    BufferPtr whole_;
};

// The caller's memory of a send in place, as a piece of the data message the node
// takes (no copy): the node holds it as long as it may still read it (tcp and udp until
// the peer acknowledged the message, sci until it copied it into the shared memory),
// and its destruction tells the send that the caller may have the memory back.
class ReleasingView final : public SingleBuffer {
public:
    ReleasingView(std::span<const std::byte> bytes, std::shared_ptr<std::atomic<bool>> released)
        : SingleBuffer(const_cast<std::byte*>(bytes.data()), bytes.size(), bytes.size()),
          released_(std::move(released)) {}
    ~ReleasingView() override { released_->store(true, std::memory_order_release); }
    ReleasingView(const ReleasingView&) = delete;
    ReleasingView& operator=(const ReleasingView&) = delete;

private:
    std::shared_ptr<std::atomic<bool>> released_;
};

// MPI matching: the context exactly, the source and tag or their wildcards.
inline bool matches(Context want_context, NodeId want_source, Tag want_tag, Context context, NodeId source,
                    Tag tag) noexcept {
    return want_context == context && (want_source == any_source || want_source == source) &&
           (want_tag == any_tag || want_tag == tag);
}

} // namespace detail

using namespace detail;

struct Communicator::Impl {
    struct Arrived {
        NodeId source;
        Tag tag;
        std::size_t size; // payload
        BufferPtr whole;  // envelope and payload, contiguous (an announcement: its envelope)
        std::uint8_t kind = kind_eager;
        std::uint32_t rdv_id = 0; // an announcement (kind_rts): the sender's id
        bool dead = false;        // an announcement whose sender was lost: its data never comes
        bool cleared = false;     // an announcement cleared by a receive that gave up: its data is on its way
        Context context{};
        RequestId sync_sender = 0; // a synchronous send to this node itself: completes when taken
        std::uint64_t seq = 0;     // arrival order (queue_locked): a cleared announcement goes back in its place
        int lane = -1;             // an eager message of a per-tag queue (Limits::tag_queues' index)
    };
    struct Request {
        bool is_send = false;
        NodeId peer = 0;
        Tag tag = 0;
        Context context{};
        bool into_span = false;
        std::span<std::byte> into;
        std::vector<std::span<std::byte>> into_list; // a list receive (into_span, into empty): filled in order
        std::size_t capacity() const noexcept {
            if (into_list.empty()) return into.size();
            std::size_t n = 0;
            for (const auto& piece : into_list)
                n += piece.size();
            return n;
        }
        void* user = nullptr;
        bool done = false;
        Completion completion;
        BufferPtr pending; // a send waiting for room in its node's queue
        std::size_t size = 0;
        RequestId id = 0;
        // Rendezvous. A send: its data message, kept until the receiver clears it,
        // and whether its announcement (pending, kind_rts) went. A receive: it
        // cleared an announcement and waits for the data.
        BufferPtr rdv_data;
        std::uint32_t rdv_id = 0;
        bool announced = false;
        bool awaiting_data = false;
        bool withdrawing = false;     // a send whose announcement went: cancel() asked the receiver to withdraw it
        Arrived announcement{};       // a receive awaiting data: what it cleared, to put back if it gives up
        std::uint32_t request_id = 0; // a receive that told its source (kind_request): the id it gave
        int lane = -1;                // an eager send of a per-tag queue, counted in lane_in_flight
        std::size_t lane_bytes = 0;
        // One copy. A send of kept memory (post_send_in_place): the caller's bytes, read
        // when the receiver clears the announcement (written into its buffer, or copied
        // into the data message then). A receive into a span posted in place may give
        // its buffer to a sender of this host (in_place); single_copy once it did (then
        // it waits for kind_written or kind_data, and cannot be cancelled).
        bool kept = false;
        std::span<const std::byte> kept_bytes;
        bool in_place = false;
        bool single_copy = false;
        OfferedRange offered; // the buffer while a sender of this host may write into it
        // A send whose data message holds the caller's memory (a ReleasingView, no
        // copy): set when the view was made; releasing once the node took the message,
        // the send then completes when the node let the view go.
        std::shared_ptr<std::atomic<bool>> released;
        bool releasing = false;
    };
    using RdvKey = std::pair<NodeId, std::uint32_t>; // (peer, the sender's rendezvous id)

    Impl(NodeFactory& f, const std::vector<NodeId>& peers, Limits l)
        : factory(f), factory_life(f.lifetime()), limits(l), self(f.self_id()) {
        group = factory.create_group();
        for (NodeId id : peers) {
            if (id == self || nodes.count(id) != 0) continue;
            auto node = factory.create_node(id);
            nodes.emplace(id, node);
            group->add(node);
        }
        for (const auto& [id, node] : nodes)
            index.emplace_back(id, node.get());
        if (nodes.size() == 1) single.store(nodes.begin()->second.get());
        single_copy_on = limits.single_copy && single_copy_allowed_by_environment();
        for (const auto& [id, node] : nodes)
            if (factory.technology_of(id) == "sci") same_host.insert(id);
        if (limits.rendezvous_window == 0) throw UsageError("comm: Limits::rendezvous_window is 0; at least 1");
        const std::size_t envelopes = std::max<std::size_t>(nodes.size(), 1) * limits.rendezvous_window * header_size;
        if (limits.unexpected_limit < envelopes)
            throw UsageError("comm: unexpected_limit (comm.unexpected_limit) is " +
                             std::to_string(limits.unexpected_limit) + " bytes, less than the " +
                             std::to_string(envelopes) + " the announcements of " + std::to_string(nodes.size()) +
                             " peers may take (" + std::to_string(limits.rendezvous_window) +
                             " each, Limits::rendezvous_window, of " + std::to_string(header_size) + " bytes)");
    }

    NodeFactory& factory;                         // read only while factory_life holds
    const std::weak_ptr<const void> factory_life; // expired once the factory was destroyed
    Communicator* owner = nullptr;                // for the public calls recv_posted makes
    const Limits limits;
    std::uint64_t max_message_size = 0; // of the configuration; 0: not known (peers constructor)
    const NodeId self;
    std::map<NodeId, NodePtr> nodes;             // changes under mutex and peers_mutex (peers found at run time)
    std::vector<std::pair<NodeId, Node*>> index; // the constructor's nodes, sorted by id: node_of
    std::atomic<Node*> single{nullptr};          // the only peer's node, when there is one
    std::unique_ptr<DynamicGroup> group;

    // Peers found at run time (docs/communicator.md): a server's clients (the
    // factory's runtime_peer ids, polled by admit_runtime_locked) and the servers a
    // client looked up. Their nodes join `nodes` and `added` at once (sends find them,
    // node_of), and the group (receives) when no thread waits in it (join_locked).
    // A client (a run-time id) dropped or lost is released once nothing of it is
    // left to read and no thread waits in the nodes (release_retired_locked): its
    // node leaves `nodes`, `added` and the group, and the factory forgets it, so that
    // a server's memory does not grow with every client that came and went. The
    // constructor's nodes and looked-up servers are never removed. A Node* of an
    // added peer is therefore used only under mutex or with the node held
    // (node_for_send).
    mutable std::mutex peers_mutex;     // nodes, added: for readers without mutex
    std::map<NodeId, Node*> added;      // under peers_mutex
    std::atomic<bool> has_added{false}; // !added.empty()
    std::vector<NodePtr> unjoined;      // added, not in the group yet (mutex)
    std::set<NodeId> retiring;          // run-time clients dropped or lost, not released yet (mutex)
    std::uint32_t forgotten_seen = 0;   // the factory's runtime_peers_forgotten() at the last look (mutex)
    // mutex: a run-time client dropped or lost is to be released.
    void retire_locked(NodeId id) {
        if (id >= first_runtime_id && id != any_source && added.count(id) != 0) retiring.insert(id);
    }
    // mutex, not pulling: the retiring clients of which nothing is queued are released.
    void release_retired_locked();
    void release_locked(NodeId id);
    // Whether a message of the peer waits to be read, or a request waits on it (mutex).
    [[nodiscard]] bool holds_locked(NodeId id) const;
    // The id is of a run-time client this communicator looked at already (taken in, or
    // gone before it could be): not a peer now means released.
    std::atomic<std::uint32_t> runtime_looked{0}; // runtime_taken, for readers without mutex
    [[nodiscard]] bool runtime_client(NodeId id) const noexcept {
        return id >= first_runtime_id && id != any_source &&
               id - first_runtime_id < runtime_looked.load(std::memory_order_acquire);
    }
    // Sends in place whose data message the nodes still hold (Request::releasing).
    std::vector<RequestId> releasing;
    // Those whose memory the nodes let go complete (mutex).
    void complete_released_locked();
    // The data message of a send in place: its envelope and a view of the caller's
    // bytes (r.released is set; the send completes when the view is let go).
    BufferPtr make_view_message(Request& r, std::uint8_t kind);
    std::uint32_t runtime_taken = 0; // the factory's runtime peers looked at (mutex)
    void add_peer_locked(NodeId id, NodePtr node);
    void join_locked();
    // mutex, not pulling: run-time clients that reached the factory join, those it
    // forgot are released, and added peers join the group (admit_clients_locked). No
    // more than one virtual call while no peer was ever added and no client came
    // (every receive of recv_into's fast path makes it).
    void admit_runtime_locked() {
        if (runtime_taken == 0 && !has_added.load(std::memory_order_relaxed) && factory.runtime_peers_seen() == 0)
            return;
        admit_clients_locked();
    }
    void admit_clients_locked();

    mutable std::mutex mutex;
    // A thread waits in the nodes (Pull). Set under mutex; its end is too, except
    // recv_view_step's own match, which ends it without the mutex (Pull::end_unlocked): atomic,
    // so that the threads that look at it under mutex see that end.
    std::atomic<bool> pulling{false};
    bool recv_waits = false; // recv's last first look without waiting found nothing (recv)
    std::uint32_t recv_count = 0;
    std::condition_variable changed;
    // Threads asleep on `changed` (changed under mutex; Pull::end_unlocked reads it without).
    std::atomic<int> sleeping{0};
    // Whether a send waits in the backlog (sync_backlogged_locked): send's fast path
    // reads it without the mutex, and goes through the backlog when it is set.
    std::atomic<bool> backlogged{false};
    std::deque<Arrived> unexpected;
    std::deque<Arrived> bmi_unexpected; // post_send_unexpected's messages
    std::size_t unexpected_bytes = 0;
    std::unordered_map<RequestId, Request> requests;
    // The posted receives not matched yet, oldest first, with what they match: a
    // message is checked against them without a look-up of each request (a rank of
    // msgpass's MPI always has one per peer, in a context no message uses).
    struct Expected {
        RequestId id;
        Context context;
        NodeId peer;
        Tag tag;
    };
    std::deque<Expected> expected;
    // Whether a posted receive matches a message of (context, source, tag).
    [[nodiscard]] bool expected_match_locked(Context context, NodeId source, Tag tag) const noexcept {
        for (const Expected& e : expected)
            if (matches(e.context, e.peer, e.tag, context, source, tag)) return true;
        return false;
    }
    // Whether a posted receive could match a message that a receive of (context,
    // source, tag) matches: the same context, and the sources and tags equal or either
    // a wildcard.
    [[nodiscard]] bool expected_overlap_locked(Context context, NodeId source, Tag tag) const noexcept {
        for (const Expected& e : expected)
            if (e.context == context && (e.peer == any_source || source == any_source || e.peer == source) &&
                (e.tag == any_tag || tag == any_tag || e.tag == tag))
                return true;
        return false;
    }
    std::map<NodeId, std::deque<RequestId>> backlog;
    std::set<NodeId> lost;
    RequestId next_id = 1;
    CommStats counters;
    // Rendezvous: own announcements not yet cleared (sender), cleared announcements
    // waiting for their data (receiver), clear-to-send messages waiting for room in
    // their node's queue.
    std::uint32_t next_rdv_id = 1;
    // A rendezvous send's number, once its data message (size bytes and the envelope)
    // is known to fit max_message_size; MessageTooLarge naming dest otherwise.
    std::uint32_t announce(NodeId dest, std::size_t size) {
        if (max_message_size != 0 && size > max_message_size - header_size)
            throw MessageTooLarge("comm: send to " + describe(dest) + ": " + std::to_string(size) +
                                  " bytes and the 24-byte envelope, more than max_message_size (" +
                                  std::to_string(max_message_size) + ")");
        std::lock_guard lock(mutex);
        return next_rdv_id++;
    }
    std::map<RdvKey, RequestId> announced;
    std::map<NodeId, std::size_t> announced_count;
    std::map<RdvKey, RequestId> awaiting;
    std::set<RdvKey> queued_rts; // announcements in the unexpected queue (not dead; cleared ones too)
    // Cleared announcements back in the unexpected queue (their receive gave up), per
    // peer, oldest first: at most rendezvous_window each (return_locked).
    std::map<NodeId, std::deque<std::uint32_t>> returned;
    std::uint64_t next_seq = 1; // arrival order of the messages queue_locked sees
    std::map<NodeId, std::deque<BufferPtr>> control_backlog;
    // Sends whose announcement a receiver cleared, their data not gone yet: the data
    // goes (written into the receiver's buffer, or as a message) after the messages
    // that arrived with the clear-to-send were dispatched (progress, recv), not inside
    // that dispatch, so that a node which writes many large messages still answers its
    // peer's announcements first and both directions move at once.
    struct Cleared {
        RequestId id = 0;
        NodeId peer = 0;
        bool has_target = false;
        SingleCopyTarget target{};
    };
    std::deque<Cleared> cleared_sends;
    // One copy: whether it is on (Limits::single_copy and the environment), the peers
    // reached through sci (this host), and per peer the pid its first target named (a
    // later target naming another is refused) or that writing to it is not permitted
    // (EPERM, ENOSYS: every send to it goes through the technology from then on).
    bool single_copy_on = false;
    std::set<NodeId> same_host;
    struct SingleCopyPeer {
        std::uint32_t pid = 0;
        bool refused = false;
    };
    std::map<NodeId, SingleCopyPeer> single_copy_peers;
    // The requested queue, sender's side: the receives each peer posted for this node
    // and told it of (kind_request), oldest first, at most rendezvous_window per peer
    // (a request whose receive took another message meanwhile is stale: the oldest go
    // first). A large send that one matches goes at once and uses it.
    struct Requested {
        Context context{};
        Tag tag = 0; // or any_tag
        std::uint64_t capacity = 0;
        std::uint32_t id = 0; // the receiver's: a clear-to-send naming it withdraws it
    };
    std::map<NodeId, std::deque<Requested>> requested;
    std::atomic<bool> any_requested{false}; // !requested.empty(), for send_any without the mutex
    // Per-tag queues (Limits::tag_queues). Sender: bytes of each (peer, lane) sent and
    // not yet credited back, and the sends held until credit comes. Receiver: bytes of
    // each (peer, lane) arrived and not yet taken by the application (outside
    // unexpected_limit: lanes_held), and taken but not yet credited.
    using LaneKey = std::pair<NodeId, int>;
    std::map<LaneKey, std::size_t> lane_in_flight;
    std::map<LaneKey, std::deque<RequestId>> lane_backlog;
    std::map<LaneKey, std::size_t> lane_unread;
    std::map<LaneKey, std::size_t> lane_freed;
    std::size_t lanes_held = 0;
    // The lane of an eager message's tag, or -1 (Limits::tag_queues is short).
    int lane_of(Tag tag) const noexcept {
        for (std::size_t i = 0; i < limits.tag_queues.size(); ++i)
            if (tag >= limits.tag_queues[i].first && tag <= limits.tag_queues[i].last) return static_cast<int>(i);
        return -1;
    }
    // Receiver: an eager message of a lane arrived (counted until taken).
    void lane_arrived_locked(Arrived& m) {
        if (limits.tag_queues.empty() || m.source == self || (m.lane = lane_of(m.tag)) < 0) return;
        lane_unread[{m.source, m.lane}] += m.whole->size();
        lanes_held += m.whole->size();
    }
    // Receiver: the application took (or drop discarded) bytes of (source, lane): credit
    // goes back once a quarter of the lane's bound was taken.
    void lane_taken_locked(NodeId source, int lane, std::size_t bytes);
    // Sender: credit for (source, lane) came back; held sends that now fit go.
    void on_credit_locked(NodeId source, int lane, std::uint64_t bytes);
    // Sender: whether a send of bytes may go in (peer, lane) now.
    bool lane_fits_locked(const LaneKey& key, std::size_t bytes) const {
        auto it = lane_in_flight.find(key);
        const std::size_t in_flight = it == lane_in_flight.end() ? 0 : it->second;
        const std::size_t limit = limits.tag_queues[static_cast<std::size_t>(key.second)].limit;
        // Up to the bound, and always while below the quarter the receiver may keep
        // uncredited (so that a message larger than what is left never waits forever).
        return in_flight + bytes <= limit || in_flight <= limit / 4;
    }
    // Sends waiting for a lost peer (its backlog, a lane's held sends) complete peer_lost.
    void fail_sends_locked(const std::deque<RequestId>& ids, const std::string& reason) {
        for (RequestId id : ids) {
            auto& r = requests.at(id);
            r.pending.reset();
            r.completion.status = Status::peer_lost;
            r.completion.error = reason;
            r.done = true;
        }
    }
    // Both: a lost or dropped peer's lanes are forgotten (what it sent and this node
    // did not read yet excepted: it stays receivable); its held sends fail.
    void lane_loss_locked(NodeId peer, const std::string& reason);

    // BMI's completion contexts: the requests added to each (add_to), not yet collected.
    std::map<std::uint32_t, std::vector<RequestId>> completion_contexts;
    std::uint32_t next_completion_context = 1;
    // Memory of messages of bytes, reused (msgpass/kit/pool.hpp), and the largest
    // size the factory's create_buffer accepted (make_message).
    const std::shared_ptr<kit::BufferPool> pool = std::make_shared<kit::BufferPool>(pooled_from, pool_keep_bytes);
    std::atomic<std::size_t> sizes_checked{0};

    // The factory-lifetime contract (node_factory.hpp) for the communicator: every
    // public call but self_id, peers and stats starts here, so that none reaches the
    // factory or its nodes once the factory was destroyed.
    // (inline, one load: every call checks it; the error out of line)
    void check_factory(const char* call) const {
        if (factory_life.expired()) [[unlikely]]
            factory_gone(call);
    }
    [[noreturn, gnu::cold, gnu::noinline]] void factory_gone(const char* call) const {
        throw UsageError(std::string("comm: ") + call + " on the communicator of node " + std::to_string(self) +
                         " after its factory was destroyed: a communicator may be dropped after its factory, "
                         "not used");
    }

    std::string describe(NodeId id) const {
        std::lock_guard lock(peers_mutex);
        auto it = nodes.find(id);
        std::string s = "node " + std::to_string(id);
        if (it != nodes.end() && !it->second->name().empty()) s += " (" + it->second->name() + ")";
        return s;
    }

    // The node of one of the constructor's peers, or null.
    Node* indexed_node(NodeId id) const noexcept {
        if (Node* one = single.load(std::memory_order_relaxed); one != nullptr && id == index.front().first) return one;
        auto it = std::lower_bound(index.begin(), index.end(), id,
                                   [](const std::pair<NodeId, Node*>& e, NodeId n) { return e.first < n; });
        return it != index.end() && it->first == id ? it->second : nullptr;
    }
    // The node of a peer, or null when id is not one. An added peer's may be released
    // by another thread once the caller lets go of mutex: only a null test then.
    Node* node_of(NodeId id) const noexcept {
        if (Node* n = indexed_node(id)) return n;
        if (!has_added.load(std::memory_order_acquire)) [[likely]]
            return nullptr;
        std::lock_guard lock(peers_mutex);
        auto a = added.find(id);
        return a != added.end() ? a->second : nullptr;
    }
    // The same for a send without mutex: an added peer's node is held in keep, so that
    // a release meanwhile does not free it under the send.
    Node* node_for_send(NodeId id, NodePtr& keep) const {
        if (Node* n = indexed_node(id)) return n;
        if (!has_added.load(std::memory_order_acquire)) [[likely]]
            return nullptr;
        std::lock_guard lock(peers_mutex);
        auto a = nodes.find(id);
        if (a == nodes.end()) return nullptr;
        keep = a->second;
        return keep.get();
    }
    // The node of a peer under mutex, or null (a run-time client released).
    Node* node_locked(NodeId id) const {
        auto it = nodes.find(id);
        return it != nodes.end() ? it->second.get() : nullptr;
    }

    // A peer, or this node itself (self_ok: sends and receives in a context).
    void check_peer(NodeId id, bool wildcard_ok, const char* what, bool self_ok = false) const {
        if ((wildcard_ok && id == any_source) || (self_ok && id == self) || node_of(id) != nullptr) return;
        not_a_peer(id, what);
    }
    [[noreturn]] void not_a_peer(NodeId id, const char* what) const;

    static void check_tag(Tag tag, bool wildcard_ok, const char* what) {
        if (tag >= 0 || (wildcard_ok && tag == any_tag)) return;
        negative_tag(tag, what);
    }
    [[noreturn]] static void negative_tag(Tag tag, const char* what);

    RequestId new_id_locked() {
        if (requests.size() >= limits.max_requests)
            throw UsageError("comm: " + std::to_string(requests.size()) +
                             " requests are live already (Limits::max_requests); collect completions first");
        return next_id++;
    }

    // ---------------------------------------------------------------- receive side (matching.cpp)

    void fill_receive(Completion& c, Request& r, Arrived&& m);

    // A message from a node: checked, then given to the first posted receive that
    // matches, else (an eager message matching `want`, for recv's fast path) put into
    // *want->out, else queued as unexpected. Returns the reason when it was malformed.
    struct Want {
        Context context;
        NodeId source;
        Tag tag;
        std::optional<Message>* out;
    };
    std::string dispatch_locked(BufferPtr whole, const Want* want = nullptr);
    void queue_locked(Arrived&& m, const Want* want);

    void handle_loss_locked(NodeId peer, const std::string& reason);

    // ------------------------------------------------------------ rendezvous (rendezvous.cpp)

    // Receive r (live in requests) matched announcement m: registers it as waiting for
    // the data and sends the clear-to-send (unless m was cleared already: then the
    // data is on its way).
    void clear_to_send_locked(Request& r, Arrived&& m);
    // A clear-to-send from source: the announced send's data goes. Returns the reason
    // when it names no announcement.
    // withdrawn: the id of a request of source's that the receive which cleared it had
    // sent (the receive took this announcement, not requested data), or 0.
    std::string on_clear_to_send_locked(NodeId source, std::uint32_t id, std::uint64_t withdrawn,
                                        const SingleCopyTarget* target = nullptr);
    // The oldest cleared send's data goes (cleared_sends): written into the receiver's
    // buffer, else handed to the node (or behind the peer's backlog).
    void send_cleared_locked();
    // Cleared sends' data goes, one at a time, with what arrived meanwhile dispatched
    // between them (when no other thread takes from the nodes). Throws Error for a
    // malformed message, as progress.
    void send_all_cleared_locked();
    // Up to drain_limit messages taken from the nodes and dispatched (mutex, not
    // pulling); throws Error for a malformed one.
    void drain_locked();
    // The data of a cleared announcement: completes its receive. Returns the reason
    // when it belongs to none.
    std::string on_data_locked(NodeId source, const WireEnvelope& w, BufferPtr whole);
    // Sends a header-only control message, or queues it while the node's queue is full.
    void send_control_locked(NodeId peer, std::uint8_t kind, std::uint32_t id, Context context = Context{}, Tag tag = 0,
                             std::uint64_t size = 0, std::span<const std::byte> body = {});
    // Receive r clearing source's announcement: whether it gives its buffer (one copy).
    bool gives_buffer_locked(const Request& r, NodeId source) const {
        return single_copy_on && r.in_place && r.into_list.empty() && !r.into.empty() && same_host.count(source) != 0;
    }
    // Send r's announcement was cleared by a receive that gave its buffer (target):
    // writes the data into it and makes r.pending the kind_written answer; true when
    // it did (or r failed: the receiver's process is gone), false when the data must
    // go through the technology instead.
    bool write_single_copy_locked(Request& r, NodeId dest, const SingleCopyTarget& target);
    // kind_written: the sender wrote the data of rendezvous w.id into the receive's
    // buffer: that receive completes. Returns the reason when it belongs to none.
    std::string on_written_locked(NodeId source, const WireEnvelope& w);
    // A send of the caller's memory kept until completion (post_send_in_place).
    Posted send_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user,
                         bool sync);
    // A receive posted into the expected queue: tells its source (the requested queue)
    // when it is one peer's and holds more than eager_limit bytes.
    void request_locked(Request& r);
    // A large send to dest of (context, tag, size) that a request of dest allows to go
    // at once; takes that request.
    bool take_request_locked(NodeId dest, Context context, Tag tag, std::size_t size);
    void retry_control_locked();
    void rendezvous_loss_locked(NodeId peer, const std::string& reason);
    // cancel() of a send whose announcement went: asks the receiver to withdraw it.
    void withdraw_locked(Request& r);
    // A withdrawal of source's announcement id: taken out of the unexpected queue
    // (answered kind_withdrawn) unless a receive cleared it already (then its data
    // comes as the sender's answer to that clear-to-send). Returns the reason when
    // malformed.
    std::string on_withdraw_locked(NodeId source, std::uint32_t id);
    // The receiver withdrew announcement id: its send completes cancelled.
    void on_withdrawn_locked(NodeId source, std::uint32_t id);
    // Receive r, waiting for the data of the announcement it cleared, was cancelled
    // (or its recv timed out): the announcement goes back into the unexpected queue in
    // its place, cleared, for the next receive that matches it; its data completes that
    // one (nothing is lost, and the sender's order holds). A sender that keeps
    // rendezvous_window (the same at both ends) never has more announcements cleared
    // and not yet answered with data (they were all uncleared at its end when the
    // oldest one's data went); beyond that many the peer breaks the protocol and its
    // oldest returned announcement is dropped and counted malformed (its clear-to-send
    // dropped if still unsent; its data, if it comes, reported as malformed), so that a
    // peer announcing without end costs bounded memory.
    void return_locked(Request& r);
    // The returned announcement (source, id) in the unexpected queue, or end().
    std::deque<Arrived>::iterator find_returned_locked(NodeId source, std::uint32_t id);

    Posted post_recv(Context context, NodeId source, Tag tag, bool into_span, std::span<std::byte> into, void* user,
                     std::vector<std::span<std::byte>> into_list = {}, bool in_place = false);

    // The oldest unexpected message matching (context, source, tag), or end().
    std::deque<Arrived>::iterator find_unexpected_locked(Context context, NodeId source, Tag tag) {
        auto it = unexpected.begin();
        while (it != unexpected.end() && !matches(context, source, tag, it->context, it->source, it->tag))
            ++it;
        return it;
    }
    // A message taken by a receive: the synchronous send to itself it came from
    // completes.
    void taken_locked(const Arrived& m) {
        if (m.sync_sender != 0) complete_self_send_locked(m.sync_sender);
        if (m.lane >= 0) lane_taken_locked(m.source, m.lane, m.whole->size());
    }
    void complete_self_send_locked(RequestId id);
    // A send to this node itself: the message (eager, made by make_message) goes into
    // its own matching; a synchronous one completes when a receive takes it.
    Posted self_send(Context context, Tag tag, BufferPtr whole, std::size_t size, void* user, bool sync);
    // Takes an unexpected eager message out of the queue as a Message.
    Message take_locked(std::deque<Arrived>::iterator it);
    // recv's fast path (no request): the message, nullopt on timeout; an announcement
    // (rendezvous) is left to a posted receive (recv_posted).
    std::optional<Message> recv(Context context, NodeId source, Tag tag, std::chrono::nanoseconds timeout);
    // recv_into's fast path: one blocking step of the only peer's node, its message
    // lent (Node::receive_view). An eager message matching (context, source, tag) and no
    // older posted receive is copied into into (held takes the view); anything else is
    // dispatched as a pull's message. nullopt when recv must go on (nothing matching
    // came, or the step could not be taken).
    std::optional<Envelope> recv_view_step(Node* one, Context context, NodeId source, Tag tag,
                                           std::span<std::byte> into, MessageView* held);
    std::optional<Message> recv_posted(Context context, NodeId source, Tag tag, SteadyTime deadline);

    std::vector<Message> take_unexpected_locked(std::size_t max);

    // ------------------------------------------------------------------- progress (progress.cpp)

    // Takes one message from the nodes (pulling set by this thread, mutex not held).
    BufferPtr pull(std::chrono::nanoseconds timeout);
    // Takes one message from the nodes without waiting (mutex held, pulling not set).
    BufferPtr pull_locked();

    // Non-blocking: retries queued sends, takes what arrived (up to drain_limit
    // messages, and not while the unexpected queue is full). Throws Error for a
    // malformed message after queueing the good ones before it.
    void progress();

    // One blocking step of the thread that set `pulling`, at most `step`: while a send
    // waits in the backlog behind a node's full queue, it waits in that node's flush
    // (the backlog moves when the node's queue does, not when a message arrives; at
    // most 1 ms, so that arrivals are taken meanwhile); else it waits for a message
    // (pull). Returns the message, if one came.
    BufferPtr wait_step(std::chrono::nanoseconds step);

    // The nodes taken by this thread for one wait in them (the Node contract has one
    // receiving thread): made with the mutex held by lock and `pulling` not set, it
    // sets `pulling` and lets the mutex go; on its end (a return, or an exception out
    // of the wait) it takes the mutex back and ends the pull, unless it was ended
    // already (end_locked, end_unlocked).
    class Pull {
    public:
        Pull(Impl& im, std::unique_lock<std::mutex>& lock) : im_(im), lock_(lock) {
            im.pulling.store(true, std::memory_order_relaxed); // (published by the unlock)
            lock.unlock();
        }
        Pull(const Pull&) = delete;
        Pull& operator=(const Pull&) = delete;
        ~Pull() {
            if (!ended_) end_locked();
        }
        // Takes the mutex back and ends the pull.
        void end_locked() {
            ended_ = true;
            lock_.lock();
            im_.end_pull_locked();
        }
        // Ends the pull without the mutex (left unlocked): the waiters asleep, if
        // any, are woken under it.
        void end_unlocked() {
            ended_ = true;
            im_.pulling.store(false); // seq_cst, against sleep_locked's (Dekker)
            if (im_.sleeping.load() != 0) {
                std::lock_guard relock(im_.mutex);
                im_.changed.notify_all();
            }
        }

    private:
        Impl& im_;
        std::unique_lock<std::mutex>& lock_;
        bool ended_ = false;
    };

    // A blocking step as the one thread that takes from the nodes (lock held on entry
    // and on return, not while waiting; pulling not set on entry). On return the
    // waiters that could not take the nodes meanwhile (asleep on `changed`) are woken,
    // so that one of them takes them over.
    BufferPtr blocking_pull_locked(std::unique_lock<std::mutex>& lock, std::chrono::nanoseconds step) {
        admit_runtime_locked();
        if (!releasing.empty()) complete_released_locked();
        Pull pull(*this, lock);
        return wait_step(step);
    }
    void end_pull_locked() {
        pulling.store(false);
        if (sleeping.load(std::memory_order_relaxed) != 0) changed.notify_all();
    }

    // Sleeps on `changed` (mutex held by lock) at most step, or until something
    // changed: a completion, a message queued, the nodes left by the thread that
    // waited in them (unless for_room: then only room in the unexpected queue
    // matters). Returns at once when no thread waits in the nodes: the caller takes
    // them itself. The caller looks at its condition again afterwards.
    // (sleeping is counted before pulling is read: a pull ended without the mutex
    // either is seen here or sees this sleeper, and then wakes it under the mutex.)
    void sleep_locked(std::unique_lock<std::mutex>& lock, std::chrono::nanoseconds step, bool for_room = false) {
        sleeping.fetch_add(1); // seq_cst, against Pull::end_unlocked's
        if (!for_room && !pulling.load()) {
            sleeping.fetch_sub(1, std::memory_order_relaxed);
            return;
        }
        changed.wait_for(lock, step);
        sleeping.fetch_sub(1, std::memory_order_relaxed);
    }

    // Blocks until done() (called under mutex) or the deadline; the caller makes
    // progress meanwhile. True when done.
    template <class Done>
    bool wait_until(Done&& done, SteadyTime deadline) {
        for (;;) {
            {
                std::lock_guard lock(mutex);
                if (done()) return true;
            }
            progress();
            const auto left = time_left(deadline);
            std::unique_lock lock(mutex);
            if (done()) return true;
            if (left <= std::chrono::nanoseconds::zero()) return false;
            const auto step = std::min(left, slice);
            const bool room = room_locked();
            if (!pulling && room) {
                auto b = blocking_pull_locked(lock, step);
                if (b) {
                    const std::string bad = dispatch_locked(std::move(b));
                    if (!bad.empty()) throw Error(bad);
                }
            } else {
                sleep_locked(lock, step, !room);
            }
        }
    }

    // ------------------------------------------------------------------- send side (send.cpp)

    // Hands a send to its node; true when it is done (sent or failed).
    bool try_send_locked(Request& r);

    // send's fast path (no request): hands an eager message to dest's node when
    // nothing waits before it for that peer. True when the node took it; false when
    // it must wait (whole is left as it was); throws PeerLost when dest died.
    // A tag of a per-tag queue is never sent here: its lane's count is kept under the
    // mutex (post_send).
    bool send_now(NodeId dest, Tag tag, BufferPtr& whole);
    // The same for a small eager message (payload up to bytes_send_limit) with no
    // Buffer at all: its envelope and payload are put together on the stack and the
    // node copies them (Node::send_bytes; sci straight into the peer's slot, tcp into
    // its window). False when it must wait or go by another way (nothing was sent).
    bool send_bytes_now(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes);
    // A node whose send queue holds messages that the backlog waits behind, if any.
    Node* stalled_node_locked() const;

    void retry_backlog_locked();
    void sync_backlogged_locked() {
        bool any = false;
        for (const auto& [peer, queue] : backlog)
            if (!queue.empty()) {
                any = true;
                break;
            }
        backlogged.store(any, std::memory_order_release);
    }

    // whole is the message (eager), or the announcement when rdv_data is the data
    // message of a rendezvous with id rdv_id.
    // laned: an eager message, counted in its per-tag queue's lane when its tag has one
    // (false for BMI's unexpected messages).
    // kept: a send of the caller's memory (kept_bytes), announced (rdv_id), no rdv_data.
    Posted post_send(Context context, NodeId dest, Tag tag, BufferPtr whole, std::size_t size, void* user,
                     BufferPtr rdv_data = {}, std::uint32_t rdv_id = 0, bool laned = true, bool kept = false,
                     std::span<const std::byte> kept_bytes = {}, std::shared_ptr<std::atomic<bool>> released = {});

    BufferPtr make_message(Context context, Tag tag, std::span<const std::byte> bytes, std::uint8_t kind = kind_eager,
                           std::uint32_t id = 0);
    // A list send's pieces (BMI's list I/O), gathered into the message in order.
    struct Pieces {
        std::span<const std::span<const std::byte>> list;
        std::size_t total = 0;
    };
    BufferPtr make_message(Context context, Tag tag, const Pieces& pieces, std::uint8_t kind = kind_eager,
                           std::uint32_t id = 0);
    // A message of size payload bytes with its envelope written, the payload left to
    // the caller (reused memory from 4 KiB on, else the factory's buffer).
    BufferPtr allocate_message(Context context, Tag tag, std::size_t size, std::uint8_t kind, std::uint32_t id);

    // keep_shell: a PayloadBuffer payload is left empty in `payload` (the caller drops
    // it after the send, off the message's path); else payload is null afterwards.
    BufferPtr make_message(Context context, Tag tag, BufferPtr&& payload, std::uint8_t kind = kind_eager,
                           std::uint32_t id = 0, bool keep_shell = false);

    // A send of any kind of payload: eager up to limits.eager_limit, else (or when
    // sync) by rendezvous; to this node itself, into its own matching.
    template <class Payload>
    Posted send_any(Context context, NodeId dest, Tag tag, Payload&& payload, std::size_t size, void* user,
                    bool sync = false) {
        if (dest == self)
            return self_send(context, tag, make_message(context, tag, std::forward<Payload>(payload)), size, user,
                             sync);
        if (size <= limits.eager_limit && !sync)
            return post_send(context, dest, tag, make_message(context, tag, std::forward<Payload>(payload)), size,
                             user);
        if (!sync && any_requested.load(std::memory_order_acquire)) {
            bool go = false;
            {
                std::lock_guard lock(mutex);
                go = take_request_locked(dest, context, tag, size);
            }
            if (go) // its receive is posted: the data goes at once (the requested queue)
                return post_send(context, dest, tag, make_message(context, tag, std::forward<Payload>(payload)), size,
                                 user);
        }
        const std::uint32_t id = announce(dest, size);
        auto data = make_message(context, tag, std::forward<Payload>(payload), kind_data, id);
        auto rts = std::make_unique<HeapBuffer>(header_size);
        write_envelope(rts->data(), context, tag, size, kind_rts, id);
        return post_send(context, dest, tag, std::move(rts), size, user, std::move(data), id);
    }

    // ------------------------------------------------------------------- requests

    std::optional<Completion> collect_locked(RequestId id) {
        auto it = requests.find(id);
        if (it == requests.end() || !it->second.done) return std::nullopt;
        Completion c = std::move(it->second.completion);
        c.id = id;
        requests.erase(it);
        return c;
    }

    // The completed requests of a completion context, up to max, retired; ids
    // collected by test/wait meanwhile leave the context.
    std::vector<Completion> collect_context_locked(std::vector<RequestId>& ids, std::size_t max) {
        std::vector<Completion> out;
        for (auto it = ids.begin(); it != ids.end() && out.size() < max;) {
            if (requests.count(*it) == 0) {
                it = ids.erase(it);
            } else if (auto done = collect_locked(*it)) {
                out.push_back(std::move(*done));
                it = ids.erase(it);
            } else {
                ++it;
            }
        }
        return out;
    }

    void check_live_locked(RequestId id) const {
        if (requests.count(id) == 0)
            throw UsageError("comm: request " + std::to_string(id) +
                             " is not live (never posted, completed at once, or already collected)");
    }

    // Lanes' messages are bounded by their senders' credit, not by unexpected_limit.
    bool room_locked() const {
        return unexpected_bytes - std::min(lanes_held, unexpected_bytes) < limits.unexpected_limit;
    }
};

} // namespace msgpass::comm
