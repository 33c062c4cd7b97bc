// The address string of a peer found at run time (BMI's BMI_addr_lookup): a process
// that is in no nodes file reaches a server by a URL-like string, and
// NodeFactory::lookup turns it into a node. The form is `technology://where`; which
// technologies take one, and why the others do not, is in docs/communicator.md
// ("Peers found at run time"). This file only parses and formats: it names no
// technology's code.
//
//   tcp://host:port        host: a name, an IPv4 address or [an IPv6 address]
//   udp://host:port        a udp node (docs/udp.md, "Clients in no nodes file")
//   sci://...              not an address form: sci peers share one host's memory and
//                          are the nodes of the nodes file (parse refuses it, saying why)
#pragma once

#include <msgpass/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace msgpass {

struct PeerAddress {
    std::string technology; // "tcp", "udp"
    std::string host;       // without brackets
    std::uint16_t port = 0; // 1 to 65535
};

// Parses an address string. Throws UsageError naming the string and what is wrong
// with it: no "://", an unknown technology, sci, an empty host, a port missing, not a
// number, 0 or above 65535, an unclosed bracket, text after the port.
[[nodiscard]] PeerAddress parse_address(std::string_view text);

// The string parse_address reads back: "tcp://host:port", an IPv6 host in brackets.
[[nodiscard]] std::string to_string(const PeerAddress& address);

} // namespace msgpass
