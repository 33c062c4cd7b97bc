// The group receive of tcp and udp (kit::ReadyGroup, msgpass/kit/ready_group.hpp:
// tcp's ip/tcp/src/group.hpp, udp's ip/udp/src/group.cpp): it looks only at the
// members that may have something (tcp: its epoll set of their connections and their
// marks; udp: their marks), so that its cost per message does not grow with the group,
// and keeps the seed's fairness among the members that have messages. A builder and a
// group of 32 sources, of which one, then four, send; the same test for each
// technology. Then tcp's own: a member whose connection is replaced is followed.
#include <msgpass/kit/ready_group.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/tcp/factory.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"
#include "group.hpp" // tcp's (ip/tcp/src)
#include "node.hpp"  // tcp's

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

constexpr auto patience = 30s; // a bound for waits that succeed in milliseconds
constexpr NodeId builder_id = 1;
constexpr std::size_t sources = 32;

// A builder and 32 sources on 127.0.0.1, each in its own factory, the builder's
// dynamic group of all the sources with a sweep that never comes on its own (only
// what the technology learns of its members brings a member to a look).
class GroupOf32 : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        c_ = make_configuration(GetParam(), unique_partition(GetParam() + "group"), static_cast<int>(sources) + 1,
                                [](config::Configuration& c) { c.peer_timeout = 5s; });
        ASSERT_EQ(c_.nodes.size(), sources + 1);
        ASSERT_NE(c_.nodes.back().port, 0) << "no free ports";
        builder_ = NodeFactory::create(c_, builder_id);
        group_ = builder_->create_group();
        for (std::size_t s = 0; s < sources; ++s) {
            factories_.push_back(NodeFactory::create(c_, id_of(s)));
            to_builder_.push_back(factories_.back()->create_node(builder_id));
            at_builder_.push_back(builder_->create_node(id_of(s)));
            group_->add(at_builder_.back());
        }
        ready().set_sweep_interval(std::chrono::hours(1));
    }

    kit::ReadyGroup& ready() { return dynamic_cast<kit::ReadyGroup&>(*group_); }
    static NodeId id_of(std::size_t s) { return static_cast<NodeId>(builder_id + 1 + s); }
    void send(std::size_t s, std::uint64_t seq) {
        to_builder_[s]->send(make_message(*factories_[s], 64, id_of(s), seq));
    }

    // One message from every source, taken through the group: every connection (tcp)
    // is made, and a message from each source arrives whatever the others do.
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
    std::vector<NodePtr> at_builder_; // the builder's node of each source, the group's members
    std::vector<std::uint64_t> next_seq_;
};

TEST_P(GroupOf32, OneSenderOfThirtyTwoHasEveryMessageTakenInOrderWithoutLooksAtTheOthers) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    ASSERT_FALSE(ready().scans_all()) << "MSGPASS_{TCP,UDP}_GROUP_SCAN is set in the test's environment";
    constexpr std::size_t sender = 17;
    constexpr std::uint64_t messages = 300;
    const auto looks_before = ready().looks();
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
    // ends what it had (one read of the socket parsed, or its inbox held). A look at
    // every member per receive (the scan) is 32 per message.
    const auto looks = ready().looks() - looks_before;
    EXPECT_LE(looks, 2 * messages + 2) << "the group looked at members that had no message";
}

TEST_P(GroupOf32, TheStartRotatesAmongTheMembersWithMessagesAndSkipsTheIdleOnes) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    // Four senders spread over the group (first and last slots among them), each with
    // messages waiting (a flush returns once the builder acknowledged them: they were
    // read): while all four have some, each run of four receives takes one message
    // from each.
    const std::vector<std::size_t> senders{0, 9, 22, 31};
    constexpr std::uint64_t per_sender = 6;
    for (std::uint64_t i = 0; i < per_sender; ++i)
        for (const std::size_t s : senders)
            send(s, next_seq_[s] + i);
    for (const std::size_t s : senders)
        ASSERT_TRUE(to_builder_[s]->flush(patience));
    const auto looks_before = ready().looks();
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
    const auto looks = ready().looks() - looks_before;
    EXPECT_LE(looks, per_sender * senders.size() + 2 * senders.size() + 2)
        << "the group looked at the 28 members that had no message";
}

