// Test support: whether a thread of this process sleeps in the kernel, so that a
// wake-up test can send its message only once the receiver is really asleep (a
// message sent while the receiver still spins proves nothing about the wake-up).
#pragma once

#include "bounded.hpp"

#include <msgpass/buffer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace msgpass::test {

// The kernel's id of the calling thread.
inline pid_t this_thread_id() {
    return static_cast<pid_t>(::syscall(SYS_gettid));
}

// The scheduler state of thread tid of this process: 'R' running or runnable, 'S'
// asleep in a system call (futex, poll, nanosleep), ...; '?' when unknown.
inline char thread_state(pid_t tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')'); // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= stat.size()) return '?';
    return stat[close + 2];
}

// Waits until the thread whose id `tid` holds (0 until that thread stored its
// gettid()) is asleep in the kernel: a call it made is blocked waiting for an event,
// which a test may now cause. "Later" as an event instead of a delay: a call that
// returned at once never sleeps there. False when the bound passed first.
inline bool wait_until_asleep(const std::atomic<pid_t>& tid, std::chrono::nanoseconds bound) {
    return eventually(
        [&] {
            const pid_t t = tid.load();
            return t != 0 && thread_state(t) == 'S';
        },
        bound);
}

// One round of wake_ups(): whether the message came, how long after the send began
// the receive returned, and what went wrong ("" when nothing).
struct WakeUp {
    BufferPtr message;
    std::chrono::nanoseconds latency{};
    std::string error;
};

// Runs `rounds` blocking receives in a thread of their own (receive() returns the
// message or null after its own timeout). Before round r's message is sent (send(r),
// in the calling thread), the receiver has been inside its receive for at least
// `settle` (past the spin and yield phases of the wait) and asleep(tid) holds for
// its thread id; by default asleep means blocked in a system call. Each round waits
// at most `bound` for the receiver.
template <class Receive, class Send, class Asleep>
std::vector<WakeUp> wake_ups(int rounds, Receive&& receive, Send&& send, Asleep&& asleep,
                             std::chrono::milliseconds settle = std::chrono::milliseconds(5),
                             std::chrono::nanoseconds bound = default_patience) {
    std::vector<WakeUp> result(static_cast<std::size_t>(rounds));
    std::vector<Clock::time_point> returned(result.size());
    std::atomic<pid_t> tid{0};
    std::atomic<int> entered{-1};
    std::atomic<int> finished{-1};
    std::atomic<Clock::rep> entered_at{0};
    std::thread receiver([&] {
        tid = this_thread_id();
        for (int r = 0; r < rounds; ++r) {
            auto& round = result[static_cast<std::size_t>(r)];
            entered_at = Clock::now().time_since_epoch().count();
            entered = r;
            try {
                round.message = receive();
            } catch (const std::exception& e) {
                round.error = std::string("receive threw: ") + e.what();
            }
            returned[static_cast<std::size_t>(r)] = Clock::now();
            finished = r;
        }
    });
    for (int r = 0; r < rounds; ++r) {
        auto& round = result[static_cast<std::size_t>(r)];
        const bool slept = eventually(
            [&] {
                return entered == r &&
                       Clock::now().time_since_epoch().count() - entered_at >=
                           std::chrono::duration_cast<Clock::duration>(settle).count() &&
                       asleep(tid.load());
            },
            bound);
        if (!slept) round.error = "the receiver never fell asleep in its receive";
        const auto sent = Clock::now();
        try {
            send(r);
        } catch (const std::exception& e) {
            round.error = std::string("send threw: ") + e.what();
        }
        if (!eventually([&] { return finished >= r; }, bound)) {
            round.error = "the receive did not return within the bound after the send";
            break;
        }
        round.latency = returned[static_cast<std::size_t>(r)] - sent;
    }
    receiver.join();
    return result;
}

template <class Receive, class Send>
std::vector<WakeUp> wake_ups(int rounds, Receive&& receive, Send&& send) {
    return wake_ups(rounds, std::forward<Receive>(receive), std::forward<Send>(send),
                    [](pid_t tid) { return thread_state(tid) == 'S'; });
}

// The shortest latency of the rounds that received a message.
inline std::chrono::nanoseconds fastest(const std::vector<WakeUp>& rounds) {
    auto best = std::chrono::nanoseconds::max();
    for (const auto& r : rounds)
        if (r.message) best = std::min(best, r.latency);
    return best;
}

} // namespace msgpass::test
