// msgpass-bench: measures msgpass (pingpong, stream, broadcast, gather, idle) and the
// floors of the machine (--reference), as shared/design/BENCHMARKS.md specifies.
// With no arguments it starts its peer itself (fork+exec of this program with the
// hidden --role peer), runs pingpong and stream over the sizes of Table 1 of the SCI
// seed and beyond, and prints a table beside the seed's 1999 figures and the floors
// measured in the same run. With --config/--nodes/--node-id it runs one side only:
// the lowest node id drives and prints; the others serve it.
#include "comm_layer.hpp"
#include "options.hpp"
#include "patterns.hpp"
#include "reference.hpp"
#include "report.hpp"
#include "spawn.hpp"
#include "table.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <unistd.h>

namespace po = boost::program_options;
using namespace msgpass;
using namespace msgpass::bench;

namespace {

// The steady-clock time of a wall-clock time in seconds since the epoch (--started-at).
std::optional<std::chrono::steady_clock::time_point> launched(std::optional<double> epoch_s) {
    if (!epoch_s) return std::nullopt;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const double ago = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9 - *epoch_s;
    return std::chrono::steady_clock::now() -
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(ago));
}

int run(int argc, char** argv) {
    msgpass::register_builtin_technologies(); // before its configuration loads
    bool help = false;
    Settings s = parse(argc, argv, help);
    if (help) return 0;
    const Progress progress;

    if (s.role == "peer") {
        pin(s.cpus, s.peer_index);
        auto factory = NodeFactory::create(self_spawn_configuration(s, s.partition, s.node_count, s.max_size),
                                           s.node_id.value_or(0));
        const int rc = serve(*factory, 1);
        return rc == 0 && s.layer == "comm" ? comm_serve(*factory, 1) : rc;
    }
    if (!s.role.empty()) throw po::error("unknown role '" + s.role + "'");

    if (!s.cpus.empty()) reference::set_child_cpu(s.cpus[1 % s.cpus.size()]);
    if (s.reference) {
        reference::set_endpoints({s.floor_driver_address, s.floor_peer_address, s.floor_netns});
        pin(s.cpus, 0);
        auto results = run_reference(s, progress);
        if (!s.json) print_results(results);
        return 0;
    }

    const bool table = !s.pattern.has_value();
    std::vector<std::string> patterns =
        table ? std::vector<std::string>{"pingpong", "stream"} : std::vector<std::string>{*s.pattern};
    if (s.compare_scan) patterns = {"fanin-scan", "fanin"};
    if (table && s.timed_by_default) s.budget.seconds = 0.4;
    // The communicator's messages carry a 24-byte envelope: room for it.
    const std::uint64_t max_size = *std::max_element(s.sizes.begin(), s.sizes.end()) + (s.layer == "comm" ? 64 : 0);

    if (s.config_file || s.nodes_file || s.node_id) {
        std::vector<std::string> overrides;
        if (s.technology) overrides.push_back("technology=" + *s.technology);
        overrides.insert(overrides.end(), s.sets.begin(), s.sets.end());
        const auto configuration =
            config::load(s.config_file.value_or("network.yaml"), s.nodes_file.value_or("nodes.yaml"), overrides);
        const NodeId self = config::resolve_self_id(configuration, s.node_id);
        std::vector<NodeId> ids;
        for (const auto& n : configuration.nodes)
            ids.push_back(n.id);
        std::sort(ids.begin(), ids.end());
        const NodeId driver_id = ids.front();
        auto factory = NodeFactory::create(configuration, self);
        if (self != driver_id) {
            const auto index = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), self) - ids.begin());
            pin(s.cpus, index);
            return serve(*factory, driver_id);
        }
        pin(s.cpus, 0);
        std::vector<NodeId> peers(ids.begin() + 1, ids.end());
        Driver driver(*factory, peers, {}, s.wait);
        driver.use_bytes(s.bytes_api);
        driver.fanin(s.rate, launched(s.started_at), configuration.partition);
        driver.static_groups(configuration.groups);
        auto results = drive(driver, s, patterns, progress);
        driver.quit();
        if (!s.json) print_results(results);
        return 0;
    }

    // Self-spawning mode. For the table, the floors of each size run just before its
    // points (the peer waits asleep meanwhile).
    std::map<std::uint64_t, Result> floor;
    std::map<std::uint64_t, Result> ring;
    pin(s.cpus, 0);
    std::function<void(std::uint64_t)> floors;
    if (table && !s.json) {
        floors = [&](std::uint64_t size) {
            const Budget quick{0, 0.1};
            progress.show("floors " + size_label(size));
            // tcp is measured against raw loopback TCP, udp against raw loopback
            // UDP (up to the largest datagram; none beyond), every other technology
            // against shared memory.
            if (s.technology == std::optional<std::string>("tcp")) {
                floor[size] = reference::tcp_pingpong(size, quick);
                ring[size] = reference::tcp_stream(size, quick);
            } else if (s.technology == std::optional<std::string>("udp")) {
                if (auto r = reference::udp_pingpong(size, quick)) floor[size] = *r;
                if (auto r = reference::udp_stream(size, quick)) ring[size] = *r;
            } else {
                floor[size] = reference::shm_pingpong(size, quick);
                ring[size] = reference::shm_ring(size, quick);
            }
        };
    }
    const bool group = s.pattern && group_pattern(*s.pattern);
    const std::uint32_t count = 1 + (group ? s.members : 1);
    const std::string partition = "bench-" + std::to_string(::getpid());
    s.ports = free_ports(count);
    const auto configuration = self_spawn_configuration(s, partition, count, max_size);
    const StaleSegments cleanup(configuration.partition);
    Peers peers;
    auto factory = NodeFactory::create(configuration, 1);
    const auto spawned = std::chrono::steady_clock::now();
    peers.start(s, configuration.partition, count, max_size);
    std::vector<NodeId> peer_ids;
    for (NodeId id = 2; id <= count; ++id)
        peer_ids.push_back(id);
    Driver driver(
        *factory, peer_ids, [&] { peers.check(); }, s.wait);
    driver.use_bytes(s.bytes_api);
    driver.static_groups(configuration.groups);
    driver.fanin(s.rate, spawned, configuration.partition);
    auto results = drive(driver, s, patterns, progress, floors);
    driver.quit();
    if (s.layer == "comm") {
        progress.show("the same through the communicator");
        const auto through_comm = comm_drive(*factory, 2, s.sizes, s.budget);
        progress.clear();
        peers.stop(std::chrono::milliseconds(5000));
        print_comm_table(s.sizes, results, through_comm, std::string(factory->technology()));
        return 0;
    }
    if (floors && s.technology != std::optional<std::string>("tcp") &&
        s.technology != std::optional<std::string>("udp")) {
        warn_if_shared_cpu(floor);
    }
    peers.stop(std::chrono::milliseconds(5000));
    if (s.json) return 0;
    if (!table) {
        print_results(results);
        return 0;
    }
    std::map<std::uint64_t, Result> ping;
    std::map<std::uint64_t, Result> stream;
    for (const auto& r : results)
        (r.pattern.rfind("pingpong", 0) == 0 ? ping : stream)[r.size] = r;
    print_default_table(s.sizes, ping, stream, floor, ring, std::string(factory->technology()));
    return 0;
}

} // namespace

// An error message starts on a fresh line when a progress line was showing.
void end_progress_line() {
    if (::isatty(STDERR_FILENO) != 0) std::fputs("\r\033[K", stderr);
}

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const PeerLost& e) {
        std::fflush(stdout);
        end_progress_line();
        // The layer words its own message; lead with the one a reader looks for.
        const std::string what = e.what();
        const std::string lead = "peer " + std::to_string(e.peer()) + " lost";
        if (what.rfind(lead, 0) == 0)
            std::fprintf(stderr, "msgpass-bench: %s\n", what.c_str());
        else
            std::fprintf(stderr, "msgpass-bench: %s: %s\n", lead.c_str(), what.c_str());
        return 3;
    } catch (const po::error& e) {
        std::fprintf(stderr, "msgpass-bench: %s (see --help)\n", e.what());
        return 2;
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "msgpass-bench: %s (see --help)\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        end_progress_line();
        std::fprintf(stderr, "msgpass-bench: %s\n", e.what());
        return 1;
    }
}
