#!/usr/bin/env bash
# The curves of issue 31, item 4: one receiver and N senders that each send at a fixed
# low rate, for N = 2, 8, 32, 128, 256, measured with msgpass-bench --pattern fanin:
# the receiver thread's CPU time per message, sci's group receive with its ready marks
# beside the same point through a group that looks at every member (--compare-scan,
# the receive before the marks), and tcp's; then the partition's start and the memory
# per node of the same runs. Every point runs under flock /tmp/msgpass-bench.lock, so
# that no two benchmarks overlap. Writes OUT/fanin.jsonl (msgpass-bench's lines),
# OUT/fanin.tsv and OUT/fanin.png (gnuplot, installed here when missing: the tests
# need none of it).
#
# Usage: scripts/fanin-curves.sh [--build DIR] [--out DIR] [--counts "2 8 32 128 256"]
#                                [--rate R] [--seconds S] [--technologies "sci tcp"]
#   --build  the build directory with apps/msgpass-bench (default build/rel)
#   --out    where the results go (default build/fanin)
#   --rate   messages per second of each sender (default 100)
#   --seconds the timed part of each point (default 2)
#   --total  the series sci-total: the senders share this many messages per second
#            (each total / N), so that every N has the same wake-ups per second and
#            only the group's size changes (default 2560; 0: none)
#   --plot-only  no measurement: the table and the plot from OUT/fanin.jsonl
# sci's waits sleep after their first poll (MSGPASS_SCI_WAIT=sleep): the default
# wait spins for 50 us and yields for 1 ms, and at these rates that, not the receive,
# is the receiver's CPU time (the sci-default rows, measured too, show it).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build/rel
out=$repo/build/fanin
counts="2 8 32 128 256"
rate=100
seconds=2
technologies="sci tcp"
total=2560
plot_only=0
while (($#)); do
    case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --counts) counts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --technologies) technologies=$2; shift 2 ;;
    --total) total=$2; shift 2 ;;
    --plot-only) plot_only=1; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "fanin-curves: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
bench=$build/apps/msgpass-bench/msgpass-bench
[[ -x $bench ]] || { echo "fanin-curves: no $bench (build the msgpass-bench target)" >&2; exit 1; }
mkdir -p "$out"

install_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    local -a sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    echo "installing gnuplot-nox"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends gnuplot-nox >"$out/apt.log" 2>&1 ||
        { "${sudo[@]}" apt-get update -q >>"$out/apt.log" 2>&1 &&
            "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                gnuplot-nox >>"$out/apt.log" 2>&1; }
}

((plot_only)) || : >"$out/fanin.jsonl"
point() { # label, rate, then the environment and arguments of msgpass-bench
    local label=$1 each=$2
    shift 2
    echo "fanin-curves: $label (rate $each) $*" >&2
    flock /tmp/msgpass-bench.lock env "$@" --json --pattern fanin --sizes 64 --seconds "$seconds" --rate "$each" |
        sed "s/^{/{\"series\":\"$label\",/" >>"$out/fanin.jsonl"
}
((plot_only)) && counts=""
for n in $counts; do
    for t in $technologies; do
        case $t in
        sci)
            point sci "$rate" MSGPASS_SCI_WAIT=sleep "$bench" --technology sci --members "$n" --compare-scan
            point sci-default "$rate" MSGPASS_SCI_WAIT= "$bench" --technology sci --members "$n"
            ((total > 0)) && point sci-total $(((total + n - 1) / n)) MSGPASS_SCI_WAIT=sleep "$bench" \
                --technology sci --members "$n" --compare-scan
            ;;
        *) point "$t" "$rate" "$bench" --technology "$t" --members "$n" ;;
        esac
    done
done

# One row per point: series members cpu_us_per_msg msgs_per_s start_s shm_kib_per_node
# shm_objects_per_node rss_kib member_rss_kib. A run's start is timed on its first
# point (with --compare-scan the scan's): it is the run's, so the marks' row shows it.
python3 - "$out/fanin.jsonl" >"$out/fanin.tsv" <<'EOF'
import json, sys
rows, start = [], {}
for line in open(sys.argv[1]):
    j = json.loads(line)
    j["name"] = j["series"] + ("-scan" if j["pattern"] == "fanin-scan" else "")
    if j.get("start_s") is not None:
        start[(j["series"], j["members"])] = j["start_s"]
    rows.append(j)
keys = ("cpu_us_per_msg", "msgs_per_s", "start_s", "shm_kib_per_node", "shm_objects_per_node", "rss_kib",
        "member_rss_kib")
print("series\tmembers\t" + "\t".join(keys))
for j in rows:
    if not j["name"].endswith("-scan"):
        j["start_s"] = start.get((j["series"], j["members"]))
    get = lambda k: "-" if j.get(k) is None else "%.4g" % j[k]
    print("\t".join([j["name"], str(j["members"])] + [get(k) for k in keys]))
EOF
column -t "$out/fanin.tsv"

install_gnuplot || { echo "fanin-curves: no gnuplot; the table is $out/fanin.tsv" >&2; exit 1; }
series=$(awk 'NR > 1 {print $1}' "$out/fanin.tsv" | sort -u | tr '\n' ' ')
for s in $series; do
    awk -v s="$s" 'NR > 1 && $1 == s' "$out/fanin.tsv" >"$out/series-$s.tsv"
done
curve() { # series, column, title
    echo -n " '$out/series-$1.tsv' using 2:$2 with linespoints lw 2 title '$3',"
}
{
    echo "set terminal pngcairo size 1500,520 font ',10'"
    echo "set output '$out/fanin.png'"
    echo "set datafile separator tab"
    echo "set datafile missing '-'"
    echo "set logscale x 2"
    echo "set xlabel 'senders N (each $rate msgs/s; sci-total: $total msgs/s in all; 64 B)'"
    echo "set key top left"
    echo "set grid"
    echo "set key opaque"
    echo "set yrange [0:*]"
    echo "set multiplot layout 1,3 title 'msgpass fanin: one receiver, N senders at a fixed low rate ($(date -u +%F), $(nproc) CPUs)'"
    echo "set logscale y"
    echo "set yrange [*:*]"
    echo "set ylabel 'us (log)'"
    echo "set title 'receiver thread CPU time per message'"
    plot="plot"
    for s in $series; do plot+=$(curve "$s" 3 "$s"); done
    echo "${plot%,}"
    echo "unset logscale y"
    echo "set yrange [0:*]"
    echo "set ylabel 'seconds'"
    echo "set title 'partition start: spawn until every node reached its peers'"
    plot="plot"
    for s in $series; do [[ $s == *-scan ]] || plot+=$(curve "$s" 5 "$s"); done
    echo "${plot%,}"
    echo "set logscale y"
    echo "set yrange [*:*]"
    echo "set ylabel 'KiB per node (log)'"
    echo "set title 'memory per node'"
    plot="plot"
    for s in $series; do
        [[ $s == *-scan || $s == sci-default || $s == sci-total ]] && continue
        plot+=$(curve "$s" 6 "$s /dev/shm used")
        plot+=$(curve "$s" 9 "$s member RSS")
        plot+=$(curve "$s" 8 "$s receiver RSS")
    done
    echo "${plot%,}"
    echo "unset multiplot"
} >"$out/plot.gp"
gnuplot "$out/plot.gp"
echo "fanin-curves: $out/fanin.png"
