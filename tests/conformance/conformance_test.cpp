// The conformance suite: the contract of msgpass/node.hpp, msgpass/group.hpp and
// msgpass/node_factory.hpp, written once and run on every technology (parameterised
// by technology name). A technology joins by adding its name to the instantiation
// at the bottom. On `auto` the nodes alternate between two machines, so that node
// 1 reaches node 2 through tcp and node 3 through sci, and groups mix both.
#include <msgpass/node.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>

#include "../support/bounded.hpp"
#include "../support/multicast.hpp"
#include "../support/partition.hpp"
#include "../support/tcp_connections.hpp"
#include "../support/threads.hpp"
#include "hostile.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <regex>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer's runtime (sanitizer/allocator_interface.h, which GCC does not ship).
extern "C" void __sanitizer_purge_allocator();
#endif

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
constexpr auto patience = 10s; // a bound for waits that succeed in microseconds

class Conformance : public ::testing::TestWithParam<std::string> {
protected:
    config::Configuration make(int n, const std::function<void(config::Configuration&)>& tweak = {}) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        auto c = make_configuration(GetParam(), unique_partition(info->name()), n, tweak);
        if (GetParam() == "auto") {
            for (auto& node : c.nodes)
                node.machine = node.id % 2 == 1 ? "m1" : "m2";
        }
        return c;
    }
};

// Everything a node sends while alive, then the end marker: the messages must come
// in order, then the end marker, then nothing more within a grace period (a
// duplicate that comes late fails as one that comes early).
void expect_stream_then_end(Node& from, std::uint64_t count, std::uint32_t stream = 0) {
    for (std::uint64_t i = 0; i < count; ++i) {
        auto m = from.receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " of " << count << " never arrived";
        const auto h = check_payload(*m);
        ASSERT_EQ(h.stream, stream) << "message " << i;
        ASSERT_EQ(h.seq, i);
    }
    auto end = from.receive(patience);
    ASSERT_NE(end, nullptr) << "the end marker never arrived";
    const auto h = check_payload(*end);
    EXPECT_EQ(h.stream, end_stream) << "message " << h.seq << " of stream " << h.stream
                                    << " where the end marker was due";
    EXPECT_EQ(h.seq, count);
    EXPECT_EQ(nothing_more(from), "");
}

// Sends message i of a numbered stream (fill_payload's pattern, source 0): every
// buffer_every-th through a Buffer, the others as bytes (send_bytes), so that a
// stream mixes both APIs; a full send queue is waited out by flush. bytes is the
// caller's scratch for the send_bytes messages.
void send_numbered(Node& to, NodeFactory& factory, std::uint64_t i, std::size_t size, std::uint64_t buffer_every,
                   std::vector<std::byte>& bytes) {
    const std::string what = "message " + std::to_string(i);
    if (i % buffer_every == 0) {
        send_retrying(to, make_message(factory, size, 0, i), what);
        return;
    }
    bytes.resize(size);
    fill_payload(bytes, 0, i);
    send_bytes_retrying(to, bytes, what);
}

// Receives from node with a bounded wait; fails the test on timeout.
BufferPtr must_receive(Node& node) {
    auto b = node.receive(patience);
    EXPECT_NE(b, nullptr) << "nothing arrived from node " << node.id() << " within " << patience.count() << " s";
    return b;
}

TEST_P(Conformance, MessageArrivesOnceCompleteAndFromItsSender) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    to_b->send(make_message(*a, 100, 7, 1));
    to_b->send(make_end_marker(*a, 1));
    auto got = must_receive(*from_a);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->size(), 100u);
    EXPECT_EQ(got->source(), 1u);
    EXPECT_EQ(check_payload(*got).seq, 1u);
    ASSERT_TRUE(to_b->flush(patience)); // the end marker may wait for the slot the message freed
    auto end = must_receive(*from_a);
    ASSERT_NE(end, nullptr);
    EXPECT_EQ(check_payload(*end).stream, end_stream) << "the message came twice, or the end marker was lost";
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "") << "a message was delivered twice";
}

// Sizes around the receive slot and up to the maximum: 0, 1, slot-1, slot,
// slot+1, many slots, the maximum; maximum+1 is refused with the buffer kept. The
// maximum is above 8 MiB, where sci's large messages wrap at the whole ring, and
// small enough to keep the test within seconds under ThreadSanitizer.
TEST_P(Conformance, EverySizeFromZeroToTheMaximumArrivesIntact) {
    auto c = make(2, [](config::Configuration& c) { c.max_message_size = 9 * config::MiB; });
    const std::size_t slot = c.section<sci::Options>().recv_buffer_size;
    const std::size_t max = c.max_message_size;
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const std::vector<std::size_t> sizes{0, 1, slot - 1, slot, slot + 1, 37 * slot + 5, max, max - 1, 20};
    std::uint64_t seq = 0;
    for (auto size : sizes) {
        SCOPED_TRACE("size " + std::to_string(size));
        auto m = a->create_buffer(size);
        fill_payload(m->single()->bytes(), 1, seq);
        std::vector<std::byte> expected(m->single()->bytes().begin(), m->single()->bytes().end());
        to_b->send(std::move(m));
        auto got = from_a->receive(patience);
        if (!got) {
            ASSERT_TRUE(to_b->flush(patience));
            got = must_receive(*from_a);
        }
        ASSERT_NE(got, nullptr);
        ASSERT_EQ(got->size(), size);
        std::vector<std::byte> bytes(size);
        got->copy_to(bytes);
        EXPECT_TRUE(bytes == expected) << "content differs";
        ++seq;
    }
}

TEST_P(Conformance, MessageLargerThanTheMaximumIsRefusedAndLeftWithTheCaller) {
    auto c = make(2, [](config::Configuration& c) { c.max_message_size = 1 * config::MiB; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    EXPECT_THROW((void)a->create_buffer(c.max_message_size + 1), MessageTooLarge);
    BufferPtr big = std::make_unique<HeapBuffer>(c.max_message_size + 1);
    try {
        to_b->send(std::move(big));
        FAIL() << "a message of max_message_size + 1 bytes was accepted";
    } catch (const MessageTooLarge& e) {
        EXPECT_NE(std::string(e.what()).find("max_message_size"), std::string::npos) << e.what();
    }
    ASSERT_NE(big, nullptr) << "the refused buffer was taken from the caller";
    EXPECT_EQ(big->size(), c.max_message_size + 1);
    EXPECT_EQ(to_b->stats().messages_sent, 0u);
}

// "Throws PeerLost when the peer died": node 2 runs in a child process (forked
// before this process has threads), sends one message and is killed with SIGKILL,
// so that it says no goodbye. Node 1 then sends and receives until PeerLost, which
// must come within the patience (peer_timeout is 200 ms). The killed process cannot
// remove its shared-memory segments (sci, auto), and no process of node 2 starts
// again to reclaim them: the test removes its partition's segments when it ends,
// after node 1's factory and the child are gone.
TEST_P(Conformance, APeerProcessThatDiesIsReportedAsPeerLost) {
    auto c = make(2, [](config::Configuration& c) { c.peer_timeout = std::chrono::milliseconds(200); });
    const SegmentCleanup segments(c.partition);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0) << "fork failed";
    if (child == 0) {
        try {
            auto f = NodeFactory::create(c, 2);
            auto to_1 = f->create_node(1);
            to_1->send(make_message(*f, 64, 7, 0));
            (void)to_1->flush(patience);
            for (;;)
                ::pause(); // until the parent kills it
        } catch (...) {
            ::_exit(3);
        }
    }
    struct Reaper {
        pid_t pid;
        ~Reaper() {
            ::kill(pid, SIGKILL);
            int status = 0;
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
        }
    } reaper{child};
    auto a = NodeFactory::create(c, 1);
    auto from_2 = a->create_node(2);
    auto first = must_receive(*from_2);
    ASSERT_NE(first, nullptr) << "the child process (node 2) never sent its message";
    ::kill(child, SIGKILL);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    std::uint64_t seq = 1;
    for (;;) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "node 2 was killed, and neither send nor receive raised PeerLost within " << patience.count() << " s";
        try {
            from_2->send(make_message(*a, 64, 7, seq++));
        } catch (const PeerLost& e) {
            EXPECT_EQ(e.peer(), 2u);
            return;
        } catch (const SendQueueFull&) {
        }
        try {
            auto m = from_2->receive(50ms);
            EXPECT_EQ(m, nullptr) << "a message from a killed process";
        } catch (const PeerLost& e) {
            EXPECT_EQ(e.peer(), 2u);
            return;
        }
    }
}

// Two processes configured with different maxima (two configuration files): a
// message above the receiver's max_message_size is refused by the sender (sci: the
// receiver's maximum is known from its segment) or reported on receipt as an Error
// (tcp: the frame is refused and the connection dropped) or as PeerLost (udp: the
// datagrams are refused and counted, and the peer falls silent), never handed out.
TEST_P(Conformance, MessageAboveTheReceiversMaximumIsNeverDelivered) {
    auto small = make(2, [](config::Configuration& c) { c.max_message_size = 1 * config::MiB; });
    auto large = small;
    large.max_message_size = 2 * config::MiB;
    auto a = NodeFactory::create(large, 1);
    auto b = NodeFactory::create(small, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    to_b->send(make_message(*a, 64, 7, 0)); // the connection is made
    auto first = must_receive(*from_a);
    ASSERT_NE(first, nullptr);
    const std::size_t oversized = small.max_message_size + small.max_message_size / 2;
    try {
        to_b->send(make_message(*a, oversized, 7, 1));
    } catch (const MessageTooLarge& e) {
        EXPECT_NE(std::string(e.what()).find("max_message_size"), std::string::npos) << e.what();
        if (GetParam() == "sci") { // the receiver's bound, in the wording of every bound (kit/errors.hpp)
            EXPECT_EQ(std::string(e.what()), "send on node 2 (node-2): a message of " + std::to_string(oversized) +
                                                 " bytes exceeds the receiver's max_message_size (" +
                                                 std::to_string(small.max_message_size) + " bytes)");
        }
        EXPECT_EQ(nothing_more(*from_a), "");
        return;
    }
    const auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "a message of " << oversized << " bytes was neither refused by the sender nor reported by the "
            << "receiver (max_message_size " << small.max_message_size << ") within " << patience.count() << " s";
        try {
            if (auto m = from_a->receive(100ms))
                FAIL() << "a message of " << m->size()
                       << " bytes was delivered to a receiver whose max_message_size is " << small.max_message_size;
        } catch (const PeerLost&) {
            return; // udp: the datagrams are refused and counted, the sender is then silent
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("max_message_size"), std::string::npos) << e.what();
            return;
        }
    }
}

