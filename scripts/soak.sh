#!/usr/bin/env bash
# The soak: two partitions of msgpass-soak-node processes (tests/soak/soak_node.cpp)
# exchange checked traffic for MINUTES (default 1) while this script kill -9's and
# restarts random nodes and flaps the link between two hosts; sci transfer errors and
# udp datagram loss, duplicates and reordering are injected all along.
#   partition A: technology auto, machines a and b with three nodes each (sci within a
#                machine, tcp between them); a and b are two network namespaces joined
#                by a veth pair when this runs as root with `ip` (else both on this host,
#                and no link to flap);
#   partition B: technology udp, four nodes on 127.0.0.1.
# Every node checks that each message it receives is intact and arrives once and in
# order, and that a restarted peer's new messages come only after its loss was
# reported; the script checks that no node saw a violation, that every node alive at
# the end ended well, and that memory and descriptors of the nodes that ran the whole
# soak (a1, a4 and b11, never killed) stayed flat (from a quarter of the run to the end).
#   scripts/soak.sh [MINUTES] [--program PATH] [--no-memory-check]
# (default: builds build/soak, Release; --no-memory-check for a sanitizer build, whose
# quarantine grows memory on its own: descriptors are still checked)
# With CI set, missing namespaces are an error instead of a fallback. SOAK_KEEP=1 keeps
# the logs of a run that passed; SOAK_DEBUG=1 makes each node log its counters and fds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

minutes=1 program="" memory_check=1
while (($#)); do
    case $1 in
    --program) program=${2:?--program needs a path}; shift 2 ;;
    --no-memory-check) memory_check=0; shift ;; # a sanitizer's quarantine grows on its own
    -h | --help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
        [[ "$1" =~ ^[1-9][0-9]*$ ]] || { echo "$0: MINUTES must be a positive integer, not '$1'" >&2; exit 2; }
        minutes=$1; shift ;;
    esac
done
if [[ -z "$program" ]]; then
    msgpass_install_deps
    msgpass_configure build/soak -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build/soak -j"$msgpass_jobs" --target msgpass-soak-node
    program=$repo/build/soak/tests/soak/msgpass-soak-node
fi
[[ -x "$program" ]] || { echo "$0: no program at $program" >&2; exit 2; }

in_ci() { [[ -n "${CI:-}" && "${CI}" != 0 && "${CI}" != false ]]; }
seconds=$((minutes * 60))
tag=$$
work=$(mktemp -d "${TMPDIR:-/tmp}/msgpass-soak.XXXXXX")
nsa="msoakA$tag" nsb="msoakB$tag" veth_a="vsa$tag" veth_b="vsb$tag"
netns=0
declare -A pid=() ns_of=() part_of=() restarts=()

