// The doorbell's system calls: a futex on a word that may be in shared memory, so
// the shared (not process-private) futex operations are used.
#include <msgpass/wait.hpp>

#include <climits>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace msgpass {

namespace {
long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value, const timespec* timeout) {
    return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, timeout, nullptr, 0);
}
} // namespace

void Doorbell::ring() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) == 0) return;
    wake();
}

void Doorbell::wake() noexcept {
    sequence.fetch_add(1, std::memory_order_seq_cst);
    futex(&sequence, FUTEX_WAKE, INT_MAX, nullptr);
}

void Doorbell::futex_wait(std::uint32_t seen, std::chrono::nanoseconds timeout) noexcept {
    if (timeout <= std::chrono::nanoseconds::zero()) return;
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(secs.count());
    ts.tv_nsec = static_cast<long>((timeout - secs).count());
    futex(&sequence, FUTEX_WAIT, seen, &ts);
}

} // namespace msgpass
