// Test support: a partition built in code (no files), with a name unique to the
// test so that tests run in parallel without sharing segments, and checksummed,
// numbered payloads to check integrity and order.
#pragma once

#include <msgpass/kit/stats_page.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/sci/naming.hpp>

#include <boost/crc.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace msgpass::test {

// True when a TCP listener and a UDP socket could both bind this port on 127.0.0.1
// now: tcp listens on a node's port and udp binds it, and a port whose TCP side is
// free may be held by another test's udp node.
inline bool port_is_free(std::uint16_t port) {
    const auto binds = [port](int type) {
        const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
        if (fd < 0) return false;
        int one = 1;
        if (type == SOCK_STREAM) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
        ::close(fd);
        return ok;
    };
    return binds(SOCK_STREAM) && binds(SOCK_DGRAM);
}

// n ports that are free now, below the kernel's ephemeral range (32768..) so that
// outgoing connections of other tests do not take them, and spread by process id
// so that tests running in parallel (ctest -j2) start from different places.
inline std::vector<std::uint16_t> free_ports(int n) {
    static std::uint32_t next = 20000 + (static_cast<std::uint32_t>(::getpid()) * 7919u) % 12000u;
    std::vector<std::uint16_t> ports;
    for (int tries = 0; static_cast<int>(ports.size()) < n && tries < 12000; ++tries) {
        const auto port = static_cast<std::uint16_t>(next);
        next = next + 1 >= 32000 ? 20000 : next + 1;
        if (port_is_free(port)) ports.push_back(port);
    }
    return ports;
}

inline std::string unique_partition(const std::string& tag) {
    static int counter = 0;
    std::string clean;
    for (char ch : tag.substr(0, 40))
        clean += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
    std::string name = "t"; // appended piece by piece: GCC 12's -Wrestrict misfires on "t" + std::string
    name += std::to_string(::getpid());
    name += '-';
    name += std::to_string(++counter);
    name += '-';
    name += clean;
    return name;
}

// Removes every shared-memory segment of a partition when the test ends, even when
// it fails: processes a test killed leave theirs behind.
class SegmentCleanup {
public:
    explicit SegmentCleanup(std::string partition) : partition_(std::move(partition)) {}
    SegmentCleanup(const SegmentCleanup&) = delete;
    SegmentCleanup& operator=(const SegmentCleanup&) = delete;
    ~SegmentCleanup() {
        std::error_code ec;
        for (const auto& name : sci::partition_segments(sci::segment_user(), partition_, ec))
            ::shm_unlink(name.c_str());
        for (const auto& name : kit::find_stats_pages(kit::stats_user(), partition_, ec)) // of killed peers
            ::shm_unlink(name.c_str());
    }
    [[nodiscard]] const std::string& partition() const { return partition_; }

private:
    std::string partition_;
};

// A configuration of nodes 1..n on localhost; tweak changes the top level, which
// every node follows (give a node a section of its own on the result to differ). Every node gets a
// free port on 127.0.0.1 for the technologies that use sockets.
// A key for the authenticated tests (docs/security.md): the same seed, the same key.
inline config::AuthKey test_auth_key(std::uint8_t seed) {
    config::AuthKey k{};
    for (std::size_t i = 0; i < k.size(); ++i)
        k[i] = static_cast<std::uint8_t>(seed * 31 + i);
    return k;
}

inline config::Configuration make_configuration(const std::string& technology, const std::string& partition, int n,
                                                const std::function<void(config::Configuration&)>& tweak = {}) {
    config::Configuration c;
    c.partition = partition;
    c.technology = technology;
    c.network_file = "network.yaml";
    c.nodes_file = "nodes.yaml";
    const auto ports = technology == "sci" ? std::vector<std::uint16_t>{} : free_ports(n);
    for (int i = 1; i <= n; ++i) {
        config::NodeConfig node;
        node.id = static_cast<NodeId>(i);
        node.name = "node-" + std::to_string(i);
        if (!ports.empty()) {
            node.host = "127.0.0.1";
            node.port = ports.at(static_cast<std::size_t>(i - 1));
        }
        c.nodes.push_back(node);
    }
    if (tweak) tweak(c); // nodes without sections of their own follow the top level
    return c;
}

// A payload: [stream:4][seq:8][crc:4][bytes...], bytes derived from (stream, seq).
struct PayloadHeader {
    std::uint32_t stream;
    std::uint64_t seq;
    std::uint32_t crc;
} __attribute__((packed));

inline std::uint32_t crc_of(const std::byte* p, std::size_t n) {
    boost::crc_32_type crc;
    crc.process_bytes(p, n);
    return crc.checksum();
}

