// FastLock's waits (fast_lock.hpp): a spin, then sleeps on a private futex.
#include "fast_lock.hpp"

#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace msgpass::sci {

namespace {
void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}
long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) noexcept {
    return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}
} // namespace

void FastLock::lock_slow() noexcept {
    // A send holds the lock for well under a microsecond unless it copies a large
    // message: spin first (256 pauses, a few microseconds).
    for (int spin = 0; spin < 256; ++spin) {
        pause();
        if (try_lock()) return;
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (state_.exchange(1, std::memory_order_acquire) != 0) {
        const timespec step{0, sleep_step_ns};
        futex(&state_, FUTEX_WAIT_PRIVATE, 1, &step);
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

void FastLock::wake() noexcept {
    futex(&state_, FUTEX_WAKE_PRIVATE, 1, nullptr);
}

} // namespace msgpass::sci
