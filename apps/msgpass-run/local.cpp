// The partition of msgpass-run -n (local.hpp).
#include "local.hpp"

#include "plan.hpp"

#include <yaml-cpp/yaml.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace msgpass::run {

namespace {

constexpr int max_ranks = 1024;

// n distinct ports the kernel gives for 127.0.0.1 now (all sockets held until the
// last is bound, so none repeats), then released for the ranks to bind.
std::vector<int> free_ports(int n, bool datagram) {
    std::vector<int> fds;
    std::vector<int> ports;
    std::string failure;
    for (int i = 0; i < n; ++i) {
        const int fd = ::socket(AF_INET, (datagram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            failure = std::strerror(errno);
            break;
        }
        fds.push_back(fd);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof a;
        if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0) {
            failure = std::strerror(errno);
            break;
        }
        ports.push_back(ntohs(a.sin_port));
    }
    for (const int fd : fds)
        ::close(fd);
    if (!failure.empty()) throw std::runtime_error("cannot find free ports on 127.0.0.1: " + failure);
    return ports;
}

// A fresh directory under TMPDIR (or /tmp).
std::filesystem::path make_directory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/msgpass-run.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
        throw std::runtime_error("cannot make a directory " + pattern + ": " + std::strerror(errno));
    return pattern;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

} // namespace

LocalPartition make_local_partition(int n, const std::string& technology) {
    if (n < 1 || n > max_ranks)
        throw UsageError("-n: expected a number of processes from 1 to " + std::to_string(max_ranks) + ", found " +
                         std::to_string(n));
    for (const char c : technology) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
            throw UsageError("--technology: expected a technology name such as sci, tcp, udp or auto, found '" +
                             technology + "'");
    }
    LocalPartition local;
    local.directory = make_directory();
    try {
        // The process id keeps it apart from other launchers now; the clock, from a
        // launcher of an earlier run that had the same id and left segments behind.
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        local.partition = "run-" + std::to_string(::getpid()) + "-" + std::to_string(now % 1000000);
        local.network_file = local.directory / "network.yaml";
        local.nodes_file = local.directory / "nodes.yaml";
        write_file(local.network_file, "# made by msgpass-run -n " + std::to_string(n) +
                                           "\npartition: " + local.partition + "\ntechnology: " + technology + "\n");
        const bool sockets = technology != "sci";
        const auto ports = sockets ? free_ports(n, technology == "udp") : std::vector<int>{};
        std::string nodes = "# made by msgpass-run -n " + std::to_string(n) + ": rank r is node r+1\nnodes:\n";
        for (int r = 0; r < n; ++r) {
            nodes += "  - {id: " + std::to_string(r + 1) + ", name: rank-" + std::to_string(r) + ", host: 127.0.0.1";
            if (sockets) nodes += ", port: " + std::to_string(ports[static_cast<std::size_t>(r)]);
            nodes += "}\n";
        }
        write_file(local.nodes_file, nodes);
    } catch (...) {
        remove_local_partition(local);
        throw;
    }
    return local;
}

LocalPartition with_free_ports(const std::filesystem::path& nodes_file, const std::string& technology) {
    YAML::Node document;
    try {
        document = YAML::LoadFile(nodes_file.string());
    } catch (const YAML::Exception& e) {
        throw std::runtime_error("cannot read " + nodes_file.string() + ": " + e.what());
    }
    std::vector<YAML::Node> without;
    if (document.IsMap() && document["nodes"] && document["nodes"].IsSequence()) {
        for (auto node : document["nodes"])
            if (node.IsMap() && (!node["port"] || (node["port"].IsScalar() && node["port"].Scalar() == "0")))
                without.push_back(node);
    }
    const auto ports = free_ports(static_cast<int>(without.size()), technology == "udp");
    for (std::size_t i = 0; i < without.size(); ++i)
        without[i]["port"] = ports[i];
    YAML::Emitter out;
    out << document;
    LocalPartition local;
    local.directory = make_directory();
    try {
        local.nodes_file = local.directory / "nodes.yaml";
        write_file(local.nodes_file, "# made by msgpass-run --technology " + technology + " from " +
                                         nodes_file.string() + ": free ports for the nodes without one\n" +
                                         out.c_str() + "\n");
    } catch (...) {
        remove_local_partition(local);
        throw;
    }
    return local;
}

void remove_local_partition(const LocalPartition& local) noexcept {
    std::error_code ignored;
    if (!local.directory.empty()) std::filesystem::remove_all(local.directory, ignored);
}

} // namespace msgpass::run
