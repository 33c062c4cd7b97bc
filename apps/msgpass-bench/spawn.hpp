// The self-spawning mode of msgpass-bench: CPU pinning, free ports below the
// ephemeral range, the generated partition, the peer processes (fork+exec of this
// program with the hidden --role peer) and the clean-up of their shared memory.
#pragma once

#include "options.hpp"

#include <msgpass/msgpass.hpp>
#include <msgpass/node_factory.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace msgpass::bench {

// Pins the calling process to cpus[index % size]; nothing when cpus is empty.
void pin(const std::vector<int>& cpus, std::size_t index);

// Ports for the `count` nodes of a self-spawning run, for the tcp and udp
// technologies (sci ignores them). They are taken below the kernel's ephemeral range,
// because a port in that range, free when checked, can be handed to any process's
// outgoing connection before our listener binds it. The search starts at a place
// derived from the pid, so that parallel runs seldom try the same ports.
std::vector<std::uint16_t> free_ports(std::uint32_t count);

// The partition of a self-spawning run: nodes 1..count on this host (127.0.0.1, each
// with its own port for the ip technologies), 7 outstanding buffers and the send pool
// (the seed's defaults are 1 and off), messages up to the largest size swept; --set
// overrides apply last.
config::Configuration self_spawn_configuration(const Settings& s, const std::string& partition, std::uint32_t count,
                                               std::uint64_t max_size);

// Removes what a killed peer of this run left in /dev/shm (a process that dies by
// SIGKILL cannot unlink its segments). The partition name is unique to this run, so
// only its own segments match. Declared before Peers: runs after they are reaped.
class StaleSegments {
public:
    explicit StaleSegments(std::string partition) : partition_(std::move(partition)) {}
    StaleSegments(const StaleSegments&) = delete;
    StaleSegments& operator=(const StaleSegments&) = delete;
    ~StaleSegments() {
        for (const auto& [technology, leftovers] : TechnologyRegistry::instance().leftovers()) {
            std::error_code ec;
            for (const auto& name : leftovers.of_partition(partition_, ec))
                leftovers.remove(name, ec, false);
        }
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

    void start(const Settings& s, const std::string& partition, std::uint32_t count, std::uint64_t max_size);

    // Throws PeerLost when a peer process has exited.
    void check();

    // Waits for the peers to exit (after quit), then kills those left.
    void stop(std::chrono::milliseconds grace);

private:
    struct ChildId {
        NodeId id;
        pid_t pid;
    };
    std::vector<ChildId> children_;
};

// Busy loops beside a run (--contention N): N child processes that only spin, the
// i-th pinned to cpus[i % size] when cpus is given, so that more tasks are runnable
// than there are CPUs, as on a machine where a build runs beside the partition.
// Killed and reaped on stop() and on destruction; they die with this process too.
class BusyLoops {
public:
    BusyLoops() = default;
    BusyLoops(const BusyLoops&) = delete;
    BusyLoops& operator=(const BusyLoops&) = delete;
    ~BusyLoops() { stop(); }

    void start(std::uint32_t count, const std::vector<int>& cpus);
    void stop() noexcept;

private:
    std::vector<pid_t> pids_;
};

} // namespace msgpass::bench
