// msgpass-bench: measures msgpass (pingpong, stream, broadcast, gather, idle) and the
// floors of the machine (--reference), as shared/design/BENCHMARKS.md specifies.
// With no arguments it starts its peer itself (fork+exec of this program with the
// hidden --role peer), runs pingpong and stream over the sizes of Table 1 of the SCI
// seed and beyond, and prints a table beside the seed's 1999 figures and the floors
// measured in the same run. With --config/--nodes/--node-id it runs one side only:
// the lowest node id drives and prints; the others serve it.
#include "patterns.hpp"
#include "reference.hpp"
#include "report.hpp"

#include <msgpass/sci/naming.hpp>

#include <boost/program_options.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <netinet/in.h>
#include <sched.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace po = boost::program_options;
using namespace msgpass;
using namespace msgpass::bench;

namespace {

const std::vector<std::uint64_t> default_sizes = {8,    16,   32,   64,    128,   256,    512,     1024,
                                                  2048, 4096, 8192, 16384, 65536, 262144, 1048576, 4194304};

// Table 1 of the SCI seed (1999): bandwidth MB/s and one-way latency us.
const std::map<std::uint64_t, std::pair<double, double>> seed_table = {
    {8, {0.7, 15}},  {16, {1.4, 15}},  {32, {3.0, 15}},  {64, {6.0, 15}},  {128, {9.8, 18}}, {256, {18, 19}},
    {512, {28, 23}}, {1024, {39, 29}}, {2048, {49, 43}}, {4096, {56, 70}}, {8192, {60, 125}}};

struct Settings {
    std::optional<std::string> technology;
    std::optional<std::string> pattern;
    std::vector<std::uint64_t> sizes = default_sizes;
    Budget budget;
    bool timed_by_default = true;
    std::uint32_t members = 4;
    bool json = false;
    std::vector<int> cpus;
    std::optional<std::string> config_file;
    std::optional<std::string> nodes_file;
    std::optional<NodeId> node_id;
    std::vector<std::string> sets;
    bool reference = false;
    Wait wait = Wait::block;
    // hidden: the self-spawned peer
    std::string role;
    std::string partition;
    std::uint32_t node_count = 2;
    std::uint64_t max_size = 0;
    std::uint32_t peer_index = 0;
    std::vector<std::uint16_t> ports; // of nodes 1..node_count, chosen by the driver
};

class Progress {
public:
    Progress() : on_(::isatty(STDERR_FILENO) != 0) {}
    void show(const std::string& text) const {
        if (on_) std::fprintf(stderr, "\r\033[K%s", text.c_str());
    }
    void clear() const {
        if (on_) std::fprintf(stderr, "\r\033[K");
    }

private:
    bool on_;
};

void pin(const std::vector<int>& cpus, std::size_t index) {
    if (cpus.empty()) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[index % cpus.size()], &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) {
        throw ConfigError("--cpu: cannot pin to cpu " + std::to_string(cpus[index % cpus.size()]) + ": " +
                          std::strerror(errno));
    }
}

bool group_pattern(const std::string& p) {
    return p == "broadcast" || p == "gather";
}

// True when nothing on this host holds `port` on 127.0.0.1, for TCP nor UDP. Without
// SO_REUSEADDR, a bind also fails while a closed connection on the port is in
// TIME_WAIT, so a port that passes is really free now.
bool port_free(std::uint16_t port) {
    for (int type : {SOCK_STREAM, SOCK_DGRAM}) {
        const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
        if (fd < 0) return false;
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        const bool bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
        ::close(fd);
        if (!bound) return false;
    }
    return true;
}

// A port the kernel picks (bind to port 0, read it back), for when the range below
// the ephemeral ports has none left. 0 when even that fails.
std::uint16_t kernel_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    std::uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
        port = ntohs(address.sin_port);
    }
    ::close(fd);
    return port;
}

