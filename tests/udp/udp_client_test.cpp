// Clients in no nodes file over udp (docs/udp.md, "Clients in no nodes file"): a
// server with udp.max_clients takes a newcomer's hello under the next run-time id, a
// client looks it up by "udp://host:port" and they exchange messages; the same
// address gives the same node; a node of another nodes file looks it up too; a flood
// of newcomer hellos is bounded by max_clients (the rest counted as too many) and the
// silent ones are lost and forgotten; a server without max_clients drops newcomers;
// with auth_key_file a client without the key, or with another, is refused with the
// reason and no node is made for it, and forged cookies and proofs are counted as bad
// proofs, and a keyed lookup whose answers all come twice (late) is taken; a client
// that leaves is forgotten and its id never used again; a client the
// application forgets is forgotten at once.
#include <msgpass/ip/auth.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>
#include <msgpass/udp/protocol.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
using udp::DatagramHeader;
using udp::DatagramType;
using udp::Drop;
constexpr auto patience = 10s;

udp::UdpNodeFactory& as_udp(NodeFactory& f) {
    return dynamic_cast<udp::UdpNodeFactory&>(f);
}

BufferPtr text_buffer(NodeFactory& f, const std::string& text) {
    auto b = f.create_buffer(text.size());
    std::memcpy(b->single()->data(), text.data(), text.size());
    return b;
}
std::string text_of(const Buffer& b) {
    const auto* s = b.single();
    return std::string(reinterpret_cast<const char*>(s->data()), s->size());
}

// A UDP socket on loopback that is no msgpass node: it speaks the protocol by hand.
class RawSocket {
public:
    RawSocket() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        (void)::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    }
    ~RawSocket() { ::close(fd_); }
    int fd() const { return fd_; }
    RawSocket(const RawSocket&) = delete;
    RawSocket& operator=(const RawSocket&) = delete;
    void send_to(std::uint16_t port, std::span<const std::byte> bytes) const {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        (void)::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    }
    // The next datagram within timeout; empty when none.
    std::vector<std::byte> receive(std::chrono::milliseconds timeout) const {
        const auto us = std::chrono::microseconds(timeout).count();
        timeval tv{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        std::vector<std::byte> b(65536);
        const auto n = ::recv(fd_, b.data(), b.size(), 0);
        b.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        return b;
    }

private:
    int fd_;
};

// A relay on loopback between one client and the server that delivers every datagram
// from the server twice, the second time after the client's next datagram (a network
// may duplicate a datagram late; a late answer to a hello sent again looks the same).
// Its own thread; stops at destruction.
class DuplicatingRelay {
public:
    explicit DuplicatingRelay(std::uint16_t server_port) : server_port_(server_port) {
        sockaddr_in a{};
        socklen_t length = sizeof a;
        (void)::getsockname(socket_.fd(), reinterpret_cast<sockaddr*>(&a), &length);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { run(); });
    }
    ~DuplicatingRelay() {
        stop_.store(true);
        thread_.join();
    }
    DuplicatingRelay(const DuplicatingRelay&) = delete;
    DuplicatingRelay& operator=(const DuplicatingRelay&) = delete;
    std::uint16_t port() const { return port_; }
    std::uint64_t duplicated() const { return duplicated_.load(); }

private:
    void run() {
        std::vector<std::byte> b(65536);
        while (!stop_.load()) {
            pollfd p{socket_.fd(), POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) continue;
            sockaddr_in from{};
            socklen_t length = sizeof from;
            const auto n = ::recvfrom(socket_.fd(), b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&from), &length);
            if (n <= 0) continue;
            const auto bytes = std::span<const std::byte>(b.data(), static_cast<std::size_t>(n));
            if (ntohs(from.sin_port) != server_port_) {
                client_port_ = ntohs(from.sin_port);
                if (!held_.empty()) { // the client answered it: now it comes again
                    socket_.send_to(client_port_, held_);
                    held_.clear();
                    duplicated_.fetch_add(1);
                }
                socket_.send_to(server_port_, bytes);
            } else if (client_port_ != 0) {
                socket_.send_to(client_port_, bytes);
                held_.assign(bytes.begin(), bytes.end());
            }
        }
    }
    RawSocket socket_;
    std::uint16_t server_port_;
    std::uint16_t port_ = 0;
    std::uint16_t client_port_ = 0;
    std::vector<std::byte> held_; // the server's last datagram, until the client's next
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> duplicated_{0};
    std::thread thread_;
};

