// The floors of msgpass-bench --reference (see reference.hpp). The second end of
// each floor is a forked child that dies with its parent (PR_SET_PDEATHSIG) and is
// killed and reaped when the measurement ends or fails; every wait has a deadline.
// The tcp and udp floors may put that child in another network namespace
// (set_endpoints), as two hosts joined by a link.
#include "reference.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace msgpass::bench::reference {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t end_flag = 1ULL << 63;
constexpr std::uint64_t warm_flag = 1ULL << 62;
constexpr auto reply_deadline = 5s;
int child_cpu = -1;

// The ends of the tcp and udp floors (set_endpoints): the driver's and the other
// process's IPv4 addresses, and the other process's network namespace with the
// driver's own to come back to (-1: both ends in this one).
in_addr driver_address{htonl(INADDR_LOOPBACK)};
in_addr peer_address{htonl(INADDR_LOOPBACK)};
int peer_netns = -1;
int own_netns = -1;

double ns_between(Clock::time_point a, Clock::time_point b) {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Spins until done() holds; false when deadline passes first.
template <class Done>
bool spin_until(Done&& done, Clock::time_point deadline) {
    for (std::uint32_t i = 1;; ++i) {
        if (done()) return true;
        pause_cpu();
        if ((i & 1023) == 0 && Clock::now() > deadline) return false;
    }
}

// Warm-up and timed part of a floor, as the msgpass patterns split a Budget.
struct Phases {
    std::uint64_t warm_count = 0;
    std::chrono::nanoseconds warm{0};
    std::uint64_t count = 0;
    std::chrono::nanoseconds timed{0};

    explicit Phases(const Budget& b) {
        if (b.iterations != 0) {
            count = b.iterations;
            warm_count = std::max<std::uint64_t>(10, b.iterations / 10);
        } else {
            timed = std::chrono::nanoseconds(static_cast<std::int64_t>(b.seconds * 1e9));
            warm = timed / 10;
        }
    }
    // Calls step() for the warm-up phase then for the timed one (flags say which).
    template <class Step>
    void run(Step&& step) const {
        auto phase = [&](std::uint64_t n, std::chrono::nanoseconds d, std::uint64_t flags) {
            if (n != 0) {
                for (std::uint64_t i = 0; i < n; ++i)
                    step(flags);
                return;
            }
            const auto end = Clock::now() + d;
            for (std::uint64_t i = 0;; ++i) {
                if ((i & 15) == 0 && Clock::now() >= end) break;
                step(flags);
            }
        };
        phase(warm_count, warm, warm_flag);
        phase(count, timed, 0);
    }
};

class SharedRegion {
public:
    explicit SharedRegion(std::size_t size) : size_(size) {
        base_ = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (base_ == MAP_FAILED) throw std::runtime_error("mmap of " + std::to_string(size) + " bytes failed");
    }
    SharedRegion(const SharedRegion&) = delete;
    SharedRegion& operator=(const SharedRegion&) = delete;
    ~SharedRegion() { ::munmap(base_, size_); }
    [[nodiscard]] std::byte* at(std::size_t offset) const { return static_cast<std::byte*>(base_) + offset; }

private:
    void* base_;
    std::size_t size_;
};

// A forked child running body(); killed and reaped by the destructor.
class Child {
public:
    explicit Child(const std::function<void()>& body) {
        const pid_t parent = ::getpid();
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(1);
            if (peer_netns >= 0 && ::setns(peer_netns, CLONE_NEWNET) != 0) ::_exit(1);
            if (child_cpu >= 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(child_cpu, &set);
                ::sched_setaffinity(0, sizeof set, &set);
            }
            try {
                body();
            } catch (...) {
                ::_exit(1);
            }
            ::_exit(0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;
    ~Child() {
        if (!reaped_) ::kill(pid_, SIGKILL);
        reap();
    }
    // Waits for the child to exit by itself, at most timeout, then kills it.
    void finish(std::chrono::milliseconds timeout) {
        const auto deadline = Clock::now() + timeout;
        while (!reaped_ && Clock::now() < deadline) {
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_)
                reaped_ = true;
            else
                std::this_thread::sleep_for(1ms);
        }
    }

private:
    void reap() {
        while (!reaped_) {
            int status = 0;
            if (::waitpid(pid_, &status, 0) == pid_ || errno != EINTR) reaped_ = true;
        }
    }
    pid_t pid_ = -1;
    bool reaped_ = false;
};

std::vector<std::byte> pattern_bytes(std::size_t size) {
    std::vector<std::byte> v(size);
    for (std::size_t i = 0; i < size; ++i)
        v[i] = static_cast<std::byte>(i * 131 + 7);
    return v;
}

std::uint64_t touch(const std::byte* p, std::size_t n) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; i += 64)
        sum += static_cast<std::uint64_t>(p[i]);
    return sum;
}