// Ports for the `count` nodes of a self-spawning run, for the tcp and udp
// technologies (sci ignores them). They are taken below the kernel's ephemeral range,
// because a port in that range, free when checked, can be handed to any process's
// outgoing connection before our listener binds it. The search starts at a place
// derived from the pid, so that parallel runs seldom try the same ports.
std::vector<std::uint16_t> free_ports(std::uint32_t count) {
    unsigned ephemeral_low = 32768;
    if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) {
        unsigned low = 0;
        if (range >> low && low > 1024 && low <= 65535) ephemeral_low = low;
    }
    const unsigned first = 10000;
    std::vector<std::uint16_t> ports;
    if (ephemeral_low > first + count) {
        const unsigned span = ephemeral_low - first;
        const unsigned start = static_cast<unsigned>(::getpid()) * 7919U % span;
        for (unsigned i = 0; i < span && ports.size() < count; ++i) {
            const auto port = static_cast<std::uint16_t>(first + (start + i) % span);
            if (port_free(port)) ports.push_back(port);
        }
    }
    while (ports.size() < count) {
        const std::uint16_t port = kernel_port();
        if (port == 0) throw ResourceError("msgpass-bench: no free TCP port on 127.0.0.1 for the nodes file");
        if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
    }
    return ports;
}

// The partition of a self-spawning run: nodes 1..count on this host (127.0.0.1, each
// with its own port for the ip technologies), 7 outstanding buffers and the send pool
// (the seed's defaults are 1 and off), messages up to the largest size swept; --set
// overrides apply last.
config::Configuration self_spawn_configuration(const Settings& s, const std::string& partition, std::uint32_t count,
                                               std::uint64_t max_size) {
    if (s.ports.size() != count) {
        throw ConfigError("msgpass-bench: " + std::to_string(s.ports.size()) + " ports for " + std::to_string(count) +
                          " nodes");
    }
    std::ostringstream network;
    network << "partition: " << partition << "\n"
            << "technology: " << s.technology.value_or("sci") << "\n"
            << "max_message_size: " << std::max<std::uint64_t>(max_size, 64 * config::KiB) << "\n"
            << "send_queue_limit: 1024\n"
            << "sci:\n  max_outst_buffers: 7\n  use_send_pool: true\n";
    std::ostringstream nodes;
    nodes << "nodes:\n";
    for (std::uint32_t i = 1; i <= count; ++i)
        nodes << "  - {id: " << i << ", host: 127.0.0.1, port: " << s.ports[i - 1] << "}\n";
    return config::load_text(network.str(), nodes.str(), s.sets, "msgpass-bench network", "msgpass-bench nodes");
}

std::string port_list(const std::vector<std::uint16_t>& ports) {
    std::string list;
    for (auto p : ports) {
        if (!list.empty()) list += ',';
        list += std::to_string(p);
    }
    return list;
}

// Removes what a killed peer of this run left in /dev/shm (a process that dies by
// SIGKILL cannot unlink its segments). The partition name is unique to this run, so
// only its own segments match. Declared before Peers: runs after they are reaped.
class StaleSegments {
public:
    explicit StaleSegments(std::string partition) : partition_(std::move(partition)) {}
    StaleSegments(const StaleSegments&) = delete;
    StaleSegments& operator=(const StaleSegments&) = delete;
    ~StaleSegments() {
        std::error_code ec;
        for (const auto& name : sci::partition_segments(sci::segment_user(), partition_, ec))
            ::shm_unlink(name.c_str());
    }

private:
    std::string partition_;
};

// The peer processes of a self-spawning run, stopped and reaped on destruction.
class Peers {
public:
    Peers() = default;
    Peers(const Peers&) = delete;
    Peers& operator=(const Peers&) = delete;
    ~Peers() { stop(std::chrono::milliseconds(2000)); }

