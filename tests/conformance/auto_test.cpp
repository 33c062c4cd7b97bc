// technology: auto: one factory reaches the nodes of its own machine through sci and
// the others through tcp (or udp: auto.inter_host), and one group mixes both (BMI's
// several methods at once). Each test runs with tcp and with udp between machines.
// The machines are named in the nodes file; all processes run here, so the test
// shows the routing and the mixed group, and tests/tcp runs auto across namespaces.
#include <msgpass/auto/factory.hpp>

#include "../support/partition.hpp"
#include "../support/threads.hpp"
#include "node.hpp" // sci/src: the sci node, to tell which technology reaches a peer

#include <gtest/gtest.h>

#include <array>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
constexpr auto patience = 10s;

// Nodes 1 and 2 on machine m1, node 3 on machine m2; between machines tcp (the
// default) or udp (auto.inter_host).
config::Configuration two_machines(const std::string& tag, const std::string& inter_host = "tcp") {
    auto c = make_configuration("auto", unique_partition(tag), 3, [&](config::Configuration& c) {
        c.groups["sources"] = {2, 3};
        c.edit_section<auto_::Options>().inter_host = inter_host;
    });
    c.nodes[0].machine = "m1";
    c.nodes[1].machine = "m1";
    c.nodes[2].machine = "m2";
    return c;
}

void routes(const std::string& inter_host) {
    auto c = two_machines("routing", inter_host);
    SegmentCleanup cleanup(c.partition);
    auto f1 = NodeFactory::create(c, 1);
    ASSERT_EQ(f1->technology(), "auto");
    auto& a = dynamic_cast<auto_::AutoNodeFactory&>(*f1);
    EXPECT_EQ(a.technology_of(2), "sci");
    EXPECT_EQ(a.technology_of(3), inter_host);
    EXPECT_NE(dynamic_cast<sci::SciNode*>(f1->create_node(2).get()), nullptr);
    EXPECT_EQ(dynamic_cast<sci::SciNode*>(f1->create_node(3).get()), nullptr);
    EXPECT_THROW(f1->create_node(1), UsageError);
    EXPECT_THROW(f1->create_node(9), ConfigError);
}

TEST(AutoTechnology, NodesOnTheSameMachineTalkSciAndOthersTcp) {
    routes("tcp");
}

TEST(AutoTechnology, WithInterHostUdpNodesOnOtherMachinesTalkUdp) {
    routes("udp");
}

void mixed_group(const std::string& inter_host) {
    auto c = two_machines("mixed", inter_host);
    SegmentCleanup cleanup(c.partition);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto sources = f1->create_group("sources");
    auto two_to_one = f2->create_node(1);
    auto three_to_one = f3->create_node(1);
    constexpr std::uint64_t n = 200;
    for (std::uint64_t i = 0; i < n; ++i) {
        two_to_one->send(make_message(*f2, 100 + i, 2, i));
        three_to_one->send(make_message(*f3, 5000 + i, 3, i));
    }
    std::map<NodeId, std::uint64_t> next{{2, 0}, {3, 0}};
    for (std::uint64_t k = 0; k < 2 * n; ++k) {
        BufferPtr m;
        for (auto deadline = std::chrono::steady_clock::now() + patience;
             !m && std::chrono::steady_clock::now() < deadline;) {
            two_to_one->flush(0ns);
            three_to_one->flush(0ns);
            m = sources->receive(1ms);
        }
        ASSERT_NE(m, nullptr) << "message " << k << " never arrived";
        const auto h = check_payload(*m);
        ASSERT_EQ(h.stream, m->source());
        EXPECT_EQ(h.seq, next[m->source()]++);
    }
    EXPECT_EQ(next[2], n);
    EXPECT_EQ(next[3], n);

    // And back: one group send reaches the sci member and the tcp member.
    sources->send(make_message(*f1, 300, 1, 77));
    for (auto* f : {f2.get(), f3.get()}) {
        auto from_one = f->create_node(1);
        auto got = from_one->receive(patience);
        ASSERT_NE(got, nullptr);
        EXPECT_EQ(check_payload(*got).seq, 77u);
    }
}

TEST(AutoTechnology, AMixedGroupReceivesFromSciAndTcpMembersAndSendsToBoth) {
    mixed_group("tcp");
}

TEST(AutoTechnology, AMixedGroupReceivesFromSciAndUdpMembersAndSendsToBoth) {
    mixed_group("udp");
}

