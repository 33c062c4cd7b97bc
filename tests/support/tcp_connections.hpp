// What the tests that check tcp's one connection per pair read from the host: the
// ESTABLISHED connections to given listening ports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace msgpass::test {

// The ESTABLISHED TCP connections of this host whose local port is one of ports: the
// acceptor's end of each connection to those listeners (/proc/net/tcp, IPv4).
inline std::size_t established_to(const std::vector<std::uint16_t>& ports) {
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line); // the column names
    std::size_t n = 0;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state;
        fields >> slot >> local >> remote >> state;
        const auto colon = local.find(':');
        if (colon == std::string::npos || state != "01") continue;
        const auto port = static_cast<std::uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16));
        if (std::find(ports.begin(), ports.end(), port) != ports.end()) ++n;
    }
    return n;
}

} // namespace msgpass::test
