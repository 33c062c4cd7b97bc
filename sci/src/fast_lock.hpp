// The sender's and the receiver's lock of one peer (Sender, Receiver): taken with one
// atomic exchange and let go with a plain store, where a std::mutex's unlock is a
// second atomic operation (an exchange that looks for sleepers), about 20 cycles and
// 25 instructions on every message of a small-message stream. Several threads may
// send to one node, and a send may hold the lock for the copy of a large message, so
// a thread that finds it held spins for a few microseconds and then sleeps on the
// word. The store that lets the lock go is not ordered before the look at the
// sleepers (the fence that would order it costs what the plain store saves): a
// thread that starts to sleep at that very moment may not be woken, so it sleeps at
// most sleep_step_ns and then looks again.
#pragma once

#include <atomic>
#include <cstdint>

namespace msgpass::sci {

class FastLock {
public:
    // How long a thread that waits for the lock sleeps before it looks again, when
    // it was not woken (see above), in nanoseconds.
    static constexpr long sleep_step_ns = 100'000;

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
        if (sleepers_.load(std::memory_order_relaxed) != 0) [[unlikely]]
            wake();
    }

private:
    void lock_slow() noexcept;
    void wake() noexcept;

    std::atomic<std::uint32_t> state_{0}; // 1 while held
    std::atomic<std::uint32_t> sleepers_{0};
};

} // namespace msgpass::sci