// receive(): "Error, once, when the peer broke the protocol (a length beyond
// max_message_size, ...); the connection is then closed". Node 2 is a hostile peer
// of the technology (hostile.hpp: sci forges correctly signed words in node 1's
// segment, tcp and auto write raw frames after a correct Hello, udp sends raw
// datagrams), which first delivers one good message, then breaks the protocol: a
// whole message beyond node 1's max_message_size, or something the protocol does
// not have. Node 1 reports it once, naming it (sci: as the loss of node 2; a tcp
// peer that then vanishes may be reported lost after it), delivers nothing of it,
// and goes on with node 3 both ways. On udp a datagram is not a connection: it is
// refused and counted (udp::DatagramStats), and nothing is thrown for it.
TEST_P(Conformance, APeerThatBreaksTheProtocolIsReportedOnceDeliversNothingAndThePartitionGoesOn) {
    for (const Break how : {Break::oversized, Break::malformed}) {
        SCOPED_TRACE(name_of(how));
        auto c = make(3, [](config::Configuration& c) {
            c.max_message_size = 1 * config::MiB;
            // Short, so that a vanished hostile peer is reported soon, but not below
            // what a loaded machine under the sanitizers keeps: at 200 ms, node 3's
            // keepalives came late once (udp, ASan, load 10 on 2 CPUs) and node 1 was
            // declared lost after the stream's end marker.
            c.peer_timeout = std::chrono::milliseconds(500);
            c.edit_section<sci::Options>().max_outst_buffers = 4;
        });
        auto victim = NodeFactory::create(c, 1);
        auto third = NodeFactory::create(c, 3);
        auto hostile = make_hostile_peer(c, 2, 1, *victim);
        ASSERT_NE(hostile, nullptr) << "the hostile peer could not make contact";
        auto from_2 = victim->create_node(2);
        const auto errors_before = from_2->stats().errors;
        hostile->break_protocol(how);
        const std::string named = hostile->named(how);
        int reports = 0;   // exceptions that name the break
        int delivered = 0; // messages from node 2 after the good one
        std::string said;
        auto take = [&](std::chrono::milliseconds wait) {
            try {
                if (auto m = from_2->receive(wait)) {
                    ++delivered;
                    said += "; a message of " + std::to_string(m->size()) + " bytes was delivered";
                }
            } catch (const Error& e) {
                said += std::string("; ") + e.what();
                if (hostile->reported_by_receive() && std::string(e.what()).find(named) != std::string::npos) ++reports;
            }
        };
        const auto deadline = Clock::now() + patience;
        while (Clock::now() < deadline && reports == 0 && (hostile->reported_by_receive() || hostile->refused() == 0))
            take(10ms);
        // Once reported, nothing more of it: several peer checks (peer_timeout / 4).
        for (const auto end = Clock::now() + 3 * c.peer_timeout; Clock::now() < end;)
            take(20ms);
        if (hostile->reported_by_receive()) {
            EXPECT_EQ(reports, 1) << "the break was not reported once naming \"" << named << "\" within "
                                  << patience.count() << " s: " << said;
            EXPECT_GE(from_2->stats().errors, errors_before + 1) << "the report was not counted in the node's errors";
        } else {
            EXPECT_GT(hostile->refused(), 0u) << "the receiver neither refused nor reported the break: " << said;
        }
        EXPECT_EQ(delivered, 0) << said;
        // The partition goes on: node 1 and node 3, both ways (each stream taken by a
        // thread while the sender flushes).
        for (const auto& [from, to] : {std::pair{victim.get(), third.get()}, std::pair{third.get(), victim.get()}}) {
            auto sender = from->create_node(to->self_id());
            auto receiver = to->create_node(from->self_id());
            constexpr std::uint64_t n = 50;
            for (std::uint64_t i = 0; i < n; ++i)
                sender->send(make_message(*from, 300, 0, i));
            sender->send(make_end_marker(*from, n));
            std::thread taker([&] {
                try { // a failure, not std::terminate, when the peer is reported lost meanwhile
                    expect_stream_then_end(*receiver, n);
                } catch (const std::exception& e) {
                    ADD_FAILURE() << "node " << to->self_id() << " taking the stream: " << e.what();
                }
            });
            EXPECT_TRUE(sender->flush(patience)) << "to node " << to->self_id();
            taker.join();
        }
    }
}

