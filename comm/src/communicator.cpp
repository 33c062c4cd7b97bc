// The communicator over Node and NodeFactory (docs/communicator.md): construction,
// the public sends and receives, unexpected messages, probe, flush and statistics.
// The pieces: impl.hpp (state, locks), matching.cpp (queues), send.cpp (envelopes,
// backlog), progress.cpp, requests.cpp (test, wait, cancel).
#include "impl.hpp"

#include <algorithm>
#include <limits>

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

// ------------------------------------------------------------------------ public

namespace {
std::vector<NodeId> every_node(const NodeFactory& factory, const config::Configuration& configuration) {
    if (factory.self_id() == no_node) return {}; // a client: its peers are the servers it looks up
    (void)configuration.node(factory.self_id()); // ConfigError when self is not in the nodes file
    std::vector<NodeId> ids;
    for (const auto& n : configuration.nodes)
        if (n.id != factory.self_id()) ids.push_back(n.id);
    return ids;
}
} // namespace

Limits Limits::from(const config::Configuration& configuration) {
    const auto& options = configuration.section<config::CommOptions>();
    Limits limits;
    limits.eager_limit = static_cast<std::size_t>(options.eager_limit);
    limits.unexpected_limit = static_cast<std::size_t>(options.unexpected_limit);
    for (const auto& q : options.tag_queues)
        limits.tag_queues.push_back(Limits::TagQueue{q.first, q.last, static_cast<std::size_t>(q.limit)});
    limits.single_copy = options.single_copy;
    return limits;
}

Communicator::Communicator(NodeFactory& factory, const config::Configuration& configuration)
    : Communicator(factory, configuration, Limits::from(configuration)) {}

Communicator::Communicator(NodeFactory& factory, const config::Configuration& configuration, Limits limits)
    : Communicator(factory, every_node(factory, configuration), limits) {
    impl_->max_message_size = configuration.max_message_size;
}

Communicator::Communicator(NodeFactory& factory, const std::vector<NodeId>& peers, Limits limits)
    : impl_(std::make_unique<Impl>(factory, peers, limits)) {
    impl_->owner = this;
}

Communicator::~Communicator() = default;

void Communicator::Impl::not_a_peer(NodeId id, const char* what) const {
    if (runtime_client(id)) { // released: it is not coming back
        throw PeerLost(id, std::string("comm: ") + what + ": node " + std::to_string(id) +
                               " was a client found at run time; it was dropped, or lost, or it left, and was "
                               "released (its id is not used again)");
    }
    std::string known;
    std::lock_guard lock(peers_mutex);
    for (const auto& [n, _] : nodes)
        known += (known.empty() ? "" : ", ") + std::to_string(n);
    throw UsageError(std::string("comm: ") + what + ": node " + std::to_string(id) +
                     " is not a peer of this communicator (peers: " + known + ")");
}

void Communicator::Impl::negative_tag(Tag tag, const char* what) {
    throw UsageError(std::string("comm: ") + what + ": tag " + std::to_string(tag) +
                     " is negative (tags are 0 or more; any_tag receives any)");
}

NodeId Communicator::self_id() const noexcept {
    return impl_->self;
}

std::vector<NodeId> Communicator::peers() const {
    std::vector<NodeId> ids;
    std::lock_guard lock(impl_->peers_mutex);
    for (const auto& [id, _] : impl_->nodes)
        ids.push_back(id);
    return ids;
}

Posted Communicator::post_send(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_factory("post_send");
    impl_->check_peer(dest, false, "post_send");
    Impl::check_tag(tag, false, "post_send");
    return impl_->send_any(Context{}, dest, tag, bytes, bytes.size(), user);
}

Posted Communicator::post_send(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_factory("post_send");
    impl_->check_peer(dest, false, "post_send", true);
    Impl::check_tag(tag, false, "post_send");
    return impl_->send_any(context, dest, tag, bytes, bytes.size(), user);
}

Posted Communicator::post_ssend(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_factory("post_ssend");
    impl_->check_peer(dest, false, "post_ssend", true);
    Impl::check_tag(tag, false, "post_ssend");
    return impl_->send_any(context, dest, tag, bytes, bytes.size(), user, true);
}

