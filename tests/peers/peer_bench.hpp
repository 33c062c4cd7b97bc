// The harness of the peer benchmarks that scripts/compare-peers.sh sets beside
// msgpass-bench (zmq_bench.cpp for ZeroMQ, nng_bench.cpp for NNG): the command line,
// the two processes of each point, and the ping-pong and stream patterns measured
// as msgpass-bench measures them (one-way latency = round trip / 2 per iteration
// after a warm-up; messages and MB per second at the receiver), each point printed
// as the JSON line of msgpass-bench --json (shared/design/BENCHMARKS.md). A
// benchmark supplies only its library's socket (the Socket concept below) and
// calls run<Socket>() from main. Every point runs in a fresh pair of processes: the
// driver forks the peer before the library starts (a child of a process where the
// library ran must not use it), and hands the peer the endpoint through a pipe. With --peer-netns the peer enters that
// network namespace right after the fork, so that the two ends talk across a link (a veth pair) as two hosts would.
// Built only by scripts/compare-peers.sh, never by the CMake build: msgpass
// never depends on these libraries.
#pragma once

#include "report.hpp" // msgpass-bench's Result, summarize(), to_json(), parse_sizes()

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace peers {

using msgpass::bench::Result;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
// A point's messages may be queued up to this many bytes per socket (a default
// high-water mark of 1000 messages would be 4 GiB at 4 MiB).
constexpr std::uint64_t queued_bytes = 16 * MiB;
// Longest wait for one message, for the peer's endpoint, and for a peer's exit: a
// broken peer ends the run with an error instead of hanging it.
constexpr int timeout_ms = 10000;

// The messages a socket queues for a point of `size` bytes.
inline int queue_messages(std::uint64_t size, int most) {
    return static_cast<int>(std::clamp<std::uint64_t>(queued_bytes / std::max<std::uint64_t>(size, 1), 4, most));
}

// What a benchmark's socket offers (one message held at a time):
//   Socket(std::uint64_t size, bool peer_end);
//   std::string bind(const std::string& transport, const std::string& address, const std::string& ipc_path);
//       listens (tcp on `address`, a port the kernel picks; ipc on `ipc_path`) and
//       returns the endpoint a peer connects to;
//   void connect(const std::string& endpoint);
//   void send(const void* data, std::size_t size);
//   bool receive(bool wait);       // false only when !wait and nothing is there
//   const void* data(); std::size_t size();   // of the message received last
//   void echo();                   // sends the message received last back
// Errors throw std::runtime_error naming the call.

struct Options {
    std::vector<std::string> transports;
    std::vector<std::string> patterns = {"pingpong", "stream"};
    std::vector<std::uint64_t> sizes = {8,    16,   32,   64,    128,   256,    512,     1024,
                                        2048, 4096, 8192, 16384, 65536, 262144, 1048576, 4194304};
    double seconds = 0.4;
    std::vector<int> cpus;
    std::string bind = "127.0.0.1";
    std::string peer_netns;
};

inline std::vector<std::string> split(const std::string& list) {
    std::vector<std::string> items;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ','))
        items.push_back(item);
    return items;
}

inline Options parse(int argc, char** argv, const std::string& program, const std::vector<std::string>& transports,
                     const std::vector<std::string>& default_transports) {
    Options o;
    o.transports = default_transports;
    std::string known;
    for (const auto& t : transports)
        known += (known.empty() ? "" : ",") + t;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::printf("%s [--transport %s] [--pattern pingpong,stream] [--sizes 8,64,1KiB,...]\n"
                        "          [--seconds S] [--cpu A,B] [--bind ADDRESS] [--peer-netns NAME]\n"
                        "One JSON line per transport x pattern x size, as msgpass-bench --json.\n"
                        "--bind: the driver's tcp address (127.0.0.1); --peer-netns: the peer process\n"
                        "enters this network namespace (ip netns) before it connects.\n",
                        program.c_str(), known.c_str());
            std::exit(0);
        }
        if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
        const std::string value = argv[++i];
        if (arg == "--transport") {
            o.transports = split(value);
            for (const auto& t : o.transports)
                if (std::find(transports.begin(), transports.end(), t) == transports.end())
                    throw std::invalid_argument("unknown transport '" + t + "' (" + known + ")");
        } else if (arg == "--pattern") {
            o.patterns = split(value);
            for (const auto& p : o.patterns)
                if (p != "pingpong" && p != "stream") throw std::invalid_argument("unknown pattern '" + p + "'");
        } else if (arg == "--sizes") {
            o.sizes = msgpass::bench::parse_sizes(value);
        } else if (arg == "--seconds") {
            char* end = nullptr;
            o.seconds = std::strtod(value.c_str(), &end);
            if (*end != '\0' || !(o.seconds > 0 && o.seconds < 3600))
                throw std::invalid_argument("--seconds must be in (0, 3600)");
        } else if (arg == "--cpu") {
            for (const auto& c : split(value)) {
                char* end = nullptr;
                const long n = std::strtol(c.c_str(), &end, 10);
                if (c.empty() || *end != '\0' || n < 0 || n >= CPU_SETSIZE)
                    throw std::invalid_argument("bad cpu '" + c + "'");
                o.cpus.push_back(static_cast<int>(n));
            }
        } else if (arg == "--bind") {
            o.bind = value;
        } else if (arg == "--peer-netns") {
            o.peer_netns = value;
        } else {
            throw std::invalid_argument("unknown option " + arg);
        }
    }
    return o;
}

