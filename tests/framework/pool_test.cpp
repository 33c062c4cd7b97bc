// Unit tests of msgpass/kit/pool.hpp: small messages in one allocation, large ones
// from recycled memory by power-of-two class, each class keeping a bounded number of
// freed buffers.
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

TEST(BufferPool, ALargeBufferHasTheCapacityOfItsClass) {
    auto pool = std::make_shared<BufferPool>();
    EXPECT_EQ(single(pool->make(64 * 1024)).capacity(), 64U * 1024);
    auto b = pool->make(64 * 1024 + 24);
    EXPECT_EQ(b->size(), 64U * 1024 + 24);
    EXPECT_EQ(single(b).capacity(), 128U * 1024);
}

// The class of 64 KiB plus a communicator's envelope: a window of them freed together
// comes back whole, so that a stream of them does not map and unmap memory per message.
TEST(BufferPool, AClassKeepsItsByteBudgetOfFreedBuffersAndReusesThem) {
    constexpr std::size_t size = 64 * 1024 + 24;
    constexpr std::size_t cls = 17;
    static_assert(BufferPool::kept(cls) == 16);
    static_assert(BufferPool::kept(16) == 32);
    static_assert(BufferPool::kept(22) == BufferPool::keep_per_class);
    auto pool = std::make_shared<BufferPool>();
    std::vector<BufferPtr> first;
    std::set<const std::byte*> memory;
    for (std::size_t i = 0; i < BufferPool::kept(cls) + 4; ++i) {
        first.push_back(pool->make(size));
        memory.insert(single(first.back()).data());
    }
    first.clear(); // all freed: the pool keeps kept(cls) of them
    std::vector<BufferPtr> second;
    std::size_t reused = 0;
    for (std::size_t i = 0; i < BufferPool::kept(cls) + 4; ++i) {
        second.push_back(pool->make(size));
        reused += memory.count(single(second.back()).data());
    }
    // The kept ones come back; the 4 beyond the budget were freed (their addresses may
    // be handed out again by the heap, so they bound the count from above only).
    EXPECT_GE(reused, BufferPool::kept(cls));
    EXPECT_LE(reused, BufferPool::kept(cls) + 4);
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