// Three rounds of a 64 B message from node 3 to the group of node 1, each sent once
// the group's receive sleeps on the sci doorbell (a sleeper is announced), with
// sequence numbers first, first + 1, first + 2: each arrives, in order, and each
// wake-up was the doorbell's: its sequence moved between the send and the receive's
// return (a wake-up by the wait's own re-poll, every 100 ms, leaves it where it was).
void expect_each_round_rang_the_bell(NodeFactory& f1, Group& sources, NodeFactory& f3, Node& to_one,
                                     std::uint64_t first) {
    auto& bell = dynamic_cast<auto_::AutoNodeFactory&>(f1).bell();
    constexpr int rounds_no = 3;
    std::array<std::uint32_t, rounds_no> before{};
    std::array<std::uint32_t, rounds_no> after{};
    int receiving = 0;
    const auto rounds = wake_ups(
        rounds_no,
        [&] {
            auto m = sources.receive(patience);
            after[static_cast<std::size_t>(receiving++)] = bell.sequence.load();
            return m;
        },
        [&](int r) {
            before[static_cast<std::size_t>(r)] = bell.sequence.load();
            to_one.send(make_message(f3, 64, 3, first + static_cast<std::uint64_t>(r)));
            (void)to_one.flush(patience);
        },
        [&](pid_t) { return bell.sleepers.load() > 0; });
    ASSERT_EQ(rounds.size(), static_cast<std::size_t>(rounds_no));
    for (std::size_t r = 0; r < rounds.size(); ++r) {
        SCOPED_TRACE("round " + std::to_string(r));
        EXPECT_EQ(rounds[r].error, "");
        ASSERT_NE(rounds[r].message, nullptr);
        EXPECT_EQ(rounds[r].message->source(), 3u);
        EXPECT_EQ(check_payload(*rounds[r].message).seq, first + r);
        EXPECT_NE(after[r], before[r]) << "the group woke without a ring of its doorbell";
    }
}

// The mixed group sleeps on the sci doorbell, and input on the tcp (udp) connection
// rings it.
void sleeps_and_wakes(const std::string& inter_host) {
    auto c = two_machines("wake", inter_host);
    SegmentCleanup cleanup(c.partition);
    auto f1 = NodeFactory::create(c, 1);
    auto f3 = NodeFactory::create(c, 3);
    auto sources = f1->create_group("sources");
    auto to_one = f3->create_node(1);
    expect_each_round_rang_the_bell(*f1, *sources, *f3, *to_one, 0);
}

TEST(AutoTechnology, AMixedGroupSleepsAndWakesForATcpMessage) {
    sleeps_and_wakes("tcp");
}

// tcp input that comes while nobody sleeps on the doorbell turns that connection's
// ring off (the receiver reads the input anyway); a group about to sleep turns it on
// again, so that a group that took a stream without sleeping is still woken by the
// next tcp message, not only by the wait's own re-poll 100 ms later.
TEST(AutoTechnology, AMixedGroupThatTookAStreamWithoutSleepingWakesForATcpMessage) {
    auto c = two_machines("wake-busy", "tcp");
    SegmentCleanup cleanup(c.partition);
    auto f1 = NodeFactory::create(c, 1);
    auto f3 = NodeFactory::create(c, 3);
    auto sources = f1->create_group("sources");
    auto to_one = f3->create_node(1);
    // A first blocking receive names the group's tcp member to the doorbell.
    to_one->send(make_message(*f3, 64, 3, 0));
    ASSERT_TRUE(to_one->flush(patience));
    auto first = sources->receive(patience);
    ASSERT_NE(first, nullptr);
    // A stream taken by non-blocking receives: nobody sleeps while it arrives.
    constexpr std::uint64_t stream = 200;
    for (std::uint64_t i = 1; i <= stream; ++i) {
        to_one->send(make_message(*f3, 64, 3, i));
        (void)to_one->flush(patience);
    }
    std::uint64_t taken = 0;
    ASSERT_TRUE(eventually(
        [&] {
            while (auto m = sources->receive()) {
                EXPECT_EQ(check_payload(*m).seq, taken + 1);
                ++taken;
            }
            return taken == stream;
        },
        patience))
        << "took " << taken << " of " << stream;
    expect_each_round_rang_the_bell(*f1, *sources, *f3, *to_one, stream + 1);
}

TEST(AutoTechnology, AMixedGroupSleepsAndWakesForAUdpMessage) {
    sleeps_and_wakes("udp");
}

} // namespace
} // namespace msgpass::test