Posted Communicator::post_send_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes,
                                        void* user) {
    impl_->check_factory("post_send_in_place");
    impl_->check_peer(dest, false, "post_send_in_place", true);
    Impl::check_tag(tag, false, "post_send_in_place");
    return impl_->send_in_place(context, dest, tag, bytes, user, false);
}

Posted Communicator::post_ssend_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes,
                                         void* user) {
    impl_->check_factory("post_ssend_in_place");
    impl_->check_peer(dest, false, "post_ssend_in_place", true);
    Impl::check_tag(tag, false, "post_ssend_in_place");
    return impl_->send_in_place(context, dest, tag, bytes, user, true);
}

Posted Communicator::post_send_unexpected(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_factory("post_send_unexpected");
    impl_->check_peer(dest, false, "post_send_unexpected");
    Impl::check_tag(tag, false, "post_send_unexpected");
    if (bytes.size() > impl_->limits.max_unexpected_size)
        throw MessageTooLarge("comm: post_send_unexpected to " + impl_->describe(dest) + ": " +
                              std::to_string(bytes.size()) + " bytes, more than Limits::max_unexpected_size (" +
                              std::to_string(impl_->limits.max_unexpected_size) + ")");
    auto whole = impl_->make_message(Context{}, tag, bytes, kind_unexpected);
    return impl_->post_send(Context{}, dest, tag, std::move(whole), bytes.size(), user, {}, 0, false);
}

namespace {
// The total of a list's pieces; MessageTooLarge when it does not fit a size_t.
template <class Piece>
std::size_t total_of(std::span<const Piece> pieces, const char* call) {
    std::size_t total = 0;
    for (const auto& piece : pieces) {
        if (piece.size() > std::numeric_limits<std::size_t>::max() - total)
            throw MessageTooLarge(std::string("comm: ") + call + ": the pieces add up to more than a size_t");
        total += piece.size();
    }
    return total;
}
} // namespace

Posted Communicator::post_send_list(Context context, NodeId dest, Tag tag,
                                    std::span<const std::span<const std::byte>> pieces, void* user) {
    impl_->check_factory("post_send_list");
    impl_->check_peer(dest, false, "post_send_list", true);
    Impl::check_tag(tag, false, "post_send_list");
    const Impl::Pieces list{pieces, total_of(pieces, "post_send_list")};
    return impl_->send_any(context, dest, tag, list, list.total, user);
}

Posted Communicator::post_recv_list(Context context, NodeId source, Tag tag, std::span<const std::span<std::byte>> into,
                                    void* user) {
    impl_->check_factory("post_recv_list");
    (void)total_of(into, "post_recv_list");
    // No piece at all: one empty piece, so that a message truncates to 0 bytes.
    std::vector<std::span<std::byte>> list(std::max<std::size_t>(into.size(), 1));
    std::copy(into.begin(), into.end(), list.begin());
    return impl_->post_recv(context, source, tag, true, {}, user, std::move(list));
}

Posted Communicator::post_send_unexpected_list(NodeId dest, Tag tag, std::span<const std::span<const std::byte>> pieces,
                                               void* user) {
    impl_->check_factory("post_send_unexpected_list");
    impl_->check_peer(dest, false, "post_send_unexpected_list");
    Impl::check_tag(tag, false, "post_send_unexpected_list");
    const Impl::Pieces list{pieces, total_of(pieces, "post_send_unexpected_list")};
    if (list.total > impl_->limits.max_unexpected_size)
        throw MessageTooLarge("comm: post_send_unexpected_list to " + impl_->describe(dest) + ": " +
                              std::to_string(list.total) + " bytes, more than Limits::max_unexpected_size (" +
                              std::to_string(impl_->limits.max_unexpected_size) + ")");
    auto whole = impl_->make_message(Context{}, tag, list, kind_unexpected);
    return impl_->post_send(Context{}, dest, tag, std::move(whole), list.total, user, {}, 0, false);
}