volatile std::uint64_t sink;

std::size_t round_up(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
}

Result finish_pingpong(const std::string& technology, std::uint64_t size, std::vector<double>& samples,
                       double seconds) {
    Result r;
    r.technology = technology;
    r.pattern = "pingpong";
    r.size = size;
    r.iterations = samples.size();
    r.msgs_per_s = seconds > 0 ? 2.0 * static_cast<double>(samples.size()) / seconds : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    r.one_way_us = summarize(samples);
    return r;
}

// Runs round() (one round trip) through the warm-up and the timed phase, sampling.
Result time_pingpong(const std::string& technology, std::uint64_t size, const Budget& budget,
                     const std::function<void()>& round) {
    const Phases phases(budget);
    std::vector<double> samples;
    samples.reserve(phases.count != 0 ? phases.count : 1 << 20);
    Clock::time_point start{};
    phases.run([&](std::uint64_t flags) {
        if (flags == 0 && start == Clock::time_point{}) start = Clock::now();
        const auto t0 = Clock::now();
        round();
        if (flags == 0) samples.push_back(ns_between(t0, Clock::now()) / 2e3);
    });
    return finish_pingpong(technology, size, samples, ns_between(start, Clock::now()) / 1e9);
}

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {
        if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { close(); }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    [[nodiscard]] int get() const { return fd_; }

private:
    int fd_;
};

enum class End { driver, peer };

// A socket of the driver's end, or of the other process's end created here before
// the fork: in the other process's network namespace when it has one (a socket
// stays in the namespace it was made in).
int open_socket(int type, End end) {
    const bool elsewhere = end == End::peer && peer_netns >= 0;
    if (elsewhere && ::setns(peer_netns, CLONE_NEWNET) != 0) {
        throw std::runtime_error(std::string("setns to the peer's network namespace: ") + std::strerror(errno));
    }
    const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    const int error = errno;
    if (elsewhere && ::setns(own_netns, CLONE_NEWNET) != 0) {
        throw std::runtime_error(std::string("setns back to the driver's network namespace: ") + std::strerror(errno));
    }
    if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(error));
    return fd;
}

// Binds fd to its end's address and a port the kernel picks; returns the address.
sockaddr_in bound_address(int fd, End end) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr = end == End::driver ? driver_address : peer_address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        throw std::runtime_error(std::string("bind: ") + std::strerror(errno));
    }
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return a;
}

void set_timeout(int fd, std::chrono::seconds t) {
    timeval tv{static_cast<time_t>(t.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void no_delay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Reads exactly n bytes, polling the socket (MSG_DONTWAIT) instead of sleeping in it, as
// UCX's tcp transport does: a ping-pong floor that blocks in read() pays a wake-up
// per message, and ucx_perftest over tcp beat it 3-5x (compare-peers, 2026-11-27). A
// floor no peer beats must poll. False at EOF, on an error, or when nothing came
// before the deadline.
bool read_full_polling(int fd, std::byte* p, std::size_t n, Clock::time_point deadline) {
    std::uint32_t idle = 0;
    while (n > 0) {
        const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= static_cast<std::size_t>(k);
            continue;
        }
        if (k == 0) return false;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        if ((++idle & 1023) == 0 && Clock::now() > deadline) return false;
    }
    return true;
}

// One datagram of exactly n bytes, polling; false on an error, a short datagram or
// when nothing came before the deadline.
bool recv_datagram_polling(int fd, std::byte* p, std::size_t n, Clock::time_point deadline) {
    for (std::uint32_t idle = 1;; ++idle) {
        const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
        if (k >= 0) return static_cast<std::size_t>(k) == n;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        if ((idle & 1023) == 0 && Clock::now() > deadline) return false;
    }
}

// Writes exactly n bytes; false on an error (timeouts included).
bool write_full(int fd, const std::byte* p, std::size_t n) {
    while (n > 0) {
        const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= static_cast<std::size_t>(k);
    }
    return true;
}

} // namespace

void set_child_cpu(int cpu) {
    child_cpu = cpu;
}

void set_endpoints(const Endpoints& e) {
    auto parse = [](const std::string& text, in_addr& out) {
        if (::inet_pton(AF_INET, text.c_str(), &out) != 1) {
            throw std::invalid_argument("floor address '" + text + "' is not an IPv4 address");
        }
    };
    parse(e.driver, driver_address);
    parse(e.peer, peer_address);
    if (e.peer_netns.empty()) return;
    const std::string path =
        e.peer_netns.find('/') == std::string::npos ? "/var/run/netns/" + e.peer_netns : e.peer_netns;
    peer_netns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (peer_netns < 0) {
        throw std::invalid_argument("network namespace '" + e.peer_netns + "': " + path + ": " + std::strerror(errno));
    }
    own_netns = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own_netns < 0) throw std::runtime_error(std::string("/proc/self/ns/net: ") + std::strerror(errno));
}

