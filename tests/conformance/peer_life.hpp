// What the peer-life tests and their peer program (tests/conformance/peer.cpp)
// agree on: a partition built in code from a few arguments, so that both sides run
// the same configuration on every technology. On `auto` the nodes alternate between
// two machines as in the conformance suite: node 1 reaches node 2 through tcp and
// node 3 through sci.
#pragma once

#include <msgpass/sci/options.hpp>

#include "../support/partition.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace msgpass::test {

struct PeerPartition {
    std::string technology;
    std::string partition;
    int nodes = 2;
    std::vector<std::uint16_t> ports; // one per node for tcp and auto, none for sci
    std::chrono::milliseconds peer_timeout{500};

    [[nodiscard]] config::Configuration configuration() const {
        auto c = make_configuration(technology, partition, nodes, [&](config::Configuration& c) {
            c.peer_timeout = peer_timeout;
            c.edit_section<sci::Options>().max_outst_buffers = 4;
        });
        for (auto& node : c.nodes) {
            const auto i = static_cast<std::size_t>(node.id - 1);
            if (technology == "sci") {
                node.host.clear();
                node.port = 0;
            } else if (i < ports.size()) {
                node.host = "127.0.0.1";
                node.port = ports[i];
            }
            if (technology == "auto") node.machine = node.id % 2 == 1 ? "m1" : "m2";
        }
        return c;
    }

    // The ports as "P1,P2,..." ("-" for none), as the peer program takes them.
    [[nodiscard]] std::string ports_text() const {
        std::string t;
        for (auto p : ports)
            t += (t.empty() ? "" : ",") + std::to_string(p);
        return t.empty() ? "-" : t;
    }

    static std::vector<std::uint16_t> parse_ports(const std::string& text) {
        std::vector<std::uint16_t> ports;
        if (text == "-") return ports;
        std::size_t start = 0;
        while (start < text.size()) {
            auto comma = text.find(',', start);
            if (comma == std::string::npos) comma = text.size();
            ports.push_back(static_cast<std::uint16_t>(std::stoul(text.substr(start, comma - start))));
            start = comma + 1;
        }
        return ports;
    }
};

} // namespace msgpass::test
