// The communicator with peers found at run time (docs/communicator.md, "Peers found
// at run time"), over tcp, udp and technology auto (either part between machines): a
// client with no nodes file of its own looks the server up (Communicator::lookup) and
// is answered; the server takes it in as a peer (peers(), matching by source, BMI's
// unexpected messages); a client without the key is refused with the reason; two
// clients at once; drop; a client process killed is PeerLost at the server within
// peer_timeout; clients that were dropped or left are released (their node objects
// freed).
#include <msgpass/auto/options.hpp>
#include <msgpass/comm.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
using comm::any_source;
using comm::any_tag;
using comm::Communicator;
using comm::Status;

constexpr auto patience = 30s;

std::span<const std::byte> bytes_of(const std::string& s) {
    return std::as_bytes(std::span(s.data(), s.size()));
}
std::string text_of(const Buffer& b) {
    const auto* s = b.single();
    return std::string(reinterpret_cast<const char*>(s->data()), s->size());
}

class CommClients : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override { start_server(); }
    // peer_timeout: long enough that a loaded machine (sanitizers, ctest -j2) loses no
    // client that lives; the test of a killed client sets 500 ms.
    void start_server(std::optional<config::AuthKey> key = {}, std::chrono::milliseconds peer_timeout = 5s) {
        server_config_ = make_configuration(technology(), partition_, 1, [&](config::Configuration& c) {
            c.peer_timeout = peer_timeout;
            c.edit_section<tcp::Options>().max_clients = 8;
            c.edit_section<udp::Options>().max_clients = 8;
            if (between() == "udp") c.edit_section<auto_::Options>().inter_host = "udp";
            c.auth_key = key;
        });
        comm_.reset();
        factory_.reset(); // (its node id is taken until it ends: sci's segment under auto)
        factory_ = NodeFactory::create(server_config_, 1);
        comm_ = std::make_unique<Communicator>(*factory_, server_config_);
    }
    // The client's side: the network file's settings alone (config::load_network);
    // its lookup waits up to peer_timeout for the server's answer.
    config::Configuration client_config(std::optional<config::AuthKey> key = {},
                                        const std::string& peer_timeout = "5s") const {
        auto c = config::load_network_text("partition: " + partition_ + "\ntechnology: " + technology() +
                                           "\npeer_timeout: " + peer_timeout + "\n" +
                                           (technology() == "auto" ? "auto: {inter_host: " + between() + "}\n" : ""));
        c.auth_key = key;
        return c;
    }
    std::string address() const {
        return between() + "://127.0.0.1:" + std::to_string(server_config_.nodes.at(0).port);
    }
    // The parameter: tcp, udp, auto (its tcp part), auto-udp (inter_host udp).
    std::string technology() const { return GetParam().substr(0, GetParam().find('-')); }
    std::string between() const {
        if (GetParam() == "auto") return "tcp";
        return GetParam() == "auto-udp" ? "udp" : GetParam();
    }

    std::string partition_ = unique_partition(::testing::UnitTest::GetInstance()->current_test_info()->name());
    config::Configuration server_config_;
    std::unique_ptr<NodeFactory> factory_;
    std::unique_ptr<Communicator> comm_;
};

// A client: its factory and communicator, the server looked up.
struct Client {
    std::unique_ptr<NodeFactory> factory;
    std::unique_ptr<Communicator> comm;
    NodeId server = 0;
    Client(const config::Configuration& c, const std::string& address)
        : factory(NodeFactory::create_client(c)), comm(std::make_unique<Communicator>(*factory, c)) {
        server = comm->lookup(address);
    }
};

TEST_P(CommClients, AClientWithNoNodesFileReachesTheServerAndGetsAReply) {
    Client client(client_config(), address());
    EXPECT_EQ(client.server, 1u);
    EXPECT_EQ(client.comm->peers(), std::vector<NodeId>{1});
    std::string answer(64, '\0');
    auto reply = client.comm->post_recv(client.server, 7, std::as_writable_bytes(std::span(answer)));
    client.comm->post_send_unexpected(client.server, 7, bytes_of("what is the gain of channel 3?"));
    auto requests = comm_->wait_unexpected(1, patience); // BMI's testunexpected: whoever asks
    ASSERT_EQ(requests.size(), 1u);
    const NodeId who = requests[0].source;
    EXPECT_GE(who, first_runtime_id);
    EXPECT_EQ(text_of(*requests[0].buffer), "what is the gain of channel 3?");
    const auto peers = comm_->peers();
    EXPECT_NE(std::find(peers.begin(), peers.end(), who), peers.end()) << "a peer of the server now";
    comm_->send(who, requests[0].tag, bytes_of("1.25"));
    auto done = client.comm->wait(reply.id, patience);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->status, Status::success);
    EXPECT_EQ(answer.substr(0, done->bytes), "1.25");
}

