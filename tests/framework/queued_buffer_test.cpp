// Unit tests of msgpass/kit/queued_buffer.hpp, the send-queue entry of sci, the ip
// send window and udp: it holds the caller's buffer itself or a reference to the
// shared one, never a copy, and says which.
#include <msgpass/kit/queued_buffer.hpp>

#include <gtest/gtest.h>

#include <deque>
#include <memory>

namespace msgpass::kit {
namespace {

TEST(QueuedBuffer, AnOwnedBufferIsHeldItselfAndIsNotShared) {
    BufferPtr owned = std::make_unique<HeapBuffer>(12);
    const Buffer* address = owned.get();
    QueuedBuffer entry(std::move(owned));
    EXPECT_FALSE(entry.empty());
    EXPECT_EQ(&entry.buffer(), address) << "the entry copied the buffer";
    EXPECT_EQ(entry.buffer().size(), 12u);
    EXPECT_EQ(entry.shared(), nullptr);
}

TEST(QueuedBuffer, ASharedBufferIsReferencedNotCopied) {
    SharedBuffer shared = std::make_shared<HeapBuffer>(7);
    QueuedBuffer entry(shared);
    EXPECT_EQ(&entry.buffer(), shared.get());
    EXPECT_EQ(entry.shared(), shared);
    EXPECT_EQ(shared.use_count(), 2) << "the entry keeps one reference";
}

TEST(QueuedBuffer, HoldReplacesWhatWasHeldAndAQueueMovesEntriesWithoutCopies) {
    SharedBuffer shared = std::make_shared<HeapBuffer>(3);
    std::deque<QueuedBuffer> queue;
    queue.emplace_back(shared);
    queue.emplace_back(BufferPtr(std::make_unique<HeapBuffer>(5)));
    queue.front().hold(BufferPtr(std::make_unique<HeapBuffer>(9)));
    EXPECT_EQ(shared.use_count(), 1) << "hold kept the shared buffer it replaced";
    EXPECT_EQ(queue.front().shared(), nullptr);
    EXPECT_EQ(queue.front().buffer().size(), 9u);
    queue.back().hold(shared);
    EXPECT_EQ(&queue.back().buffer(), shared.get());
    QueuedBuffer moved = std::move(queue.back());
    EXPECT_EQ(&moved.buffer(), shared.get());
    EXPECT_TRUE(queue.back().empty());
    EXPECT_TRUE(QueuedBuffer().empty());
}

} // namespace
} // namespace msgpass::kit