    void start(const Settings& s, const std::string& partition, std::uint32_t count, std::uint64_t max_size) {
        for (std::uint32_t id = 2; id <= count; ++id) {
            std::vector<std::string> args = {"msgpass-bench",
                                             "--role",
                                             "peer",
                                             "--node-id",
                                             std::to_string(id),
                                             "--partition",
                                             partition,
                                             "--node-count",
                                             std::to_string(count),
                                             "--max-size",
                                             std::to_string(max_size),
                                             "--peer-index",
                                             std::to_string(id - 1),
                                             "--ports",
                                             port_list(s.ports)};
            if (s.technology) args.insert(args.end(), {"--technology", *s.technology});
            for (const auto& set : s.sets)
                args.insert(args.end(), {"--set", set});
            if (!s.cpus.empty()) {
                std::string list;
                for (int c : s.cpus) {
                    if (!list.empty()) list += ',';
                    list += std::to_string(c);
                }
                args.insert(args.end(), {"--cpu", list});
            }
            std::vector<char*> argv;
            for (auto& a : args)
                argv.push_back(a.data());
            argv.push_back(nullptr);
            const pid_t parent = ::getpid();
            const pid_t pid = ::fork();
            if (pid < 0) throw ResourceError(std::string("cannot start a peer: ") + std::strerror(errno));
            if (pid == 0) {
                ::prctl(PR_SET_PDEATHSIG, SIGTERM);
                if (::getppid() != parent) ::_exit(1);
                ::dup2(STDERR_FILENO, STDOUT_FILENO); // stdout belongs to the driver's results
                ::execv("/proc/self/exe", argv.data());
                std::fprintf(stderr, "msgpass-bench: cannot run peer: %s\n", std::strerror(errno));
                ::_exit(127);
            }
            children_.push_back({id, pid});
        }
    }

    // Throws PeerLost when a peer process has exited.
    void check() {
        for (auto& c : children_) {
            if (c.pid <= 0) continue;
            int status = 0;
            if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
                c.pid = 0;
                std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                      : "exited with status " + std::to_string(WEXITSTATUS(status));
                throw PeerLost(c.id, "peer " + std::to_string(c.id) + " lost: its process " + how);
            }
        }
    }

    // Waits for the peers to exit (after quit), then kills those left.
    void stop(std::chrono::milliseconds grace) {
        const auto deadline = std::chrono::steady_clock::now() + grace;
        for (auto& c : children_) {
            while (c.pid > 0) {
                int status = 0;
                const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
                if (r == c.pid || (r < 0 && errno != EINTR)) {
                    c.pid = 0;
                } else if (std::chrono::steady_clock::now() > deadline) {
                    ::kill(c.pid, SIGKILL);
                    ::waitpid(c.pid, &status, 0);
                    c.pid = 0;
                } else {
                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                }
            }
        }
    }

