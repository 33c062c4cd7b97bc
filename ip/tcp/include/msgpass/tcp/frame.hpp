// The frames of the tcp byte stream: after the handshake every frame is a 24-byte
// header {u64 length, u64 seq, u32 type, u32 flags}, little-endian, followed by
// `length` payload bytes for data. The reader takes the header off the byte stream
// and the payload after it. A header read from a peer is checked here, against
// max_message_size, before anything is allocated for it. (Until issue 25 this was in
// ip/common; udp has frames of its own, msgpass/udp/protocol.hpp.)
#pragma once

#include <msgpass/ip/refusal.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace msgpass::tcp {

using ip::Refusal;

enum class FrameType : std::uint32_t {
    data = 1,    // connector -> acceptor: one message of `length` bytes, number `seq`
    ack = 2,     // acceptor -> connector: every message before `seq` was received
    goodbye = 3, // either way: the sender closes cleanly (its factory is destroyed)
    skip = 4,    // connector -> acceptor: the messages before `seq` that did not arrive were dropped
                 // (the connector gave the acceptor up while it lived); numbering goes on from `seq`
    // tcp (version 2, one two-way connection per pair):
    data_acked = 5, // data, and `flags` holds the low 32 bits of the writer's acknowledgement of the other direction
    resume = 6,     // connector -> acceptor, first after the welcome: it has every message of the acceptor's
                    // incarnation before `seq`; the acceptor resends from there
};

// Every frame after the handshake, 24 bytes, followed by `length` bytes (data only).
// On a little-endian host (x86, ARM64) the structure is its wire image.
struct FrameHeader {
    std::uint64_t length = 0; // payload bytes; <= max_message_size, else the connection is closed
    std::uint64_t seq = 0;    // data: per-pair sequence number from 0; ack: next expected
    std::uint32_t type = 0;   // FrameType
    std::uint32_t flags = 0;  // 0 (reserved)
};
static_assert(sizeof(FrameHeader) == 24);
inline constexpr std::size_t frame_header_size = sizeof(FrameHeader);

[[nodiscard]] constexpr FrameHeader data_frame(std::uint64_t seq, std::uint64_t length) noexcept {
    return {length, seq, static_cast<std::uint32_t>(FrameType::data), 0};
}
// Every message before next_expected was received.
[[nodiscard]] constexpr FrameHeader ack_frame(std::uint64_t next_expected) noexcept {
    return {0, next_expected, static_cast<std::uint32_t>(FrameType::ack), 0};
}
// The messages before first_kept that the receiver lacks were dropped by the sender.
[[nodiscard]] constexpr FrameHeader skip_frame(std::uint64_t first_kept) noexcept {
    return {0, first_kept, static_cast<std::uint32_t>(FrameType::skip), 0};
}
[[nodiscard]] constexpr FrameHeader resume_frame(std::uint64_t next_expected) noexcept {
    return {0, next_expected, static_cast<std::uint32_t>(FrameType::resume), 0};
}
// Toward the connector, next_expected is a last acknowledgement; toward the acceptor, 0.
[[nodiscard]] constexpr FrameHeader goodbye_frame(std::uint64_t next_expected) noexcept {
    return {0, next_expected, static_cast<std::uint32_t>(FrameType::goodbye), 0};
}

inline void encode(const FrameHeader& header, std::byte* out) noexcept {
    std::memcpy(out, &header, frame_header_size);
}
// The header at in, which holds at least frame_header_size bytes.
[[nodiscard]] inline FrameHeader decode(const std::byte* in) noexcept {
    FrameHeader h;
    std::memcpy(&h, in, frame_header_size);
    return h;
}
// The header at the start of bytes (a datagram, a read buffer); none when shorter.
[[nodiscard]] inline std::optional<FrameHeader> decode(std::span<const std::byte> bytes) noexcept {
    if (bytes.size() < frame_header_size) return std::nullopt;
    return decode(bytes.data());
}