Communicator::CompletionContext Communicator::open_completion_context() {
    impl_->check_factory("open_completion_context");
    std::lock_guard lock(impl_->mutex);
    const CompletionContext c = impl_->next_completion_context++;
    impl_->completion_contexts.emplace(c, std::vector<RequestId>{});
    return c;
}

void Communicator::close_completion_context(CompletionContext context) {
    std::lock_guard lock(impl_->mutex);
    if (impl_->completion_contexts.erase(context) == 0)
        throw UsageError("comm: close_completion_context: completion context " + std::to_string(context) +
                         " is not open");
}

void Communicator::add_to(CompletionContext context, RequestId id) {
    impl_->check_factory("add_to");
    auto& im = *impl_;
    std::lock_guard lock(im.mutex);
    auto c = im.completion_contexts.find(context);
    if (c == im.completion_contexts.end())
        throw UsageError("comm: add_to: completion context " + std::to_string(context) + " is not open");
    im.check_live_locked(id);
    for (const auto& [other, ids] : im.completion_contexts)
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            throw UsageError("comm: add_to: request " + std::to_string(id) + " is in completion context " +
                             std::to_string(other) + " already");
    c->second.push_back(id);
}

std::vector<Completion> Communicator::test_context(CompletionContext context, std::size_t max) {
    impl_->check_factory("test_context");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    auto c = impl_->completion_contexts.find(context);
    if (c == impl_->completion_contexts.end())
        throw UsageError("comm: test_context: completion context " + std::to_string(context) + " is not open");
    return impl_->collect_context_locked(c->second, max);
}

std::vector<Completion> Communicator::wait_context(CompletionContext context, std::size_t max,
                                                   std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait_context");
    auto& im = *impl_;
    auto any_done = [&] {
        auto c = im.completion_contexts.find(context);
        if (c == im.completion_contexts.end())
            throw UsageError("comm: wait_context: completion context " + std::to_string(context) + " is not open");
        for (RequestId id : c->second)
            if (auto r = im.requests.find(id); r != im.requests.end() && r->second.done) return true;
        return false;
    };
    if (max == 0 || !im.wait_until(any_done, deadline_after(timeout))) return {};
    std::lock_guard lock(im.mutex);
    auto c = im.completion_contexts.find(context);
    if (c == im.completion_contexts.end()) return {};
    return im.collect_context_locked(c->second, max);
}

NodeId Communicator::lookup(std::string_view address) {
    impl_->check_factory("lookup");
    NodePtr node = impl_->factory.lookup(address); // the handshake, without the communicator's lock
    const NodeId id = node->id();
    std::lock_guard lock(impl_->mutex);
    impl_->add_peer_locked(id, std::move(node));
    return id;
}

void Communicator::drop(NodeId peer) {
    impl_->check_factory("drop");
    impl_->check_peer(peer, false, "drop");
    auto& im = *impl_;
    std::lock_guard lock(im.mutex);
    const std::string reason = im.describe(peer) + " was dropped by the application (comm.drop)";
    auto discard = [&](std::deque<Impl::Arrived>& queue) {
        for (auto it = queue.begin(); it != queue.end();) {
            if (it->source != peer) {
                ++it;
                continue;
            }
            im.unexpected_bytes -= it->whole->size();
            ++im.counters.dropped_messages;
            it = queue.erase(it);
        }
    };
    discard(im.unexpected);
    discard(im.bmi_unexpected);
    for (auto it = im.queued_rts.begin(); it != im.queued_rts.end();)
        it = it->first == peer ? im.queued_rts.erase(it) : std::next(it);
    for (auto it = im.lane_unread.begin(); it != im.lane_unread.end();) { // discarded above, every one
        if (it->first.first != peer) {
            ++it;
            continue;
        }
        im.lanes_held -= std::min(it->second, im.lanes_held);
        it = im.lane_unread.erase(it);
    }
    im.handle_loss_locked(peer, reason);
    im.release_retired_locked(); // a run-time client: released now (or once no thread waits in the nodes)
}

bool Communicator::usable() const noexcept {
    return !impl_->factory_life.expired();
}

std::vector<Message> Communicator::test_unexpected(std::size_t max) {
    impl_->check_factory("test_unexpected");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    return impl_->take_unexpected_locked(max);
}

