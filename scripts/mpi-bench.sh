#!/usr/bin/env bash
# The cost of msgpass's MPI layer (docs/mpi.md): in one run, the OSU-style program
# tests/mpi/bench/osu.c (standard MPI API, built against msgpass's mpi.h) and the same
# measurements written against the communicator (tests/mpi/bench/comm_osu.cpp), each
# started by msgpass-run -n 2 over sci and over tcp, alternating in every round, with
# the machine's floors (msgpass-bench --reference: shared-memory ping-pong and ring,
# loopback TCP ping-pong and stream) measured in each round too. Prints a Markdown
# table of medians over the rounds: latency (one way, round trip / 2, mean) and
# windowed bandwidth of MPI and comm, MPI / comm, and both against the floor. The
# same osu.c built with Open MPI's mpicc runs in every round too (mpirun -np 2, btl
# self,vader for the sci table and self,tcp for the tcp table): Open MPI's column
# and msgpass MPI / Open MPI (issue 12's comparison). Installs openmpi-bin and
# libopenmpi-dev when missing (MPI_BENCH_OPENMPI=0: without Open MPI).
#
#   scripts/mpi-bench.sh [BUILD_DIR]     (default build/release; built when missing)
#
# Environment: MSGPASS_JOBS (build parallelism, 2), MPI_BENCH_ROUNDS (3),
# MPI_BENCH_TECHNOLOGIES ("sci tcp"), MPI_BENCH_OPENMPI (1). Raw outputs stay in BUILD_DIR/mpi-bench/.
# About 1 to 2 minutes per round on 2 CPUs. Works from any directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
build=${1:-build/release}
jobs=${MSGPASS_JOBS:-2}
rounds=${MPI_BENCH_ROUNDS:-3}
technologies=${MPI_BENCH_TECHNOLOGIES:-sci tcp}
sizes=8,64,512,1024,4096,8192,65536,262144,1048576,4194304
with_openmpi=${MPI_BENCH_OPENMPI:-1}
# shellcheck source=scripts/deps.sh
source scripts/deps.sh
((with_openmpi)) && msgpass_install_deps openmpi-bin libopenmpi-dev >&2
for tool in cmake python3; do
    command -v "$tool" >/dev/null || {
        echo "$0: $tool is needed (scripts/deps.sh)" >&2
        exit 1
    }
done

if [[ ! -f "$build/CMakeCache.txt" ]]; then
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMSGPASS_SANITIZE= >&2
fi
cmake --build "$build" -j"$jobs" --target msgpass-run msgpass-bench mpi_osu mpi_comm_osu >&2
run=$build/apps/msgpass-run/msgpass-run
bench=$build/apps/msgpass-bench/msgpass-bench
osu=$build/tests/mpi/mpi_osu
comm_osu=$build/tests/mpi/mpi_comm_osu
for program in "$run" "$bench" "$osu" "$comm_osu"; do
    [[ -x "$program" ]] || {
        echo "$0: $program was not built" >&2
        exit 1
    }
done

raw=$build/mpi-bench
rm -rf "$raw"
mkdir -p "$raw"
# The same program against Open MPI; its lines get the prefix msgpass-run gives.
ompi_osu=""
if ((with_openmpi)); then
    ompi_osu=$raw/osu-openmpi
    mpicc -O2 -o "$ompi_osu" tests/mpi/bench/osu.c >&2