cleanup() {
    for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if ((netns)); then
        ip netns del "$nsa" 2>/dev/null || true
        ip netns del "$nsb" 2>/dev/null || true
    fi
    rm -f /dev/shm/msgpass."$(id -un)".soak"$tag"-* 2>/dev/null || true
    [[ -n "${SOAK_KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

# ---- hosts: two network namespaces joined by a veth pair, or this host twice
host_a=127.0.0.1 host_b=127.0.0.1
if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null 2>&1 && ip netns add "$nsa" 2>/dev/null; then
    netns=1
    ip netns add "$nsb"
    ip link add "$veth_a" type veth peer name "$veth_b"
    ip link set "$veth_a" netns "$nsa"
    ip link set "$veth_b" netns "$nsb"
    ip -n "$nsa" addr add 10.77.0.1/24 dev "$veth_a"
    ip -n "$nsb" addr add 10.77.0.2/24 dev "$veth_b"
    for n in "$nsa" "$nsb"; do ip -n "$n" link set lo up; done
    ip -n "$nsa" link set "$veth_a" up
    ip -n "$nsb" link set "$veth_b" up
    host_a=10.77.0.1 host_b=10.77.0.2
elif in_ci; then
    echo "soak: required in CI (CI is set): network namespaces (root and ip from iproute2)" >&2
    exit 1
else
    echo "soak: no network namespaces (needs root and ip): machines a and b both run on this host, no link flaps"
fi

# A port free now on 127.0.0.1 (tcp and udp), different from those taken before.
declare -A taken=()
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        [[ -n "${taken[$p]:-}" ]] && continue
        if ! ss -Htanu 2>/dev/null | awk '{print $5}' | grep -q ":$p\$"; then
            taken[$p]=1
            echo "$p"
            return
        fi
    done
    echo "soak: no free port found" >&2
    exit 1
}

# ---- partition A: auto across machines a and b, sci transfer errors injected
mkdir -p "$work/a" "$work/b"
cat >"$work/a/network.yaml" <<EOF
partition: soak${tag}-a
technology: auto
peer_timeout: 1s
max_message_size: 1MiB
sci:
  max_outst_buffers: 4
  recv_buffer_size: 8KiB
  recv_buffer_no: 63
  inject_error_rate: 0.001
EOF
{
    echo "machines:"
    echo "  a: {sci: {node_id: 4}}"
    echo "  b: {sci: {node_id: 8}}"
    echo "nodes:"
    for id in 1 2 3; do echo "  - {id: $id, host: $host_a, port: $(free_port), machine: a}"; done
    for id in 4 5 6; do echo "  - {id: $id, host: $host_b, port: $(free_port), machine: b}"; done
} >"$work/a/nodes.yaml"
for id in 1 2 3; do ns_of[a$id]=$nsa; part_of[a$id]=a; done
for id in 4 5 6; do ns_of[a$id]=$nsb; part_of[a$id]=a; done

# ---- partition B: udp with injected loss, duplicates and reordering
cat >"$work/b/network.yaml" <<EOF
partition: soak${tag}-b
technology: udp
peer_timeout: 1s
max_message_size: 1MiB
udp:
  inject_loss: 0.02
  inject_duplicate: 0.01
  inject_reorder: 0.02
EOF
{
    echo "nodes:"
    for id in 11 12 13 14; do echo "  - {id: $id, host: 127.0.0.1, port: $(free_port)}"; done
} >"$work/b/nodes.yaml"
for id in 11 12 13 14; do ns_of[b$id]=""; part_of[b$id]=b; done

end=$((SECONDS + seconds))
start_node() { # KEY (a1, b11, ...)
    local key=$1 part=${1:0:1} id=${1:1} left=$((end - SECONDS))
    local n=${restarts[$key]:-0}
    local -a run=()
    [[ $netns -eq 1 && -n "${ns_of[$key]}" ]] && run=(ip netns exec "${ns_of[$key]}")
    MSGPASS_NODE_ID=$id MSGPASS_NODE_NAME="node-$id" MSGPASS_PARTITION="soak${tag}-$part" \
        MSGPASS_CONFIG="$work/$part/network.yaml" MSGPASS_NODES="$work/$part/nodes.yaml" \
        "${run[@]}" "$program" --seconds "$left" --max-size 262144 >"$work/$key.$n.log" 2>&1 &
    pid[$key]=$!
}

for key in "${!part_of[@]}"; do start_node "$key"; done
echo "soak: ${#part_of[@]} nodes for ${seconds} s (logs in $work)"

# ---- faults: a kill -9 and restart every 2-4 s, a link flap every 15 s (namespaces)
kills=0 flaps=0 next_flap=$((SECONDS + 15))
keys=("${!part_of[@]}")
# Witnesses: one node per machine and partition is never killed, so that memory and
# descriptors are watched over the whole run while its partners die and come back.
declare -A witness=([a1]=1 [a4]=1 [b11]=1)
victims=()
for key in "${keys[@]}"; do [[ -n "${witness[$key]:-}" ]] || victims+=("$key"); done
while ((SECONDS < end - 8)); do
    sleep "$((2 + RANDOM % 3))"
    ((SECONDS < end - 8)) || break
    victim=${victims[$((RANDOM % ${#victims[@]}))]}
    kill -9 "${pid[$victim]}" 2>/dev/null || true
    wait "${pid[$victim]}" 2>/dev/null || true
    kills=$((kills + 1))
    restarts[$victim]=$((${restarts[$victim]:-0} + 1))
    sleep 0.$((2 + RANDOM % 7))
    start_node "$victim"
    if ((netns && SECONDS >= next_flap && SECONDS < end - 8)); then
        ip -n "$nsa" link set "$veth_a" down
        sleep 0.3
        ip -n "$nsa" link set "$veth_a" up
        flaps=$((flaps + 1))
        next_flap=$((SECONDS + 15))
    fi
done

# ---- the end: every node ends on its own at the deadline
failed=0
for key in "${keys[@]}"; do
    status=0
    wait "${pid[$key]}" || status=$?
    if ((status != 0)); then
        echo "soak: node $key (instance ${restarts[$key]:-0}) exited with $status" >&2
        failed=1
    fi
done
unset 'pid[@]'
declare -A pid=()

if grep -h "VIOLATION" "$work"/*.log; then
    echo "soak: violations above" >&2
    failed=1
fi
if grep -h "msgpass-soak-node:" "$work"/*.log; then
    echo "soak: a node failed to start or run (above)" >&2
    failed=1
fi
# Every node alive at the end heard from every peer (a pair that carries nothing is
# a silent loss as sure as a dropped message).
for key in "${keys[@]}"; do
    line=$(grep -hE "^soak node [0-9]+: ran" "$work/$key.${restarts[$key]:-0}.log" || true)
    [[ -z "$line" ]] && continue # reported below or above
    if [[ ! "$line" =~ ran\ ([0-9]+)\.[0-9]\ s,.*heard\ from\ ([0-9]+)\ of\ ([0-9]+)\ peers ]]; then
        echo "soak: node $key printed a summary this script cannot read: $line" >&2
        failed=1
        continue
    fi
    ran=${BASH_REMATCH[1]} heard=${BASH_REMATCH[2]} peers=${BASH_REMATCH[3]}
    if ((ran >= 5 && heard != peers)); then
        echo "soak: node $key heard from $heard of its $peers peers: $line" >&2
        failed=1
    fi
done
# Memory and descriptors flat for the nodes never restarted (the witnesses): from a quarter of the
# run to the end, resident memory grows by at most half plus 32 MiB (warm-up of
# segments and pools) and descriptors by at most 8.
for key in "${keys[@]}"; do
    [[ -n "${restarts[$key]:-}" ]] && continue
    line=$(grep -hE "^soak node [0-9]+: ran" "$work/$key.0.log" || true)
    if [[ -z "$line" ]]; then
        echo "soak: node $key printed no summary" >&2
        failed=1
        continue
    fi
    read -r rss0 rss1 fd0 fd1 < <(sed -E 's/.*rss_kb ([0-9]+) -> ([0-9]+), fds ([0-9]+) -> ([0-9]+),.*/\1 \2 \3 \4/' <<<"$line")
    if (((memory_check && rss1 > rss0 + rss0 / 2 + 32768) || fd1 > fd0 + 8)); then
        echo "soak: node $key grew: $line" >&2
        failed=1
    fi
done

total() { cat "$work"/*.log | sed -nE "s/$1/\\1/p" | awk '{s += $1} END {print s + 0}'; }
sent=$(total '.*, sent ([0-9]+),.*')
received=$(total '.*received ([0-9]+) from.*')
losses=$(total '.*losses reported ([0-9]+),.*')
echo "soak: ${minutes} min, ${#keys[@]} nodes, $kills kills and restarts, $flaps link flaps;" \
    "by the last process of each node (a process killed prints nothing): messages sent $sent," \
    "received and checked $received, losses reported $losses"
if ((failed)); then
    echo "soak: FAILED (logs kept in $work.failed)" >&2
    cp -r "$work" "$work.failed"
    exit 1
fi
grep -h "^soak node" "$work"/*.log | sort -V | sed 's/^/  /'
echo "soak: ok"