// "Messages between a pair of nodes arrive once, complete, uncorrupted and in send
// order" with "many threads" sending at once.
TEST_P(Conformance, FourSenderThreadsEachKeepTheirOrderAndIntegrity) {
    auto c = make(2, [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = 4; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr int threads = 4;
    constexpr std::uint64_t per_thread = 2000;
    std::vector<std::thread> senders;
    std::vector<std::string> failures(threads);
    for (int t = 0; t < threads; ++t) {
        senders.emplace_back([&, t] {
            try {
                for (std::uint64_t i = 0; i < per_thread; ++i) {
                    const std::size_t size = 16 + (i * 37 + t * 101) % 3000;
                    send_retrying(*to_b, make_message(*a, size, static_cast<std::uint32_t>(t), i),
                                  "message " + std::to_string(i) + " of thread " + std::to_string(t));
                }
                send_retrying(*to_b, make_end_marker(*a, per_thread), "the end marker of thread " + std::to_string(t));
                if (!to_b->flush(patience)) failures[t] = "could not flush";
            } catch (const std::exception& e) {
                failures[t] = e.what();
            }
        });
    }
    std::vector<std::uint64_t> next(threads, 0);
    int ended = 0;
    std::string error;
    while (ended < threads && error.empty()) {
        auto m = from_a->receive(patience);
        if (!m) {
            error = "receive timed out after " + std::to_string(from_a->stats().messages_received) + " messages";
            break;
        }
        try {
            auto h = check_payload(*m);
            if (h.stream == end_stream)
                ++ended;
            else if (h.stream >= threads)
                error = "unknown stream";
            else if (h.seq != next[h.stream])
                error = "stream " + std::to_string(h.stream) + ": expected message " + std::to_string(next[h.stream]) +
                        ", got " + std::to_string(h.seq);
            else
                ++next[h.stream];
        } catch (const std::string& e) {
            error = e;
        }
    }
    for (auto& s : senders)
        s.join();
    EXPECT_EQ(error, "");
    for (int t = 0; t < threads; ++t) {
        EXPECT_EQ(failures[t], "") << "sender thread " << t;
        EXPECT_EQ(next[t], per_thread) << "stream " << t << " had not arrived whole at its end marker";
    }
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "") << "more messages than were sent";
    EXPECT_EQ(from_a->stats().messages_received, threads * (per_thread + 1));
    EXPECT_EQ(to_b->stats().messages_sent, threads * (per_thread + 1));
}

// Both nodes of a pair send their first message at the same moment (two threads
// released together), in several rounds with new factories: on tcp (and between
// the machines of auto) each node then connects to the other at once, and the
// tie-break keeps one two-way connection (docs/tcp.md). Whatever the technology,
// both streams arrive once, in order, complete, with no error counted, and on tcp
// one connection joins the pair in the end.
TEST_P(Conformance, TwoNodesThatSendToEachOtherFirstAtTheSameMomentGetBothStreamsOnceInOrder) {
    constexpr std::uint64_t n = 1000;
    std::uint64_t crossed = 0;
    for (int round = 0; round < 5; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        auto c = make(2);
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto to_b = a->create_node(2);
        auto to_a = b->create_node(1);
        std::atomic<int> ready{0};
        std::string errors[2];
        auto side = [&](NodeFactory& f, Node& peer, std::uint32_t stream, std::uint32_t peer_stream,
                        std::string& error) {
            ready.fetch_add(1);
            while (ready.load() < 2) {
            }
            try {
                for (std::uint64_t i = 0; i < n; ++i)
                    send_retrying(peer, make_message(f, 32 + i % 300, stream, i), "message " + std::to_string(i));
                send_retrying(peer, make_end_marker(f, n), "the end marker");
                for (std::uint64_t expected = 0; expected <= n; ++expected) {
                    auto m = peer.receive(patience);
                    if (!m) {
                        error = "stalled at message " + std::to_string(expected);
                        return;
                    }
                    const auto h = check_payload(*m);
                    const auto want = expected == n ? end_stream : peer_stream;
                    if (h.stream != want || h.seq != expected) {
                        error = "expected message " + std::to_string(expected) + " of stream " + std::to_string(want) +
                                ", got " + std::to_string(h.seq) + " of stream " + std::to_string(h.stream);
                        return;
                    }
                }
                error = nothing_more_once_quiet(peer, peer);
            } catch (const std::exception& e) {
                error = e.what();
            } catch (const std::string& e) {
                error = e;
            }
        };
        std::thread one([&] { side(*a, *to_b, 1, 2, errors[0]); });
        std::thread two([&] { side(*b, *to_a, 2, 1, errors[1]); });
        one.join();
        two.join();
        EXPECT_EQ(errors[0], "") << "node 1 receiving from node 2";
        EXPECT_EQ(errors[1], "") << "node 2 receiving from node 1";
        EXPECT_EQ(to_a->stats().messages_received, n + 1);
        EXPECT_EQ(to_b->stats().messages_received, n + 1);
        EXPECT_EQ(to_a->stats().errors + to_b->stats().errors, 0u);
        if (auto* tcp_a = dynamic_cast<tcp::TcpNodeFactory*>(a.get())) {
            // One handshake made the pair's connection: a crossing Hello is refused
            // (crossed), never accepted beside or after the connection that stays.
            const auto at_a = tcp_a->listener_stats();
            const auto at_b = dynamic_cast<tcp::TcpNodeFactory&>(*b).listener_stats();
            crossed += at_a.crossed + at_b.crossed;
            EXPECT_EQ(at_a.accepted + at_b.accepted, 1u)
                << "connections accepted in the pair (" << at_a.crossed + at_b.crossed << " crossing Hellos refused)";
        }
        if (GetParam() == "tcp" || GetParam() == "auto") {
            const std::vector<std::uint16_t> ports{c.nodes[0].port, c.nodes[1].port};
            EXPECT_TRUE(eventually([&] { return established_to(ports) == 1; }, patience))
                << established_to(ports) << " connections join the pair";
        }
        if (HasFailure()) return;
    }
    if (GetParam() == "tcp") // (how often the moment was close enough: TcpTieBreak makes it certain)
        std::printf("crossing Hellos refused by the tie-break in 5 rounds: %llu\n",
                    static_cast<unsigned long long>(crossed));
}

// A stream of small messages (udp packs them several to a datagram) and larger ones
// (several datagrams each), through a network that loses, repeats and reorders
// datagrams: on udp the receiving side of each factory drops 5% of the data, status
// and NAK datagrams, repeats 2% and holds 2% back (udp.inject_*; the other
// technologies have no such knob and carry the stream as it is). Every message
// arrives once, in order, intact; on udp the losses happened and were repaired.
TEST_P(Conformance, AStreamThroughALossyNetworkArrivesOnceInOrderAndIntact) {
    auto c = make(2, [](config::Configuration& c) {
        auto& u = c.edit_section<udp::Options>();
        u.inject_loss = 0.05;
        u.inject_duplicate = 0.02;
        u.inject_reorder = 0.02;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 3000;
    auto size_of = [](std::uint64_t i) -> std::size_t { return i % 16 == 15 ? 2500 + i % 3000 : 16 + i * 7 % 200; };
    std::string failure;
    std::thread sender([&] {
        try {
            for (std::uint64_t i = 0; i < n; ++i)
                send_retrying(*to_b, make_message(*a, size_of(i), 0, i), "message " + std::to_string(i));
            send_retrying(*to_b, make_end_marker(*a, n), "the end marker");
            // (sci moves a queue when its sender calls: the thread stays until it is empty)
            if (!to_b->flush(patience)) failure = "the stream could not be flushed";
        } catch (const std::exception& e) {
            failure = e.what();
        }
    });
    std::uint64_t expected = 0;
    std::string error;
    try {
        for (; expected < n; ++expected) {
            auto m = from_a->receive(patience);
            if (!m) {
                error = "stalled at message " + std::to_string(expected);
                break;
            }
            const auto h = check_payload(*m);
            if (h.stream != 0 || h.seq != expected || m->size() != size_of(expected)) {
                error = "expected message " + std::to_string(expected) + " of " + std::to_string(size_of(expected)) +
                        " bytes, got message " + std::to_string(h.seq) + " of stream " + std::to_string(h.stream) +
                        " of " + std::to_string(m->size()) + " bytes";
                break;
            }
        }
        if (error.empty()) {
            auto end = from_a->receive(patience);
            if (!end || check_payload(*end).stream != end_stream) error = "no end marker after the stream";
        }
    } catch (const std::exception& e) {
        error = e.what();
    } catch (const std::string& e) {
        error = e;
    }
    sender.join();
    ASSERT_EQ(failure, "");
    ASSERT_EQ(error, "");
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "") << "a message was delivered twice";
    EXPECT_EQ(from_a->stats().messages_received, n + 1);
    if (auto* u = dynamic_cast<udp::UdpNodeFactory*>(b.get())) {
        const auto at_b = u->datagram_stats();
        const auto at_a = dynamic_cast<udp::UdpNodeFactory&>(*a).datagram_stats();
        EXPECT_GT(at_b.count(udp::Drop::injected), 0u) << "no loss was injected: the test proves nothing";
        EXPECT_GT(at_b.naks_sent, 0u) << "no hole was NAKed (repairs waited for the sender's resend timer)";
        EXPECT_GT(at_a.repairs, 0u) << "losses were never repaired";
    }
}

// A broadcast to a group of three through a lossy network: every member receives
// every message once, in order, intact. On udp the group is udp.multicast_group: a
// message goes once to the multicast address for all members, and the sender
// withholds 5% of those datagrams (udp.inject_multicast_loss), a loss every member
// sees. Its repair goes to the address again for all members, with the bytes the
// members lack at their place in the message: messages of several datagrams make
// repairs of pieces beyond the first. (How often a loss is repaired there is not
// bounded here: the kernel drops datagrams of its own on a loaded machine, and those
// are repaired too; udp_test's UdpMulticast tests count it. The other technologies
// carry the broadcast as it is.)
// The stream goes in chunks of 100 flushed to every member: a group message goes to
// the address only while no member has messages queued.
TEST_P(Conformance, AGroupBroadcastThroughALossyNetworkReachesEveryMemberOnceInOrderAndIntact) {
    const bool multicast = GetParam() == "udp";
    const auto port = multicast ? free_ports(1).at(0) : std::uint16_t{0};
    auto c = make(4, [&](config::Configuration& c) {
        c.groups["farm"] = {2, 3, 4};
        if (!multicast) return;
        loopback_multicast(c, "farm", 254, port);
        auto& o = c.edit_section<udp::Options>();
        o.inject_multicast_loss = 0.05;
        o.inject_seed = 13;
    });
    auto f1 = NodeFactory::create(c, 1);
    std::vector<std::unique_ptr<NodeFactory>> members;
    std::vector<NodePtr> from_supervisor, to_members;
    for (NodeId id : {2, 3, 4}) {
        members.push_back(NodeFactory::create(c, id));
        from_supervisor.push_back(members.back()->create_node(1));
        to_members.push_back(f1->create_node(id));
    }
    auto farm = f1->create_group("farm");
    constexpr std::uint64_t n = 3000;
    auto size_of = [](std::uint64_t i) -> std::size_t { return i % 8 == 7 ? 3000 + i * 37 % 6000 : 24 + i * 7 % 300; };
    std::vector<std::string> errors(members.size());
    {
        std::vector<std::jthread> receivers;
        for (std::size_t k = 0; k < members.size(); ++k) {
            receivers.emplace_back([&, k] {
                auto& from = *from_supervisor[k];
                try {
                    for (std::uint64_t i = 0; i < n; ++i) {
                        auto m = from.receive(patience);
                        if (!m) throw std::string("message " + std::to_string(i) + " never arrived");
                        const auto h = check_payload(*m);
                        if (h.stream != 0 || h.seq != i || m->size() != size_of(i)) {
                            throw std::string("expected message " + std::to_string(i) + " of " +
                                              std::to_string(size_of(i)) + " bytes, got message " +
                                              std::to_string(h.seq) + " of stream " + std::to_string(h.stream) +
                                              " of " + std::to_string(m->size()) + " bytes");
                        }
                    }
                    auto end = from.receive(patience);
                    if (!end || check_payload(*end).stream != end_stream) throw std::string("no end marker");
                } catch (const std::string& e) {
                    errors[k] = e;
                } catch (const std::exception& e) {
                    errors[k] = e.what();
                }
            });
        }
        for (std::uint64_t i = 0; i < n; ++i) {
            farm->send(make_message(*f1, size_of(i), 0, i));
            if (i % 100 != 99) continue;
            for (auto& to : to_members)
                ASSERT_TRUE(to->flush(patience)) << "member " << to->id() << " did not take messages up to " << i;
        }
        farm->send(make_end_marker(*f1, n));
        ASSERT_TRUE(f1->flush(patience));
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
        SCOPED_TRACE("member " + std::to_string(k + 2));
        EXPECT_EQ(errors[k], "");
        EXPECT_EQ(nothing_more(*from_supervisor[k]), "") << "a message was delivered twice";
    }
    if (!multicast) return;
    const auto s = dynamic_cast<udp::UdpNodeFactory&>(*f1).datagram_stats();
    const std::uint64_t lost = s.count(udp::Drop::injected);
    std::printf("[ repair    ] %llu datagrams to the address, %llu withheld, %llu repaired there, %llu per member\n",
                static_cast<unsigned long long>(s.multicast_sent), static_cast<unsigned long long>(lost),
                static_cast<unsigned long long>(s.multicast_repairs),
                static_cast<unsigned long long>(s.repairs - s.multicast_repairs));
    EXPECT_GT(s.multicast_sent, lost) << "the broadcast did not go to the multicast address";
    EXPECT_GT(lost, 20u) << "udp.inject_multicast_loss withheld (almost) nothing: the test proves nothing";
    EXPECT_GT(s.multicast_repairs, 0u) << "no loss was repaired by multicast";
}

// A TCP relay on a port of its own that holds what one node's connection writes
// (its Hello) until released, then joins it to the real port and carries bytes both
// ways: the test decides when that node's attempt reaches its peer, so that two
// connections of a pair cross for certain.
class HeldRelay {
public:
    HeldRelay() {
        listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in at{};
        at.sin_family = AF_INET;
        at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof at;
        if (listener_ < 0 || ::bind(listener_, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0 ||
            ::listen(listener_, 4) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
            ADD_FAILURE() << "the relay cannot listen: " << std::strerror(errno);
            return;
        }
        port_ = ntohs(at.sin_port);
    }
    ~HeldRelay() {
        stop_ = true;
        if (pump_.joinable()) pump_.join();
        for (int fd : {listener_, held_, upstream_})
            if (fd >= 0) ::close(fd);
    }
    [[nodiscard]] std::uint16_t port() const { return port_; }

    // Waits for the connection to the relay and its Hello (held in the socket).
    bool hold(std::chrono::milliseconds bound) {
        pollfd p{listener_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return false;
        held_ = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (held_ < 0) return false;
        return eventually(
            [&] {
                int queued = 0;
                return ::ioctl(held_, FIONREAD, &queued) == 0 && queued >= static_cast<int>(sizeof(tcp::Hello));
            },
            bound);
    }

    // Joins the held connection to port and carries bytes both ways from now on.
    bool release(std::uint16_t port) {
        upstream_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        to.sin_port = htons(port);
        if (upstream_ < 0 || ::connect(upstream_, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) return false;
        pump_ = std::thread([this] {
            std::array<pollfd, 2> p{pollfd{held_, POLLIN, 0}, pollfd{upstream_, POLLIN, 0}};
            std::array<char, 65536> bytes{};
            while (!stop_) {
                if (::poll(p.data(), p.size(), 20) <= 0) continue;
                for (std::size_t k = 0; k < 2; ++k) {
                    if (p[k].revents == 0) continue;
                    const ssize_t n = ::read(p[k].fd, bytes.data(), bytes.size());
                    if (n <= 0) { // one end closed: so does the other
                        ::shutdown(p[1 - k].fd, SHUT_RDWR);
                        return;
                    }
                    for (ssize_t done = 0; done < n;) {
                        const ssize_t w =
                            ::send(p[1 - k].fd, bytes.data() + done, static_cast<std::size_t>(n - done), MSG_NOSIGNAL);
                        if (w <= 0) return;
                        done += w;
                    }
                }
            }
        });
        return true;
    }

private:
    int listener_ = -1, held_ = -1, upstream_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::thread pump_;
};

// Messages first..end-1 of stream `stream` from a node: "" or what was wrong.
std::string take_stream(Node& from, std::uint32_t stream, std::uint64_t first, std::uint64_t end) {
    try {
        for (std::uint64_t i = first; i < end; ++i) {
            auto m = from.receive(patience);
            if (!m) return "stalled at message " + std::to_string(i);
            const auto h = check_payload(*m);
            if (h.stream != stream || h.seq != i)
                return "expected message " + std::to_string(i) + " of stream " + std::to_string(stream) + ", got " +
                       std::to_string(h.seq) + " of stream " + std::to_string(h.stream);
        }
    } catch (const std::exception& e) {
        return e.what();
    } catch (const std::string& e) {
        return e;
    }
    return "";
}

// The tie-break of two tcp nodes that connect to each other at once (docs/tcp.md),
// made certain by a relay that holds one node's attempt: the lower node id (1)
// refuses the higher one's Hello as crossed, both while its own attempt is under way
// (round 0: node 1's attempt held) and while its own connection is younger than
// crossing_window (round 1: node 2's attempt held until node 1's connection carried
// a message, then let through); it never accepts a second connection of the pair,
// and both streams arrive once, in order. Each factory has its own nodes file: the
// relay stands for the peer of the node whose attempt it holds.
TEST(TcpTieBreak, TheLowerNodeRefusesACrossingHelloWhileItsAttemptIsUnderWayOrItsConnectionIsYoung) {
    constexpr std::uint64_t n = 200;
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round == 0 ? "node 1's attempt held" : "node 2's attempt held");
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        const auto c = make_configuration("tcp", unique_partition(info->name()), 2);
        HeldRelay relay;
        ASSERT_NE(relay.port(), 0);
        auto c1 = c, c2 = c; // node 1's view and node 2's: the held one reaches its peer at the relay
        (round == 0 ? c1.nodes[1] : c2.nodes[0]).port = relay.port();
        auto f1 = NodeFactory::create(c1, 1);
        auto f2 = NodeFactory::create(c2, 2);
        auto& t1 = dynamic_cast<tcp::TcpNodeFactory&>(*f1);
        auto to2 = f1->create_node(2);
        auto to1 = f2->create_node(1);
        Node& held_sender = round == 0 ? *to2 : *to1;
        Node& other_sender = round == 0 ? *to1 : *to2;
        NodeFactory& held_factory = round == 0 ? *f1 : *f2;
        NodeFactory& other_factory = round == 0 ? *f2 : *f1;
        const std::uint32_t held_stream = round == 0 ? 1 : 2, other_stream = round == 0 ? 2 : 1;
        held_sender.send(make_message(held_factory, 100, held_stream, 0));
        ASSERT_TRUE(relay.hold(patience)) << "the attempt to be held never reached the relay";
        other_sender.send(make_message(other_factory, 100, other_stream, 0));
        if (round == 0) {
            // Node 2's Hello meets node 1's attempt under way: refused as crossed.
            ASSERT_TRUE(eventually([&] { return t1.listener_stats().crossed >= 1; }, patience))
                << "node 1 did not refuse node 2's crossing Hello; accepted " << t1.listener_stats().accepted;
        } else {
            // Node 2 took node 1's connection; node 1's message 0 came on it.
            ASSERT_EQ(take_stream(*to1, 1, 0, 1), "");
        }
        ASSERT_TRUE(relay.release(round == 0 ? c.nodes[1].port : c.nodes[0].port));
        if (round == 1) {
            ASSERT_TRUE(eventually([&] { return t1.listener_stats().crossed >= 1; }, patience))
                << "node 1 did not refuse node 2's Hello that crossed its young connection; accepted "
                << t1.listener_stats().accepted;
        }
        for (std::uint64_t i = 1; i < n; ++i) {
            to2->send(make_message(*f1, 100, 1, i));
            to1->send(make_message(*f2, 100, 2, i));
        }
        EXPECT_EQ(take_stream(*to2, 2, 0, n), "") << "node 1 receiving from node 2";
        EXPECT_EQ(take_stream(*to1, 1, round == 0 ? 0 : 1, n), "") << "node 2 receiving from node 1";
        EXPECT_EQ(t1.listener_stats().accepted, 0u) << "node 1 accepted a connection of node 2 beside its own";
        EXPECT_EQ(nothing_more_once_quiet(*to2, *to1), "");
        EXPECT_EQ(nothing_more_once_quiet(*to1, *to2), "");
        if (HasFailure()) return;
    }
}

TEST_P(Conformance, ReceiveReturnsNothingWhenNothingArrivedAndWaitsAtMostTheTimeout) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto from_b = a->create_node(2);
    EXPECT_EQ(from_b->receive(), nullptr);
    // Every wait lasts at least the timeout; the fastest of three ends within what a
    // wake-up costs on a loaded machine (a wait that overslept by a re-poll period
    // of 100 ms, or that waited twice, fails).
    constexpr auto timeout = 50ms;
    auto fastest = std::chrono::nanoseconds::max();
    for (int round = 0; round < 3; ++round) {
        const auto start = Clock::now();
        EXPECT_EQ(from_b->receive(timeout), nullptr);
        const auto waited = Clock::now() - start;
        EXPECT_GE(waited, timeout) << "round " << round;
        fastest = std::min(fastest, std::chrono::duration_cast<std::chrono::nanoseconds>(waited));
    }
    EXPECT_LT(fastest, timeout + 40ms) << "receive(50 ms) took at least " << fastest / 1us << " us";
}

// A receiver asleep in a blocking receive (its thread blocked in the kernel, past the
// spin and yield phases) is woken by the arrival itself: the wait re-polls on its own
// only every 100 ms, so a sender that never rang, or a wake-up that never came,
// shows as about 100 ms. The fastest of three rounds is judged, so that one
// descheduled thread on a loaded machine does not fail the test.
TEST_P(Conformance, BlockingReceiveWakesWhenAMessageArrives) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    // The link carries a message first, so that each round's message takes the way of
    // a stream's (on sci the usual case of a small send; the first message of a link
    // has a test of its own below).
    to_b->send(make_message(*a, 64, 1, 0));
    ASSERT_NE(must_receive(*from_a), nullptr);
    const auto rounds = wake_ups(
        3, [&] { return from_a->receive(patience); },
        [&](int r) {
            to_b->send(make_message(*a, 64, 0, static_cast<std::uint64_t>(r)));
            (void)to_b->flush(patience);
        });
    for (std::size_t r = 0; r < rounds.size(); ++r) {
        SCOPED_TRACE("round " + std::to_string(r));
        EXPECT_EQ(rounds[r].error, "");
        ASSERT_NE(rounds[r].message, nullptr);
        EXPECT_EQ(check_payload(*rounds[r].message).seq, r);
    }
    EXPECT_LT(fastest(rounds), 50ms) << "the fastest wake-up took " << fastest(rounds) / 1us
                                     << " us: the receiver woke by re-polling, not by the arrival";
}

// As above, for a receiver that fell asleep before its peer ever sent: the first
// message (on tcp: a connection, its handshake and then the data; on udp: hello and
// welcome first) wakes it, whoever carries it in (on tcp the factory's background
// thread accepts the connection and must ring the sleeper, whose sleep knew no socket
// of the peer yet). Three pairs of fresh factories; the fastest is judged.
TEST_P(Conformance, AReceiverAsleepBeforeItsPeerEverSentWakesForTheFirstMessage) {
    std::vector<WakeUp> rounds;
    for (int round = 0; round < 3; ++round) {
        auto c = make(2);
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto to_b = a->create_node(2);
        auto from_a = b->create_node(1);
        auto r = wake_ups(
            1, [&] { return from_a->receive(patience); },
            [&](int) {
                to_b->send(make_message(*a, 64, 0, static_cast<std::uint64_t>(round)));
                (void)to_b->flush(patience);
            });
        SCOPED_TRACE("round " + std::to_string(round));
        ASSERT_EQ(r.size(), 1u);
        EXPECT_EQ(r[0].error, "");
        ASSERT_NE(r[0].message, nullptr);
        EXPECT_EQ(check_payload(*r[0].message).seq, static_cast<std::uint64_t>(round));
        rounds.push_back(std::move(r[0]));
    }
    EXPECT_LT(fastest(rounds), 50ms) << "the fastest wake-up took " << fastest(rounds) / 1us
                                     << " us: the receiver woke by re-polling, not by the arrival";
}

// The seed: "if there is no remote address available ... the buffer is locally
// enqueued and the operation is retried later", preserving order.
TEST_P(Conformance, SendQueuesWhenNoRemoteOffsetIsFreeAndKeepsOrder) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 200;
    for (std::uint64_t i = 0; i < n; ++i)
        to_b->send(make_message(*a, 256, 0, i)); // never blocks
    EXPECT_GT(to_b->stats().sends_queued, 0u) << "with one outstanding buffer, sends must have queued";
    for (std::uint64_t i = 0; i < n; ++i) {
        BufferPtr m;
        // The queue moves when the sender calls in again; flush from here (same thread).
        for (auto deadline = std::chrono::steady_clock::now() + patience;
             !m && std::chrono::steady_clock::now() < deadline;) {
            to_b->flush(0ns);
            m = from_a->receive(1ms);
        }
        ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
        EXPECT_EQ(check_payload(*m).seq, i);
    }
    EXPECT_TRUE(to_b->flush(patience));
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
}

