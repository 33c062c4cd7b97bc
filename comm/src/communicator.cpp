// The communicator over Node and NodeFactory (docs/communicator.md).
//
// Two locks: progress_mutex_ is held by the one thread that takes messages from the
// nodes (Node::receive has one receiving thread at a time); mutex_ guards the queues
// and the requests, and is never held while blocking in a node. Sends go to the
// nodes under mutex_, so that a message's place in its destination's order is the
// order of the posts.
#include <msgpass/comm.hpp>
#include <msgpass/deadline.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace msgpass::comm {

const char* to_string(Status status) noexcept {
    switch (status) {
    case Status::success:
        return "success";
    case Status::truncated:
        return "truncated";
    case Status::cancelled:
        return "cancelled";
    case Status::peer_lost:
        return "peer_lost";
    }
    return "unknown";
}

namespace {

using namespace std::chrono_literals;

// The envelope as it travels in front of the payload, in host byte order (the
// supported hosts are little-endian).
struct WireEnvelope {
    std::uint32_t magic;
    std::uint8_t version;
    std::uint8_t kind;
    std::uint16_t flags;
    std::int32_t tag;
    std::uint32_t reserved;
    std::uint64_t size;
};
static_assert(sizeof(WireEnvelope) == 24);
constexpr std::uint32_t wire_magic = 0x4d43504d; // "MPCM"
constexpr std::uint8_t wire_version = 1;
constexpr std::uint8_t kind_eager = 1;
constexpr std::uint8_t kind_unexpected = 2; // BMI's unexpected class: test_unexpected only
constexpr std::size_t header_size = sizeof(WireEnvelope);

// How long one blocking pull lasts before a waiter looks at its requests again.
constexpr std::chrono::nanoseconds slice = 10ms;
// Messages taken from the nodes by one non-blocking progress call at most.
constexpr int drain_limit = 256;

void write_envelope(std::byte* at, Tag tag, std::size_t size, std::uint8_t kind = kind_eager) {
    const WireEnvelope w{wire_magic, wire_version, kind, 0, tag, 0, static_cast<std::uint64_t>(size)};
    std::memcpy(at, &w, sizeof w);
}

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

bool matches(NodeId want_source, Tag want_tag, NodeId source, Tag tag) noexcept {
    return (want_source == any_source || want_source == source) && (want_tag == any_tag || want_tag == tag);
}

} // namespace

struct Communicator::Impl {
    struct Arrived {
        NodeId source;
        Tag tag;
        std::size_t size; // payload
        BufferPtr whole;  // envelope and payload, contiguous
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
    };

    Impl(NodeFactory& f, const std::vector<NodeId>& peers, Limits l) : factory(f), limits(l), self(f.self_id()) {
        group = factory.create_group();
        for (NodeId id : peers) {
            if (id == self || nodes.count(id) != 0) continue;
            auto node = factory.create_node(id);
            nodes.emplace(id, node);
            group->add(node);
        }
    }

    NodeFactory& factory;
    const Limits limits;
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

    // ---------------------------------------------------------------- receive side

    void fill_receive(Completion& c, Request& r, Arrived&& m) {
        c.is_send = false;
        c.source = m.source;
        c.tag = m.tag;
        c.size = m.size;
        c.user = r.user;
        if (r.into_span) {
            const std::size_t n = std::min(m.size, r.into.size());
            if (n > 0) std::memcpy(r.into.data(), m.whole->single()->data() + header_size, n);
            c.bytes = n;
            c.status = n < m.size ? Status::truncated : Status::success;
        } else {
            c.bytes = m.size;
            c.buffer = std::make_unique<PayloadBuffer>(std::move(m.whole), m.size);
            c.status = Status::success;
        }
    }

