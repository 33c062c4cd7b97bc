// The tcp wire protocol (docs/tcp.md): what one msgpass process writes on a TCP
// connection to another. A node opens one connection to each peer it sends to and
// accepts the connections of the peers that send to it, so that each connection
// carries data in one direction (connector -> acceptor) and acknowledgements in the
// other. Every integer is little-endian (the hosts of a DAQ partition are x86 or
// ARM64; a big-endian host would have to swap, and is refused by the magic).
//
// A connection starts with a Hello from the connector and a Welcome (or a refusal)
// from the acceptor; then frames follow, each a FrameHeader and `length` bytes.
// Every length is checked against max_message_size before anything is allocated.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace msgpass::tcp {

inline constexpr std::uint32_t magic = 0x4354504d; // "MPTC" in memory order
inline constexpr std::uint16_t protocol_version = 1;
inline constexpr std::size_t max_partition_length = 96;

enum class Kind : std::uint16_t {
    hello = 1,   // connector -> acceptor: who I am, whom I want
    welcome = 2, // acceptor -> connector: accepted, resend from next_expected
    refusal = 3, // acceptor -> connector: refused for `reason`, then closed
};

// Why an acceptor refused a connection (Welcome::reason of a refusal) or closed it
// without answering (counted per reason in the factory's statistics).
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
    kinds = 10,
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
    case Refusal::kinds:
        break;
    }
    return "unknown";
}

// Connector -> acceptor, 128 bytes.
struct Hello {
    std::uint32_t magic = tcp::magic;
    std::uint16_t version = protocol_version;
    std::uint16_t kind = static_cast<std::uint16_t>(Kind::hello);
    std::uint32_t from = 0;             // the connector's node id
    std::uint32_t to = 0;               // the acceptor's node id
    std::uint64_t incarnation = 0;      // random per process start: tells a restart
    std::uint64_t partition_length = 0; // bytes used in partition (<= max_partition_length)
    char partition[max_partition_length] = {};
};
static_assert(sizeof(Hello) == 128);

// Acceptor -> connector, 40 bytes. For a welcome, next_expected is the sequence
// number of the first message from the connector's incarnation the acceptor has
// not received (0 for an incarnation it does not know): the connector resends
// everything from there and drops what came before (it was received).
struct Welcome {
    std::uint32_t magic = tcp::magic;
    std::uint16_t version = protocol_version;
    std::uint16_t kind = static_cast<std::uint16_t>(Kind::welcome);
    std::uint32_t from = 0; // the acceptor's node id
    std::uint32_t to = 0;   // the connector's node id
    std::uint64_t incarnation = 0;
    std::uint64_t next_expected = 0;
    std::uint32_t reason = 0; // Refusal, for Kind::refusal
    std::uint32_t reserved = 0;
};
static_assert(sizeof(Welcome) == 40);

enum class FrameType : std::uint32_t {
    data = 1,    // connector -> acceptor: one message of `length` bytes, number `seq`
    ack = 2,     // acceptor -> connector: every message before `seq` was received
    goodbye = 3, // either way: the sender closes cleanly (its factory is destroyed)
};

// Every frame after the handshake, 24 bytes, followed by `length` bytes (data only).
struct FrameHeader {
    std::uint64_t length = 0; // payload bytes; <= max_message_size, else the connection is closed
    std::uint64_t seq = 0;    // data: per-pair sequence number from 0; ack: next expected
    std::uint32_t type = 0;   // FrameType
    std::uint32_t flags = 0;  // 0 (reserved)
};
static_assert(sizeof(FrameHeader) == 24);

// Fills a Hello; the partition must fit (checked by the factory at start-up).
[[nodiscard]] inline Hello make_hello(std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                                      std::string_view partition) noexcept {
    Hello h;
    h.from = from;
    h.to = to;
    h.incarnation = incarnation;
    h.partition_length = partition.size() <= max_partition_length ? partition.size() : max_partition_length;
    std::memcpy(h.partition, partition.data(), h.partition_length);
    return h;
}

} // namespace msgpass::tcp
