// The msgpass side of msgpass-bench: a driver that runs one measurement point
// (pattern x size) against its peers, and the serve loop of a peer, which obeys the
// driver's commands until told to quit. Roles: the driver is the lowest node id; it
// prints results. In pingpong it pings; in stream and gather it receives; in
// broadcast it sends and the members report what they received.
#pragma once

#include "report.hpp"

#include <msgpass/msgpass.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::bench {

// How long a point runs: iterations when nonzero, else seconds. A warm-up of a
// tenth of that precedes the timed part.
struct Budget {
    std::uint64_t iterations = 0;
    double seconds = 0.4;
};

// Called when a wait sees nothing for a while: throws PeerLost when a peer process
// is known to be gone (self-spawning mode checks its children).
using HealthCheck = std::function<void()>;

// How both ends wait for a message: block uses receive(timeout), the layer's wait
// strategy (spin, yield, then sleep on the doorbell); spin polls receive() and
// flush(0), which measures the data path alone, whatever the cost of waking up.
enum class Wait { block, spin };

class Driver {
public:
    // peers: the other nodes, in id order; pingpong and stream use the first.
    Driver(NodeFactory& factory, std::vector<NodeId> peers, HealthCheck check, Wait wait = Wait::block);
    // pingpong and stream through the Buffer-free path (Node::send_bytes and
    // Node::receive_view) instead of buffers; their rows read pingpong-bytes and
    // stream-bytes.
    void use_bytes(bool bytes) { bytes_ = bytes; }

    // pattern: pingpong, stream, broadcast, gather. members: group size (group patterns).
    Result run(const std::string& pattern, std::uint64_t size, const Budget& budget, std::uint32_t members);
    // Sits in receive(timeout) for seconds and reports the CPU it used.
    Result idle(double seconds);
    // The fanin pattern: each member sends rate messages per second; the first point
    // also reports how long the partition took to start when spawned is set (when the
    // members were started), and every point the memory per node of partition.
    void fanin(double rate, std::optional<std::chrono::steady_clock::time_point> spawned, std::string partition) {
        fanin_rate_ = rate;
        spawned_ = spawned;
        partition_ = std::move(partition);
    }
    // Tells every peer to exit.
    void quit();
    // The static groups of the network file: a broadcast goes through the one whose
    // members are exactly its members (so that a technology's own group, such as
    // udp.multicast_group, is measured), else through a group made for it.
    void static_groups(std::map<std::string, std::vector<NodeId>> groups) { static_groups_ = std::move(groups); }

private:
    Result pingpong(std::uint64_t size, const Budget& budget);
    Result stream(std::uint64_t size, const Budget& budget);
    Result broadcast(std::uint64_t size, const Budget& budget, std::uint32_t members);
    Result gather(std::uint64_t size, const Budget& budget, std::uint32_t members);
    Result fanin(std::uint64_t size, const Budget& budget, std::uint32_t members, bool scan_all);
    NodePtr peer(std::size_t index);

    NodeFactory& factory_;
    std::vector<NodeId> peers_;
    HealthCheck check_;
    Wait wait_;
    bool bytes_ = false;
    std::map<std::string, std::vector<NodeId>> static_groups_;
    double fanin_rate_ = 100;
    std::optional<std::chrono::steady_clock::time_point> spawned_;
    std::string partition_;
};

// A peer: serves the driver's commands until it says quit. Returns the exit code.
int serve(NodeFactory& factory, NodeId driver);

// User plus system CPU time of this process, from /proc/self/stat, in seconds.
double process_cpu_seconds();

} // namespace msgpass::bench