TEST_P(Conformance, SendQueueHasABoundAndTheRefusedBufferStaysWithTheCaller) {
    auto c = make(2, [](config::Configuration& c) { c.send_queue_limit = 8; });
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2); // node 2 never starts
    for (int i = 0; i < 8; ++i)
        to_b->send(make_message(*a, 32, 0, i));
    auto extra = make_message(*a, 32, 0, 8);
    EXPECT_THROW(to_b->send(std::move(extra)), SendQueueFull);
    ASSERT_NE(extra, nullptr);
    EXPECT_EQ(to_b->stats().queue_depth, 8u);
}

// The memory a sender holds for a receiver that stops taking is bounded on every
// technology (docs/resources.md): what the technology holds in flight (sci: the
// receiver's slots; tcp: the socket buffers; udp: the receiver's window) plus
// send_queue_limit messages. A receiver that takes nothing fills it, the next send is
// refused with SendQueueFull and its buffer stays with the caller; once the receiver
// takes again, every message accepted before arrives, in order, and the refused one
// can be sent again.
TEST_P(Conformance, AReceiverThatStopsTakingFillsTheSendersBoundAndNothingAcceptedIsLost) {
    // (peer_timeout well above the time a slow build takes to fill the bound. tcp once
    // gave the kernel peer_timeout as the user timeout of this connection, which also
    // ends one whose receiver advertised a zero window for that long: under TSan, with
    // ctest -j2, the 1 s of make() was seen to reset it before the refusal. It no
    // longer does (docs/tcp.md; TcpSlowReceiver stops a receiver for three peer
    // timeouts); the margin stays for the slow builds of every technology.)
    auto c = make(2, [](config::Configuration& c) {
        c.send_queue_limit = 64;
        c.peer_timeout = std::max<std::chrono::milliseconds>(c.peer_timeout, 10s);
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    to_b->send(make_message(*a, 1024, 0, 0)); // the link both ways exists before the receiver stops
    ASSERT_NE(from_a->receive(patience), nullptr);
    std::uint64_t accepted = 1;
    BufferPtr refused;
    // The bound is reached within a few seconds on every technology; a send that
    // never refuses means the memory a silent receiver costs has no bound.
    for (const auto deadline = Clock::now() + patience; Clock::now() < deadline && !refused;) {
        auto m = make_message(*a, 1024, 0, accepted);
        try {
            to_b->send(std::move(m));
            ++accepted;
        } catch (const SendQueueFull&) {
            ASSERT_NE(m, nullptr) << "the refused buffer did not stay with the caller";
            refused = std::move(m);
        }
    }
    ASSERT_NE(refused, nullptr) << accepted << " messages accepted for a receiver that takes nothing, no refusal";
    // The refusal came with the queue at its bound; read afterwards it may be lower
    // (tcp and udp: the receiving node's technology took some messages into its own
    // bounded inbox before the refusal, and their acknowledgements trim the queue as
    // they arrive; main's ASan build saw 0 three times in 16), never higher.
    EXPECT_LE(to_b->stats().queue_depth, 64u) << "the send queue went past send_queue_limit";
    std::uint64_t next = 1;
    for (const auto deadline = Clock::now() + 2 * patience; next < accepted && Clock::now() < deadline;) {
        to_b->flush(0ns); // the queue moves when the sender calls in (same thread here)
        if (auto m = from_a->receive(1ms)) {
            ASSERT_EQ(check_payload(*m).seq, next) << "a message accepted before the refusal was lost or reordered";
            ++next;
        }
    }
    EXPECT_EQ(next, accepted) << "of the " << accepted << " messages accepted, " << next << " arrived";
    to_b->send(std::move(refused));
    BufferPtr last;
    for (const auto deadline = Clock::now() + patience; !last && Clock::now() < deadline;) {
        to_b->flush(0ns);
        last = from_a->receive(1ms);
    }
    ASSERT_NE(last, nullptr) << "the message refused before never arrived when sent again";
    EXPECT_EQ(check_payload(*last).seq, accepted);
    EXPECT_EQ(from_a->stats().errors + to_b->stats().errors, 1u) << "only the refusal counts as an error";
}

// "flush ... true when the queue is empty": a peer that never starts takes nothing,
// so the node's flush and the factory's flush both give up after their timeout.
TEST_P(Conformance, FlushToAPeerThatNeverStartsReturnsFalseAfterTheTimeout) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2); // node 2 never starts
    to_b->send(make_message(*a, 32, 0, 0));
    // Every flush lasts at least the timeout; the fastest of three ends within what a
    // wake-up costs on a loaded machine (one flush descheduled past the bound is the
    // machine; a flush that overslept or waited twice is slow every time).
    constexpr auto timeout = 100ms;
    auto fastest_of_three = [&](const auto& flush, const char* what) {
        auto fastest = std::chrono::nanoseconds::max();
        for (int round = 0; round < 3; ++round) {
            const auto start = Clock::now();
            EXPECT_FALSE(flush()) << what << ", round " << round;
            const auto waited = Clock::now() - start;
            EXPECT_GE(waited, timeout) << what << ", round " << round;
            fastest = std::min(fastest, std::chrono::duration_cast<std::chrono::nanoseconds>(waited));
        }
        EXPECT_LT(fastest, timeout + 250ms) << what << ": flush(100 ms) took at least " << fastest / 1ms << " ms";
    };
    fastest_of_three([&] { return to_b->flush(timeout); }, "a message to a peer that never ran was handed over");
    fastest_of_three([&] { return a->flush(timeout); }, "the factory's flush reported every queue empty");
    EXPECT_EQ(to_b->stats().queue_depth, 1u);
    EXPECT_EQ(to_b->stats().messages_sent, 0u);
}

