// Why an ip technology refused a connection in its handshake, or closed one that
// broke the protocol afterwards: carried in a refusal, counted per reason
// (TcpNodeFactory::listener_stats), and named in the log.
#pragma once

#include <cstdint>
#include <string_view>

namespace msgpass::ip {

enum class Refusal : std::uint32_t {
    none = 0,
    bad_magic = 1,         // not a msgpass connection (closed without answer)
    bad_version = 2,       // another protocol version
    wrong_partition = 3,   // another partition
    unknown_node = 4,      // `from` is not in the nodes file, or is the acceptor itself
    wrong_target = 5,      // `to` is not the acceptor's node id
    bad_length = 6,        // a length field beyond its limit
    handshake_timeout = 7, // the connection did not send a whole Hello in time
    too_many = 8,          // too many connections waiting for their Hello
    protocol_error = 9,    // a frame that breaks the protocol after the handshake
    unauthenticated = 10,  // one side has an auth_key_file and the other none (docs/security.md)
    bad_proof = 11,        // a proof made with another key, or for another challenge (a replay)
    no_descriptors = 12,   // this process is out of file descriptors: accepted and closed at once
    crossed = 13,          // tcp: both nodes of a pair connected at once; the lower id's connection stays (not counted)
    kinds = 14,
};

[[nodiscard]] constexpr std::string_view describe(Refusal r) noexcept {
    switch (r) {
    case Refusal::none:
        return "accepted";
    case Refusal::bad_magic:
        return "bad magic";
    case Refusal::bad_version:
        return "unsupported protocol version";
    case Refusal::wrong_partition:
        return "wrong partition";
    case Refusal::unknown_node:
        return "node id not in the nodes file";
    case Refusal::wrong_target:
        return "addressed to another node";
    case Refusal::bad_length:
        return "length out of range";
    case Refusal::handshake_timeout:
        return "no handshake in time";
    case Refusal::too_many:
        return "too many pending connections";
    case Refusal::protocol_error:
        return "protocol error";
    case Refusal::unauthenticated:
        return "authentication expected on one side only";
    case Refusal::bad_proof:
        return "wrong key or replayed handshake";
    case Refusal::no_descriptors:
        return "out of file descriptors";
    case Refusal::crossed:
        return "crossed with this node's own connection";
    case Refusal::kinds:
        break;
    }
    return "unknown";
}

} // namespace msgpass::ip
