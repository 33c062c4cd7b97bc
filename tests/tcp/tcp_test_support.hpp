// What the tcp tests share beyond tcp_support.hpp (which their peer program shares
// too): a partition name per test, the listener's counts in words, a raw socket for
// the hostile side of a connection, and the arguments and outcome of tcp_peer
// processes (TCP_PEER is the path of the program).
#pragma once

#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>

#include "node.hpp"

#include "../support/bounded.hpp"
#include "../support/environment.hpp"
#include "../support/process.hpp"
#include "tcp_support.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace msgpass::test {

using namespace std::chrono_literals;
using tcp::Refusal;

inline constexpr auto patience = 30s; // a bound for waits that succeed in milliseconds

inline std::string partition_for_test() {
    return unique_partition(::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// Two tcp nodes on 127.0.0.1, each on a port free now, with this peer_timeout: the
// configuration most stream tests start from (as a NodePair of tests/support). Throws
// when there are no free ports.
inline config::Configuration local_pair(std::chrono::milliseconds peer_timeout,
                                        const std::string& partition = partition_for_test()) {
    const auto text = local_partition(partition, 2, peer_timeout);
    if (text.nodes.size() != 2) throw std::runtime_error("no free ports for a pair of tcp nodes");
    return text.load();
}

inline tcp::TcpNodeFactory& tcp_of(NodeFactory& f) {
    return dynamic_cast<tcp::TcpNodeFactory&>(f);
}

inline std::string describe(const tcp::ListenerStats& s) {
    std::ostringstream out;
    out << "accepted " << s.accepted;
    for (std::size_t k = 1; k < s.refused.size(); ++k)
        if (s.refused[k] != 0) out << ", " << tcp::describe(static_cast<Refusal>(k)) << " " << s.refused[k];
    return out.str();
}

// ------------------------------------------------------------- raw sockets

// The hostile side of a connection: a non-blocking socket with bounded waits.
class RawSocket {
public:
    RawSocket() = default;
    explicit RawSocket(int fd) : fd_(fd) {}
    RawSocket(RawSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    RawSocket& operator=(RawSocket&& o) noexcept {
        if (this != &o) {
            close();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    RawSocket(const RawSocket&) = delete;
    RawSocket& operator=(const RawSocket&) = delete;
    ~RawSocket() { close(); }

    // Connects to 127.0.0.1:port; an invalid socket when that fails within bound.
    static RawSocket connect_to(std::uint16_t port, std::chrono::milliseconds bound = 10s) {
        RawSocket s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!s.valid()) return s;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (::connect(s.fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return s;
        if (errno != EINPROGRESS) return RawSocket();
        pollfd p{s.fd_, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return RawSocket();
        int error = 0;
        socklen_t len = sizeof error;
        if (::getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) return RawSocket();
        return s;
    }

    [[nodiscard]] bool valid() const { return fd_ >= 0; }
    [[nodiscard]] int fd() const { return fd_; }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    // No more bytes from this side (FIN); the other side may still answer.
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

    // Writes all n bytes; false when the peer closed or bound passed.
    bool send_all(const void* data, std::size_t n, std::chrono::milliseconds bound = 10s) {
        const auto deadline = Clock::now() + bound;
        const auto* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
            if (k > 0) {
                p += k;
                n -= static_cast<std::size_t>(k);
                continue;
            }
            if (k < 0 && errno != EAGAIN && errno != EINTR) return false;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return false;
            pollfd w{fd_, POLLOUT, 0};
            ::poll(&w, 1, static_cast<int>(left.count()));
        }
        return true;
    }
    template <class T>
    bool send_struct(const T& v) {
        return send_all(&v, sizeof v);
    }

    // Reads exactly n bytes; returns how many arrived before end, error or bound.
    std::size_t read_exact(void* data, std::size_t n, std::chrono::milliseconds bound = 10s) {
        const auto deadline = Clock::now() + bound;
        auto* p = static_cast<char*>(data);
        std::size_t got = 0;
        while (got < n) {
            const ssize_t k = ::recv(fd_, p + got, n - got, 0);
            if (k > 0) {
                got += static_cast<std::size_t>(k);
                continue;
            }
            if (k == 0 || (errno != EAGAIN && errno != EINTR)) return got;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return got;
            pollfd r{fd_, POLLIN, 0};
            ::poll(&r, 1, static_cast<int>(left.count()));
        }
        return got;
    }

    // Reads and drops whatever comes until the other side closes (true: FIN or
    // RST) or bound passes (false).
    bool wait_closed(std::chrono::milliseconds bound = 10s) {
        const auto deadline = Clock::now() + bound;
        for (;;) {
            char chunk[4096];
            const ssize_t k = ::recv(fd_, chunk, sizeof chunk, 0);
            if (k == 0) return true;
            if (k < 0 && errno != EAGAIN && errno != EINTR) return true; // ECONNRESET and the like
            if (k > 0) continue;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return false;
            pollfd r{fd_, POLLIN, 0};
            ::poll(&r, 1, static_cast<int>(left.count()));
        }
    }

private:
    int fd_ = -1;
};

// ------------------------------------------------------------ a relay to cut

// A TCP relay from 127.0.0.1:port to 127.0.0.1:target, in its own thread, that the
// test cuts and joins again: a node whose nodes file puts its peer on `port` reaches
// the peer only through it. cut() returns once every relayed connection is closed
// and nothing more is forwarded; while cut, a new connection is accepted and closed
// at once (the connector sees its peer unreachable, never refused: the port
// listens); after join() new connections are relayed again.
class Relay {
public:
    Relay(std::uint16_t port, std::uint16_t target) : target_(target) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0) {
            ::close(listen_fd_);
            listen_fd_ = -1;
            return;
        }
        thread_ = std::thread([this] { run(); });
    }
    Relay(const Relay&) = delete;
    Relay& operator=(const Relay&) = delete;
    ~Relay() {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        if (thread_.joinable()) thread_.join();
        for (auto& [a, b] : pairs_) {
            ::close(a);
            ::close(b);
        }
        if (listen_fd_ >= 0) ::close(listen_fd_);
    }
    [[nodiscard]] bool valid() const { return listen_fd_ >= 0; }

    // Closes every relayed connection and relays nothing until join(); returns once
    // the relay thread did it (false when it did not within bound).
    bool cut(std::chrono::milliseconds bound = 10s) { return set_cut(true, bound); }
    bool join(std::chrono::milliseconds bound = 10s) { return set_cut(false, bound); }
    // Connections relayed to the target so far.
    [[nodiscard]] std::uint64_t relayed() const { return relayed_.load(); }
    // Connections accepted and closed at once while cut.
    [[nodiscard]] std::uint64_t turned_away() const { return turned_away_.load(); }

private:
    bool set_cut(bool cut, std::chrono::milliseconds bound) {
        std::unique_lock lock(mutex_);
        want_cut_ = cut;
        const std::uint64_t asked = ++asked_;
        return changed_.wait_for(lock, bound, [&] { return applied_ >= asked; });
    }

    void close_pairs() {
        for (auto& [a, b] : pairs_) {
            ::close(a);
            ::close(b);
        }
        pairs_.clear();
    }

    void run() {
        std::vector<pollfd> fds;
        std::vector<char> chunk(64 * 1024);
        bool cut = false;
        for (;;) {
            {
                std::lock_guard lock(mutex_);
                if (stop_) return;
                if (applied_ != asked_) {
                    cut = want_cut_;
                    if (cut) close_pairs(); // nothing read from here on is forwarded
                    applied_ = asked_;
                    changed_.notify_all();
                }
            }
            fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
            for (auto& [a, b] : pairs_) {
                fds.push_back(pollfd{a, POLLIN, 0});
                fds.push_back(pollfd{b, POLLIN, 0});
            }
            if (::poll(fds.data(), fds.size(), 5) <= 0) continue; // 5 ms: the next look at cut() and join()
            if ((fds[0].revents & POLLIN) != 0) accept_one(cut);
            std::vector<std::size_t> dead;
            for (std::size_t i = 1; i < fds.size(); ++i) {
                if (fds[i].revents == 0) continue;
                const std::size_t pair = (i - 1) / 2;
                if (pair >= pairs_.size()) break;
                const int from = fds[i].fd;
                const int to = (i - 1) % 2 == 0 ? pairs_[pair].second : pairs_[pair].first;
                const ssize_t got = ::recv(from, chunk.data(), chunk.size(), MSG_DONTWAIT);
                if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (got <= 0 || !write_all(to, chunk.data(), static_cast<std::size_t>(got))) {
                    if (dead.empty() || dead.back() != pair) dead.push_back(pair);
                }
            }
            for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
                ::close(pairs_[*it].first);
                ::close(pairs_[*it].second);
                pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(*it));
            }
        }
    }

    void accept_one(bool cut) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) return;
        if (cut) {
            ::close(fd);
            turned_away_.fetch_add(1);
            return;
        }
        const int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(target_);
        if (out < 0 || ::connect(out, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
            if (out >= 0) ::close(out);
            ::close(fd);
            return;
        }
        pairs_.emplace_back(fd, out);
        relayed_.fetch_add(1);
    }

    // Blocking sockets: the relay carries a test's few messages, both ends read.
    static bool write_all(int fd, const char* p, std::size_t n) {
        while (n > 0) {
            const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return false;
            p += k;
            n -= static_cast<std::size_t>(k);
        }
        return true;
    }

    std::uint16_t target_;
    int listen_fd_ = -1;
    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable changed_;
    bool stop_ = false;
    bool want_cut_ = false;
    std::uint64_t asked_ = 0, applied_ = 0;
    std::vector<std::pair<int, int>> pairs_; // (accepted, to the target): relay thread only
    std::atomic<std::uint64_t> relayed_{0}, turned_away_{0};
};

// ------------------------------------------------------------ peer processes

inline std::vector<std::string> peer_args(const PartitionText& text, NodeId self, const std::string& mode,
                                          const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv{TCP_PEER, text.network_yaml(), text.nodes_yaml(), std::to_string(self), mode};
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
}

// The first line of a peer that reports how it ended ("done", "sent", "received",
// "error", "lost"), or "" after bound.
inline std::string outcome(ChildProcess& peer, std::chrono::milliseconds bound) {
    const auto deadline = Clock::now() + bound;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) return "";
        const auto line = peer.read_line(left);
        if (line.empty()) return "";
        for (const char* prefix : {"done", "sent", "received", "error", "lost"})
            if (line.rfind(prefix, 0) == 0) return line;
    }
}

// The count of source `id` in a peer's "progress 1:N 2:M" line, or 0.
inline std::uint64_t progress_of(const std::string& line, NodeId id) {
    const std::string key = " " + std::to_string(id) + ":";
    const auto at = line.find(key);
    return at == std::string::npos ? 0 : std::stoull(line.substr(at + key.size()));
}

// Sends message seq of stream to node, driving the queue while it is full (for at
// most default_patience, then Stalled).
inline void send_driving(NodeFactory& f, Node& node, std::uint32_t stream, std::uint64_t seq, std::size_t size = 0) {
    send_retrying(node, make_message(f, size == 0 ? mixed_size(seq) : size, stream, seq),
                  "message " + std::to_string(seq) + " of stream " + std::to_string(stream));
}

} // namespace msgpass::test