TEST_P(Conformance, SendsToAPeerNotStartedYetFlowWhenItAppears) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    for (int i = 0; i < 10; ++i)
        to_b->send(make_message(*a, 500, 0, i));
    EXPECT_EQ(to_b->stats().queue_depth, 10u);
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i < 10; ++i) {
        BufferPtr m;
        for (auto deadline = std::chrono::steady_clock::now() + patience;
             !m && std::chrono::steady_clock::now() < deadline;) {
            to_b->flush(0ns);
            m = from_a->receive(1ms);
        }
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(check_payload(*m).seq, i);
    }
}

TEST_P(Conformance, AReceivedBufferCanBeSentOnAsItIs) {
    auto c = make(3);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto one_to_two = f1->create_node(2);
    auto two_from_one = f2->create_node(1);
    auto two_to_three = f2->create_node(3);
    auto three_from_two = f3->create_node(2);
    for (std::size_t size : {std::size_t{300}, std::size_t{3 * c.section<sci::Options>().recv_buffer_size}}) {
        one_to_two->send(make_message(*f1, size, 5, size));
        auto got = must_receive(*two_from_one);
        ASSERT_NE(got, nullptr);
        two_to_three->send(std::move(got));
        ASSERT_TRUE(two_to_three->flush(patience));
        auto forwarded = must_receive(*three_from_two);
        ASSERT_NE(forwarded, nullptr);
        EXPECT_EQ(forwarded->size(), size);
        EXPECT_EQ(check_payload(*forwarded).seq, size);
        EXPECT_EQ(forwarded->source(), 2u);
    }
}

TEST_P(Conformance, AFragmentListArrivesAsOneContiguousMessage) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    auto whole = make_message(*a, 20000, 3, 9);
    auto list = std::make_unique<FragmentList>();
    const auto bytes = whole->single()->bytes();
    list->append(std::make_unique<HeapBuffer>(bytes.subspan(0, 10)));
    list->append_view(bytes.subspan(10, 7000));
    list->append(std::make_unique<HeapBuffer>(bytes.subspan(7010)));
    EXPECT_EQ(list->size(), whole->size());
    to_b->send(std::move(list));
    ASSERT_TRUE(to_b->flush(patience));
    auto got = must_receive(*from_a);
    ASSERT_NE(got, nullptr);
    ASSERT_NE(got->single(), nullptr);
    EXPECT_EQ(check_payload(*got).seq, 9u);
}

TEST_P(Conformance, GroupSendReachesEveryMemberOnce) {
    auto c = make(4, [](config::Configuration& c) { c.groups["farm"] = {2, 3, 4}; });
    auto f1 = NodeFactory::create(c, 1);
    std::vector<std::unique_ptr<NodeFactory>> members;
    for (NodeId id : {2, 3, 4})
        members.push_back(NodeFactory::create(c, id));
    auto farm = f1->create_group("farm");
    EXPECT_EQ(farm->members(), (std::vector<NodeId>{2, 3, 4}));
    EXPECT_EQ(farm, f1->create_group("farm")) << "a static group is made once";
    std::vector<NodePtr> from_supervisor;
    for (auto& m : members)
        from_supervisor.push_back(m->create_node(1));
    for (std::uint64_t i = 0; i < 5; ++i) {
        farm->send(make_message(*f1, 1000, 0, i));
        for (auto& n : from_supervisor) {
            auto got = n->receive(patience);
            if (!got) {
                for (NodeId id : {2, 3, 4})
                    f1->create_node(id)->flush(patience);
                got = must_receive(*n);
            }
            ASSERT_NE(got, nullptr);
            EXPECT_EQ(check_payload(*got).seq, i);
        }
    }
    farm->send(make_end_marker(*f1, 5));
    ASSERT_TRUE(f1->flush(patience));
    for (auto& n : from_supervisor) {
        SCOPED_TRACE("member " + std::to_string(n->id()));
        auto end = must_receive(*n);
        ASSERT_NE(end, nullptr);
        EXPECT_EQ(check_payload(*end).stream, end_stream) << "a message came twice, or the end marker was lost";
        EXPECT_EQ(nothing_more(*n), "");
    }
}

// The seed: "to ensure fairness the loop starts every time from a different node".
// Four sources, so that a rotation that skips members (over the first two, say) or
// that does not move on from the member it last took from is seen: while every source
// has messages waiting, each run of four receives takes one message from each.
TEST_P(Conformance, GroupReceiveRotatesStartNodeForFairness) {
    constexpr NodeId builder_id = 1;
    const std::vector<NodeId> source_ids{2, 3, 4, 5};
    constexpr std::uint64_t per_source = 4;
    auto c = make(5, [&](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = per_source;
        c.groups["sources"] = source_ids;
    });
    auto builder = NodeFactory::create(c, builder_id);
    std::vector<std::unique_ptr<NodeFactory>> factories;
    std::vector<NodePtr> to_builder;
    for (NodeId id : source_ids) {
        factories.push_back(NodeFactory::create(c, id));
        to_builder.push_back(factories.back()->create_node(builder_id));
    }
    auto sources = builder->create_group("sources");
    for (std::uint64_t i = 0; i < per_source; ++i)
        for (std::size_t s = 0; s < source_ids.size(); ++s)
            to_builder[s]->send(make_message(*factories[s], 64, source_ids[s], i));
    for (const auto& node : to_builder)
        ASSERT_TRUE(node->flush(patience));
    std::vector<NodeId> order;
    std::map<NodeId, std::uint64_t> next_seq;
    for (std::size_t i = 0; i < per_source * source_ids.size(); ++i) {
        auto m = sources->receive(patience);
        ASSERT_NE(m, nullptr) << "receive " << i << " of " << per_source * source_ids.size();
        const auto h = check_payload(*m);
        EXPECT_EQ(h.seq, next_seq[m->source()]++) << "from node " << m->source();
        order.push_back(m->source());
    }
    std::string said;
    for (NodeId id : order)
        said += std::to_string(id) + " ";
    for (std::size_t i = 0; i + source_ids.size() <= order.size(); i += source_ids.size()) {
        std::set<NodeId> run(order.begin() + static_cast<std::ptrdiff_t>(i),
                             order.begin() + static_cast<std::ptrdiff_t>(i + source_ids.size()));
        EXPECT_EQ(run.size(), source_ids.size())
            << "receives " << i << ".." << i + source_ids.size() - 1
            << " did not take one message from each source while all had messages waiting; order: " << said;
    }
}

// A group's receive takes a message from whichever member sent it, without waiting
// for a look at every member now and then (sci: the ready mark a sender sets after
// each note, the group's periodic sweep only a safety net). On sci a flush that
// returned means the message lies in the receiver's memory, so the group's next
// receive that does not wait must take it; on the other technologies a flush means
// handed to the kernel, and the receive waits for it.
TEST_P(Conformance, AGroupReceiveTakesEachMembersMessageOnceItsSendIsComplete) {
    const std::vector<NodeId> source_ids{2, 3, 4};
    auto c = make(4, [&](config::Configuration& c) { c.groups["sources"] = source_ids; });
    auto builder = NodeFactory::create(c, 1);
    std::vector<std::unique_ptr<NodeFactory>> factories;
    std::vector<NodePtr> to_builder;
    for (NodeId id : source_ids) {
        factories.push_back(NodeFactory::create(c, id));
        to_builder.push_back(factories.back()->create_node(1));
    }
    auto sources = builder->create_group("sources");
    EXPECT_EQ(sources->receive(), nullptr) << "a message before any was sent";
    const bool in_memory = GetParam() == "sci";
    for (std::uint64_t i = 0; i < 60; ++i) {
        const std::size_t s = (i * 2 + i / 3) % source_ids.size(); // not a plain rotation
        to_builder[s]->send(make_message(*factories[s], 64, source_ids[s], i));
        ASSERT_TRUE(to_builder[s]->flush(patience));
        auto m = in_memory ? sources->receive() : sources->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " from node " << source_ids[s]
                              << (in_memory ? " was not taken by the group's next receive after its flush returned"
                                            : " never arrived");
        EXPECT_EQ(m->source(), source_ids[s]) << "message " << i;
        EXPECT_EQ(check_payload(*m).seq, i);
    }
    EXPECT_EQ(sources->receive(), nullptr) << "a message more than was sent";
}

TEST_P(Conformance, DynamicGroupAddsAndRemovesMembersAtRunTime) {
    auto c = make(3);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto from1_at2 = f2->create_node(1);
    auto from1_at3 = f3->create_node(1);
    auto group = f1->create_group();
    group->add(f1->create_node(2));
    group->add(f1->create_node(3));
    group->add(f1->create_node(3));
    EXPECT_EQ(group->members(), (std::vector<NodeId>{2, 3}));
    EXPECT_TRUE(group->remove(2));
    EXPECT_FALSE(group->remove(2));
    group->send(make_message(*f1, 10, 0, 1));
    auto got = must_receive(*from1_at3);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(nothing_more(*from1_at2), "") << "a removed member still got the message";
}

TEST_P(Conformance, StatisticsCountMessagesAndBytes) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    for (int i = 0; i < 3; ++i) {
        to_b->send(make_message(*a, 100, 0, i));
        ASSERT_NE(must_receive(*from_a), nullptr);
    }
    // A message counts as sent when the sending thread learns that the peer has it
    // (tcp: its write returned), which may be after the receiver took it: the count
    // reaches 3 and stays there, it need not be 3 the moment the receiver has all.
    EXPECT_TRUE(eventually([&] { return to_b->stats().messages_sent >= 3; }, patience))
        << "messages_sent " << to_b->stats().messages_sent << " after 3 messages were received";
    EXPECT_EQ(to_b->stats().messages_sent, 3u);
    EXPECT_EQ(to_b->stats().bytes_sent, 300u);
    EXPECT_EQ(from_a->stats().messages_received, 3u);
    EXPECT_EQ(from_a->stats().bytes_received, 300u);
}

TEST_P(Conformance, ANodeCannotBeMadeForItselfOrForAnIdOutsideTheNodesFile) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    EXPECT_THROW(a->create_node(1), UsageError);
    EXPECT_THROW(a->create_group("no-such-group"), ConfigError);
    // Every technology says it in the configuration's one wording, with the known ids.
    const std::string expected = c.nodes_file.string() + ": node id 99 is not in the nodes file (ids: 1, 2)";
    for (const auto& [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"create_node", [&] { (void)a->create_node(99); }},
             {"NodeFactory::create", [&] { (void)NodeFactory::create(c, 99); }}}) {
        try {
            call();
            ADD_FAILURE() << what << "(99) did not throw";
        } catch (const ConfigError& e) {
            EXPECT_EQ(std::string(e.what()), expected) << what;
        }
    }
}

