// What the tcp tests and their peer program (tcp_peer) agree on: the partition as
// YAML text (the test loads the same text it hands to the peers, so that both sides
// run the same configuration, and a peer in another network namespace gets its
// addresses the same way) and the sizes of a mixed stream.
#pragma once

#include "../support/partition.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace msgpass::test {

// Sizes of a mixed stream: mostly small fragments, every 97th above 64 KiB (more
// than a socket takes in one write), every 1000th of 1 MiB.
inline std::size_t mixed_size(std::uint64_t seq) {
    if (seq % 1000 == 999) return 1024 * 1024 + seq % 7;
    if (seq % 97 == 0) return 64 * 1024 + 1 + (seq * 131) % 40000;
    return sizeof(PayloadHeader) + (seq * 131) % 2000;
}

struct NodeSpec {
    NodeId id = 0;
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;
    std::string machine; // "" for none
};

// A partition as the two YAML texts of its files.
struct PartitionText {
    std::string partition;
    std::string technology = "tcp";
    std::chrono::milliseconds peer_timeout{1000};
    std::uint64_t max_message_size = 16 * config::MiB;
    std::uint32_t send_queue_limit = 65536;
    std::string tcp_section;           // the value of `tcp:` as YAML, or "" for none
    std::vector<std::string> machines; // names; each gets an SCI node id
    std::vector<NodeSpec> nodes;

    [[nodiscard]] std::string network_yaml() const {
        return "partition: " + partition + "\ntechnology: " + technology +
               "\npeer_timeout: " + std::to_string(peer_timeout.count()) +
               "ms\nmax_message_size: " + std::to_string(max_message_size) +
               "\nsend_queue_limit: " + std::to_string(send_queue_limit) + "\n" +
               (tcp_section.empty() ? "" : "tcp: " + tcp_section + "\n");
    }
    [[nodiscard]] std::string nodes_yaml() const {
        std::string y;
        if (!machines.empty()) {
            y += "machines:\n";
            for (std::size_t i = 0; i < machines.size(); ++i)
                y += "  " + machines[i] + ": {sci: {node_id: " + std::to_string(4 * (i + 1)) + "}}\n";
        }
        y += "nodes:\n";
        for (const auto& n : nodes) {
            y += "  - {id: " + std::to_string(n.id) + ", host: \"" + n.host + "\", port: " + std::to_string(n.port);
            if (!n.machine.empty()) y += ", machine: " + n.machine;
            y += "}\n";
        }
        return y;
    }
    [[nodiscard]] config::Configuration load() const { return config::load_text(network_yaml(), nodes_yaml()); }
};

// n tcp nodes 1..n on 127.0.0.1, each on a port that is free now.
inline PartitionText local_partition(const std::string& partition, int n, std::chrono::milliseconds peer_timeout) {
    PartitionText p;
    p.partition = partition;
    p.peer_timeout = peer_timeout;
    const auto ports = free_ports(n);
    for (int i = 0; i < n && i < static_cast<int>(ports.size()); ++i)
        p.nodes.push_back({static_cast<NodeId>(i + 1), "127.0.0.1", ports[static_cast<std::size_t>(i)], ""});
    return p;
}

} // namespace msgpass::test