INSTANTIATE_TEST_SUITE_P(Sockets, GroupOf32, ::testing::Values("tcp", "udp"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

class TcpGroupOf32 : public GroupOf32 {
protected:
    tcp::TcpGroup& tcp_group() { return dynamic_cast<tcp::TcpGroup&>(*group_); }
};

TEST_P(TcpGroupOf32, AMemberWhoseConnectionWasReplacedIsStillHeardWithoutASweepOfEveryMember) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    const auto sweeps = tcp_group().sweeps();
    constexpr std::size_t sender = 5;
    for (int reset = 0; reset < 3; ++reset) {
        // The builder's side is torn down (RST): the sender's messages come on a new
        // connection, which the group watches once the member marked it.
        dynamic_cast<tcp::TcpNodeFactory&>(*builder_).reset_connections(id_of(sender));
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
    // The first connections came with the sweep of the first receive; the sweep's
    // period is an hour: the new connections came with their member's mark alone.
    EXPECT_EQ(tcp_group().sweeps(), sweeps) << "every member was swept for the new connections";
}

// A group receive that idled (1 ms) acknowledges at once what a member's sender holds
// a buffer of its application for (a message of more than 512 bytes: send_shared's
// buffer, comm's send of the caller's memory), not the sender's copies of small
// messages, which wait for ack_every, ack_bytes or the background thread: with many
// members that each send seldom, acknowledging every member at each idle wait wrote
// a frame per message (docs/tcp.md, "Group receive"). Counted: the acknowledgements
// the builder's nodes wrote alone, less the background thread's for messages left
// unacknowledged (idle_acks).
TEST_P(TcpGroupOf32, AnIdleWaitAcknowledgesWhatASenderHoldsABufferForNotItsCopiesOfSmallMessages) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    const auto alone = [this](std::size_t s) {
        const auto* node = dynamic_cast<const tcp::TcpNode*>(at_builder_[s].get());
        return node->standalone_acks() - node->idle_acks();
    };
    constexpr std::size_t senders = 8;
    std::vector<std::uint64_t> before;
    for (std::size_t s = 0; s < senders; ++s) {
        before.push_back(alone(s));
        send(s, next_seq_[s]++);
        ASSERT_TRUE(to_builder_[s]->flush(patience));
    }
    for (std::size_t i = 0; i < senders; ++i)
        ASSERT_NE(group_->receive(patience), nullptr) << "message " << i;
    EXPECT_EQ(group_->receive(20ms), nullptr) << "a message more than was sent"; // idles past ack_delay
    for (std::size_t s = 0; s < senders; ++s)
        EXPECT_EQ(alone(s), before[s]) << "the idle wait acknowledged source " << s << "'s copy of a small message";

    constexpr std::size_t holder = 3;
    const std::uint64_t held_before = alone(holder);
    SharedBuffer large = make_message(*factories_[holder], 4096, id_of(holder), next_seq_[holder]++);
    to_builder_[holder]->send_shared(large);
    auto m = group_->receive(patience);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->source(), id_of(holder));
    EXPECT_EQ(m->size(), 4096u);
    EXPECT_EQ(group_->receive(20ms), nullptr) << "a message more than was sent";
    // Written by the idle wait, or by the background thread when the wait found the
    // sending side's lock taken (the same count).
    EXPECT_TRUE(eventually([&] { return alone(holder) == held_before + 1; }, patience))
        << "the idle wait did not acknowledge a message whose sender holds its buffer";
    EXPECT_TRUE(eventually([&] { return large.use_count() == 1; }, patience)) << "the sender still holds the message";
}

// A message that came alone costs the group one read of its member's socket: that
// read drained the socket (the kernel gave less than asked), so the group does not
// read it again to see whether more came (more makes the connection readable in the
// group's epoll set, level-triggered), and a receive that finds nothing after it asks
// nothing of the kernel. Counted: the reads of the member's socket by the receiving
// thread and those that found nothing, and the group's asks of its set without
// sleeping. Before, every message cost a read that found nothing.
TEST_P(TcpGroupOf32, AMessageThatCameAloneCostsOneReadOfItsSocketAndNoEmptyRead) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    constexpr std::size_t sender = 11;
    constexpr std::uint64_t messages = 200;
    const auto* node = dynamic_cast<const tcp::TcpNode*>(at_builder_[sender].get());
    ASSERT_NE(node, nullptr);
    const auto reads_before = node->socket_reads();
    const auto empty_before = node->empty_reads();
    const auto refreshes_before = tcp_group().refreshes();
    for (std::uint64_t i = 0; i < messages; ++i) {
        send(sender, next_seq_[sender]);
        auto m = group_->receive(patience); // sleeps on the set until the message is there
        ASSERT_NE(m, nullptr) << "message " << i;
        EXPECT_EQ(m->source(), id_of(sender));
        EXPECT_EQ(check_payload(*m).seq, next_seq_[sender]++) << "message " << i << " out of order";
        EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    }
    const auto reads = node->socket_reads() - reads_before;
    const auto empty = node->empty_reads() - empty_before;
    EXPECT_GE(reads, messages) << "messages taken without a read of the socket";
    EXPECT_LE(empty, messages / 10) << "the group read the member's socket again after a read that drained it";
    EXPECT_LE(reads, messages + messages / 10);
    EXPECT_LE(tcp_group().refreshes() - refreshes_before, messages / 10)
        << "the receive after each message asked the set without sleeping";
}