// "send_shared: the layer keeps a reference until the message is transferred, and
// never changes it": one shared message to two peers arrives unchanged at both, the
// caller's copy is unchanged, and the layer's references are dropped once the
// message was transferred (use_count back to the caller's one). Small, slot-sized
// and large messages take different paths in sci (copy, broadcast region).
TEST_P(Conformance, SendSharedDeliversTheMessageUnchangedAndThenReleasesIt) {
    auto c = make(3);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto to2 = f1->create_node(2);
    auto to3 = f1->create_node(3);
    auto at2 = f2->create_node(1);
    auto at3 = f3->create_node(1);
    std::uint64_t seq = 0;
    for (std::size_t size :
         {std::size_t{100}, std::size_t{4000}, std::size_t{5 * c.section<sci::Options>().recv_buffer_size}}) {
        SCOPED_TRACE("size " + std::to_string(size));
        SharedBuffer shared = make_message(*f1, size, 6, seq);
        std::vector<std::byte> before(size);
        shared->copy_to(before);
        to2->send_shared(shared);
        to3->send_shared(shared);
        for (auto* from : {at2.get(), at3.get()}) {
            BufferPtr got;
            for (auto deadline = Clock::now() + patience; !got && Clock::now() < deadline;) {
                (void)to2->flush(0ns);
                (void)to3->flush(0ns);
                got = from->receive(1ms);
            }
            ASSERT_NE(got, nullptr) << "the shared message never arrived at node " << from->id();
            ASSERT_EQ(got->size(), size);
            std::vector<std::byte> bytes(size);
            got->copy_to(bytes);
            EXPECT_TRUE(bytes == before) << "node " << from->id() << " got other bytes";
        }
        std::vector<std::byte> after(size);
        shared->copy_to(after);
        EXPECT_TRUE(after == before) << "the layer changed the caller's shared message";
        // Acknowledgements go out from receivers that wait (tcp: after 1 ms idle).
        EXPECT_TRUE(eventually(
            [&] {
                (void)to2->flush(0ns);
                (void)to3->flush(0ns);
                EXPECT_EQ(at2->receive(2ms), nullptr);
                EXPECT_EQ(at3->receive(2ms), nullptr);
                return shared.use_count() == 1;
            },
            patience))
            << "the layer still holds " << shared.use_count() - 1 << " references after the transfer";
        ++seq;
    }
}

// "resize(n) changes the message size up to the capacity": a buffer of the factory,
// resized below its capacity, is sent with its new size, from the send pool and from
// the heap (sci.use_send_pool on and off; other technologies ignore the key).
TEST_P(Conformance, ABufferResizedBelowItsCapacityArrivesWithItsNewSizeWithAndWithoutTheSendPool) {
    for (bool pool : {false, true}) {
        SCOPED_TRACE(pool ? "send pool" : "heap");
        auto c = make(2, [&](config::Configuration& c) { c.edit_section<sci::Options>().use_send_pool = pool; });
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto to_b = a->create_node(2);
        auto from_a = b->create_node(1);
        std::uint64_t seq = 0;
        for (auto [made, sent] :
             {std::pair<std::size_t, std::size_t>{4000, 1000},
              {c.section<sci::Options>().send_buffer_size, 17},
              {3 * c.section<sci::Options>().send_buffer_size, c.section<sci::Options>().send_buffer_size + 1}}) {
            auto m = a->create_buffer(made);
            ASSERT_NE(m->single(), nullptr);
            ASSERT_GE(m->single()->capacity(), made);
            m->single()->resize(sent);
            ASSERT_EQ(m->size(), sent);
            fill_payload(m->single()->bytes(), 1, seq);
            EXPECT_THROW(m->single()->resize(m->single()->capacity() + 1), MessageTooLarge);
            EXPECT_EQ(m->size(), sent) << "a refused resize changed the size";
            to_b->send(std::move(m));
            ASSERT_TRUE(to_b->flush(patience));
            auto got = must_receive(*from_a);
            ASSERT_NE(got, nullptr);
            EXPECT_EQ(got->size(), sent) << "made with " << made << " bytes, resized to " << sent;
            EXPECT_EQ(check_payload(*got).seq, seq);
            ++seq;
        }
        EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "");
    }
}

// NodeFactory::create: "ResourceError when local resources cannot be set up": a
// second factory for a node id that a live factory holds (its segment, its port) is
// refused with a message naming that node id, and the first one goes on working.
TEST_P(Conformance, ASecondFactoryWithTheSameNodeIdIsRefusedWithResourceError) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    try {
        auto again = NodeFactory::create(c, 1);
        FAIL() << "two factories were made for node 1";
    } catch (const ResourceError& e) {
        // The operator must not guess which node it was.
        EXPECT_NE(std::string(e.what()).find("node id 1"), std::string::npos) << e.what();
    }
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    a->create_node(2)->send(make_message(*a, 64, 0, 3));
    ASSERT_TRUE(a->flush(patience));
    auto got = must_receive(*from_a);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(check_payload(*got).seq, 3u);
}

