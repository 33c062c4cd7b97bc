// zmq_bench: the ZeroMQ peer benchmark that scripts/compare-peers.sh sets beside
// msgpass-bench. It measures ping-pong (one-way latency = round trip / 2 per
// iteration, after a warm-up) and stream (messages and MB per second at the
// receiver) between two processes over ZeroMQ PAIR sockets on ipc:// (a Unix-domain
// socket) and tcp:// (loopback), and prints each point as the JSON line of
// msgpass-bench --json (shared/design/BENCHMARKS.md), with technology "zeromq-ipc" or
// "zeromq-tcp". Every point runs in a fresh pair of processes: the driver forks
// before it creates its ZeroMQ context (a child of a process with ZeroMQ's threads
// must not create one), and hands the peer the endpoint through a pipe.
// It is built only by scripts/compare-peers.sh, not by the CMake build, so that
// msgpass itself never depends on ZeroMQ.
#include "report.hpp" // msgpass-bench's Result, summarize(), to_json(), parse_sizes()

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <numeric>
#include <optional>
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

namespace {

using msgpass::bench::Latency;
using msgpass::bench::parse_sizes;
using msgpass::bench::Result;
using msgpass::bench::summarize;

void print_json(const Result& r) {
    std::fputs((msgpass::bench::to_json(r) + "\n").c_str(), stdout);
    std::fflush(stdout);
}

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
// A point's messages may be queued up to this many bytes per socket (ZeroMQ's
// default high-water mark of 1000 messages would be 4 GiB at 4 MiB).
constexpr std::uint64_t queued_bytes = 16 * MiB;
// Longest wait for one message, for the peer's endpoint, and for a peer's exit: a
// broken peer ends the run with an error instead of hanging it.
constexpr int timeout_ms = 10000;

struct Options {
    std::vector<std::string> transports = {"ipc", "tcp"};
    std::vector<std::string> patterns = {"pingpong", "stream"};
    std::vector<std::uint64_t> sizes = {8,    16,   32,   64,    128,   256,    512,     1024,
                                        2048, 4096, 8192, 16384, 65536, 262144, 1048576, 4194304};
    double seconds = 0.4;
    std::vector<int> cpus;
};

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + ": " + zmq_strerror(zmq_errno()));
}

std::vector<std::string> split(const std::string& list) {
    std::vector<std::string> items;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ','))
        items.push_back(item);
    return items;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::printf("zmq_bench [--transport ipc,tcp] [--pattern pingpong,stream] [--sizes 8,64,1KiB,...]\n"
                        "          [--seconds S] [--cpu A,B]\n"
                        "One JSON line per transport x pattern x size, as msgpass-bench --json.\n");
            std::exit(0);
        }
        if (i + 1 >= argc) throw std::invalid_argument("missing value after " + arg);
        const std::string value = argv[++i];
        if (arg == "--transport") {
            o.transports = split(value);
            for (const auto& t : o.transports)
                if (t != "ipc" && t != "tcp") throw std::invalid_argument("unknown transport '" + t + "'");
        } else if (arg == "--pattern") {
            o.patterns = split(value);
            for (const auto& p : o.patterns)
                if (p != "pingpong" && p != "stream") throw std::invalid_argument("unknown pattern '" + p + "'");
        } else if (arg == "--sizes") {
            o.sizes = parse_sizes(value);
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
        } else {
            throw std::invalid_argument("unknown option " + arg);
        }
    }
    return o;
}

// Pins the calling process (and the threads it starts later, ZeroMQ's I/O thread
// among them) to one CPU of --cpu: the driver to the first, the peer to the second.
void pin(const std::vector<int>& cpus, std::size_t index) {
    if (cpus.empty()) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[index % cpus.size()], &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
        throw std::runtime_error(std::string("cannot pin to a cpu: ") + std::strerror(errno));
}

// Reads one byte per cache line, as msgpass-bench's receivers and its ring floor do,
// so that no end gets away without touching the data it was handed.
std::uint64_t touch(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const volatile unsigned char*>(data);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < size; i += 64)
        sum += bytes[i];
    return sum;
}

