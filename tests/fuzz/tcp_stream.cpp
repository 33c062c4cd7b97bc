// Fuzz target: tcp's receive path behind a good handshake, through the public API.
// For each input a tcp factory of node 1 is made; the harness connects as node 2,
// sends a correct Hello, reads the Welcome, then writes the input as the byte
// stream of frames and closes its side. Node 1's receive() is then drained until it
// stays empty. The contract: every message delivered is whole and within
// max_message_size, a broken frame ends as one msgpass::Error (or PeerLost), and
// nothing crashes, leaks or hangs; the factory ends cleanly after it.
#include "fuzz.hpp"

#include "../support/partition.hpp"

#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/tcp/protocol.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

using namespace msgpass;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t max_message = 64 * 1024;
constexpr std::uint64_t incarnation = 0x1234567890abcdefull;

// Waits until fd is ready for events (bounded: the factory answers in milliseconds).
bool ready(int fd, short events, std::chrono::milliseconds bound) {
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, static_cast<int>(bound.count())) == 1;
}

// Connects to 127.0.0.1:port and completes node 2's handshake; -1 when the factory
// did not welcome it, with the step that failed in why.
int handshake(std::uint16_t port, const std::string& partition, std::string& why) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const auto fail = [&](const std::string& step) {
        why = step + " (errno " + std::to_string(errno) + ": " + std::strerror(errno) + ")";
        ::close(fd);
        return -1;
    };
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return fail("connect");
    const auto hello = tcp::make_hello(2, 1, incarnation, partition);
    if (::send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello)) return fail("send hello");
    if (!ready(fd, POLLIN, 5s)) return fail("no answer within 5 s");
    tcp::Welcome welcome{};
    if (::recv(fd, &welcome, sizeof welcome, MSG_WAITALL) != sizeof welcome) return fail("short answer");
    if (ip::check_answer(welcome, tcp::protocol, 2, 1) != ip::Answer::welcome) return fail("not a welcome");
    return fd;
}

// Writes what the factory takes of the input; it may close the connection early (a
// broken frame), which ends the write.
void write_all(int fd, const std::uint8_t* data, std::size_t size) {
    while (size > 0 && ready(fd, POLLOUT, 1s)) {
        const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n <= 0) return;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool registered = (register_builtin_technologies(), true);
    (void)registered;
    const std::string partition = "fuzz-tcp-" + std::to_string(::getpid());
    // The harness's own setup: free ports, node 1's factory, and a welcome to its
    // handshake. Another process may take a port between free_ports and the bind, or
    // listen on it (a 10-minute run once stopped on a handshake that was not welcomed,
    // after 1666 inputs on a loaded machine, with an input that replays cleanly), so
    // the setup is tried with fresh ports up to five times, printing why.
    std::unique_ptr<NodeFactory> factory;
    NodePtr peer;
    int fd = -1;
    for (int attempt = 0; attempt < 5 && fd < 0; ++attempt) {
        peer.reset();
        factory.reset();
        auto configuration = test::make_configuration("tcp", partition, 2, [](config::Configuration& c) {
            c.max_message_size = max_message;
            c.peer_timeout = 200ms;
        });
        try {
            factory = NodeFactory::create(configuration, 1);
        } catch (const ResourceError& e) {
            std::fprintf(stderr, "tcp_stream: harness setup: %s; again with other ports\n", e.what());
            continue;
        }
        peer = factory->create_node(2);
        std::string why;
        fd = handshake(configuration.nodes[0].port, partition, why);
        if (fd < 0)
            std::fprintf(stderr, "tcp_stream: harness handshake failed: %s; again with other ports\n", why.c_str());
    }
    MSGPASS_FUZZ_CHECK(fd >= 0);
    write_all(fd, data, size);
    ::shutdown(fd, SHUT_WR);
    bool ended = false;
    for (int quiet = 0; quiet < 2 && !ended;) {
        try {
            BufferPtr m = peer->receive(2ms);
            if (m == nullptr) {
                ++quiet;
                continue;
            }
            quiet = 0;
            msgpass::fuzz::accepted();
            MSGPASS_FUZZ_CHECK(m->size() <= max_message);
        } catch (const PeerLost&) {
            ended = true;
        } catch (const Error&) {
            ended = true;
        }
    }
    ::close(fd);
    factory.reset();
    return 0;
}
