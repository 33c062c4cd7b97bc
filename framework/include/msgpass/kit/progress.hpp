// The implementer kit: the progress driver. Every send or receive of any node of a
// factory moves the send queues of the factory's other nodes, so that a message
// queued towards one peer flows while the process waits on another; the driver owns
// that "move the other queues", so that a technology's transport (sci's local node)
// never calls back into its nodes. A node joins the driver when it is made and leaves
// it when it ends, tells it when its queue becomes non-empty (+1) and empty again
// (-1), not per message, and the driver also hands the nodes a change of the
// process's own state that each shows its peer (sci: it sleeps, it closes).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace msgpass::kit {

// A node the progress driver moves.
class Progressing {
public:
    virtual ~Progressing() = default;
    // Transfers queued messages while possible; never blocks on a lock.
    virtual void try_flush_queue() = 0;
    // The state of this process that the node shows its peer changed (announce()).
    // May wait for the node's receiver lock.
    virtual void state_changed() {}
};

class ProgressDriver {
public:
    void add(Progressing* node);
    void remove(Progressing* node);
    void queued_changed(std::ptrdiff_t delta) noexcept { queued_total_.fetch_add(delta, std::memory_order_relaxed); }
    // Moves the queues of every node but except, when some node has one: a send skips
    // its own node (it moves its queue itself; except_queued: that one is queued), and
    // with it the driver's lock when no other node has a queue. Never waits: when
    // another thread is driving the queues this call returns.
    void progress(const Progressing* except = nullptr, bool except_queued = false) {
        if (queued_total_.load(std::memory_order_relaxed) > (except_queued ? 1 : 0)) progress_slow(except);
    }
    // Calls state_changed of every node, under the driver's lock (a node that joins
    // meanwhile reads the new state itself).
    void announce();

private:
    void progress_slow(const Progressing* except);
    std::atomic<std::ptrdiff_t> queued_total_{0}; // nodes whose send queue is not empty
    std::mutex mutex_;
    std::vector<Progressing*> nodes_;
};

} // namespace msgpass::kit