    // A message from a node: checked, then given to the first posted receive that
    // matches, else queued as unexpected. Returns the reason when it was malformed.
    std::string dispatch_locked(BufferPtr whole) {
        const NodeId source = whole->source();
        if (whole->single() == nullptr) {
            auto copy = HeapBuffer::copy_of(*whole);
            copy->set_source(source);
            whole = std::move(copy);
        }
        WireEnvelope w{};
        std::string bad;
        if (whole->size() < header_size) {
            bad = std::to_string(whole->size()) + " bytes, shorter than the " + std::to_string(header_size) +
                  "-byte envelope";
        } else {
            std::memcpy(&w, whole->single()->data(), sizeof w);
            if (w.magic != wire_magic)
                bad = "bad magic word";
            else if (w.version != wire_version)
                bad = "envelope version " + std::to_string(w.version) + ", expected " + std::to_string(wire_version);
            else if (w.kind != kind_eager && w.kind != kind_unexpected)
                bad = "unknown message kind " + std::to_string(w.kind);
            else if (w.tag < 0)
                bad = "negative tag " + std::to_string(w.tag);
            else if (w.size != whole->size() - header_size)
                bad = "envelope says " + std::to_string(w.size) + " payload bytes, the message holds " +
                      std::to_string(whole->size() - header_size);
        }
        if (!bad.empty()) {
            ++counters.malformed;
            return "comm: malformed envelope from " + describe(source) + ": " + bad + "; the message was dropped";
        }
        lost.erase(source); // a message after a loss: the peer restarted
        Arrived m{source, w.tag, static_cast<std::size_t>(w.size), std::move(whole)};
        if (w.kind == kind_unexpected) {
            unexpected_bytes += m.whole->size();
            bmi_unexpected.push_back(std::move(m));
            changed.notify_all();
            return {};
        }
        for (auto it = expected.begin(); it != expected.end(); ++it) {
            auto& r = requests.at(*it);
            if (!matches(r.peer, r.tag, m.source, m.tag)) continue;
            fill_receive(r.completion, r, std::move(m));
            r.done = true;
            expected.erase(it);
            changed.notify_all();
            return {};
        }
        unexpected_bytes += m.whole->size();
        unexpected.push_back(std::move(m));
        changed.notify_all();
        return {};
    }

    void handle_loss_locked(NodeId peer, const std::string& reason) {
        lost.insert(peer);
        for (auto it = expected.begin(); it != expected.end();) {
            auto& r = requests.at(*it);
            if (r.peer != peer) {
                ++it;
                continue;
            }
            r.completion.status = Status::peer_lost;
            r.completion.source = peer;
            r.completion.tag = r.tag;
            r.completion.user = r.user;
            r.completion.error = reason;
            r.done = true;
            it = expected.erase(it);
        }
        if (auto b = backlog.find(peer); b != backlog.end()) {
            for (RequestId id : b->second) {
                auto& r = requests.at(id);
                r.pending.reset();
                r.completion.status = Status::peer_lost;
                r.completion.error = reason;
                r.done = true;
            }
            backlog.erase(b);
        }
        changed.notify_all();
    }

    bool room_locked() const { return unexpected_bytes < limits.unexpected_limit; }

    // Takes one message from the nodes (progress_mutex held, mutex not).
    BufferPtr pull(std::chrono::nanoseconds timeout) {
        try {
            return timeout <= std::chrono::nanoseconds::zero() ? group->receive() : group->receive(timeout);
        } catch (const PeerLost& e) {
            std::lock_guard lock(mutex);
            handle_loss_locked(e.peer(), e.what());
            return nullptr;
        }
    }

    // ------------------------------------------------------------------- send side

    // Hands a send to its node; true when it is done (sent or failed).
    bool try_send_locked(Request& r) {
        try {
            nodes.at(r.peer)->send(std::move(r.pending));
            r.completion.status = Status::success;
        } catch (const SendQueueFull&) {
            return false; // the buffer stays in r.pending
        } catch (const PeerLost& e) {
            r.pending.reset();
            r.completion.status = Status::peer_lost;
            r.completion.error = e.what();
            lost.insert(e.peer());
        }
        r.done = true;
        return true;
    }