Result shm_pingpong(std::uint64_t size, const Budget& budget) {
    const std::size_t data = round_up(size, 64);
    SharedRegion region(128 + 2 * data);
    auto* ping = new (region.at(0)) std::atomic<std::uint64_t>(0);
    auto* pong = new (region.at(64)) std::atomic<std::uint64_t>(0);
    std::byte* ping_data = region.at(128);
    std::byte* pong_data = region.at(128 + data);
    Child child([&] {
        for (std::uint64_t i = 1;; ++i) {
            std::uint64_t seen = 0;
            if (!spin_until([&] { return (seen = ping->load(std::memory_order_acquire)) >= i; }, Clock::now() + 60s)) {
                return;
            }
            if (seen == end_flag) return;
            std::memcpy(pong_data, ping_data, size);
            pong->store(i, std::memory_order_release);
        }
    });
    const auto src = pattern_bytes(size);
    std::uint64_t n = 0;
    auto r = time_pingpong("reference-shm-pingpong", size, budget, [&] {
        std::memcpy(ping_data, src.data(), size);
        ping->store(++n, std::memory_order_release);
        if (!spin_until([&] { return pong->load(std::memory_order_acquire) == n; }, Clock::now() + reply_deadline)) {
            throw std::runtime_error("reference shm ping-pong: the other process stopped answering");
        }
    });
    ping->store(end_flag, std::memory_order_release);
    child.finish(1s);
    return r;
}

