// Tests of peers found at run time over tcp (docs/tcp.md, "Clients in no nodes
// file"): a client factory without a nodes file looks a server up by address, the
// server (tcp.max_clients) gives it a run-time id, and they exchange messages; the
// refusals (no clients taken, no key or another key, too many clients) are the
// lookup's errors; a client that dies is lost at the server within peer_timeout and
// forgotten; a connection that never speaks, or speaks nonsense as a newcomer, is
// refused and counted without a node being made for it.
#include "tcp_test_support.hpp"

#include <msgpass/address.hpp>
#include <msgpass/ip/auth.hpp>

namespace msgpass::test {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) {
    return std::as_bytes(std::span(s.data(), s.size()));
}
std::string text_of(const Buffer& b) {
    const auto* s = b.single();
    return std::string(reinterpret_cast<const char*>(s->data()), s->size());
}

class TcpClient : public ::testing::Test {
protected:
    // A server, node 1 of a one-node nodes file, taking max_clients clients.
    void start_server(std::uint32_t max_clients, std::optional<config::AuthKey> key = {}) {
        server_config_ = make_configuration("tcp", partition_, 1, [&](config::Configuration& c) {
            c.peer_timeout = 500ms;
            c.edit_section<tcp::Options>().max_clients = max_clients;
            c.auth_key = key;
        });
        server_ = NodeFactory::create(server_config_, 1);
    }
    // A client's configuration: the partition's network settings, no node at all.
    config::Configuration client_config(std::optional<config::AuthKey> key = {}) const {
        config::Configuration c;
        c.partition = partition_;
        c.technology = "tcp";
        c.peer_timeout = 500ms;
        c.auth_key = key;
        return c;
    }
    std::string address() const { return "tcp://127.0.0.1:" + std::to_string(server_config_.nodes.at(0).port); }
    std::uint16_t port() const { return server_config_.nodes.at(0).port; }
    // The lookup's error, "" when it succeeded.
    static std::string lookup_error(NodeFactory& client, const std::string& address) {
        try {
            (void)client.lookup(address);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    // The node of the k-th client that reached the server, once it came.
    NodePtr client_at_server(std::uint32_t k) {
        if (!eventually([&] { return server_->runtime_peers_seen() > k; }, patience)) return nullptr;
        return server_->runtime_peer(first_runtime_id + k);
    }
    static BufferPtr receive(Node& n) { return n.receive(patience); }

    std::string partition_ = partition_for_test();
    config::Configuration server_config_;
    std::unique_ptr<NodeFactory> server_;
};

TEST_F(TcpClient, AClientInNoNodesFileLooksTheServerUpAndGetsAReply) {
    start_server(4);
    auto client = NodeFactory::create_client(client_config());
    EXPECT_EQ(client->self_id(), no_node);
    auto to_server = client->lookup(address());
    ASSERT_TRUE(to_server);
    EXPECT_EQ(to_server->id(), 1u) << "the node is the server's own id, told in the welcome";
    EXPECT_EQ(client->lookup(address()), to_server) << "the same address gives the same node";
    to_server->send_bytes(bytes_of("hello"));
    auto at_server = client_at_server(0);
    ASSERT_TRUE(at_server);
    EXPECT_EQ(at_server->id(), first_runtime_id);
    auto m = receive(*at_server);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "hello");
    at_server->send_bytes(bytes_of("welcome back"));
    auto reply = receive(*to_server);
    ASSERT_TRUE(reply);
    EXPECT_EQ(text_of(*reply), "welcome back");
    EXPECT_TRUE(eventually([&] { return tcp_of(*server_).listener_stats().accepted == 1; }, patience))
        << describe(tcp_of(*server_).listener_stats());
}

TEST_F(TcpClient, TwoClientsGetTwoIdsAndEachItsOwnReplies) {
    start_server(4);
    auto a = NodeFactory::create_client(client_config());
    auto b = NodeFactory::create_client(client_config());
    auto a_server = a->lookup(address());
    a_server->send_bytes(bytes_of("a"));
    auto at_a = client_at_server(0);
    ASSERT_TRUE(at_a);
    auto b_server = b->lookup(address());
    b_server->send_bytes(bytes_of("b"));
    auto at_b = client_at_server(1);
    ASSERT_TRUE(at_b);
    EXPECT_EQ(at_b->id(), first_runtime_id + 1);
    auto ma = receive(*at_a);
    auto mb = receive(*at_b);
    ASSERT_TRUE(ma && mb);
    EXPECT_EQ(text_of(*ma), "a");
    EXPECT_EQ(text_of(*mb), "b");
    at_b->send_bytes(bytes_of("to b"));
    at_a->send_bytes(bytes_of("to a"));
    auto ra = receive(*a_server);
    auto rb = receive(*b_server);
    ASSERT_TRUE(ra && rb);
    EXPECT_EQ(text_of(*ra), "to a");
    EXPECT_EQ(text_of(*rb), "to b");
}

TEST_F(TcpClient, AClientWhoseConnectionBrokeReconnectsUnderItsIdAndLosesNothing) {
    start_server(4);
    auto client = NodeFactory::create_client(client_config());
    auto to_server = client->lookup(address());
    to_server->send_bytes(bytes_of("one"));
    auto at_server = client_at_server(0);
    ASSERT_TRUE(at_server);
    auto m = receive(*at_server);
    ASSERT_TRUE(m);
    tcp_of(*client).reset_connections(1); // RST: the client connects again, saying the id it was given
    to_server->send_bytes(bytes_of("two"));
    m = receive(*at_server);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "two");
    at_server->send_bytes(bytes_of("three"));
    auto reply = receive(*to_server);
    ASSERT_TRUE(reply);
    EXPECT_EQ(text_of(*reply), "three");
    EXPECT_EQ(server_->runtime_peers_seen(), 1u) << "the same client, not a new one";
    // Counted just after the welcome went: the client may have sent "two" before.
    EXPECT_TRUE(eventually([&] { return tcp_of(*server_).listener_stats().accepted == 2; }, patience))
        << describe(tcp_of(*server_).listener_stats());
}

