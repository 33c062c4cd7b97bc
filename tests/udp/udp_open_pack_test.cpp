// The open pack of udp (docs/udp.md, "Packed datagrams"): while the sender holds its
// last packed datagram for more messages, a small send appends to it under the pack's
// own lock, not the node's, and the background thread (acknowledgements, timers)
// folds it back into the queue whenever it looks at the queue. These tests drive that
// path from several sending threads at once, beside the background thread's pumps,
// and check what the queue promises: every message once, in each sender's order,
// counted once, and the send queue's bound.
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <msgpass/msgpass.hpp>
#include <msgpass/udp/options.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr auto patience = 10s;

// A send that a full queue refuses waits for the queue to move and goes again, until
// the deadline (false: the queue never took it).
template <class Send>
bool send_paced(Node& node, const Send& send, Clock::time_point deadline) {
    for (;;) {
        try {
            send();
            return true;
        } catch (const SendQueueFull&) {
            if (Clock::now() > deadline) return false;
            (void)node.flush(1ms);
        }
    }
}

// Four threads send 64 B messages to one node at once, two by send() and two by
// send_bytes(), while the receiver takes them: each thread's messages arrive once, in
// its order, intact; afterwards the queue is empty and the statistics count every
// message once on both sides.
TEST(UdpOpenPack, SmallMessagesOfSeveralThreadsArriveOnceInEachThreadsOrderAndAreCountedOnce) {
    auto c = make_configuration("udp", unique_partition("openpack"), 2);
    NodePair pair(c);
    auto& [a, b, to_b, from_a] = pair;
    constexpr std::uint32_t threads = 4;
    constexpr std::uint64_t per_thread = 20000;
    std::vector<std::thread> senders;
    std::atomic<std::uint32_t> stuck{0}; // senders whose queue never took a message
    const auto give_up = Clock::now() + 6 * patience;
    for (std::uint32_t t = 0; t < threads; ++t) {
        senders.emplace_back([&, t] {
            std::vector<std::byte> bytes(64);
            for (std::uint64_t i = 0; i < per_thread; ++i) {
                bool taken = false;
                if (t % 2 == 0) {
                    taken = send_paced(
                        *to_b, [&] { to_b->send(make_message(*a, 64, t, i)); }, give_up);
                } else {
                    fill_payload(bytes, t, i);
                    taken = send_paced(
                        *to_b, [&] { to_b->send_bytes(bytes); }, give_up);
                }
                if (!taken) {
                    ++stuck;
                    return;
                }
            }
        });
    }
    std::vector<std::uint64_t> next(threads, 0);
    std::uint64_t received = 0;
    std::string wrong;
    for (const auto deadline = give_up; received < threads * per_thread && wrong.empty() && Clock::now() < deadline;) {
        auto m = from_a->receive(100ms);
        if (!m) continue;
        try {
            const auto h = check_payload(*m);
            if (h.stream >= threads) {
                wrong = "a message of stream " + std::to_string(h.stream);
            } else if (h.seq != next[h.stream]) {
                wrong = "stream " + std::to_string(h.stream) + ": message " + std::to_string(h.seq) + " came where " +
                        std::to_string(next[h.stream]) + " was due";
            } else {
                ++next[h.stream];
                ++received;
            }
        } catch (const std::string& e) {
            wrong = e;
        }
    }
    for (auto& s : senders)
        s.join();
    ASSERT_EQ(stuck.load(), 0u) << "a sender's queue stayed full (queue_depth " << to_b->stats().queue_depth << ")";
    ASSERT_EQ(wrong, "");
    ASSERT_EQ(received, threads * per_thread);
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "");
    EXPECT_TRUE(to_b->flush(patience));
    const auto sent = to_b->stats();
    EXPECT_EQ(sent.queue_depth, 0u);
    EXPECT_EQ(sent.messages_sent, threads * per_thread);
    EXPECT_EQ(sent.bytes_sent, threads * per_thread * 64);
    EXPECT_LE(sent.sends_queued, threads * per_thread);
    EXPECT_EQ(from_a->stats().messages_received, threads * per_thread);
}

// A receiver that stops taking: 64 B messages go into packs, the window fills and the
// queue reaches send_queue_limit; the send after that is refused, the queue never
// counted more than its bound, and every message accepted arrives in order once the
// receiver takes again.
TEST(UdpOpenPack, TheSendQueueBoundHoldsForSmallMessages) {
    constexpr std::uint32_t limit = 256;
    auto c = make_configuration("udp", unique_partition("openpackbound"), 2, [](config::Configuration& c) {
        c.send_queue_limit = limit;
        c.peer_timeout = std::max<std::chrono::milliseconds>(c.peer_timeout, 10s);
        c.edit_section<udp::Options>().window = 16;
    });
    NodePair pair(c);
    auto& [a, b, to_b, from_a] = pair;
    to_b->send(make_message(*a, 64, 0, 0));
    ASSERT_NE(from_a->receive(patience), nullptr);
    std::uint64_t accepted = 1;
    std::uint64_t deepest = 0;
    BufferPtr refused;
    for (const auto deadline = Clock::now() + patience; Clock::now() < deadline && !refused;) {
        auto m = make_message(*a, 64, 0, accepted);
        try {
            to_b->send(std::move(m));
            ++accepted;
            deepest = std::max(deepest, to_b->stats().queue_depth);
        } catch (const SendQueueFull&) {
            ASSERT_NE(m, nullptr) << "the refused buffer did not stay with the caller";
            refused = std::move(m);
        }
    }
    ASSERT_NE(refused, nullptr) << accepted << " messages accepted for a receiver that takes nothing, no refusal";
    EXPECT_LE(deepest, limit) << "the send queue counted more than send_queue_limit";
    EXPECT_LE(to_b->stats().queue_depth, limit);
    std::uint64_t next = 1;
    for (const auto deadline = Clock::now() + 2 * patience; next < accepted && Clock::now() < deadline;) {
        (void)to_b->flush(0ns);
        if (auto m = from_a->receive(1ms)) {
            ASSERT_EQ(check_payload(*m).seq, next) << "a message accepted before the refusal was lost or reordered";
            ++next;
        }
    }
    EXPECT_EQ(next, accepted);
    EXPECT_TRUE(to_b->flush(patience));
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
    EXPECT_EQ(to_b->stats().messages_sent, accepted);
}

} // namespace
} // namespace msgpass::test