// A newcomer's hello (from 0, to 0) of incarnation, with a payload (a nonce or a proof).
std::vector<std::byte> newcomer_hello(const std::string& partition, std::uint64_t incarnation,
                                      std::span<const std::byte> payload = {}, std::uint64_t seq = 0,
                                      std::uint64_t length = 0) {
    DatagramHeader h = udp::header_of(DatagramType::hello, 0, udp::partition_hash(partition), incarnation);
    h.seq = seq;
    h.length = length;
    std::vector<std::byte> bytes(udp::header_size + payload.size());
    std::memcpy(bytes.data(), &h, udp::header_size);
    if (!payload.empty()) std::memcpy(bytes.data() + udp::header_size, payload.data(), payload.size());
    return bytes;
}

class UdpClient : public ::testing::Test {
protected:
    void start_server(std::uint32_t max_clients, std::optional<config::AuthKey> key = {}) {
        server_.reset();
        config_ = make_configuration("udp", partition_, 1, [&](config::Configuration& c) {
            c.peer_timeout = 400ms;
            c.edit_section<udp::Options>().max_clients = max_clients;
            c.auth_key = key;
        });
        server_ = NodeFactory::create(config_, 1);
    }
    // peer_timeout bounds a client's lookup: one the server answers is told at once (the
    // long default only keeps a loaded machine from turning a late answer into "no
    // welcome"); one it never answers waits all of it (the tests give those 400 ms).
    config::Configuration client_config(std::optional<config::AuthKey> key = {},
                                        std::chrono::milliseconds peer_timeout = patience) const {
        config::Configuration c;
        c.partition = partition_;
        c.technology = "udp";
        c.peer_timeout = peer_timeout;
        c.auth_key = key;
        return c;
    }
    std::uint16_t port() const { return config_.nodes.at(0).port; }
    std::string address() const { return "udp://127.0.0.1:" + std::to_string(port()); }
    udp::UdpNodeFactory& server() { return as_udp(*server_); }
    // The server's node of the n-th client (from 0), once it came.
    NodePtr client_node(std::uint32_t n) {
        NodePtr node;
        (void)eventually([&] { return (node = server_->runtime_peer(first_runtime_id + n)) != nullptr; }, patience);
        return node;
    }

    std::string partition_ = unique_partition(::testing::UnitTest::GetInstance()->current_test_info()->name());
    config::Configuration config_;
    std::unique_ptr<NodeFactory> server_;
};

TEST_F(UdpClient, AClientLooksTheServerUpAndTheyExchangeMessages) {
    start_server(4);
    auto client = NodeFactory::create_client(client_config());
    EXPECT_EQ(client->self_id(), no_node);
    auto to_server = client->lookup(address());
    EXPECT_EQ(to_server->id(), 1u);
    EXPECT_EQ(client->lookup(address()), to_server) << "the same address gives the same node";
    to_server->send(text_buffer(*client, "what is the gain of channel 3?"));
    auto from_client = client_node(0);
    ASSERT_TRUE(from_client);
    EXPECT_EQ(server_->runtime_peers_seen(), 1u);
    EXPECT_EQ(server().clients(), 1u);
    auto asked = from_client->receive(patience);
    ASSERT_TRUE(asked);
    EXPECT_EQ(text_of(*asked), "what is the gain of channel 3?");
    EXPECT_EQ(asked->source(), first_runtime_id);
    from_client->send(text_buffer(*server_, "1.25"));
    auto answer = to_server->receive(patience);
    ASSERT_TRUE(answer);
    EXPECT_EQ(text_of(*answer), "1.25");
    // A large message, cut into datagrams, both ways.
    std::string large(200'000, 'x');
    to_server->send(text_buffer(*client, large));
    auto got = from_client->receive(patience);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->size(), large.size());
    EXPECT_THROW((void)client->lookup("tcp://127.0.0.1:" + std::to_string(port())), UsageError);
}

// A node of another nodes file (of the same partition) looks the server up: the
// server addresses it by the run-time id it gave, which it takes as its own from
// that server alone.
TEST_F(UdpClient, ANodeOfAnotherNodesFileLooksTheServerUpAndIsAnsweredUnderItsRunTimeId) {
    start_server(4);
    auto other = make_configuration("udp", partition_, 1, [](config::Configuration& c) {
        c.peer_timeout = 400ms;
        c.nodes.at(0).id = 5;
    });
    auto node5 = NodeFactory::create(other, 5);
    auto to_server = node5->lookup(address());
    EXPECT_EQ(to_server->id(), 1u);
    to_server->send(text_buffer(*node5, "from node 5"));
    auto from_node5 = client_node(0);
    ASSERT_TRUE(from_node5);
    auto m = from_node5->receive(patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "from node 5");
    from_node5->send(text_buffer(*server_, "to the run-time id"));
    auto answer = to_server->receive(patience);
    ASSERT_TRUE(answer);
    EXPECT_EQ(text_of(*answer), "to the run-time id");
}

