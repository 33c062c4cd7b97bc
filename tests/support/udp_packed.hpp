// Test support: a packed udp data datagram built by hand (docs/udp.md, "Packed
// datagrams"), for the udp tests that check how a receiver takes or drops one and for
// the fuzz seeds. Header-only; needs only the udp protocol header.
#pragma once

#include <msgpass/udp/protocol.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace msgpass::test {

// Header h with the length, offset (frame count) and flags of a pack, then a frame
// per size (bytes 0x5a), each padded as the sender pads it.
inline std::vector<std::byte> packed_datagram(udp::DatagramHeader h, const std::vector<std::uint32_t>& sizes) {
    std::vector<std::byte> frames;
    for (const std::uint32_t size : sizes) {
        const std::size_t at = frames.size();
        frames.resize(at + udp::frame_bytes(size), std::byte{0});
        const udp::FrameHeader f{static_cast<std::uint32_t>(udp::frame_header_size + size), 0};
        std::memcpy(frames.data() + at, &f, sizeof f);
        std::fill_n(frames.begin() + static_cast<std::ptrdiff_t>(at + udp::frame_header_size), size, std::byte{0x5a});
    }
    h.flags = udp::flag_packed;
    h.length = frames.size();
    h.offset = static_cast<std::uint32_t>(sizes.size());
    std::vector<std::byte> bytes(udp::header_size + frames.size());
    std::memcpy(bytes.data(), &h, udp::header_size);
    if (!frames.empty()) std::memcpy(bytes.data() + udp::header_size, frames.data(), frames.size());
    return bytes;
}

} // namespace msgpass::test
