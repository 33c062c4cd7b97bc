// A lock of one word for a hot path (sci's sender and receiver of one peer, udp's
// open pack): one word,
// taken with one atomic exchange and let go with a release store followed by the
// standard library's notify_one (C++20 std::atomic wait and notify), which makes no
// atomic read-modify-write when nobody waits (libstdc++ looks at a count of waiters
// kept beside the word). A std::mutex's unlock is a second atomic operation (an
// exchange that looks for sleepers), about 20 cycles and 25 instructions on every
// message of a small-message stream. Several threads may send to one node, and a
// send may hold the lock for the copy of a large message, so a thread that finds it
// held spins for a few microseconds, then waits on the word (std::atomic::wait: the
// library's own short spin, then a futex).
#pragma once

#include <atomic>
#include <cstdint>

namespace msgpass::kit {

class FastLock {
public:
    FastLock() = default;
    FastLock(const FastLock&) = delete;
    FastLock& operator=(const FastLock&) = delete;

    void lock() noexcept {
        if (state_.exchange(1, std::memory_order_acquire) != 0) [[unlikely]]
            lock_slow();
    }
    bool try_lock() noexcept {
        return state_.load(std::memory_order_relaxed) == 0 && state_.exchange(1, std::memory_order_acquire) == 0;
    }
    void unlock() noexcept {
        state_.store(0, std::memory_order_release);
        state_.notify_one();
    }

private:
    void lock_slow() noexcept;

    std::atomic<std::uint32_t> state_{0}; // 1 while held
};

} // namespace msgpass::kit