TEST_F(UdpClient, AServerWithoutMaxClientsDropsNewcomersAndTheLookupSaysWhy) {
    start_server(0);
    auto client = NodeFactory::create_client(client_config({}, 400ms));
    try {
        (void)client->lookup(address());
        FAIL() << "a server without max_clients took a client";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(address()), std::string::npos) << what;
        EXPECT_NE(what.find("udp.max_clients 0"), std::string::npos) << what;
    }
    // (The hellos wait in the server's socket until its thread reads them.)
    EXPECT_TRUE(eventually([&] { return server().datagram_stats().count(Drop::unknown_sender) > 0; }, patience));
    EXPECT_EQ(server_->runtime_peers_seen(), 0u);
}

TEST_F(UdpClient, ANewcomerFloodIsBoundedByMaxClientsAndTheSilentAreLostAndForgotten) {
    start_server(4);
    RawSocket intruder;
    constexpr int hellos = 20;
    for (int i = 1; i <= hellos; ++i)
        intruder.send_to(port(), newcomer_hello(partition_, 1000 + static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(eventually([&] { return server().datagram_stats().count(Drop::too_many) >= hellos - 4; }, patience))
        << server().datagram_stats().count(Drop::too_many) << " counted as too many";
    EXPECT_EQ(server_->runtime_peers_seen(), 4u);
    // The same hello again is the same client, not a fifth.
    intruder.send_to(port(), newcomer_hello(partition_, 1001));
    EXPECT_FALSE(eventually([&] { return server_->runtime_peers_seen() > 4; }, 100ms));
    // Silent: each is lost within peer_timeout and forgotten; none is taken again.
    ASSERT_TRUE(eventually([&] { return server().clients() == 0; }, patience)) << server().clients() << " held";
    EXPECT_EQ(server_->runtime_peers_forgotten(), 4u);
    for (std::uint32_t n = 0; n < 4; ++n)
        EXPECT_FALSE(server_->runtime_peer(first_runtime_id + n));
    // Places are free again: a real client is taken under the next id.
    auto client = NodeFactory::create_client(client_config());
    auto to_server = client->lookup(address());
    to_server->send(text_buffer(*client, "after the flood"));
    auto from_client = client_node(4);
    ASSERT_TRUE(from_client);
    auto m = from_client->receive(patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "after the flood");
}

TEST_F(UdpClient, WithAKeyOnlyAClientThatProvesItIsTakenAndNoNodeIsMadeForOthers) {
    start_server(4, test_auth_key(5));
    {
        auto keyless = NodeFactory::create_client(client_config({}, 400ms));
        try {
            (void)keyless->lookup(address());
            FAIL() << "a client without the key was taken";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("needs the partition's key"), std::string::npos) << e.what();
        }
    }
    // (The hellos wait in the server's socket until its thread reads them.)
    EXPECT_TRUE(eventually([&] { return server().datagram_stats().count(Drop::unauthenticated) > 0; }, patience));
    {
        // Answered at once, with a welcome it cannot verify.
        auto other = NodeFactory::create_client(client_config(test_auth_key(6)));
        try {
            (void)other->lookup(address());
            FAIL() << "a client with another key was taken";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("did not prove this partition's key"), std::string::npos) << e.what();
        }
    }
    // Hostile hellos: with a nonce (answered by a cookie, nothing kept), and with a
    // made-up cookie and proof (a bad proof).
    RawSocket intruder;
    std::mt19937_64 random(7);
    std::vector<std::byte> noise(udp::auth_payload_size);
    for (int i = 0; i < 10; ++i) {
        for (auto& b : noise)
            b = static_cast<std::byte>(random());
        intruder.send_to(port(), newcomer_hello(partition_, 5000 + static_cast<std::uint64_t>(i), noise));
        EXPECT_FALSE(intruder.receive(patience).empty()) << "a newcomer's hello with a nonce is answered (a cookie)";
        intruder.send_to(port(),
                         newcomer_hello(partition_, 5000 + static_cast<std::uint64_t>(i), noise, random(), random()));
    }
    ASSERT_TRUE(eventually([&] { return server().datagram_stats().count(Drop::bad_proof) >= 10; }, patience));
    EXPECT_EQ(server_->runtime_peers_seen(), 0u) << "a node was made for a client that did not prove the key";
    // The key holder is taken, and both trust each other.
    auto client = NodeFactory::create_client(client_config(test_auth_key(5)));
    auto to_server = client->lookup(address());
    to_server->send(text_buffer(*client, "with the key"));
    auto from_client = client_node(0);
    ASSERT_TRUE(from_client);
    auto m = from_client->receive(patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "with the key");
    from_client->send(text_buffer(*server_, "welcome"));
    auto answer = to_server->receive(patience);
    ASSERT_TRUE(answer);
    EXPECT_EQ(text_of(*answer), "welcome");
}