std::vector<Message> Communicator::wait_unexpected(std::size_t max, std::chrono::nanoseconds timeout) {
    impl_->check_factory("wait_unexpected");
    auto& im = *impl_;
    if (max == 0) return {};
    if (!im.wait_until([&] { return !im.bmi_unexpected.empty(); }, deadline_after(timeout))) return {};
    std::lock_guard lock(im.mutex);
    return im.take_unexpected_locked(max);
}

Posted Communicator::post_send(NodeId dest, Tag tag, BufferPtr&& payload, void* user) {
    impl_->check_factory("post_send");
    impl_->check_peer(dest, false, "post_send");
    Impl::check_tag(tag, false, "post_send");
    if (!payload) throw UsageError("comm: post_send: the payload is null");
    const std::size_t size = payload->size();
    return impl_->send_any(Context{}, dest, tag, std::move(payload), size, user);
}

Posted Communicator::post_send(Context context, NodeId dest, Tag tag, BufferPtr&& payload, void* user) {
    impl_->check_factory("post_send");
    impl_->check_peer(dest, false, "post_send", true);
    Impl::check_tag(tag, false, "post_send");
    if (!payload) throw UsageError("comm: post_send: the payload is null");
    const std::size_t size = payload->size();
    return impl_->send_any(context, dest, tag, std::move(payload), size, user);
}

namespace {
template <class Who>
void finish_send(Communicator& comm, Posted posted, NodeId dest, std::chrono::milliseconds timeout, Who&& describe) {
    auto done = std::move(posted.done);
    if (done && done->status == Status::success) return;
    const std::string who = describe(dest);
    if (!done) {
        done = comm.wait(posted.id, timeout);
        if (!done && comm.cancel(posted.id)) {
            (void)comm.test(posted.id);
            throw SendQueueFull("comm: send to " + who + ": its send queue stayed full for " +
                                std::to_string(timeout.count()) + " ms (Limits::send_timeout)");
        }
        // Not cancellable: a rendezvous under way completes when the receiver took
        // the data or was lost.
        if (!done) done = comm.wait(posted.id, std::chrono::nanoseconds::max());
    }
    if (done && done->status == Status::peer_lost) throw PeerLost(dest, "comm: send to " + who + ": " + done->error);
    if (done && done->status == Status::cancelled) // the data of a rendezvous the node refused
        throw MessageTooLarge("comm: send to " + who + ": " + done->error);
}
} // namespace

bool Communicator::flush(std::chrono::nanoseconds timeout) {
    impl_->check_factory("flush");
    const auto deadline = deadline_after(timeout);
    for (;;) {
        if (impl_->factory.flush(std::chrono::nanoseconds::zero())) {
            std::lock_guard lock(impl_->mutex);
            if (impl_->backlog.empty() && impl_->cleared_sends.empty()) return true;
        }
        impl_->progress(); // retries the backlog, takes what arrived (room at the peer)
        const auto left = time_left(deadline);
        if (left <= std::chrono::nanoseconds::zero()) return false;
        if (impl_->factory.flush(std::min<std::chrono::nanoseconds>(left, 1ms))) {
            std::lock_guard lock(impl_->mutex);
            if (impl_->backlog.empty() && impl_->cleared_sends.empty()) return true;
        }
    }
}

// The fast path of an eager send: the message goes straight to the node when nothing
// waits before it (no request); else it is posted and waited for.
void Communicator::send(NodeId dest, Tag tag, std::span<const std::byte> bytes) {
    impl_->check_peer(dest, false, "send"); // not itself: only in a context
    send(Context{}, dest, tag, bytes);
}

void Communicator::send(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes) {
    auto& im = *impl_;
    im.check_factory("send");
    const auto describe = [&im](NodeId id) { return im.describe(id); };
    if (bytes.size() > im.limits.eager_limit || dest == im.self) {
        finish_send(*this, post_send(context, dest, tag, bytes), dest, im.limits.send_timeout, describe);
        return;
    }
    im.check_peer(dest, false, "send");
    Impl::check_tag(tag, false, "send");
    if (im.send_bytes_now(context, dest, tag, bytes)) return;
    auto whole = im.make_message(context, tag, bytes);
    if (im.send_now(dest, tag, whole)) return;
    finish_send(*this, im.post_send(context, dest, tag, std::move(whole), bytes.size(), nullptr), dest,
                im.limits.send_timeout, describe);
}