// A ZeroMQ context and one PAIR socket. The peer's socket lingers on close so that
// its last message (the stream's end marker) is delivered; the driver's does not.
class Endpoint {
public:
    Endpoint(std::uint64_t size, bool linger) {
        context_ = zmq_ctx_new();
        if (!context_) fail("zmq_ctx_new");
        socket_ = zmq_socket(context_, ZMQ_PAIR);
        if (!socket_) fail("zmq_socket");
        const int hwm = static_cast<int>(std::clamp<std::uint64_t>(queued_bytes / size, 4, 1000));
        const int timeout = timeout_ms;
        set(ZMQ_SNDHWM, hwm);
        set(ZMQ_RCVHWM, hwm);
        set(ZMQ_LINGER, linger ? timeout : 0);
        set(ZMQ_RCVTIMEO, timeout);
        set(ZMQ_SNDTIMEO, timeout);
    }
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    ~Endpoint() {
        if (socket_) zmq_close(socket_);
        if (context_) zmq_ctx_term(context_);
    }

    // Binds and returns the endpoint a peer connects to (the port the kernel chose
    // for tcp://127.0.0.1:*).
    std::string bind(const std::string& address) {
        if (zmq_bind(socket_, address.c_str()) != 0) fail("zmq_bind " + address);
        char bound[256];
        std::size_t length = sizeof bound;
        if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, bound, &length) != 0) fail("ZMQ_LAST_ENDPOINT");
        return bound;
    }
    void connect(const std::string& address) {
        if (zmq_connect(socket_, address.c_str()) != 0) fail("zmq_connect " + address);
    }
    void send(const void* data, std::size_t size) {
        if (zmq_send(socket_, data, size, 0) < 0) fail("zmq_send");
    }
    // Sends the received message back as it is (no copy).
    void echo(zmq_msg_t& message) {
        if (zmq_msg_send(&message, socket_, 0) < 0) fail("zmq_msg_send");
    }
    // Receives into `message` (initialised); false only when `wait` is false and
    // nothing is there.
    bool receive(zmq_msg_t& message, bool wait = true) {
        if (zmq_msg_recv(&message, socket_, wait ? 0 : ZMQ_DONTWAIT) >= 0) return true;
        if (!wait && zmq_errno() == EAGAIN) return false;
        fail(wait && zmq_errno() == EAGAIN ? "no message within the timeout" : "zmq_msg_recv");
    }

private:
    void set(int option, int value) {
        if (zmq_setsockopt(socket_, option, &value, sizeof value) != 0) fail("zmq_setsockopt");
    }
    void* context_ = nullptr;
    void* socket_ = nullptr;
};

// An initialised zmq_msg_t, closed on destruction.
struct Message {
    Message() { zmq_msg_init(&m); }
    Message(const Message&) = delete;
    Message& operator=(const Message&) = delete;
    ~Message() { zmq_msg_close(&m); }
    zmq_msg_t m;
};

double since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The peer's half of a point: echoes until an empty message (pingpong), or sends
// until the driver's empty message, then sends an empty end marker (stream).
void peer(Endpoint& socket, const std::string& pattern, std::uint64_t size) {
    Message message;
    if (pattern == "pingpong") {
        for (;;) {
            socket.receive(message.m);
            const auto length = zmq_msg_size(&message.m);
            if (length == 0) return;
            touch(zmq_msg_data(&message.m), length);
            socket.echo(message.m);
        }
    }
    std::vector<unsigned char> data(size, 0x5a);
    for (std::uint64_t sent = 0;; ++sent) {
        // Write the sequence number, as msgpass-bench's senders write their tag.
        std::memcpy(data.data(), &sent, std::min<std::size_t>(sizeof sent, size));
        socket.send(data.data(), size);
        if (sent % 64 == 0 && socket.receive(message.m, false)) break;
    }
    // The end marker, then the driver's goodbye: the socket is closed only when the
    // driver has everything (closing earlier can strand queued messages on ipc://).
    socket.send(nullptr, 0);
    socket.receive(message.m);
}

