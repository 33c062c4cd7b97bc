// The handshake of the ip technologies: the connector's Hello says who it is (node
// id, partition, incarnation) and whom it wants; the acceptor checks it and answers
// with a Welcome, which tells where to resume (next_expected), or a refusal naming
// the reason. A technology names its protocol (magic and version) so that a tcp peer
// and a datagram one never take each other's handshakes. Every integer is
// little-endian: these structures are the wire image (docs/tcp.md, Handshake).
#pragma once

#include <msgpass/ip/refusal.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace msgpass::ip {

struct Protocol {
    std::uint32_t magic = 0; // the first 4 bytes of every Hello and Welcome
    std::uint16_t version = 0;
};

inline constexpr std::size_t max_partition_length = 96;

enum class Kind : std::uint16_t {
    hello = 1,   // connector -> acceptor: who I am, whom I want
    welcome = 2, // acceptor -> connector: accepted, resend from next_expected
    refusal = 3, // acceptor -> connector: refused for `reason`, then closed
};

// Connector -> acceptor, 128 bytes.
struct Hello {
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
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
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
    std::uint16_t kind = static_cast<std::uint16_t>(Kind::welcome);
    std::uint32_t from = 0; // the acceptor's node id
    std::uint32_t to = 0;   // the connector's node id
    std::uint64_t incarnation = 0;
    std::uint64_t next_expected = 0;
    std::uint32_t reason = 0; // Refusal, for Kind::refusal
    std::uint32_t reserved = 0;
};
static_assert(sizeof(Welcome) == 40);

// A Hello; a partition longer than max_partition_length is cut (the factories refuse
// such a partition at start-up).
[[nodiscard]] Hello make_hello(const Protocol& protocol, std::uint32_t from, std::uint32_t to,
                               std::uint64_t incarnation, std::string_view partition) noexcept;
[[nodiscard]] Welcome make_welcome(const Protocol& protocol, std::uint32_t from, std::uint32_t to,
                                   std::uint64_t incarnation, std::uint64_t next_expected) noexcept;
[[nodiscard]] Welcome make_refusal(const Protocol& protocol, std::uint32_t from, std::uint32_t to,
                                   std::uint64_t incarnation, Refusal reason) noexcept;

// What an acceptor expects of a Hello.
struct Acceptor {
    Protocol protocol;
    std::string partition;
    std::uint32_t self = 0;
    std::function<bool(std::uint32_t)> knows; // is this node id in the nodes file?
    bool authenticated = false;               // an auth_key_file is set: Hellos must be AuthHellos (auth.hpp)
    // Takes Hellos from 0, a client in no nodes file asking for an id (to: self or 0).
    bool newcomers = false;
};

// A check's outcome: accepted (Refusal::none), or the reason and what was found.
struct Verdict {
    Refusal refusal = Refusal::none;
    std::string detail; // e.g. "version 2", "partition 'other'", "from node 9"
    [[nodiscard]] bool accepted() const noexcept { return refusal == Refusal::none; }
};

// The acceptor's checks of a whole Hello whose magic matched, in this order:
// version (bad_version), kind: a Hello or an AuthHello's (protocol_error), partition
// length (bad_length), partition (wrong_partition), `to` (wrong_target; 0 too from a
// newcomer), `from`: in the nodes file and not the acceptor, or 0 (a newcomer) when
// the acceptor takes newcomers, incarnation non-zero (unknown_node), then the kind
// the acceptor wants: an AuthHello's with a key, a plain one without (unauthenticated).
[[nodiscard]] Verdict check_hello(const Hello& hello, const Acceptor& acceptor);

// What a connector makes of the answer to its Hello.
enum class Answer {
    welcome,    // accepted
    refusal,    // refused: refusal_reason() says why
    foreign,    // not this protocol's answer for this pair (magic, version, from, to)
    unexpected, // this pair's answer, of a kind that is neither
};
[[nodiscard]] Answer check_answer(const Welcome& answer, const Protocol& protocol, std::uint32_t self,
                                  std::uint32_t peer) noexcept;
// The reason of a refusal; none for a reason this side does not know.
[[nodiscard]] Refusal refusal_reason(const Welcome& answer) noexcept;

} // namespace msgpass::ip
