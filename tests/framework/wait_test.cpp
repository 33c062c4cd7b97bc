// Unit tests of msgpass/wait.hpp (wait_for and the Doorbell) and of the
// StatsCounters of msgpass/stats.hpp, the two lock-free pieces that senders and
// receivers share across threads.
#include <msgpass/wait.hpp>

#include <msgpass/stats.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace msgpass {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(WaitFor, ReturnsAtOnceWhenThePollSucceeds) {
    int polls = 0;
    auto r = wait_for(
        [&]() -> std::optional<int> {
            ++polls;
            return 5;
        },
        10s, nullptr);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, 5);
    EXPECT_EQ(polls, 1);
}

TEST(WaitFor, ReturnsThePollsValueAfterSomeFailedPolls) {
    int polls = 0;
    auto r = wait_for(
        [&]() -> std::optional<int> {
            if (++polls < 100) return std::nullopt;
            return polls;
        },
        10s, nullptr);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, 100);
}

TEST(WaitFor, AcceptsPointerLikePollResults) {
    auto r = wait_for([] { return std::make_unique<int>(3); }, 10s, nullptr);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(*r, 3);
    auto none = wait_for([] { return std::unique_ptr<int>(); }, 0s, nullptr);
    EXPECT_EQ(none, nullptr);
}

TEST(WaitFor, ReturnsEmptyAfterTheTimeoutWhenThePollNeverSucceeds) {
    const auto timeout = 30ms;
    const auto start = Clock::now();
    auto r = wait_for([] { return std::optional<int>(); }, timeout, nullptr);
    const auto elapsed = Clock::now() - start;
    EXPECT_FALSE(r.has_value());
    EXPECT_GE(elapsed, timeout);
}

TEST(WaitFor, ReturnsEmptyAfterTheTimeoutWhenSleepingOnADoorbell) {
    Doorbell bell;
    const auto timeout = 30ms;
    const auto start = Clock::now();
    auto r = wait_for([] { return std::optional<int>(); }, timeout, &bell);
    const auto elapsed = Clock::now() - start;
    EXPECT_FALSE(r.has_value());
    EXPECT_GE(elapsed, timeout);
    EXPECT_EQ(bell.sleepers.load(), 0u); // the sleeper withdrew its announcement
}

TEST(WaitFor, ZeroTimeoutPollsExactlyOnce) {
    int polls = 0;
    auto r = wait_for(
        [&] {
            ++polls;
            return std::optional<int>();
        },
        0s, nullptr);
    EXPECT_FALSE(r.has_value());
    EXPECT_EQ(polls, 1);
}

TEST(WaitFor, NegativeTimeoutPollsExactlyOnce) {
    int polls = 0;
    Doorbell bell;
    auto r = wait_for(
        [&] {
            ++polls;
            return std::optional<int>();
        },
        -1s, &bell);
    EXPECT_FALSE(r.has_value());
    EXPECT_EQ(polls, 1);
}

// ------------------------------------------------------------ wait_with

// A sleeper that sleeps nothing and records what the wait asked of it.
struct RecordingSleeper {
    std::vector<std::chrono::nanoseconds> steps;
    int yields = 0;
    int announced = 0; // announcements held now
    int announcements = 0;
    bool held_while_sleeping = true;
    std::optional<int> give_on_sleep; // a value "found after waking" on the first sleep

    struct Guard {
        RecordingSleeper* s;
        explicit Guard(RecordingSleeper* owner) : s(owner) { ++s->announced, ++s->announcements; }
        ~Guard() { --s->announced; }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
    };
    Guard announce() { return Guard(this); }
    void yielded(std::chrono::nanoseconds /*took*/) { ++yields; }
    template <class Poll>
    auto sleep(Poll& /*poll*/, std::chrono::nanoseconds step, const WaitPhase& at)
        -> decltype(std::declval<Poll&>()()) {
        steps.push_back(step);
        if (announced != 1) held_while_sleeping = false;
        EXPECT_LE(at.start, at.now);
        EXPECT_LE(at.now, at.deadline);
        if (give_on_sleep) return std::exchange(give_on_sleep, std::nullopt);
        return {};
    }
};

// Without spin or yield the wait polls, then sleeps through the sleeper in steps of
// at most max_sleep, the announcement held from the first sleep until it returns.
TEST(WaitWith, SleepsThroughTheSleeperInStepsOfAtMostMaxSleepHoldingTheAnnouncement) {
    RecordingSleeper sleeper;
    int polls = 0;
    const WaitPolicy policy{0us, 0us, 1000us};
    const auto r = wait_with(
        [&]() -> std::optional<int> {
            if (++polls == 6) return 42;
            return std::nullopt;
        },
        std::chrono::nanoseconds::max(), sleeper, policy);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, 42);
    EXPECT_EQ(sleeper.steps.size(), 4u); // polls 2..5 each followed by a sleep (poll 1 is before any clock)
    for (const auto step : sleeper.steps)
        EXPECT_EQ(step, 1000us) << "a step of the largest timeout is max_sleep";
    EXPECT_EQ(sleeper.announcements, 1);
    EXPECT_EQ(sleeper.announced, 0) << "the announcement outlived the wait";
    EXPECT_TRUE(sleeper.held_while_sleeping);
    EXPECT_EQ(sleeper.yields, 0);
}

