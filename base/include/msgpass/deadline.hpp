// Deadlines from the timeouts the API takes. Every blocking call computes its
// deadline here, saturating: a timeout of std::chrono::nanoseconds::max() ("wait
// until it happens") gives the latest representable time point instead of
// overflowing into the past and returning at once.
#pragma once

#include <chrono>

namespace msgpass {

using SteadyTime = std::chrono::steady_clock::time_point;

// now + timeout, or SteadyTime::max() when that sum is not representable; a
// timeout of zero or less gives now.
[[nodiscard]] constexpr SteadyTime deadline_after(std::chrono::nanoseconds timeout, SteadyTime now) noexcept {
    if (timeout <= std::chrono::nanoseconds::zero()) return now;
    const auto room = SteadyTime::max() - now;
    if (timeout >= room) return SteadyTime::max();
    return now + std::chrono::duration_cast<SteadyTime::duration>(timeout);
}

[[nodiscard]] inline SteadyTime deadline_after(std::chrono::nanoseconds timeout) noexcept {
    return deadline_after(timeout, std::chrono::steady_clock::now());
}

// What is left of a deadline at now, never negative.
[[nodiscard]] constexpr std::chrono::nanoseconds time_left(SteadyTime deadline, SteadyTime now) noexcept {
    if (deadline <= now) return std::chrono::nanoseconds::zero();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
}

[[nodiscard]] inline std::chrono::nanoseconds time_left(SteadyTime deadline) noexcept {
    return time_left(deadline, std::chrono::steady_clock::now());
}

} // namespace msgpass
