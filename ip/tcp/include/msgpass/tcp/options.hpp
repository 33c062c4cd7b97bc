// The configuration of the tcp technology: its section `tcp:` at the top of the
// network file (and --set tcp.<key>=value), read by tcp::Options and registered under
// the name "tcp" by register_technology() (schema()). Every key is optional; without
// the section tcp behaves as docs/tcp.md describes. The tcp code reads it as
// configuration.section<tcp::Options>().
#pragma once

#include <msgpass/config.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::tcp {

struct Options {
    // How long an accepted connection may take to send its whole Hello; absent:
    // min(peer_timeout, 2 s). 1ms to 1 min.
    std::optional<std::chrono::milliseconds> handshake_timeout;
    // A receiver acknowledges at least every ack_every messages (1 to 65536) or
    // ack_bytes bytes (1 byte to 1GiB); the sender keeps what it sent until then.
    std::uint64_t ack_every = 64;
    std::uint64_t ack_bytes = 2 * config::MiB;
    // A blocking receive from one node reads its socket for up to this many
    // microseconds (0 to 10000) before it sleeps in ppoll(): a reply within it costs
    // no wake-up. 0: sleep at once.
    std::uint64_t receive_spin_us = 50;
    // Clients in no nodes file (peers found at run time, NodeFactory::lookup) this
    // node takes at once, 0 to 65536; 0 (the default): none, their Hello is refused
    // (unknown_node). One that left or was lost frees its place.
    std::uint32_t max_clients = 0;
    // This node reads small data frames in their 8-byte compact form and says so in
    // its handshake (docs/tcp.md, "Compact frames"); its peers then send them to it.
    // On by default: measured 1.06-1.13x the rate of full headers on a 64 B loopback
    // stream (docs/benchmarks.md, "Issue 25, eighth session"). false: this node asks
    // for full headers (it still sends compact frames to a peer that asks for them).
    bool compact_frames = true;

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
};

// "tcp": Options at the top of the network file; no node scope, no machine section.
config::TechnologySchema schema();

} // namespace msgpass::tcp