// A FIFO of variable-length records in one shared byte ring, as the fastest
// shared-memory transports lay theirs out (UCX's mm FIFO of small elements with an
// owner bit and inline data, whose releases are batched): each record is a 64-bit
// header (sequence number + 1 in the upper half, size and flags below it) followed
// by the message inline, on 8-byte boundaries, and never split at the end of the
// ring (a record that would be jumps to the start behind a skip mark). The
// producer zeroes the header of the next record before it publishes one, so the
// consumer stops at a zero word and never mistakes an earlier lap's bytes for a
// record. The consumer gives space back every eighth of the ring (one store to a
// line of its own), and the producer reads that line only when its cached copy
// says the ring is full. Both ends look at the clock every 256 records, not per
// record (a clock read costs 20-150 ns on this VM: the old ring floor, which read
// it twice per message, was beaten by UCX at 8 and 64 bytes).
Result shm_ring(std::uint64_t size, const Budget& budget) {
    constexpr std::uint64_t skip_mark = 0xffffffffULL;    // size field of a record that sends the reader to offset 0
    constexpr std::uint64_t size_mask = (1ULL << 30) - 1; // the end and warm-up flags are bits 31 and 30
    const std::uint64_t record = 8 + round_up(size, 8);
    std::uint64_t ring = 4 * config::MiB; // a power of two holding at least 16 records
    while (ring < 16 * record)
        ring *= 2;
    const std::uint64_t give_back_every = ring / 8;
    SharedRegion region(128 + ring + 8);
    auto* released = new (region.at(0)) std::atomic<std::uint64_t>(0); // bytes the consumer is done with
    std::byte* fifo = region.at(128);
    auto header_at = [&](std::uint64_t pos) {
        return reinterpret_cast<std::atomic<std::uint64_t>*>(fifo + (pos & (ring - 1)));
    };
    header_at(0)->store(0, std::memory_order_relaxed);
    const Phases phases(budget);
    Child producer([&] {
        const auto src = pattern_bytes(size);
        std::uint64_t n = 0;
        std::uint64_t head = 0;     // bytes written, counting skipped ends
        std::uint64_t room_end = 0; // head may reach this without asking the consumer
        auto wait_room = [&](std::uint64_t until) {
            if (until <= room_end) return;
            if (!spin_until(
                    [&] {
                        room_end = released->load(std::memory_order_acquire) + ring;
                        return until <= room_end;
                    },
                    Clock::now() + 10s)) {
                throw std::runtime_error("ring consumer stopped");
            }
        };
        auto put = [&](std::uint64_t flags) {
            std::uint64_t at = head & (ring - 1);
            if (at + record + 8 > ring) { // no room before the end (with the next header): skip to 0
                wait_room(head + (ring - at) + record + 8);
                header_at(0)->store(0, std::memory_order_relaxed);
                header_at(head)->store(((n + 1) << 32) | skip_mark, std::memory_order_release);
                head += ring - at;
                at = 0;
            } else {
                wait_room(head + record + 8);
            }
            std::memcpy(fifo + at + 8, src.data(), size);
            header_at(head + record)->store(0, std::memory_order_relaxed); // the next record's, unwritten
            header_at(head)->store(((n + 1) << 32) | size | (flags >> 32), std::memory_order_release);
            head += record;
            ++n;
        };
        phases.run(put);
        put(end_flag);
    });
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    Clock::time_point first{};
    Clock::time_point last{};
    bool started = false;
    std::uint64_t tail = 0;
    std::uint64_t given = 0;
    constexpr std::uint64_t end_bit = end_flag >> 32;
    constexpr std::uint64_t warm_bit = warm_flag >> 32;
    for (std::uint64_t n = 0;; ++n) {
        std::uint64_t word = 0;
        for (;;) {
            auto* h = header_at(tail);
            auto ready = [&] { return ((word = h->load(std::memory_order_acquire)) >> 32) == n + 1; };
            if (!ready() && !spin_until(ready, Clock::now() + reply_deadline)) { // the clock only when waiting
                throw std::runtime_error("reference ring: the producer stopped");
            }
            if ((word & 0xffffffffULL) != skip_mark) break;
            tail += ring - (tail & (ring - 1));
        }
        const std::uint64_t length = std::min<std::uint64_t>(word & size_mask, size);
        sink = sink + touch(fifo + (tail & (ring - 1)) + 8, length);
        tail += record;
        if (tail - given >= give_back_every) {
            given = tail;
            released->store(tail, std::memory_order_release);
        }
        if ((word & warm_bit) != 0 && (word & end_bit) == 0) continue;
        const bool end = (word & end_bit) != 0;
        if (!started || end || (count & 255) == 0) {
            const auto now = Clock::now();
            if (!started) first = now;
            last = now;
        }
        if (!started) {
            started = true;
            if (end) break;
            continue;
        }
        ++count;
        bytes += length;
        if (end) break;
    }
    producer.finish(1s);
    Result r;
    r.technology = "reference-shm-ring";
    r.pattern = "stream";
    r.size = size;
    r.iterations = count;
    const double s = ns_between(first, last) / 1e9;
    r.msgs_per_s = s > 0 ? static_cast<double>(count) / s : 0;
    r.MBps = s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0;
    return r;
}

Result memcpy_bandwidth(std::uint64_t size, const Budget& budget) {
    const auto src = pattern_bytes(size);
    std::vector<std::byte> dst(size);
    const Phases phases(budget);
    std::uint64_t count = 0;
    Clock::time_point start{};
    phases.run([&](std::uint64_t flags) {
        if (flags == 0 && count++ == 0) start = Clock::now();
        std::memcpy(dst.data(), src.data(), size);
        asm volatile("" : : "r"(dst.data()) : "memory");
    });
    const double s = ns_between(start, Clock::now()) / 1e9;
    Result r;
    r.technology = "reference-memcpy";
    r.pattern = "copy";
    r.size = size;
    r.iterations = count;
    r.msgs_per_s = s > 0 ? static_cast<double>(count) / s : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    return r;
}

