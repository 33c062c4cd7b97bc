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
#include <msgpass/kit/held.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <utility>

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

// Where a wait stands when it is about to sleep: for a sleeper whose step depends on
// how long the wait has lasted (tcp acknowledges what it read once it idles).
struct WaitPhase {
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point now;
    std::chrono::steady_clock::time_point deadline;
};

// The one blocking wait of msgpass: calls poll() until it yields a value or the
// deadline passes, busy for policy.spin, yielding until policy.yield, then sleeping
// through the sleeper in steps of at most policy.max_sleep. A first poll that finds
// a message tells the thread's held sends that input waits; one that finds nothing
// writes them (kit/held.hpp) before the wait goes on. poll() returns
// std::optional<T> or a pointer-like value that tests false when empty.
//
// A sleeper is how the waiter sleeps, the one part that differs between technologies:
//   template <class Poll> auto sleep(Poll& poll, std::chrono::nanoseconds step,
//                                    const WaitPhase& phase) -> decltype(poll());
// sleeps at most step or until woken, and returns what a poll after waking found
// (or nothing: the wait polls again). Optional members:
//   void yielded(std::chrono::nanoseconds took);  told how long each yield took
//   auto announce();  called once before the first sleep; what it returns is held
//                     until the wait returns (sci tells its partners that it sleeps)
// DoorbellSleeper sleeps on a futex; tcp sleeps in ppoll() on its sockets.
template <class Poll, class Sleeper>
auto wait_with(Poll&& poll, std::chrono::nanoseconds timeout, Sleeper&& sleeper, const WaitPolicy& policy = {})
    -> decltype(poll()) {
    using Clock = std::chrono::steady_clock;
    // A message found at once was waiting (more may be queued behind it); when none
    // was, what this thread's sends held goes before it waits.
    if (auto r = kit::held::found(poll()); r || timeout <= std::chrono::nanoseconds::zero()) return r;
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout, start);
    const auto spin_end = std::min(deadline, start + policy.spin);
    for (auto now = start; now < spin_end; now = Clock::now()) {
        for (int i = 0; i < 32; ++i) {
            if (auto r = poll()) return r;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    }
    const auto yield_end = std::min(deadline, start + policy.yield);
    for (auto now = Clock::now(); now < yield_end;) {
        if (auto r = poll()) return r;
        std::this_thread::yield();
        const auto after = Clock::now();
        if constexpr (requires { sleeper.yielded(after - now); }) sleeper.yielded(after - now);
        now = after;
    }
    if (Clock::now() >= deadline) return poll();
    auto sleeping = [&]() -> decltype(poll()) {
        for (;;) {
            if (auto r = poll()) return r;
            const auto now = Clock::now();
            if (now >= deadline) return {};
            const auto step = std::min<std::chrono::nanoseconds>(deadline - now, policy.max_sleep);
            if (auto r = sleeper.sleep(poll, step, WaitPhase{start, now, deadline})) return r;
        }
    };
    if constexpr (requires { sleeper.announce(); }) {
        // Before the polls of the sleeping phase: a partner that publishes after the
        // announcement wakes the sleeper, one that published before is found by a poll.
        const auto announced = sleeper.announce();
        return sleeping();
    } else {
        return sleeping();
    }
}

// Sleeps on a doorbell (a futex); without one, in steps of 200 us.
struct DoorbellSleeper {
    Doorbell* bell = nullptr;

    template <class Poll>
    auto sleep(Poll& poll, std::chrono::nanoseconds step, const WaitPhase& /*phase*/) -> decltype(poll()) {
        decltype(poll()) found{};
        if (bell == nullptr) {
            std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(step, std::chrono::microseconds(200)));
            return found;
        }
        bell->sleep_unless(
            [&] {
                found = poll();
                return static_cast<bool>(found);
            },
            step);
        return found;
    }
};

// wait_with on a doorbell, which may be null.
template <class Poll>
auto wait_for(Poll&& poll, std::chrono::nanoseconds timeout, Doorbell* bell, const WaitPolicy& policy = {})
    -> decltype(poll()) {
    return wait_with(std::forward<Poll>(poll), timeout, DoorbellSleeper{bell}, policy);
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
