// The communicator with peers found at run time (docs/communicator.md, "Peers found
// at run time"), over tcp: a client with no nodes file of its own looks the server up
// (Communicator::lookup) and is answered; the server takes it in as a peer (peers(),
// matching by source, BMI's unexpected messages); a client without the key is refused
// with the reason; two clients at once; drop; a client process killed is PeerLost at
// the server within peer_timeout.
#include <msgpass/comm.hpp>
#include <msgpass/tcp/options.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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

class CommClients : public ::testing::Test {
protected:
    void SetUp() override { start_server(); }
    void start_server(std::optional<config::AuthKey> key = {}) {
        server_config_ = make_configuration("tcp", partition_, 1, [&](config::Configuration& c) {
            c.peer_timeout = 500ms;
            c.edit_section<tcp::Options>().max_clients = 8;
            c.auth_key = key;
        });
        comm_.reset();
        factory_ = NodeFactory::create(server_config_, 1);
        comm_ = std::make_unique<Communicator>(*factory_, server_config_);
    }
    // The client's side: the network file's settings alone (config::load_network).
    config::Configuration client_config(std::optional<config::AuthKey> key = {}) const {
        auto c = config::load_network_text("partition: " + partition_ + "\ntechnology: tcp\npeer_timeout: 500ms\n");
        c.auth_key = key;
        return c;
    }
    std::string address() const { return "tcp://127.0.0.1:" + std::to_string(server_config_.nodes.at(0).port); }

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

TEST_F(CommClients, AClientWithNoNodesFileReachesTheServerAndGetsAReply) {
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

TEST_F(CommClients, AClientThatSentAndLeftBeforeTheServerLookedIsStillHeard) {
    {
        Client client(client_config(), address());
        client.comm->send(client.server, 4, bytes_of("sent, then gone"));
    } // says goodbye: gone before the server's communicator took it in
    auto m = comm_->recv(any_source, 4, patience);
    ASSERT_TRUE(m);
    EXPECT_EQ(text_of(*m->buffer), "sent, then gone");
    EXPECT_GE(m->source, first_runtime_id);
}

TEST_F(CommClients, TwoClientsAtOnceAreMatchedEachByItsSource) {
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

TEST_F(CommClients, AClientWithoutTheKeyIsRefusedWithAClearError) {
    start_server(test_auth_key(3));
    try {
        Client c(client_config(), address());
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

TEST_F(CommClients, ADroppedClientsMessagesAreDiscardedAndItsReceivesFail) {
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
    EXPECT_FALSE(comm_->iprobe(who, 3));
}

TEST_F(CommClients, AClientProcessKilledIsPeerLostAtTheServerWithinPeerTimeout) {
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
    EXPECT_NE(lost->error.find("did not connect again within peer_timeout"), std::string::npos) << lost->error;
    EXPECT_THROW((void)comm_->recv(who, 2, patience), PeerLost);
}

} // namespace
} // namespace msgpass::test
