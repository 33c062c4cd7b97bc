// The tcp group's receive (ip/tcp/src/group.hpp): it looks only at the members whose
// connection has something to read or that gave a message last time, so that its
// cost per message does not grow with the group, keeps the seed's fairness among the
// members that have messages, and follows a member's connection when it is replaced.
#include "tcp_test_support.hpp"

#include "group.hpp"

#include "../support/partition.hpp"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace msgpass::test {
namespace {

constexpr NodeId builder_id = 1;
constexpr std::size_t sources = 32;

// A builder and 32 sources on 127.0.0.1, each in its own factory, the builder's
// dynamic group of all the sources with a sweep that never comes on its own (only
// the epoll set and the transport's changes bring a member to a look).
class TcpGroupOf32 : public ::testing::Test {
protected:
    void SetUp() override {
        auto text = local_partition(partition_for_test(), static_cast<int>(sources) + 1, 5000ms);
        ASSERT_EQ(text.nodes.size(), sources + 1) << "no free ports";
        c_ = text.load();
        builder_ = NodeFactory::create(c_, builder_id);
        group_ = builder_->create_group();
        for (std::size_t s = 0; s < sources; ++s) {
            const auto id = static_cast<NodeId>(builder_id + 1 + s);
            factories_.push_back(NodeFactory::create(c_, id));
            to_builder_.push_back(factories_.back()->create_node(builder_id));
            group_->add(builder_->create_node(id));
        }
        tcp_group().set_sweep_interval(std::chrono::hours(1));
    }

    tcp::TcpGroup& tcp_group() { return dynamic_cast<tcp::TcpGroup&>(*group_); }
    NodeId id_of(std::size_t s) const { return static_cast<NodeId>(builder_id + 1 + s); }
    void send(std::size_t s, std::uint64_t seq) {
        to_builder_[s]->send(make_message(*factories_[s], 64, id_of(s), seq));
    }

    // One message from every source, taken through the group: every connection is
    // made, and a message from each source arrives whatever the others do.
    void connect_all() {
        for (std::size_t s = 0; s < sources; ++s) {
            send(s, 0);
            ASSERT_TRUE(to_builder_[s]->flush(patience));
        }
        std::set<NodeId> heard;
        for (std::size_t i = 0; i < sources; ++i) {
            auto m = group_->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << i << " of the first from every source";
            EXPECT_EQ(check_payload(*m).seq, 0u);
            heard.insert(m->source());
        }
        EXPECT_EQ(heard.size(), sources);
        // A receive that finds nothing looks once more at each member that gave a
        // message (more could have been parsed behind it) and leaves none pending.
        EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
        next_seq_.assign(sources, 1);
    }

    config::Configuration c_;
    std::unique_ptr<NodeFactory> builder_;
    std::unique_ptr<DynamicGroup> group_;
    std::vector<std::unique_ptr<NodeFactory>> factories_;
    std::vector<NodePtr> to_builder_;
    std::vector<std::uint64_t> next_seq_;
};

TEST_F(TcpGroupOf32, OneSenderOfThirtyTwoHasEveryMessageTakenInOrderWithoutLooksAtTheOthers) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    ASSERT_FALSE(tcp_group().scans_all()) << "MSGPASS_TCP_GROUP_SCAN is set in the test's environment";
    constexpr std::size_t sender = 17;
    constexpr std::uint64_t messages = 300;
    const auto looks_before = tcp_group().looks();
    for (std::uint64_t i = 0; i < messages; ++i) {
        send(sender, 1 + i);
        if (i % 3 == 0) { // some alone, some in runs
            ASSERT_TRUE(to_builder_[sender]->flush(patience));
        }
        auto m = group_->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i;
        EXPECT_EQ(m->source(), id_of(sender));
        EXPECT_EQ(check_payload(*m).seq, 1 + i) << "message " << i << " out of order";
    }
    EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    // A message is taken by one look at its sender; a look that finds nothing more
    // ends what one read of the socket parsed. A look at every member per receive (the
    // scan) is 32 per message.
    const auto looks = tcp_group().looks() - looks_before;
    EXPECT_LE(looks, 2 * messages + 2) << "the group looked at members that had no message";
}

TEST_F(TcpGroupOf32, TheStartRotatesAmongTheMembersWithMessagesAndSkipsTheIdleOnes) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    // Four senders spread over the group (first and last slots among them), each with
    // messages waiting: while all four have some, each run of four receives takes one
    // message from each.
    const std::vector<std::size_t> senders{0, 9, 22, 31};
    constexpr std::uint64_t per_sender = 6;
    for (std::uint64_t i = 0; i < per_sender; ++i)
        for (const std::size_t s : senders)
            send(s, next_seq_[s] + i);
    for (const std::size_t s : senders)
        ASSERT_TRUE(to_builder_[s]->flush(patience));
    const auto looks_before = tcp_group().looks();
    std::vector<NodeId> order;
    std::string said;
    for (std::size_t i = 0; i < per_sender * senders.size(); ++i) {
        auto m = group_->receive(patience);
        ASSERT_NE(m, nullptr) << "receive " << i;
        const std::size_t s = m->source() - builder_id - 1;
        EXPECT_EQ(check_payload(*m).seq, next_seq_[s]++) << "from node " << m->source();
        order.push_back(m->source());
        said += std::to_string(m->source()) + " ";
    }
    for (std::size_t i = 0; i + senders.size() <= order.size(); i += senders.size()) {
        const std::set<NodeId> run(order.begin() + static_cast<std::ptrdiff_t>(i),
                                   order.begin() + static_cast<std::ptrdiff_t>(i + senders.size()));
        EXPECT_EQ(run.size(), senders.size()) << "receives " << i << ".." << i + senders.size() - 1
                                              << " did not take one message from each sender; order: " << said;
    }
    EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    const auto looks = tcp_group().looks() - looks_before;
    EXPECT_LE(looks, per_sender * senders.size() + 2 * senders.size() + 2)
        << "the group looked at the 28 members that had no message";
}

TEST_F(TcpGroupOf32, AMemberWhoseConnectionWasReplacedIsStillHeard) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    constexpr std::size_t sender = 5;
    for (int reset = 0; reset < 3; ++reset) {
        // The builder's side is torn down (RST): the sender's messages come on a new
        // connection, which the group watches once the transport says it is there.
        tcp_of(*builder_).reset_connections(id_of(sender));
        for (std::uint64_t i = 0; i < 20; ++i) {
            send(sender, next_seq_[sender] + i);
            ASSERT_TRUE(to_builder_[sender]->flush(patience));
        }
        for (std::uint64_t i = 0; i < 20; ++i) {
            auto m = group_->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << i << " after reset " << reset;
            EXPECT_EQ(m->source(), id_of(sender));
            EXPECT_EQ(check_payload(*m).seq, next_seq_[sender]++) << "after reset " << reset;
        }
    }
    EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
}

} // namespace
} // namespace msgpass::test
