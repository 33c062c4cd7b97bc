// The communicator over Node and NodeFactory (docs/communicator.md): construction,
// the public sends and receives, unexpected messages, probe, flush and statistics.
// The pieces: impl.hpp (state, locks), matching.cpp (queues), send.cpp (envelopes,
// backlog), progress.cpp, requests.cpp (test, wait, cancel).
#include "impl.hpp"

#include <algorithm>

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
    return limits;
}

Communicator::Communicator(NodeFactory& factory, const config::Configuration& configuration)
    : Communicator(factory, configuration, Limits::from(configuration)) {}

Communicator::Communicator(NodeFactory& factory, const config::Configuration& configuration, Limits limits)
    : Communicator(factory, every_node(factory, configuration), limits) {
    impl_->max_message_size = configuration.max_message_size;
}

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
    impl_->check_factory("post_send");
    impl_->check_peer(dest, false, "post_send");
    Impl::check_tag(tag, false, "post_send");
    return impl_->send_any(dest, tag, bytes, bytes.size(), user);
}

Posted Communicator::post_send_unexpected(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user) {
    impl_->check_factory("post_send_unexpected");
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
    return impl_->send_any(dest, tag, std::move(payload), size, user);
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
    impl_->check_factory("send");
    finish_send(*this, post_send(dest, tag, bytes), dest, impl_->limits.send_timeout, impl_->describe(dest));
}

void Communicator::send(NodeId dest, Tag tag, BufferPtr&& payload) {
    impl_->check_factory("send");
    finish_send(*this, post_send(dest, tag, std::move(payload)), dest, impl_->limits.send_timeout,
                impl_->describe(dest));
}

std::optional<Message> Communicator::recv(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_factory("recv");
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
    impl_->check_factory("post_recv");
    return impl_->post_recv(source, tag, true, into, user);
}

Posted Communicator::post_recv(NodeId source, Tag tag, void* user) {
    impl_->check_factory("post_recv");
    return impl_->post_recv(source, tag, false, {}, user);
}

std::optional<Envelope> Communicator::iprobe(NodeId source, Tag tag) {
    impl_->check_factory("iprobe");
    impl_->check_peer(source, true, "iprobe");
    Impl::check_tag(tag, true, "iprobe");
    impl_->progress();
    std::lock_guard lock(impl_->mutex);
    for (const auto& m : impl_->unexpected)
        if (matches(source, tag, m.source, m.tag)) return Envelope{m.source, m.tag, m.size};
    return std::nullopt;
}

std::optional<Envelope> Communicator::probe(NodeId source, Tag tag, std::chrono::nanoseconds timeout) {
    impl_->check_factory("probe");
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
    return s;
}

} // namespace msgpass::comm