// Pins the calling process (and the threads it starts later, the library's I/O
// threads among them) to one CPU of --cpu: the driver to the first, the peer to the
// second.
inline void pin(const std::vector<int>& cpus, std::size_t index) {
    if (cpus.empty()) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[index % cpus.size()], &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
        throw std::runtime_error(std::string("cannot pin to a cpu: ") + std::strerror(errno));
}

// Moves the calling (single-threaded) process into the network namespace `name`
// of `ip netns` (or a path): the sockets it makes from now on live there.
inline void enter_netns(const std::string& name) {
    if (name.empty()) return;
    const std::string path = name.find('/') == std::string::npos ? "/var/run/netns/" + name : name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("network namespace " + path + ": " + std::strerror(errno));
    const int rc = ::setns(fd, CLONE_NEWNET);
    const int error = errno;
    ::close(fd);
    if (rc != 0) throw std::runtime_error("setns " + path + ": " + std::strerror(error));
}

// Reads one byte per cache line, as msgpass-bench's receivers and its ring floor do,
// so that no end gets away without touching the data it was handed.
inline std::uint64_t touch(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const volatile unsigned char*>(data);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < size; i += 64)
        sum += bytes[i];
    return sum;
}

inline double since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The peer's half of a point: echoes until an empty message, which it echoes too
// (pingpong), or sends until the driver's empty message, then sends an empty end
// marker (stream); in both, it then waits for the driver's goodbye, so that it
// closes its socket only when the driver has everything (a close may drop what is
// still queued).
template <class Socket>
void serve(Socket& socket, const std::string& pattern, std::uint64_t size) {
    if (pattern == "pingpong") {
        for (;;) {
            socket.receive(true);
            const auto length = socket.size();
            touch(socket.data(), length);
            socket.echo();
            if (length == 0) break;
        }
        socket.receive(true);
        return;
    }
    std::vector<unsigned char> data(size, 0x5a);
    for (std::uint64_t sent = 0;; ++sent) {
        // Write the sequence number, as msgpass-bench's senders write their tag.
        std::memcpy(data.data(), &sent, std::min<std::size_t>(sizeof sent, size));
        socket.send(data.data(), size);
        if (sent % 64 == 0 && socket.receive(false)) break;
    }
    socket.send(nullptr, 0);
    socket.receive(true);
}

template <class Socket>
Result drive(Socket& socket, const std::string& pattern, std::uint64_t size, double seconds) {
    Result r;
    r.pattern = pattern;
    r.size = size;
    const double warm_up = seconds / 10;
    if (pattern == "pingpong") {
        std::vector<unsigned char> data(size, 0xa5);
        std::vector<double> samples;
        samples.reserve(1 << 16);
        const auto warm_start = Clock::now();
        while (since(warm_start) < warm_up) {
            socket.send(data.data(), size);
            socket.receive(true);
        }
        const auto start = Clock::now();
        auto now = start;
        while (std::chrono::duration<double>(now - start).count() < seconds) {
            const auto t0 = Clock::now();
            socket.send(data.data(), size);
            socket.receive(true);
            touch(socket.data(), socket.size());
            now = Clock::now();
            samples.push_back(std::chrono::duration<double, std::micro>(now - t0).count() / 2);
        }
        const double elapsed = std::chrono::duration<double>(now - start).count();
        // The end: an empty message, which the peer echoes, then the goodbye.
        socket.send(nullptr, 0);
        do {
            socket.receive(true);
        } while (socket.size() != 0);
        socket.send(nullptr, 0);
        r.iterations = samples.size();
        r.one_way_us = msgpass::bench::summarize(samples);
        r.msgs_per_s = 2.0 * static_cast<double>(r.iterations) / elapsed;
    } else {
        const auto warm_start = Clock::now();
        while (since(warm_start) < warm_up)
            socket.receive(true);
        std::uint64_t count = 0;
        const auto start = Clock::now();
        auto now = start;
        while (std::chrono::duration<double>(now - start).count() < seconds) {
            socket.receive(true);
            touch(socket.data(), socket.size());
            ++count;
            now = Clock::now();
        }
        const double elapsed = std::chrono::duration<double>(now - start).count();
        socket.send(nullptr, 0);
        do {
            socket.receive(true);
        } while (socket.size() != 0);
        socket.send(nullptr, 0);
        r.iterations = count;
        r.msgs_per_s = static_cast<double>(count) / elapsed;
    }
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    return r;
}