TEST_F(TcpClient, AServerWithoutMaxClientsRefusesAClientAndTheLookupSaysWhy) {
    start_server(0);
    auto client = NodeFactory::create_client(client_config());
    const auto error = lookup_error(*client, address());
    EXPECT_NE(error.find("lookup of " + address()), std::string::npos) << error;
    EXPECT_NE(error.find("tcp.max_clients is 0"), std::string::npos) << error;
    EXPECT_EQ(server_->runtime_peers_seen(), 0u);
    EXPECT_TRUE(
        eventually([&] { return tcp_of(*server_).listener_stats().count(Refusal::unknown_node) == 1; }, patience));
}

TEST_F(TcpClient, BeyondMaxClientsAClientIsRefusedAndOneThatLeftFreesItsPlace) {
    start_server(1);
    auto a = NodeFactory::create_client(client_config());
    (void)a->lookup(address());
    auto b = NodeFactory::create_client(client_config());
    const auto error = lookup_error(*b, address());
    EXPECT_NE(error.find("too many"), std::string::npos) << error;
    EXPECT_NE(error.find("tcp.max_clients"), std::string::npos) << error;
    a.reset(); // says goodbye: a left cleanly, and its place is free
    EXPECT_TRUE(eventually([&] { return !server_->runtime_peer(first_runtime_id); }, patience));
    auto c = NodeFactory::create_client(client_config());
    EXPECT_EQ(lookup_error(*c, address()), "");
    EXPECT_EQ(server_->runtime_peers_seen(), 2u) << "ids are never reused";
}

