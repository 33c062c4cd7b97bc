// Peer incarnations of the ip technologies. Every process draws a random 64-bit
// incarnation at start and names it in its handshake, so that a restarted process
// is told from a reconnecting one: when a peer shows a new incarnation, the old one
// is lost. The loss is raised once per incarnation (kit::LossLatch, in the
// framework's implementer kit) and reported once, as PeerLost, by the next call on
// the node; a receiver reports it in order, after every message the old process
// delivered and before the first of the new one (a marker in the Inbox).
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/kit/loss.hpp>

#include <cstdint>
#include <deque>
#include <optional>

namespace msgpass::ip {

// A fresh incarnation for this process: random, never 0 (0 means "none known").
[[nodiscard]] std::uint64_t new_incarnation();

// Whether `seen` is a restart of the peer last known as `known` (0: none known yet).
[[nodiscard]] constexpr bool restarted(std::uint64_t known, std::uint64_t seen) noexcept {
    return known != 0 && seen != known;
}

// What PeerLost reports, and the latch that raises it once (the implementer kit's,
// msgpass/kit/loss.hpp).
using Loss = kit::Loss;
using LossLatch = kit::LossLatch;

// The messages received from a peer, in order, with the point where its previous
// incarnation's loss belongs, and the points where the peer dropped messages to us.
class Inbox {
public:
    struct Next {
        BufferPtr message;       // null at a marker
        bool loss = false;       // a marker: the previous incarnation's loss, or the gap, is reported here
        std::optional<Loss> gap; // at a gap marker: what the peer dropped
    };

    void push(BufferPtr message) { entries_.push_back(std::move(message)); }
    // The previous incarnation ended here: what follows is the new one's.
    void mark_loss() {
        entries_.push_back(nullptr);
        markers_.emplace_back(std::nullopt);
    }
    // The peer (the same incarnation) dropped messages that belong here: it gave this
    // node up while it lived. `gap` is reported here, after the messages before it.
    void mark_gap(Loss gap) {
        entries_.push_back(nullptr);
        markers_.emplace_back(std::move(gap));
    }
    [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
    // Moves the messages before the next marker (or the end) into `to`, at most
    // `most`; returns how many. A marker stays for pop().
    template <class Into>
    std::size_t pop_messages(Into& to, std::size_t most) {
        std::size_t n = 0;
        while (n < most && !entries_.empty() && entries_.front() != nullptr) {
            to.push_back(std::move(entries_.front()));
            entries_.pop_front();
            ++n;
        }
        return n;
    }
    // The next message or marker; {null, false} when empty.
    Next pop() {
        if (entries_.empty()) return {};
        BufferPtr m = std::move(entries_.front());
        entries_.pop_front();
        if (m != nullptr) return {std::move(m), false, std::nullopt};
        std::optional<Loss> gap = std::move(markers_.front());
        markers_.pop_front();
        return {nullptr, true, std::move(gap)};
    }

private:
    std::deque<BufferPtr> entries_;           // null: a marker
    std::deque<std::optional<Loss>> markers_; // one per marker, in order: a gap's loss, or none
};

} // namespace msgpass::ip
