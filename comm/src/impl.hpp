// The communicator's private state and the pieces its sources share
// (docs/communicator.md). Not installed.
//
// Two locks: progress_mutex_ is held by the one thread that takes messages from the
// nodes (Node::receive has one receiving thread at a time); mutex_ guards the queues
// and the requests, and is never held while blocking in a node. Sends go to the
// nodes under mutex_, so that a message's place in its destination's order is the
// order of the posts.
#pragma once

#include <msgpass/comm.hpp>
#include <msgpass/deadline.hpp>

#include <algorithm>
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
    std::uint16_t flags;
    std::int32_t tag;
    std::uint32_t id; // rendezvous kinds: the sender's id of the exchange; else 0
    std::uint64_t size;
};
static_assert(sizeof(WireEnvelope) == 24);
constexpr std::uint32_t wire_magic = 0x4d43504d; // "MPCM"
constexpr std::uint8_t wire_version = 1;
constexpr std::uint8_t kind_eager = 1;
constexpr std::uint8_t kind_unexpected = 2; // BMI's unexpected class: test_unexpected only
constexpr std::uint8_t kind_rts = 3;        // request-to-send: the envelope of a large message, no payload
constexpr std::uint8_t kind_cts = 4;        // clear-to-send: the receiver posted a matching receive
constexpr std::uint8_t kind_data = 5;       // the payload of a cleared large message
constexpr std::size_t header_size = sizeof(WireEnvelope);

// How long one blocking pull lasts before a waiter looks at its requests again.
constexpr std::chrono::nanoseconds slice = 10ms;
// Messages taken from the nodes by one non-blocking progress call at most.
constexpr int drain_limit = 256;

// Writes an envelope at `at` (header_size bytes).
void write_envelope(std::byte* at, Tag tag, std::size_t size, std::uint8_t kind = kind_eager, std::uint32_t id = 0);

// The payload of a received message: a view past the envelope, owning the whole.
class PayloadBuffer final : public SingleBuffer {
public:
    PayloadBuffer(BufferPtr whole, std::size_t size) : whole_(std::move(whole)) {
        reset(whole_->single()->data() + header_size, size, size);
        set_source(whole_->source());
    }

private:
    BufferPtr whole_;
};

