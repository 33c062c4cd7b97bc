// Unit tests of the gathered write of ip/tcp/src/window.hpp (SendWindow::gather,
// stamp, wrote): small messages are staged once, at push, with their headers, so
// that any number of them is one or two pieces of one write; larger payloads go out
// from the application's memory; bytes an earlier write took are left out, the
// list stops at max_iov, and only the first frame of a write carries the
// acknowledgement, which a reconnection takes out again; the compact form of small
// frames, and the restaging of a window for a peer that reads the other form.
#include "window.hpp"

#include <gtest/gtest.h>

#include <cstring>
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

std::size_t frame(std::size_t payload) {
    return frame_header_size + payload;
}

void append(std::vector<std::byte>& to, const std::vector<std::byte>& more) {
    to.insert(to.end(), more.begin(), more.end());
}

TEST(GatheredWrite, SmallMessagesAreStagedWithTheirHeadersIntoOnePiece) {
    SendWindow w;
    const auto a = filled(64, 1), b = filled(100, 2);
    w.push_copy(*a);
    w.push_copy(std::span<const std::byte>(b->data(), b->size()));
    GatherList g;
    w.gather(g, w.size());
    EXPECT_EQ(g.count(), 1) << "headers and small payloads were not staged together";
    auto expected = image(data_frame(0, 64), *a);
    append(expected, image(data_frame(1, 100), *b));
    EXPECT_EQ(gathered(g), expected);
    EXPECT_EQ(w.kept(0), nullptr) << "a copied message kept its buffer";
}

// "a large payload goes out with no staging copy": it is referenced.
TEST(GatheredWrite, ALargePayloadGoesOutFromTheApplicationsMemory) {
    SendWindow w;
    auto big = filled(SendWindow::small_payload + 1, 3);
    const std::byte* data = big->data();
    const auto expected = image(data_frame(0, big->size()), *big);
    w.push(BufferPtr(std::move(big)), SendWindow::small_payload + 1);
    GatherList g;
    w.gather(g, w.size());
    ASSERT_EQ(g.count(), 2);
    EXPECT_EQ(g[0].iov_len, frame_header_size);
    EXPECT_EQ(g[1].iov_base, data) << "a large payload was copied";
    EXPECT_EQ(gathered(g), expected);
}

TEST(GatheredWrite, EveryFragmentOfAFragmentListIsGatheredAndEmptyOnesAreSkipped) {
    auto large = filled(2000, 9);
    const std::byte* large_data = large->data();
    auto list = std::make_unique<FragmentList>();
    list->append(filled(10, 8));
    list->append(std::make_unique<HeapBuffer>(0));
    list->append(std::move(large));
    const auto small = filled(30, 4);
    const std::size_t size = list->size();
    auto expected = image(data_frame(0, size), *list);
    append(expected, image(data_frame(1, 30), *small));
    SendWindow w;
    w.push(BufferPtr(std::move(list)), size);
    w.push_copy(*small);
    GatherList g;
    w.gather(g, w.size());
    ASSERT_EQ(g.count(), 4) << "header, the two fragments, the next staged frame";
    EXPECT_EQ(g[2].iov_base, large_data);
    EXPECT_EQ(gathered(g), expected);
}

TEST(GatheredWrite, BytesAnEarlierWriteTookAreLeftOut) {
    const auto a = filled(700, 4), b = filled(30, 5), c = filled(20, 6);
    auto whole = image(data_frame(0, 700), *a);
    append(whole, image(data_frame(1, 30), *b));
    append(whole, image(data_frame(2, 20), *c));
    for (const std::size_t skip : {std::size_t{0}, std::size_t{10}, frame_header_size, frame_header_size + 699,
                                   frame_header_size + 700 + 3, frame_header_size + 700 + frame_header_size + 30}) {
        SendWindow w;
        w.push(BufferPtr(filled(700, 4)), 700);
        w.push_copy(*b);
        w.push_copy(*c);
        (void)w.wrote(skip);
        GatherList g;
        w.gather(g, w.size());
        EXPECT_EQ(gathered(g), std::vector<std::byte>(whole.begin() + static_cast<std::ptrdiff_t>(skip), whole.end()))
            << "skip " << skip;
    }
}

TEST(GatheredWrite, StopsAtMaxIovAndTheNextWriteGoesOn) {
    SendWindow w;
    const std::size_t frames = GatherList::max_iov; // two iovecs each
    for (std::size_t i = 0; i < frames; ++i)
        w.push(BufferPtr(filled(SendWindow::small_payload + 1, 6)), SendWindow::small_payload + 1);
    GatherList g;
    w.gather(g, w.size());
    EXPECT_LE(g.count(), GatherList::max_iov);
    EXPECT_GE(g.count(), GatherList::max_iov - 2);
    std::size_t bytes = 0;
    for (int i = 0; i < g.count(); ++i)
        bytes += g[i].iov_len;
    const auto took = w.wrote(bytes);
    EXPECT_GT(took.messages, 0u);
    EXPECT_LT(w.written(), frames) << "one write took every frame";
    w.gather(g, w.size());
    EXPECT_GT(g.count(), 0) << "the rest was not gathered";
}

