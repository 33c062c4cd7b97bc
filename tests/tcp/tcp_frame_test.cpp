// Unit tests of msgpass/tcp/frame.hpp: the wire image of a frame header, decoding from
// a stream buffer or a datagram, and the checks of a header read from a peer before
// anything is allocated for it (docs/tcp.md, Frames).
#include <msgpass/tcp/frame.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <vector>

namespace msgpass::tcp {
namespace {

constexpr std::uint64_t max_size = 8192;

FrameHeader header(std::uint32_t type, std::uint64_t length, std::uint64_t seq = 0, std::uint32_t flags = 0) {
    return FrameHeader{length, seq, type, flags};
}

// "All integers are little-endian": {u64 length, u64 seq, u32 type, u32 flags}.
TEST(FrameWire, ADataHeaderIsTheDocumented24ByteLittleEndianImage) {
    std::array<std::byte, frame_header_size> out{};
    encode(data_frame(0x0102030405060708ULL, 0x1122), out.data());
    const std::array<std::uint8_t, 24> expected{0x22, 0x11, 0, 0, 0, 0, 0, 0, // length
                                                8,    7,    6, 5, 4, 3, 2, 1, // seq
                                                1,    0,    0, 0,             // type data
                                                0,    0,    0, 0};            // flags
    for (std::size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(std::to_integer<std::uint8_t>(out[i]), expected[i]) << "byte " << i;
}

TEST(FrameWire, AcknowledgementsAndGoodbyesCarryTheirSequenceAndNoPayload) {
    const FrameHeader ack = ack_frame(42);
    EXPECT_EQ(ack.type, static_cast<std::uint32_t>(FrameType::ack));
    EXPECT_EQ(ack.seq, 42u);
    EXPECT_EQ(ack.length, 0u);
    const FrameHeader bye = goodbye_frame(7);
    EXPECT_EQ(bye.type, static_cast<std::uint32_t>(FrameType::goodbye));
    EXPECT_EQ(bye.seq, 7u);
    EXPECT_EQ(bye.length, 0u);
    EXPECT_EQ(check_ack_side(ack), Frame::ack);
    EXPECT_EQ(check_ack_side(bye), Frame::goodbye);
    EXPECT_EQ(check_data_side(bye, max_size), Frame::goodbye);
    const FrameHeader skip = skip_frame(15);
    EXPECT_EQ(skip.type, static_cast<std::uint32_t>(FrameType::skip));
    EXPECT_EQ(skip.seq, 15u);
    EXPECT_EQ(skip.length, 0u);
    EXPECT_EQ(check_data_side(skip, max_size), Frame::skip);
    EXPECT_EQ(check_ack_side(skip), Frame::malformed) << "a skip on the acknowledging side";
}

TEST(FrameWire, DecodeReadsBackWhatEncodeWrote) {
    std::vector<std::byte> datagram(frame_header_size + 5);
    encode(data_frame(9, 5), datagram.data());
    const auto h = decode(std::span<const std::byte>(datagram));
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->seq, 9u);
    EXPECT_EQ(h->length, 5u);
    EXPECT_EQ(h->type, static_cast<std::uint32_t>(FrameType::data));
    EXPECT_EQ(h->flags, 0u);
}

TEST(FrameWire, DecodeOfFewerBytesThanAHeaderGivesNothing) {
    std::vector<std::byte> short_datagram(frame_header_size - 1);
    EXPECT_FALSE(decode(std::span<const std::byte>(short_datagram)).has_value());
    EXPECT_FALSE(decode(std::span<const std::byte>()).has_value());
}

// "The receiver checks each length against max_message_size before it allocates anything."
TEST(CheckDataSide, ADataFrameUpToMaxMessageSizeIsDataOneByteMoreIsTooLong) {
    EXPECT_EQ(check_data_side(data_frame(0, 0), max_size), Frame::data);
    EXPECT_EQ(check_data_side(data_frame(0, max_size), max_size), Frame::data);
    EXPECT_EQ(check_data_side(data_frame(0, max_size + 1), max_size), Frame::too_long);
    EXPECT_EQ(check_data_side(data_frame(0, 1ULL << 63), max_size), Frame::too_long);
    EXPECT_EQ(check_data_side(data_frame(0, ~0ULL), max_size), Frame::too_long);
}

TEST(CheckDataSide, AnUnknownTypeFlagsOrAnAcknowledgementAreMalformed) {
    EXPECT_EQ(check_data_side(header(0, 10), max_size), Frame::malformed);
    EXPECT_EQ(check_data_side(header(7, 10), max_size), Frame::malformed);
    EXPECT_EQ(check_data_side(header(1, 10, 0, 1), max_size), Frame::malformed) << "flags are reserved";
    EXPECT_EQ(check_data_side(ack_frame(3), max_size), Frame::malformed) << "an ack on the data connection";
    EXPECT_EQ(check_data_side(header(3, 10), max_size), Frame::malformed) << "a goodbye with a payload";
    EXPECT_EQ(check_data_side(header(4, 10), max_size), Frame::malformed) << "a skip with a payload";
    EXPECT_EQ(check_data_side(header(4, 0, 0, 1), max_size), Frame::malformed) << "a skip with flags";
}

TEST(CheckAckSide, OnlyAcknowledgementsAndGoodbyesWithoutPayloadAreTaken) {
    EXPECT_EQ(check_ack_side(data_frame(0, 10)), Frame::malformed);
    EXPECT_EQ(check_ack_side(data_frame(0, 0)), Frame::malformed);
    EXPECT_EQ(check_ack_side(header(2, 1, 5)), Frame::malformed) << "an ack with a payload";
    EXPECT_EQ(check_ack_side(header(3, 1, 5)), Frame::malformed) << "a goodbye with a payload";
    EXPECT_EQ(check_ack_side(header(9, 0)), Frame::malformed);
}

TEST(FrameFaults, AreCountedUnderTheirReasonAndNamedWithTheValueFound) {
    EXPECT_EQ(refusal_of(Frame::too_long), Refusal::bad_length);
    EXPECT_EQ(refusal_of(Frame::malformed), Refusal::protocol_error);
    EXPECT_EQ(refusal_of(Frame::data), Refusal::none);
    EXPECT_EQ(describe_fault(data_frame(0, 1ULL << 63), Frame::too_long, max_size),
              "a frame of 9223372036854775808 bytes, above max_message_size (8192)");
    EXPECT_EQ(describe_fault(header(7, 0), Frame::malformed, max_size), "a frame of unknown type 7");
}

} // namespace
} // namespace msgpass::tcp
