// Tests of the tcp technology across "hosts" made of network namespaces: a link
// taken down mid-stream, for less and for more than peer_timeout, and a
// `technology: auto` partition that mixes sci and tcp.
#include "../support/netns.hpp"
#include "tcp_test_support.hpp"

namespace msgpass::test {
namespace {

// Nodes on three hosts; ns1 and ns2 stream to ns3. ns1's switch port goes down for
// less than peer_timeout mid-stream, then up: TCP and the layer's acknowledgements
// carry both streams through whole, and ns2's stream flows during the outage.
TEST(TcpAcrossHosts, ALinkDownAndUpMidStreamLosesAndDuplicatesNothing) {
    Hosts hosts(3);
    REQUIRE_NAMESPACES(hosts);
    PartitionText text;
    const SegmentCleanup pages(partition_for_test()); // the statistics pages of children ended by the test
    text.partition = pages.partition();
    text.peer_timeout = 10s;
    text.send_queue_limit = 2000; // a sender cut off queues this much, not 64 Ki messages
    for (int i = 1; i <= 3; ++i)
        text.nodes.push_back({static_cast<NodeId>(i), Hosts::address(i), static_cast<std::uint16_t>(7000 + i), ""});
    ChildProcess receiver(hosts.in(3, peer_args(text, 3, "receive", {"from=1,2", "count=0", "progress=1000"})));
    ASSERT_EQ(receiver.wait_for_line("ready", patience), "ready");
    // The senders stay after their streams until the receiver took everything (the
    // end of a sender process is another test's matter).
    ChildProcess one(hosts.in(1, peer_args(text, 1, "stream", {"to=3", "count=0", "size=mixed", "stay=1"})));
    ChildProcess two(hosts.in(2, peer_args(text, 2, "stream", {"to=3", "count=0", "size=mixed", "stay=1"})));
    ASSERT_EQ(one.wait_for_line("ready", patience), "ready");
    ASSERT_EQ(two.wait_for_line("ready", patience), "ready");
    // Progress lines of the receiver until pred holds on the last one; "" on failure.
    std::string last;
    const auto progress_until = [&](auto pred, std::chrono::milliseconds bound) {
        const auto deadline = Clock::now() + bound;
        while (Clock::now() < deadline) {
            const auto line =
                receiver.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
            if (line.empty()) return false;
            if (line.rfind("progress", 0) != 0) {
                ADD_FAILURE() << "receiver: " << line;
                return false;
            }
            last = line;
            if (pred(line)) return true;
        }
        return false;
    };
    ASSERT_TRUE(progress_until(
        [](const std::string& l) { return progress_of(l, 1) >= 5000 && progress_of(l, 2) >= 5000; }, 60s))
        << "the streams did not start; last: " << last;
    ASSERT_TRUE(hosts.set_link(1, false));
    const auto down = Clock::now();
    const auto down_at_2 = progress_of(last, 2);
    // The outage lasts at least 3 s and at most 8 s (peer_timeout is 10 s): node 1's
    // count settles once what was on the wire before the cut has been taken (two
    // progress lines 1 s or more into the outage with the same count), then node 2's
    // stream must go on by 1 000 messages. The outage ends when both were seen, so
    // that a machine on which TSan and the load slow both streams to a few hundred
    // messages a second still tells a stall from a slow stream.
    const auto outage_end = down + 8s;
    std::optional<std::uint64_t> settled_at_1; // node 1's count once it stopped moving
    std::uint64_t settled_2 = 0;               // node 2's count then
    std::uint64_t previous_1 = progress_of(last, 1);
    while (Clock::now() < outage_end) {
        if (!progress_until([](const std::string&) { return true; },
                            std::chrono::duration_cast<std::chrono::milliseconds>(outage_end - Clock::now())))
            break;
        const auto at_1 = progress_of(last, 1);
        const auto at_2 = progress_of(last, 2);
        if (!settled_at_1) {
            if (at_1 == previous_1 && Clock::now() - down >= 1s) {
                settled_at_1 = at_1;
                settled_2 = at_2;
            }
            previous_1 = at_1;
        } else if (Clock::now() - down >= 3s && at_2 >= settled_2 + 1000) {
            break;
        }
    }
    ASSERT_TRUE(hosts.set_link(1, true));
    const auto up_at_1 = progress_of(last, 1);
    EXPECT_GT(progress_of(last, 2), down_at_2 + 1000) << "node 2's stream stalled while node 1's link was down";
    ASSERT_TRUE(settled_at_1.has_value())
        << "node 1's count never settled in 8 s of outage (or node 2's stream stalled); last: " << last;
    EXPECT_EQ(up_at_1, *settled_at_1) << "node 1's stream went on with its link down: did the link go down?";
    ASSERT_TRUE(progress_until([&](const std::string& l) { return progress_of(l, 1) >= up_at_1 + 5000; }, 60s))
        << "node 1's stream did not resume after its link came back; last: " << last;
    one.kill(SIGTERM);
    two.kill(SIGTERM);
    const auto sent1 = outcome(one, 60s);
    const auto sent2 = outcome(two, 60s);
    ASSERT_EQ(sent1.rfind("sent ", 0), 0u) << "node 1 did not finish: " << sent1;
    ASSERT_EQ(sent2.rfind("sent ", 0), 0u) << "node 2 did not finish: " << sent2;
    const auto total = std::stoull(sent1.substr(5)) + std::stoull(sent2.substr(5));
    const auto done = outcome(receiver, 60s);
    EXPECT_EQ(done, "received " + std::to_string(total)) << "last progress: " << last;
    EXPECT_EQ(receiver.wait(), 0);
}

// "PeerLost: the peer died or was silent for peer_timeout": ns1 streams to ns2, and
// ns1's switch port goes down and stays down. Both processes live, but neither can
// reach the other: each reports the other lost, not before peer_timeout after the
// cut, and within a few peer timeouts (the sender's background thread sees its data
// unanswered for one, TCP_INFO; the user timeout and keepalive of a receiver's
// connection notice after about three; then reconnecting fails for one more).
TEST(TcpAcrossHosts, ALinkDownForLongerThanThePeerTimeoutIsReportedAsPeerLostOnBothSides) {
    Hosts hosts(2);
    REQUIRE_NAMESPACES(hosts);
    PartitionText text;
    text.partition = partition_for_test();
    text.peer_timeout = 1s;
    text.send_queue_limit = 2000;
    for (int i = 1; i <= 2; ++i)
        text.nodes.push_back({static_cast<NodeId>(i), Hosts::address(i), static_cast<std::uint16_t>(7000 + i), ""});
    ChildProcess receiver(hosts.in(2, peer_args(text, 2, "receive", {"from=1", "count=0", "progress=1000"})));
    ASSERT_EQ(receiver.wait_for_line("ready", patience), "ready");
    ChildProcess sender(hosts.in(1, peer_args(text, 1, "stream", {"to=2", "count=0", "size=300"})));
    ASSERT_EQ(sender.wait_for_line("ready", patience), "ready");
    ASSERT_EQ(receiver.wait_for_line("progress", patience).rfind("progress", 0), 0u) << "the stream did not start";
    ASSERT_TRUE(hosts.set_link(1, false));
    const auto down = Clock::now();
    // Both ends' outcomes, each stamped when it was printed (read in turns).
    std::string sender_end, receiver_end;
    Clock::time_point sender_at{}, receiver_at{};
    const auto deadline = down + 30s;
    while ((sender_end.empty() || receiver_end.empty()) && Clock::now() < deadline) {
        for (auto [peer, end, at] :
             {std::tuple{&sender, &sender_end, &sender_at}, std::tuple{&receiver, &receiver_end, &receiver_at}}) {
            if (!end->empty()) continue;
            const auto line = peer->read_line(10ms);
            for (const char* prefix : {"sent", "received", "error", "lost"}) {
                if (line.rfind(prefix, 0) == 0) {
                    *end = line;
                    *at = Clock::now();
                }
            }
        }
    }
    ASSERT_TRUE(hosts.set_link(1, true));
    const auto ms = [&](Clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(t - down);
    };
    ASSERT_EQ(sender_end.rfind("lost 2 ", 0), 0u) << "the sender said: " << sender_end;
    ASSERT_EQ(receiver_end.rfind("lost 1 ", 0), 0u) << "the receiver said: " << receiver_end;
    EXPECT_GE(ms(sender_at), text.peer_timeout) << "the sender gave up before peer_timeout";
    EXPECT_GE(ms(receiver_at), text.peer_timeout) << "the receiver gave up before peer_timeout";
    EXPECT_LT(ms(sender_at), 4 * text.peer_timeout) << sender_end;
    EXPECT_LT(ms(receiver_at), 7 * text.peer_timeout) << receiver_end;
    EXPECT_EQ(WEXITSTATUS(sender.wait()), 3);
    EXPECT_EQ(WEXITSTATUS(receiver.wait()), 3);
}

// A receiver that lives but does not read, then vanishes: node 2 (ns2) sends node 1
// one message and stays without ever receiving, so node 1's stream fills node 2's
// window and node 1 waits on SendQueueFull while node 2's kernel answers its window
// probes. For three peer timeouts node 1 must report nothing (TcpSlowReceiver in
// tcp_link_test.cpp checks that the connection stays). Then ns1's link goes down: the
// probes go unanswered and node 1 reports node 2 lost, not before peer_timeout, and
// within the probes' backoff (a few seconds after a stall this short) and two peer
// timeouts (seen: about 5 s).
TEST(TcpAcrossHosts, AReceiverThatDoesNotReadIsNotLostUntilItsHostStopsAnswering) {
    Hosts hosts(2);
    REQUIRE_NAMESPACES(hosts);
    PartitionText text;
    const SegmentCleanup pages(partition_for_test()); // the statistics pages of children ended by the test
    text.partition = pages.partition();
    text.peer_timeout = 1s;
    text.send_queue_limit = 64;
    for (int i = 1; i <= 2; ++i)
        text.nodes.push_back({static_cast<NodeId>(i), Hosts::address(i), static_cast<std::uint16_t>(7000 + i), ""});
    ChildProcess receiver(hosts.in(2, peer_args(text, 2, "stream", {"to=1", "count=1", "stay=1"})));
    ASSERT_EQ(receiver.wait_for_line("ready", patience), "ready");
    ChildProcess sender(hosts.in(1, peer_args(text, 1, "stream", {"to=2", "count=0", "size=300"})));
    ASSERT_EQ(sender.wait_for_line("ready", patience), "ready");
    ASSERT_EQ(sender.wait_for_line("streaming", patience), "streaming");
    // The period in which node 2 does not read (not a synchronisation): node 1 says
    // nothing, neither "lost" nor an error.
    const auto quiet = sender.read_line(3 * text.peer_timeout);
    ASSERT_EQ(quiet, "") << "node 1 spoke while node 2 lived and only did not read";
    ASSERT_TRUE(hosts.set_link(1, false));
    const auto down = Clock::now();
    const auto end = sender.read_line(20s);
    const auto at = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - down);
    ASSERT_TRUE(hosts.set_link(1, true));
    ASSERT_EQ(end.rfind("lost 2 ", 0), 0u) << "node 1 said: " << end;
    EXPECT_GE(at, text.peer_timeout) << "node 2 was given up before peer_timeout";
}

// `technology: auto`: nodes 1 and 2 share machine m1 (ns1) and talk sci; node 3 is
// on m2 (ns2) and talks tcp with both. Every node sends to every other and each
// pair's messages arrive once and in order.
TEST(TcpAcrossHosts, AnAutoPartitionUsesSciOnAMachineAndTcpBetweenMachinesBothWays) {
    Hosts hosts(2);
    REQUIRE_NAMESPACES(hosts);
    const SegmentCleanup segments(partition_for_test()); // the sci nodes' segments
    PartitionText text;
    text.partition = segments.partition();
    text.technology = "auto";
    text.peer_timeout = 5s;
    text.machines = {"m1", "m2"};
    text.nodes = {
        {1, Hosts::address(1), 7001, "m1"}, {2, Hosts::address(1), 7002, "m1"}, {3, Hosts::address(2), 7003, "m2"}};
    std::vector<std::unique_ptr<ChildProcess>> nodes;
    const std::map<int, std::string> to{{1, "to=2,3"}, {2, "to=1,3"}, {3, "to=1,2"}};
    for (int id = 1; id <= 3; ++id) {
        const int host = id == 3 ? 2 : 1;
        nodes.push_back(std::make_unique<ChildProcess>(hosts.in(
            host, peer_args(text, static_cast<NodeId>(id), "exchange", {to.at(id), "count=1000", "size=mixed"}))));
        ASSERT_EQ(nodes.back()->read_line(patience), "ready") << "node " << id;
    }
    for (int id = 1; id <= 3; ++id)
        EXPECT_EQ(outcome(*nodes[static_cast<std::size_t>(id - 1)], 120s), "done 1000") << "node " << id;
    // The nodes stay until told: their connections show which technology each pair
    // used. Each pair has one two-way TCP connection, opened by either node: machine
    // m2 (node 3) holds exactly two, one for node 1 and one for node 2; nodes 1 and
    // 2 never connected to each other (sci).
    const auto m1 = hosts.connections(1), m2 = hosts.connections(2);
    const auto one = Hosts::address(1), two = Hosts::address(2);
    const auto across = std::count_if(m2.begin(), m2.end(), [&](const auto& c) {
        return c.first.rfind(two + ":", 0) == 0 && c.second.rfind(one + ":", 0) == 0;
    });
    EXPECT_EQ(across, 2) << "node 3 should have one TCP connection to each of nodes 1 and 2";
    const auto within = std::count_if(m1.begin(), m1.end(), [&](const auto& c) {
        return c.first.rfind(one + ":", 0) == 0 && c.second.rfind(one + ":", 0) == 0;
    });
    EXPECT_EQ(within, 0) << "nodes 1 and 2, on one machine, talked TCP instead of sci";
    for (auto& node : nodes)
        node->kill(SIGTERM);
    for (auto& node : nodes)
        EXPECT_EQ(node->wait(), 0);
}

} // namespace
} // namespace msgpass::test
