// The udp technology with auth_key_file (docs/security.md, docs/udp.md "Authenticated
// partitions"): a peer's incarnation is trusted only once its welcome carries the MAC,
// under the partition's key, of the welcome's header and the nonce of our hello.
// Nodes that hold the key talk; a node without it, or with another, is refused and
// counted by reason while they talk; a raw peer that computes welcomes with the key
// is trusted, and its recorded welcome replayed after its loss is refused.
#include <msgpass/ip/auth.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>
#include <msgpass/udp/protocol.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
using udp::DatagramHeader;
using udp::DatagramType;
using udp::Drop;
constexpr auto patience = 10s;

const udp::UdpNodeFactory& as_udp(const NodeFactory& f) {
    return dynamic_cast<const udp::UdpNodeFactory&>(f);
}

// Sends numbered messages from `from` to `to` and takes each; true when all arrived
// in order within the patience.
bool exchange(NodeFactory& from_factory, Node& to, Node& from, std::uint64_t first, std::uint64_t count) {
    for (std::uint64_t seq = first; seq < first + count; ++seq) {
        to.send(make_message(from_factory, 32 + seq % 2000, 0, seq));
        auto m = from.receive(patience);
        if (m == nullptr || check_payload(*m).seq != seq) return false;
    }
    return true;
}

