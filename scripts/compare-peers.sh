#!/usr/bin/env bash
# Compares msgpass with its peers on this machine and writes the result into the
# repository: ZeroMQ (our tests/peers/zmq_bench over ipc:// and tcp://), Open MPI
# over shared memory (NetPIPE's NPopenmpi, btl self,vader), msgpass-bench over sci,
# tcp and udp, and the machine's floors
# (msgpass-bench --reference), and the same MPI program (tests/mpi/bench/osu.c) built
# with msgpass-mpicc and with Open MPI's mpicc (scripts/mpi-bench.sh, one round, in
# build/release-mpi; PEERS_MPI=0 leaves it out). Installs what it needs (Debian packages, only those
# missing), builds msgpass in Release (build/release, as scripts/demo.sh) and
# zmq_bench (outside the CMake build: msgpass never depends on ZeroMQ), then writes
# docs/benchmarks-results.md (one table, generated) and docs/benchmarks.png
# (latency and bandwidth against size). Raw results stay in build/peers/.
# About 2.5 to 4 minutes on 2 CPUs (more on a loaded machine), plus the Release
# build when build/release is not up to date. Works from any directory.
# Environment: MSGPASS_JOBS (build parallelism, 2), PEERS_SECONDS (time per point,
# 0.25), PEERS_CPUS (the two CPUs the two ends are pinned to, "0,1"; empty: no
# pinning).
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
    for pkg in libzmq3-dev openmpi-bin libopenmpi-dev netpipe-openmpi pkg-config; do
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
        apt-get install -y -q --no-install-recommends "${missing[@]}")
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

header "build zmq_bench ($out/zmq_bench)"
zmq_bench=$out/zmq_bench
if [[ ! -x "$zmq_bench" || tests/peers/zmq_bench.cpp -nt "$zmq_bench" ||
    apps/msgpass-bench/report.cpp -nt "$zmq_bench" ]]; then
    # Its results are msgpass-bench's (report.cpp: the same summary and JSON line).
    # shellcheck disable=SC2046 # pkg-config's flags are words
    "${CXX:-g++}" -std=c++20 -O2 -Wall -Wextra -Wpedantic -o "$zmq_bench" \
        -Iapps/msgpass-bench -Ibase/include -Iconfig/include -Iframework/include \
        tests/peers/zmq_bench.cpp apps/msgpass-bench/report.cpp "$build/config/libmsgpass_config.a" \
        $(pkg-config --cflags --libs libzmq yaml-cpp)
fi

cpu_args=()
[[ -n "$cpus" ]] && cpu_args=(--cpu "$cpus")
# Other work on the machine moves every figure; the results say how busy it was.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# The floors run before and after the systems; each size's floor is the better of
# the two (a floor is a best case, and the load of a shared machine changes in
# minutes).
header "msgpass-bench --reference: the floors (first)"
timeout 600 "$bench" --reference --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
    >"$raw/reference-1.jsonl" || failed "msgpass-bench --reference failed (status $?)"

header "msgpass-bench: sci pingpong + stream, ${seconds} s per point"
timeout 600 "$bench" --technology sci --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
    >"$raw/msgpass-sci.jsonl" || failed "msgpass-bench over sci failed (status $?)"

header "msgpass-bench: tcp, when the technology is there"
if timeout 60 "$bench" --technology tcp --json --pattern pingpong --sizes 64 --iterations 10 \
    >"$raw/tcp-probe.jsonl" 2>"$raw/tcp-probe.err"; then
    timeout 600 "$bench" --technology tcp --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
        >"$raw/msgpass-tcp.jsonl" || failed "msgpass-bench over tcp failed (status $?)"
else
    echo "not measured: $(head -1 "$raw/tcp-probe.err")"
    echo "msgpass-tcp: not measured ($(head -1 "$raw/tcp-probe.err"))" >"$raw/absent.txt"
fi

header "msgpass-bench: udp pingpong + stream"
timeout 900 "$bench" --technology udp --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
    >"$raw/msgpass-udp.jsonl" || failed "msgpass-bench over udp failed (status $?)"

