#!/usr/bin/env bash
# Compares msgpass with its peers on this machine, in one run, and writes the result
# into the repository. Three places, each with the floors of the machine measured
# before and after its systems (msgpass-bench --reference; each floor is the better
# of the two runs):
#   shm       two processes of one host: msgpass-bench over sci; UCX shared memory
#             (ucx_perftest tag_lat / tag_bw, UCX_TLS=sm,self); Open MPI (NetPIPE's
#             NPopenmpi, btl self,vader); ZeroMQ PAIR over ipc:// (our
#             tests/peers/zmq_bench); floors: cache-line ping-pong and ring.
#   loopback  the same host over 127.0.0.1: msgpass-bench over tcp and udp; ZeroMQ
#             PAIR over tcp://; NNG pair over tcp:// (tests/peers/nng_bench); UCX
#             over tcp (UCX_TLS=tcp); floors: raw TCP and raw UDP.
#   netns     the same systems as loopback between two network namespaces joined by
#             a veth pair (MTU 1500) that this script makes (and removes on exit),
#             as two hosts on a link: loopback alone flatters tcp (64 KiB MTU, no
#             checksums). Needs root and the ip tool; said and skipped otherwise.
# Optionally (PEERS_MPI=1) the same MPI program (tests/mpi/bench/osu.c) built with
# msgpass-mpicc and with Open MPI's mpicc (scripts/mpi-bench.sh, one round, in
# build/release-mpi). Installs what it needs (Debian packages, only those missing),
# builds msgpass-bench in Release (build/release, as scripts/demo.sh) and zmq_bench
# and nng_bench (outside the CMake build: msgpass never depends on ZeroMQ or NNG),
# then writes docs/benchmarks-results.md (a table per place, generated) and
# docs/benchmarks.png (latency and bandwidth against size, a row of two panels per
# place). Raw results stay in build/peers/raw/.
# About 4 to 5 minutes on 2 CPUs (more on a loaded machine), plus the Release build
# when build/release is not up to date and 2 to 3 minutes with PEERS_MPI=1. Works
# from any directory.
# Environment:
#   PEERS_ONLY     a subset, words separated by commas: places (shm, loopback,
#                  netns) and systems (a word matches every system whose name has
#                  it: sci, tcp, udp, ucx, zeromq, nng, openmpi, msgpass); a system
#                  runs when its place and its name are selected (no place word: all
#                  places; no system word: all systems). The floors a selected
#                  system is compared with always run. E.g. PEERS_ONLY=tcp (every
#                  tcp system in loopback and netns), PEERS_ONLY=shm,ucx,
#                  PEERS_ONLY=netns. Empty: everything.
#   PEERS_SECONDS  time per point (0.25); PEERS_CPUS the two CPUs the two ends are
#                  pinned to ("0,1"; empty: no pinning); PEERS_MPI (0) and
#                  PEERS_MPI_ROUNDS (1): the MPI comparison; PEERS_NETNS (1): 0 skips
#                  the namespaces; MSGPASS_JOBS: build parallelism (2).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

jobs=$msgpass_jobs
seconds=${PEERS_SECONDS:-0.25}
if [[ -z "${PEERS_CPUS+set}" ]]; then
    if (($(nproc) >= 2)); then PEERS_CPUS=0,1; else PEERS_CPUS=; fi
fi
cpus=$PEERS_CPUS
sizes=8,16,32,64,128,256,512,1KiB,2KiB,4KiB,8KiB,16KiB,64KiB,256KiB,1MiB,4MiB
size_bytes=8,16,32,64,128,256,512,1024,2048,4096,8192,16384,65536,262144,1048576,4194304
build=build/release
out=build/peers
raw=$out/raw
results=docs/benchmarks-results.md
plot=docs/benchmarks.png
start_time=$SECONDS
failures=()
absent=()

# The systems of each place, in the order of the tables; the floor each is compared
# with follows from its name (floor_of).
shm_systems="msgpass-sci ucx-sm openmpi-vader zeromq-ipc floor-shm"
net_systems="msgpass-tcp msgpass-udp zeromq-tcp nng-tcp ucx-tcp floor-tcp floor-udp"
floor_of() {
    case $1 in
    floor-*) echo "$1" ;;
    *-udp) echo floor-udp ;;
    msgpass-sci | ucx-sm | openmpi-vader | zeromq-ipc) echo floor-shm ;;
    *) echo floor-tcp ;;
    esac
}

# PEERS_ONLY: place words and system words (see the head of this file).
only_places=()
only_systems=()
IFS=, read -r -a only_words <<<"${PEERS_ONLY:-}"
for word in "${only_words[@]}"; do
    case $word in
    "") ;;
    shm | loopback | netns) only_places+=("$word") ;;
    *) only_systems+=("$word") ;;
    esac
