// The floors of this machine (msgpass-bench --reference): what the hardware and the
// kernel give without msgpass, measured the same way as the msgpass patterns so that
// ratios mean something. Each floor runs its two ends in two processes (fork) and
// reports a Result with technology "reference-...".
#pragma once

#include "patterns.hpp"
#include "report.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace msgpass::bench::reference {

// Two processes ping-pong a cache line through an mmap'd MAP_SHARED region: each
// side copies size bytes into the shared region then raises a flag (one atomic per
// direction, each on its own cache line). At 64 bytes this is the cache-line floor.
Result shm_pingpong(std::uint64_t size, const Budget& budget);

// A hand-written single-producer single-consumer ring of slots in shared memory:
// the sender copies each message into a slot and publishes its size word; the
// receiver reads the size and touches each cache line of the data.
Result shm_ring(std::uint64_t size, const Budget& budget);

// memcpy of size bytes in one process, in cache when it fits.
Result memcpy_bandwidth(std::uint64_t size, const Budget& budget);

// Loopback TCP (TCP_NODELAY) and UDP ping-pong; UDP only up to 65507 bytes.
Result tcp_pingpong(std::uint64_t size, const Budget& budget);
std::optional<Result> udp_pingpong(std::uint64_t size, const Budget& budget);

// Loopback TCP stream: the sender writes size-byte chunks, the receiver reads.
Result tcp_stream(std::uint64_t size, const Budget& budget);
// Loopback UDP stream, one datagram per message (up to 65507 bytes), with a small
// credit window so that loopback does not drop: the floor of msgpass over udp.
std::optional<Result> udp_stream(std::uint64_t size, const Budget& budget);

// Pins the second process of every floor to this cpu (-1: no pinning); the caller
// pins itself. As --cpu pins the two ends of the msgpass patterns.
void set_child_cpu(int cpu);

// Where the two ends of the tcp and udp floors are (--floor-addresses,
// --floor-netns): the driver's end binds to `driver`, the other process's to
// `peer` (IPv4; 127.0.0.1 both by default), and the other process runs in the
// network namespace `peer_netns` (a name of `ip netns`, or a path; empty: this
// one), so that a floor crosses a link between two "hosts" as msgpass's traffic
// does when its nodes are in two namespaces. Throws std::invalid_argument naming a
// bad address or a namespace that cannot be opened.
struct Endpoints {
    std::string driver = "127.0.0.1";
    std::string peer = "127.0.0.1";
    std::string peer_netns;
};
void set_endpoints(const Endpoints& endpoints);

} // namespace msgpass::bench::reference