inline void fill_payload(std::span<std::byte> bytes, std::uint32_t stream, std::uint64_t seq) {
    std::uint64_t x = seq * 0x9e3779b97f4a7c15ULL + stream + 1;
    const std::size_t start = bytes.size() >= sizeof(PayloadHeader) ? sizeof(PayloadHeader) : 0;
    for (std::size_t i = start; i < bytes.size(); ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes[i] = static_cast<std::byte>(x);
    }
    if (bytes.size() >= sizeof(PayloadHeader)) {
        PayloadHeader h{stream, seq, crc_of(bytes.data() + start, bytes.size() - start)};
        std::memcpy(bytes.data(), &h, sizeof h);
    }
}

inline BufferPtr make_message(NodeFactory& factory, std::size_t size, std::uint32_t stream, std::uint64_t seq) {
    auto b = factory.create_buffer(size);
    fill_payload(b->single()->bytes(), stream, seq);
    return b;
}

// The stream id of the message that closes a stream; its seq is the number of
// messages the stream had. A receiver that took the end marker has taken everything
// before it, so that "nothing more arrives after it" shows that nothing came twice.
inline constexpr std::uint32_t end_stream = 0xffffffffu;

inline BufferPtr make_end_marker(NodeFactory& factory, std::uint64_t count) {
    return make_message(factory, sizeof(PayloadHeader), end_stream, count);
}

// Checks a received payload; returns its header (stream, seq) or throws a string.
inline PayloadHeader check_payload(const Buffer& b) {
    const auto* s = b.single();
    if (s == nullptr) throw std::string("received buffer is not contiguous");
    if (s->size() < sizeof(PayloadHeader)) throw std::string("payload too short");
    PayloadHeader h{};
    std::memcpy(&h, s->data(), sizeof h);
    if (crc_of(s->data() + sizeof h, s->size() - sizeof h) != h.crc) {
        throw std::string("checksum mismatch in stream ") + std::to_string(h.stream) + " message " +
            std::to_string(h.seq);
    }
    return h;
}

// check_payload for the bytes of a view (Node::receive_view).
inline PayloadHeader check_view(const MessageView& v) {
    if (v.size() < sizeof(PayloadHeader)) throw std::string("payload too short");
    PayloadHeader h{};
    std::memcpy(&h, v.data(), sizeof h);
    if (crc_of(v.data() + sizeof h, v.size() - sizeof h) != h.crc) {
        throw std::string("checksum mismatch in stream ") + std::to_string(h.stream) + " message " +
            std::to_string(h.seq);
    }
    return h;
}

// Two nodes of a partition as a stream test starts them: the factories of nodes 1 and
// 2, node 1's node to node 2 and node 2's node to node 1. Taken apart with a structured
// binding, `auto& [a, b, to_b, from_a] = pair;`; the members go in the reverse order
// of their declaration, the nodes before their factories.
struct NodePair {
    explicit NodePair(const config::Configuration& c)
        : a(NodeFactory::create(c, 1)), b(NodeFactory::create(c, 2)), to_b(a->create_node(2)),
          from_a(b->create_node(1)) {}
    std::unique_ptr<NodeFactory> a, b;
    NodePtr to_b, from_a;
};

// After the end marker: nothing more may arrive from a node or group within grace.
// Returns "" or a description of what came (a message, or an exception).
template <class Receiver>
std::string nothing_more(Receiver& from, std::chrono::milliseconds grace = std::chrono::milliseconds(100)) {
    try {
        auto m = from.receive(grace);
        if (!m) return "";
        std::string what = "a message of " + std::to_string(m->size()) + " bytes from node " +
                           std::to_string(m->source()) + " arrived after the end marker";
        try {
            const auto h = check_payload(*m);
            what += " (stream " + std::to_string(h.stream) + ", message " + std::to_string(h.seq) + ")";
        } catch (const std::string&) {
        }
        return what;
    } catch (const std::exception& e) {
        return std::string("after the end marker, receive threw: ") + e.what();
    }
}

// Exactly once over the whole exchange: first the sender's layer is quiescent (flush:
// every message handed over; on udp, acknowledged, so no resend is pending any more),
// then nothing more may arrive within grace (a duplicate already on its way included).
// Returns "" or what was wrong.
template <class Receiver>
std::string nothing_more_once_quiet(Node& sender, Receiver& from,
                                    std::chrono::milliseconds grace = std::chrono::milliseconds(100)) {
    try {
        if (!sender.flush(std::chrono::seconds(30)))
            return "the sender still had messages not handed over (flush) after 30 s";
    } catch (const std::exception& e) {
        return std::string("flush of the sender threw: ") + e.what();
    }
    return nothing_more(from, grace);
}

} // namespace msgpass::test
