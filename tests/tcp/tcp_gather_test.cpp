// Unit tests of ip/tcp/src/gather.hpp: what one gather write of frames holds. Small
// pieces are copied together, large fragments go out from the application's memory,
// bytes an earlier write took are left out, and the list stops at max_iov.
#include "gather.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace msgpass::tcp {
namespace {

std::unique_ptr<HeapBuffer> filled(std::size_t size, unsigned char first) {
    auto b = std::make_unique<HeapBuffer>(size);
    for (std::size_t i = 0; i < size; ++i)
        b->data()[i] = static_cast<std::byte>(first + i);
    return b;
}

// The bytes the list would write, in order.
std::vector<std::byte> gathered(const GatherList& g) {
    std::vector<std::byte> out;
    for (int i = 0; i < g.count(); ++i) {
        const auto* p = static_cast<const std::byte*>(g[i].iov_base);
        out.insert(out.end(), p, p + g[i].iov_len);
    }
    return out;
}

std::vector<std::byte> image(const FrameHeader& h, const Buffer& payload) {
    std::vector<std::byte> out(frame_header_size + payload.size());
    encode(h, out.data());
    payload.copy_to(std::span<std::byte>(out).subspan(frame_header_size));
    return out;
}

TEST(GatherList, SmallFramesAreCopiedTogetherIntoOnePiece) {
    GatherList g;
    const auto a = filled(64, 1), b = filled(100, 2);
    g.start(0);
    ASSERT_TRUE(g.add_frame(data_frame(0, 64), *a));
    ASSERT_TRUE(g.add_frame(data_frame(1, 100), *b));
    EXPECT_EQ(g.count(), 1) << "headers and small payloads were not staged together";
    auto expected = image(data_frame(0, 64), *a);
    const auto second = image(data_frame(1, 100), *b);
    expected.insert(expected.end(), second.begin(), second.end());
    EXPECT_EQ(gathered(g), expected);
}

// "a FragmentList goes out with no staging copy": large fragments are referenced.
TEST(GatherList, ALargeFragmentGoesOutFromTheApplicationsMemory) {
    GatherList g;
    const auto big = filled(GatherList::small_piece + 1, 3);
    g.start(0);
    ASSERT_TRUE(g.add_frame(data_frame(0, big->size()), *big));
    ASSERT_EQ(g.count(), 2);
    EXPECT_EQ(g[0].iov_len, frame_header_size);
    EXPECT_EQ(g[1].iov_base, big->data()) << "a large payload was copied";
    EXPECT_EQ(gathered(g), image(data_frame(0, big->size()), *big));
}

TEST(GatherList, EveryFragmentOfAFragmentListIsGatheredAndEmptyOnesAreSkipped) {
    auto large = std::make_unique<HeapBuffer>(2000);
    const std::byte* large_data = large->data();
    FragmentList list;
    list.append(std::make_unique<HeapBuffer>(10));
    list.append(std::make_unique<HeapBuffer>(0));
    list.append(std::move(large));
    GatherList g;
    g.start(0);
    ASSERT_TRUE(g.add_frame(data_frame(0, list.size()), list));
    ASSERT_EQ(g.count(), 2) << "header and first fragment staged, the large one referenced";
    EXPECT_EQ(g[0].iov_len, frame_header_size + 10);
    EXPECT_EQ(g[1].iov_base, large_data);
    EXPECT_EQ(gathered(g), image(data_frame(0, list.size()), list));
}

TEST(GatherList, BytesAnEarlierWriteTookAreLeftOut) {
    const auto a = filled(700, 4), b = filled(30, 5);
    auto whole = image(data_frame(0, 700), *a);
    const auto second = image(data_frame(1, 30), *b);
    whole.insert(whole.end(), second.begin(), second.end());
    for (const std::size_t skip :
         {std::size_t{0}, std::size_t{10}, frame_header_size, frame_header_size + 699, frame_header_size + 700 + 3}) {
        GatherList g;
        g.start(skip);
        ASSERT_TRUE(g.add_frame(data_frame(0, 700), *a));
        ASSERT_TRUE(g.add_frame(data_frame(1, 30), *b));
        EXPECT_EQ(gathered(g), std::vector<std::byte>(whole.begin() + static_cast<std::ptrdiff_t>(skip), whole.end()))
            << "skip " << skip;
    }
}

TEST(GatherList, StopsAtMaxIovAndSaysSo) {
    const auto payload = filled(GatherList::small_piece + 1, 6); // two iovecs per frame
    GatherList g;
    g.start(0);
    int added = 0;
    while (added < GatherList::max_iov && g.add_frame(data_frame(added, payload->size()), *payload))
        ++added;
    EXPECT_LT(added, GatherList::max_iov) << "the list never filled";
    EXPECT_LE(g.count(), GatherList::max_iov);
    EXPECT_GE(g.count(), GatherList::max_iov - 1);
    EXPECT_FALSE(g.add_frame(data_frame(999, 1), *payload)) << "a full list took another frame";
    g.start(0);
    EXPECT_EQ(g.count(), 0) << "start() did not empty the list";
}

TEST(GatherList, SmallPiecesBeyondTheStagingAreaAreReferencedInstead) {
    const auto small = filled(GatherList::small_piece, 7);
    const std::size_t per_frame = frame_header_size + small->size();
    const std::size_t fit = GatherList::staging_size / per_frame;
    GatherList g;
    g.start(0);
    for (std::size_t i = 0; i <= fit; ++i)
        ASSERT_TRUE(g.add_frame(data_frame(i, small->size()), *small));
    EXPECT_GT(g.count(), 1) << "more than the staging area was copied";
    std::size_t total = 0;
    for (int i = 0; i < g.count(); ++i)
        total += g[i].iov_len;
    EXPECT_EQ(total, (fit + 1) * per_frame);
}

} // namespace
} // namespace msgpass::tcp