// "the factory's destructor does it too": a factory destroyed right after queueing
// a stream hands all of it over to a peer that is receiving, which then takes the
// whole stream and its end marker, and is never told of a loss: the sender ended
// cleanly (the peer checks a silent partner every peer_timeout / 4).
TEST_P(Conformance, TheFactoryDestructorHandsQueuedMessagesOverBeforeItEnds) {
    auto c = make(2, [](config::Configuration& c) { c.peer_timeout = 1s; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 300;
    std::thread receiver([&] { expect_stream_then_end(*from_a, n); });
    for (std::uint64_t i = 0; i < n; ++i)
        to_b->send(make_message(*a, 256, 0, i));
    to_b->send(make_end_marker(*a, n));
    to_b.reset();
    a.reset(); // flushes: the receiver takes the rest meanwhile
    receiver.join();
    for (const auto end = Clock::now() + c.peer_timeout; Clock::now() < end;)
        ASSERT_EQ(nothing_more(*from_a, 50ms), "") << "after the sender's factory ended cleanly";
    EXPECT_EQ(from_a->stats().errors, 0u);
}

// Runs f with this process's stderr going to a file; returns what was written.
template <class F>
std::string stderr_of(F&& f) {
    std::fflush(stderr);
    char path[] = "/tmp/msgpass-stderr-XXXXXX";
    const int file = ::mkstemp(path);
    if (file < 0) return "mkstemp failed";
    const int saved = ::dup(STDERR_FILENO);
    ::dup2(file, STDERR_FILENO);
    f();
    std::fflush(stderr);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    ::close(file);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ::unlink(path);
    return text;
}

// "... and reports what it could not hand over": messages to a peer that never runs
// are named, with their count and the peer, on stderr when the factory ends (after
// at most peer_timeout).
TEST_P(Conformance, TheFactoryDestructorReportsWhatItCouldNotHandOver) {
    auto c = make(2, [](config::Configuration& c) { c.peer_timeout = 200ms; });
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2); // node 2 never starts
    for (int i = 0; i < 3; ++i)
        to_b->send(make_message(*a, 64, 0, i));
    to_b.reset();
    const auto start = Clock::now();
    const auto report = stderr_of([&] { a.reset(); });
    const auto took = Clock::now() - start;
    EXPECT_TRUE(std::regex_search(report, std::regex("3 messages to node 2 \\(node-2\\) were never")))
        << "stderr: " << report;
    EXPECT_GE(took, c.peer_timeout) << "the destructor gave up before peer_timeout";
    EXPECT_LT(took, c.peer_timeout + 2s);
}

// node_factory.hpp: "a Buffer may outlive its factory; a Node or a Group may be
// dropped after it, but not used". A received buffer is read, and a buffer of the
// send pool written, after both factories are gone; the nodes and a static group
// are released only then (ASan checks that nothing was freed under them).
TEST_P(Conformance, BuffersOutliveTheirFactoryAndNodesAndGroupsMayBeDroppedAfterIt) {
    auto c = make(3, [](config::Configuration& c) {
        c.peer_timeout = 500ms;
        c.groups["all"] = {1, 2, 3};
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    auto group = b->create_group("all");
    to_b->send(make_message(*a, 1000, 5, 42));
    ASSERT_TRUE(to_b->flush(patience));
    auto got = must_receive(*from_a);
    ASSERT_NE(got, nullptr);
    auto spare = a->create_buffer(256);
    a.reset();
    b.reset();
    EXPECT_EQ(got->size(), 1000u);
    EXPECT_EQ(got->source(), 1u);
    const auto h = check_payload(*got);
    EXPECT_EQ(h.stream, 5u);
    EXPECT_EQ(h.seq, 42u);
    ASSERT_EQ(spare->size(), 256u);
    ASSERT_NE(spare->single(), nullptr);
    std::memset(spare->single()->data(), 0x5a, spare->size());
    EXPECT_EQ(spare->single()->data()[255], std::byte{0x5a});
    got.reset();
    spare.reset();
    group.reset();
    from_a.reset();
    to_b.reset();
}

// Runs call on another thread and returns the message of the UsageError it throws
// ("" when it returned or threw something else, with what it threw). A call that
// blocks is a failure of the contract too: the process ends with the reason after
// patience, as a thread that does not return cannot be joined.
template <class F>
std::string usage_error_of(const std::string& what, F&& call) {
    auto done = std::async(std::launch::async, [&]() -> std::string {
        try {
            call();
            return "";
        } catch (const UsageError& e) {
            return e.what();
        } catch (const std::exception& e) {
            return std::string("(not a UsageError) ") + e.what();
        }
    });
    if (done.wait_for(patience) != std::future_status::ready) {
        std::cerr << what << " after the factory was destroyed did not return within " << patience.count() << " s\n";
        std::abort();
    }
    return done.get();
}

// node_factory.hpp: "a call that moves messages on a Node or a Group after its
// factory is gone throws UsageError". Both factories are destroyed first, with a
// message waiting in the receiver's inbox and one queued towards a peer that never
// started; then every such call on the nodes, on a static group and on a dynamic
// group is refused with a UsageError naming the call and the object, at once (also
// with the largest timeout), and the buffer of a refused send stays with the caller.
// The calls that read what the object knows still answer. The objects are dropped
// last (ASan checks that nothing was freed under any of these calls).
TEST_P(Conformance, CallsOnNodesAndGroupsAfterTheirFactoryIsGoneAreUsageErrors) {
    auto c = make(3, [](config::Configuration& c) {
        c.peer_timeout = 300ms;
        c.groups["all"] = {1, 2, 3};
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto to_c = a->create_node(3); // node 3 never starts: a message stays queued
    auto from_a = b->create_node(1);
    auto group = b->create_group("all");
    auto dynamic = b->create_group();
    dynamic->add(from_a);
    to_b->send(make_message(*a, 100, 0, 1));
    ASSERT_TRUE(to_b->flush(patience));
    ASSERT_NE(must_receive(*from_a), nullptr) << "the pair never worked";
    to_b->send(make_message(*a, 100, 0, 2));
    ASSERT_TRUE(to_b->flush(patience));
    to_c->send(make_message(*a, 100, 0, 1));
    auto keep = a->create_buffer(64);
    auto shared = SharedBuffer(a->create_buffer(64));
    stderr_of([&] { a.reset(); }); // the report of the message to node 3 is not this test's
    b.reset();

    const auto refused = [](const std::string& error, const std::string& call, const std::string& object) {
        return error.find(call + " on " + object + " after its factory was destroyed") != std::string::npos;
    };
    const std::string node2 = "node 2 (node-2)";
    const std::string node1 = "node 1 (node-1)";
    std::string e = usage_error_of("Node::send", [&] { to_b->send(std::move(keep)); });
    EXPECT_TRUE(refused(e, "send", node2)) << e;
    ASSERT_NE(keep, nullptr) << "a refused send took the buffer";
    EXPECT_EQ(keep->size(), 64u);
    e = usage_error_of("Node::send_shared", [&] { to_b->send_shared(shared); });
    EXPECT_TRUE(refused(e, "send", node2)) << e;
    EXPECT_EQ(shared.use_count(), 1) << "a refused send_shared kept a reference";
    e = usage_error_of("Node::flush", [&] { (void)to_c->flush(std::chrono::nanoseconds::max()); });
    EXPECT_TRUE(refused(e, "flush", "node 3 (node-3)")) << e;
    e = usage_error_of("Node::receive()", [&] { (void)from_a->receive(); });
    EXPECT_TRUE(refused(e, "receive", node1)) << e << " (a message was waiting)";
    e = usage_error_of("Node::receive(max)", [&] { (void)from_a->receive(std::chrono::nanoseconds::max()); });
    EXPECT_TRUE(refused(e, "receive", node1)) << e;
    e = usage_error_of("Node::receive(timeout)", [&] { (void)to_b->receive(1ms); });
    EXPECT_TRUE(refused(e, "receive", node2)) << e;
    e = usage_error_of("Group::send", [&] { group->send(std::make_unique<HeapBuffer>(64)); });
    EXPECT_TRUE(refused(e, "send", "group 'all'")) << e;
    e = usage_error_of("Group::receive()", [&] { (void)group->receive(); });
    EXPECT_TRUE(refused(e, "receive", "group 'all'")) << e;
    e = usage_error_of("Group::receive(max)", [&] { (void)group->receive(std::chrono::nanoseconds::max()); });
    EXPECT_TRUE(refused(e, "receive", "group 'all'")) << e;
    e = usage_error_of("DynamicGroup::receive(timeout)", [&] { (void)dynamic->receive(1ms); });
    EXPECT_TRUE(refused(e, "receive", "a dynamic group")) << e;
    e = usage_error_of("DynamicGroup::add", [&] { dynamic->add(to_b); });
    EXPECT_TRUE(refused(e, "add", "a dynamic group")) << e;

    // What the objects know is still there.
    EXPECT_EQ(to_b->id(), 2u);
    EXPECT_EQ(to_b->name(), "node-2");
    EXPECT_GE(from_a->stats().messages_received, 1u); // udp counts on arrival, sci and tcp when taken
    EXPECT_EQ(group->members(), (std::vector<NodeId>{1, 2, 3}));
    EXPECT_EQ(dynamic->members(), (std::vector<NodeId>{1}));
    EXPECT_TRUE(dynamic->remove(1));

    // Dropped in the order least kind to a technology: nodes before the groups that hold them.
    to_b.reset();
    to_c.reset();
    from_a.reset();
    dynamic.reset();
    group.reset();
    keep.reset();
    shared.reset();
}

// "One wording per error" (issue 9; msgpass/kit/errors.hpp): the same misuse or the
// same bound reads the same on every technology, word for word, naming the call and
// the node or group: a null buffer, a message or a buffer above max_message_size, a
// full send queue (towards node 3, which never starts).
TEST_P(Conformance, TheSameErrorReadsTheSameOnEveryTechnology) {
    auto c = make(3, [](config::Configuration& c) {
        c.peer_timeout = 300ms; // the factory's end waits that long for the messages to node 3
        c.max_message_size = 1 * config::MiB;
        c.send_queue_limit = 8;
        c.groups["all"] = {1, 2, 3};
    });
    auto a = NodeFactory::create(c, 1);
    auto to_c = a->create_node(3);
    auto group = a->create_group("all");
    auto dynamic = a->create_group();
    dynamic->add(to_c);
    const auto error_of = [](const std::function<void()>& call) -> std::string {
        try {
            call();
        } catch (const Error& e) {
            return e.what();
        }
        return "(no error)";
    };

    EXPECT_THROW(to_c->send(nullptr), UsageError);
    EXPECT_EQ(error_of([&] { to_c->send(nullptr); }), "send on node 3 (node-3): the buffer is null");
    EXPECT_EQ(error_of([&] { to_c->send_shared(SharedBuffer{}); }), "send on node 3 (node-3): the buffer is null");
    EXPECT_EQ(error_of([&] { group->send(nullptr); }), "send on group 'all': the buffer is null");
    EXPECT_EQ(error_of([&] { dynamic->send(nullptr); }), "send on a dynamic group: the buffer is null");

    const std::uint64_t max = 1 * config::MiB;
    EXPECT_THROW((void)a->create_buffer(max + 1), MessageTooLarge);
    EXPECT_EQ(error_of([&] { (void)a->create_buffer(max + 1); }),
              "create_buffer: a buffer of 1048577 bytes exceeds max_message_size (1048576 bytes)");
    EXPECT_THROW(to_c->send(std::make_unique<HeapBuffer>(max + 1)), MessageTooLarge);
    EXPECT_EQ(error_of([&] { to_c->send(std::make_unique<HeapBuffer>(max + 1)); }),
              "send on node 3 (node-3): a message of 1048577 bytes exceeds max_message_size (1048576 bytes)");

    std::string full;
    for (int i = 0; i <= 8 && full.empty(); ++i) {
        try {
            to_c->send(make_message(*a, 64, 0, static_cast<std::uint64_t>(i)));
        } catch (const SendQueueFull& e) {
            full = e.what();
            EXPECT_EQ(i, 8) << "the queue was full before send_queue_limit messages";
        }
    }
    EXPECT_EQ(full, "send on node 3 (node-3): its send queue holds send_queue_limit (8) messages");
    stderr_of([&] { a.reset(); }); // the report of the messages to node 3 is not this test's
}

// The technologies that cross hosts authenticate their peers with the partition's
// key (docs/security.md). On auto, each node is a machine of its own, so every pair
// talks tcp.
// ------------------------------------------- the Buffer-free path (send_bytes, receive_view)

// Every size from 0 to the maximum, sent as bytes and lent back as a view: the bytes
// arrive intact, and the caller's memory is free again when send_bytes returns.
TEST_P(Conformance, BytesSentAndViewsLentArriveIntactAtEverySizeFromZeroToTheMaximum) {
    auto c = make(2, [](config::Configuration& c) { c.max_message_size = 9 * config::MiB; });
    const std::size_t slot = c.section<sci::Options>().recv_buffer_size;
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    EXPECT_FALSE(from_a->receive_view()) << "a view of nothing";
    std::uint64_t seq = 0;
    for (const std::size_t size : {std::size_t{0}, std::size_t{1}, slot - 1, slot, slot + 1, 37 * slot + 5,
                                   std::size_t{c.max_message_size}, std::size_t{20}}) {
        SCOPED_TRACE("size " + std::to_string(size));
        std::vector<std::byte> bytes(size);
        fill_payload(bytes, 1, seq++);
        const std::vector<std::byte> expected = bytes;
        to_b->send_bytes(bytes);
        std::fill(bytes.begin(), bytes.end(), std::byte{0x5a}); // the copy was made by the call
        auto v = from_a->receive_view(patience);
        if (!v) {
            ASSERT_TRUE(to_b->flush(patience));
            v = from_a->receive_view(patience);
        }
        ASSERT_TRUE(v) << "nothing arrived";
        EXPECT_EQ(v.source(), 1u);
        ASSERT_EQ(v.size(), size);
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), v.bytes().begin())) << "content differs";
        v.release();
        EXPECT_FALSE(v);
        EXPECT_EQ(v.size(), 0u);
    }
    std::vector<std::byte> too_large(c.max_message_size + 1);
    EXPECT_THROW(to_b->send_bytes(too_large), MessageTooLarge);
}

// One stream of messages made of both paths (send_bytes and send, receive_view and
// receive, alternating with different periods), small ones (which sci packs several
// to a slot) and larger ones: every message comes once, in order, intact; views held
// several at a time stay intact until released, while later messages arrive.
TEST_P(Conformance, BytesAndBuffersMixInOneStreamInOrderExactlyOnceAndHeldViewsStayIntact) {
    auto c = make(2);
    const std::size_t slot = c.section<sci::Options>().recv_buffer_size;
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 1500;
    const std::vector<std::size_t> larger{slot - 1, slot, slot + 1, 3 * slot + 5, 100 * 1024};
    auto size_of = [&](std::uint64_t i) { return i % 13 == 0 ? larger[(i / 13) % larger.size()] : 16 + i % 67; };
    std::thread sender([&] {
        std::vector<std::byte> bytes;
        for (std::uint64_t i = 0; i < n; ++i) {
            send_numbered(*to_b, *a, i, size_of(i), 3, bytes);
        }
        to_b->send(make_end_marker(*a, n));
        to_b->flush(patience);
    });
    std::deque<std::pair<MessageView, std::uint64_t>> held; // views kept a while, with their seq
    auto release_oldest = [&] {
        auto& [v, seq] = held.front();
        const auto h = check_view(v); // still intact after later messages came
        EXPECT_EQ(h.seq, seq);
        v.release();
        held.pop_front();
    };
    for (std::uint64_t i = 0; i < n; ++i) {
        SCOPED_TRACE("message " + std::to_string(i));
        if (i % 2 == 0) {
            auto v = from_a->receive_view(patience);
            ASSERT_TRUE(v) << "never arrived";
            ASSERT_EQ(v.size(), size_of(i));
            PayloadHeader h{};
            ASSERT_NO_THROW(h = check_view(v));
            ASSERT_EQ(h.seq, i);
            held.emplace_back(std::move(v), i);
            if (held.size() > 1 + i % 7) release_oldest();
        } else {
            auto m = from_a->receive(patience);
            ASSERT_NE(m, nullptr) << "never arrived";
            ASSERT_EQ(m->size(), size_of(i));
            PayloadHeader h{};
            ASSERT_NO_THROW(h = check_payload(*m));
            ASSERT_EQ(h.seq, i);
        }
    }
    while (!held.empty())
        release_oldest();
    auto end = from_a->receive_view(patience);
    ASSERT_TRUE(end);
    EXPECT_EQ(check_view(end).stream, end_stream);
    end.release();
    sender.join();
    EXPECT_EQ(nothing_more(*from_a), "");
    EXPECT_EQ(from_a->stats().messages_received, n + 1);
}

// A view may be released from another thread, and after its node was dropped.
TEST_P(Conformance, ViewsMayBeReleasedFromAnotherThreadAndAfterTheirNodeIsDropped) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 40;
    std::vector<std::byte> bytes(48);
    for (std::uint64_t i = 0; i < n; ++i) {
        fill_payload(bytes, 0, i);
        to_b->send_bytes(bytes);
    }
    std::vector<MessageView> views;
    for (std::uint64_t i = 0; i < n; ++i) {
        MessageView v;
        // The queue moves when the sender calls in again; flush from here (same thread).
        for (auto deadline = std::chrono::steady_clock::now() + patience;
             !v && std::chrono::steady_clock::now() < deadline;) {
            to_b->flush(0ns);
            v = from_a->receive_view(1ms);
        }
        ASSERT_TRUE(v) << "message " << i << " never arrived";
        EXPECT_EQ(check_view(v).seq, i);
        views.push_back(std::move(v));
    }
    std::thread other([&] {
        for (std::size_t i = 0; i < views.size() / 2; ++i)
            views[i].release();
    });
    other.join();
    from_a.reset();
    for (std::size_t i = views.size() / 2; i < views.size(); ++i) {
        EXPECT_EQ(check_view(views[i]).seq, i) << "a view changed before it was released";
        views[i].release();
    }
    // The slots went back: the node made again receives on.
    from_a = b->create_node(1);
    fill_payload(bytes, 0, n);
    to_b->send_bytes(bytes);
    MessageView v;
    for (auto deadline = std::chrono::steady_clock::now() + patience;
         !v && std::chrono::steady_clock::now() < deadline;) {
        to_b->flush(0ns);
        v = from_a->receive_view(1ms);
    }
    ASSERT_TRUE(v);
    EXPECT_EQ(check_view(v).seq, n);
}

// A receiver that keeps up to 100 views at once, released oldest first, while a
// stream of small messages goes on (tcp lends them from its read chunks, and reads
// on in other chunks while some are held): every message comes once, in order, and a
// held view keeps its bytes until released.
TEST_P(Conformance, ManyViewsHeldAtOnceWhileTheStreamGoesOnKeepTheirBytesAndComeInOrder) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 6000;
    auto size_of = [](std::uint64_t i) { return sizeof(PayloadHeader) + (i * 53) % 300; };
    std::thread sender([&] {
        std::vector<std::byte> bytes;
        for (std::uint64_t i = 0; i < n; ++i) {
            bytes.resize(size_of(i));
            fill_payload(bytes, 0, i);
            for (;;) {
                try {
                    to_b->send_bytes(bytes);
                    break;
                } catch (const SendQueueFull&) {
                    to_b->flush(1ms);
                }
            }
        }
        to_b->send(make_end_marker(*a, n));
        to_b->flush(patience);
    });
    std::deque<std::pair<MessageView, std::uint64_t>> held;
    auto release_oldest = [&] {
        auto& [v, seq] = held.front();
        EXPECT_EQ(check_view(v).seq, seq) << "a held view changed";
        v.release();
        held.pop_front();
    };
    for (std::uint64_t i = 0; i < n; ++i) {
        auto v = from_a->receive_view(patience);
        ASSERT_TRUE(v) << "message " << i << " never arrived";
        ASSERT_EQ(v.size(), size_of(i)) << "message " << i;
        PayloadHeader h{};
        ASSERT_NO_THROW(h = check_view(v)) << "message " << i;
        ASSERT_EQ(h.seq, i);
        held.emplace_back(std::move(v), i);
        if (held.size() > 100) release_oldest();
    }
    while (!held.empty())
        release_oldest();
    auto end = from_a->receive_view(patience);
    ASSERT_TRUE(end);
    EXPECT_EQ(check_view(end).stream, end_stream);
    end.release();
    sender.join();
    EXPECT_EQ(nothing_more(*from_a), "");
    EXPECT_EQ(from_a->stats().messages_received, n + 1);
}

