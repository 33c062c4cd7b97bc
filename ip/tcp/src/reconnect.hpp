// When a tcp node tries again to reach its peer, and when it gives
// the peer up (docs/tcp.md, Acknowledgements and resending, Peer loss and restart):
// after a break it retries with a backoff from backoff_min doubling to backoff_max;
// an attempt (connect and handshake) gets min(peer_timeout, 2 s); a refusal from the
// port of a peer known to have lived means its process is gone, and no connection
// for peer_timeout after the break means the host or the link is: either way the
// peer is lost. Only the timing lives here; the connection states are the
// technology's, and so are the clocks (every call takes `now`).
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace msgpass::tcp {

class Reconnect {
public:
    using Clock = std::chrono::steady_clock;

    Reconnect(std::chrono::nanoseconds backoff_min, std::chrono::nanoseconds backoff_max,
              std::chrono::nanoseconds peer_timeout) noexcept
        : min_(backoff_min), max_(backoff_max), peer_timeout_(peer_timeout), backoff_(backoff_min) {}

    // Try at once: the first message for an idle peer.
    void attempt_now(Clock::time_point now) noexcept { next_ = now; }
    // Try at once, and time it as a break: the peer's connection to us broke, which
    // may mean its process died.
    void probe(Clock::time_point now) noexcept {
        if (!broken_since_) broken_since_ = now;
        next_ = now;
    }
    // The connection broke: try again after the backoff; peer_timeout runs from the first break.
    void broke(Clock::time_point now) noexcept {
        if (!broken_since_) broken_since_ = now;
        retry_later(now);
    }

    [[nodiscard]] bool due(Clock::time_point now) const noexcept { return now >= next_; }
    [[nodiscard]] Clock::time_point next_attempt() const noexcept { return next_; }

    // An attempt starts now; it has until attempt_deadline() to connect and shake hands.
    void started(Clock::time_point now) noexcept {
        deadline_ = now + std::min<std::chrono::nanoseconds>(peer_timeout_, std::chrono::seconds(2));
    }
    [[nodiscard]] Clock::time_point attempt_deadline() const noexcept { return deadline_; }

    enum class Outcome {
        retry,        // try again after the backoff, which doubles
        lost_refused, // the port of a peer known to have lived refuses connections
        lost_silent,  // no connection for peer_timeout since the break
    };
    // An attempt failed at now; refused: the connection was refused (ECONNREFUSED),
    // peer_known: the peer's incarnation was known. On a loss the next attempt (for
    // the peer's next incarnation) comes after the same backoff.
    Outcome failed(bool refused, bool peer_known, Clock::time_point now) noexcept {
        if (refused && peer_known) {
            next_ = now + backoff_;
            return Outcome::lost_refused;
        }
        if (broken_since_ && now - *broken_since_ >= peer_timeout_) {
            next_ = now + backoff_;
            return Outcome::lost_silent;
        }
        retry_later(now);
        return Outcome::retry;
    }

    // The peer refused our handshake: ask again only after the longest backoff.
    void refused_by_peer() noexcept { backoff_ = max_; }
    // Connected: the next break starts again from the shortest backoff.
    void connected() noexcept {
        broken_since_.reset();
        backoff_ = min_;
    }
    // The peer was lost, or left cleanly: no break is being timed any more.
    void forget() noexcept { broken_since_.reset(); }

    [[nodiscard]] std::optional<Clock::time_point> broken_since() const noexcept { return broken_since_; }
    [[nodiscard]] std::chrono::nanoseconds backoff() const noexcept { return backoff_; }

private:
    void retry_later(Clock::time_point now) noexcept {
        next_ = now + backoff_;
        backoff_ = std::min(backoff_ * 2, max_);
    }

    std::chrono::nanoseconds min_, max_, peer_timeout_;
    std::chrono::nanoseconds backoff_;
    Clock::time_point next_{};
    Clock::time_point deadline_{};
    std::optional<Clock::time_point> broken_since_;
};

} // namespace msgpass::tcp