Result tcp_pingpong(std::uint64_t size, const Budget& budget) {
    Fd listener(open_socket(SOCK_STREAM, End::peer)); // the other process accepts on it
    const auto address = bound_address(listener.get(), End::peer);
    if (::listen(listener.get(), 1) != 0) throw std::runtime_error("listen failed");
    Child child([&] {
        Fd c(::accept(listener.get(), nullptr, nullptr));
        no_delay(c.get());
        set_timeout(c.get(), 60s);
        std::vector<std::byte> buf(size);
        while (read_full_polling(c.get(), buf.data(), size, Clock::now() + 60s) &&
               write_full(c.get(), buf.data(), size)) {
        }
    });
    Fd s(open_socket(SOCK_STREAM, End::driver));
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    no_delay(s.get());
    set_timeout(s.get(), std::chrono::duration_cast<std::chrono::seconds>(reply_deadline));
    const auto src = pattern_bytes(size);
    std::vector<std::byte> dst(size);
    auto r = time_pingpong("reference-tcp-pingpong", size, budget, [&] {
        if (!write_full(s.get(), src.data(), size) ||
            !read_full_polling(s.get(), dst.data(), size, Clock::now() + reply_deadline)) {
            throw std::runtime_error("reference tcp ping-pong: the other process stopped answering");
        }
    });
    s.close();
    child.finish(1s);
    return r;
}

std::optional<Result> udp_pingpong(std::uint64_t size, const Budget& budget) {
    if (size > 65507) return std::nullopt;
    Fd a(open_socket(SOCK_DGRAM, End::driver));
    Fd b(open_socket(SOCK_DGRAM, End::peer)); // the other process echoes on it
    const auto aa = bound_address(a.get(), End::driver);
    const auto ba = bound_address(b.get(), End::peer);
    ::connect(a.get(), reinterpret_cast<const sockaddr*>(&ba), sizeof ba);
    ::connect(b.get(), reinterpret_cast<const sockaddr*>(&aa), sizeof aa);
    Child child([&] {
        set_timeout(b.get(), 60s);
        std::vector<std::byte> buf(size);
        // Polls (as the tcp floor); a zero-byte datagram ends it.
        for (;;) {
            ssize_t n = -1;
            const auto deadline = Clock::now() + 60s;
            for (std::uint32_t idle = 1; n < 0; ++idle) {
                n = ::recv(b.get(), buf.data(), size, MSG_DONTWAIT);
                if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
                if (n < 0 && (idle & 1023) == 0 && Clock::now() > deadline) return;
            }
            if (n == 0) return;
            ::send(b.get(), buf.data(), static_cast<std::size_t>(n), 0);
        }
    });
    set_timeout(a.get(), std::chrono::duration_cast<std::chrono::seconds>(reply_deadline));
    const auto src = pattern_bytes(size);
    std::vector<std::byte> dst(size);
    auto r = time_pingpong("reference-udp-pingpong", size, budget, [&] {
        if (::send(a.get(), src.data(), size, 0) != static_cast<ssize_t>(size) ||
            !recv_datagram_polling(a.get(), dst.data(), size, Clock::now() + reply_deadline)) {
            throw std::runtime_error("reference udp ping-pong: a datagram was lost or the other process stopped");
        }
    });
    ::send(a.get(), src.data(), 0, 0);
    child.finish(1s);
    return r;
}

Result tcp_stream(std::uint64_t size, const Budget& budget) {
    Fd listener(open_socket(SOCK_STREAM, End::driver));
    const auto address = bound_address(listener.get(), End::driver);
    if (::listen(listener.get(), 1) != 0) throw std::runtime_error("listen failed");
    const Phases phases(budget);
    Child sender([&] {
        Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return;
        no_delay(s.get());
        set_timeout(s.get(), 10s);
        const auto src = pattern_bytes(size);
        phases.run([&](std::uint64_t) {
            if (!write_full(s.get(), src.data(), size)) throw std::runtime_error("receiver closed");
        });
    });
    Fd c(::accept(listener.get(), nullptr, nullptr));
    set_timeout(c.get(), std::chrono::duration_cast<std::chrono::seconds>(reply_deadline));
    std::vector<std::byte> buf(std::max<std::size_t>(size, 256 * config::KiB));
    // The warm-up is the first warm_count messages, or what arrives in the first
    // warm duration; the rate counts what comes after it until the sender closes.
    const std::uint64_t warm_bytes = phases.warm_count * size;
    std::uint64_t total = 0;
    std::uint64_t bytes = 0;      // timed bytes read after the read that ended the warm-up
    std::uint64_t warm_total = 0; // the bytes of the warm-up
    Clock::time_point first{};
    Clock::time_point start{};
    Clock::time_point last{};
    bool timing = false;
    for (;;) {
        const ssize_t k = ::read(c.get(), buf.data(), buf.size());
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) throw std::runtime_error("reference tcp stream: the sender stopped");
        if (k == 0) break;
        const auto now = Clock::now();
        if (total == 0) first = now;
        total += static_cast<std::uint64_t>(k);
        if (!timing && (phases.warm_count != 0 ? total >= warm_bytes : now - first >= phases.warm)) {
            timing = true;
            start = now;
            warm_total = phases.warm_count != 0 ? warm_bytes : total;
        } else if (timing) {
            bytes += static_cast<std::uint64_t>(k);
        }
        last = now;
    }
    sender.finish(1s);
    Result r;
    r.technology = "reference-tcp-stream";
    r.pattern = "stream";
    r.size = size;
    // A loaded machine may hand the receiver the whole stream in one or two reads;
    // the timed messages are then all that came after the warm-up, and the rate is
    // taken over the whole stream when no read came after the one that ended it.
    r.iterations = timing ? (total - warm_total) / size : 0;
    double s = ns_between(start, last) / 1e9;
    if (s <= 0) {
        s = ns_between(first, last) / 1e9;
        bytes = total;
    }
    r.MBps = s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0;
    r.msgs_per_s = r.MBps * 1e6 / static_cast<double>(size);
    return r;
}