// What the sleeper found after waking is the wait's result.
TEST(WaitWith, ReturnsWhatTheSleeperFoundAfterWaking) {
    RecordingSleeper sleeper;
    sleeper.give_on_sleep = 7;
    const auto r = wait_with([] { return std::optional<int>(); }, 10s, sleeper, WaitPolicy{0us, 0us, 1000us});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(*r, 7);
    EXPECT_EQ(sleeper.steps.size(), 1u);
}

// The yield phase tells the sleeper how long each yield took, and a wait that ends
// in it never announces a sleep.
TEST(WaitWith, TellsTheSleeperOfEachYieldAndAnnouncesNothingWhenItNeverSleeps) {
    RecordingSleeper sleeper;
    int polls = 0;
    const auto r = wait_with(
        [&]() -> std::optional<int> {
            if (++polls == 4) return 1;
            return std::nullopt;
        },
        10s, sleeper, WaitPolicy{0us, 10s, 100ms});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(sleeper.yields, 2); // polls 2 and 3 failed and yielded
    EXPECT_EQ(sleeper.announcements, 0);
    EXPECT_TRUE(sleeper.steps.empty());
}

// The last step ends at the deadline, not max_sleep later.
TEST(WaitWith, TheLastStepEndsAtTheDeadline) {
    RecordingSleeper sleeper;
    const auto r = wait_with([] { return std::optional<int>(); }, 3ms, sleeper, WaitPolicy{0us, 0us, 10s});
    EXPECT_FALSE(r.has_value());
    ASSERT_FALSE(sleeper.steps.empty());
    for (const auto step : sleeper.steps)
        EXPECT_LE(step, 3ms);
}

// The waiter goes straight to sleep (no spins, no yields, no periodic re-poll) and
// its poll refuses to answer once the timeout has passed, so only the doorbell's
// ring can make it return the value.
TEST(Doorbell, RingFromAnotherThreadWakesASleeper) {
    Doorbell bell;
    std::atomic<bool> published{false};
    std::atomic<bool> waiter_done{false};
    const auto timeout = 10s;
    const WaitPolicy policy{.spin = std::chrono::microseconds(0),
                            .yield = std::chrono::microseconds(0),
                            .max_sleep = std::chrono::microseconds(std::chrono::hours(1))};
    std::thread sender([&] {
        while (bell.sleepers.load() == 0 && !waiter_done.load())
            std::this_thread::yield();
        published.store(true, std::memory_order_release);
        bell.ring();
    });
    const auto deadline = Clock::now() + timeout;
    auto r = wait_for(
        [&]() -> std::optional<int> {
            if (published.load(std::memory_order_acquire) && Clock::now() < deadline) return 42;
            return std::nullopt;
        },
        timeout, &bell, policy);
    waiter_done = true;
    sender.join();
    ASSERT_TRUE(r.has_value()) << "the ring did not wake the sleeper before the timeout";
    EXPECT_EQ(*r, 42);
}

TEST(Doorbell, SleepUnlessDoesNotSleepWhenThePollIsReady) {
    Doorbell bell;
    int polls = 0;
    EXPECT_TRUE(bell.sleep_unless(
        [&] {
            ++polls;
            return true;
        },
        std::chrono::hours(1)));
    EXPECT_EQ(polls, 1);
    EXPECT_EQ(bell.sleepers.load(), 0u);
}

TEST(Doorbell, RingWithoutASleeperLeavesTheSequenceUnchanged) {
    Doorbell bell;
    bell.ring();
    EXPECT_EQ(bell.sequence.load(), 0u);
    bell.sleepers = 1;
    bell.ring();
    EXPECT_EQ(bell.sequence.load(), 1u);
}

TEST(StatsCounters, SnapshotSumsCountsFromSeveralThreads) {
    constexpr int threads = 4;
    constexpr int rounds = 10000;
    StatsCounters counters;
    std::latch start(threads);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&] {
            start.arrive_and_wait();
            for (int i = 0; i < rounds; ++i) {
                counters.sent(3);
                counters.received(5);
                counters.queued();
                counters.retried(2);
                counters.error();
            }
        });
    }
    for (auto& w : workers)
        w.join();
    const auto s = counters.snapshot(7);
    constexpr std::uint64_t n = threads * rounds;
    EXPECT_EQ(s.messages_sent, n);
    EXPECT_EQ(s.bytes_sent, 3 * n);
    EXPECT_EQ(s.messages_received, n);
    EXPECT_EQ(s.bytes_received, 5 * n);
    EXPECT_EQ(s.sends_queued, n);
    EXPECT_EQ(s.retries, 2 * n);
    EXPECT_EQ(s.errors, n);
    EXPECT_EQ(s.queue_depth, 7u);
}

TEST(StatsCounters, StartAtZero) {
    const auto s = StatsCounters().snapshot();
    EXPECT_EQ(s.messages_sent, 0u);
    EXPECT_EQ(s.bytes_sent, 0u);
    EXPECT_EQ(s.messages_received, 0u);
    EXPECT_EQ(s.bytes_received, 0u);
    EXPECT_EQ(s.sends_queued, 0u);
    EXPECT_EQ(s.queue_depth, 0u);
    EXPECT_EQ(s.retries, 0u);
    EXPECT_EQ(s.errors, 0u);
}

} // namespace
} // namespace msgpass