TEST_P(CommClients, AClientThatSentAndLeftBeforeTheServerLookedIsStillHeard) {
    {
        Client client(client_config(), address());
        client.comm->send(client.server, 4, bytes_of("sent, then gone"));
    } // says goodbye: gone before the server's communicator took it in
    auto m = comm_->recv(any_source, 4, patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m->buffer), "sent, then gone");
    EXPECT_GE(m->source, first_runtime_id);
}

TEST_P(CommClients, TwoClientsAtOnceAreMatchedEachByItsSource) {
    Client a(client_config(), address());
    Client b(client_config(), address());
    a.comm->send(a.server, 5, bytes_of("from a"));
    b.comm->send(b.server, 5, bytes_of("from b"));
    // The server learns who they are from what they send, then receives by source.
    std::vector<NodeId> sources;
    for (int i = 0; i < 2; ++i) {
        auto e = comm_->probe(any_source, 5, patience);
        ASSERT_TRUE(e);
        auto m = comm_->recv(e->source, 5, patience);
        ASSERT_TRUE(m);
        sources.push_back(m->source);
    }
    ASSERT_NE(sources[0], sources[1]);
    for (NodeId s : sources)
        comm_->send(s, 6, bytes_of("for " + std::to_string(s)));
    auto ra = a.comm->recv(a.server, 6, patience);
    auto rb = b.comm->recv(b.server, 6, patience);
    ASSERT_TRUE(ra && rb);
    EXPECT_NE(text_of(*ra->buffer), text_of(*rb->buffer));
    // A third message from a alone, by its source: b's never matches it.
    a.comm->send(a.server, 9, bytes_of("again a"));
    b.comm->send(b.server, 9, bytes_of("again b"));
    const NodeId a_id = std::stoul(text_of(*ra->buffer).substr(4));
    auto m = comm_->recv(a_id, 9, patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m->buffer), "again a");
}

TEST_P(CommClients, AClientWithoutTheKeyIsRefusedWithAClearError) {
    start_server(test_auth_key(3));
    try {
        // (A udp server stays silent to a hello without a nonce: the lookup waits all
        // of its peer_timeout.)
        Client c(client_config({}, "1s"), address());
        FAIL() << "a client without the key was taken";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(address()), std::string::npos) << what;
        EXPECT_NE(what.find("needs the partition's key"), std::string::npos) << what;
    }
    Client keyed(client_config(test_auth_key(3)), address());
    keyed.comm->send(keyed.server, 1, bytes_of("with the key"));
    auto m = comm_->recv(any_source, 1, patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m->buffer), "with the key");
}

TEST_P(CommClients, ADroppedClientsMessagesAreDiscardedAndItsReceivesFail) {
    Client client(client_config(), address());
    client.comm->send(client.server, 2, bytes_of("first"));
    auto first = comm_->recv(any_source, 2, patience);
    ASSERT_TRUE(first);
    const NodeId who = first->source;
    client.comm->send(client.server, 3, bytes_of("unread"));
    ASSERT_TRUE(comm_->probe(who, 3, patience));
    auto waiting = comm_->post_recv(who, 4);
    ASSERT_FALSE(waiting.done);
    comm_->drop(who);
    auto failed = comm_->test(waiting.id);
    ASSERT_TRUE(failed);
    EXPECT_EQ(failed->status, Status::peer_lost);
    EXPECT_NE(failed->error.find("dropped"), std::string::npos) << failed->error;
    EXPECT_EQ(comm_->stats().dropped_messages, 1u);
    // Released with the drop: its id is not a peer any more, and says why.
    EXPECT_EQ(comm_->stats().runtime_peers_released, 1u);
    try {
        (void)comm_->iprobe(who, 3);
        FAIL() << "a dropped client is still a peer";
    } catch (const PeerLost& e) {
        EXPECT_EQ(e.peer(), who);
        EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm_->send(who, 1, bytes_of("to a dropped client")), PeerLost);
}

