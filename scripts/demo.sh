#!/usr/bin/env bash
# The quick start: builds msgpass in Release, runs the DAQ example (4 readout
# sources -> 1 event builder -> 2 farm workers over emulated SCI shared memory,
# started by the launcher from the YAML files), then the latency and bandwidth
# table of msgpass-bench when it is built. Works from any directory.
# Extra arguments go to the DAQ program, e.g. `scripts/demo.sh --events 100000`;
# without any it runs 200 000 events, so that the rate it prints is the partition's
# steady one and not its first 0.1-0.2 s (20 000 events spread from 117 to 298 kHz
# over eight runs, 200 000 from 312 to 345 kHz: docs/benchmarks.md, "Issue 31, ninth
# session").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

jobs=$msgpass_jobs
build=build/release

header() {
    echo
    echo "=== $* ==="
}

header "dependencies"
msgpass_install_deps

header "build (Release, $build)"
msgpass_configure "$build" -DCMAKE_BUILD_TYPE=Release -DMSGPASS_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$jobs"

daq_args=("$@")
((${#daq_args[@]})) || daq_args=(--events 200000)
header "DAQ: 4 readout sources -> event builder -> 2 farm workers (apps/examples/daq)"
"$build/apps/msgpass-run/msgpass-run" \
    --config apps/examples/daq/network.yaml --nodes apps/examples/daq/nodes.yaml \
    -- "$build/apps/examples/msgpass-daq" "${daq_args[@]}"

bench="$build/apps/msgpass-bench/msgpass-bench"
if [[ -x "$bench" ]]; then
    header "latency and bandwidth (msgpass-bench)"
    "$bench"
fi
