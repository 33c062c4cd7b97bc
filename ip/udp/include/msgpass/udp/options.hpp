// The configuration of the udp technology: its section `udp:` at the top of the
// network file (and --set udp.<key>=value), read by udp::Options and registered under
// the name "udp" by register_technology() (schema()). Every key is optional; the
// udp code reads it as configuration.section<udp::Options>(). docs/udp.md.
#pragma once

#include <msgpass/config.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace msgpass::udp {

struct Options {
    // Bytes per datagram, header included: 512 to 65507; 1472 fits a 1500-byte MTU.
    std::uint64_t datagram_size = 1472;
    // SO_RCVBUF and SO_SNDBUF asked of the kernel (a warning names net.core.rmem_max
    // when it gives less); 64KiB to 1GiB.
    std::uint64_t socket_buffer = 4 * config::MiB;
    // Datagrams a receiver takes beyond the next one it expects (its window): 16 to 65536.
    std::uint64_t window = 1024;
    // Fault injection on receipt, for tests and benchmarks: fractions of the data,
    // status and NAK datagrams dropped, delivered twice, held back behind the next one.
    double inject_loss = 0;
    double inject_duplicate = 0;
    double inject_reorder = 0;
    // At the sender, for tests and benchmarks: the fraction of the group's datagrams
    // that are not sent to udp.multicast at their first transmission (a loss every
    // member sees alike; counted as injected loss at the sender).
    double inject_multicast_loss = 0;
    std::uint64_t inject_seed = 1;
    // Broadcast to one static group by IP multicast (docs/udp.md): the group's name
    // (multicast_group), its IPv4 multicast address and port (multicast,
    // "239.1.2.3:4000"), the TTL of its datagrams (0 to 255, default 1: one subnet) and
    // the IPv4 address of the interface it uses (default: each node's own host).
    // Empty: every group sends per member.
    std::string multicast_group;
    std::string multicast;
    std::uint32_t multicast_address = 0; // host order, parsed from multicast
    std::uint16_t multicast_port = 0;
    std::uint64_t multicast_ttl = 1;
    std::string multicast_interface;
    config::Location multicast_group_at; // where multicast_group was written (the group check)
    // Clients in no nodes file this node takes at once (docs/udp.md, "Clients in no
    // nodes file"): 0 (the default) to 65536; 0: a newcomer's hello is dropped.
    std::uint32_t max_clients = 0;
    // Not a key of the network file (set in code, for tests): how long a receiver may
    // owe a status before it sends one when nothing else makes it send one sooner
    // (docs/udp.md, "Reliability and flow control"); tests make it long to show what
    // does.
    std::chrono::microseconds status_delay{1000};

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
    // multicast_group and multicast go together.
    void check(const config::Value& section) const;
    [[nodiscard]] bool multicasting() const noexcept { return !multicast_group.empty() && multicast_port != 0; }
};

// "udp": Options at the top of the network file; no node scope, no machine section;
// a check that multicast_group names a static group that fits a datagram.
config::TechnologySchema schema();

} // namespace msgpass::udp
