// Unit tests of msgpass/kit/loss.hpp, the loss latch every technology's node uses:
// a loss is taken once with its reason and count, the incarnation raised is
// remembered so that a second finder does not raise it again, a later raise
// replaces one not taken, the PeerLost it makes, and a loss raised in one thread is
// taken by exactly one of the others.
#include <msgpass/kit/loss.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

namespace msgpass::kit {
namespace {

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

TEST(LossLatch, ALaterRaiseReplacesALossNotTakenYet) {
    LossLatch latch;
    latch.raise(0x10, "first", 1);
    latch.raise(0x11, "second", 2);
    const auto loss = latch.take();
    ASSERT_TRUE(loss.has_value());
    EXPECT_EQ(loss->reason, "second");
    EXPECT_EQ(loss->unacknowledged, 2u);
    EXPECT_FALSE(latch.take().has_value()) << "the replaced loss was reported as well";
    EXPECT_TRUE(latch.raised_for(0x11));
    EXPECT_FALSE(latch.raised_for(0x10));
}

TEST(LossLatch, TheLossBecomesAPeerLostNamingThePeer) {
    LossLatch latch;
    latch.raise(5, "peer 4 (node-4) lost: it restarted (2 messages unacknowledged)", 2);
    const auto loss = latch.take();
    ASSERT_TRUE(loss.has_value());
    try {
        throw loss->error(4);
    } catch (const PeerLost& e) {
        EXPECT_EQ(e.peer(), 4u);
        EXPECT_EQ(e.unacknowledged(), 2u);
        EXPECT_EQ(std::string(e.what()), "peer 4 (node-4) lost: it restarted (2 messages unacknowledged)");
    }
}

} // namespace
} // namespace msgpass::kit
