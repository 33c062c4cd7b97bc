// Fuzz target: the udp datagram decoder (ip/udp protocol.hpp, decode_datagram), the
// one place a datagram from the network is judged before anything is allocated.
// Invariants of an accepted datagram: its payload is what follows the header (and,
// in a group_data datagram, its member table, which makes it this member's data; a
// data datagram with flag_ack ends with the status it carries, not payload), a
// data piece lies inside its message and the message within max_message_size, the
// frames of a packed data datagram tile its payload exactly, each within it, a NAK
// holds whole ranges, a skip keeps a datagram beyond the next expected it names and
// drops at least one message, the sender is a known peer with an incarnation.
#include "fuzz.hpp"

#include <msgpass/udp/protocol.hpp>

#include <cstdint>
#include <cstring>
#include <span>

using namespace msgpass::udp;

namespace {
constexpr std::uint64_t max_message = 1 << 20;
bool knows(const void*, std::uint32_t id) {
    return id == 2 || id == 3;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const Expect expect{partition_hash("fuzz"), 1, max_message, max_datagram_size, &knows, nullptr};
    const auto bytes = std::as_bytes(std::span(data, size));
    const Decoded d = decode_datagram(bytes, expect);
    if (!d.ok) {
        MSGPASS_FUZZ_CHECK(static_cast<std::uint32_t>(d.drop) < static_cast<std::uint32_t>(Drop::kinds));
        MSGPASS_FUZZ_CHECK(!describe(d.drop).empty());
        return 0;
    }
    msgpass::fuzz::accepted();
    const DatagramHeader& h = d.header;
    // The payload is what follows the header, and for a group_data datagram what
    // follows its member table too: the decoder hands it over as this member's data.
    DatagramHeader raw;
    std::memcpy(&raw, data, sizeof raw);
    const bool group = static_cast<DatagramType>(raw.type) == DatagramType::group_data;
    const std::size_t table = group ? group_table_bytes(raw.reserved) : 0;
    // A data datagram's AckTrailer (flag_ack) is its last 16 bytes, no part of the payload.
    const std::size_t trailer = d.ack ? ack_trailer_size : 0;
    MSGPASS_FUZZ_CHECK(d.ack ==
                       (static_cast<DatagramType>(raw.type) == DatagramType::data && (raw.flags & flag_ack) != 0));
    MSGPASS_FUZZ_CHECK(header_size + table + d.payload.size() + trailer == size);
    MSGPASS_FUZZ_CHECK(d.payload.data() == bytes.data() + header_size + table);
    if (d.ack) MSGPASS_FUZZ_CHECK(std::memcmp(&d.acked, data + size - trailer, trailer) == 0);
    if (group) {
        MSGPASS_FUZZ_CHECK(static_cast<DatagramType>(h.type) == DatagramType::data && h.reserved == 0);
        MSGPASS_FUZZ_CHECK(raw.to == 0 && raw.seq == 0 && raw.reserved >= 1 && raw.reserved <= max_group_entries);
    }
    MSGPASS_FUZZ_CHECK(h.magic == magic && h.version == protocol_version);
    MSGPASS_FUZZ_CHECK(h.partition == expect.partition && h.to == expect.self);
    MSGPASS_FUZZ_CHECK(knows(nullptr, h.from) && h.incarnation != 0);
    switch (static_cast<DatagramType>(h.type)) {
    case DatagramType::data:
        MSGPASS_FUZZ_CHECK((h.flags & ~(flag_first | flag_packed | flag_status_now | flag_ack)) == 0);
        if ((h.flags & flag_packed) != 0) { // whole messages, a frame each, tiling the payload exactly
            MSGPASS_FUZZ_CHECK((h.flags & flag_first) == 0);
            MSGPASS_FUZZ_CHECK(!group && h.length == d.payload.size() && h.offset >= 1);
            std::size_t at = 0, frames = 0;
            while (at < d.payload.size()) {
                FrameHeader f;
                MSGPASS_FUZZ_CHECK(d.payload.size() - at >= frame_header_size);
                std::memcpy(&f, d.payload.data() + at, frame_header_size);
                MSGPASS_FUZZ_CHECK(f.length >= frame_header_size && f.length - frame_header_size <= max_message);
                MSGPASS_FUZZ_CHECK(frame_bytes(f.length - frame_header_size) <= d.payload.size() - at);
                at += frame_bytes(f.length - frame_header_size);
                ++frames;
            }
            MSGPASS_FUZZ_CHECK(frames == h.offset);
            break;
        }
        MSGPASS_FUZZ_CHECK(h.length <= max_message);
        MSGPASS_FUZZ_CHECK(std::uint64_t{h.offset} + d.payload.size() <= h.length);
        MSGPASS_FUZZ_CHECK(((h.flags & flag_first) != 0) == (h.offset == 0));
        break;
    case DatagramType::nak:
        MSGPASS_FUZZ_CHECK(!d.payload.empty() && d.payload.size() % 16 == 0);
        MSGPASS_FUZZ_CHECK(d.payload.size() <= max_nak_ranges * 16);
        break;
    case DatagramType::status_request:
        MSGPASS_FUZZ_CHECK(d.payload.empty() && h.flags == 0 && h.seq == 0 && h.length == 0 && h.offset == 0);
        break;
    case DatagramType::skip:
        MSGPASS_FUZZ_CHECK(d.payload.empty() && h.flags == 0);
        MSGPASS_FUZZ_CHECK(h.length < h.seq && h.offset >= 1);
        break;
    case DatagramType::hello:
    case DatagramType::welcome: // nothing, or auth_key_file's nonce (hello) or MAC (welcome)
        MSGPASS_FUZZ_CHECK(d.payload.empty() || d.payload.size() == auth_payload_size);
        break;
    default:
        MSGPASS_FUZZ_CHECK(d.payload.empty());
        break;
    }
    return 0;
}
