// msgpass-bench --layer comm: ping-pong and stream through the communicator
// (msgpass::comm: envelope, matching, requests) after the same patterns on the raw
// Node path, against the same peer process in the same run (docs/benchmarks.md,
// docs/communicator.md "Cost").
#pragma once

#include "patterns.hpp"

#include <msgpass/msgpass.hpp>

#include <cstdint>
#include <vector>

namespace msgpass::bench {

// The driver's side: for each size, ping-pong (one-way latency, the payload echoed
// as the received buffer) and stream (the peer sends for the budget) through a
// Communicator over peer; then tells the peer to stop. Results carry the patterns
// "comm-pingpong" and "comm-stream".
std::vector<Result> comm_drive(NodeFactory& factory, NodeId peer, const std::vector<std::uint64_t>& sizes,
                               const Budget& budget);

// The peer's side, after serve() returned: obeys comm_drive until it says stop.
int comm_serve(NodeFactory& factory, NodeId driver);

} // namespace msgpass::bench
