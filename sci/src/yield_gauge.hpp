// Whether this process's CPU is shared with another runnable task, learnt from how
// long its yields take (Transport::wait: a wait does not spin while the CPU is
// shared, so that several receivers of one core, a group's members pinned together,
// do not keep the one with a message waiting through their 50 us of spinning).
//
// A yield that gave the CPU to another task takes at least two passes through the
// scheduler and that task's time; one that returned at once costs only the system
// call, which is ~0.1 us on bare metal but 1.2-1.6 us on a 2-CPU Firecracker VM with
// the kernel's mitigations. A fixed bound of 1.5 us called a quarter of the lone
// yields of that VM shared, and with 32 fast yields in a row needed to call the CPU
// free again, it stayed "shared" for good: every blocking receive then yielded
// instead of spinning, and the sci 64-byte ping-pong took 1.1 us instead of 0.4 us.
// So a yield counts as shared when it took more than twice the fastest yield seen
// (the cost of the system call alone on this machine), and never below 1.5 us.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace msgpass::sci {

class YieldGauge {
public:
    static constexpr std::chrono::nanoseconds floor{1500};
    static constexpr std::uint32_t fast_to_clear = 32; // lone yields in a row that call the CPU free
    static constexpr std::int64_t ns_cap = INT64_MAX / 2;

    // Any thread; the counts are approximate under races, which only delays a change.
    void observe(std::chrono::nanoseconds took) noexcept {
        const std::int64_t ns = took.count();
        std::int64_t fastest = fastest_ns_.load(std::memory_order_relaxed);
        if (ns > 0 && ns < fastest) {
            fastest_ns_.store(ns, std::memory_order_relaxed);
            fastest = ns;
        }
        const std::int64_t bound = fastest <= floor.count() / 2 ? floor.count() : 2 * std::min(fastest, ns_cap);
        if (ns > bound) {
            fast_.store(0, std::memory_order_relaxed);
            if (!shared_.load(std::memory_order_relaxed)) shared_.store(true, std::memory_order_relaxed);
        } else if (fast_.fetch_add(1, std::memory_order_relaxed) + 1 >= fast_to_clear) {
            if (shared_.load(std::memory_order_relaxed)) shared_.store(false, std::memory_order_relaxed);
        }
    }

    [[nodiscard]] bool shared() const noexcept { return shared_.load(std::memory_order_relaxed); }
    // The CPU is known to be free again: a shared wait does not yield, so the gauge
    // learns no fast yields then (Transport::probe_shared tells it instead).
    void clear() noexcept {
        fast_.store(0, std::memory_order_relaxed);
        shared_.store(false, std::memory_order_relaxed);
    }

private:
    std::atomic<bool> shared_{false};
    std::atomic<std::uint32_t> fast_{0};
    std::atomic<std::int64_t> fastest_ns_{INT64_MAX};
};

} // namespace msgpass::sci
