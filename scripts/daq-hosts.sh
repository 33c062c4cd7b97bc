#!/usr/bin/env bash
# The large DAQ partition (apps/examples/daq-large: 20 readout sources -> event
# builder -> 3 farm workers, 24 processes) spread over four "hosts", network
# namespaces joined by a bridge with veth links (MTU 1500), with `technology: auto`
# (sci between the nodes of one host, tcp or udp between hosts); then, in the same
# run, the same partition over sci on one host. Prints the event builder's rate of
# each run and the ratio, and fails when a run failed or lost or corrupted an event.
#
#   host 1: sources 1-10   host 2: sources 11-20   host 3: builder 50   host 4: farm 60-62
#
# Every fragment and every built event crosses a host boundary, as in a DAQ farm.
# By default each host runs a launcher of its own (msgpass-run --only its nodes, as on
# a farm started host by host); with --one-launcher a single msgpass-run outside the
# hosts starts all 24 nodes with --launch-agent, entering each node's host (its
# network namespace, found from its address) as ssh would log into it.
# Usage: scripts/daq-hosts.sh [--build DIR] [--events N] [--inter-host tcp|udp]
#                             [--runs K] [--no-sci] [--one-launcher]
# Needs root and the ip tool (iproute2); without them it exits 77 (ctest: skipped),
# or 1 when CI is set. The namespaces, the partitions' segments and the generated
# files are removed whatever the outcome.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build/release
events=5000
inter_host=tcp
runs=1
with_sci=1
one_launcher=0
while (($#)); do
    case $1 in
    --build) build=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --inter-host) inter_host=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --no-sci) with_sci=0; shift ;;
    --one-launcher) one_launcher=1; shift ;;
    -h | --help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "daq-hosts: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $inter_host == tcp || $inter_host == udp ]] || { echo "daq-hosts: --inter-host: expected tcp or udp, found '$inter_host'" >&2; exit 2; }
[[ $events =~ ^[0-9]+$ && $events -gt 0 ]] || { echo "daq-hosts: --events: expected a positive number, found '$events'" >&2; exit 2; }

launcher=$build/apps/msgpass-run/msgpass-run
daq=$build/apps/examples/msgpass-daq
for program in "$launcher" "$daq"; do
    [[ -x $program ]] || { echo "daq-hosts: $program is not built (cmake --build $build)" >&2; exit 2; }
done

# What the machine must allow; in CI a missing piece is an error, not a skip.
unavailable() {
    local why=$1
    if [[ -n ${CI:-} && ${CI} != 0 && ${CI} != false ]]; then
        echo "daq-hosts: required in CI (CI is set): $why" >&2
        exit 1
    fi
    echo "daq-hosts: skipped: $why" >&2
    exit 77
}
[[ $(id -u) -eq 0 ]] || unavailable "network namespaces need root; this runs as uid $(id -u)"
command -v ip >/dev/null 2>&1 || unavailable "no ip tool (package iproute2)"

