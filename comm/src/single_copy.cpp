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

int write_into_process(std::uint32_t pid, std::uint64_t address, std::span<const std::byte> from) {
    if (from.empty()) return 0;
    if (address == 0 || address + from.size() < address) return EFAULT;
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
