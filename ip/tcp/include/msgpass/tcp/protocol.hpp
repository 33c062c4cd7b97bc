// The tcp wire protocol (docs/tcp.md): what one msgpass process writes on a TCP
// connection to another. A pair of nodes shares one two-way connection, opened by
// the first to send (the lower node id's stays when both connect at once); each
// data frame carries its writer's acknowledgement of the other direction. Every integer is little-endian (the hosts of
// a DAQ partition are x86 or ARM64; a big-endian host would have to swap, and is refused by the magic).
//
// A connection starts with the handshake of ip/common (msgpass/ip/handshake.hpp): a
// Hello from the connector and a Welcome (or a refusal) from the acceptor, under
// tcp's magic and version; then frames follow (msgpass/tcp/frame.hpp), each a
// FrameHeader and `length` bytes. Every length is checked against max_message_size
// before anything is allocated.
#pragma once

#include <msgpass/ip/handshake.hpp>
#include <msgpass/tcp/frame.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>

namespace msgpass::tcp {

inline constexpr std::uint32_t magic = 0x4354504d;   // "MPTC" in memory order
inline constexpr std::uint16_t protocol_version = 2; // 2: one two-way connection per pair (docs/tcp.md)
inline constexpr ip::Protocol protocol{magic, protocol_version};

using ip::describe;
using ip::Hello;
using ip::Kind;
using ip::max_partition_length;
using ip::Refusal;
using ip::Welcome;

// A Hello of the tcp protocol; the partition must fit (checked by the factory at start-up).
[[nodiscard]] inline Hello make_hello(std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                                      std::string_view partition) noexcept {
    return ip::make_hello(protocol, from, to, incarnation, partition);
}

} // namespace msgpass::tcp
