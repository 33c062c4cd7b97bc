// The handshake of the ip technologies (see handshake.hpp).
#include <msgpass/ip/handshake.hpp>

#include <msgpass/ip/auth.hpp>

#include <algorithm>
#include <cstring>

namespace msgpass::ip {

Hello make_hello(const Protocol& protocol, std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                 std::string_view partition) noexcept {
    Hello h;
    h.magic = protocol.magic;
    h.version = protocol.version;
    h.from = from;
    h.to = to;
    h.incarnation = incarnation;
    h.partition_length = std::min(partition.size(), max_partition_length);
    std::memcpy(h.partition, partition.data(), h.partition_length);
    return h;
}

Welcome make_welcome(const Protocol& protocol, std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                     std::uint64_t next_expected) noexcept {
    Welcome w;
    w.magic = protocol.magic;
    w.version = protocol.version;
    w.from = from;
    w.to = to;
    w.incarnation = incarnation;
    w.next_expected = next_expected;
    return w;
}

Welcome make_refusal(const Protocol& protocol, std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                     Refusal reason) noexcept {
    Welcome w = make_welcome(protocol, from, to, incarnation, 0);
    w.kind = static_cast<std::uint16_t>(Kind::refusal);
    w.reason = static_cast<std::uint32_t>(reason);
    return w;
}

Verdict check_hello(const Hello& h, const Acceptor& acceptor) {
    if (h.version != acceptor.protocol.version) return {Refusal::bad_version, "version " + std::to_string(h.version)};
    if (h.kind != static_cast<std::uint16_t>(Kind::hello) && h.kind != kind_hello_auth) {
        return {Refusal::protocol_error, "handshake kind " + std::to_string(h.kind)};
    }
    if (h.partition_length > max_partition_length) {
        return {Refusal::bad_length, "partition length " + std::to_string(h.partition_length)};
    }
    const std::string_view partition(h.partition, static_cast<std::size_t>(h.partition_length));
    if (partition != acceptor.partition)
        return {Refusal::wrong_partition, "partition '" + std::string(partition) + "'"};
    // A client in no nodes file (from 0) does not know the acceptor's id: it may say 0.
    const bool newcomer = h.from == 0;
    if (h.to != acceptor.self && !(newcomer && h.to == 0)) {
        return {Refusal::wrong_target, "addressed to node " + std::to_string(h.to)};
    }
    if (newcomer && !acceptor.newcomers) {
        return {Refusal::unknown_node, "from a client in no nodes file (node id 0): this node takes no clients"};
    }
    if (!newcomer && (h.from == acceptor.self || !acceptor.knows || !acceptor.knows(h.from))) {
        return {Refusal::unknown_node, "from node " + std::to_string(h.from)};
    }
    if (h.incarnation == 0) return {Refusal::unknown_node, "from node " + std::to_string(h.from)};
    if (!hello_kind_matches(h, acceptor.authenticated)) {
        return {Refusal::unauthenticated,
                acceptor.authenticated
                    ? "node " + std::to_string(h.from) + " has no auth_key_file, this node has"
                    : "node " + std::to_string(h.from) + " has an auth_key_file, this node has none"};
    }
    return {};
}

Answer check_answer(const Welcome& w, const Protocol& protocol, std::uint32_t self, std::uint32_t peer) noexcept {
    if (w.magic != protocol.magic || w.version != protocol.version || w.from != peer || w.to != self) {
        return Answer::foreign;
    }
    if (w.kind == static_cast<std::uint16_t>(Kind::refusal)) return Answer::refusal;
    if (w.kind != static_cast<std::uint16_t>(Kind::welcome)) return Answer::unexpected;
    return Answer::welcome;
}

Refusal refusal_reason(const Welcome& w) noexcept {
    return w.reason < static_cast<std::uint32_t>(Refusal::kinds) ? static_cast<Refusal>(w.reason) : Refusal::none;
}

} // namespace msgpass::ip
