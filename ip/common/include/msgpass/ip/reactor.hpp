// The readiness machinery of the ip technologies: the epoll set a factory's
// background thread waits on, the eventfd wake-up descriptors other threads ring to
// give it (or a sleeping receiver) something to do, and the ppoll() sleep of a
// receiver on its sockets. What each event means (which tag, which node) is the
// technology's; this only owns the descriptors and the system calls.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

namespace msgpass::ip {

// An eventfd in non-blocking mode: ring() makes it readable until drain().
class WakeFd {
public:
    // Throws ResourceError "<owner>: cannot create an eventfd: <reason>".
    explicit WakeFd(std::string_view owner);
    ~WakeFd();
    WakeFd(const WakeFd&) = delete;
    WakeFd& operator=(const WakeFd&) = delete;

    [[nodiscard]] int fd() const noexcept { return fd_; }
    void ring() const noexcept;
    void drain() const noexcept;

private:
    int fd_;
};

// An epoll set. data is handed back with each event of fd.
class Epoll {
public:
    // Throws ResourceError "<owner>: cannot create an epoll set: <reason>".
    explicit Epoll(std::string_view owner);
    ~Epoll();
    Epoll(const Epoll&) = delete;
    Epoll& operator=(const Epoll&) = delete;

    [[nodiscard]] int fd() const noexcept { return fd_; }
    // false with errno set when the kernel refuses.
    bool add(int fd, std::uint32_t events, std::uint64_t data) const noexcept;
    bool modify(int fd, std::uint32_t events, std::uint64_t data) const noexcept;
    void remove(int fd) const noexcept;
    // Waits at most timeout (nanosecond resolution: a batch's tail is due microseconds
    // ahead) and fills events; returns how many, 0 on timeout, -1 on a signal.
    int wait(std::span<epoll_event> events, std::chrono::nanoseconds timeout) const noexcept;

private:
    int fd_;
};

// Sleeps in ppoll() until wake or one of fds is readable, or timeout passes; drains
// wake when it was rung. True unless the timeout passed.
bool wait_readable(const WakeFd& wake, std::span<const int> fds, std::chrono::nanoseconds timeout);

} // namespace msgpass::ip
