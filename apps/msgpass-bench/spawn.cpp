// The self-spawning mode of msgpass-bench (spawn.hpp).
#include "spawn.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <sched.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace msgpass::bench {

namespace {

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

std::string port_list(const std::vector<std::uint16_t>& ports) {
    std::string list;
    for (auto p : ports) {
        if (!list.empty()) list += ',';
        list += std::to_string(p);
    }
    return list;
}

} // namespace

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

void Peers::start(const Settings& s, const std::string& partition, std::uint32_t count, std::uint64_t max_size) {
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
        if (s.layer != "node") args.insert(args.end(), {"--layer", s.layer});
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
void Peers::check() {
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
void Peers::stop(std::chrono::milliseconds grace) {
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

void BusyLoops::start(std::uint32_t count, const std::vector<int>& cpus) {
    for (std::uint32_t i = 0; i < count; ++i) {
        const pid_t parent = ::getpid();
        const pid_t pid = ::fork();
        if (pid < 0) {
            stop();
            throw ResourceError(std::string("--contention: cannot start a busy loop: ") + std::strerror(errno));
        }
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent) ::_exit(1);
            if (!cpus.empty()) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpus[i % cpus.size()], &set);
                ::sched_setaffinity(0, sizeof set, &set); // unpinned when it fails: still a busy task
            }
            volatile std::uint64_t spins = 0;
            for (;;)
                spins = spins + 1;
        }
        pids_.push_back(pid);
    }
}

void BusyLoops::stop() noexcept {
    for (const pid_t pid : pids_) {
        ::kill(pid, SIGKILL);
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    pids_.clear();
}

} // namespace msgpass::bench
