// The sci node (node.hpp): the facade of one peer, which hands each call to its
// rooms.
#include "node.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include <unistd.h>

namespace msgpass::sci {

SciNode::SciNode(std::shared_ptr<Transport> transport, NodeParameters parameters)
    : links_(std::move(transport), std::move(parameters)), receiver_(links_, sender_),
      sender_(links_, receiver_, *this) {
    links_.attach(receiver_);
    links_.transport->driver().add(this);
    links_.current();
}

SciNode::~SciNode() {
    links_.transport->driver().remove(this);
    if (const char* v = std::getenv("MSGPASS_SCI_PATHS"); v != nullptr && *v != '\0' && *v != '0') {
        const PathCounters& p = paths();
        auto n = [](const std::atomic<std::uint64_t>& c) {
            return static_cast<unsigned long long>(c.load(std::memory_order_relaxed));
        };
        std::fprintf(stderr,
                     "sci paths pid %d peer %u: alone %llu batches %llu batched %llu records %llu waits %llu "
                     "empty %llu acks %llu rings %llu\n",
                     static_cast<int>(::getpid()), static_cast<unsigned>(id()), n(p.alone), n(p.batches), n(p.batched),
                     n(p.records), n(p.waits), n(p.empty), n(p.acks), n(p.rings));
    }
}

void SciNode::send(BufferPtr&& buffer) {
    check_factory("send");
    sender_.send(buffer, this);
}

void SciNode::send_bytes(std::span<const std::byte> bytes) {
    check_factory("send");
    CallerBytes caller(bytes);
    sender_.send(caller, this);
}

void SciNode::send_shared(const SharedBuffer& buffer) {
    check_factory("send");
    SharedBuffer copy = buffer;
    sender_.send(copy, this);
}

bool SciNode::flush(std::chrono::nanoseconds timeout) {
    check_factory("flush");
    return links_.transport->wait(
        [this]() -> bool {
            if (sender_.try_flush(true)) return true;
            links_.check_peer();
            return false;
        },
        timeout);
}

BufferPtr SciNode::receive() {
    check_factory("receive");
    links_.transport->driver().progress();
    return receiver_.poll();
}

BufferPtr SciNode::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    if (auto b = receive()) return b; // a stream's usual case, without setting up a wait (~40 instructions)
    return links_.transport->wait([this] { return receive(); }, timeout);
}

// A message of an open batch is lent as a view; any other (the first of a batch, a
// message alone in its slot, a large one) is received as a buffer that the view holds.
MessageView SciNode::receive_view() {
    check_factory("receive");
    return poll_view();
}

// One view object returned by each of these (no move from layer to layer: a stream's
// receive is a few dozen instructions, of which the moves were a third).
MessageView SciNode::receive_view(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    MessageView v = poll_view(); // a stream's usual case, without setting up a wait
    if (!v) v = links_.transport->wait([this] { return receive_view(); }, timeout);
    return v;
}

// A message that view() does not lend (a large one, a restart, a loss to report)
// comes as a buffer that the view holds. One look at the notes per call (a pass of
// receive_view's wait), as receive()'s poll.
MessageView SciNode::poll_view() {
    links_.transport->driver().progress();
    return receiver_.next_view();
}

NodeStats SciNode::stats() const noexcept {
    auto s = links_.stats.snapshot(sender_.queued());
    s.retries = links_.sequence.retries();
    return s;
}

} // namespace msgpass::sci