    void retry_backlog_locked() {
        for (auto b = backlog.begin(); b != backlog.end();) {
            auto& queue = b->second;
            while (!queue.empty()) {
                auto& r = requests.at(queue.front());
                if (!try_send_locked(r)) break;
                const bool lost_now = r.completion.status == Status::peer_lost;
                queue.pop_front();
                changed.notify_all();
                if (lost_now) {
                    const NodeId peer = r.peer;
                    const std::string reason = r.completion.error;
                    handle_loss_locked(peer, reason); // erases b
                    b = backlog.begin();
                    goto next;
                }
            }
            b = queue.empty() ? backlog.erase(b) : std::next(b);
        next:;
        }
    }

    // ------------------------------------------------------------------- progress

    // Non-blocking: retries queued sends, takes what arrived (up to drain_limit
    // messages, and not while the unexpected queue is full). Throws Error for a
    // malformed message after queueing the good ones before it.
    void progress() {
        std::unique_lock p(progress_mutex, std::try_to_lock);
        {
            std::lock_guard lock(mutex);
            retry_backlog_locked();
        }
        if (!p) return;
        for (int i = 0; i < drain_limit; ++i) {
            {
                std::lock_guard lock(mutex);
                if (!room_locked()) {
                    ++counters.backpressure_stops;
                    return;
                }
            }
            auto b = pull(std::chrono::nanoseconds::zero());
            if (!b) return;
            std::string bad;
            {
                std::lock_guard lock(mutex);
                bad = dispatch_locked(std::move(b));
            }
            if (!bad.empty()) throw Error(bad);
        }
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

    // ---------------------------------------------------------------------- posts

    Posted post_send(NodeId dest, Tag tag, BufferPtr whole, std::size_t size, void* user) {
        std::lock_guard lock(mutex);
        const RequestId id = new_id_locked();
        Request r;
        r.is_send = true;
        r.peer = dest;
        r.tag = tag;
        r.user = user;
        r.size = size;
        r.pending = std::move(whole);
        r.completion.is_send = true;
        r.completion.source = dest;
        r.completion.tag = tag;
        r.completion.size = size;
        r.completion.bytes = size;
        r.completion.user = user;
        auto b = backlog.find(dest);
        if (b == backlog.end() || b->second.empty()) {
            if (try_send_locked(r)) {
                if (r.completion.status == Status::peer_lost) handle_loss_locked(dest, r.completion.error);
                Posted p{id, std::move(r.completion)};
                p.done->id = id;
                p.done->immediate = true;
                return p;
            }
        }
        requests.emplace(id, std::move(r));
        backlog[dest].push_back(id);
        return Posted{id, std::nullopt};
    }

    Posted post_recv(NodeId source, Tag tag, bool into_span, std::span<std::byte> into, void* user) {
        check_peer(source, true, "post_recv");
        check_tag(tag, true, "post_recv");
        progress();
        std::lock_guard lock(mutex);
        const RequestId id = new_id_locked();
        Request r;
        r.peer = source;
        r.tag = tag;
        r.into_span = into_span;
        r.into = into;
        r.user = user;
        for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
            if (!matches(source, tag, it->source, it->tag)) continue;
            unexpected_bytes -= it->whole->size();
            Arrived m = std::move(*it);
            unexpected.erase(it);
            Posted p{id, Completion{}};
            fill_receive(*p.done, r, std::move(m));
            p.done->id = id;
            p.done->immediate = true;
            return p;
        }
        if (source != any_source && lost.count(source) != 0) {
            Posted p{id, Completion{}};
            p.done->id = id;
            p.done->immediate = true;
            p.done->status = Status::peer_lost;
            p.done->source = source;
            p.done->tag = tag;
            p.done->user = user;
            p.done->error = describe(source) + " was lost and nothing of it is left to receive";
            return p;
        }
        requests.emplace(id, std::move(r));
        expected.push_back(id);
        return Posted{id, std::nullopt};
    }

