#!/usr/bin/env bash
# A 256-process partition across 8 hosts (issue 31, item 4): msgpass-bench's fanin
# pattern, one receiver (node 1, host 1) and 255 senders spread over eight network
# namespaces joined by a bridge with veth links (MTU 1500, scripts/lib/hosts.sh), with
# `technology: auto`: the 31 senders on the receiver's host talk sci, the other 224
# cross hosts over tcp or udp (--inter-host). Each host runs a launcher of its own
# (msgpass-run --only its nodes); every process runs msgpass-bench in one-side mode,
# each sender at a fixed low rate. Then, in the same invocation, the same partition on
# one host over sci (one launcher), the reference. Prints per run: the start (from the
# launch until the receiver had heard from every sender, each of which it commanded
# first: every node reached the peer it talks to), messages lost, the receiver's CPU
# per message (its receiving thread; and its process), memory per node (RSS, /dev/shm)
# and descriptors per node, and the ratios to the reference; then msgpass-bench's JSON
# lines. Fails (1) when a run failed or lost a message.
#
#   host h: node 1 (h = 1), senders i = 2..256 with (i - 2) % 8 + 1 = h
#
# Usage: scripts/partition-hosts.sh [--build DIR] [--senders N] [--hosts H]
#            [--inter-host tcp|udp|tcp,udp] [--rate R] [--seconds S] [--peer-timeout T] [--no-sci]
#   --build      the build directory with msgpass-bench and msgpass-run (default build/rel)
#   --senders    senders (default 255: a partition of 256 processes)
#   --hosts      namespaces (default 8)
#   --inter-host the technology between hosts, or both in turn (default tcp,udp)
#   --rate       messages per second of each sender (default 4)
#   --seconds    the timed part (default 5; a tenth before it is warm-up)
#   --peer-timeout the network file's peer_timeout (default 10s)
#   --no-sci     no reference run on one host
# sci's waits sleep after their first poll (MSGPASS_SCI_WAIT=sleep), as in
# scripts/fanin-curves.sh: at these rates the default spin-then-yield wait, not the
# receive, would be the receiver's CPU time.
# Needs root and the ip tool (iproute2); without them it exits 77 (ctest: skipped), or
# 1 when CI is set. The namespaces, the partitions' segments and the generated files
# are removed whatever the outcome.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build/rel
senders=255
hosts=8
inter_hosts=tcp,udp
rate=4
seconds=5
peer_timeout=10s
with_sci=1
while (($#)); do
    case $1 in
    --build) build=$2; shift 2 ;;
    --senders) senders=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --inter-host) inter_hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --peer-timeout) peer_timeout=$2; shift 2 ;;
    --no-sci) with_sci=0; shift ;;
    -h | --help) sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "partition-hosts: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for t in ${inter_hosts//,/ }; do
    [[ $t == tcp || $t == udp ]] || { echo "partition-hosts: --inter-host: expected tcp, udp or tcp,udp, found '$inter_hosts'" >&2; exit 2; }
done
[[ $senders =~ ^[0-9]+$ && $senders -ge 1 && $senders -le 1023 ]] ||
    { echo "partition-hosts: --senders: expected 1..1023, found '$senders'" >&2; exit 2; }
[[ $hosts =~ ^[0-9]+$ && $hosts -ge 2 && $hosts -le 200 ]] ||
    { echo "partition-hosts: --hosts: expected 2..200, found '$hosts'" >&2; exit 2; }
[[ $rate =~ ^[0-9]+$ && $rate -ge 1 ]] || { echo "partition-hosts: --rate: expected a positive number, found '$rate'" >&2; exit 2; }
[[ $seconds =~ ^[0-9.]+$ ]] || { echo "partition-hosts: --seconds: expected a number, found '$seconds'" >&2; exit 2; }