TEST(UdpAuthenticated, NodesHoldingTheKeyExchangeMessagesBothWaysUnderInjectedLoss) {
    auto c = make_configuration("udp", unique_partition("auth-good"), 2, [](config::Configuration& c) {
        c.auth_key = test_auth_key(1);
        auto& o = c.edit_section<udp::Options>();
        o.inject_loss = 0.05; // hellos and welcomes are lost too
        o.inject_seed = 7;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto a_to_b = a->create_node(2);
    auto b_to_a = b->create_node(1);
    EXPECT_TRUE(exchange(*a, *a_to_b, *b_to_a, 0, 200)) << "1 -> 2";
    EXPECT_TRUE(exchange(*b, *b_to_a, *a_to_b, 0, 200)) << "2 -> 1";
    for (const auto* f : {a.get(), b.get()}) {
        EXPECT_EQ(as_udp(*f).datagram_stats().count(Drop::bad_proof), 0u);
        EXPECT_EQ(as_udp(*f).datagram_stats().count(Drop::unauthenticated), 0u)
            << "a datagram of a peer not yet proven (only a race of the first contact could make one)";
    }
    EXPECT_EQ(a_to_b->stats().errors, 0u);
    EXPECT_EQ(b_to_a->stats().errors, 0u);
}

// Node 3 knocks on nodes 1 and 2 (it sends to both all along) without the key, then
// with another key; nodes 1 and 2 hold the key and exchange checked traffic
// meanwhile. Nobody hears from node 3 and node 3 hears from nobody; each refusal is
// counted under its reason.
TEST(UdpAuthenticated, ANodeWithoutTheKeyOrWithAnotherIsRefusedAndCountedWhileTheKeyHoldersTalk) {
    struct Intruder {
        const char* what;
        std::optional<config::AuthKey> key;
        Drop counted_at_holders;
    };
    const Intruder intruders[] = {{"no key", std::nullopt, Drop::unauthenticated},
                                  {"another key", test_auth_key(2), Drop::bad_proof}};
    for (const auto& intruder : intruders) {
        SCOPED_TRACE(intruder.what);
        auto c = make_configuration("udp", unique_partition("auth-knock"), 3,
                                    [](config::Configuration& c) { c.auth_key = test_auth_key(1); });
        auto bad = c;
        bad.auth_key = intruder.key;
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto x = NodeFactory::create(bad, 3);
        auto a_to_b = a->create_node(2);
        auto b_to_a = b->create_node(1);
        auto a_from_x = a->create_node(3);
        auto b_from_x = b->create_node(3);
        auto x_to_a = x->create_node(1);
        auto x_to_b = x->create_node(2);
        std::uint64_t seq = 0;
        for (int round = 0; round < 20; ++round) {
            for (auto* to : {x_to_a.get(), x_to_b.get()}) {
                try {
                    to->send(make_message(*x, 64, 9, static_cast<std::uint64_t>(round)));
                } catch (const SendQueueFull&) {
                }
            }
            ASSERT_TRUE(exchange(*a, *a_to_b, *b_to_a, seq, 10)) << "the key holders' traffic stalled";
            seq += 10;
        }
        const auto counted = [&](const NodeFactory& f) {
            return as_udp(f).datagram_stats().count(intruder.counted_at_holders);
        };
        EXPECT_TRUE(eventually([&] { return counted(*a) > 0 && counted(*b) > 0; }, patience))
            << udp::describe(intruder.counted_at_holders) << ": node 1 " << counted(*a) << ", node 2 " << counted(*b);
        EXPECT_EQ(a_from_x->receive(), nullptr);
        EXPECT_EQ(b_from_x->receive(), nullptr);
        EXPECT_EQ(a_from_x->stats().messages_received, 0u);
        EXPECT_EQ(b_from_x->stats().messages_received, 0u);
        EXPECT_EQ(x_to_a->receive(), nullptr);
        EXPECT_EQ(x_to_a->stats().messages_sent, 0u) << "node 3 sent data: it trusted a node it could not check";
        if (intruder.key) { // node 3 checks node 1's welcomes with its own key: they fail there too
            EXPECT_GT(as_udp(*x).datagram_stats().count(Drop::bad_proof), 0u);
        }
        EXPECT_EQ(a_to_b->stats().errors, 0u);
    }
}

// A raw socket as node 3 that holds the key and builds the exchange by hand.
class RawPeer {
public:
    RawPeer(const config::Configuration& c, std::uint64_t incarnation)
        : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)), key_(*c.auth_key),
          partition_(udp::partition_hash(c.partition)), incarnation_(incarnation) {
        sockaddr_in a = address(c.nodes[2].port);
        bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
        port_ = c.nodes[1].port; // it talks to node 2
    }
    ~RawPeer() { ::close(fd_); }
    RawPeer(const RawPeer&) = delete;
    RawPeer& operator=(const RawPeer&) = delete;
    [[nodiscard]] bool bound() const { return bound_; }

    [[nodiscard]] DatagramHeader header(DatagramType type, std::uint64_t peer_incarnation) const {
        DatagramHeader h;
        h.magic = udp::magic;
        h.version = udp::protocol_version;
        h.type = static_cast<std::uint16_t>(type);
        h.from = 3;
        h.to = 2;
        h.partition = partition_;
        h.incarnation = incarnation_;
        h.peer_incarnation = peer_incarnation;
        return h;
    }
    void send(const DatagramHeader& h, std::span<const std::byte> payload = {}) const {
        std::vector<std::byte> bytes(udp::header_size + payload.size());
        std::memcpy(bytes.data(), &h, udp::header_size);
        if (!payload.empty()) std::memcpy(bytes.data() + udp::header_size, payload.data(), payload.size());
        send_bytes(bytes);
    }
    void send_bytes(std::span<const std::byte> bytes) const {
        const sockaddr_in a = address(port_);
        (void)::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    }
    // The welcome to a hello carrying nonce, as docs/udp.md says: its payload is
    // MAC(key, "msgpass/udp welcome" | the welcome's 64-byte header | the nonce).
    [[nodiscard]] std::vector<std::byte> welcome(std::uint64_t peer_incarnation, const ip::Nonce& nonce) const {
        const DatagramHeader h = header(DatagramType::welcome, peer_incarnation);
        constexpr std::string_view label = "msgpass/udp welcome";
        const auto mac = ip::mac_over(
            key_, {std::as_bytes(std::span(label)), std::as_bytes(std::span(&h, 1)), std::as_bytes(std::span(nonce))});
        std::vector<std::byte> bytes(udp::header_size + mac.size());
        std::memcpy(bytes.data(), &h, udp::header_size);
        std::memcpy(bytes.data() + udp::header_size, mac.data(), mac.size());
        return bytes;
    }
    // The next datagram of this type within the patience (others are skipped).
    std::optional<std::vector<std::byte>> next(DatagramType type) const {
        for (const auto deadline = Clock::now() + patience; Clock::now() < deadline;) {
            timeval tv{0, 100'000};
            ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            std::vector<std::byte> b(65536);
            const auto n = ::recv(fd_, b.data(), b.size(), 0);
            if (n < static_cast<ssize_t>(udp::header_size)) continue;
            b.resize(static_cast<std::size_t>(n));
            DatagramHeader h;
            std::memcpy(&h, b.data(), udp::header_size);
            if (h.type == static_cast<std::uint16_t>(type)) return b;
        }
        return std::nullopt;
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
    config::AuthKey key_;
    std::uint64_t partition_;
    std::uint64_t incarnation_;
    std::uint16_t port_ = 0;
    bool bound_ = false;
};

DatagramHeader header_of(const std::vector<std::byte>& b) {
    DatagramHeader h;
    std::memcpy(&h, b.data(), udp::header_size);
    return h;
}

// The exchange from outside: a raw node 3 with the key says hello, gets a welcome
// whose MAC it can check, answers node 2's hello with a welcome to its nonce, and is
// trusted: its data is delivered. Once node 2 lost it (silent for peer_timeout), the
// same welcome replayed is a bad proof and its data is not delivered.
TEST(UdpAuthenticated, ARawPeerWithTheKeyIsTrustedAndItsWelcomeReplayedAfterItsLossIsRefused) {
    auto c = make_configuration("udp", unique_partition("auth-raw"), 3, [](config::Configuration& c) {
        c.auth_key = test_auth_key(1);
        c.peer_timeout = 300ms;
    });
    auto b = NodeFactory::create(c, 2);
    auto from_raw = b->create_node(3);
    const auto& ub = as_udp(*b);
    RawPeer raw(c, 0xfeed);
    ASSERT_TRUE(raw.bound());

    // Our hello with a nonce: node 2's welcome proves the key for it.
    const ip::Nonce ours = ip::new_nonce();
    raw.send(raw.header(DatagramType::hello, 0), std::as_bytes(std::span(ours)));
    const auto welcome = raw.next(DatagramType::welcome);
    ASSERT_TRUE(welcome) << "no welcome to a hello with a nonce";
    ASSERT_EQ(welcome->size(), udp::header_size + 32);
    constexpr std::string_view label = "msgpass/udp welcome";
    const auto expected =
        ip::mac_over(*c.auth_key, {std::as_bytes(std::span(label)), std::span(*welcome).first(udp::header_size),
                                   std::as_bytes(std::span(ours))});
    ip::Mac got{};
    std::memcpy(got.data(), welcome->data() + udp::header_size, got.size());
    EXPECT_TRUE(ip::same_mac(got, expected)) << "node 2's welcome does not prove the key for our nonce";
    const std::uint64_t incarnation_2 = header_of(*welcome).incarnation;

    // Node 2 does not trust us yet: it asks with its own hello. Before we answer, our
    // data is dropped as unauthenticated.
    const auto hello = raw.next(DatagramType::hello);
    ASSERT_TRUE(hello) << "node 2 never asked the unproven node 3 to prove itself";
    ASSERT_EQ(hello->size(), udp::header_size + 32) << "node 2's hello carries no nonce";
    ip::Nonce theirs{};
    std::memcpy(theirs.data(), hello->data() + udp::header_size, theirs.size());
    auto data = raw.header(DatagramType::data, incarnation_2);
    data.flags = udp::flag_first;
    data.length = 10;
    const std::vector<std::byte> ten(10, std::byte{0x33});
    raw.send(data, ten);
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::unauthenticated) > 0; }, patience));
    EXPECT_EQ(from_raw->receive(), nullptr);

    // Our welcome to its nonce: trusted; the data is taken.
    const auto proof = raw.welcome(incarnation_2, theirs);
    raw.send_bytes(proof);
    raw.send(data, ten);
    auto m = from_raw->receive(patience);
    ASSERT_NE(m, nullptr) << "data from the proven node 3 was not delivered";
    EXPECT_EQ(m->size(), 10u);
    EXPECT_EQ(ub.datagram_stats().count(Drop::bad_proof), 0u);

    // Silent for peer_timeout: node 3 is lost.
    bool lost = false;
    for (const auto deadline = Clock::now() + patience; !lost && Clock::now() < deadline;) {
        try {
            (void)from_raw->receive(50ms);
        } catch (const PeerLost&) {
            lost = true;
        }
    }
    ASSERT_TRUE(lost) << "the silent raw peer was never reported lost";

    // The recorded welcome, replayed: refused, and the data after it is not delivered.
    const auto bad_before = ub.datagram_stats().count(Drop::bad_proof);
    raw.send_bytes(proof);
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::bad_proof) > bad_before; }, patience))
        << "the replayed welcome was not counted as a bad proof";
    auto again = data;
    again.seq = 1;
    raw.send(again, ten);
    EXPECT_EQ(from_raw->receive(300ms), nullptr) << "data delivered after a replayed welcome";

    // A welcome without a MAC is unauthenticated.
    const auto unauth_before = ub.datagram_stats().count(Drop::unauthenticated);
    raw.send(raw.header(DatagramType::welcome, incarnation_2));
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::unauthenticated) > unauth_before; }, patience));
}

