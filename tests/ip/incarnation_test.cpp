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

} // namespace
} // namespace msgpass::ip
