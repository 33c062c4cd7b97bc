// Fuzz target: udp's receive path (reassembly, window, repair, status) behind a good
// hello, through the public API. For each input a udp factory of node 1 is made;
// the harness, as node 2 on its own socket, sends a hello and reads the welcome to
// learn node 1's incarnation, then sends the input as datagrams: the input is a
// sequence of [u16 little-endian length][bytes]; in every datagram of at least a
// header's size the identity fields (magic, version, partition, from, to, both
// incarnations) are made right, so that the fuzzer's bytes reach past the decoder
// (tests/fuzz/udp_datagram.cpp fuzzes the decoder itself) into the window: type,
// sequence number, length, offset, flags and payload are the fuzzer's. Node 1's
// receive() is then drained until it stays empty. The contract: every message
// delivered is within max_message_size; nothing crashes, leaks or hangs; memory
// stays bounded by the window.
#include "fuzz.hpp"

#include "../support/partition.hpp"

#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/udp/protocol.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>

using namespace msgpass;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t max_message = 64 * 1024;
constexpr std::uint64_t incarnation = 0x1234567890abcdefull;

udp::DatagramHeader identity(const std::string& partition, std::uint64_t peer_incarnation) {
    udp::DatagramHeader h;
    h.magic = udp::magic;
    h.version = udp::protocol_version;
    h.from = 2;
    h.to = 1;
    h.partition = udp::partition_hash(partition);
    h.incarnation = incarnation;
    h.peer_incarnation = peer_incarnation;
    return h;
}

class Socket {
public:
    explicit Socket(std::uint16_t own_port) : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in a = address(own_port);
        int one = 1;
        ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    ~Socket() { ::close(fd_); }
    [[nodiscard]] bool bound() const { return bound_; }
    void send_to(std::uint16_t port, const void* data, std::size_t size) const {
        const sockaddr_in a = address(port);
        ::sendto(fd_, data, size, 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    }
    // The next datagram within bound, or 0 bytes.
    std::size_t receive(void* data, std::size_t size, std::chrono::milliseconds bound) const {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return 0;
        const ssize_t n = ::recv(fd_, data, size, 0);
        return n > 0 ? static_cast<std::size_t>(n) : 0;
    }

private:
    static sockaddr_in address(std::uint16_t port) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        return a;
    }
    int fd_;
    bool bound_ = false;
};

// node 1's incarnation from its welcome to node 2's hello; 0 when none came.
std::uint64_t hello(const Socket& socket, std::uint16_t port, const std::string& partition) {
    auto h = identity(partition, 0);
    h.type = static_cast<std::uint16_t>(udp::DatagramType::hello);
    std::byte in[udp::max_datagram_size];
    for (int attempt = 0; attempt < 50; ++attempt) {
        socket.send_to(port, &h, sizeof h);
        const auto deadline = std::chrono::steady_clock::now() + 100ms;
        while (std::chrono::steady_clock::now() < deadline) {
            const std::size_t n = socket.receive(in, sizeof in, 20ms);
            if (n < udp::header_size) continue;
            udp::DatagramHeader answer;
            std::memcpy(&answer, in, sizeof answer);
            if (answer.type == static_cast<std::uint16_t>(udp::DatagramType::welcome) && answer.from == 1 &&
                answer.peer_incarnation == incarnation) {
                return answer.incarnation;
            }
        }
    }
    return 0;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool registered = (register_builtin_technologies(), true);
    (void)registered;
    const std::string partition = "fuzz-udp-" + std::to_string(::getpid());
    // The harness's own setup: free ports, its socket, node 1's factory and a welcome
    // to its hello. Another process may take a port between free_ports and the bind
    // (a 10-minute run once stopped on it on a loaded machine), so the setup is tried
    // with fresh ports up to five times; that is the harness's failure, not a finding.
    config::Configuration configuration;
    std::optional<Socket> socket;
    std::unique_ptr<NodeFactory> factory;
    NodePtr peer;
    std::uint64_t node1 = 0;
    for (int attempt = 0; attempt < 5 && node1 == 0; ++attempt) {
        peer.reset();
        factory.reset();
        socket.reset();
        configuration = test::make_configuration("udp", partition, 2, [](config::Configuration& c) {
            c.max_message_size = max_message;
            c.peer_timeout = 200ms;
        });
        socket.emplace(configuration.nodes[1].port);
        if (!socket->bound()) continue;
        try {
            factory = NodeFactory::create(configuration, 1);
        } catch (const ResourceError& e) {
            std::fprintf(stderr, "udp_stream: harness setup: %s; again with other ports\n", e.what());
            continue;
        }
        peer = factory->create_node(2);
        node1 = hello(*socket, configuration.nodes[0].port, partition);
    }
    MSGPASS_FUZZ_CHECK(node1 != 0); // the harness's own hello must be welcomed
    const std::uint16_t port = configuration.nodes[0].port;
    const auto fixed = identity(partition, node1);
    std::byte datagram[udp::max_datagram_size];
    for (std::size_t at = 0; at + 2 <= size;) {
        const std::size_t length = std::min<std::size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
        const std::size_t n = std::min(length, sizeof datagram);
        std::memcpy(datagram, data + at + 2, n);
        at += 2 + length;
        if (n >= udp::header_size) {
            udp::DatagramHeader h;
            std::memcpy(&h, datagram, sizeof h);
            const auto type = h.type;
            h = udp::DatagramHeader{
                fixed.magic,       fixed.version,          type,  fixed.from, fixed.to, fixed.partition,
                fixed.incarnation, fixed.peer_incarnation, h.seq, h.length,   h.offset, h.flags,
                h.reserved};
            std::memcpy(datagram, &h, sizeof h);
        }
        socket->send_to(port, datagram, n);
    }
    for (int quiet = 0; quiet < 2;) {
        try {
            BufferPtr m = peer->receive(2ms);
            if (m == nullptr) {
                ++quiet;
                continue;
            }
            quiet = 0;
            msgpass::fuzz::accepted();
            MSGPASS_FUZZ_CHECK(m->size() <= max_message);
        } catch (const Error&) {
            break;
        }
    }
    factory.reset();
    return 0;
}