// A server that serves client after client keeps nothing of those that went: each
// client's node object is freed (its weak reference expires), the communicator's
// peers and the technology's clients are back to what they were before the first.
// Half are dropped by the server (BMI's drop of an address), half leave themselves.
TEST_P(CommClients, ClientsThatWereDroppedOrLeftAreReleasedAndTheirNodesFreed) {
    const auto peers_before = comm_->peers();
    auto* tcp_factory = dynamic_cast<tcp::TcpNodeFactory*>(factory_.get()); // (auto's part is not reachable)
    auto* udp_factory = dynamic_cast<udp::UdpNodeFactory*>(factory_.get());
    auto clients_held = [&] {
        if (tcp_factory != nullptr) return tcp_factory->listener_stats().clients;
        return udp_factory != nullptr ? udp_factory->clients() : 0u;
    };
    constexpr int clients = 16;
    std::vector<std::weak_ptr<Node>> nodes;
    for (int i = 0; i < clients; ++i) {
        Client client(client_config(), address());
        client.comm->send(client.server, 1, bytes_of("client " + std::to_string(i)));
        auto m = comm_->recv(any_source, 1, patience);
        ASSERT_TRUE(m);
        EXPECT_EQ(text_of(*m->buffer), "client " + std::to_string(i));
        const NodeId who = m->source;
        auto node = factory_->runtime_peer(who);
        ASSERT_TRUE(node) << "client " << i << " is held while it is connected";
        nodes.push_back(node);
        comm_->send(who, 2, bytes_of("answer"));
        ASSERT_TRUE(client.comm->recv(client.server, 2, patience));
        if (i % 2 == 0) comm_->drop(who); // else: the client leaves (its factory says goodbye)
    }
    // The server goes on receiving (nothing comes): the clients that left are released
    // once their technology forgot them.
    auto freed = [&] {
        return std::all_of(nodes.begin(), nodes.end(), [](const std::weak_ptr<Node>& w) { return w.expired(); });
    };
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while ((!freed() || clients_held() != 0) && std::chrono::steady_clock::now() < deadline)
        EXPECT_FALSE(comm_->recv(any_source, 3, 20ms));
    EXPECT_TRUE(freed()) << "a node object of a client that went is still alive";
    EXPECT_EQ(clients_held(), 0u);
    EXPECT_EQ(comm_->peers(), peers_before);
    EXPECT_EQ(comm_->stats().runtime_peers_released, static_cast<std::uint64_t>(clients));
    // And the server still takes clients.
    Client again(client_config(), address());
    again.comm->send(again.server, 4, bytes_of("again"));
    auto m = comm_->recv(any_source, 4, patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(comm_->peers().size(), peers_before.size() + 1);
}

TEST_P(CommClients, AClientProcessKilledIsPeerLostAtTheServerWithinPeerTimeout) {
    start_server({}, 500ms);
    ChildProcess client({COMM_PEER, "--client", partition_, address()});
    auto hi = comm_->recv(any_source, 1, patience); // the client's "hi"
    ASSERT_TRUE(hi);
    const NodeId who = hi->source;
    EXPECT_GE(who, first_runtime_id);
    auto waiting = comm_->post_recv(who, 2);
    ASSERT_FALSE(waiting.done);
    client.kill(SIGKILL);
    client.wait();
    auto lost = comm_->wait(waiting.id, patience);
    ASSERT_TRUE(lost);
    EXPECT_EQ(lost->status, Status::peer_lost);
    const char* why = between() == "tcp" ? "did not connect again within peer_timeout" : "silent for peer_timeout";
    EXPECT_NE(lost->error.find(why), std::string::npos) << lost->error;
    EXPECT_THROW((void)comm_->recv(who, 2, patience), PeerLost);
    // Released at the server's next look at its nodes.
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (comm_->stats().runtime_peers_released == 0 && std::chrono::steady_clock::now() < deadline)
        EXPECT_FALSE(comm_->recv(any_source, 3, 20ms));
    EXPECT_EQ(comm_->stats().runtime_peers_released, 1u);
    EXPECT_THROW((void)comm_->recv(who, 2, patience), PeerLost);
}

// A server of technology auto takes clients through its tcp part; a client whose
// network file says auto is a tcp client.
INSTANTIATE_TEST_SUITE_P(Technologies, CommClients, ::testing::Values("tcp", "udp", "auto", "auto-udp"),
                         [](const auto& info) {
                             std::string name = info.param;
                             std::replace(name.begin(), name.end(), '-', '_');
                             return name;
                         });

} // namespace
} // namespace msgpass::test