TEST(GatheredWrite, StagedBytesWrapAroundTheRingAndGrowWithoutMovingAFrame) {
    SendWindow w;
    const auto m = filled(500, 1);
    std::vector<std::byte> expected;
    for (std::uint64_t i = 0; i < 300; ++i) { // past 64 KiB, with some acknowledged on the way
        w.push_copy(*m);
        append(expected, image(data_frame(i, 500), *m));
        if (i % 100 == 99) {
            GatherList g;
            w.gather(g, w.size());
            ASSERT_EQ(gathered(g), expected) << "at " << i;
            (void)w.wrote(expected.size());
            ASSERT_TRUE(w.acknowledge(i + 1));
            expected.clear();
        }
    }
    EXPECT_TRUE(w.empty());
    for (std::uint64_t i = 300; i < 500; ++i) { // around the ring's end
        w.push_copy(*m);
        append(expected, image(data_frame(i, 500), *m));
    }
    // 100 KiB: more than one write takes (write_cap), each one or two pieces.
    std::vector<std::byte> all;
    while (!w.all_written()) {
        GatherList g;
        w.gather(g, w.size());
        ASSERT_GT(g.count(), 0);
        EXPECT_LE(g.count(), 2);
        const auto part = gathered(g);
        EXPECT_LE(part.size(), SendWindow::write_cap);
        append(all, part);
        (void)w.wrote(part.size());
    }
    EXPECT_EQ(all, expected);
}

// A backlog of megabytes (a receiver that paused) grows the ring; once everything is
// acknowledged the ring is freed, and the next message starts a small one.
TEST(GatheredWrite, ARingGrownBeyondItsKeepIsFreedOnceEverythingIsAcknowledged) {
    SendWindow w;
    const auto m = filled(SendWindow::small_payload, 3);
    std::uint64_t n = 0;
    while (w.staged_capacity() <= SendWindow::staged_keep) {
        w.push_copy(*m);
        ++n;
    }
    ASSERT_TRUE(w.acknowledge(n - 1));
    EXPECT_GT(w.staged_capacity(), SendWindow::staged_keep) << "freed while a frame was kept";
    ASSERT_TRUE(w.acknowledge(n));
    EXPECT_EQ(w.staged_capacity(), 0u);
    w.push_copy(*m);
    EXPECT_LE(w.staged_capacity(), 64u * 1024);
    GatherList g;
    w.gather(g, w.size());
    auto expected = std::vector<std::byte>(frame_header_size + m->size());
    encode(data_frame(n, m->size()), expected.data());
    std::memcpy(expected.data() + frame_header_size, m->data(), m->size());
    EXPECT_EQ(gathered(g), expected);
}

// Acknowledgements are cumulative: the first frame of a write carries the newest;
// the frames behind it go as staged, plain data frames.
TEST(GatheredWrite, TheFirstFrameNotBegunCarriesTheAcknowledgement) {
    SendWindow w;
    const auto m = filled(8, 1);
    for (int i = 0; i < 3; ++i)
        w.push_copy(*m);
    ASSERT_TRUE(w.stamp(w.size(), 41));
    EXPECT_EQ(w.header(0).type, static_cast<std::uint32_t>(FrameType::data_acked));
    EXPECT_EQ(w.header(0).flags, 41u);
    EXPECT_EQ(w.header(1).type, static_cast<std::uint32_t>(FrameType::data));
    auto took = w.wrote(5); // a part of the stamped header: not carried yet
    EXPECT_FALSE(took.stamp_written);
    ASSERT_TRUE(w.stamp(w.size(), 42)); // frame 0 is begun: frame 1 carries it
    EXPECT_EQ(w.header(1).type, static_cast<std::uint32_t>(FrameType::data_acked));
    EXPECT_EQ(w.header(1).flags, 42u);
    took = w.wrote(frame_header_size + 8 - 5 + frame_header_size);
    EXPECT_TRUE(took.stamp_written);
    EXPECT_EQ(took.messages, 1u);
    EXPECT_EQ(took.bytes, 8u);
    w.rewind(); // a reconnection: no old acknowledgement goes again
    for (std::size_t i = 0; i < w.size(); ++i) {
        EXPECT_EQ(w.header(i).type, static_cast<std::uint32_t>(FrameType::data)) << i;
        EXPECT_EQ(w.header(i).flags, 0u) << i;
    }
    EXPECT_FALSE(w.stamp(0, 43)) << "no frame before the end";
}

// The compact form of a small frame (frame.hpp): {u32 tag << 24 | length, u32 ack}.
std::vector<std::byte> compact_image(const Buffer& payload, bool acked = false, std::uint32_t ack = 0) {
    std::vector<std::byte> out(compact_header_size + payload.size());
    const std::uint32_t c[2] = {compact_word(payload.size(), acked), ack};
    std::memcpy(out.data(), c, sizeof c);
    payload.copy_to(std::span<std::byte>(out).subspan(compact_header_size));
    return out;
}

