// The runner and printer of msgpass-bench (table.hpp).
#include "table.hpp"

#include "reference.hpp"
#include "spawn.hpp"

#include <algorithm>
#include <iostream>

namespace msgpass::bench {

namespace {

// Table 1 of the SCI seed (1999): bandwidth MB/s and one-way latency us.
const std::map<std::uint64_t, std::pair<double, double>> seed_table = {
    {8, {0.7, 15}},  {16, {1.4, 15}},  {32, {3.0, 15}},  {64, {6.0, 15}},  {128, {9.8, 18}}, {256, {18, 19}},
    {512, {28, 23}}, {1024, {39, 29}}, {2048, {49, 43}}, {4096, {56, 70}}, {8192, {60, 125}}};

std::string fixed(double v, int decimals) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, v);
    return text;
}

std::string compact(double v) {
    char text[32];
    if (v >= 1e6)
        std::snprintf(text, sizeof text, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        std::snprintf(text, sizeof text, "%.1fk", v / 1e3);
    else
        std::snprintf(text, sizeof text, "%.0f", v);
    return text;
}

std::string ratio(double v, double floor) {
    return floor > 0 && v > 0 ? fixed(v / floor, 2) + "x" : "-";
}

} // namespace

void emit_json(const Result& r) {
    std::cout << to_json(r) << '\n' << std::flush;
}

void print_results(const std::vector<Result>& results) {
    std::printf("%-20s %-10s %8s %10s %10s %10s %10s %10s %10s\n", "technology", "pattern", "size", "MB/s", "msgs/s",
                "p50 us", "p99 us", "p99.9 us", "max us");
    for (const auto& r : results) {
        if (r.seconds) {
            std::printf("%-20s %-10s idle %.1f s: %.3f%% of a core\n", r.technology.c_str(), r.pattern.c_str(),
                        *r.seconds, r.cpu_percent.value_or(0));
            continue;
        }
        if (r.cpu_us_per_msg) {
            std::printf("%-20s %-10s %8s x%-4u %.0f/s each: receiver CPU %.3f us/msg, %s msgs/s", r.technology.c_str(),
                        r.pattern.c_str(), size_label(r.size).c_str(), r.members.value_or(0),
                        r.rate_per_member.value_or(0), *r.cpu_us_per_msg, compact(r.msgs_per_s).c_str());
            if (r.start_s) std::printf(", start %.2f s", *r.start_s);
            if (r.shm_kib_per_node)
                std::printf(", /dev/shm %.0f KiB and %.1f objects per node", *r.shm_kib_per_node,
                            r.shm_objects_per_node.value_or(0));
            std::printf(", RSS driver %.0f KiB, member %.0f KiB, %.0f lost\n", r.rss_kib.value_or(0),
                        r.member_rss_kib.value_or(0), r.lost.value_or(0));
            continue;
        }
        std::string pattern = r.pattern + (r.members ? " x" + std::to_string(*r.members) : "");
        auto lat = [&](double Latency::*f) { return r.one_way_us ? fixed((*r.one_way_us).*f, 2) : std::string("-"); };
        std::printf("%-20s %-10s %8s %10s %10s %10s %10s %10s %10s\n", r.technology.c_str(), pattern.c_str(),
                    size_label(r.size).c_str(), fixed(r.MBps, 1).c_str(), compact(r.msgs_per_s).c_str(),
                    lat(&Latency::p50).c_str(), lat(&Latency::p99).c_str(), lat(&Latency::p999).c_str(),
                    lat(&Latency::max).c_str());
    }
}

// Two spinning processes on one CPU take turns by time slices: a cache-line
// ping-pong of milliseconds instead of a fraction of a microsecond. Every figure of
// such a run is about the scheduler, not msgpass, so say so.
void warn_if_shared_cpu(const std::map<std::uint64_t, Result>& floor) {
    for (const auto& [size, r] : floor) {
        if (size <= 64 && r.one_way_us && r.one_way_us->p50 > 5.0) {
            std::fprintf(stderr,
                         "msgpass-bench: warning: the shared-memory floor is %.1f us at %s bytes: the two processes\n"
                         "share a CPU (the scheduler placed them together); pin them, e.g. --cpu 0,1\n",
                         r.one_way_us->p50, size_label(size).c_str());
            return;
        }
    }
}

