// Unit tests of msgpass/buffer.hpp: HeapBuffer sizes and capacity, typed access,
// copies, and FragmentList scatter/gather (appending buffers, views and lists).
#include <msgpass/buffer.hpp>
#include <msgpass/message_view.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace msgpass {
namespace {

std::vector<std::byte> bytes_of(const std::string& text) {
    std::vector<std::byte> out(text.size());
    std::memcpy(out.data(), text.data(), text.size());
    return out;
}

std::string text_of(std::span<const std::byte> bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

BufferPtr heap_with(const std::string& text) {
    return std::make_unique<HeapBuffer>(bytes_of(text));
}

std::string gathered(const Buffer& b) {
    std::vector<std::byte> out(b.size());
    EXPECT_EQ(b.copy_to(out), b.size());
    return text_of(out);
}

TEST(HeapBuffer, StartsWithSizeEqualToCapacity) {
    HeapBuffer b(64);
    EXPECT_EQ(b.size(), 64u);
    EXPECT_EQ(b.capacity(), 64u);
    EXPECT_EQ(b.bytes().size(), 64u);
    EXPECT_EQ(b.source(), 0u);
}

TEST(HeapBuffer, ShrinksAndGrowsBackUpToCapacityKeepingContent) {
    HeapBuffer b(bytes_of("abcdefgh"));
    b.resize(3);
    EXPECT_EQ(b.size(), 3u);
    EXPECT_EQ(b.capacity(), 8u);
    EXPECT_EQ(text_of(b.bytes()), "abc");
    ASSERT_EQ(b.fragments().size(), 1u);
    EXPECT_EQ(b.fragments()[0].size(), 3u);
    b.resize(8);
    EXPECT_EQ(text_of(b.bytes()), "abcdefgh");
}

TEST(HeapBuffer, GrowingPastCapacityThrowsMessageTooLargeAndKeepsTheSize) {
    HeapBuffer b(16);
    b.resize(4);
    EXPECT_THROW(b.resize(17), MessageTooLarge);
    EXPECT_EQ(b.size(), 4u);
    EXPECT_EQ(b.capacity(), 16u);
}

TEST(HeapBuffer, ZeroSizeBufferIsEmptyAndCannotGrow) {
    HeapBuffer b(0);
    EXPECT_EQ(b.size(), 0u);
    EXPECT_EQ(b.capacity(), 0u);
    ASSERT_EQ(b.fragments().size(), 1u);
    EXPECT_TRUE(b.fragments()[0].empty());
    std::array<std::byte, 1> dst{};
    EXPECT_EQ(b.copy_to(std::span<std::byte>(dst.data(), 0)), 0u);
    EXPECT_THROW(b.resize(1), MessageTooLarge);
    b.resize(0);
    EXPECT_EQ(b.size(), 0u);
}

TEST(HeapBuffer, ZeroSizeContentMakesAnEmptyBuffer) {
    HeapBuffer b(std::span<const std::byte>{});
    EXPECT_EQ(b.size(), 0u);
    EXPECT_EQ(HeapBuffer::copy_of(b)->size(), 0u);
}

TEST(HeapBuffer, IsItsOwnSingleBuffer) {
    HeapBuffer b(4);
    EXPECT_EQ(b.single(), &b);
    const Buffer& c = b;
    EXPECT_EQ(c.single(), &b);
}

TEST(Buffer, AsGivesTypedAccessToTheStartOfAContiguousBuffer) {
    struct Header {
        std::uint32_t kind;
        std::uint32_t length;
    };
    HeapBuffer b(sizeof(Header) + 4);
    b.as<Header>() = Header{7, 42};
    Header read{};
    std::memcpy(&read, b.data(), sizeof read);
    EXPECT_EQ(read.kind, 7u);
    EXPECT_EQ(read.length, 42u);
    const Buffer& c = b;
    EXPECT_EQ(c.as<Header>().length, 42u);
}

TEST(Buffer, AsOnABufferSmallerThanTheTypeThrowsUsageError) {
    HeapBuffer b(sizeof(std::uint64_t));
    EXPECT_NO_THROW((void)b.as<std::uint64_t>());
    b.resize(sizeof(std::uint64_t) - 1);
    EXPECT_THROW((void)b.as<std::uint64_t>(), UsageError);
    const Buffer& c = b;
    EXPECT_THROW((void)c.as<std::uint64_t>(), UsageError);
}

TEST(Buffer, AsOnAFragmentedBufferThrowsUsageError) {
    FragmentList list;
    list.append(std::make_unique<HeapBuffer>(8));
    list.append(std::make_unique<HeapBuffer>(8));
    EXPECT_THROW((void)list.as<std::uint32_t>(), UsageError);
}

TEST(Buffer, CopyToCopiesTheMessageAndReturnsItsSize) {
    auto b = heap_with("payload");
    std::vector<std::byte> dst(32, std::byte{'#'});
    EXPECT_EQ(b->copy_to(dst), 7u);
    EXPECT_EQ(text_of(std::span(dst).first(8)), "payload#");
}

TEST(Buffer, CopyToADestinationSmallerThanTheMessageThrowsUsageError) {
    auto b = heap_with("payload");
    std::vector<std::byte> dst(6, std::byte{'#'});
    EXPECT_THROW(b->copy_to(dst), UsageError);
    EXPECT_EQ(text_of(dst), "######");
}

TEST(HeapBuffer, CopyOfKeepsContentAndSource) {
    auto original = heap_with("some bytes");
    original->set_source(17);
    auto copy = HeapBuffer::copy_of(*original);
    ASSERT_NE(copy->single(), nullptr);
    EXPECT_NE(copy->single()->data(), original->single()->data());
    EXPECT_EQ(text_of(copy->single()->bytes()), "some bytes");
    EXPECT_EQ(copy->source(), 17u);
}

TEST(HeapBuffer, CopyOfAFragmentListIsOneContiguousBuffer) {
    FragmentList list;
    list.append(heap_with("head|"));
    list.append(heap_with("tail"));
    list.set_source(3);
    auto copy = HeapBuffer::copy_of(list);
    ASSERT_NE(copy->single(), nullptr);
    EXPECT_EQ(text_of(copy->single()->bytes()), "head|tail");
    EXPECT_EQ(copy->source(), 3u);
}

TEST(FragmentList, StartsEmpty) {
    FragmentList list;
    EXPECT_EQ(list.size(), 0u);
    EXPECT_TRUE(list.fragments().empty());
    EXPECT_EQ(list.parts(), 0u);
    EXPECT_EQ(list.copy_to({}), 0u);
}

TEST(FragmentList, SizeSumsTheFragmentsOfBuffersAndViews) {
    std::array<std::byte, 5> kept{};
    FragmentList list;
    list.append(std::make_unique<HeapBuffer>(10));
    list.append_view(kept);
    list.append(std::make_unique<HeapBuffer>(0));
    EXPECT_EQ(list.size(), 15u);
    EXPECT_EQ(list.fragments().size(), 3u);
    EXPECT_EQ(list.parts(), 2u); // views are not owned
}

TEST(FragmentList, FragmentsAreInAppendOrderAndPointAtTheAppendedMemory) {
    auto first = heap_with("one");
    const std::byte* first_data = first->single()->data();
    auto view_bytes = bytes_of("two");
    FragmentList list;
    list.append(std::move(first));
    list.append_view(view_bytes);
    list.append(heap_with("three"));
    auto f = list.fragments();
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].data(), first_data);
    EXPECT_EQ(f[1].data(), view_bytes.data());
    EXPECT_EQ(text_of(f[0]), "one");
    EXPECT_EQ(text_of(f[1]), "two");
    EXPECT_EQ(text_of(f[2]), "three");
}

