// Results of msgpass-bench: one Result per technology x pattern x size, summarised
// from per-iteration samples, and written as the JSON line of
// shared/design/BENCHMARKS.md or as a row of the human table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::bench {

// One-way latency in microseconds.
struct Latency {
    double mean = 0;
    double p50 = 0;
    double p99 = 0;
    double p999 = 0;
    double max = 0;
};

struct Result {
    std::string technology;
    std::string pattern;
    std::uint64_t size = 0;
    std::uint64_t iterations = 0;
    std::optional<Latency> one_way_us;
    double msgs_per_s = 0;
    double MBps = 0; // 10^6 bytes per second
    std::optional<std::uint32_t> members;
    std::optional<double> cpu_percent; // idle pattern only
    std::optional<double> seconds;     // idle pattern only
    // fanin only: the receiver thread's CPU time per message (us), the rate each
    // member sent at, how long the partition took until the driver and every member
    // had reached each other (from the spawn of the members; the first point only),
    // and the memory per node: /dev/shm bytes used and objects of the partition over
    // its nodes, the driver's RSS and the members' mean RSS (KiB). process_cpu_us_per_msg:
    // the driver process's CPU time over the same messages (its receiving thread and the
    // technology's threads: tcp's background thread, which writes some acknowledgements).
    std::optional<double> cpu_us_per_msg;
    std::optional<double> process_cpu_us_per_msg;
    std::optional<double> rate_per_member;
    std::optional<double> start_s;
    std::optional<double> shm_kib_per_node;
    std::optional<double> shm_objects_per_node;
    std::optional<double> rss_kib;
    std::optional<double> member_rss_kib;
    // fanin only: the largest RSS of a member (KiB), and the open file descriptors of
    // the driver, the members' mean and the largest (sockets, shared-memory objects,
    // event and timer descriptors: what a node holds for the peers it talks to).
    std::optional<double> member_rss_max_kib;
    std::optional<double> fds;
    std::optional<double> member_fds;
    std::optional<double> member_fds_max;
    // fanin only: messages the members reported sending (warm-up and end markers
    // included) that the driver did not receive.
    std::optional<double> lost;
};

// Summarises samples (microseconds); sorts them. Empty input gives zeros.
Latency summarize(std::vector<double>& samples_us);

// The JSON object on one line (no newline). Non-finite numbers are written as null.
std::string to_json(const Result& result);

// "8", "1KiB", "4MiB": the size as the tables show it.
std::string size_label(std::uint64_t size);

// Parses "8,64,1KiB"; throws std::invalid_argument naming the bad item.
std::vector<std::uint64_t> parse_sizes(const std::string& list);

} // namespace msgpass::bench