std::vector<Result> run_reference(const Settings& s, const Progress& progress) {
    Budget b = s.budget;
    if (s.timed_by_default) b.seconds = 0.2;
    std::vector<Result> out;
    auto note = [&](const Result& r) {
        if (s.json) emit_json(r);
        out.push_back(r);
    };
    auto wanted = [&](const char* floor) {
        return s.floors.empty() || std::find(s.floors.begin(), s.floors.end(), floor) != s.floors.end();
    };
    for (auto size : s.sizes) {
        if (wanted("shm")) {
            progress.show("reference " + size_label(size) + ": shm ping-pong");
            note(reference::shm_pingpong(size, b));
            progress.show("reference " + size_label(size) + ": shm ring");
            note(reference::shm_ring(size, b));
        }
        if (wanted("memcpy")) {
            progress.show("reference " + size_label(size) + ": memcpy");
            note(reference::memcpy_bandwidth(size, b));
        }
        if (wanted("tcp")) {
            progress.show("reference " + size_label(size) + ": tcp ping-pong");
            note(reference::tcp_pingpong(size, b));
        }
        if (wanted("udp")) {
            progress.show("reference " + size_label(size) + ": udp ping-pong");
            if (auto r = reference::udp_pingpong(size, b)) note(*r);
        }
        if (wanted("tcp")) {
            progress.show("reference " + size_label(size) + ": tcp stream");
            note(reference::tcp_stream(size, b));
        }
        if (wanted("udp")) {
            progress.show("reference " + size_label(size) + ": udp stream");
            if (auto r = reference::udp_stream(size, b)) note(*r);
        }
    }
    progress.clear();
    std::map<std::uint64_t, Result> floor;
    for (const auto& r : out)
        if (r.technology == "reference-shm-pingpong") floor[r.size] = r;
    warn_if_shared_cpu(floor);
    return out;
}

// The default table: pingpong and stream per size, beside Table 1 and the floors.
void print_default_table(const std::vector<std::uint64_t>& sizes, const std::map<std::uint64_t, Result>& ping,
                         const std::map<std::uint64_t, Result>& stream, const std::map<std::uint64_t, Result>& floor,
                         const std::map<std::uint64_t, Result>& ring, const std::string& technology) {
    const bool tcp = technology == "tcp";
    const bool udp = technology == "udp";
    std::printf("msgpass %s: stream bandwidth and ping-pong one-way latency; x floor = ratio to the same-size\n"
                "%s floor measured in this run (%s)\n\n",
                technology.c_str(),
                tcp   ? "loopback TCP"
                : udp ? "loopback UDP"
                      : "shared-memory",
                tcp ? "bandwidth / raw TCP stream, latency / raw TCP ping-pong"
                : udp
                    ? "bandwidth / raw UDP stream with a credit window, latency / raw UDP ping-pong; none above 65507 B"
                    : "bandwidth / ring, latency / cache-line ping-pong");
    std::printf("%8s | %9s %8s | %8s %8s %8s %8s | %9s | %8s %8s\n", "size", "MB/s", tcp || udp ? "x raw" : "x ring",
                "p50 us", "x floor", "p99 us", "max us", "msgs/s", "1999MB/s", "1999 us");
    std::printf(
        "---------+--------------------+--------------------------------------+-----------+------------------\n");
    for (auto size : sizes) {
        const auto& p = ping.at(size);
        const auto& st = stream.at(size);
        const auto lat = p.one_way_us.value_or(Latency{});
        const double floor_p50 = floor.count(size) ? floor.at(size).one_way_us.value_or(Latency{}).p50 : 0;
        const double ring_bw = ring.count(size) ? ring.at(size).MBps : 0;
        std::string seed_bw = "";
        std::string seed_lat = "";
        if (auto it = seed_table.find(size); it != seed_table.end()) {
            seed_bw = fixed(it->second.first, 1);
            seed_lat = fixed(it->second.second, 0);
        }
        std::printf("%8s | %9s %8s | %8s %8s %8s %8s | %9s | %8s %8s\n", size_label(size).c_str(),
                    fixed(st.MBps, 1).c_str(), ratio(st.MBps, ring_bw).c_str(), fixed(lat.p50, 2).c_str(),
                    ratio(lat.p50, floor_p50).c_str(), fixed(lat.p99, 2).c_str(), fixed(lat.max, 1).c_str(),
                    compact(st.msgs_per_s).c_str(), seed_bw.c_str(), seed_lat.c_str());
    }
}