Result drive(Endpoint& socket, const std::string& pattern, std::uint64_t size, double seconds) {
    Result r;
    r.pattern = pattern;
    r.size = size;
    Message message;
    const double warm_up = seconds / 10;
    if (pattern == "pingpong") {
        std::vector<unsigned char> data(size, 0xa5);
        std::vector<double> samples;
        samples.reserve(1 << 16);
        const auto warm_start = Clock::now();
        while (since(warm_start) < warm_up) {
            socket.send(data.data(), size);
            socket.receive(message.m);
        }
        const auto start = Clock::now();
        auto now = start;
        while (std::chrono::duration<double>(now - start).count() < seconds) {
            const auto t0 = Clock::now();
            socket.send(data.data(), size);
            socket.receive(message.m);
            touch(zmq_msg_data(&message.m), zmq_msg_size(&message.m));
            now = Clock::now();
            samples.push_back(std::chrono::duration<double, std::micro>(now - t0).count() / 2);
        }
        const double elapsed = std::chrono::duration<double>(now - start).count();
        socket.send(nullptr, 0);
        r.iterations = samples.size();
        r.one_way_us = summarize(samples);
        r.msgs_per_s = 2.0 * static_cast<double>(r.iterations) / elapsed;
    } else {
        const auto warm_start = Clock::now();
        while (since(warm_start) < warm_up)
            socket.receive(message.m);
        std::uint64_t count = 0;
        const auto start = Clock::now();
        auto now = start;
        while (std::chrono::duration<double>(now - start).count() < seconds) {
            socket.receive(message.m);
            touch(zmq_msg_data(&message.m), zmq_msg_size(&message.m));
            ++count;
            now = Clock::now();
        }
        const double elapsed = std::chrono::duration<double>(now - start).count();
        socket.send(nullptr, 0);
        do {
            socket.receive(message.m);
        } while (zmq_msg_size(&message.m) != 0);
        socket.send(nullptr, 0);
        r.iterations = count;
        r.msgs_per_s = static_cast<double>(count) / elapsed;
    }
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    return r;
}

// Reads the endpoint line the driver writes into the pipe.
std::string read_endpoint(int fd) {
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
int reap(pid_t pid) {
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

// One point in a fresh pair of processes.
Result run_point(const Options& o, const std::string& transport, const std::string& pattern, std::uint64_t size,
                 unsigned serial) {
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
            pin(o.cpus, 1);
            const std::string endpoint = read_endpoint(fds[0]);
            Endpoint socket(size, true);
            socket.connect(endpoint);
            peer(socket, pattern, size);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "zmq_bench: peer: %s\n", e.what());
            status = 1;
        }
        ::_exit(status);
    }
    ::close(fds[0]);
    const std::string ipc_path = "/tmp/zmq-bench-" + std::to_string(::getpid()) + "-" + std::to_string(serial) + ".ipc";
    Result r;
    try {
        Endpoint socket(size, false);
        const std::string endpoint = socket.bind(transport == "ipc" ? "ipc://" + ipc_path : "tcp://127.0.0.1:*");
        const std::string line = endpoint + "\n";
        if (::write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size()))
            throw std::runtime_error(std::string("cannot hand the endpoint to the peer: ") + std::strerror(errno));
        ::close(fds[1]);
        fds[1] = -1;
        r = drive(socket, pattern, size, o.seconds);
    } catch (...) {
        if (fds[1] >= 0) ::close(fds[1]);
        ::kill(pid, SIGKILL);
        reap(pid);
        ::unlink(ipc_path.c_str());
        throw;
    }
    ::unlink(ipc_path.c_str());
    if (const int status = reap(pid); status != 0)
        throw std::runtime_error("the peer ended with status " + std::to_string(status));
    r.technology = "zeromq-" + transport;
    return r;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    try {
        o = parse(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zmq_bench: %s (see --help)\n", e.what());
        return 2;
    }
    try {
        pin(o.cpus, 0);
        unsigned serial = 0;
        for (const auto& transport : o.transports)
            for (auto size : o.sizes)
                for (const auto& pattern : o.patterns)
                    print_json(run_point(o, transport, pattern, size, ++serial));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "zmq_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
