// Process control of msgpass-run: starts one process per planned node, forwards
// their output line by line with a "[name] " prefix, forwards SIGINT/SIGTERM/SIGHUP,
// and stops the partition (SIGTERM, then SIGKILL after the grace time) as soon as one
// process fails or a signal arrives. Single-threaded: one poll() loop over the
// children's pipes and a signalfd, with a deadline instead of sleeps.
#pragma once

#include "plan.hpp"

#include <chrono>
#include <vector>

namespace msgpass::run {

// Runs the plan to its end and returns msgpass-run's exit code: 0 when every process
// exited 0, 1 when one failed (or could not be started), 128+N when signal N made
// the launcher stop the partition. Every child is reaped before it returns.
int supervise(const std::vector<Launch>& plan, std::chrono::milliseconds grace);

} // namespace msgpass::run