fi
openmpi() {
    local technology=$1 out=$2 btl
    shift 2
    case $technology in
    sci) btl=self,vader ;;
    tcp) btl=self,tcp ;;
    *) return 0 ;;
    esac
    echo "== round $r: Open MPI ($btl)" >&2
    mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none --mca btl "$btl" "$ompi_osu" "$@" \
        2>"$out.log" | sed 's/^/[rank-0] /' >"$out"
}
size_args=${sizes//,/ }
for ((r = 1; r <= rounds; r++)); do
    echo "== round $r of $rounds: floors" >&2
    "$bench" --reference --json --sizes "$sizes" >"$raw/floors-$r.jsonl"
    for technology in $technologies; do
        order=(comm mpi)
        ((r % 2 == 0)) && order=(mpi comm)
        for layer in "${order[@]}"; do
            program=$osu
            [[ $layer == comm ]] && program=$comm_osu
            echo "== round $r: $layer over $technology" >&2
            # shellcheck disable=SC2086
            "$run" -n 2 --technology "$technology" -- "$program" $size_args >"$raw/$layer-$technology-$r.txt"
        done
        # shellcheck disable=SC2086
        [[ -n "$ompi_osu" ]] && openmpi "$technology" "$raw/openmpi-$technology-$r.txt" $size_args
    done
done

python3 - "$raw" "$rounds" "$technologies" <<'EOF'
import json, os, statistics, sys
raw, rounds, technologies = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()

def size_name(n):
    for unit, mult in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"

values = {}  # (source, kind, size) -> [per round]
for r in range(1, rounds + 1):
    with open(f"{raw}/floors-{r}.jsonl") as f:
        for text in f:
            line = json.loads(text)
            t = line["technology"]
            figure = line["one_way_us"]["mean"] if t.endswith("pingpong") else line["MBps"]
            values.setdefault((t, "floor", line["size"]), []).append(figure)
    for t in technologies:
        for layer in ("comm", "mpi", "openmpi"):
            name = f"{raw}/{layer}-{t}-{r}.txt"
            if layer == "openmpi" and not os.path.exists(name):
                continue
            with open(name) as f:
                for text in f:
                    fields = text.split()  # "[rank-0] latency SIZE VALUE"
                    if len(fields) != 4 or fields[0] != "[rank-0]":
                        continue
                    values.setdefault((f"{layer}-{t}", fields[1], int(fields[2])), []).append(float(fields[3]))

def med(key):
    v = values.get(key)
    return statistics.median(v) if v else None

def fmt(x, digits=2):
    return "" if x is None else f"{x:.{digits}f}"

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

floors = {"sci": ("reference-shm-pingpong", "reference-shm-ring"),
          "tcp": ("reference-tcp-pingpong", "reference-tcp-stream"),
          "udp": ("reference-udp-pingpong", "reference-udp-stream")}
sizes = sorted({k[2] for k in values if k[1] == "latency"})
print(f"Medians of {rounds} rounds.\n")
for t in technologies:
    ping, stream = floors.get(t, (None, None))
    print(f"**{t}**: latency in us (one way, mean), bandwidth in MB/s (window of 64, at most 16 MiB in flight); "
          f"floors: {ping}, {stream}\n")
    print("| size | MPI us | comm us | Open MPI us | MPI / comm | MPI / Open MPI | floor us | MPI / floor "
          "| MPI MB/s | comm MB/s | Open MPI MB/s | MPI / comm | MPI / Open MPI | floor MB/s | MPI / floor |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        ml, cl = med((f"mpi-{t}", "latency", s)), med((f"comm-{t}", "latency", s))
        ol, ob = med((f"openmpi-{t}", "latency", s)), med((f"openmpi-{t}", "bandwidth", s))
        mb, cb = med((f"mpi-{t}", "bandwidth", s)), med((f"comm-{t}", "bandwidth", s))
        fl, fb = med((ping, "floor", s)), med((stream, "floor", s))
        print(f"| {size_name(s)} | {fmt(ml)} | {fmt(cl)} | {fmt(ol)} | {fmt(ratio(ml, cl))} | {fmt(ratio(ml, ol))} "
              f"| {fmt(fl)} | {fmt(ratio(ml, fl))} | {fmt(mb, 0)} | {fmt(cb, 0)} | {fmt(ob, 0)} | {fmt(ratio(mb, cb))} "
              f"| {fmt(ratio(mb, ob))} | {fmt(fb, 0)} | {fmt(ratio(mb, fb))} |")
    print()
    print("MPI / Open MPI: latency below 1 and bandwidth above 1 are msgpass ahead (issue 12's targets: latency <= "
          "Open MPI's at 8 B to 8 KiB, bandwidth >= at 64 KiB to 4 MiB).\n")
EOF