// The compact form of a small data frame (docs/tcp.md, "Compact frames"): 8 bytes,
// {u32 word, u32 ack}, then `length` payload bytes. The word's top byte is the tag
// (compact_data, or compact_data_acked with the low 32 bits of the writer's
// acknowledgement in `ack`, as data_acked's flags), its low 24 bits the length; the
// message's number is the next one the reader expects (a byte stream neither loses
// nor repeats a frame, and after a reconnection the writer resends from the number
// the reader gave). Sent only to a reader that announced it reads them (a welcome's
// `reserved`, a resume frame's `flags`: compact_frames_bit), which a reader with a
// max_message_size below 2^31 does: a full header's first 32 bits are then the low
// bits of a length below 2^31, and a word whose top byte is 0xc0 or 0xc1 can only be
// a compact frame's. ZeroMQ's frame of a short message has 2 bytes of header; the
// full header's 24 were 27 % of a 64 B message's bytes on the wire.
inline constexpr std::size_t compact_header_size = 8;
inline constexpr std::uint32_t compact_data = 0xc0;
inline constexpr std::uint32_t compact_data_acked = 0xc1;
inline constexpr std::uint64_t compact_max_length = 0xffffff;
inline constexpr std::uint32_t compact_frames_bit = 1; // in a welcome's reserved, a resume frame's flags
// The largest max_message_size with which a reader takes compact frames (see above).
inline constexpr std::uint64_t compact_reader_max_message = 0x7fffffff;

[[nodiscard]] constexpr std::uint32_t compact_word(std::uint64_t length, bool acked) noexcept {
    return ((acked ? compact_data_acked : compact_data) << 24) | static_cast<std::uint32_t>(length);
}
// The tag of the 32 bits at the start of a frame when they are a compact frame's (0: not).
[[nodiscard]] constexpr std::uint32_t compact_tag(std::uint32_t word) noexcept {
    const std::uint32_t tag = word >> 24;
    return tag == compact_data || tag == compact_data_acked ? tag : 0;
}

// What a header read from a peer is.
enum class Frame {
    data,
    ack,
    goodbye,
    skip,
    malformed, // a type this side does not take, a payload or flags where none belong
    too_long,  // a data frame longer than max_message_size
};

// On the side that receives data: a data frame of at most max_message_size bytes
// with no flags, or a goodbye or skip without payload.
[[nodiscard]] constexpr Frame check_data_side(const FrameHeader& h, std::uint64_t max_message_size) noexcept {
    if (h.type == static_cast<std::uint32_t>(FrameType::goodbye) && h.length == 0) return Frame::goodbye;
    if (h.type == static_cast<std::uint32_t>(FrameType::skip) && h.length == 0 && h.flags == 0) return Frame::skip;
    if (h.type != static_cast<std::uint32_t>(FrameType::data) || h.flags != 0) return Frame::malformed;
    if (h.length > max_message_size) return Frame::too_long;
    return Frame::data;
}

// On the side that sends data: an acknowledgement or a goodbye, without payload.
[[nodiscard]] constexpr Frame check_ack_side(const FrameHeader& h) noexcept {
    if (h.length != 0) return Frame::malformed;
    if (h.type == static_cast<std::uint32_t>(FrameType::ack)) return Frame::ack;
    if (h.type == static_cast<std::uint32_t>(FrameType::goodbye)) return Frame::goodbye;
    return Frame::malformed;
}

// The reason a frame fault is counted under: bad_length, protocol_error; none for a good frame.
[[nodiscard]] constexpr Refusal refusal_of(Frame f) noexcept {
    return f == Frame::too_long ? Refusal::bad_length : f == Frame::malformed ? Refusal::protocol_error : Refusal::none;
}

// What was wrong with the frame: "a frame of unknown type 7", "a frame of 9000 bytes,
// above max_message_size (8192)".
[[nodiscard]] std::string describe_fault(const FrameHeader& h, Frame fault, std::uint64_t max_message_size);

} // namespace msgpass::tcp
