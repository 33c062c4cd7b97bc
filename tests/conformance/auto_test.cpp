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

// The mixed group sleeps on the sci doorbell (a sleeper is announced before each
// message is sent), and input on the tcp connection rings it: the bell's sequence
// moves, and the fastest of three wake-ups is far below the 100 ms after which the
// wait re-polls on its own.
void sleeps_and_wakes(const std::string& inter_host) {
    auto c = two_machines("wake", inter_host);
    SegmentCleanup cleanup(c.partition);
    auto f1 = NodeFactory::create(c, 1);
    auto f3 = NodeFactory::create(c, 3);
    auto sources = f1->create_group("sources");
    auto to_one = f3->create_node(1);
    auto& bell = dynamic_cast<auto_::AutoNodeFactory&>(*f1).bell();
    const auto before = bell.sequence.load();
    const auto rounds = wake_ups(
        3, [&] { return sources->receive(patience); },
        [&](int r) {
            to_one->send(make_message(*f3, 64, 3, static_cast<std::uint64_t>(r)));
            (void)to_one->flush(patience);
        },
        [&](pid_t) { return bell.sleepers.load() > 0; });
    for (std::size_t r = 0; r < rounds.size(); ++r) {
        SCOPED_TRACE("round " + std::to_string(r));
        EXPECT_EQ(rounds[r].error, "");
        ASSERT_NE(rounds[r].message, nullptr);
        EXPECT_EQ(rounds[r].message->source(), 3u);
        EXPECT_EQ(check_payload(*rounds[r].message).seq, r);
    }
    EXPECT_GT(bell.sequence.load(), before) << inter_host << " input never rang the group's doorbell";
    EXPECT_LT(fastest(rounds), 50ms) << "the fastest wake-up took " << fastest(rounds) / 1us << " us";
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
    auto& bell = dynamic_cast<auto_::AutoNodeFactory&>(*f1).bell();
    const auto rounds = wake_ups(
        3, [&] { return sources->receive(patience); },
        [&](int r) {
            to_one->send(make_message(*f3, 64, 3, stream + 1 + static_cast<std::uint64_t>(r)));
            (void)to_one->flush(patience);
        },
        [&](pid_t) { return bell.sleepers.load() > 0; });
    for (std::size_t r = 0; r < rounds.size(); ++r) {
        SCOPED_TRACE("round " + std::to_string(r));
        EXPECT_EQ(rounds[r].error, "");
        ASSERT_NE(rounds[r].message, nullptr);
        EXPECT_EQ(check_payload(*rounds[r].message).seq, stream + 1 + r);
    }
    EXPECT_LT(fastest(rounds), 50ms) << "the fastest wake-up took " << fastest(rounds) / 1us << " us";
}

TEST(AutoTechnology, AMixedGroupSleepsAndWakesForAUdpMessage) {
    sleeps_and_wakes("udp");
}

} // namespace
} // namespace msgpass::test