done
# wanted PLACE SYSTEM: true when PEERS_ONLY selects SYSTEM in PLACE (a floor is
# wanted when a system compared with it is).
wanted() {
    local place=$1 system=$2 word s systems
    if ((${#only_places[@]} > 0)); then
        local found=0
        for word in "${only_places[@]}"; do [[ $word == "$place" ]] && found=1; done
        ((found)) || return 1
    fi
    ((${#only_systems[@]} == 0)) && return 0
    if [[ $system == floor-* ]]; then
        [[ $place == shm ]] && systems=$shm_systems || systems=$net_systems
        for s in $systems; do
            [[ $s != floor-* && $(floor_of "$s") == "$system" ]] && wanted "$place" "$s" && return 0
        done
    fi
    for word in "${only_systems[@]}"; do [[ $system == *"$word"* ]] && return 0; done
    return 1
}
# place_wanted PLACE: some system of PLACE is wanted.
place_wanted() {
    local s systems
    [[ $1 == shm ]] && systems=$shm_systems || systems=$net_systems
    for s in $systems; do wanted "$1" "$s" && return 0; done
    return 1
}

header() {
    echo
    echo "=== $* ($((SECONDS - start_time)) s) ==="
}

# A failed measurement is reported and the others still run; the script's status
# says that something failed, after the results are written.
failed() {
    echo "compare-peers: $*" >&2
    failures+=("$*")
}

install_peer_packages() {
    local missing=() pkg
    for pkg in libzmq3-dev libnng-dev ucx-utils openmpi-bin libopenmpi-dev netpipe-openmpi pkg-config iproute2; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    # Any gnuplot will do; gnuplot-nox conflicts with the X11 and Qt builds.
    command -v gnuplot >/dev/null 2>&1 || missing+=(gnuplot-nox)
    ((${#missing[@]} == 0)) && return 0
    local -a sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "compare-peers: missing ${missing[*]}, not root and no sudo" >&2
            return 1
        }
        sudo=(sudo)
    fi
    echo "installing ${missing[*]}"
    local -a install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}")
    if ! "${install[@]}" >"$out/apt.log" 2>&1; then
        echo "install failed, refreshing the package index and retrying"
        if ! "${sudo[@]}" apt-get update -q >>"$out/apt.log" 2>&1 || ! "${install[@]}" >>"$out/apt.log" 2>&1; then
            tail -20 "$out/apt.log" >&2
            return 1
        fi
    fi
}

mkdir -p "$raw"
rm -f "$raw"/*

header "dependencies"
msgpass_install_deps
install_peer_packages

header "build msgpass-bench (Release, $build)"
msgpass_configure "$build" -DCMAKE_BUILD_TYPE=Release -DMSGPASS_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target msgpass-bench
bench=$build/apps/msgpass-bench/msgpass-bench
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The build is of the working tree: say when it differs from the commit (outside
# what this script writes).
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | awk '{print $2}' |
    grep -v -e "^$results\$" -e "^$plot\$" | cut -d/ -f1 | sort -u | tr '\n' ' ' || true)
[[ -n "$dirty" ]] && commit="$commit with uncommitted changes in ${dirty% }"

# build_peer NAME LIBS...: tests/peers/NAME.cpp into $out/NAME when it is older than
# its sources. Its results are msgpass-bench's (report.cpp: the same JSON line).
build_peer() {
    local name=$1
    shift
    local program=$out/$name
    if [[ ! -x "$program" || tests/peers/$name.cpp -nt "$program" || tests/peers/peer_bench.hpp -nt "$program" ||
        apps/msgpass-bench/report.cpp -nt "$program" ]]; then
        # shellcheck disable=SC2046 # pkg-config's flags are words
        "${CXX:-g++}" -std=c++20 -O2 -Wall -Wextra -Wpedantic -o "$program" \
            -Iapps/msgpass-bench -Ibase/include -Iconfig/include -Iframework/include \
            "tests/peers/$name.cpp" apps/msgpass-bench/report.cpp "$build/config/libmsgpass_config.a" \
            "$@" $(pkg-config --cflags --libs yaml-cpp)
    fi
}
header "build zmq_bench and nng_bench ($out)"
# shellcheck disable=SC2046 # pkg-config's flags are words
build_peer zmq_bench $(pkg-config --cflags --libs libzmq)
build_peer nng_bench -lnng
zmq_bench=$out/zmq_bench
nng_bench=$out/nng_bench

cpu_args=()
[[ -n "$cpus" ]] && cpu_args=(--cpu "$cpus")
cpu_a=${cpus%%,*}
cpu_b=${cpus#*,}

# The namespaces: "hosts" A and B, one end of a veth pair each, MTU 1500. Names carry
# this shell's pid; namespaces of a run that was killed are removed here.
ns_a=mpp$$-a
ns_b=mpp$$-b
addr_a=10.78.0.1
addr_b=10.78.0.2
dev_a=mpp$$a
dev_b=mpp$$b
netns_made=0
remove_netns() {
    ((netns_made)) || return 0
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
    netns_made=0
}
# On the way out, the servers still running in the background go first (timeout
# passes the signal on), then the namespaces.
cleanup() {
    local pids
    pids=$(jobs -p)
    [[ -n "$pids" ]] && kill $pids 2>/dev/null
    remove_netns
}
trap cleanup EXIT
trap 'exit 130' INT TERM
make_netns() {
    local stale pid
    for stale in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^mpp[0-9]+-[ab]$' || true); do
        pid=${stale#mpp}
        pid=${pid%-*}
        kill -0 "$pid" 2>/dev/null || ip netns del "$stale" 2>/dev/null || true
    done
    ip netns add "$ns_a" && netns_made=1 && ip netns add "$ns_b" &&
        ip link add "$dev_a" mtu 1500 type veth peer name "$dev_b" mtu 1500 &&
        ip link set "$dev_a" netns "$ns_a" && ip link set "$dev_b" netns "$ns_b" &&
        ip -n "$ns_a" addr add "$addr_a/24" dev "$dev_a" && ip -n "$ns_b" addr add "$addr_b/24" dev "$dev_b" &&
        ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
        ip -n "$ns_a" link set "$dev_a" up && ip -n "$ns_b" link set "$dev_b" up
}
netns_note=
if place_wanted netns; then
    header "network namespaces $ns_a ($addr_a) and $ns_b ($addr_b), veth MTU 1500"
    if [[ "${PEERS_NETNS:-1}" == 0 ]]; then
        netns_note="PEERS_NETNS=0"
    elif [[ $(id -u) -ne 0 ]]; then
        netns_note="making network namespaces needs root (this run is uid $(id -u))"
    elif ! command -v ip >/dev/null 2>&1; then
        netns_note="no ip tool (iproute2)"
    elif ! make_netns 2>"$raw/netns.log"; then
        netns_note="the namespaces could not be made here ($(head -1 "$raw/netns.log"))"
        remove_netns
    fi
    if [[ -n "$netns_note" ]]; then
        echo "compare-peers: the netns place is skipped: $netns_note" >&2
        absent+=("the netns place (two network namespaces), skipped: $netns_note")
    fi
fi
have_netns() { ((netns_made)); }

# Other work on the machine moves every figure; the results say how busy it was.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# floors PLACE ROUND: msgpass-bench --reference for the floors PLACE's wanted systems
# are compared with, into $raw/PLACE-floors-ROUND.jsonl.
floors() {
    local place=$1 round=$2 list=() f
    for f in shm tcp udp; do
        wanted "$place" "floor-$f" || continue
        [[ $place == shm && $f != shm ]] && continue
        [[ $place != shm && $f == shm ]] && continue
        list+=("$f")
    done
    ((${#list[@]} > 0)) || return 0
    local -a where=() floor_args=()
    if [[ $place == netns ]]; then
        where=(ip netns exec "$ns_a")
        floor_args=(--floor-addresses "$addr_a,$addr_b" --floor-netns "$ns_b")
    fi
    header "$place: floors ${list[*]} (msgpass-bench --reference, round $round)"
    local attempt status
    # A floor stops the whole --reference run when it fails (on a very busy machine
    # a floor's process can stall past its 5 s deadline): once more, then give up.
    for attempt in 1 2; do
        status=0
        timeout 600 "${where[@]}" "$bench" --reference --json --floors "$(
            IFS=,
            echo "${list[*]}"
        )" "${floor_args[@]}" --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
            >"$raw/$place-floors-$round.jsonl" 2>>"$raw/$place-floors.log" || status=$?
        ((status == 0)) && return 0
        echo "compare-peers: $place: msgpass-bench --reference failed (status $status, attempt $attempt): $(tail -1 "$raw/$place-floors.log")" >&2
    done
    failed "$place: msgpass-bench --reference failed twice (status $status, see $raw/$place-floors.log)"
}

# msgpass_netns TECHNOLOGY: msgpass-bench in its one-side mode, node 1 (the driver)
# in namespace A, node 2 in B, with a network and a nodes file of their own.
msgpass_netns() {
    local technology=$1 dir=$out/netns port=$((24000 + RANDOM % 4000))
    mkdir -p "$dir"
    cat >"$dir/network.yaml" <<EOF
partition: peers-$$
technology: $technology
max_message_size: 4194304
send_queue_limit: 1024
EOF
    cat >"$dir/nodes.yaml" <<EOF
nodes:
  - {id: 1, host: $addr_a, port: $port}
  - {id: 2, host: $addr_b, port: $((port + 1))}
EOF
    local -a common=(--config "$dir/network.yaml" --nodes "$dir/nodes.yaml" "${cpu_args[@]}")
    timeout 600 ip netns exec "$ns_b" "$bench" "${common[@]}" --node-id 2 >"$raw/netns-msgpass-$technology-peer.log" 2>&1 &
    local peer=$!
    local status=0
    timeout 600 ip netns exec "$ns_a" "$bench" "${common[@]}" --node-id 1 --json --sizes "$sizes" --seconds "$seconds" \
        >"$raw/netns-msgpass-$technology.jsonl" || status=$?
    if ((status != 0)); then
        kill "$peer" 2>/dev/null || true
        wait "$peer" 2>/dev/null || true
        failed "netns: msgpass-bench over $technology failed (status $status; the peer's log: $raw/netns-msgpass-$technology-peer.log)"
    else
        wait "$peer" || failed "netns: msgpass-bench's peer over $technology ended with status $? (see $raw/netns-msgpass-$technology-peer.log)"
    fi
}

# UCX: ucx_perftest, one server and one client per point (its batch mode does not
# reach a remote server in this version). It has no time budget, only iteration
# counts: a short probe at the first size gives the time of one iteration, and each
# point's count aims at PEERS_SECONDS from the time per iteration expected at the
# point before it, scaled by the ratio of the sizes (an overestimate for small
# messages, whose cost hardly grows with size: those points run shorter, never
# longer); timeout ends a point that a busy machine stretches anyway.
# How it reports (checked in UCX 1.13's source, libperf.c ucx_perf_calc_result, and
# its -f -v output "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr"):
# - tag_lat is a ping-pong: every latency column is the round trip divided by 2,
#   i.e. one-way, like msgpass-bench's; the percentile (-R 50, the default) is over
#   per-iteration times of the last 2048 iterations at most; overall_mr counts the
#   messages of both directions (round trips x 2), as msgpass-bench's ping-pong
#   msgs_per_s does.
# - tag_bw is a one-way stream (tag sends with a window of outstanding requests)
#   whose time includes the receiver's final acknowledgement; overall_mr is
#   messages per second.
# - its bandwidth columns are MiB/s (2^20); the JSON line's MBps is 10^6 bytes per
#   second, computed here as messages/s x size.
ucx_port=$((20000 + ($$ % 2000) * 4))
ucx_line=
# ucx_run PLACE TLS TEST SIZE ITERATIONS: one server and one client; sets
# ucx_line to ucx_perftest's CSV result line, or fails. (Not run in a $(...): the
# server is a job of this shell, which ends it on the way out.)
ucx_run() {
    local place=$1 tls=$2 test=$3 size=$4 n=$5
    local -a server=() client=() server_env=(env "UCX_TLS=$tls") client_env=(env "UCX_TLS=$tls")
    local -a server_cpu=() client_cpu=()
    local host=127.0.0.1
    # tcp goes through the device of the place only (UCX would also offer the
    # host's other interfaces).
    case $place in
    loopback)
        server_env+=(UCX_NET_DEVICES=lo)
        client_env+=(UCX_NET_DEVICES=lo)
        ;;
    netns)
        server=(ip netns exec "$ns_b")
        client=(ip netns exec "$ns_a")
        host=$addr_b
        server_env+=("UCX_NET_DEVICES=$dev_b")
        client_env+=("UCX_NET_DEVICES=$dev_a")
        ;;
    esac
    if [[ -n "$cpus" ]]; then
        server_cpu=(-c "$cpu_b")
        client_cpu=(-c "$cpu_a")
    fi
    local warm=$((n / 10 > 10 ? n / 10 : 10))
    local limit
    limit=$(awk -v s="$seconds" 'BEGIN { printf "%d\n", 20 * s + 10 }')
    local attempt log=$raw/$place-ucx-server.log line
    for attempt in 1 2 3; do
        ucx_port=$((ucx_port + 1))
        : >"$log"
        timeout "$limit" "${server[@]}" "${server_env[@]}" ucx_perftest -p "$ucx_port" "${server_cpu[@]}" >"$log" 2>&1 &
        local server_pid=$! waited=0
        # The client connects once the server listens (its "Waiting for connection"
        # sits in a stdout buffer: ask the kernel instead).
        while [[ -z "$("${server[@]}" ss -Htln "sport = :$ucx_port" 2>/dev/null)" ]] &&
            kill -0 "$server_pid" 2>/dev/null && ((waited < 500)); do
            sleep 0.01
            waited=$((waited + 1))
        done
        line=$(timeout "$limit" "${client[@]}" "${client_env[@]}" ucx_perftest "$host" -p "$ucx_port" -t "$test" \
            -s "$size" -n "$n" -w "$warm" -f -v "${client_cpu[@]}" 2>>"$raw/$place-ucx-client.log" | tail -1) || true
        line=${line// /} # the iteration count is padded to 4 characters
        # A server whose client never came would wait for it until its timeout.
        [[ "$line" =~ ^[0-9]+,[0-9.]+, ]] || kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        if [[ "$line" =~ ^[0-9]+,[0-9.]+, ]]; then
            ucx_line=$line
            return 0
        fi
        echo "ucx_perftest $place $tls $test $size bytes x $n, attempt $attempt: no result" >>"$raw/$place-ucx-client.log"
    done
    return 1
}
# ucx_per_iteration TEST LINE: seconds per iteration of a result line (a round
# trip of tag_lat, a message of tag_bw); 0 when it cannot tell.
ucx_per_iteration() {
    awk -F, -v test="$1" '{ print (test == "tag_lat") ? 2 * $4 / 1e6 : ($8 > 0 ? 1 / $8 : 0) }' <<<"$2"
}
# ucx PLACE TLS TECHNOLOGY: tag_lat and tag_bw at every size into $raw/PLACE-TECHNOLOGY.jsonl.
ucx() {
    local place=$1 tls=$2 technology=$3 test size line failed_points=0
    header "$place: UCX $technology (ucx_perftest tag_lat + tag_bw, UCX_TLS=$tls)"
    for test in tag_lat tag_bw; do
        # est: seconds per iteration expected at the previous size, from a probe at
        # first; after each point, the geometric mean of what was expected and what
        # was measured (a busy moment that slows one point then halves, not
        # divides, the next point's count, and the counts do not swing).
        local est=0 previous=0 n measured probe=20000
        [[ $test == tag_lat ]] && probe=2000
        [[ $tls == sm* ]] && probe=$((probe * 10))
        ucx_run "$place" "$tls" "$test" "${size_bytes%%,*}" "$probe" && est=$(ucx_per_iteration "$test" "$ucx_line")
        for size in ${size_bytes//,/ }; do
            est=$(awk -v est="$est" -v size="$size" -v previous="$previous" 'BEGIN {
                if (previous > 0 && size > previous) est *= size / previous
                print est }')
            n=$(awk -v est="$est" -v seconds="$seconds" 'BEGIN {
                if (est <= 0) { print 1000; exit }
                n = seconds / est
                if (n < 100) n = 100
                if (n > 2e7) n = 2e7
                printf "%d\n", n
            }')
            if ucx_run "$place" "$tls" "$test" "$size" "$n"; then
                line=$ucx_line
                awk -F, -v tech="$technology" -v test="$test" -v size="$size" '{
                    pattern = (test == "tag_lat") ? "pingpong" : "stream"
                    printf "{\"technology\":\"%s\",\"pattern\":\"%s\",\"size\":%d,\"iterations\":%d,", tech, pattern, size, $1
                    if (pattern == "pingpong")
                        printf "\"one_way_us\":{\"mean\":%s,\"p50\":%s},", $4, $2
                    printf "\"msgs_per_s\":%.6g,\"MBps\":%.6g}\n", $8, $8 * size / 1e6
                }' <<<"$line" >>"$raw/$place-$technology.jsonl"
                measured=$(ucx_per_iteration "$test" "$line")
                est=$(awk -v est="$est" -v measured="$measured" 'BEGIN {
                    print (est > 0 && measured > 0) ? sqrt(est * measured) : measured }')
                previous=$size
            else
                failed_points=$((failed_points + 1))
            fi
        done
    done
    ((failed_points == 0)) || failed "$place: ucx_perftest $technology: $failed_points point(s) without a result (see $raw/$place-ucx-client.log)"
}

# peer_program PLACE PROGRAM TRANSPORT NAME: zmq_bench or nng_bench into $raw/PLACE-NAME.jsonl.
peer_program() {
    local place=$1 program=$2 transport=$3 name=$4
    local -a where=() extra=()
    if [[ $place == netns ]]; then
        where=(ip netns exec "$ns_a")
        extra=(--bind "$addr_a" --peer-netns "$ns_b")
    fi
    header "$place: $name ($(basename "$program") --transport $transport), pingpong + stream"
    timeout 600 "${where[@]}" "$program" --transport "$transport" --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
        "${extra[@]}" >"$raw/$place-$name.jsonl" || failed "$place: $name failed (status $?)"
}

# NetPIPE sweeps 8 B .. 4 MiB with every power of two among its sizes (-p 0: no
# perturbed sizes); rank 0 writes "bytes Mbps seconds" lines to the -o file.
# vader is called sm from Open MPI 5 on; when single-copy (CMA) is refused, as in
# some containers, it runs without it.
netpipe() {
    local name=$1 file=$2
    shift 2
    local -a bind=(--bind-to none)
    [[ -n "$cpus" ]] && bind=(--bind-to core)
    local -a mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2 "${bind[@]}")
    local btl
    for btl in "--mca btl self,vader" "--mca btl self,vader --mca btl_vader_single_copy_mechanism none" \
        "--mca btl self,sm"; do
        # shellcheck disable=SC2086 # btl holds several words on purpose
        if timeout 300 "${mpirun[@]}" $btl NPopenmpi "$@" -l 8 -u 4194304 -p 0 -o "$file" \
            >"$raw/$name.log" 2>&1 && [[ -s "$file" ]]; then
            echo "$btl" >"$raw/$name.btl"
            return 0
        fi
    done
    return 1
}

# The floors first.
for place in shm loopback netns; do
    [[ $place == netns ]] && ! have_netns && continue
    place_wanted "$place" && floors "$place" 1
done

if wanted shm msgpass-sci; then
    header "shm: msgpass-bench over sci, pingpong + stream, ${seconds} s per point"
    timeout 600 "$bench" --technology sci --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
        >"$raw/shm-msgpass-sci.jsonl" || failed "shm: msgpass-bench over sci failed (status $?)"
fi
wanted shm ucx-sm && ucx shm sm,self ucx-sm
if wanted shm openmpi-vader; then
    header "shm: Open MPI (NetPIPE NPopenmpi, shared memory): ping-pong"
    netpipe netpipe-pingpong "$repo/$raw/netpipe-pingpong.out" ||
        failed "NPopenmpi ping-pong failed (see $raw/netpipe-pingpong.log)"
    header "shm: Open MPI (NetPIPE NPopenmpi, shared memory): stream (-s)"
    netpipe netpipe-stream "$repo/$raw/netpipe-stream.out" -s ||
        failed "NPopenmpi stream failed (see $raw/netpipe-stream.log)"
fi
wanted shm zeromq-ipc && peer_program shm "$zmq_bench" ipc zeromq-ipc

for place in loopback netns; do
    [[ $place == netns ]] && ! have_netns && continue
    for technology in tcp udp; do
        wanted "$place" "msgpass-$technology" || continue
        header "$place: msgpass-bench over $technology, pingpong + stream"
        if [[ $place == loopback ]]; then
            timeout 600 "$bench" --technology "$technology" --json --sizes "$sizes" --seconds "$seconds" \
                "${cpu_args[@]}" >"$raw/loopback-msgpass-$technology.jsonl" ||
                failed "loopback: msgpass-bench over $technology failed (status $?)"
        else
            msgpass_netns "$technology"
        fi
    done
    wanted "$place" zeromq-tcp && peer_program "$place" "$zmq_bench" tcp zeromq-tcp
    wanted "$place" nng-tcp && peer_program "$place" "$nng_bench" tcp nng-tcp
    wanted "$place" ucx-tcp && ucx "$place" tcp ucx-tcp
done

mpi=0
if ((${#only_words[@]} > 0)); then
    for word in "${only_words[@]}"; do [[ $word == mpi ]] && mpi=1; done
elif ((${PEERS_MPI:-0})); then
    mpi=1
fi
if ((mpi)); then
    header "MPI: osu.c with msgpass-mpicc and with Open MPI's mpicc (scripts/mpi-bench.sh, build/release-mpi)"
    MPI_BENCH_ROUNDS=${PEERS_MPI_ROUNDS:-1} timeout 3600 scripts/mpi-bench.sh build/release-mpi \
        >"$raw/mpi.md" 2>"$raw/mpi.log" || failed "scripts/mpi-bench.sh failed (see $raw/mpi.log)"
fi

# The floors again.
for place in shm loopback netns; do
    [[ $place == netns ]] && ! have_netns && continue
    place_wanted "$place" && floors "$place" 2
done
remove_netns

header "results: $results, $plot"
# One line per place x system x pattern x size: place system pattern size p50_us
# MBps msgs_per_s. The floors become systems: floor-shm (cache-line ping-pong,
# ring), floor-tcp and floor-udp (raw sockets); the place is the file's prefix.
for f in "$raw"/*.jsonl; do
    [[ -s "$f" ]] || continue
    awk -v place="$(basename "$f" | cut -d- -f1)" '
function str(line, key,   m) {
    if (!match(line, "\"" key "\":\"[^\"]*\"")) return ""
    m = substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
    return m
}
function num(line, key,   m) {
    if (!match(line, "\"" key "\":[-0-9.eE+]+")) return "-"
    return substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0
}
{
    t = str($0, "technology"); p = str($0, "pattern"); sys = t
    if (t == "sci" || t == "tcp" || t == "udp") sys = "msgpass-" t
    else if (t == "reference-shm-pingpong") { sys = "floor-shm"; p = "pingpong" }
    else if (t == "reference-shm-ring") { sys = "floor-shm"; p = "stream" }
    else if (t == "reference-tcp-pingpong") { sys = "floor-tcp"; p = "pingpong" }
    else if (t == "reference-tcp-stream") { sys = "floor-tcp"; p = "stream" }
    else if (t == "reference-udp-pingpong") { sys = "floor-udp"; p = "pingpong" }
    else if (t == "reference-udp-stream") { sys = "floor-udp"; p = "stream" }
    else if (t ~ /^reference-/) next
    if (p != "pingpong" && p != "stream") next
    printf "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", place, sys, p, num($0, "size"), num($0, "p50"), num($0, "MBps"), num($0, "msgs_per_s")
}' "$f"
done >"$out/points.tsv"
# NetPIPE: Mbps are 2^20 bits per second; the time column has too few digits for
# small messages, so latency comes from the rate. Its latency is the mean one-way
# time of the best of its trials, not a p50.
for kind in pingpong stream; do
    [[ -s "$raw/netpipe-$kind.out" ]] || continue
    awk -v kind="$kind" -v sizes="$size_bytes" '
    BEGIN { n = split(sizes, s, ","); for (i = 1; i <= n; i++) want[s[i]] = 1 }
    NF >= 2 && ($1 in want) && $2 > 0 {
        bits = $2 * 1048576
        if (kind == "pingpong")
            printf "shm\topenmpi-vader\tpingpong\t%d\t%.6g\t%.6g\t%.6g\n", $1, $1 * 8 / bits * 1e6, 2 * bits / 8 / 1e6, 2 * bits / 8 / $1
        else
            printf "shm\topenmpi-vader\tstream\t%d\t-\t%.6g\t%.6g\n", $1, bits / 8 / 1e6, bits / 8 / $1
    }' "$raw/netpipe-$kind.out" >>"$out/points.tsv"
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
# One line per place x system x pattern x size: the better figures where a floor
# ran twice.
awk -F'\t' -v OFS='\t' '
{ key = $1 OFS $2 OFS $3 OFS $4
  if (!(key in lat)) { order[++n] = key; lat[key] = $5; bw[key] = $6; mps[key] = $7; next }
  if ($5 != "-" && (lat[key] == "-" || $5 + 0 < lat[key] + 0)) lat[key] = $5
  if ($6 != "-" && (bw[key] == "-" || $6 + 0 > bw[key] + 0)) { bw[key] = $6; mps[key] = $7 } }
END { for (i = 1; i <= n; i++) print order[i], lat[order[i]], bw[order[i]], mps[order[i]] }
' "$out/points.tsv" >"$out/points-best.tsv"
mv "$out/points-best.tsv" "$out/points.tsv"

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
ncpu=$(nproc)
kernel=$(uname -r)
today=$(date -u +%Y-%m-%d)
places_measured=$(cut -f1 "$out/points.tsv" | sort -u | tr '\n' ' ')
place_title() {
    case $1 in
    shm) echo "Shared memory: two processes of one host" ;;
    loopback) echo "Loopback: two processes of one host over 127.0.0.1" ;;
    netns) echo "Two network namespaces joined by a veth pair (MTU 1500): two hosts on a link" ;;
    esac
}
place_systems() { [[ $1 == shm ]] && echo "$shm_systems" || echo "$net_systems"; }

# Per place and system: size, p50 latency, stream bandwidth (gnuplot data, "-" = missing).
rm -f "$out"/plot-*.dat
awk -v dir="$out" -F'\t' '
{ key = $1 SUBSEP $2 SUBSEP $4; seen[$1 SUBSEP $2] = 1; sizes[$4] = 1
  if ($3 == "pingpong") lat[key] = $5; else bw[key] = $6 }
END {
    m = 0; for (z in sizes) order[++m] = z + 0
    for (a = 2; a <= m; a++) { v = order[a]; for (b = a - 1; b >= 1 && order[b] > v; b--) order[b + 1] = order[b]; order[b + 1] = v }
    for (ps in seen) {
        split(ps, parts, SUBSEP)
        file = dir "/plot-" parts[1] "-" parts[2] ".dat"
        for (a = 1; a <= m; a++) {
            key = ps SUBSEP order[a]
            if (!(key in lat) && !(key in bw)) continue
            printf "%d %s %s\n", order[a], (key in lat) ? lat[key] : "-", (key in bw) ? bw[key] : "-" > file
        }
        close(file)
    }
}' "$out/points.tsv"

# The tables: key figures and ratios, then every system x size of each place.
# shellcheck disable=SC2016 # an awk program, not shell
table_awk='
function fmt(v) {
    if (v == "" || v == "-") return ""
    if (v < 10) return sprintf("%.2f", v)
    if (v < 1000) return sprintf("%.1f", v)
    return sprintf("%.0f", v)
}
function compact(v) {
    if (v == "" || v == "-") return ""
    if (v >= 1e6) return sprintf("%.2fM", v / 1e6)
    if (v >= 1e3) return sprintf("%.1fk", v / 1e3)
    return sprintf("%.0f", v)
}
function label(z) {
    if (z >= 1048576 && z % 1048576 == 0) return (z / 1048576) " MiB"
    if (z >= 1024 && z % 1024 == 0) return (z / 1024) " KiB"
    return z " B"
}
function ratio(v, f) {
    if (v == "" || v == "-" || f == "" || f == "-" || f <= 0) return ""
    return sprintf("%.2f", v / f)
}
function floor_of(s) {
    if (s ~ /^floor-/) return s
    if (s ~ /-udp$/) return "floor-udp"
    if (s == "msgpass-sci" || s == "ucx-sm" || s == "openmpi-vader" || s == "zeromq-ipc") return "floor-shm"
    return "floor-tcp"
}
$1 == place { key = $2 SUBSEP $4; seen[$2] = 1; sizes[$4] = 1
  if ($3 == "pingpong") lat[key] = $5; else { bw[key] = $6; mps[key] = $7 } }
END {
    n = split(systems, sys, " ")
    m = 0; for (z in sizes) order[++m] = z + 0
    for (a = 2; a <= m; a++) { v = order[a]; for (b = a - 1; b >= 1 && order[b] > v; b--) order[b + 1] = order[b]; order[b + 1] = v }
    print "Key figures (p50 one-way latency; stream rate):"
    print ""
    split("64 8192", ks, " ")
    for (k = 1; k <= 2; k++) {
        line = "- " label(ks[k]) " latency:"
        for (i = 1; i <= n; i++) {
            key = sys[i] SUBSEP ks[k]
            if (!(key in lat) || lat[key] == "-") continue
            line = line " " sys[i] " " fmt(lat[key]) " us,"
        }
        sub(/,$/, "", line)
        print line
    }
    line = "- 64 B stream:"
    for (i = 1; i <= n; i++) {
        key = sys[i] SUBSEP 64
        if (!(key in mps) || mps[key] == "-") continue
        line = line " " sys[i] " " compact(mps[key]) " msgs/s,"
    }
    sub(/,$/, "", line)
    print line
    print ""
    print "| system | size | latency p50 (us) | bandwidth (MB/s) | msgs/s | latency x floor | bandwidth x floor |"
    print "|---|---:|---:|---:|---:|---:|---:|"
    for (a = 1; a <= m; a++) {
        z = order[a]
        for (i = 1; i <= n; i++) {
            s = sys[i]
            if (!(s in seen)) continue
            key = s SUBSEP z
            if (!(key in lat) && !(key in bw)) continue
            fkey = floor_of(s) SUBSEP z
            l = (key in lat) ? lat[key] : "-"; b = (key in bw) ? bw[key] : "-"; r = (key in mps) ? mps[key] : "-"
            lr = (s ~ /^floor/) ? "floor" : ratio(l, (fkey in lat) ? lat[fkey] : "-")
            br = (s ~ /^floor/) ? "floor" : ratio(b, (fkey in bw) ? bw[fkey] : "-")
            printf "| %s | %s | %s | %s | %s | %s | %s |\n", s, label(z), fmt(l), fmt(b), compact(r), lr, br
        }
    }
}'

# The ratios the open issues set targets on (25: tcp and udp across hosts; 26: sci
# small messages against UCX), each within this run: "a / b" of one figure.
# shellcheck disable=SC2016 # an awk program, not shell
ratios_awk='
function get(place, s, p, z, what,   key) {
    key = place SUBSEP s SUBSEP p SUBSEP z
    if (what == "lat") return (key in lat) ? lat[key] : "-"
    return (key in mps) ? mps[key] : "-"
}
function label(z) {
    if (z >= 1048576 && z % 1048576 == 0) return (z / 1048576) " MiB"
    if (z >= 1024 && z % 1024 == 0) return (z / 1024) " KiB"
    return z " B"
}
function show(v, what) {
    if (what == "lat") return sprintf("%.3g us", v)
    if (v >= 1e6) return sprintf("%.2fM msgs/s", v / 1e6)
    if (v >= 1e3) return sprintf("%.1fk msgs/s", v / 1e3)
    return sprintf("%.0f msgs/s", v)
}
# A row "a / b": text has "@" where the size goes.
function row(place, text, sa, sb, p, z, what,   a, b) {
    if (!(place in places)) return
    a = get(place, sa, p, z, what); b = get(place, sb, p, z, what)
    if (a == "-" || b == "-" || b <= 0) return
    sub(/@/, label(z), text)
    printf "| %s | %s | %s | %s | %.2f |\n", place, text, show(a, what), show(b, what), a / b
    rows++
}
{ key = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4; places[$1] = 1
  if ($3 == "pingpong") lat[key] = $5; else mps[key] = $7 }
END {
    print "| place | figure | a | b | a / b |"
    print "|---|---|---:|---:|---:|"
    split("8 64 256 1024", small, " ")
    for (i = 1; i <= 4; i++) {
        row("shm", "sci stream @ / UCX sm tag_bw", "msgpass-sci", "ucx-sm", "stream", small[i], "mps")
        row("shm", "sci stream @ / Open MPI vader", "msgpass-sci", "openmpi-vader", "stream", small[i], "mps")
        row("shm", "sci ping-pong p50 @ / UCX sm tag_lat", "msgpass-sci", "ucx-sm", "pingpong", small[i], "lat")
    }
    split("65536 1048576 4194304", large, " ")
    for (i = 1; i <= 3; i++)
        row("shm", "sci stream @ / UCX sm tag_bw", "msgpass-sci", "ucx-sm", "stream", large[i], "mps")
    split("loopback netns", nets, " ")
    for (j = 1; j <= 2; j++) {
        pl = nets[j]
        row(pl, "tcp stream @ / ZeroMQ tcp", "msgpass-tcp", "zeromq-tcp", "stream", 64, "mps")
        row(pl, "tcp stream @ / UCX tcp tag_bw", "msgpass-tcp", "ucx-tcp", "stream", 64, "mps")
        row(pl, "tcp stream @ / NNG tcp", "msgpass-tcp", "nng-tcp", "stream", 64, "mps")
        row(pl, "tcp stream @ / raw TCP", "msgpass-tcp", "floor-tcp", "stream", 1048576, "mps")
        row(pl, "tcp ping-pong p50 @ / raw TCP", "msgpass-tcp", "floor-tcp", "pingpong", 64, "lat")
        row(pl, "tcp ping-pong p50 @ / UCX tcp tag_lat", "msgpass-tcp", "ucx-tcp", "pingpong", 64, "lat")
        row(pl, "udp stream @ / msgpass tcp", "msgpass-udp", "msgpass-tcp", "stream", 64, "mps")
        row(pl, "udp stream @ / raw UDP", "msgpass-udp", "floor-udp", "stream", 64, "mps")
        row(pl, "udp ping-pong p50 @ / raw UDP", "msgpass-udp", "floor-udp", "pingpong", 64, "lat")
    }
    if (rows == 0) print "| | (none of these figures was measured in this run) | | | |"
}'

{
    cat <<EOF
# Benchmark results: msgpass beside UCX, Open MPI, ZeroMQ and NNG

Generated by \`scripts/compare-peers.sh\` (do not edit by hand; run it again). How
to read the figures, and what each floor is: [benchmarks.md](benchmarks.md).

- Date: $today (UTC), commit $commit
- CPU: "$model", $ncpu CPUs (\`lscpu\`, \`nproc\`); kernel $kernel
- Load average (1, 5, 15 min) before the measurements: $load_before; after: $load_after
- Release build; ${seconds} s per point; $([[ -n "$cpus" ]] && echo "the two ends pinned to CPUs $cpus (msgpass-bench, zmq_bench and nng_bench \`--cpu $cpus\`, ucx_perftest \`-c\`, mpirun \`--bind-to core\`)" || echo "no pinning")$([[ -n "${PEERS_ONLY:-}" ]] && echo "; subset PEERS_ONLY=$PEERS_ONLY")
- Places: **shm** (two processes of one host, through shared memory or the
  kernel's local sockets), **loopback** (the same over 127.0.0.1) and **netns** (two
  network namespaces joined by a veth pair, MTU 1500, made by the script: what two
  hosts on a link see; loopback flatters tcp with its 64 KiB MTU and no checksums).
- Systems: **msgpass-sci**, **msgpass-tcp**, **msgpass-udp** (\`msgpass-bench\`, \`--wait block\`; in netns its one-side mode, \`--config --nodes --node-id\`, one node per namespace);
  **ucx-sm**, **ucx-tcp** (UCX $(dpkg-query -W -f='${Version}' ucx-utils 2>/dev/null || echo "?") \`ucx_perftest -t tag_lat\` and \`-t tag_bw\`, UCP tag matching, \`UCX_TLS=sm,self\` or \`UCX_TLS=tcp\`; its latency is half the round trip, its p50 over the last 2048 iterations at most);
  **openmpi-vader** (NetPIPE $(dpkg-query -W -f='${Version}' netpipe-openmpi 2>/dev/null || echo "?") \`NPopenmpi\`, Open MPI $(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null || echo "?"), \`$(cat "$raw/netpipe-pingpong.btl" 2>/dev/null || echo "--mca btl self,vader")\`);
  **zeromq-ipc**, **zeromq-tcp** (\`tests/peers/zmq_bench.cpp\`: libzmq $(pkg-config --modversion libzmq 2>/dev/null || echo "?") PAIR sockets, a Unix-domain socket or TCP);
  **nng-tcp** (\`tests/peers/nng_bench.cpp\`: NNG $(dpkg-query -W -f='${Version}' libnng-dev 2>/dev/null || echo "?") pair1 sockets over TCP);
  **floor-shm** (\`msgpass-bench --reference\`: cache-line ping-pong in shared memory for latency, the hand-written shared-memory ring for bandwidth);
  **floor-tcp** (raw TCP ping-pong with TCP_NODELAY, raw TCP stream);
  **floor-udp** (raw UDP ping-pong, raw UDP stream with a credit window, one datagram per message; up to 65507 bytes).
  In netns the floors' second process runs in the other namespace (\`--floor-netns\`).
- Latency: one-way = round trip / 2, p50 of per-iteration samples (openmpi-vader:
  NetPIPE's mean of its best trial). Bandwidth and msgs/s: the stream pattern, at
  the receiver (openmpi-vader: NetPIPE \`-s\`; ucx: tag_bw, timed at the sender up to
  the receiver's final acknowledgement).
- Ratios: to the floor of the same size and place measured by this run; tcp systems
  against floor-tcp, udp against floor-udp (none above 65507 bytes), the shm systems
  against floor-shm (zeromq-ipc goes through the kernel, but it competes for the same
  job). Latency x floor: lower is better, 1 = the floor; bandwidth x floor: higher is
  better. The floors ran minutes apart from the systems on a shared VM (each floor is
  the better of a run before and a run after the systems), so read ratios within
  +-30 %.

EOF
    if ((${#absent[@]} > 0)); then
        for a in "${absent[@]}"; do echo "Not measured: $a."; done
        echo
    fi
    if ((${#failures[@]} > 0)); then
        echo "Failed in this run:"
        for f in "${failures[@]}"; do echo "- $f"; done
        echo
    fi
    printf '## Ratios of the open targets (issues 25 and 26), same run\n\n'
    awk -F'\t' "$ratios_awk" "$out/points.tsv"
    echo
    for place in shm loopback netns; do
        [[ " $places_measured " == *" $place "* ]] || continue
        printf '## %s (%s)\n\n' "$(place_title "$place")" "$place"
        awk -F'\t' -v place="$place" -v systems="$(place_systems "$place")" "$table_awk" "$out/points.tsv"
        echo
    done
    cat <<EOF
![one-way latency p50 and stream bandwidth against message size, a row per place, one line per system](benchmarks.png)
EOF
    if [[ -s "$raw/mpi.md" ]]; then
        printf '\n## The same MPI program over msgpass and over Open MPI\n\n'
        printf 'tests/mpi/bench/osu.c (OSU-style latency and windowed bandwidth, standard MPI API only) built with\n'
        printf 'msgpass-mpicc and run by msgpass-run -n 2, and built with Open MPI mpicc and run by mpirun -np 2;\n'
        printf 'comm is the same measurement written against the communicator (scripts/mpi-bench.sh).\n\n'
        cat "$raw/mpi.md"
    fi
} >"$results"

# The plot: a row of two panels (latency, bandwidth) per place, log-log, one line
# per system (floors dashed).
declare -A colors=([msgpass-sci]='#c00000' [msgpass-tcp]='#ff8000' [msgpass-udp]='#c000c0'
    [ucx-sm]='#8000ff' [ucx-tcp]='#8000ff' [openmpi-vader]='#008000' [zeromq-ipc]='#0060c0' [zeromq-tcp]='#30b0f0'
    [nng-tcp]='#a07000' [floor-shm]='#404040' [floor-tcp]='#a0a0a0' [floor-udp]='#d0a0d0')
rows=0
for place in shm loopback netns; do [[ " $places_measured " == *" $place "* ]] && rows=$((rows + 1)); done
((rows > 0)) || rows=1
terminal="pngcairo size 1400,$((80 + 480 * rows)) font 'DejaVu Sans,10'"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || terminal="png size 1400,$((80 + 480 * rows))"
{
    echo "set terminal $terminal"
    echo "set output '$plot'"
    echo "set datafile missing '-'"
    echo "set multiplot layout $rows,2 title \"msgpass, UCX, Open MPI, ZeroMQ, NNG and the floors: $model, $ncpu CPUs, kernel $kernel, $today\""
    echo "set logscale xy"
    echo "set grid xtics ytics mytics"
    echo "set xtics ('8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, '1M' 1048576, '4M' 4194304)"
    echo "set xlabel 'message size (bytes)'"
    for place in shm loopback netns; do
        [[ " $places_measured " == *" $place "* ]] || continue
        for panel in 2 3; do
            plots=()
            style=0
            for s in $(place_systems "$place"); do
                style=$((style + 1))
                f="$out/plot-$place-$s.dat"
                [[ -s "$f" ]] || continue
                dash=1
                [[ "$s" == floor-* ]] && dash=2
                plots+=("'$f' using 1:$panel with linespoints lw 2 pt $style dt $dash lc rgb '${colors[$s]}' title '$s'")
            done
            if ((panel == 2)); then
                echo "set title '$place: ping-pong one-way latency p50 (lower is better)'"
                echo "set ylabel 'microseconds'"
                echo "set key top left"
            else
                echo "set title '$place: stream bandwidth at the receiver (higher is better)'"
                echo "set ylabel 'MB/s'"
                echo "set key bottom right"
            fi
            if ((${#plots[@]} > 0)); then
                (IFS=,; echo "plot ${plots[*]}")
            else
                echo "set multiplot next"
            fi
        done
    done
    echo "unset multiplot"
} >"$out/plot.gp"
gnuplot "$out/plot.gp" || failed "gnuplot failed (see $out/plot.gp)"

echo
awk '/^## Ratios/ { p = 1 } /^## / && !/^## Ratios/ { p = 0 } p' "$results"
awk '/^## / { p = ($0 ~ /\((shm|loopback|netns)\)$/); if (p) print; next } p && /^- /' "$results"
echo "compare-peers: wrote $results and $plot in $((SECONDS - start_time)) s"
if ((${#failures[@]} > 0)); then
    echo "compare-peers: ${#failures[@]} part(s) failed: ${failures[*]}" >&2
    exit 1
fi