private:
    struct ChildId {
        NodeId id;
        pid_t pid;
    };
    std::vector<ChildId> children_;
};

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
    for (auto size : s.sizes) {
        progress.show("reference " + size_label(size) + ": shm ping-pong");
        note(reference::shm_pingpong(size, b));
        progress.show("reference " + size_label(size) + ": shm ring");
        note(reference::shm_ring(size, b));
        progress.show("reference " + size_label(size) + ": memcpy");
        note(reference::memcpy_bandwidth(size, b));
        progress.show("reference " + size_label(size) + ": tcp ping-pong");
        note(reference::tcp_pingpong(size, b));
        progress.show("reference " + size_label(size) + ": udp ping-pong");
        if (auto r = reference::udp_pingpong(size, b)) note(*r);
        progress.show("reference " + size_label(size) + ": tcp stream");
        note(reference::tcp_stream(size, b));
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
    std::printf("msgpass %s: stream bandwidth and ping-pong one-way latency; x floor = ratio to the same-size\n"
                "%s floor measured in this run (%s)\n\n",
                technology.c_str(), tcp ? "loopback TCP" : "shared-memory",
                tcp ? "bandwidth / raw TCP stream, latency / raw TCP ping-pong"
                    : "bandwidth / ring, latency / cache-line ping-pong");
    std::printf("%8s | %9s %8s | %8s %8s %8s %8s | %9s | %8s %8s\n", "size", "MB/s", tcp ? "x raw" : "x ring", "p50 us",
                "x floor", "p99 us", "max us", "msgs/s", "1999MB/s", "1999 us");
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

Settings parse(int argc, char** argv, bool& help) {
    Settings s;
    std::string sizes;
    std::string cpus;
    std::string ports;
    std::string wait = "block";
    po::options_description visible(
        "Usage: msgpass-bench [options]\n\n"
        "Without options: starts its peer, runs pingpong and stream over sci for 8 B..4 MiB\n"
        "and prints a table beside the SCI seed's 1999 figures and this machine's floors.\n\n"
        "Options");
    visible.add_options()                                                                                             //
        ("help,h", "this help")                                                                                       //
        ("technology", po::value<std::string>()->value_name("NAME"),                                                  //
         "sci | tcp | auto (default: the configuration's, sci)")                                                      //
        ("pattern", po::value<std::string>()->value_name("NAME"), "pingpong | stream | broadcast | gather | idle")    //
        ("sizes", po::value(&sizes)->value_name("LIST"), "message sizes, e.g. 8,64,1KiB,4MiB")                        //
        ("iterations", po::value(&s.budget.iterations)->value_name("N"), "timed messages (or round trips) per point") //
        ("seconds", po::value(&s.budget.seconds)->value_name("SECONDS"),                                              //
         "time per point when --iterations is not given (default 0.4; idle: 5)")                                      //
        ("members", po::value(&s.members)->value_name("N"), "group size for broadcast and gather (default 4)")        //
        ("json", po::bool_switch(&s.json), "one JSON object per line on stdout, nothing else")                        //
        ("cpu", po::value(&cpus)->value_name("A,B"), "pin the driver to CPU A and the peers to B,...")                //
        ("reference", po::bool_switch(&s.reference), "measure the floors of this machine instead of msgpass")         //
        ("config", po::value<std::string>()->value_name("FILE"),                                                      //
         "network file: run one side only (with --nodes, --node-id)")                                                 //
        ("nodes", po::value<std::string>()->value_name("FILE"), "nodes file (one-side mode)")                         //
        ("node-id", po::value<NodeId>()->value_name("ID"),                                                            //
         "own node id (one-side mode; else MSGPASS_NODE_ID or the launcher's rank)")                                  //
        ("wait", po::value(&wait)->value_name("MODE"),                                                                //
         "block: receive(timeout), the layer's wait (default); spin: poll receive()")                                 //
        ("set", po::value(&s.sets)->composing()->value_name("KEY=VALUE"),                                             //
         "override of the network file (repeatable)");
    po::options_description hidden;
    hidden.add_options()("role", po::value(&s.role))("partition", po::value(&s.partition))("node-count",
                                                                                           po::value(&s.node_count))(
        "max-size", po::value(&s.max_size))("peer-index", po::value(&s.peer_index))("ports", po::value(&ports));
    po::options_description all;
    all.add(visible).add(hidden);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        help = true;
        std::cout << visible << '\n';
        return s;
    }
    if (vm.count("technology")) s.technology = vm["technology"].as<std::string>();
    if (vm.count("pattern")) s.pattern = vm["pattern"].as<std::string>();
    if (vm.count("config")) s.config_file = vm["config"].as<std::string>();
    if (vm.count("nodes")) s.nodes_file = vm["nodes"].as<std::string>();
    if (vm.count("node-id")) s.node_id = vm["node-id"].as<NodeId>();
    if (!sizes.empty()) s.sizes = parse_sizes(sizes);
    s.timed_by_default = !vm.count("iterations") && !vm.count("seconds");
    if (vm.count("iterations") && s.budget.iterations == 0) throw po::error("--iterations must be at least 1");
    if (vm.count("seconds") && !(s.budget.seconds > 0 && s.budget.seconds < 3600)) {
        throw po::error("--seconds must be in (0, 3600)");
    }
    if (s.pattern == "idle" && !vm.count("seconds")) s.budget.seconds = 5;
    if (s.members == 0 || s.members > 64) throw po::error("--members must be in 1..64");
    if (wait == "spin")
        s.wait = Wait::spin;
    else if (wait != "block")
        throw po::error("--wait is block or spin");
    if (!cpus.empty()) {
        std::stringstream in(cpus);
        std::string item;
        while (std::getline(in, item, ',')) {
            char* end = nullptr;
            const long c = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || c < 0 || c >= CPU_SETSIZE)
                throw po::error("bad cpu '" + item + "' in --cpu");
            s.cpus.push_back(static_cast<int>(c));
        }
    }
    if (!ports.empty()) {
        std::stringstream in(ports);
        std::string item;
        while (std::getline(in, item, ',')) {
            char* end = nullptr;
            const long p = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || p <= 0 || p > 65535) throw po::error("bad port '" + item + "'");
            s.ports.push_back(static_cast<std::uint16_t>(p));
        }
    }
    if (s.pattern && *s.pattern != "pingpong" && *s.pattern != "stream" && !group_pattern(*s.pattern) &&
        *s.pattern != "idle") {
        throw po::error("unknown pattern '" + *s.pattern + "' (pingpong, stream, broadcast, gather, idle)");
    }
    return s;
}

