// How sci copies large messages into its peer's region (sci/src/copy_choice.hpp):
// through the cache or streamed, whichever moves the messages faster end to end.
// The chooser sees only when each copy starts; here a model of the path decides
// that: a copy starts when the previous one left, after the slower of the sender's
// copy and the receiver's read of that way (the region's room is what paces a
// stream).
#include "copy_choice.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

namespace msgpass::sci {
namespace {

using namespace std::chrono_literals;
using Clock = CopyChoice::Clock;

struct Way {
    double sender_ns_per_byte = 0;   // the sender's own copy
    double receiver_ns_per_byte = 0; // the receiver's read of what that copy left
};

struct Path {
    Way cached;
    Way streamed;
    [[nodiscard]] std::chrono::nanoseconds cycle(bool streaming, std::uint64_t size) const {
        const Way& w = streaming ? streamed : cached;
        const double per_byte = std::max(w.sender_ns_per_byte, w.receiver_ns_per_byte);
        return std::chrono::nanoseconds(static_cast<std::int64_t>(per_byte * static_cast<double>(size)));
    }
};

// Runs count copies of size bytes through choice; returns how many were streamed.
std::uint64_t run(CopyChoices& choice, const Path& path, std::uint64_t size, std::uint64_t count,
                  Clock::time_point& now) {
    std::uint64_t streamed = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
        const bool streaming = choice.next(now, size);
        streamed += streaming ? 1 : 0;
        now += path.cycle(streaming, size);
    }
    return streamed;
}

constexpr std::uint64_t MiB = 1 << 20;

// The case measured on the 2-CPU VM (docs/sci-protocol.md): the sender's copy
// through the cache is its cheaper one, but the receiver then reads the lines out of
// the other CPU's cache at a third of the speed: streaming wins end to end.
TEST(SciCopyChoice, TheWayThatMovesMessagesFasterEndToEndIsChosenNotTheSendersCheaperCopy) {
    const Path path{{0.020, 0.110}, {0.030, 0.030}};
    CopyChoices choice;
    auto now = Clock::now();
    const std::uint64_t count = 20000;
    const auto streamed = run(choice, path, 1 * MiB, count, now);
    EXPECT_GE(streamed, count * 9 / 10) << "of " << count << " copies of 1 MiB";
}

// And when the CPUs share a cache, through the cache wins: it is chosen.
TEST(SciCopyChoice, ThroughTheCacheIsChosenWhenItIsFasterEndToEnd) {
    const Path path{{0.020, 0.025}, {0.030, 0.045}};
    CopyChoices choice;
    auto now = Clock::now();
    const std::uint64_t count = 20000;
    const auto streamed = run(choice, path, 4 * MiB, count, now);
    EXPECT_LE(streamed, count / 10) << "of " << count << " copies of 4 MiB";
}

// The VM's phase changes: the chooser follows within a few explorations.
TEST(SciCopyChoice, AChangeOfPhaseIsFollowed) {
    const Path close{{0.020, 0.025}, {0.030, 0.045}};
    const Path apart{{0.020, 0.110}, {0.030, 0.030}};
    CopyChoices choice;
    auto now = Clock::now();
    (void)run(choice, close, 1 * MiB, 5000, now);
    // explore_every blocks of at most 40 copies between explorations; after four of them the
    // new phase rules every block.
    (void)run(choice, apart, 1 * MiB, 4 * CopyChoice::explore_every * 40, now);
    const std::uint64_t count = 5000;
    EXPECT_GE(run(choice, apart, 1 * MiB, count, now), count * 9 / 10);
    (void)run(choice, close, 1 * MiB, 4 * CopyChoice::explore_every * 40, now);
    EXPECT_LE(run(choice, close, 1 * MiB, count, now), count / 10);
}

// A stream after a ping-pong of the same size (compare-peers' order): the ping-pong
// taught the chooser that the cache way is cheaper, the stream's path is the other way
// round. The first block of the stream, 2.5 times its way's cost before, says the path
// changed: the next measures the other way afresh, and the stream goes streamed from
// then on, not after the next exploration (explore_every blocks later: 63 blocks of 19
// copies here, all through the cache).
TEST(SciCopyChoice, AStreamAfterAPingPongOfTheSameSizeIsNotJudgedByThePingPongsCosts) {
    const Path pingpong{{0.060, 0.060}, {0.200, 0.200}};
    const Path stream{{0.020, 0.150}, {0.031, 0.031}};
    CopyChoices choice;
    auto now = Clock::now();
    // 64 blocks of 19 copies of 1 MiB (the region holds 9: 9 warm, 10 measured): the
    // next exploration is 63 blocks away when the stream starts.
    EXPECT_LE(run(choice, pingpong, 1 * MiB, 64 * 19, now), 4u * 19 + 19) << "the ping-pong went streamed";
    (void)run(choice, stream, 1 * MiB, 8 * 19, now);
    const std::uint64_t count = 400;
    EXPECT_GE(run(choice, stream, 1 * MiB, count, now), count * 9 / 10) << "of " << count << " copies of 1 MiB";
}

// A pause of the application between two messages (a second here, once per
// thousand messages) is not taken for the cost of the way it fell into.
TEST(SciCopyChoice, PausesOfTheApplicationDoNotDecide) {
    const Path path{{0.020, 0.110}, {0.030, 0.030}};
    CopyChoices choice;
    auto now = Clock::now();
    std::uint64_t streamed = 0;
    const std::uint64_t count = 20000;
    for (std::uint64_t i = 0; i < count; ++i) {
        const bool streaming = choice.next(now, MiB);
        streamed += streaming ? 1 : 0;
        now += path.cycle(streaming, MiB);
        if (i % 1000 == 999) now += 1s;
    }
    EXPECT_GE(streamed, count * 9 / 10);
}

// Each size class chooses on its own: through the cache for 256 KiB, streamed for
// 4 MiB, in one interleaved stream of both.
TEST(SciCopyChoice, EachSizeClassChoosesOnItsOwn) {
    EXPECT_EQ(CopyChoices::class_of(256 * 1024), 0u);
    EXPECT_EQ(CopyChoices::class_of(MiB - 1), 1u);
    EXPECT_EQ(CopyChoices::class_of(MiB), 2u);
    EXPECT_EQ(CopyChoices::class_of(4 * MiB), 4u);
    EXPECT_EQ(CopyChoices::class_of(1024 * MiB), CopyChoices::classes - 1);
    const Path small{{0.020, 0.030}, {0.030, 0.045}}; // cache wins
    const Path large{{0.020, 0.110}, {0.030, 0.030}}; // streaming wins
    CopyChoices choice;
    auto now = Clock::now();
    std::uint64_t small_streamed = 0;
    std::uint64_t large_streamed = 0;
    const std::uint64_t rounds = 20000;
    for (std::uint64_t i = 0; i < rounds; ++i) {
        const bool s = choice.next(now, 256 * 1024);
        small_streamed += s ? 1 : 0;
        now += small.cycle(s, 256 * 1024);
        const bool l = choice.next(now, 4 * MiB);
        large_streamed += l ? 1 : 0;
        now += large.cycle(l, 4 * MiB);
    }
    EXPECT_LE(small_streamed, rounds / 10);
    EXPECT_GE(large_streamed, rounds * 9 / 10);
}

} // namespace
} // namespace msgpass::sci
