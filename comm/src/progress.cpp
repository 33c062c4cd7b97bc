// Progress: taking messages from the nodes (one thread at a time) and retrying
// backlogged sends (docs/communicator.md, "Progress and threads").
#include "impl.hpp"

#include <msgpass/log.hpp>

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

// mutex, not pulling (BMI's address registration callback, polled).
void Communicator::Impl::admit_clients_locked() {
    const std::uint32_t seen = factory.runtime_peers_seen();
    while (runtime_taken < seen) {
        const NodeId id = first_runtime_id + runtime_taken++;
        if (auto node = factory.runtime_peer(id)) add_peer_locked(id, std::move(node)); // null: gone already
        runtime_looked.store(runtime_taken, std::memory_order_release);
    }
    join_locked();
    // Clients the technology forgot (they left, everything they sent read): released
    // here too, or a server's memory would grow with every client that came and went.
    if (const std::uint32_t forgotten = factory.runtime_peers_forgotten(); forgotten != forgotten_seen) {
        forgotten_seen = forgotten;
        for (const auto& [id, node] : added)
            if (id >= first_runtime_id && !factory.runtime_peer(id)) retiring.insert(id);
    }
    if (!retiring.empty()) release_retired_locked();
}

bool Communicator::Impl::holds_locked(NodeId id) const {
    auto from = [id](const Arrived& m) { return m.source == id; };
    if (std::any_of(unexpected.begin(), unexpected.end(), from) ||
        std::any_of(bmi_unexpected.begin(), bmi_unexpected.end(), from))
        return true;
    if (backlog.count(id) != 0) return true;
    if (std::any_of(cleared_sends.begin(), cleared_sends.end(), [id](const Cleared& c) { return c.peer == id; }))
        return true;
    return std::any_of(expected.begin(), expected.end(), [id](const Expected& e) { return e.peer == id; });
}

void Communicator::Impl::release_retired_locked() {
    if (pulling) return; // the group may not change under the thread that waits in it
    for (auto it = retiring.begin(); it != retiring.end();) {
        if (holds_locked(*it)) {
            ++it;
            continue;
        }
        release_locked(*it);
        it = retiring.erase(it);
    }
}

// mutex, not pulling: everything this communicator keeps of the client goes (what
// is keyed by its id), then the factory forgets it; its node is freed with the last
// reference (a send that holds it: node_for_send).
void Communicator::Impl::release_locked(NodeId id) {
    NodePtr node;
    {
        std::lock_guard lock(peers_mutex);
        if (auto n = nodes.find(id); n != nodes.end()) {
            node = std::move(n->second);
            nodes.erase(n);
        }
        added.erase(id);
        has_added.store(!added.empty(), std::memory_order_release);
    }
    (void)group->remove(id);
    std::erase_if(unjoined, [id](const NodePtr& n) { return n->id() == id; });
    lost.erase(id);
    announced_count.erase(id);
    returned.erase(id);
    control_backlog.erase(id);
    std::erase_if(cleared_sends, [id](const Cleared& c) { return c.peer == id; });
    single_copy_peers.erase(id);
    if (requested.erase(id) != 0) any_requested.store(!requested.empty(), std::memory_order_release);
    auto of = [id](const auto& entry) { return entry.first.first == id; };
    std::erase_if(lane_in_flight, of);
    std::erase_if(lane_backlog, of);
    std::erase_if(lane_freed, of);
    for (auto it = lane_unread.begin(); it != lane_unread.end();) {
        if (it->first.first != id) {
            ++it;
            continue;
        }
        lanes_held -= std::min(it->second, lanes_held);
        it = lane_unread.erase(it);
    }
    ++counters.runtime_peers_released;
    factory.forget_runtime_peer(id);
    MSGPASS_LOG(comm, debug, "msgpass comm: client " + std::to_string(id) + " released");
}

// Non-blocking: retries queued sends, takes what arrived (up to drain_limit
// messages, and not while the unexpected queue is full), all under mutex (a node's
// non-blocking receive does not wait). Throws Error for a malformed message after
// queueing the good ones before it.
void Communicator::Impl::progress() {
    std::lock_guard lock(mutex);
    retry_backlog_locked();
    if (!pulling) drain_locked(); // else another thread waits in the nodes: it takes what comes
    send_all_cleared_locked();
}

void Communicator::Impl::drain_locked() {
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