TEST(GatheredWrite, SmallFramesAreCompactForAPeerThatReadsThemAndLargeOnesKeepTheFullHeader) {
    SendWindow w;
    w.set_compact(true);
    const auto a = filled(64, 1), b = filled(100, 2);
    const auto large = filled(SendWindow::small_payload + 1, 3);
    w.push_copy(*a);
    w.push(BufferPtr(filled(large->size(), 3)), large->size());
    w.push_copy(std::span<const std::byte>(b->data(), b->size()));
    GatherList g;
    w.gather(g, w.size());
    auto expected = compact_image(*a);
    append(expected, image(data_frame(1, large->size()), *large));
    append(expected, compact_image(*b));
    EXPECT_EQ(gathered(g), expected);
    EXPECT_EQ(w.header(2).seq, 2u) << "a compact frame stands for the next number";
    EXPECT_EQ(w.header(2).length, 100u);
    // The statistics count payload bytes, whatever the headers' sizes.
    const auto took = w.wrote(expected.size());
    EXPECT_EQ(took.messages, 3u);
    EXPECT_EQ(took.bytes, 64u + large->size() + 100u);
    EXPECT_TRUE(w.all_written());
}

TEST(GatheredWrite, ACompactFrameCarriesTheAcknowledgementInItsSecondWordAndARewindTakesItOut) {
    SendWindow w;
    w.set_compact(true);
    const auto m = filled(8, 1);
    for (int i = 0; i < 3; ++i)
        w.push_copy(*m);
    ASSERT_TRUE(w.stamp(w.size(), 0x1234'5678'9aull));
    EXPECT_EQ(w.header(0).type, static_cast<std::uint32_t>(FrameType::data_acked));
    EXPECT_EQ(w.header(0).flags, 0x3456'789au);
    GatherList g;
    w.gather(g, w.size());
    auto expected = compact_image(*m, true, 0x3456'789au);
    append(expected, compact_image(*m));
    append(expected, compact_image(*m));
    EXPECT_EQ(gathered(g), expected);
    auto took = w.wrote(compact_header_size - 1); // a part of the stamped header: not carried yet
    EXPECT_FALSE(took.stamp_written);
    ASSERT_TRUE(w.stamp(w.size(), 43)); // frame 0 is begun: frame 1 carries it
    EXPECT_EQ(w.header(1).type, static_cast<std::uint32_t>(FrameType::data_acked));
    EXPECT_EQ(w.header(1).flags, 43u);
    took = w.wrote(1 + 8 + compact_header_size);
    EXPECT_TRUE(took.stamp_written);
    EXPECT_EQ(took.messages, 1u);
    EXPECT_EQ(took.bytes, 8u);
    w.rewind();
    for (std::size_t i = 0; i < w.size(); ++i) {
        EXPECT_EQ(w.header(i).type, static_cast<std::uint32_t>(FrameType::data)) << i;
        EXPECT_EQ(w.header(i).flags, 0u) << i;
        EXPECT_EQ(w.header(i).length, 8u) << i;
    }
}

// A reconnection to a peer that reads the other form: every frame in the window is
// staged again, payloads unchanged, numbers as before.
TEST(GatheredWrite, AWindowIsRestagedWhenThePeerReadsTheOtherForm) {
    SendWindow w;
    const auto a = filled(64, 1), b = filled(100, 2);
    const auto large = filled(SendWindow::small_payload + 1, 3);
    w.push_copy(*a);
    (void)w.wrote(frame(64)); // the first went on a connection
    ASSERT_TRUE(w.acknowledge(1));
    w.push_copy(*a);
    w.push(BufferPtr(filled(large->size(), 3)), large->size());
    w.push_copy(*b);
    ASSERT_TRUE(w.resume(1));
    w.set_compact(true);
    GatherList g;
    w.gather(g, w.size());
    auto expected = compact_image(*a);
    append(expected, image(data_frame(2, large->size()), *large));
    append(expected, compact_image(*b));
    EXPECT_EQ(gathered(g), expected);
    w.set_compact(false);
    w.gather(g, w.size());
    expected = image(data_frame(1, 64), *a);
    append(expected, image(data_frame(2, large->size()), *large));
    append(expected, image(data_frame(3, 100), *b));
    EXPECT_EQ(gathered(g), expected);
    w.set_compact(true);
    const auto took = w.wrote(compact_header_size + 64 + frame_header_size + large->size() + 3);
    EXPECT_EQ(took.messages, 2u);
    w.push_copy(*a); // staged after the restaged ones, in the new form
    ASSERT_TRUE(w.acknowledge(3));
    w.gather(g, w.size());
    expected = compact_image(*b);
    append(expected, compact_image(*a));
    EXPECT_EQ(gathered(g), std::vector<std::byte>(expected.begin() + 3, expected.end()));
}

} // namespace
} // namespace msgpass::tcp
