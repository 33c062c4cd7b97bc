// Progress: taking messages from the nodes (one thread at a time) and retrying
// backlogged sends (docs/communicator.md, "Progress and threads").
#include "impl.hpp"

namespace msgpass::comm {

// Takes one message from the nodes (pulling set by this thread, mutex not held).
BufferPtr Communicator::Impl::pull(std::chrono::nanoseconds timeout) {
    try {
        if (Node* one = single.load(std::memory_order_relaxed)) // one peer: its node's own receive and wake-up
            return timeout <= std::chrono::nanoseconds::zero() ? one->receive() : one->receive(timeout);
        return timeout <= std::chrono::nanoseconds::zero() ? group->receive() : group->receive(timeout);
    } catch (const PeerLost& e) {
        std::lock_guard lock(mutex);
        handle_loss_locked(e.peer(), e.what());
        return nullptr;
    }
}

BufferPtr Communicator::Impl::pull_locked() {
    try {
        Node* one = single.load(std::memory_order_relaxed);
        if (auto b = one != nullptr ? one->receive() : group->receive()) return b;
    } catch (const PeerLost& e) {
        handle_loss_locked(e.peer(), e.what());
        return nullptr;
    }
    admit_runtime_locked(); // nothing came: a client that reached the factory may join
    if (!releasing.empty()) complete_released_locked();
    return nullptr;
}

void Communicator::Impl::complete_released_locked() {
    for (auto it = releasing.begin(); it != releasing.end();) {
        auto r = requests.find(*it);
        if (r == requests.end() || !r->second.released->load(std::memory_order_acquire)) {
            ++it;
            continue;
        }
        r->second.done = true;
        changed.notify_all();
        it = releasing.erase(it);
    }
}

// ------------------------------------------------------------ peers found at run time

void Communicator::Impl::add_peer_locked(NodeId id, NodePtr node) {
    if (id == self || node_of(id) != nullptr) return;
    {
        std::lock_guard lock(peers_mutex);
        nodes.emplace(id, node);
        added.emplace(id, node.get());
    }
    has_added.store(true, std::memory_order_release);
    // Not in same_host: peers found at run time are tcp's (and send_in_place reads
    // same_host without the mutex).
    lost.erase(id);
    unjoined.push_back(std::move(node));
    if (!pulling) join_locked();
}

// mutex, no thread in the nodes: the new peers join the group receives wait in.
void Communicator::Impl::join_locked() {
    if (unjoined.empty()) return;
    single.store(nullptr); // more than one peer now: receives go through the group
    for (auto& n : unjoined)
        group->add(std::move(n));
    unjoined.clear();
}

// mutex, not pulling. One atomic load when no client came (BMI's address
// registration callback, polled).
void Communicator::Impl::admit_runtime_locked() {
    const std::uint32_t seen = factory.runtime_peers_seen();
    while (runtime_taken < seen) {
        const NodeId id = first_runtime_id + runtime_taken++;
        if (auto node = factory.runtime_peer(id)) add_peer_locked(id, std::move(node)); // null: gone already
    }
    join_locked();
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
