// A udp group sent to by IP multicast on the loopback interface, for the tests that
// broadcast (udp_test's UdpMulticast, the conformance suite's lossy broadcast): the
// static group becomes udp.multicast_group, with an address of this process's own
// (239.block.pid) and the given free port.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/udp/options.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace msgpass::test {

inline void loopback_multicast(config::Configuration& c, const std::string& group, std::uint8_t block,
                               std::uint16_t port) {
    auto& o = c.edit_section<udp::Options>();
    o.multicast_group = group;
    o.multicast_address =
        (239u << 24) | (std::uint32_t{block} << 16) | (static_cast<std::uint32_t>(::getpid()) & 0xffff);
    o.multicast_port = port;
    in_addr a{htonl(o.multicast_address)};
    char text[INET_ADDRSTRLEN];
    o.multicast = std::string(::inet_ntop(AF_INET, &a, text, sizeof text)) + ":" + std::to_string(port);
    o.multicast_interface = "127.0.0.1";
}

} // namespace msgpass::test
