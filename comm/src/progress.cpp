// Progress: taking messages from the nodes (one thread at a time) and retrying
// backlogged sends (docs/communicator.md, "Progress and threads").
#include "impl.hpp"

namespace msgpass::comm {

// Takes one message from the nodes (pulling set by this thread, mutex not held).
BufferPtr Communicator::Impl::pull(std::chrono::nanoseconds timeout) {
    try {
        if (single != nullptr) // one peer: its node's own receive and wake-up
            return timeout <= std::chrono::nanoseconds::zero() ? single->receive() : single->receive(timeout);
        return timeout <= std::chrono::nanoseconds::zero() ? group->receive() : group->receive(timeout);
    } catch (const PeerLost& e) {
        std::lock_guard lock(mutex);
        handle_loss_locked(e.peer(), e.what());
        return nullptr;
    }
}

BufferPtr Communicator::Impl::pull_locked() {
    try {
        return single != nullptr ? single->receive() : group->receive();
    } catch (const PeerLost& e) {
        handle_loss_locked(e.peer(), e.what());
        return nullptr;
    }
}

// Non-blocking: retries queued sends, takes what arrived (up to drain_limit
// messages, and not while the unexpected queue is full), all under mutex (a node's
// non-blocking receive does not wait). Throws Error for a malformed message after
// queueing the good ones before it.
void Communicator::Impl::progress() {
    std::lock_guard lock(mutex);
    retry_backlog_locked();
    if (pulling) return; // another thread waits in the nodes: it takes what comes
    for (int i = 0; i < drain_limit; ++i) {
        if (!room_locked()) {
            ++counters.backpressure_stops;
            return;
        }
        auto b = pull_locked();
        if (!b) return;
        const std::string bad = dispatch_locked(std::move(b));
        if (!bad.empty()) throw Error(bad);
    }
}

BufferPtr Communicator::Impl::wait_step(std::chrono::nanoseconds step) {
    if (!backlogged.load(std::memory_order_acquire)) return pull(step);
    Node* stalled = nullptr;
    {
        std::lock_guard lock(mutex);
        stalled = stalled_node_locked();
    }
    if (stalled == nullptr) return pull(step);
    try {
        (void)stalled->flush(std::min<std::chrono::nanoseconds>(step, std::chrono::milliseconds(1)));
    } catch (const PeerLost& e) { // the next send to it fails the sends waiting for it
        std::lock_guard lock(mutex);
        handle_loss_locked(e.peer(), e.what());
    }
    return pull(std::chrono::nanoseconds::zero());
}

} // namespace msgpass::comm
