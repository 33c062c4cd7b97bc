// Unit tests of msgpass/kit/pool.hpp: small messages in one allocation, large ones
// from recycled memory in size classes (four per power of two), the freed blocks kept
// within a byte budget.
#include <msgpass/kit/pool.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <vector>

namespace msgpass::kit {
namespace {

SingleBuffer& single(const BufferPtr& b) {
    EXPECT_NE(b->single(), nullptr);
    return *b->single();
}

TEST(BufferPool, ASmallBufferHasItsSizeAndIsNotPooled) {
    auto pool = std::make_shared<BufferPool>();
    auto b = pool->make(1000);
    EXPECT_EQ(b->size(), 1000U);
    EXPECT_EQ(single(b).capacity(), 1000U);
}

// A message of a few hundred bytes at most takes a block of the per-thread cache:
// dropped on one thread (as tcp's background thread drops an acknowledged message),
// its block serves the next message made there instead of going back to the heap.
TEST(BufferPool, ATinyBufferComesFromTheBlockCacheAndItsBlockIsReused) {
    auto pool = std::make_shared<BufferPool>();
    auto b = pool->make(64);
    EXPECT_EQ(b->size(), 64U);
    EXPECT_GE(single(b).capacity(), 64U);
    EXPECT_LE(single(b).capacity(), InlineBuffer::small_block);
    std::memset(single(b).data(), 0x33, single(b).capacity());
    const std::byte* const block = single(b).data();
    b.reset();
    auto again = pool->make(100);
    EXPECT_EQ(single(again).data(), block) << "the block of the dropped message was not reused";
    EXPECT_EQ(again->size(), 100U);

    // The largest size that fits a block, and one byte more, which does not.
    const auto fits = single(again).capacity();
    EXPECT_EQ(single(pool->make(fits)).capacity(), fits);
    EXPECT_EQ(single(pool->make(fits + 1)).capacity(), fits + 1);
}

TEST(BufferPool, ALargeBufferHasTheCapacityOfItsClassAtMostAQuarterAboveItsSize) {
    auto pool = std::make_shared<BufferPool>();
    EXPECT_EQ(single(pool->make(64 * 1024)).capacity(), 64U * 1024);
    auto b = pool->make(64 * 1024 + 24); // 64 KiB of payload behind a communicator's envelope
    EXPECT_EQ(b->size(), 64U * 1024 + 24);
    EXPECT_EQ(single(b).capacity(), 80U * 1024);
    for (std::size_t size = 4096; size < (std::size_t{1} << 30); size = size * 9 / 8 + 1) {
        for (const std::size_t s : {size - 1, size, size + 1}) {
            const auto capacity = BufferPool::capacity_of(BufferPool::class_of(s));
            EXPECT_GE(capacity, s);
            EXPECT_LE(capacity, s + s / 4) << "size " << s;
            // the class below would not hold it: the smallest class that does
            EXPECT_LT(BufferPool::capacity_of(BufferPool::class_of(s) - 1), s) << "size " << s;
        }
    }
}

TEST(BufferPool, BuffersBelowItsThresholdAreNotPooledAndThoseFromItAre) {
    auto pool = std::make_shared<BufferPool>(4096, 1024 * 1024);
    pool->make(4095).reset();
    EXPECT_EQ(pool->kept_bytes(), 0U);
    pool->make(4096).reset();
    EXPECT_EQ(pool->kept_bytes(), 4096U);
    auto again = pool->make(4000 + 96);
    EXPECT_EQ(pool->reused(), 1U);
    EXPECT_EQ(pool->kept_bytes(), 0U);
}

// A window of buffers freed together comes back whole up to the byte budget, so that
// a stream of them does not map and unmap memory per message; beyond it, freed
// buffers go back to the heap.
TEST(BufferPool, FreedBuffersAreKeptUpToTheByteBudgetAndReused) {
    constexpr std::size_t size = 64 * 1024 + 24; // blocks of 80 KiB
    constexpr std::size_t budget = 1024 * 1024;
    constexpr std::size_t fit = budget / (80 * 1024); // 12
    auto pool = std::make_shared<BufferPool>(BufferPool::default_pooled_from, budget);
    std::vector<BufferPtr> first;
    std::set<const std::byte*> memory;
    for (std::size_t i = 0; i < fit + 4; ++i) {
        first.push_back(pool->make(size));
        memory.insert(single(first.back()).data());
    }
    first.clear();
    EXPECT_EQ(pool->kept_bytes(), fit * 80 * 1024);
    std::vector<BufferPtr> second;
    std::size_t same = 0;
    for (std::size_t i = 0; i < fit + 4; ++i) {
        second.push_back(pool->make(size));
        same += memory.count(single(second.back()).data());
    }
    EXPECT_EQ(pool->reused(), fit);
    EXPECT_EQ(pool->kept_bytes(), 0U);
    // The kept ones come back; the 4 beyond the budget were freed (the heap may hand
    // their addresses out again, so they bound the count from above only).
    EXPECT_GE(same, fit);
    EXPECT_LE(same, fit + 4);
}

// The sizes in use now keep their memory: a freed block of a new size evicts blocks of
// the class that holds the most bytes, not itself.
TEST(BufferPool, AFreedBlockOfANewSizeEvictsTheKeptBlocksOfAnOldOne) {
    constexpr std::size_t budget = 1024 * 1024;
    auto pool = std::make_shared<BufferPool>(BufferPool::default_pooled_from, budget);
    {
        std::vector<BufferPtr> old;
        for (int i = 0; i < 16; ++i)
            old.push_back(pool->make(64 * 1024)); // 16 x 64 KiB: the whole budget
    }
    EXPECT_EQ(pool->kept_bytes(), budget);
    pool->make(256 * 1024).reset(); // evicts 4 of the old blocks
    EXPECT_EQ(pool->kept_bytes(), budget);
    auto newer = pool->make(256 * 1024);
    EXPECT_EQ(pool->reused(), 1U) << "the block of the size in use was not kept";
    EXPECT_EQ(pool->kept_bytes(), budget - 256 * 1024);
    // A block larger than the whole budget is never kept.
    pool->make(2 * budget).reset();
    EXPECT_EQ(pool->kept_bytes(), budget - 256 * 1024);
}

TEST(BufferPool, ABufferOutlivesItsPoolsLastOtherOwner) {
    auto pool = std::make_shared<BufferPool>();
    auto b = pool->make(200 * 1024);
    pool.reset();
    single(b).data()[0] = std::byte{7};
    EXPECT_EQ(single(b).data()[0], std::byte{7});
    b.reset(); // gives its memory back to the pool it kept alive
}

} // namespace
} // namespace msgpass::kit