TEST_F(TcpClient, WithAKeyOnlyAClientThatProvesItIsTaken) {
    start_server(4, test_auth_key(1));
    auto without = NodeFactory::create_client(client_config());
    auto error = lookup_error(*without, address());
    EXPECT_NE(error.find("authentication expected on one side only"), std::string::npos) << error;
    EXPECT_NE(error.find("needs the partition's key"), std::string::npos) << error;
    auto other_key = NodeFactory::create_client(client_config(test_auth_key(2)));
    error = lookup_error(*other_key, address());
    EXPECT_NE(error.find("did not prove this partition's key"), std::string::npos) << error;
    EXPECT_EQ(server_->runtime_peers_seen(), 0u) << "no node for a client that proved nothing";
    auto with = NodeFactory::create_client(client_config(test_auth_key(1)));
    auto to_server = with->lookup(address());
    to_server->send_bytes(bytes_of("signed"));
    auto at_server = client_at_server(0);
    ASSERT_TRUE(at_server);
    auto m = receive(*at_server);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m), "signed");
    EXPECT_TRUE(
        eventually([&] { return tcp_of(*server_).listener_stats().count(Refusal::unauthenticated) == 1; }, patience))
        << describe(tcp_of(*server_).listener_stats());
}

TEST_F(TcpClient, ANodeOfTheNodesFileThatLooksUpAPeerItHasAlreadyIsToldToUseThatNode) {
    const auto c = make_configuration("tcp", partition_, 2, [](config::Configuration& c) {
        c.peer_timeout = 500ms;
        c.edit_section<tcp::Options>().max_clients = 2;
    });
    auto one = NodeFactory::create(c, 1);
    auto two = NodeFactory::create(c, 2);
    (void)two->create_node(1);
    const auto error = lookup_error(*two, "tcp://127.0.0.1:" + std::to_string(c.nodes.at(0).port));
    EXPECT_NE(error.find("it is node 1, a node this process has already"), std::string::npos) << error;
}

TEST_F(TcpClient, AnAddressOfAnotherTechnologyOrMalformedIsAUsageError) {
    start_server(1);
    auto client = NodeFactory::create_client(client_config());
    EXPECT_THROW((void)client->lookup("udp://127.0.0.1:" + std::to_string(port())), UsageError);
    EXPECT_THROW((void)client->lookup("tcp://127.0.0.1"), UsageError);
    EXPECT_THROW((void)client->lookup("sci://host/1"), UsageError);
}

TEST(TcpClientFactory, SciMakesNoClientAndATcpClientListensNowhere) {
    config::Configuration c;
    c.partition = partition_for_test();
    c.technology = "sci";
    try {
        (void)NodeFactory::create_client(c);
        ADD_FAILURE() << "an sci client was made";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("needs the tcp or udp technology"), std::string::npos) << e.what();
    }
    c.technology = "tcp";
    auto client = NodeFactory::create_client(c);
    EXPECT_EQ(client->self_id(), no_node);
    EXPECT_EQ(tcp_of(*client).port(), 0);
    EXPECT_THROW((void)client->create_node(1), ConfigError) << "no nodes file: no node but those looked up";
}

// A newcomer's plain handshake by hand: the welcome names the id it was given.
std::optional<tcp::Welcome> handshake_as_newcomer(RawSocket& s, const std::string& partition) {
    if (!s.send_struct(tcp::make_hello(no_node, 0, 99, partition))) return std::nullopt;
    tcp::Welcome w{};
    if (s.read_exact(&w, sizeof w) != sizeof w) return std::nullopt;
    return w;
}