// Reads the endpoint line the driver writes into the pipe.
inline std::string read_endpoint(int fd) {
    std::string line;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) throw std::runtime_error("no endpoint from the driver");
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) throw std::runtime_error("no endpoint from the driver");
        char c = 0;
        const ssize_t n = ::read(fd, &c, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw std::runtime_error("the driver closed the pipe without an endpoint");
        if (c == '\n') return line;
        line += c;
        if (line.size() > 1024) throw std::runtime_error("endpoint too long");
    }
}

// Waits for the peer to exit; kills it when it does not within the timeout.
// Returns its exit status (128 + signal when killed).
inline int reap(pid_t pid) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    int status = 0;
    for (;;) {
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        if (Clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// One point in a fresh pair of processes. The driver's socket stays open until the
// peer has exited, so that nothing the peer still waits for is dropped by a close.
template <class Socket>
Result run_point(const Options& o, const std::string& program, const std::string& transport, const std::string& pattern,
                 std::uint64_t size, unsigned serial) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t parent = ::getpid();
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::close(fds[1]);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(1);
        int status = 0;
        try {
            enter_netns(o.peer_netns);
            pin(o.cpus, 1);
            const std::string endpoint = read_endpoint(fds[0]);
            Socket socket(size, true);
            socket.connect(endpoint);
            serve(socket, pattern, size);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: peer: %s\n", program.c_str(), e.what());
            status = 1;
        }
        ::_exit(status);
    }
    ::close(fds[0]);
    const std::string ipc_path =
        "/tmp/" + program + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial) + ".ipc";
    Result r;
    int status = 0;
    try {
        Socket socket(size, false);
        const std::string line = socket.bind(transport, o.bind, ipc_path) + "\n";
        if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size()))
            throw std::runtime_error(std::string("cannot hand the endpoint to the peer: ") + std::strerror(errno));
        ::close(fds[1]);
        fds[1] = -1;
        r = drive(socket, pattern, size, o.seconds);
        status = reap(pid);
    } catch (...) {
        if (fds[1] >= 0) ::close(fds[1]);
        ::kill(pid, SIGKILL);
        reap(pid);
        ::unlink(ipc_path.c_str());
        throw;
    }
    ::unlink(ipc_path.c_str());
    if (status != 0) throw std::runtime_error("the peer ended with status " + std::to_string(status));
    return r;
}

// One point in a process of its own, which prints its JSON line: the process that
// loops over the points never touches the library, so every fork happens before
// the library has started (NNG refuses to run in the child of a process where it
// ran). False when the point failed (the process said why on stderr).
template <class Socket>
bool point_process(const Options& o, const std::string& program, const std::string& technology,
                   const std::string& transport, const std::string& pattern, std::uint64_t size, unsigned serial) {
    std::fflush(stdout);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        int status = 0;
        try {
            Result r = run_point<Socket>(o, program, transport, pattern, size, serial);
            r.technology = technology + "-" + transport;
            std::fputs((msgpass::bench::to_json(r) + "\n").c_str(), stdout);
            std::fflush(stdout);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: %s %s %s bytes: %s\n", program.c_str(), transport.c_str(), pattern.c_str(),
                         std::to_string(size).c_str(), e.what());
            status = 1;
        }
        ::_exit(status);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// main() of a peer benchmark: technology "<technology>-<transport>" per line.
template <class Socket>
int run(int argc, char** argv, const std::string& program, const std::string& technology,
        const std::vector<std::string>& transports, const std::vector<std::string>& default_transports) {
    Options o;
    try {
        o = parse(argc, argv, program, transports, default_transports);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s (see --help)\n", program.c_str(), e.what());
        return 2;
    }
    try {
        pin(o.cpus, 0);
        unsigned serial = 0;
        for (const auto& transport : o.transports)
            for (auto size : o.sizes)
                for (const auto& pattern : o.patterns)
                    if (!point_process<Socket>(o, program, technology, transport, pattern, size, ++serial)) return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program.c_str(), e.what());
        return 1;
    }
    return 0;
}

} // namespace peers
