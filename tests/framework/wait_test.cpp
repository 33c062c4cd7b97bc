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
