// Unit tests of msgpass/ip/incarnation.hpp: a restart seen as a new incarnation and
// the place of the loss in the inbox, between the old process's last message and the new one's first (docs/tcp.md,
// Peer loss and restart).
#include <msgpass/ip/incarnation.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

namespace msgpass::ip {
namespace {

BufferPtr numbered(int n) {
    auto b = std::make_unique<HeapBuffer>(sizeof(int));
    b->as<int>() = n;
    return b;
}

TEST(Incarnation, IsNeverZeroAndDiffersFromDrawToDraw) {
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 100; ++i) {
        const std::uint64_t v = new_incarnation();
        EXPECT_NE(v, 0u);
        seen.insert(v);
    }
    EXPECT_EQ(seen.size(), 100u) << "two process starts would look like one";
}

// "A restarted peer shows a new incarnation in its Hello or Welcome: the old one is lost."
TEST(Incarnation, ARestartIsANewIncarnationOfAKnownPeer) {
    EXPECT_FALSE(restarted(0, 5)) << "the first incarnation seen is no restart";
    EXPECT_FALSE(restarted(5, 5)) << "the same incarnation reconnected";
    EXPECT_TRUE(restarted(5, 6));
}

// "a receive first hands out every message that had arrived from the old process;
// for a restarted peer the loss comes between the old process's last message and the
// new one's first, from a marker in the inbox"
TEST(Inbox, TheLossOfARestartedPeerComesBetweenItsOldAndNewMessages) {
    Inbox inbox;
    inbox.push(numbered(1));
    inbox.push(numbered(2));
    inbox.mark_loss();
    inbox.push(numbered(1));
    std::vector<int> order; // message numbers, -1 for the loss
    while (!inbox.empty()) {
        auto next = inbox.pop();
        if (next.loss) {
            EXPECT_EQ(next.message, nullptr);
            order.push_back(-1);
        } else {
            ASSERT_NE(next.message, nullptr);
            order.push_back(next.message->as<int>());
        }
    }
    EXPECT_EQ(order, (std::vector<int>{1, 2, -1, 1}));
    const auto none = inbox.pop();
    EXPECT_EQ(none.message, nullptr);
    EXPECT_FALSE(none.loss);
}

TEST(Inbox, AGapComesAfterTheMessagesBeforeItWithItsOwnLoss) {
    Inbox inbox;
    inbox.push(numbered(1));
    inbox.mark_gap(Loss{"peer 2 dropped 3 messages", 0});
    inbox.mark_loss();
    inbox.push(numbered(5));
    auto first = inbox.pop();
    ASSERT_NE(first.message, nullptr);
    EXPECT_FALSE(first.gap.has_value());
    auto gap = inbox.pop();
    EXPECT_TRUE(gap.loss);
    ASSERT_TRUE(gap.gap.has_value());
    EXPECT_EQ(gap.gap->reason, "peer 2 dropped 3 messages");
    auto restart = inbox.pop();
    EXPECT_TRUE(restart.loss);
    EXPECT_FALSE(restart.gap.has_value()) << "a restart's marker is not a gap";
    auto last = inbox.pop();
    ASSERT_NE(last.message, nullptr);
    EXPECT_EQ(last.message->as<int>(), 5);
}

TEST(LossLatch, AnIncarnationGivenUpForSilenceThatLivesCanBeLostAgain) {
    LossLatch latch;
    latch.raise(0x77, "silent", 1, true);
    (void)latch.take();
    latch.revive(0x78);
    EXPECT_TRUE(latch.raised_for(0x77)) << "revived another incarnation";
    latch.revive(0x77);
    EXPECT_FALSE(latch.raised_for(0x77)) << "it lives: its next loss must be reported";
    latch.raise(0x77, "it restarted", 0);
    latch.revive(0x77);
    EXPECT_TRUE(latch.raised_for(0x77)) << "a dead incarnation was revived";
}

TEST(LossLatch, ALossIsTakenOnceWithItsReasonAndUnacknowledgedCount) {
    LossLatch latch;
    EXPECT_FALSE(latch.pending());
    EXPECT_FALSE(latch.take().has_value());
    latch.raise(0x77, "peer 2 lost: it restarted", 12);
    EXPECT_TRUE(latch.pending());
    const auto loss = latch.take();
    ASSERT_TRUE(loss.has_value());
    EXPECT_EQ(loss->reason, "peer 2 lost: it restarted");
    EXPECT_EQ(loss->unacknowledged, 12u);
    EXPECT_FALSE(latch.pending());
    EXPECT_FALSE(latch.take().has_value()) << "a loss was reported twice";
}

// "A loss is raised once"
TEST(LossLatch, RemembersTheIncarnationRaisedSoThatASecondFinderDoesNotRaiseItAgain) {
    LossLatch latch;
    EXPECT_FALSE(latch.raised_for(0x77));
    latch.raise(0x77, "lost", 1);
    EXPECT_TRUE(latch.raised_for(0x77));
    (void)latch.take();
    EXPECT_TRUE(latch.raised_for(0x77)) << "taking the loss forgot which incarnation it was";
    EXPECT_FALSE(latch.raised_for(0x78)) << "the next incarnation can be lost too";
    latch.raise(0, "lost before its incarnation was known", 0);
    EXPECT_FALSE(latch.raised_for(0)) << "an unknown incarnation is never 'already raised'";
}

TEST(LossLatch, ALossRaisedInOneThreadIsTakenByExactlyOneOfTheOthers) {
    LossLatch latch;
    std::atomic<int> taken{0};
    std::atomic<bool> stop{false};
    std::latch ready(4);
    std::vector<std::thread> takers;
    for (int i = 0; i < 3; ++i) {
        takers.emplace_back([&] {
            ready.count_down();
            while (!stop.load()) {
                if (latch.pending()) {
                    if (auto loss = latch.take()) {
                        EXPECT_EQ(loss->unacknowledged, 3u);
                        taken.fetch_add(1);
                    }
                }
                std::this_thread::yield();
            }
        });
    }
    ready.arrive_and_wait();
    latch.raise(9, "lost", 3);
    // Waits until a taker took it (the latch is empty again), at most 30 s.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (latch.pending() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    const bool cleared = !latch.pending();
    stop.store(true);
    for (auto& t : takers)
        t.join();
    EXPECT_TRUE(cleared) << "no thread took the loss within 30 s";
    EXPECT_EQ(taken.load(), 1);
}

} // namespace
} // namespace msgpass::ip