// Under auth_key_file a lookup's first hello is answered by a cookie, the second (the
// proof) by the welcome. A cookie that comes again after the proof went (the network
// duplicated it, or answers a hello sent again while the first answer was on its way)
// is over the first hello's nonce: it is passed over, not taken for a server that
// failed to prove the key. Every datagram from the server comes twice here, the second
// time late.
TEST_F(UdpClient, WithAKeyALookupWhoseAnswersComeTwiceIsTakenAndItsMessagesArriveOnce) {
    start_server(4, test_auth_key(5));
    DuplicatingRelay relay(port());
    auto client = NodeFactory::create_client(client_config(test_auth_key(5)));
    auto to_server = client->lookup("udp://127.0.0.1:" + std::to_string(relay.port()));
    EXPECT_GE(relay.duplicated(), 1u) << "the cookie came again after the proof";
    auto from_client = client_node(0);
    ASSERT_TRUE(from_client);
    // Three messages from `factory` through `from`, each received once, in order, by `to`.
    const auto three = [](NodeFactory& factory, Node& from, Node& to, const std::string& text) {
        for (int i = 0; i < 3; ++i)
            from.send(text_buffer(factory, text + std::to_string(i)));
        for (int i = 0; i < 3; ++i) {
            auto m = to.receive(patience);
            ASSERT_TRUE(m);
            EXPECT_EQ(text_of(*m), text + std::to_string(i));
        }
    };
    three(*client, *to_server, *from_client, "to the server ");
    three(*server_, *from_client, *to_server, "to the client ");
    EXPECT_FALSE(to_server->receive(100ms)) << "a duplicated datagram was delivered twice";
}

TEST_F(UdpClient, AClientThatLeavesIsForgottenOnceReadAndItsIdIsNotUsedAgain) {
    start_server(4);
    {
        auto client = NodeFactory::create_client(client_config());
        auto to_server = client->lookup(address());
        to_server->send(text_buffer(*client, "sent, then gone"));
        ASSERT_TRUE(to_server->flush(patience));
    } // goodbye
    auto from_client = client_node(0);
    ASSERT_TRUE(from_client);
    auto m = from_client->receive(patience);
    ASSERT_TRUE(m) << "a client that sent and left is still heard";
    EXPECT_EQ(text_of(*m), "sent, then gone");
    ASSERT_TRUE(eventually([&] { return server().clients() == 0; }, patience));
    from_client.reset();
    EXPECT_FALSE(server_->runtime_peer(first_runtime_id));
    auto next = NodeFactory::create_client(client_config());
    auto to_server = next->lookup(address());
    to_server->send(text_buffer(*next, "next"));
    auto second = client_node(1);
    ASSERT_TRUE(second);
    auto n = second->receive(patience);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->source(), first_runtime_id + 1);
}

TEST_F(UdpClient, AClientTheApplicationForgetsIsForgottenAndItsDatagramsDropped) {
    start_server(4);
    auto client = NodeFactory::create_client(client_config());
    auto to_server = client->lookup(address());
    to_server->send(text_buffer(*client, "first"));
    {
        auto from_client = client_node(0);
        ASSERT_TRUE(from_client);
        ASSERT_TRUE(from_client->receive(patience));
        server_->forget_runtime_peer(first_runtime_id);
    }
    ASSERT_TRUE(eventually([&] { return server().clients() == 0; }, patience));
    EXPECT_EQ(server_->runtime_peers_forgotten(), 1u);
    const auto unknown = server().datagram_stats().count(Drop::unknown_sender);
    to_server->send(text_buffer(*client, "to a server that forgot me"));
    EXPECT_TRUE(eventually([&] { return server().datagram_stats().count(Drop::unknown_sender) > unknown; }, patience))
        << "the forgotten client's datagrams are dropped as from no known node";
    EXPECT_FALSE(server_->runtime_peer(first_runtime_id));
}

} // namespace
} // namespace msgpass::test