void Communicator::send(NodeId dest, Tag tag, BufferPtr&& payload) {
    auto& im = *impl_;
    im.check_factory("send");
    const auto describe = [&im](NodeId id) { return im.describe(id); };
    if (!payload || payload->size() > im.limits.eager_limit) {
        finish_send(*this, post_send(dest, tag, std::move(payload)), dest, im.limits.send_timeout, describe);
        return;
    }
    im.check_peer(dest, false, "send");
    Impl::check_tag(tag, false, "send");
    const std::size_t size = payload->size();
    auto whole = im.make_message(Context{}, tag, std::move(payload), kind_eager, 0, true);
    bool sent = false;
    try {
        sent = im.send_now(dest, tag, whole);
    } catch (...) {
        payload.reset(); // consumed, as by post_send: no empty shell left to the caller
        throw;
    }
    payload.reset(); // the emptied PayloadBuffer, if it was one: after the send, off its path
    if (sent) return;
    finish_send(*this, im.post_send(Context{}, dest, tag, std::move(whole), size, nullptr), dest,
                im.limits.send_timeout, describe);
}

BufferPtr Communicator::create_buffer(std::size_t size) {
    auto& im = *impl_;
    im.check_factory("create_buffer");
    if (size > std::numeric_limits<std::size_t>::max() - header_size)
        throw MessageTooLarge("comm: create_buffer of " + std::to_string(size) + " bytes");
    auto whole = im.factory.create_buffer(header_size + size);
    if (whole->single() == nullptr) whole = std::make_unique<HeapBuffer>(header_size + size);
    return std::make_unique<PayloadBuffer>(std::move(whole), size);
}

std::optional<Message> Communicator::recv(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_factory("recv");
    impl_->check_peer(source, true, "recv");
    Impl::check_tag(tag, true, "recv");
    return impl_->recv(Context{}, source, tag, timeout);
}

std::optional<Message> Communicator::recv(Context context, NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_factory("recv");
    impl_->check_peer(source, true, "recv", true);
    Impl::check_tag(tag, true, "recv");
    return impl_->recv(context, source, tag, timeout);
}

std::optional<Envelope> Communicator::recv_into(Context context, NodeId source, Tag tag, std::span<std::byte> into,
                                                MessageView* held, std::chrono::nanoseconds timeout) {
    auto& im = *impl_;
    im.check_factory("recv");
    im.check_peer(source, true, "recv", true);
    Impl::check_tag(tag, true, "recv");
    if (timeout == std::chrono::nanoseconds::max() && im.limits.tag_queues.empty())
        if (Node* one = im.single.load(std::memory_order_relaxed); one != nullptr && source != im.self)
            if (auto e = im.recv_view_step(one, context, source, tag, into, held)) return e;
    auto m = im.recv(context, source, tag, timeout);
    if (!m) return std::nullopt;
    const std::size_t size = m->buffer->size();
    const std::size_t n = std::min(size, into.size());
    if (n > 0) {
        if (const auto* s = m->buffer->single(); s != nullptr) {
            std::memcpy(into.data(), s->data(), n);
        } else {
            std::vector<std::byte> whole(size);
            (void)m->buffer->copy_to(whole);
            std::memcpy(into.data(), whole.data(), n);
        }
    }
    Envelope e{m->source, m->tag, size, m->context};
    if (held != nullptr) *held = MessageView(std::move(m->buffer));
    return e;
}

