// The implementer kit: the loss latch, used by every technology's node (sci, tcp,
// udp). A peer's loss is found by whoever notices it first (a send, a receive, a
// background thread), raised here once, and reported once, as PeerLost, by the next
// call on the node that takes it; the latch is empty again afterwards, so that a
// later loss of the same peer (its next incarnation) is reported too.
#pragma once

#include <msgpass/error.hpp>
#include <msgpass/kit/health.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::kit {

// What PeerLost reports.
struct Loss {
    std::string reason;               // the whole text of the PeerLost
    std::uint64_t unacknowledged = 0; // messages sent to the lost peer it never acknowledged

    [[nodiscard]] PeerLost error(NodeId peer) const { return PeerLost(peer, reason, unacknowledged); }
};

// The loss of a peer, raised by whoever finds it and taken once by the next call on
// the node. Thread-safe; pending() is one atomic load, for the send path. A raise
// happens before a take that returns it (release, acquire), so what the raiser wrote
// before raising is seen by the call that reports the loss.
class LossLatch {
public:
    // Tells the healths of the HealthScopes alive on this thread of every loss raised
    // (the factory that makes the node is told, for its statistics page).
    LossLatch() : observers_(HealthScope::current()) {}
    LossLatch(const LossLatch&) = delete;
    LossLatch& operator=(const LossLatch&) = delete;
    // Whether the loss of this incarnation (or link, or epoch: whatever identifies
    // one life of the peer for the technology) was raised already, taken or not.
    // Never true for 0, "no identity known".
    [[nodiscard]] bool raised_for(std::uint64_t incarnation) const;
    // Raises the loss of incarnation (0 when the technology does not name one);
    // replaces one not taken yet. may_live: the incarnation was given up for silence
    // and may show up again (revive).
    void raise(std::uint64_t incarnation, std::string reason, std::uint64_t unacknowledged, bool may_live = false);
    // The incarnation given up for silence showed up alive: a later loss of it is
    // raised again (a loss not taken yet stays).
    void revive(std::uint64_t incarnation);
    // For a latch made before its node was handed out (udp makes its nodes with its
    // factory, outside FactoryBase::create_node): the healths of the HealthScopes
    // alive on this thread now are told of every later loss, and of the last one
    // raised already. Healths told already are not added twice.
    void observe_current_scopes();
    // A loss was raised and not taken yet.
    [[nodiscard]] bool pending() const noexcept { return pending_.load(std::memory_order_acquire); }
    // The loss raised and not taken yet, and the latch is empty again; each raise is
    // taken once, by one caller.
    [[nodiscard]] std::optional<Loss> take();

private:
    mutable std::mutex mutex_;
    std::atomic<bool> pending_{false};
    Loss loss_;
    std::uint64_t incarnation_ = 0; // the last incarnation raised
    bool may_live_ = false;         // ... given up for silence
    std::vector<std::shared_ptr<PeerHealth>> observers_;
};

} // namespace msgpass::kit