TEST(FragmentList, IsNeverASingleBuffer) {
    FragmentList list;
    list.append(heap_with("only one part"));
    EXPECT_EQ(list.single(), nullptr);
    const Buffer& c = list;
    EXPECT_EQ(c.single(), nullptr);
}

TEST(FragmentList, CopyToGathersTheFragmentsInOrder) {
    auto view_bytes = bytes_of("-middle-");
    FragmentList list;
    list.append(heap_with("begin"));
    list.append_view(view_bytes);
    list.append(heap_with("end"));
    EXPECT_EQ(gathered(list), "begin-middle-end");
}

TEST(FragmentList, CopyToADestinationSmallerThanTheListThrowsUsageError) {
    FragmentList list;
    list.append(heap_with("abc"));
    list.append(heap_with("def"));
    std::vector<std::byte> dst(5);
    EXPECT_THROW(list.copy_to(dst), UsageError);
}

TEST(FragmentList, AppendingAListFlattensItsFragments) {
    auto inner = std::make_unique<FragmentList>();
    inner->append(heap_with("b"));
    inner->append(heap_with("c"));
    FragmentList outer;
    outer.append(heap_with("a"));
    outer.append(std::move(inner));
    outer.append(heap_with("d"));
    EXPECT_EQ(outer.fragments().size(), 4u);
    EXPECT_EQ(outer.size(), 4u);
    EXPECT_EQ(outer.parts(), 3u);
    EXPECT_EQ(gathered(outer), "abcd");
}