launcher=$build/apps/msgpass-run/msgpass-run
bench=$build/apps/msgpass-bench/msgpass-bench
for program in "$launcher" "$bench"; do
    [[ -x $program ]] || { echo "partition-hosts: $program is not built (cmake --build $build --target msgpass-bench msgpass-run)" >&2; exit 2; }
done

source "$repo/scripts/lib/hosts.sh"
hosts_init partition-hosts mpart 10.79.0
hosts_require

prefix=$hosts_prefix
work=$(mktemp -d)
partitions=()
launchers=()
cleanup() {
    local p pid
    for pid in "${launchers[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${launchers[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    for p in "${partitions[@]}"; do
        "$launcher" --config "$work/network.yaml" --nodes "$work/nodes-sci.yaml" --set "partition=$p" --cleanup \
            >/dev/null 2>&1 || true
    done
    hosts_remove
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hosts_reap_stale
hosts_make "$hosts"

count=$((senders + 1))
# host_of[id]: the node's host; only[h]: the ids of host h (msgpass-run --only).
host_of=() only=()
for ((id = 1; id <= count; id++)); do
    h=$((id == 1 ? 1 : (id - 2) % hosts + 1))
    host_of[id]=$h
    only[h]+=${only[h]:+,}$id
done
# 256 processes on 2 CPUs: a node may wait for the CPU longer than the default second
# of silence; a peer given up for that is a failed run, not a finding.
{
    echo "# generated by scripts/partition-hosts.sh"
    echo "technology: auto"
    echo "peer_timeout: $peer_timeout"
} >"$work/network.yaml"
{
    echo "# generated by scripts/partition-hosts.sh: $count nodes on $hosts hosts"
    echo "nodes:"
    for ((id = 1; id <= count; id++)); do
        echo "  - {id: $id, name: n$id, host: $hosts_net.${host_of[id]}, port: $((22000 + id))}"
    done
} >"$work/nodes.yaml"
sed -e 's/host: [0-9.]*/host: 127.0.0.1/' "$work/nodes.yaml" >"$work/nodes-sci.yaml"

bench_args=(--json --pattern fanin --members "$senders" --sizes 64 --seconds "$seconds" --rate "$rate")

# The receiver's JSON line of a run's output (msgpass-run prefixes [n1]).
result_of() {
    grep -h '"pattern":"fanin"' "$@" | head -1 | sed 's/^[^{]*//'
}

# One run across the hosts: a launcher per host, each starting its own nodes.
run_hosts() {
    local inter=$1 partition="$prefix-$1" h pids=() status=0 started
    partitions+=("$partition")
    started=$(date +%s.%N)
    for ((h = 1; h <= hosts; h++)); do
        ip netns exec "$(host_ns "$h")" env MSGPASS_SCI_WAIT=sleep timeout 600 "$launcher" \
            --config "$work/network.yaml" --nodes "$work/nodes.yaml" --set "partition=$partition" \
            --set "auto.inter_host=$inter" --all-hosts --only "${only[h]}" -- \
            "$bench" --config "$work/network.yaml" --nodes "$work/nodes.yaml" --set "partition=$partition" \
            --set "auto.inter_host=$inter" "${bench_args[@]}" --started-at "$started" \
            >"$work/$inter-$h.out" 2>&1 &
        pids+=($!)
        launchers+=($!)
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || status=1
    done
    launchers=()
    if ((status != 0)); then
        echo "partition-hosts: the run across hosts ($inter between them) failed; the receiver's output," >&2
        grep '^\[n1\]' "$work/$inter-1.out" >&2 || true
        echo "then the first lines of each host's (segments removed after the failure left out):" >&2
        for ((h = 1; h <= hosts; h++)); do
            echo "== host $h" >&2
            grep -v 'shared-memory segments\{0,1\} left by node' "$work/$inter-$h.out" | head -n 15 >&2 || true
        done
        return 1
    fi
    result_of "$work/$inter-1.out" >"$work/$inter.json"
}

# The same partition on one host over sci: one launcher.
run_sci() {
    local partition="$prefix-sci" started
    partitions+=("$partition")
    started=$(date +%s.%N)
    if ! env MSGPASS_SCI_WAIT=sleep timeout 600 "$launcher" --config "$work/network.yaml" \
        --nodes "$work/nodes-sci.yaml" --set "partition=$partition" --set technology=sci -- \
        "$bench" --config "$work/network.yaml" --nodes "$work/nodes-sci.yaml" --set "partition=$partition" \
        --set technology=sci "${bench_args[@]}" --started-at "$started" >"$work/sci.out" 2>&1; then
        echo "partition-hosts: the run on one host over sci failed; its output:" >&2
        grep -v 'shared-memory segments\{0,1\} left by node' "$work/sci.out" | head -n 40 >&2 || true
        return 1
    fi
    result_of "$work/sci.out" >"$work/sci.json"
}

echo "fanin: 1 receiver + $senders senders ($count processes), 64 B, $rate msgs/s each for $seconds s;" \
    "$hosts hosts (network namespaces, veth MTU 1500), $(($(tr , '\n' <<<"${only[1]}" | wc -l) - 1)) senders on the receiver's host"
failed=0
: >"$work/results.tsv"
for t in ${inter_hosts//,/ }; do
    run_hosts "$t" || failed=1
    printf 'auto (%s between hosts)\t%s\n' "$t" "$(cat "$work/$t.json" 2>/dev/null || true)" >>"$work/results.tsv"
done
if ((with_sci)); then
    run_sci || failed=1
    printf 'one host, sci\t%s\n' "$(cat "$work/sci.json" 2>/dev/null || true)" >>"$work/results.tsv"
fi

# The table: one row per run, ratios to the reference when there is one.
python3 - "$work/results.tsv" "$with_sci" <<'EOF' || failed=1
import json, sys
rows = []
for text in open(sys.argv[1]):
    label, _, j = text.rstrip("\n").partition("\t")
    rows.append((label, json.loads(j) if j.strip() else None))
ref = rows[-1][1] if sys.argv[2] == "1" else None
keys = [("start_s", "start s", "%.2f"), ("lost", "lost", "%d"), ("cpu_us_per_msg", "rx thread us/msg", "%.1f"),
        ("process_cpu_us_per_msg", "rx process us/msg", "%.1f"), ("rss_kib", "rx RSS KiB", "%d"),
        ("member_rss_kib", "sender RSS KiB", "%d"), ("member_rss_max_kib", "max", "%d"),
        ("shm_kib_per_node", "/dev/shm KiB/node", "%.0f"), ("shm_objects_per_node", "objects/node", "%.2f"),
        ("fds", "rx fds", "%d"), ("member_fds", "sender fds", "%.1f"), ("member_fds_max", "max", "%d"),
        ("iterations", "msgs", "%d"), ("msgs_per_s", "msgs/s", "%.0f")]
print("| run | " + " | ".join(k[1] for k in keys) + " |")
print("|---" * (len(keys) + 1) + "|")
bad = False
for label, j in rows:
    if j is None:
        print("| %s | failed |" % label)
        bad = True
        continue
    cells = []
    for key, _, fmt in keys:
        v = j.get(key)
        cell = "-" if v is None else fmt % v
        if ref is not None and j is not ref and v is not None and ref.get(key) and key not in ("lost", "iterations"):
            cell += " (%.2fx)" % (v / ref[key])
        cells.append(cell)
    print("| %s | %s |" % (label, " | ".join(cells)))
    if j.get("lost") != 0 or j.get("iterations", 0) <= 0 or j.get("members") is None:
        bad = True
for label, j in rows:
    if j is not None:
        print("%s: %s" % (label, json.dumps(j, separators=(",", ":"))))
sys.exit(1 if bad else 0)
EOF
if ((failed)); then
    echo "partition-hosts: a run failed or lost messages" >&2
fi
exit "$failed"