// Runs the chosen points with a ready driver; returns the results (printed as JSON
// lines as they come when --json).
// Sizes in the outer loop, so that before_size() (the floors of the table) runs
// next to the points it is compared with, under the same load of the machine.
std::vector<Result> drive(Driver& driver, const Settings& s, const std::vector<std::string>& patterns,
                          const Progress& progress, const std::function<void(std::uint64_t)>& before_size = {}) {
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
        }
    }
    progress.clear();
    return results;
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
        return serve(*factory, 1);
    }
    if (!s.role.empty()) throw po::error("unknown role '" + s.role + "'");

    if (!s.cpus.empty()) reference::set_child_cpu(s.cpus[1 % s.cpus.size()]);
    if (s.reference) {
        pin(s.cpus, 0);
        auto results = run_reference(s, progress);
        if (!s.json) print_results(results);
        return 0;
    }

    const bool table = !s.pattern.has_value();
    const std::vector<std::string> patterns =
        table ? std::vector<std::string>{"pingpong", "stream"} : std::vector<std::string>{*s.pattern};
    if (table && s.timed_by_default) s.budget.seconds = 0.4;
    const std::uint64_t max_size = *std::max_element(s.sizes.begin(), s.sizes.end());

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
            // tcp is measured against raw loopback TCP, every other technology
            // against shared memory.
            if (s.technology == std::optional<std::string>("tcp")) {
                floor[size] = reference::tcp_pingpong(size, quick);
                ring[size] = reference::tcp_stream(size, quick);
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
    peers.start(s, configuration.partition, count, max_size);
    std::vector<NodeId> peer_ids;
    for (NodeId id = 2; id <= count; ++id)
        peer_ids.push_back(id);
    Driver driver(
        *factory, peer_ids, [&] { peers.check(); }, s.wait);
    auto results = drive(driver, s, patterns, progress, floors);
    driver.quit();
    if (floors && s.technology != std::optional<std::string>("tcp")) warn_if_shared_cpu(floor);
    peers.stop(std::chrono::milliseconds(5000));
    if (s.json) return 0;
    if (!table) {
        print_results(results);
        return 0;
    }
    std::map<std::uint64_t, Result> ping;
    std::map<std::uint64_t, Result> stream;
    for (const auto& r : results)
        (r.pattern == "pingpong" ? ping : stream)[r.size] = r;
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