// Loopback UDP stream with the least flow control that keeps loopback from dropping:
// the sender keeps at most `window` datagrams unacknowledged (about 96 KiB, so that
// they fit the default socket receive buffer with the kernel's per-datagram
// overhead), and the receiver acknowledges every window / 2 with the count it has.
// The first byte of each datagram says warm-up (1) or timed (0); an empty datagram
// ends the stream. A datagram lost anyway (another process filling the buffer) is
// waited for 100 ms and then given up, so the floor never hangs.
std::optional<Result> udp_stream(std::uint64_t size, const Budget& budget) {
    if (size == 0 || size > 65507) return std::nullopt;
    Fd a(open_socket(SOCK_DGRAM, End::peer)); // the other process sends on it
    Fd b(open_socket(SOCK_DGRAM, End::driver));
    const auto aa = bound_address(a.get(), End::peer);
    const auto ba = bound_address(b.get(), End::driver);
    ::connect(a.get(), reinterpret_cast<const sockaddr*>(&ba), sizeof ba);
    ::connect(b.get(), reinterpret_cast<const sockaddr*>(&aa), sizeof aa);
    const std::uint64_t window = std::clamp<std::uint64_t>(96 * config::KiB / (size + 768), 2, 128);
    const Phases phases(budget);
    Child sender([&] {
        set_timeout(a.get(), 10s);
        auto src = pattern_bytes(size);
        std::uint64_t sent = 0;
        std::uint64_t acked = 0;
        auto wait_ack = [&](std::chrono::milliseconds bound) {
            pollfd p{a.get(), POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return false;
            std::uint64_t count = 0;
            if (::recv(a.get(), &count, sizeof count, 0) == sizeof count) acked = std::max(acked, count);
            return true;
        };
        phases.run([&](std::uint64_t flags) {
            while (sent - acked >= window) {
                if (!wait_ack(100ms)) acked = sent; // lost: give it up
            }
            src[0] = std::byte{static_cast<unsigned char>(flags != 0 ? 1 : 0)};
            if (::send(a.get(), src.data(), size, 0) == static_cast<ssize_t>(size)) ++sent;
        });
        ::send(a.get(), src.data(), 0, 0);
    });
    set_timeout(b.get(), std::chrono::duration_cast<std::chrono::seconds>(reply_deadline));
    std::vector<std::byte> buf(size);
    std::uint64_t received = 0;
    std::uint64_t count = 0;
    Clock::time_point start{};
    Clock::time_point last{};
    bool timing = false;
    for (;;) {
        const ssize_t k = ::recv(b.get(), buf.data(), size, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) throw std::runtime_error("reference udp stream: the sender stopped");
        if (k == 0) break;
        ++received;
        if (received % (window / 2) == 0) ::send(b.get(), &received, sizeof received, 0);
        const auto now = Clock::now();
        if (buf[0] == std::byte{0}) {
            if (!timing) {
                timing = true;
                start = now;
            } else {
                ++count;
            }
            last = now;
        }
    }
    sender.finish(1s);
    Result r;
    r.technology = "reference-udp-stream";
    r.pattern = "stream";
    r.size = size;
    r.iterations = count;
    const double s = ns_between(start, last) / 1e9;
    r.msgs_per_s = s > 0 ? static_cast<double>(count) / s : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    return r;
}

} // namespace msgpass::bench::reference
