// FastLock's wait (fast_lock.hpp): a spin, then std::atomic::wait on the word.
#include <msgpass/kit/fast_lock.hpp>

namespace msgpass::kit {

void FastLock::lock_slow() noexcept {
    // A send holds the lock for well under a microsecond unless it copies a large
    // message: spin first (256 pauses, a few microseconds).
    for (int spin = 0; spin < 256; ++spin) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (try_lock()) return;
    }
    while (state_.exchange(1, std::memory_order_acquire) != 0)
        state_.wait(1, std::memory_order_relaxed);
}

} // namespace msgpass::kit