TEST(FragmentList, AppendingNullThrowsUsageErrorAndLeavesTheListUnchanged) {
    FragmentList list;
    list.append(heap_with("xy"));
    EXPECT_THROW(list.append(nullptr), UsageError);
    EXPECT_EQ(list.size(), 2u);
    EXPECT_EQ(list.fragments().size(), 1u);
    EXPECT_EQ(list.parts(), 1u);
}

// ---------------------------------------------------------------- MessageView

TEST(MessageView, HoldsAReceivedBufferUntilReleasedAndJoinsFragmentsIntoOnePiece) {
    EXPECT_FALSE(MessageView());
    EXPECT_FALSE(MessageView(BufferPtr()));
    auto single = heap_with("abc");
    single->set_source(7);
    const std::byte* where = single->single()->data();
    MessageView v(std::move(single));
    ASSERT_TRUE(v);
    EXPECT_EQ(v.data(), where) << "a contiguous buffer is lent as it is";
    EXPECT_EQ(v.size(), 3u);
    EXPECT_EQ(v.source(), 7u);
    MessageView moved = std::move(v);
    EXPECT_FALSE(v);
    EXPECT_EQ(moved.data(), where);
    moved.release();
    EXPECT_FALSE(moved);
    EXPECT_TRUE(moved.bytes().empty());

    auto list = std::make_unique<FragmentList>();
    list->append(heap_with("ab"));
    list->append(heap_with("cd"));
    MessageView joined(std::move(list));
    ASSERT_EQ(joined.size(), 4u);
    EXPECT_EQ(std::memcmp(joined.data(), "abcd", 4), 0);

    MessageView empty(std::make_unique<HeapBuffer>(0));
    EXPECT_TRUE(empty) << "a message of 0 bytes is a message";
    EXPECT_EQ(empty.size(), 0u);
}

TEST(MessageView, GivesLentMemoryBackOnceWhenReleasedOrDestroyedOrReplaced) {
    struct Counting final : MessageView::Lender {
        std::vector<std::uint64_t> given;
        void give_back(void* /*context*/, std::uint64_t token) noexcept override { given.push_back(token); }
    } lender;
    const std::array<std::byte, 4> bytes{};
    {
        MessageView a(bytes, 1, &lender, nullptr, 11);
        MessageView b(bytes, 1, &lender, nullptr, 12);
        a.release();
        a.release(); // once
        EXPECT_EQ(lender.given, (std::vector<std::uint64_t>{11}));
        MessageView c(bytes, 1, &lender, nullptr, 13);
        c = std::move(b); // c's own view goes back
        EXPECT_EQ(lender.given, (std::vector<std::uint64_t>{11, 13}));
    }
    EXPECT_EQ(lender.given, (std::vector<std::uint64_t>{11, 13, 12})) << "the moved-to view released 12 at its end";
}

} // namespace
} // namespace msgpass
