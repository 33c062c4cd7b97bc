// Unit tests of ip/tcp/src/reconnect.hpp, on a clock of its own (every call is given
// `now`): the backoff after a break, the deadline of an attempt, and when a peer is
// given up (docs/tcp.md, Acknowledgements and resending, Peer loss and restart).
#include "reconnect.hpp"

#include <gtest/gtest.h>

namespace msgpass::tcp {
namespace {

using namespace std::chrono_literals;
using Clock = Reconnect::Clock;
using Outcome = Reconnect::Outcome;

const Clock::time_point t0 = Clock::time_point{} + 1h;

// "the sender reconnects with backoff (1 ms doubling to min(100 ms, peer_timeout / 4))"
TEST(Reconnect, AfterABreakRetriesWithABackoffDoublingFromTheShortestToTheLongest) {
    Reconnect r(1ms, 8ms, 1h);
    r.broke(t0);
    EXPECT_FALSE(r.due(t0));
    EXPECT_EQ(r.next_attempt(), t0 + 1ms);
    auto now = t0 + 1ms;
    EXPECT_TRUE(r.due(now));
    for (const auto expected : {2ms, 4ms, 8ms, 8ms, 8ms}) {
        ASSERT_EQ(r.failed(false, true, now), Outcome::retry);
        EXPECT_EQ(r.next_attempt() - now, expected);
        now = r.next_attempt();
    }
}

TEST(Reconnect, AnIdlePeerIsTriedAtOnceAndAnAttemptHasMinOfPeerTimeoutAndTwoSeconds) {
    Reconnect slow(1ms, 100ms, 10s), quick(1ms, 100ms, 500ms);
    slow.attempt_now(t0);
    EXPECT_TRUE(slow.due(t0));
    slow.started(t0);
    EXPECT_EQ(slow.attempt_deadline(), t0 + 2s);
    quick.started(t0);
    EXPECT_EQ(quick.attempt_deadline(), t0 + 500ms);
}

// "after the peer was known ... nobody listens on its port any more: the peer is
// declared lost at once"
TEST(Reconnect, ARefusalFromAPeerKnownToHaveLivedIsALossAtOnce) {
    Reconnect r(1ms, 100ms, 1h);
    r.broke(t0);
    EXPECT_EQ(r.failed(true, true, t0 + 1ms), Outcome::lost_refused);
    Reconnect never_met(1ms, 100ms, 1h);
    never_met.attempt_now(t0);
    EXPECT_EQ(never_met.failed(true, false, t0), Outcome::retry) << "a peer not started yet is waited for";
}

// "reconnection is retried until peer_timeout after the break, then the peer is lost"
TEST(Reconnect, NoConnectionForPeerTimeoutAfterTheBreakIsALoss) {
    Reconnect r(1ms, 100ms, 1s);
    r.broke(t0);
    EXPECT_EQ(r.failed(false, true, t0 + 1s - 1ns), Outcome::retry);
    EXPECT_EQ(r.failed(false, true, t0 + 1s), Outcome::lost_silent);
    EXPECT_EQ(r.broken_since(), t0) << "the break is timed from its start, not from the last attempt";
}

TEST(Reconnect, WithoutABreakFailuresAreRetriedWithoutEnd) {
    Reconnect r(1ms, 100ms, 1s);
    r.attempt_now(t0);
    EXPECT_EQ(r.failed(false, true, t0 + 1h), Outcome::retry);
    EXPECT_FALSE(r.broken_since().has_value());
}

TEST(Reconnect, AProbeIsTimedAsABreakButTriedAtOnce) {
    Reconnect r(1ms, 100ms, 1s);
    r.probe(t0);
    EXPECT_TRUE(r.due(t0));
    r.probe(t0 + 500ms);
    EXPECT_EQ(r.broken_since(), t0);
    EXPECT_EQ(r.failed(false, false, t0 + 1s), Outcome::lost_silent);
}

TEST(Reconnect, AConnectionResetsTheBackoffAndTheBreakAndALossForgetsTheBreak) {
    Reconnect r(1ms, 64ms, 1s);
    r.broke(t0);
    for (int i = 0; i < 4; ++i)
        (void)r.failed(false, true, t0);
    EXPECT_EQ(r.backoff(), 32ms) << "1 ms doubled by the break and four failures";
    r.connected();
    EXPECT_EQ(r.backoff(), 1ms);
    EXPECT_FALSE(r.broken_since().has_value());
    r.broke(t0 + 5s);
    EXPECT_EQ(r.broken_since(), t0 + 5s);
    r.forget();
    EXPECT_FALSE(r.broken_since().has_value());
}

TEST(Reconnect, APeerThatRefusedOurHandshakeIsAskedAgainOnlyAfterTheLongestBackoff) {
    Reconnect r(1ms, 100ms, 1h);
    r.refused_by_peer();
    EXPECT_EQ(r.failed(false, true, t0), Outcome::retry);
    EXPECT_EQ(r.next_attempt(), t0 + 100ms);
}

} // namespace
} // namespace msgpass::tcp