TEST_F(TcpClient, AClientThatDiesIsLostAtTheServerWithinPeerTimeoutAndForgotten) {
    start_server(1);
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    const auto w = handshake_as_newcomer(s, partition_);
    ASSERT_TRUE(w);
    ASSERT_EQ(w->kind, static_cast<std::uint16_t>(ip::Kind::welcome));
    EXPECT_EQ(w->to, first_runtime_id);
    EXPECT_EQ(w->from, 1u);
    auto at_server = client_at_server(0);
    ASSERT_TRUE(at_server);
    const auto died = Clock::now();
    s.close(); // the process died: its kernel closed the socket
    bool lost = false;
    std::string what;
    while (!lost && Clock::now() - died < patience) {
        try {
            (void)at_server->receive(100ms);
        } catch (const PeerLost& e) {
            lost = true;
            what = e.what();
        }
    }
    ASSERT_TRUE(lost);
    EXPECT_NE(what.find("did not connect again within peer_timeout"), std::string::npos) << what;
    EXPECT_GE(Clock::now() - died, 400ms) << "it may come back within peer_timeout (500 ms)";
    EXPECT_TRUE(eventually([&] { return !server_->runtime_peer(first_runtime_id); }, patience));
    auto again = RawSocket::connect_to(port()); // the place of the lost client is free
    ASSERT_TRUE(again.valid());
    const auto w2 = handshake_as_newcomer(again, partition_);
    ASSERT_TRUE(w2);
    EXPECT_EQ(w2->kind, static_cast<std::uint16_t>(ip::Kind::welcome));
    EXPECT_EQ(w2->to, first_runtime_id + 1);
}

TEST_F(TcpClient, AConnectionThatNeverSpeaksIsClosedAfterTheHandshakeTimeoutAndMakesNoClient) {
    start_server(4);
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    EXPECT_TRUE(s.wait_closed(patience));
    EXPECT_EQ(tcp_of(*server_).listener_stats().count(Refusal::handshake_timeout), 1u);
    EXPECT_EQ(server_->runtime_peers_seen(), 0u);
}

TEST_F(TcpClient, HostileNewcomerHellosAreRefusedAndCountedWithoutAClient) {
    start_server(4, test_auth_key(1));
    {
        auto s = RawSocket::connect_to(port());
        auto h = ip::make_auth_hello(tcp::protocol, no_node, 5, 99, partition_);
        ASSERT_TRUE(s.send_struct(h)); // a newcomer may say 0 or the server's id, not another
        EXPECT_TRUE(s.wait_closed(patience));
    }
    {
        auto s = RawSocket::connect_to(port());
        auto h = ip::make_auth_hello(tcp::protocol, no_node, 0, 0, partition_); // incarnation 0
        ASSERT_TRUE(s.send_struct(h));
        EXPECT_TRUE(s.wait_closed(patience));
    }
    {
        auto s = RawSocket::connect_to(port()); // the challenge answered with garbage
        auto h = ip::make_auth_hello(tcp::protocol, no_node, 0, 99, partition_);
        ASSERT_TRUE(s.send_struct(h));
        ip::Challenge c{};
        ASSERT_EQ(s.read_exact(&c, sizeof c), sizeof c);
        ip::Proof p{};
        p.header = c.header; // a well-formed header, a MAC of another key
        p.mac.fill(0x5a);
        ASSERT_TRUE(s.send_struct(p));
        EXPECT_TRUE(s.wait_closed(patience));
    }
    {
        auto s = RawSocket::connect_to(port()); // bytes that are no hello at all
        const std::string junk(200, 'x');
        ASSERT_TRUE(s.send_all(junk.data(), junk.size()));
        EXPECT_TRUE(s.wait_closed(patience));
    }
    const auto stats = tcp_of(*server_).listener_stats();
    EXPECT_EQ(stats.count(Refusal::wrong_target), 1u) << describe(stats);
    EXPECT_EQ(stats.count(Refusal::unknown_node), 1u) << describe(stats);
    EXPECT_EQ(stats.count(Refusal::bad_proof), 1u) << describe(stats);
    EXPECT_EQ(stats.count(Refusal::bad_magic), 1u) << describe(stats);
    EXPECT_EQ(stats.accepted, 0u);
    EXPECT_EQ(server_->runtime_peers_seen(), 0u);
}

} // namespace
} // namespace msgpass::test
