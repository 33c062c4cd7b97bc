// The epoll set, wake-up descriptors and receiver sleep of the ip technologies (see
// reactor.hpp).
#include <msgpass/ip/reactor.hpp>

#include <msgpass/error.hpp>
#include <msgpass/ip/socket.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <poll.h>
#include <string>
#include <sys/eventfd.h>
#include <unistd.h>
#include <vector>

namespace msgpass::ip {

namespace {

timespec to_timespec(std::chrono::nanoseconds timeout) {
    const auto ns = std::max<std::int64_t>(timeout.count(), 0);
    return timespec{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

} // namespace

WakeFd::WakeFd(std::string_view owner) : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw ResourceError(std::string(owner) + ": cannot create an eventfd: " + errno_text(errno));
}

WakeFd::~WakeFd() {
    ::close(fd_);
}

void WakeFd::ring() const noexcept {
    const std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
}

void WakeFd::drain() const noexcept {
    std::uint64_t count = 0;
    (void)!::read(fd_, &count, sizeof count);
}

Epoll::Epoll(std::string_view owner) : fd_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (fd_ < 0) throw ResourceError(std::string(owner) + ": cannot create an epoll set: " + errno_text(errno));
}

Epoll::~Epoll() {
    ::close(fd_);
}

bool Epoll::add(int fd, std::uint32_t events, std::uint64_t data) const noexcept {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    return ::epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

bool Epoll::modify(int fd, std::uint32_t events, std::uint64_t data) const noexcept {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    return ::epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &ev) == 0;
}

void Epoll::remove(int fd) const noexcept {
    ::epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr);
}

int Epoll::wait(std::span<epoll_event> events, std::chrono::nanoseconds timeout) const noexcept {
    const timespec ts = to_timespec(timeout);
    const int n = ::epoll_pwait2(fd_, events.data(), static_cast<int>(events.size()), &ts, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    // Without epoll_pwait2 (kernels before 5.11, valgrind): milliseconds, rounded up
    // so that a deadline is never woken for early and spun on.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, std::chrono::nanoseconds{0}));
    return ::epoll_wait(fd_, events.data(), static_cast<int>(events.size()),
                        static_cast<int>(std::min<std::int64_t>(ms.count(), INT32_MAX)));
}

bool wait_readable(const WakeFd& wake, std::span<const int> fds, std::chrono::nanoseconds timeout) {
    thread_local std::vector<pollfd> set;
    set.assign(1, pollfd{wake.fd(), POLLIN, 0});
    for (int fd : fds)
        set.push_back(pollfd{fd, POLLIN, 0});
    const timespec ts = to_timespec(timeout);
    const int n = ::ppoll(set.data(), set.size(), &ts, nullptr);
    if (n > 0 && (set[0].revents & POLLIN) != 0) wake.drain();
    return n != 0;
}

} // namespace msgpass::ip