    std::vector<Message> take_unexpected_locked(std::size_t max) {
        std::vector<Message> out;
        while (out.size() < max && !bmi_unexpected.empty()) {
            Arrived m = std::move(bmi_unexpected.front());
            bmi_unexpected.pop_front();
            unexpected_bytes -= m.whole->size();
            out.push_back(Message{m.source, m.tag, std::make_unique<PayloadBuffer>(std::move(m.whole), m.size)});
        }
        return out;
    }

    BufferPtr make_message(Tag tag, std::span<const std::byte> bytes, std::uint8_t kind = kind_eager) {
        auto whole = factory.create_buffer(header_size + bytes.size());
        auto* s = whole->single();
        if (s == nullptr) {
            whole = std::make_unique<HeapBuffer>(header_size + bytes.size());
            s = whole->single();
        }
        write_envelope(s->data(), tag, bytes.size(), kind);
        if (!bytes.empty()) std::memcpy(s->data() + header_size, bytes.data(), bytes.size());
        return whole;
    }

    BufferPtr make_message(Tag tag, BufferPtr&& payload) {
        const std::size_t size = payload->size();
        auto header = std::make_unique<HeapBuffer>(header_size);
        write_envelope(header->data(), tag, size);
        auto list = std::make_unique<FragmentList>();
        list->append(std::move(header));
        list->append(std::move(payload));
        return list;
    }
};

// ------------------------------------------------------------------------ public

namespace {
std::vector<NodeId> every_node(const NodeFactory& factory, const config::Configuration& configuration) {
    (void)configuration.node(factory.self_id()); // ConfigError when self is not in the nodes file
    std::vector<NodeId> ids;
    for (const auto& n : configuration.nodes)
        if (n.id != factory.self_id()) ids.push_back(n.id);
    return ids;
}
} // namespace

Communicator::Communicator(NodeFactory& factory, const config::Configuration& configuration, Limits limits)
    : Communicator(factory, every_node(factory, configuration), limits) {}

Communicator::Communicator(NodeFactory& factory, const std::vector<NodeId>& peers, Limits limits)
    : impl_(std::make_unique<Impl>(factory, peers, limits)) {}

Communicator::~Communicator() = default;

NodeId Communicator::self_id() const noexcept {
    return impl_->self;
}

std::vector<NodeId> Communicator::peers() const {
    std::vector<NodeId> ids;
    for (const auto& [id, _] : impl_->nodes)
        ids.push_back(id);
    return ids;
}

Posted Communicator::post_send(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_peer(dest, false, "post_send");
    Impl::check_tag(tag, false, "post_send");
    auto whole = impl_->make_message(tag, bytes);
    return impl_->post_send(dest, tag, std::move(whole), bytes.size(), user);
}

Posted Communicator::post_send_unexpected(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_peer(dest, false, "post_send_unexpected");
    Impl::check_tag(tag, false, "post_send_unexpected");
    if (bytes.size() > impl_->limits.max_unexpected_size)
        throw MessageTooLarge("comm: post_send_unexpected to " + impl_->describe(dest) + ": " +
                              std::to_string(bytes.size()) + " bytes, more than Limits::max_unexpected_size (" +
                              std::to_string(impl_->limits.max_unexpected_size) + ")");
    auto whole = impl_->make_message(tag, bytes, kind_unexpected);
    return impl_->post_send(dest, tag, std::move(whole), bytes.size(), user);
}

std::vector<Message> Communicator::test_unexpected(std::size_t max) {
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    return impl_->take_unexpected_locked(max);
}

std::vector<Message> Communicator::wait_unexpected(std::size_t max, std::chrono::nanoseconds timeout) {
    auto& im = *impl_;
    if (max == 0) return {};
    if (!im.wait_until([&] { return !im.bmi_unexpected.empty(); }, deadline_after(timeout))) return {};
    std::lock_guard lock(im.mutex);
    return im.take_unexpected_locked(max);
}