// Runs the chosen points with a ready driver; returns the results (printed as JSON
// lines as they come when --json).
// Sizes in the outer loop, so that before_size() (the floors of the table) runs
// next to the points it is compared with, under the same load of the machine.
std::vector<Result> drive(Driver& driver, const Settings& s, const std::vector<std::string>& patterns,
                          const Progress& progress, const std::function<void(std::uint64_t)>& before_size) {
    std::vector<Result> results;
    const std::size_t total = patterns.size() * s.sizes.size();
    std::size_t done = 0;
    if (patterns == std::vector<std::string>{"idle"}) {
        progress.show("idle receiver for " + fixed(s.budget.seconds, 1) + " s");
        results.push_back(driver.idle(s.budget.seconds));
        if (s.json) emit_json(results.back());
        progress.clear();
        return results;
    }
    for (auto size : s.sizes) {
        if (before_size) before_size(size);
        for (const auto& pattern : patterns) {
            std::string line = "[";
            line += std::to_string(++done);
            line += '/';
            line += std::to_string(total);
            line += "] ";
            line += pattern;
            line += ' ';
            line += size_label(size);
            progress.show(line);
            results.push_back(driver.run(pattern, size, s.budget, s.members));
            if (s.json) emit_json(results.back());
            if (s.contention != 0) {
                progress.show(line + " beside " + std::to_string(s.contention) + " busy loops");
                BusyLoops busy;
                busy.start(s.contention, s.cpus);
                results.push_back(driver.run(pattern, size, s.budget, s.members));
                busy.stop();
                results.back().pattern += " +" + std::to_string(s.contention) + "busy";
                if (s.json) emit_json(results.back());
            }
        }
    }
    progress.clear();
    return results;
}

void print_comm_table(const std::vector<std::uint64_t>& sizes, const std::vector<Result>& node,
                      const std::vector<Result>& through_comm, const std::string& technology) {
    auto find = [](const std::vector<Result>& list, const std::string& pattern, std::uint64_t size) {
        for (const auto& r : list)
            if (r.pattern == pattern && r.size == size) return r;
        return Result{};
    };
    std::printf("msgpass %s: the communicator (msgpass::comm) against the Node path, same peer, same run;\n"
                "x node = comm / node (latency: lower is better; stream: higher is better)\n\n",
                technology.c_str());
    std::printf("%8s | %9s %9s %7s | %9s %9s %7s\n", "size", "node p50", "comm p50", "x node", "node MB/s", "comm MB/s",
                "x node");
    std::printf("---------+-----------------------------+-----------------------------\n");
    for (auto size : sizes) {
        const auto np = find(node, "pingpong", size);
        const auto cp = find(through_comm, "comm-pingpong", size);
        const auto ns = find(node, "stream", size);
        const auto cs = find(through_comm, "comm-stream", size);
        const double nl = np.one_way_us.value_or(Latency{}).p50;
        const double cl = cp.one_way_us.value_or(Latency{}).p50;
        std::printf("%8s | %9s %9s %7s | %9s %9s %7s\n", size_label(size).c_str(), fixed(nl, 2).c_str(),
                    fixed(cl, 2).c_str(), ratio(cl, nl).c_str(), fixed(ns.MBps, 1).c_str(), fixed(cs.MBps, 1).c_str(),
                    ratio(cs.MBps, ns.MBps).c_str());
    }
}

} // namespace msgpass::bench
