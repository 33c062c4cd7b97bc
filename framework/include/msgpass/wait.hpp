// The wait strategy of every blocking receive: poll, spin briefly, yield, then sleep
// until a sender rings the receiver's doorbell or the deadline passes. An idle
// receiver therefore costs nothing measurable, and a busy one pays no system call.
//
// A Doorbell is a pair of 32-bit words that may live in process memory or in a
// shared segment (it is trivially constructible and lock-free). The receiver
// announces that it sleeps; a sender that published a message rings only when a
// sleeper is announced, so the fast path of send has no system call.
#pragma once

#include <msgpass/deadline.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

namespace msgpass {

class Doorbell {
public:
    // Called by a sender after it published a message (release store).
    void ring() noexcept;
    // Wakes the sleepers without looking at `sleepers`: for a sender that learnt
    // from elsewhere that one sleeps (sci: from a word the sleeper wrote into the
    // sender's own memory, so that the sender never reads the sleeper's).
    void wake() noexcept;
    // Called by the receiver: sleeps until ring() or until timeout. poll() is called
    // once after the sleeper is announced, to close the race with a sender that
    // published just before; if it returns true the receiver does not sleep.
    template <class Poll>
    bool sleep_unless(Poll&& poll, std::chrono::nanoseconds timeout);

    std::atomic<std::uint32_t> sequence{0};
    std::atomic<std::uint32_t> sleepers{0};

private:
    void futex_wait(std::uint32_t seen, std::chrono::nanoseconds timeout) noexcept;
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The phases are set in time, not in polls: a peer that was asleep needs tens of
// microseconds to be scheduled again on a virtual machine, and a waiter that gave up
// sooner would fall asleep too, so that both ends then pay a wake-up per message.
struct WaitPolicy {
    std::chrono::microseconds spin{50};          // busy polling
    std::chrono::microseconds yield{1000};       // polling with sched_yield, from the start
    std::chrono::microseconds max_sleep{100000}; // re-poll at least this often while asleep
};

// Calls poll() until it yields a value or the deadline passes. poll() returns
// std::optional<T> or a pointer-like value that tests false when empty. The
// doorbell may be null: the wait then sleeps in short steps instead of on the bell.
template <class Poll>
auto wait_for(Poll&& poll, std::chrono::nanoseconds timeout, Doorbell* bell, const WaitPolicy& policy = {})
    -> decltype(poll()) {
    using Clock = std::chrono::steady_clock;
    if (auto r = poll()) return r;
    if (timeout <= std::chrono::nanoseconds::zero()) return {};
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout, start);
    const auto spin_end = std::min(deadline, start + policy.spin);
    const auto yield_end = std::min(deadline, start + policy.yield);
    for (auto now = start; now < spin_end; now = Clock::now()) {
        for (int i = 0; i < 32; ++i) {
            if (auto r = poll()) return r;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    }
    for (auto now = Clock::now(); now < yield_end; now = Clock::now()) {
        if (auto r = poll()) return r;
        std::this_thread::yield();
    }
    for (;;) {
        if (auto r = poll()) return r;
        const auto now = Clock::now();
        if (now >= deadline) return {};
        auto step = std::min<std::chrono::nanoseconds>(deadline - now, policy.max_sleep);
        if (bell != nullptr) {
            decltype(poll()) found{};
            bell->sleep_unless(
                [&] {
                    found = poll();
                    return static_cast<bool>(found);
                },
                step);
            if (found) return found;
        } else {
            std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(step, std::chrono::microseconds(200)));
        }
    }
}

template <class Poll>
bool Doorbell::sleep_unless(Poll&& poll, std::chrono::nanoseconds timeout) {
    const std::uint32_t seen = sequence.load(std::memory_order_acquire);
    sleepers.fetch_add(1, std::memory_order_seq_cst); // a full barrier before the last poll
    const bool ready = poll();
    if (!ready) futex_wait(seen, timeout);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    return ready;
}

} // namespace msgpass