Posted Communicator::post_send(NodeId dest, Tag tag, BufferPtr&& payload, void* user) {
    impl_->check_peer(dest, false, "post_send");
    Impl::check_tag(tag, false, "post_send");
    if (!payload) throw UsageError("comm: post_send: the payload is null");
    const std::size_t size = payload->size();
    auto whole = impl_->make_message(tag, std::move(payload));
    return impl_->post_send(dest, tag, std::move(whole), size, user);
}

namespace {
void finish_send(Communicator& comm, Posted posted, NodeId dest, std::chrono::milliseconds timeout,
                 const std::string& who) {
    auto done = std::move(posted.done);
    if (!done) {
        done = comm.wait(posted.id, timeout);
        if (!done && comm.cancel(posted.id)) {
            (void)comm.test(posted.id);
            throw SendQueueFull("comm: send to " + who + ": its send queue stayed full for " +
                                std::to_string(timeout.count()) + " ms (Limits::send_timeout)");
        }
        if (!done) done = comm.test(posted.id);
    }
    if (done && done->status == Status::peer_lost) throw PeerLost(dest, "comm: send to " + who + ": " + done->error);
}
} // namespace

bool Communicator::flush(std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    for (;;) {
        if (impl_->factory.flush(std::chrono::nanoseconds::zero())) {
            std::lock_guard lock(impl_->mutex);
            if (impl_->backlog.empty()) return true;
        }
        impl_->progress(); // retries the backlog, takes what arrived (room at the peer)
        const auto left = time_left(deadline);
        if (left <= std::chrono::nanoseconds::zero()) return false;
        if (impl_->factory.flush(std::min<std::chrono::nanoseconds>(left, 1ms))) {
            std::lock_guard lock(impl_->mutex);
            if (impl_->backlog.empty()) return true;
        }
    }
}

void Communicator::send(NodeId dest, Tag tag, std::span<const std::byte> bytes) {
    finish_send(*this, post_send(dest, tag, bytes), dest, impl_->limits.send_timeout, impl_->describe(dest));
}

void Communicator::send(NodeId dest, Tag tag, BufferPtr&& payload) {
    finish_send(*this, post_send(dest, tag, std::move(payload)), dest, impl_->limits.send_timeout,
                impl_->describe(dest));
}

std::optional<Message> Communicator::recv(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    auto posted = post_recv(source, tag);
    auto done = std::move(posted.done);
    if (!done) {
        done = wait(posted.id, timeout);
        if (!done) {
            if (cancel(posted.id)) {
                (void)test(posted.id);
                return std::nullopt;
            }
            done = test(posted.id);
        }
    }
    if (!done) return std::nullopt;
    if (done->status == Status::peer_lost)
        throw PeerLost(source, "comm: recv from " + impl_->describe(source) + ": " + done->error);
    return Message{done->source, done->tag, std::move(done->buffer)};
}

Posted Communicator::post_recv(NodeId source, Tag tag, std::span<std::byte> into, void* user) {
    return impl_->post_recv(source, tag, true, into, user);
}

Posted Communicator::post_recv(NodeId source, Tag tag, void* user) {
    return impl_->post_recv(source, tag, false, {}, user);
}

std::optional<Completion> Communicator::test(RequestId id) {
    {
        std::lock_guard lock(impl_->mutex);
        impl_->check_live_locked(id);
    }
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    return impl_->collect_locked(id);
}

std::vector<Completion> Communicator::test_some(std::span<const RequestId> ids) {
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    for (RequestId id : ids) // all checked before any is collected: an error loses none
        impl_->check_live_locked(id);
    std::vector<Completion> out;
    for (RequestId id : ids)
        if (auto c = impl_->collect_locked(id)) out.push_back(std::move(*c));
    return out;
}

std::optional<Completion> Communicator::wait(RequestId id, std::chrono::nanoseconds timeout) {
    return wait_any(std::span<const RequestId>(&id, 1), timeout);
}