// Small messages of mixed sizes with sci.records on and off (on sci, records of an
// open slot: each with its check, the slot's close sending the receiver on to the
// next note), through both APIs while a sender thread streams and the receiver holds
// some views: every message once, in order, intact. The other technologies ignore the
// option and run the same stream twice.
TEST_P(Conformance, ASmallMessageStreamArrivesOnceInOrderIntactWithSciRecordsOnAndOff) {
    for (const bool records : {true, false}) {
        SCOPED_TRACE(records ? "sci.records on" : "sci.records off");
        auto c = make(2, [&](config::Configuration& c) { c.edit_section<sci::Options>().records = records; });
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto to_b = a->create_node(2);
        auto from_a = b->create_node(1);
        constexpr std::uint64_t n = 4000;
        auto size_of = [](std::uint64_t i) { return sizeof(PayloadHeader) + (i * 37) % 200; };
        // A jthread: a failed assertion below returns with the sender still running, and
        // its destruction then waits for it instead of ending the process.
        std::jthread sender([&] {
            std::vector<std::byte> bytes;
            for (std::uint64_t i = 0; i < n; ++i) {
                send_numbered(*to_b, *a, i, size_of(i), 5, bytes);
                if (i % 500 == 0) to_b->flush(patience); // a pause: the open slot closes, a new one opens
            }
            to_b->send(make_end_marker(*a, n));
            to_b->flush(patience);
        });
        std::deque<std::pair<MessageView, std::uint64_t>> held;
        for (std::uint64_t i = 0; i < n; ++i) {
            SCOPED_TRACE("message " + std::to_string(i));
            if (i % 3 == 0) {
                auto m = from_a->receive(patience);
                ASSERT_NE(m, nullptr) << "never arrived";
                ASSERT_EQ(m->size(), size_of(i));
                PayloadHeader h{};
                ASSERT_NO_THROW(h = check_payload(*m));
                ASSERT_EQ(h.seq, i);
            } else {
                auto v = from_a->receive_view(patience);
                ASSERT_TRUE(v) << "never arrived";
                ASSERT_EQ(v.size(), size_of(i));
                PayloadHeader h{};
                ASSERT_NO_THROW(h = check_view(v));
                ASSERT_EQ(h.seq, i);
                held.emplace_back(std::move(v), i);
                if (held.size() > 1 + i % 5) {
                    EXPECT_EQ(check_view(held.front().first).seq, held.front().second) << "a held view changed";
                    held.front().first.release();
                    held.pop_front();
                }
            }
        }
        for (auto& [v, seq] : held) {
            EXPECT_EQ(check_view(v).seq, seq) << "a held view changed";
            v.release();
        }
        held.clear();
        auto end = from_a->receive(patience);
        ASSERT_NE(end, nullptr) << "the end marker never arrived";
        EXPECT_EQ(check_payload(*end).stream, end_stream);
        sender.join();
        EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "");
        EXPECT_EQ(from_a->stats().messages_received, n + 1);
        // Then one message at a time, each taken before the next is sent, and a receive
        // that does not wait after each: it finds nothing (on sci the word after the
        // last record of the open slot, not written yet, or left there by an earlier
        // use of the slot, is no record: its check tells).
        std::vector<std::byte> bytes;
        for (std::uint64_t i = n + 1; i < n + 1 + 600; ++i) {
            SCOPED_TRACE("message " + std::to_string(i) + " sent alone");
            bytes.resize(size_of(i));
            fill_payload(bytes, 0, i);
            to_b->send_bytes(bytes);
            auto v = from_a->receive_view(patience);
            if (!v) {
                ASSERT_TRUE(to_b->flush(patience));
                v = from_a->receive_view(patience);
            }
            ASSERT_TRUE(v) << "never arrived";
            ASSERT_EQ(v.size(), size_of(i));
            ASSERT_EQ(check_view(v).seq, i);
            v.release();
            auto more = from_a->receive_view();
            ASSERT_FALSE(more) << "a message of " << more.size() << " bytes that was never sent";
        }
    }
}

// The process's resident memory, from /proc/self/statm. Under AddressSanitizer its
// quarantine of freed memory (up to 256 MiB) is drained and the free memory given
// back to the system first: otherwise heap the layer freed (a queued send's buffer)
// counts as resident, and a round that happened to queue more than the two before it
// (under load, beside other tests) grew by 214 MiB once on sci with nothing kept.
std::size_t resident_bytes() {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_purge_allocator();
#endif
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// A view released gives its memory back to the layer (tcp: the read chunk it was lent
// from is read into again once its views are all released; sci: its slot goes back):
// after two warm-up rounds of 256 MiB taken as views and released at once, a third
// round grows the process's resident memory by far less than it carried (a layer that
// kept what it lent would grow by all of it). Two rounds first: by then ASan's
// quarantine of freed memory (256 MiB) is full, and the pools have their size. Only
// the message's number is checked, not its bytes: the others tests do that.
TEST_P(Conformance, ViewsReleasedAsTheyComeGiveTheirMemoryBack) {
    NodePair pair(make(2));
    auto& [a, b, to_b, from_a] = pair;
    constexpr std::size_t size = 8 * 1024;
    constexpr std::uint64_t per_round = (std::uint64_t{256} << 20) / size;
    constexpr std::uint64_t n = 3 * per_round;
    std::string failure;
    std::thread sender([&] {
        std::vector<std::byte> bytes(size, std::byte{0x5a});
        try {
            for (std::uint64_t i = 0; i < n; ++i) {
                std::memcpy(bytes.data(), &i, sizeof i);
                send_bytes_retrying(*to_b, bytes, "message " + std::to_string(i));
            }
            if (!to_b->flush(patience)) failure = "the stream could not be flushed";
        } catch (const std::exception& e) {
            failure = e.what();
        }
    });
    std::size_t before = 0;
    std::string error;
    for (std::uint64_t i = 0; i < n && error.empty(); ++i) {
        if (i == 2 * per_round) before = resident_bytes();
        auto v = from_a->receive_view(patience);
        std::uint64_t seq = 0;
        if (!v) {
            error = "message " + std::to_string(i) + " never arrived";
        } else if (v.size() != size) {
            error = "message " + std::to_string(i) + " of " + std::to_string(v.size()) + " bytes";
        } else if (std::memcpy(&seq, v.data(), sizeof seq); seq != i) {
            error = "message " + std::to_string(seq) + " where " + std::to_string(i) + " was due";
        }
    }
    const std::size_t after = resident_bytes();
    sender.join();
    ASSERT_EQ(failure, "");
    ASSERT_EQ(error, "");
    const std::size_t grown = after > before ? after - before : 0;
    std::printf("[ memory    ] resident %zu MiB before the last round, %zu MiB after\n", before >> 20, after >> 20);
#if defined(__SANITIZE_THREAD__)
    // Under ThreadSanitizer the resident memory says little of the layer's: its allocator
    // and shadow grew udp's last round by 222 MiB once under ctest -j2 (nothing when
    // alone). The stream above is still checked; ASan and plain builds bound the growth.
    (void)grown;
#else
    EXPECT_LT(grown, std::size_t{128} << 20) << "the last 256 MiB of views, each released at once, left the process "
                                             << (grown >> 20) << " MiB larger: what was lent is not given back";
#endif
}

class AuthConformance : public Conformance {
protected:
    config::Configuration make_hosts(int n) {
        auto c = make(n, [](config::Configuration& c) { c.auth_key = test_auth_key(1); });
        if (GetParam() == "auto") {
            for (auto& node : c.nodes)
                node.machine = "m" + std::to_string(node.id);
        }
        return c;
    }
};

// docs/security.md: "a peer without the key, or with another key, is refused"; the
// nodes that hold the key keep their traffic, and the intruder's messages are never
// handed to a holder (its node counts nothing sent).
TEST_P(AuthConformance, APeerWithoutTheKeyOrWithAnotherIsRefusedAndTheKeyHoldersTalkOn) {
    for (const auto& [what, intruder_key] : std::vector<std::pair<std::string, std::optional<config::AuthKey>>>{
             {"no key", std::nullopt}, {"another key", test_auth_key(2)}}) {
        SCOPED_TRACE(what);
        auto c = make_hosts(3);
        auto bad = c;
        bad.auth_key = intruder_key;
        auto a = NodeFactory::create(c, 1);
        auto b = NodeFactory::create(c, 2);
        auto x = NodeFactory::create(bad, 3);
        auto a_to_b = a->create_node(2);
        auto b_from_a = b->create_node(1);
        auto a_from_x = a->create_node(3);
        auto x_to_a = x->create_node(1);
        for (std::uint64_t i = 0; i < 20; ++i) {
            try {
                x_to_a->send(make_message(*x, 64, 9, i));
            } catch (const Error&) {
                // refused, or a full queue towards a peer that never lets it in: both fine
            }
            a_to_b->send(make_message(*a, 64, 1, i));
            auto m = must_receive(*b_from_a);
            ASSERT_NE(m, nullptr) << "the key holders' traffic stalled at message " << i;
            EXPECT_EQ(check_payload(*m).seq, i);
            (void)x_to_a->flush(1ms);
            ASSERT_EQ(a_from_x->receive(), nullptr) << "node 1 took a message from a node without its key";
        }
        EXPECT_EQ(a_from_x->receive(500ms), nullptr) << "node 1 took a message from a node without its key";
        EXPECT_EQ(x_to_a->stats().messages_sent, 0u) << "node 3 handed a message to a node that cannot trust it";
        EXPECT_EQ(a_from_x->stats().messages_received, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(SocketTechnologies, AuthConformance, ::testing::Values("tcp", "udp", "auto"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Technologies, Conformance, ::testing::Values("sci", "tcp", "udp", "auto"),
                         [](const auto& info) { return info.param; });

} // namespace
} // namespace msgpass::test