// A receive that clears an announcement (rendezvous) waits as a posted request.
std::optional<Message> Communicator::Impl::recv_posted(Context context, NodeId source, Tag tag, SteadyTime deadline) {
    auto posted = post_recv(context, source, tag, false, {}, nullptr);
    auto done = std::move(posted.done);
    auto& comm = *owner;
    if (!done) {
        done = comm.wait(posted.id, time_left(deadline));
        if (!done) {
            if (comm.cancel(posted.id)) {
                (void)comm.test(posted.id);
                return std::nullopt;
            }
            done = comm.test(posted.id);
        }
    }
    if (!done) return std::nullopt;
    if (done->status == Status::peer_lost)
        throw PeerLost(source, "comm: recv from " + describe(source) + ": " + done->error);
    return Message{done->source, done->tag, std::move(done->buffer), done->context};
}

Posted Communicator::post_recv(NodeId source, Tag tag, std::span<std::byte> into, void* user) {
    impl_->check_factory("post_recv");
    impl_->check_peer(source, true, "post_recv");
    return impl_->post_recv(Context{}, source, tag, true, into, user);
}

Posted Communicator::post_recv(NodeId source, Tag tag, void* user) {
    impl_->check_factory("post_recv");
    impl_->check_peer(source, true, "post_recv");
    return impl_->post_recv(Context{}, source, tag, false, {}, user);
}

Posted Communicator::post_recv(Context context, NodeId source, Tag tag, std::span<std::byte> into, void* user) {
    impl_->check_factory("post_recv");
    return impl_->post_recv(context, source, tag, true, into, user);
}

Posted Communicator::post_recv_in_place(Context context, NodeId source, Tag tag, std::span<std::byte> into,
                                        void* user) {
    impl_->check_factory("post_recv_in_place");
    return impl_->post_recv(context, source, tag, true, into, user, {}, true);
}

Posted Communicator::post_recv(Context context, NodeId source, Tag tag, void* user) {
    impl_->check_factory("post_recv");
    return impl_->post_recv(context, source, tag, false, {}, user);
}

std::optional<Envelope> Communicator::iprobe(NodeId source, Tag tag) {
    impl_->check_peer(source, true, "iprobe");
    return iprobe(Context{}, source, tag);
}

std::optional<Envelope> Communicator::iprobe(Context context, NodeId source, Tag tag) {
    impl_->check_factory("iprobe");
    impl_->check_peer(source, true, "iprobe", true);
    Impl::check_tag(tag, true, "iprobe");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    if (auto it = impl_->find_unexpected_locked(context, source, tag); it != impl_->unexpected.end())
        return Envelope{it->source, it->tag, it->size, it->context};
    return std::nullopt;
}

std::optional<Envelope> Communicator::probe(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_peer(source, true, "probe");
    return probe(Context{}, source, tag, timeout);
}

std::optional<Envelope> Communicator::probe(Context context, NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_factory("probe");
    impl_->check_peer(source, true, "probe", true);
    Impl::check_tag(tag, true, "probe");
    auto& im = *impl_;
    std::optional<Envelope> found;
    auto seen = [&] {
        if (auto it = im.find_unexpected_locked(context, source, tag); it != im.unexpected.end()) {
            found = Envelope{it->source, it->tag, it->size, it->context};
            return true;
        }
        return false;
    };
    if (!im.wait_until(seen, deadline_after(timeout))) return std::nullopt;
    return found;
}

void Communicator::progress() {
    impl_->check_factory("progress");
    impl_->progress();
}

CommStats Communicator::stats() const {
    std::lock_guard lock(impl_->mutex);
    CommStats s = impl_->counters;
    s.unexpected_messages = impl_->unexpected.size();
    s.unexpected_messages += impl_->bmi_unexpected.size();
    s.unexpected_bytes = impl_->unexpected_bytes;
    s.posted_receives = impl_->expected.size();
    s.rendezvous_announced = impl_->announced.size();
    s.rendezvous_awaiting = impl_->awaiting.size();
    for (const auto& [peer, ids] : impl_->returned)
        s.rendezvous_returned += ids.size();
    for (const auto& [peer, held] : impl_->requested)
        s.requests_held += held.size();
    for (const auto& [key, queue] : impl_->lane_backlog)
        s.lane_held_sends += queue.size();
    s.large_buffers_reused = impl_->pool->reused();
    s.large_buffers_kept_bytes = impl_->pool->kept_bytes();
    return s;
}

} // namespace msgpass::comm
