// What msgpass-top shows, independent of how: the nodes of a partition on this host
// read from their statistics pages (msgpass/kit/stats_page.hpp), one row each with
// rates from two snapshots, the totals per static group, and the JSON and plain-text
// renderings that --once prints (the ncurses screen in main.cpp draws the same rows).
#pragma once

#include <msgpass/kit/stats_page.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::top {

// Which nodes to show: every page of the partition, plus, from the files, the nodes
// that have none (shown as absent).
struct Source {
    std::string user;
    std::string partition;
    struct Expected {
        std::uint32_t id = 0;
        std::string name;
        std::string host;
        std::vector<std::string> groups;
    };
    std::vector<Expected> expected;   // from --config/--nodes; empty with --partition
    std::string technology;           // of the files ("" with --partition)
    std::vector<std::string> remotes; // --remote HOST:PORT: other hosts' msgpass-top --serve
};

// One read of every page of the partition.
struct Sample {
    std::map<std::uint32_t, kit::PageView> pages;
    std::vector<std::string> problems; // pages that could not be read
};

[[nodiscard]] Sample take_sample(const Source& source);

struct Rates {
    double msgs_in = 0, msgs_out = 0, mb_in = 0, mb_out = 0;
};

struct PeerRow {
    std::uint32_t id = 0;
    NodeStats stats;
    Rates rates;
    std::uint64_t losses = 0;
    bool lost = false;
    std::string last_error;
};

struct Row {
    std::uint32_t id = 0;
    std::string name, technology, host, state;
    bool torn = false; // dead while writing its page: each counter that snapshot's or the one before
    long pid = 0;
    std::vector<std::string> groups;
    std::optional<Rates> rates; // none for a node not running (dead, absent, first sample)
    NodeStats total;            // the sums over its peers
    std::uint64_t losses = 0;
    std::uint64_t peers_lost = 0;
    std::string last_error;
    std::vector<PeerRow> peers;
};

// The rows of the later sample, rates against the earlier one.
[[nodiscard]] std::vector<Row> make_rows(const Source& source, const Sample* earlier, const Sample& later);

struct GroupTotal {
    std::string group;
    std::size_t nodes = 0;
    Rates rates;
    NodeStats total;
    std::uint64_t losses = 0, peers_lost = 0;
};
[[nodiscard]] std::vector<GroupTotal> group_totals(const std::vector<Row>& rows);

// One JSON object on one line.
[[nodiscard]] std::string json(const std::string& partition, const Row& row);
// The table of --once without --json, with the group totals under it.
[[nodiscard]] std::string table(const std::vector<Row>& rows, bool with_peers);

} // namespace msgpass::top
