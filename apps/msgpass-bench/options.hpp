// The command line of msgpass-bench: its settings, the --help text (help2man makes
// the man page from it, so it is the manual), and the parser with its checks.
#pragma once

#include "patterns.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::bench {

inline const std::vector<std::uint64_t> default_sizes = {8,    16,   32,   64,    128,   256,    512,     1024,
                                                         2048, 4096, 8192, 16384, 65536, 262144, 1048576, 4194304};

// The largest --members: a self-spawned partition of the driver and its members stays
// within 1024 processes on this host (its sizes follow the node count, docs/configuration.md).
inline constexpr std::uint32_t max_members = 1023;

struct Settings {
    std::optional<std::string> technology;
    std::optional<std::string> pattern;
    std::string layer = "node"; // node | comm (--layer)
    std::vector<std::uint64_t> sizes = default_sizes;
    Budget budget;
    bool timed_by_default = true;
    std::uint32_t members = 4; // 1..max_members
    double rate = 100;         // fanin: messages per second of each member
    bool compare_scan = false; // fanin: each point also with every member looked at (rows fanin-scan)
    bool json = false;
    std::vector<int> cpus;
    std::optional<std::string> config_file;
    std::optional<std::string> nodes_file;
    std::optional<NodeId> node_id;
    // One-side mode, fanin: when the partition was launched, in seconds since the epoch
    // (CLOCK_REALTIME, which every network namespace of a machine shares): the first
    // point reports the start from it (--started-at).
    std::optional<double> started_at;
    std::vector<std::string> sets;
    bool reference = false;
    // --reference only: the floors to run (shm, memcpy, tcp, udp; empty: all), and
    // where the ends of the tcp and udp floors are (reference::Endpoints).
    std::vector<std::string> floors;
    std::string floor_driver_address = "127.0.0.1";
    std::string floor_peer_address = "127.0.0.1";
    std::string floor_netns;
    Wait wait = Wait::block;
    // --contention N: each point runs quiet, then again beside N busy loops (BusyLoops).
    std::uint32_t contention = 0;
    // --api bytes: pingpong and stream through Node::send_bytes and Node::receive_view.
    bool bytes_api = false;
    // hidden: the self-spawned peer
    std::string role;
    std::string partition;
    std::uint32_t node_count = 2;
    std::uint64_t max_size = 0;
    std::uint32_t peer_index = 0;
    std::vector<std::uint16_t> ports; // of nodes 1..node_count, chosen by the driver
};

inline bool group_pattern(const std::string& p) {
    return p == "broadcast" || p == "gather" || p == "fanin" || p == "fanin-scan";
}

// Parses the command line; with --help, prints the help, sets `help` and returns.
// Throws boost::program_options::error (or std::invalid_argument from the size
// list) naming what was wrong: exit status 2.
Settings parse(int argc, char** argv, bool& help);

} // namespace msgpass::bench