prefix="mdaq$$"
hub="$prefix-hub"
work=$(mktemp -d)
made=()
partitions=()
cleanup() {
    local p ns
    for p in "${partitions[@]}"; do
        "$launcher" --config "$work/network.yaml" --nodes "$work/nodes.yaml" --set "partition=$p" --cleanup \
            >/dev/null 2>&1 || true
    done
    for ((i = ${#made[@]} - 1; i >= 0; i--)); do
        ns=${made[i]}
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Namespaces left by a run that was killed (mdaq<pid>-..., the pid gone).
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mdaq[0-9]+-' || true); do
    pid=${ns#mdaq}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
done

# ---- four hosts on one switch
host_ns() { echo "$prefix-$1"; }
host_addr() { echo "10.78.0.$1"; }
ip netns add "$hub" || unavailable "ip netns add failed (no network namespaces here)"
made+=("$hub")
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for h in 1 2 3 4; do
    ns=$(host_ns "$h")
    ip netns add "$ns"
    made+=("$ns")
    ip -n "$hub" link add "p$h" type veth peer name eth0 netns "$ns"
    ip -n "$hub" link set "p$h" master br0
    ip -n "$hub" link set "p$h" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 mtu 1500
    ip -n "$ns" addr add "$(host_addr "$h")/24" dev eth0
    ip -n "$ns" link set eth0 up
done

# ---- the partition's files: daq-large's network file, its nodes on four hosts
sed -e 's/^technology: .*/technology: auto/' "$repo/apps/examples/daq-large/network.yaml" >"$work/network.yaml"
printf 'auto:\n  inter_host: %s\n' "$inter_host" >>"$work/network.yaml"
# 24 processes on a 2-CPU test machine, under the sanitizers and beside other tests: a
# node can wait for the CPU longer than the default second of silence, and a peer given
# up for that is a failed run, not a finding (the loss paths have their own tests).
printf 'peer_timeout: 5s\n' >>"$work/network.yaml"
host_of() {
    local id=$1
    if ((id <= 10)); then echo 1; elif ((id <= 20)); then echo 2; elif ((id == 50)); then echo 3; else echo 4; fi
}
ids=({1..20} 50 60 61 62)
{
    echo "# generated by scripts/daq-hosts.sh: apps/examples/daq-large on four hosts"
    echo "nodes:"
    for id in "${ids[@]}"; do
        extra=""
        ((id == 50)) && extra=", sci: {recv_buffer_no: 511, recv_seg_size: 8MiB}"
        echo "  - {id: $id, name: n$id, host: $(host_addr "$(host_of "$id")"), port: $((21000 + id))$extra}"
    done
} >"$work/nodes.yaml"

# The builder's JSON line of a run's output -> "rate_khz lost corrupt ok".
builder_figures() {
    grep -h '"role": "builder"' "$@" | head -1 |
        sed -E 's/.*"rate_khz": ([0-9.]+).*"lost": ([0-9]+), "corrupt": ([0-9]+).*"ok": (true|false).*/\1 \2 \3 \4/'
}

# The launch agent of --one-launcher: enters the namespace of the host whose address
# is given (10.78.0.H -> $prefix-H) and runs the node's command line there.
printf '#!/bin/sh\nexec ip netns exec "%s-${1##*.}" sh -c "$2"\n' "$prefix" >"$work/agent.sh"
chmod +x "$work/agent.sh"

# One run across the four hosts: a launcher per host, each starting its own nodes;
# or (--one-launcher) one launcher starting them all through the agent.
run_hosts() {
    local n=$1 partition="$prefix-hosts-$1" h pids=() status=0 only
    if ((one_launcher)); then
        if ! "$launcher" --config "$work/network.yaml" --nodes "$work/nodes.yaml" --set "partition=$partition" \
            --launch-agent "$work/agent.sh {host} {command}" \
            -- "$daq" --events "$events" --timeout 30 --progress 0 --json >"$work/hosts-$n-3.out" 2>&1; then
            echo "daq-hosts: the run across hosts from one launcher failed; its output:" >&2
            cat "$work/hosts-$n-3.out" >&2
            return 1
        fi
        builder_figures "$work/hosts-$n-3.out"
        return
    fi
    for h in 1 2 3 4; do
        only=$(for id in "${ids[@]}"; do [[ $(host_of "$id") == "$h" ]] && echo "$id"; done | paste -sd,)
        ip netns exec "$(host_ns "$h")" "$launcher" --config "$work/network.yaml" --nodes "$work/nodes.yaml" \
            --set "partition=$partition" --all-hosts --only "$only" \
            -- "$daq" --events "$events" --timeout 30 --progress 0 --json >"$work/hosts-$n-$h.out" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || status=1
    done
    if ((status != 0)); then
        echo "daq-hosts: the run across hosts failed; its output:" >&2
        cat "$work"/hosts-"$n"-*.out >&2
        return 1
    fi
    builder_figures "$work"/hosts-"$n"-3.out
}

# The same partition over sci on one host (the original files).
run_sci() {
    local n=$1 partition="$prefix-sci-$1"
    if ! "$launcher" --config "$repo/apps/examples/daq-large/network.yaml" \
        --nodes "$repo/apps/examples/daq-large/nodes.yaml" --set "partition=$partition" \
        -- "$daq" --events "$events" --timeout 30 --progress 0 --json >"$work/sci-$n.out" 2>&1; then
        echo "daq-hosts: the run over sci failed; its output:" >&2
        cat "$work/sci-$n.out" >&2
        return 1
    fi
    builder_figures "$work/sci-$n.out"
}

check() {
    local what=$1 rate=$2 lost=$3 corrupt=$4 ok=$5
    if [[ -z $rate || $ok != true || $lost != 0 || $corrupt != 0 ]]; then
        echo "daq-hosts: $what: built events at ${rate:-?} kHz, lost ${lost:-?}, corrupt ${corrupt:-?}, ok ${ok:-?}" >&2
        return 1
    fi
}

echo "daq-large (24 processes, $events events of 20 x 1 KiB) on four hosts (network namespaces, veth MTU 1500, auto: sci within, $inter_host between), $( ((one_launcher)) && echo "one launcher with --launch-agent" || echo "a launcher per host")"
failed=0
for ((r = 1; r <= runs; r++)); do
    # (the runs go through a process substitution: their partitions are noted here)
    partitions+=("$prefix-hosts-$r" "$prefix-sci-$r")
    read -r h_rate h_lost h_corrupt h_ok < <(run_hosts "$r" || true)
    check "across hosts, run $r" "${h_rate:-}" "${h_lost:-}" "${h_corrupt:-}" "${h_ok:-}" || failed=1
    line="run $r: across hosts ${h_rate:-failed} kHz"
    if ((with_sci)); then
        read -r s_rate s_lost s_corrupt s_ok < <(run_sci "$r" || true)
        check "over sci, run $r" "${s_rate:-}" "${s_lost:-}" "${s_corrupt:-}" "${s_ok:-}" || failed=1
        line+=", one host over sci ${s_rate:-failed} kHz"
        if [[ -n ${h_rate:-} && -n ${s_rate:-} ]]; then
            line+=$(awk -v h="$h_rate" -v s="$s_rate" 'BEGIN { if (s > 0) printf ", ratio %.2f", h / s }')
        fi
    fi
    echo "$line"
done
exit "$failed"