header "ZeroMQ: ipc:// and tcp://, pingpong + stream"
timeout 600 "$zmq_bench" --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" >"$raw/zeromq.jsonl" ||
    failed "zmq_bench failed (status $?)"

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
header "Open MPI (NetPIPE NPopenmpi, shared memory): ping-pong"
netpipe netpipe-pingpong "$repo/$raw/netpipe-pingpong.out" ||
    failed "NPopenmpi ping-pong failed (see $raw/netpipe-pingpong.log)"
header "Open MPI (NetPIPE NPopenmpi, shared memory): stream (-s)"
netpipe netpipe-stream "$repo/$raw/netpipe-stream.out" -s ||
    failed "NPopenmpi stream failed (see $raw/netpipe-stream.log)"

if ((${PEERS_MPI:-1})); then
    header "MPI: osu.c with msgpass-mpicc and with Open MPI's mpicc (scripts/mpi-bench.sh, build/release-mpi)"
    MPI_BENCH_ROUNDS=${PEERS_MPI_ROUNDS:-1} timeout 3600 scripts/mpi-bench.sh build/release-mpi \
        >"$raw/mpi.md" 2>"$raw/mpi.log" || failed "scripts/mpi-bench.sh failed (see $raw/mpi.log)"
fi

header "msgpass-bench --reference: the floors (second)"
timeout 600 "$bench" --reference --json --sizes "$sizes" --seconds "$seconds" "${cpu_args[@]}" \
    >"$raw/reference-2.jsonl" || failed "msgpass-bench --reference failed (status $?)"

header "results: $results, $plot"
# One line per system x pattern x size: system pattern size p50_us MBps msgs_per_s.
# The floors become two systems: floor-shm (cache-line ping-pong, ring) and floor-tcp
# (loopback TCP ping-pong and stream).
{
    cat "$raw"/msgpass-*.jsonl "$raw"/reference-*.jsonl "$raw/zeromq.jsonl" 2>/dev/null || true
} | awk '
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
    printf "%s\t%s\t%d\t%s\t%s\t%s\n", sys, p, num($0, "size"), num($0, "p50"), num($0, "MBps"), num($0, "msgs_per_s")
}' >"$out/points.tsv"
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
            printf "openmpi-vader\tpingpong\t%d\t%.6g\t%.6g\t%.6g\n", $1, $1 * 8 / bits * 1e6, 2 * bits / 8 / 1e6, 2 * bits / 8 / $1
        else
            printf "openmpi-vader\tstream\t%d\t-\t%.6g\t%.6g\n", $1, bits / 8 / 1e6, bits / 8 / $1
    }' "$raw/netpipe-$kind.out" >>"$out/points.tsv"
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
# One line per system x pattern x size: the better figures where a floor ran twice.
awk -F'\t' -v OFS='\t' '
{ key = $1 OFS $2 OFS $3
  if (!(key in lat)) { order[++n] = key; lat[key] = $4; bw[key] = $5; mps[key] = $6; next }
  if ($4 != "-" && (lat[key] == "-" || $4 + 0 < lat[key] + 0)) lat[key] = $4
  if ($5 != "-" && (bw[key] == "-" || $5 + 0 > bw[key] + 0)) { bw[key] = $5; mps[key] = $6 } }
END { for (i = 1; i <= n; i++) print order[i], lat[order[i]], bw[order[i]], mps[order[i]] }
' "$out/points.tsv" >"$out/points-best.tsv"
mv "$out/points-best.tsv" "$out/points.tsv"

model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
ncpu=$(nproc)
kernel=$(uname -r)
today=$(date -u +%Y-%m-%d)
systems="msgpass-sci msgpass-tcp msgpass-udp zeromq-ipc zeromq-tcp openmpi-vader floor-shm floor-tcp floor-udp"

# Per system: size, p50 latency, stream bandwidth (gnuplot data, "-" = missing).
rm -f "$out"/plot-*.dat
awk -v dir="$out" -v systems="$systems" -F'\t' '
{ key = $1 SUBSEP $3; seen[$1] = 1; sizes[$3] = 1
  if ($2 == "pingpong") lat[key] = $4; else bw[key] = $5 }
END {
    n = split(systems, sys, " ")
    for (i = 1; i <= n; i++) {
        if (!(sys[i] in seen)) continue
        file = dir "/plot-" sys[i] ".dat"
        m = 0; for (z in sizes) order[++m] = z + 0
        for (a = 2; a <= m; a++) { v = order[a]; for (b = a - 1; b >= 1 && order[b] > v; b--) order[b + 1] = order[b]; order[b + 1] = v }
        for (a = 1; a <= m; a++) {
            key = sys[i] SUBSEP order[a]
            printf "%d %s %s\n", order[a], (key in lat) ? lat[key] : "-", (key in bw) ? bw[key] : "-" > file
        }
        close(file)
    }
}' "$out/points.tsv"

