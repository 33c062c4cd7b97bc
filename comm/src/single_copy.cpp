// The one-copy path's contact with the kernel (docs/communicator.md, "One copy"): who
// this process is (pid, boot id, pid namespace), sent with a receive's buffer so that
// the sender can tell it shares this kernel and pid namespace, and the write of a
// sender's bytes into that buffer with process_vm_writev(2) (Linux's cross-memory
// attach, as Open MPI's vader uses it; the sender writes, so the receiver's memory is
// never read by another process).
#include "impl.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

namespace msgpass::comm::detail {

const SingleCopyTarget& local_process() {
    static const SingleCopyTarget self = [] {
        SingleCopyTarget t{};
        t.pid = static_cast<std::uint32_t>(::getpid());
        std::string boot;
        std::ifstream in("/proc/sys/kernel/random/boot_id");
        std::getline(in, boot);
        // FNV-1a: a stable hash (std::hash may differ between builds of the two ends).
        std::uint64_t h = 1469598103934665603ULL;
        for (unsigned char ch : boot)
            h = (h ^ ch) * 1099511628211ULL;
        t.boot = boot.empty() ? 0 : h;
        struct stat ns {};
        if (::stat("/proc/self/ns/pid", &ns) == 0) t.pid_namespace = static_cast<std::uint64_t>(ns.st_ino);
        return t;
    }();
    return self;
}

namespace {

std::mutex offered_mutex;
std::multimap<std::uint64_t, std::uint64_t> offered_ranges; // address -> length

// Whether [address, address + length) lies inside a buffer offered now.
bool inside_offered(std::uint64_t address, std::uint64_t length) {
    std::lock_guard lock(offered_mutex);
    for (auto it = offered_ranges.upper_bound(address); it != offered_ranges.begin();) {
        --it;
        if (it->first <= address && address - it->first + length <= it->second) return true;
    }
    return false;
}

} // namespace

OfferedRange::OfferedRange(std::uint64_t address, std::uint64_t length)
    : address_(address), length_(length), live_(true) {
    std::lock_guard lock(offered_mutex);
    offered_ranges.emplace(address, length);
}

OfferedRange::OfferedRange(OfferedRange&& other) noexcept
    : address_(other.address_), length_(other.length_), live_(other.live_) {
    other.live_ = false;
}

OfferedRange& OfferedRange::operator=(OfferedRange&& other) noexcept {
    if (this != &other) {
        withdraw();
        address_ = other.address_;
        length_ = other.length_;
        live_ = other.live_;
        other.live_ = false;
    }
    return *this;
}

OfferedRange::~OfferedRange() {
    withdraw();
}

void OfferedRange::withdraw() noexcept {
    if (!live_) return;
    live_ = false;
    std::lock_guard lock(offered_mutex);
    const auto [first, last] = offered_ranges.equal_range(address_);
    for (auto it = first; it != last; ++it)
        if (it->second == length_) {
            offered_ranges.erase(it);
            return;
        }
}

int write_into_process(std::uint32_t pid, std::uint64_t address, std::span<const std::byte> from) {
    if (from.empty()) return 0;
    if (address == 0 || address + from.size() < address) return EFAULT;
    // Into this process itself only where one of its receives offered a buffer.
    if (pid == local_process().pid && !inside_offered(address, from.size())) return EFAULT;
    std::size_t done = 0;
    while (done < from.size()) {
        const std::size_t left = from.size() - done;
        iovec local{const_cast<std::byte*>(from.data() + done), left};
        iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address + done)), left};
        const ssize_t n = ::process_vm_writev(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT; // a short write that cannot go on
        done += static_cast<std::size_t>(n);
    }
    return 0;
}

bool single_copy_allowed_by_environment() {
    const char* v = std::getenv("MSGPASS_SINGLE_COPY");
    return v == nullptr || std::string(v) != "0";
}

} // namespace msgpass::comm::detail