inline bool matches(NodeId want_source, Tag want_tag, NodeId source, Tag tag) noexcept {
    return (want_source == any_source || want_source == source) && (want_tag == any_tag || want_tag == tag);
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
    };
    struct Request {
        bool is_send = false;
        NodeId peer = 0;
        Tag tag = 0;
        bool into_span = false;
        std::span<std::byte> into;
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
    const Limits limits;
    std::uint64_t max_message_size = 0; // of the configuration; 0: not known (peers constructor)
    const NodeId self;
    std::map<NodeId, NodePtr> nodes;
    std::unique_ptr<DynamicGroup> group;

    std::mutex progress_mutex;
    mutable std::mutex mutex;
    std::condition_variable changed;
    std::deque<Arrived> unexpected;
    std::deque<Arrived> bmi_unexpected; // post_send_unexpected's messages
    std::size_t unexpected_bytes = 0;
    std::unordered_map<RequestId, Request> requests;
    std::deque<RequestId> expected;
    std::map<NodeId, std::deque<RequestId>> backlog;
    std::set<NodeId> lost;
    RequestId next_id = 1;
    CommStats counters;
    // Rendezvous: own announcements not yet cleared (sender), cleared announcements
    // waiting for their data (receiver), clear-to-send messages waiting for room in
    // their node's queue.
    std::uint32_t next_rdv_id = 1;
    std::map<RdvKey, RequestId> announced;
    std::map<NodeId, std::size_t> announced_count;
    std::map<RdvKey, RequestId> awaiting;
    std::set<RdvKey> abandoned; // cleared, then the receive was cancelled: the data is dropped
    std::map<NodeId, std::deque<BufferPtr>> control_backlog;

    // The factory-lifetime contract (node_factory.hpp) for the communicator: every
    // public call but self_id, peers and stats starts here, so that none reaches the
    // factory or its nodes once the factory was destroyed.
    void check_factory(const char* call) const {
        if (factory_life.expired()) [[unlikely]]
            throw UsageError(std::string("comm: ") + call + " on the communicator of node " + std::to_string(self) +
                             " after its factory was destroyed: a communicator may be dropped after its factory, "
                             "not used");
    }

    std::string describe(NodeId id) const {
        auto it = nodes.find(id);
        std::string s = "node " + std::to_string(id);
        if (it != nodes.end() && !it->second->name().empty()) s += " (" + it->second->name() + ")";
        return s;
    }

    void check_peer(NodeId id, bool wildcard_ok, const char* what) const {
        if (wildcard_ok && id == any_source) return;
        if (nodes.count(id) == 0) {
            std::string known;
            for (const auto& [n, _] : nodes)
                known += (known.empty() ? "" : ", ") + std::to_string(n);
            throw UsageError(std::string("comm: ") + what + ": node " + std::to_string(id) +
                             " is not a peer of this communicator (peers: " + known + ")");
        }
    }

    static void check_tag(Tag tag, bool wildcard_ok, const char* what) {
        if (tag >= 0 || (wildcard_ok && tag == any_tag)) return;
        throw UsageError(std::string("comm: ") + what + ": tag " + std::to_string(tag) +
                         " is negative (tags are 0 or more; any_tag receives any)");
    }

    RequestId new_id_locked() {
        if (requests.size() >= limits.max_requests)
            throw UsageError("comm: " + std::to_string(requests.size()) +
                             " requests are live already (Limits::max_requests); collect completions first");
        return next_id++;
    }

    // ---------------------------------------------------------------- receive side (matching.cpp)

    void fill_receive(Completion& c, Request& r, Arrived&& m);

    // A message from a node: checked, then given to the first posted receive that
    // matches, else queued as unexpected. Returns the reason when it was malformed.
    std::string dispatch_locked(BufferPtr whole);

    void handle_loss_locked(NodeId peer, const std::string& reason);

    // ------------------------------------------------------------ rendezvous (rendezvous.cpp)

    // Receive r (live in requests) matched announcement m: registers it as waiting for
    // the data and sends the clear-to-send.
    void clear_to_send_locked(Request& r, const Arrived& m);
    // A clear-to-send from source: the announced send's data goes. Returns the reason
    // when it names no announcement.
    std::string on_clear_to_send_locked(NodeId source, std::uint32_t id);
    // The data of a cleared announcement: completes its receive. Returns the reason
    // when it belongs to none.
    std::string on_data_locked(NodeId source, const WireEnvelope& w, BufferPtr whole);
    // Sends a header-only control message, or queues it while the node's queue is full.
    void send_control_locked(NodeId peer, std::uint8_t kind, std::uint32_t id);
    void retry_control_locked();
    void rendezvous_loss_locked(NodeId peer, const std::string& reason);

    Posted post_recv(NodeId source, Tag tag, bool into_span, std::span<std::byte> into, void* user);

    std::vector<Message> take_unexpected_locked(std::size_t max);

    // ------------------------------------------------------------------- progress (progress.cpp)

    // Takes one message from the nodes (progress_mutex held, mutex not).
    BufferPtr pull(std::chrono::nanoseconds timeout);

    // Non-blocking: retries queued sends, takes what arrived (up to drain_limit
    // messages, and not while the unexpected queue is full). Throws Error for a
    // malformed message after queueing the good ones before it.
    void progress();

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
            {
                std::lock_guard lock(mutex);
                if (done()) return true;
            }
            const auto left = time_left(deadline);
            if (left <= std::chrono::nanoseconds::zero()) return false;
            const auto step = std::min(left, slice);
            std::unique_lock p(progress_mutex, std::try_to_lock);
            bool can_pull = false;
            if (p) {
                std::lock_guard lock(mutex);
                can_pull = room_locked();
            }
            if (can_pull) {
                auto b = pull(step);
                if (b) {
                    std::string bad;
                    {
                        std::lock_guard lock(mutex);
                        bad = dispatch_locked(std::move(b));
                    }
                    if (!bad.empty()) throw Error(bad);
                }
            } else {
                if (p) p.unlock();
                std::unique_lock lock(mutex);
                changed.wait_for(lock, step, [&] { return done(); });
            }
        }
    }

    // ------------------------------------------------------------------- send side (send.cpp)

    // Hands a send to its node; true when it is done (sent or failed).
    bool try_send_locked(Request& r);

    void retry_backlog_locked();

    // whole is the message (eager), or the announcement when rdv_data is the data
    // message of a rendezvous with id rdv_id.
    Posted post_send(NodeId dest, Tag tag, BufferPtr whole, std::size_t size, void* user, BufferPtr rdv_data = {},
                     std::uint32_t rdv_id = 0);

    BufferPtr make_message(Tag tag, std::span<const std::byte> bytes, std::uint8_t kind = kind_eager,
                           std::uint32_t id = 0);

    BufferPtr make_message(Tag tag, BufferPtr&& payload, std::uint8_t kind = kind_eager, std::uint32_t id = 0);

    // A send of any kind of payload: eager up to limits.eager_limit, else by rendezvous.
    template <class Payload>
    Posted send_any(NodeId dest, Tag tag, Payload&& payload, std::size_t size, void* user) {
        if (size <= limits.eager_limit)
            return post_send(dest, tag, make_message(tag, std::forward<Payload>(payload)), size, user);
        if (max_message_size != 0 && size > max_message_size - header_size)
            throw MessageTooLarge("comm: send to " + describe(dest) + ": " + std::to_string(size) +
                                  " bytes and the 24-byte envelope, more than max_message_size (" +
                                  std::to_string(max_message_size) + ")");
        std::uint32_t id = 0;
        {
            std::lock_guard lock(mutex);
            id = next_rdv_id++;
        }
        auto data = make_message(tag, std::forward<Payload>(payload), kind_data, id);
        auto rts = std::make_unique<HeapBuffer>(header_size);
        write_envelope(rts->data(), tag, size, kind_rts, id);
        return post_send(dest, tag, std::move(rts), size, user, std::move(data), id);
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

    void check_live_locked(RequestId id) const {
        if (requests.count(id) == 0)
            throw UsageError("comm: request " + std::to_string(id) +
                             " is not live (never posted, completed at once, or already collected)");
    }

    bool room_locked() const { return unexpected_bytes < limits.unexpected_limit; }
};

} // namespace msgpass::comm