{
    cat <<EOF
# Benchmark results: msgpass beside ZeroMQ and Open MPI

Generated by \`scripts/compare-peers.sh\` (do not edit by hand; run it again). How
to read the figures, and what each floor is: [benchmarks.md](benchmarks.md).

- Date: $today (UTC), commit $commit
- CPU: "$model", $ncpu CPUs (\`lscpu\`, \`nproc\`); kernel $kernel
- Load average (1, 5, 15 min) before the measurements: $load_before; after: $load_after
- Release build; ${seconds} s per point; $([[ -n "$cpus" ]] && echo "the two ends pinned to CPUs $cpus (msgpass-bench and zmq_bench \`--cpu $cpus\`, mpirun \`--bind-to core\`)" || echo "no pinning")
- Systems: **msgpass-sci** (\`msgpass-bench\`, sci over POSIX shared memory, \`--wait block\`);
  **msgpass-tcp** (the same over the tcp technology, when it is built);
  **msgpass-udp** (the same over the udp technology);
  **zeromq-ipc**, **zeromq-tcp** (\`tests/peers/zmq_bench.cpp\`: libzmq $(pkg-config --modversion libzmq 2>/dev/null || echo "?") PAIR sockets, a Unix-domain socket or loopback TCP);
  **openmpi-vader** (NetPIPE $(dpkg-query -W -f='${Version}' netpipe-openmpi 2>/dev/null || echo "?") \`NPopenmpi\`, Open MPI $(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null || echo "?"), \`$(cat "$raw/netpipe-pingpong.btl" 2>/dev/null || echo "--mca btl self,vader")\`);
  **floor-shm** (\`msgpass-bench --reference\`: cache-line ping-pong in shared memory for latency, the hand-written shared-memory ring for bandwidth);
  **floor-tcp** (\`--reference\`: raw loopback TCP ping-pong with TCP_NODELAY, raw TCP stream);
  **floor-udp** (\`--reference\`: raw loopback UDP ping-pong, raw UDP stream with a credit window; up to 65507 bytes).
- Latency: one-way = round trip / 2, p50 of per-iteration samples (openmpi-vader:
  NetPIPE's mean of its best trial). Bandwidth and msgs/s: the stream pattern, at
  the receiver (openmpi-vader: NetPIPE \`-s\`).
- Ratios: to the floor of the same size measured by this run; tcp systems
  (msgpass-tcp, zeromq-tcp) against floor-tcp, msgpass-udp against floor-udp (none
  above 65507 bytes), the others against floor-shm
  (zeromq-ipc goes through the kernel, but it competes for the same job: two
  processes of one host). Latency x floor: lower is better, 1 = the floor;
  bandwidth x floor: higher is better. The floors ran minutes apart from the
  systems on a shared VM (each floor is the better of a run before and a run
  after the systems), so read ratios within +-30 %.

EOF
    if [[ -s "$raw/absent.txt" ]]; then
        echo "Not measured: $(cat "$raw/absent.txt")."
        echo
    fi
    if ((${#failures[@]} > 0)); then
        echo "Failed in this run:"
        for f in "${failures[@]}"; do echo "- $f"; done
        echo
    fi
    awk -v systems="$systems" -F'\t' '
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
    { key = $1 SUBSEP $3; seen[$1] = 1; sizes[$3] = 1
      if ($2 == "pingpong") lat[key] = $4; else { bw[key] = $5; mps[key] = $6 } }
    END {
        n = split(systems, sys, " ")
        m = 0; for (z in sizes) order[++m] = z + 0
        for (a = 2; a <= m; a++) { v = order[a]; for (b = a - 1; b >= 1 && order[b] > v; b--) order[b + 1] = order[b]; order[b + 1] = v }
        # Key figures first: what a reader compares.
        print "Key figures (p50 one-way latency; stream rate):"
        print ""
        split("64 8192", ks, " ")
        for (k = 1; k <= 2; k++) {
            line = "- " label(ks[k]) " latency:"
            for (i = 1; i <= n; i++) {
                key = sys[i] SUBSEP ks[k]
                if (sys[i] ~ /^floor/ || !(key in lat) || lat[key] == "-") continue
                line = line " " sys[i] " " fmt(lat[key]) " us,"
            }
            sub(/,$/, "", line)
            key = "floor-shm" SUBSEP ks[k]
            if (key in lat) line = line " (floor-shm " fmt(lat[key]) " us)"
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
                floor = (s ~ /tcp$/) ? "floor-tcp" : (s ~ /udp$/) ? "floor-udp" : "floor-shm"
                fkey = floor SUBSEP z
                l = (key in lat) ? lat[key] : "-"; b = (key in bw) ? bw[key] : "-"; r = (key in mps) ? mps[key] : "-"
                lr = (s ~ /^floor/) ? "floor" : ratio(l, (fkey in lat) ? lat[fkey] : "-")
                br = (s ~ /^floor/) ? "floor" : ratio(b, (fkey in bw) ? bw[fkey] : "-")
                printf "| %s | %s | %s | %s | %s | %s | %s |\n", s, label(z), fmt(l), fmt(b), compact(r), lr, br
            }
        }
    }' "$out/points.tsv"
    cat <<EOF

![one-way latency p50 and stream bandwidth against message size, one line per system](benchmarks.png)
EOF
    if [[ -s "$raw/mpi.md" ]]; then
        printf '\n## The same MPI program over msgpass and over Open MPI\n\n'
        printf 'tests/mpi/bench/osu.c (OSU-style latency and windowed bandwidth, standard MPI API only) built with\n'
        printf 'msgpass-mpicc and run by msgpass-run -n 2, and built with Open MPI mpicc and run by mpirun -np 2;\n'
        printf 'comm is the same measurement written against the communicator (scripts/mpi-bench.sh).\n\n'
        cat "$raw/mpi.md"
    fi
} >"$results"

# The plot: two panels, log-log, one line per system (floors dashed, grey).
declare -A colors=([msgpass-sci]='#c00000' [msgpass-tcp]='#ff8000' [zeromq-ipc]='#0060c0' [zeromq-tcp]='#30b0f0'
    [openmpi-vader]='#008000' [floor-shm]='#404040' [floor-tcp]='#a0a0a0' [msgpass-udp]='#c000c0'
    [floor-udp]='#d0a0d0')
terminal="pngcairo size 1400,600 font 'DejaVu Sans,10'"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || terminal="png size 1400,600"
{
    echo "set terminal $terminal"
    echo "set output '$plot'"
    echo "set datafile missing '-'"
    echo "set multiplot layout 1,2 title \"msgpass, ZeroMQ, Open MPI and the floors: $model, $ncpu CPUs, kernel $kernel, $today\""
    echo "set logscale xy"
    echo "set grid xtics ytics mytics"
    echo "set xtics ('8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, '1M' 1048576, '4M' 4194304)"
    echo "set xlabel 'message size (bytes)'"
    echo "set key top left"
    echo "set title 'ping-pong one-way latency p50 (lower is better)'"
    echo "set ylabel 'microseconds'"
    for panel in 2 3; do
        plots=()
        style=0
        for s in $systems; do
            style=$((style + 1))
            f="$out/plot-$s.dat"
            [[ -s "$f" ]] || continue
            dash=1
            [[ "$s" == floor-* ]] && dash=2
            plots+=("'$f' using 1:$panel with linespoints lw 2 pt $style dt $dash lc rgb '${colors[$s]}' title '$s'")
        done
        if ((panel == 3)); then
            echo "set title 'stream bandwidth at the receiver (higher is better)'"
            echo "set ylabel 'MB/s'"
            echo "set key bottom right"
        fi
        (IFS=,; echo "plot ${plots[*]}")
    done
    echo "unset multiplot"
} >"$out/plot.gp"
gnuplot "$out/plot.gp" || failed "gnuplot failed (see $out/plot.gp)"

echo
sed -n '/^Key figures/,/^| system/p' "$results" | sed '$d' 
echo "compare-peers: wrote $results and $plot in $((SECONDS - start_time)) s"
if ((${#failures[@]} > 0)); then
    echo "compare-peers: ${#failures[@]} part(s) failed: ${failures[*]}" >&2
    exit 1
fi