// A datagram from an incarnation node 2 never trusted, naming no incarnation of node 2
// (what a node that lost track of us sends, or a forger): it is stale, and node 2
// answers it with a hello whose nonce asks the sender to prove the key.
TEST(UdpAuthenticated, AStaleDatagramFromAnUnprovenIncarnationIsAnsweredWithAHelloAskingForProof) {
    auto c = make_configuration("udp", unique_partition("auth-stale"), 3, [](config::Configuration& c) {
        c.auth_key = test_auth_key(1);
        c.peer_timeout = 10s;
    });
    auto b = NodeFactory::create(c, 2);
    const auto& ub = as_udp(*b);
    RawPeer raw(c, 0xbeef);
    ASSERT_TRUE(raw.bound());
    auto data = raw.header(DatagramType::data, 0x1234); // not node 2's incarnation
    data.flags = udp::flag_first;
    data.length = 10;
    const std::vector<std::byte> ten(10, std::byte{0x33});
    raw.send(data, ten);
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::stale) == 1; }, patience));
    const auto hello = raw.next(DatagramType::hello);
    ASSERT_TRUE(hello) << "node 2 did not ask the unproven sender to prove itself";
    EXPECT_EQ(hello->size(), udp::header_size + 32) << "node 2's hello carries no nonce";
    EXPECT_EQ(header_of(*hello).to, 3u);
}

} // namespace
} // namespace msgpass::test
