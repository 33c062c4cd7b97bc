// Progress: taking messages from the nodes (one thread at a time) and retrying
// backlogged sends (docs/communicator.md, "Progress and threads").
#include "impl.hpp"

namespace msgpass::comm {

// Takes one message from the nodes (progress_mutex held, mutex not).
BufferPtr Communicator::Impl::pull(std::chrono::nanoseconds timeout) {
    try {
        return timeout <= std::chrono::nanoseconds::zero() ? group->receive() : group->receive(timeout);
    } catch (const PeerLost& e) {
        std::lock_guard lock(mutex);
        handle_loss_locked(e.peer(), e.what());
        return nullptr;
    }
}

// Non-blocking: retries queued sends, takes what arrived (up to drain_limit
// messages, and not while the unexpected queue is full). Throws Error for a
// malformed message after queueing the good ones before it.
void Communicator::Impl::progress() {
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

} // namespace msgpass::comm