std::optional<Completion> Communicator::wait_any(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    {
        std::lock_guard lock(impl_->mutex);
        for (RequestId id : ids)
            impl_->check_live_locked(id);
    }
    auto& im = *impl_;
    auto any_done = [&] {
        for (RequestId id : ids) {
            auto it = im.requests.find(id);
            if (it == im.requests.end() || it->second.done) return true;
        }
        return false;
    };
    if (!im.wait_until(any_done, deadline)) return std::nullopt;
    std::lock_guard lock(im.mutex);
    for (RequestId id : ids) {
        im.check_live_locked(id); // collected by another thread meanwhile
        if (auto c = im.collect_locked(id)) return c;
    }
    return std::nullopt;
}

std::vector<Completion> Communicator::wait_some(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    std::vector<Completion> out;
    if (auto first = wait_any(ids, timeout)) {
        out.push_back(std::move(*first));
        std::lock_guard lock(impl_->mutex);
        for (RequestId id : ids)
            if (auto c = impl_->collect_locked(id)) out.push_back(std::move(*c));
    }
    return out;
}

std::vector<Completion> Communicator::wait_all(std::span<const RequestId> ids, std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    auto& im = *impl_;
    {
        std::lock_guard lock(im.mutex);
        for (RequestId id : ids)
            im.check_live_locked(id);
    }
    // Requests stay done until collected: the scan resumes where it stopped.
    std::size_t first_pending = 0;
    auto all_done = [&] {
        for (; first_pending < ids.size(); ++first_pending) {
            auto it = im.requests.find(ids[first_pending]);
            if (it != im.requests.end() && !it->second.done) return false;
        }
        return true;
    };
    (void)im.wait_until(all_done, deadline);
    std::vector<Completion> out;
    std::lock_guard lock(im.mutex);
    for (RequestId id : ids)
        if (auto c = im.collect_locked(id)) out.push_back(std::move(*c));
    return out;
}

bool Communicator::cancel(RequestId id) {
    auto& im = *impl_;
    std::lock_guard lock(im.mutex);
    im.check_live_locked(id);
    auto& r = im.requests.at(id);
    if (r.done) return false;
    if (r.is_send) {
        auto& q = im.backlog[r.peer];
        q.erase(std::remove(q.begin(), q.end(), id), q.end());
        r.pending.reset();
    } else {
        im.expected.erase(std::remove(im.expected.begin(), im.expected.end(), id), im.expected.end());
        r.completion.source = r.peer;
        r.completion.tag = r.tag;
        r.completion.user = r.user;
    }
    r.completion.status = Status::cancelled;
    r.done = true;
    im.changed.notify_all();
    return true;
}

std::optional<Envelope> Communicator::iprobe(NodeId source, Tag tag) {
    impl_->check_peer(source, true, "iprobe");
    Impl::check_tag(tag, true, "iprobe");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    for (const auto& m : impl_->unexpected)
        if (matches(source, tag, m.source, m.tag)) return Envelope{m.source, m.tag, m.size};
    return std::nullopt;
}

std::optional<Envelope> Communicator::probe(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_peer(source, true, "probe");
    Impl::check_tag(tag, true, "probe");
    auto& im = *impl_;
    std::optional<Envelope> found;
    auto seen = [&] {
        for (const auto& m : im.unexpected)
            if (matches(source, tag, m.source, m.tag)) {
                found = Envelope{m.source, m.tag, m.size};
                return true;
            }
        return false;
    };
    if (!im.wait_until(seen, deadline_after(timeout))) return std::nullopt;
    return found;
}

void Communicator::progress() {
    impl_->progress();
}

CommStats Communicator::stats() const {
    std::lock_guard lock(impl_->mutex);
    CommStats s = impl_->counters;
    s.unexpected_messages = impl_->unexpected.size();
    s.unexpected_messages += impl_->bmi_unexpected.size();
    s.unexpected_bytes = impl_->unexpected_bytes;
    s.posted_receives = impl_->expected.size();
    return s;
}

} // namespace msgpass::comm