// The periodic sweep looks only at the members whose connection is not in the
// group's set (every member is followed by the set and its marks otherwise), and at
// every member one time in full_sweep_every: with the sweep due at every receive, 100
// receives look at 32 members 100 / 20 times, not 100 times.
TEST_P(TcpGroupOf32, ThePeriodicSweepLooksOnlyAtTheMembersTheSetDoesNotFollow) {
    ASSERT_NO_FATAL_FAILURE(connect_all());
    ready().set_sweep_interval(std::chrono::nanoseconds::zero());
    const auto swept_before = tcp_group().swept_members();
    const auto sweeps_before = tcp_group().sweeps();
    constexpr std::uint64_t receives = 100;
    for (std::uint64_t i = 0; i < receives; ++i)
        EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    const auto full = tcp_group().sweeps() - sweeps_before;
    EXPECT_EQ(full, receives / tcp::TcpGroup::full_sweep_every);
    EXPECT_EQ(tcp_group().swept_members() - swept_before, full * sources)
        << "a periodic sweep looked at members whose connection the set follows";
    // A message still comes, through the set.
    send(4, next_seq_[4]);
    auto m = group_->receive(patience);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->source(), id_of(4));
    EXPECT_EQ(check_payload(*m).seq, next_seq_[4]++);
}

INSTANTIATE_TEST_SUITE_P(Tcp, TcpGroupOf32, ::testing::Values("tcp"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// An auto group (technology: auto) of one member on the builder's machine (sci) and
// 32 on another (tcp), or of 33 on another: its receive looks at the tcp members through a tcp group (the
// epoll set and the marks) and at the sci one through an sci group (its ready mark),
// so a message from one tcp member costs no read of the other members' sockets (a
// BasicGroup poll read each of them: 31 empty reads per message). auto_test's mixed
// groups show that the sci and the tcp members' messages all arrive, in order.
class AutoGroupOf33 : public ::testing::TestWithParam<bool> { // with a member on the builder's machine
protected:
    static constexpr int members = 33; // node 2 on the builder's machine, 3..34 on another

    void SetUp() override {
        c_ = make_configuration("auto", unique_partition("autogroup"), members + 1,
                                [](config::Configuration& c) { c.peer_timeout = 5s; });
        ASSERT_NE(c_.nodes.back().port, 0) << "no free ports";
        const NodeId last_on_m1 = GetParam() ? 2 : 1;
        for (auto& n : c_.nodes)
            n.machine = n.id <= last_on_m1 ? "m1" : "m2";
        cleanup_.emplace(c_.partition);
        builder_ = NodeFactory::create(c_, builder_id);
        group_ = builder_->create_group();
        for (NodeId id = 2; id <= members + 1; ++id) {
            factories_.push_back(NodeFactory::create(c_, id));
            to_builder_.push_back(factories_.back()->create_node(builder_id));
            at_builder_.push_back(builder_->create_node(id));
            group_->add(at_builder_.back());
        }
        // One message from every member: every connection is made.
        for (std::size_t s = 0; s < factories_.size(); ++s) {
            to_builder_[s]->send(make_message(*factories_[s], 64, static_cast<std::uint32_t>(s), 0));
            ASSERT_TRUE(to_builder_[s]->flush(patience));
        }
        std::set<NodeId> heard;
        for (int i = 0; i < members; ++i) {
            auto m = group_->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << i << " of the first from every member";
            heard.insert(m->source());
        }
        ASSERT_EQ(heard.size(), static_cast<std::size_t>(members));
        ASSERT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    }

    // The reads of the members' sockets that found nothing, at the builder, but s's.
    std::uint64_t empty_reads_but(std::size_t s) const {
        std::uint64_t n = 0;
        for (std::size_t k = GetParam() ? 1 : 0; k < at_builder_.size(); ++k) { // slot 0: sci with GetParam()
            if (k == s) continue;
            const auto* node = dynamic_cast<const tcp::TcpNode*>(at_builder_[k].get());
            EXPECT_NE(node, nullptr) << "member " << k + 2 << " is not reached through tcp";
            if (node != nullptr) n += node->empty_reads();
        }
        return n;
    }

    config::Configuration c_;
    std::optional<SegmentCleanup> cleanup_;
    std::unique_ptr<NodeFactory> builder_;
    std::unique_ptr<DynamicGroup> group_;
    std::vector<std::unique_ptr<NodeFactory>> factories_;
    std::vector<NodePtr> to_builder_;
    std::vector<NodePtr> at_builder_;
};

TEST_P(AutoGroupOf33, AMessageFromOneTcpMemberReadsNoOtherMembersSocket) {
    constexpr std::size_t sender = 10;
    constexpr std::uint64_t messages = 200;
    const auto empty_before = empty_reads_but(sender);
    for (std::uint64_t i = 1; i <= messages; ++i) {
        to_builder_[sender]->send(make_message(*factories_[sender], 64, sender, i));
        auto m = group_->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i;
        EXPECT_EQ(m->source(), static_cast<NodeId>(sender + 2));
        EXPECT_EQ(check_payload(*m).seq, i) << "out of order";
        EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
    }
    EXPECT_LE(empty_reads_but(sender) - empty_before, messages / 10)
        << "the group read the sockets of members that sent nothing";
}

// With a member on the builder's machine the group polls an sci group and a tcp group
// and sleeps on the sci doorbell; with all 33 on another machine it waits as the tcp
// group does.
INSTANTIATE_TEST_SUITE_P(Auto, AutoGroupOf33, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& info) {
    return info.param ? "WithAnSciMember" : "AllOnAnotherMachine";
});

} // namespace
} // namespace msgpass::test
