#!/usr/bin/env bash
# compare-builds.sh BASE_REF [HEAD_REF]: msgpass-bench of two commits, measured in
# one run on this machine (docs/benchmarks.md, "Layout change, before and after").
#
# Builds msgpass-bench of each ref in Release (a temporary `git worktree add` of the
# commit, tests off, static libraries, only the msgpass-bench target; build dirs
# stay in $COMPARE_DIR/<commit> and are reused), then runs the two binaries
# alternately, A B A B ..., $COMPARE_ROUNDS rounds each: sci pingpong + stream at
# 64 B, 1 KiB, 64 KiB, 1 MiB, tcp stream at 64 B and 64 KiB, and the floors
# (--reference) of the same sizes with each binary. Prints one table: size |
# pattern | base median | head median | head/base | spread (the larger of the two
# builds' (max-min)/median over rounds), then the floors' medians over all rounds.
# Raw JSON lines stay in $COMPARE_DIR/raw-<base>-<head>/.
# HEAD_REF defaults to HEAD. Environment: COMPARE_ROUNDS (3), COMPARE_SECONDS (time
# per point, 0.3), COMPARE_CPUS (the two CPUs of the two ends, "0,1"; empty: no
# pinning), COMPARE_DIR (build/compare), MSGPASS_JOBS (2).
set -euo pipefail

usage() {
    echo "usage: $0 BASE_REF [HEAD_REF]" >&2
    exit 2
}
(($# >= 1 && $# <= 2)) || usage

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

base_ref=$1
head_ref=${2:-HEAD}
rounds=${COMPARE_ROUNDS:-3}
seconds=${COMPARE_SECONDS:-0.3}
jobs=${MSGPASS_JOBS:-2}
if [[ -z "${COMPARE_CPUS+set}" ]]; then
    if (($(nproc) >= 2)); then COMPARE_CPUS=0,1; else COMPARE_CPUS=; fi
fi
cpu_args=()
[[ -n "$COMPARE_CPUS" ]] && cpu_args=(--cpu "$COMPARE_CPUS")
dir=${COMPARE_DIR:-$repo/build/compare}
sci_sizes=64,1KiB,64KiB,1MiB
tcp_sizes=64,64KiB

[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "$0: COMPARE_ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2; }
for tool in cmake git python3; do
    command -v "$tool" >/dev/null || { echo "$0: $tool is needed (scripts/deps.sh)" >&2; exit 1; }
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

resolve() {
    git rev-parse --verify --quiet "$1^{commit}" || { echo "$0: '$1' is not a commit of $repo" >&2; exit 2; }
}
base=$(resolve "$base_ref")
head=$(resolve "$head_ref")
mkdir -p "$dir"

tmp=$(mktemp -d)
cleanup() {
    for wt in "$tmp"/src-*; do
        [[ -d "$wt" ]] && git -C "$repo" worktree remove --force "$wt" >/dev/null 2>&1
    done
    git -C "$repo" worktree prune
    rm -rf "$tmp"
}
trap cleanup EXIT

# build COMMIT: prints the path of that commit's msgpass-bench (built when missing).
build() {
    local commit=$1 build_dir=$dir/$1 bin
    bin=$build_dir/apps/msgpass-bench/msgpass-bench
    if [[ ! -x "$bin" ]]; then
        local src=$tmp/src-$commit
        echo "== build msgpass-bench of ${commit:0:10} (Release, $build_dir)" >&2
        git -C "$repo" worktree add --detach --quiet "$src" "$commit" >&2
        cmake -S "$src" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
            -DMSGPASS_BUILD_TESTS=OFF -DBUILD_SHARED_LIBS=OFF >"$build_dir.cmake.log" 2>&1 ||
            { cat "$build_dir.cmake.log" >&2; echo "$0: cmake of ${commit:0:10} failed" >&2; exit 1; }
        cmake --build "$build_dir" -j"$jobs" --target msgpass-bench >&2
        git -C "$repo" worktree remove --force "$src"
    fi
    # Each binary must run its own build's code: with static libraries nothing of
    # msgpass is loaded at run time; a shared libmsgpass must come from its build dir.
    local lib
    while read -r lib; do
        case "$lib" in
        "$build_dir"/*) ;;
        *) echo "$0: $bin loads $lib, not its own build's library" >&2; exit 1 ;;
        esac
    done < <(ldd "$bin" | awk '/libmsgpass/ {print $3}')
    echo "$bin"
}

bin_base=$(build "$base")
bin_head=$(build "$head")
raw=$dir/raw-${base:0:10}-${head:0:10}
rm -rf "$raw"
mkdir -p "$raw"

# run NAME BIN ROUND: one round of one binary; JSON lines into $raw/NAME-ROUND.jsonl.
run() {
    local name=$1 bin=$2 round=$3 out=$raw/$1-$3.jsonl
    echo "== round $round, $name (${bin#"$repo"/})" >&2
    timeout 300 "$bin" --json --reference --sizes "$sci_sizes" "${cpu_args[@]}" >"$out" ||
        { echo "$0: $name --reference failed (status $?)" >&2; exit 1; }
    timeout 300 "$bin" --json --technology sci --sizes "$sci_sizes" --seconds "$seconds" "${cpu_args[@]}" >>"$out" ||
        { echo "$0: $name over sci failed (status $?)" >&2; exit 1; }
    timeout 300 "$bin" --json --technology tcp --pattern stream --sizes "$tcp_sizes" --seconds "$seconds" \
        "${cpu_args[@]}" >>"$out" || { echo "$0: $name over tcp failed (status $?)" >&2; exit 1; }
}

echo "== load before: $(uptime)" >&2
for ((r = 1; r <= rounds; r++)); do
    run base "$bin_base" "$r"
    run head "$bin_head" "$r"
done
echo "== load after: $(uptime)" >&2

python3 - "$raw" "$rounds" "${base:0:10}" "${head:0:10}" <<'EOF'
import json, statistics, sys
raw, rounds, base, head = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def size_name(n):
    for unit, mult in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {unit}"
    return f"{n} B"

# figure: pingpong -> p50 one-way latency (us, lower is better); stream -> MB/s.
def figure(line):
    if line["pattern"] == "pingpong" or line["technology"].endswith("pingpong"):
        return line["one_way_us"]["p50"]
    return line["MBps"]

values = {}  # (build, technology, pattern, size) -> [per round]
for build in ("base", "head"):
    for r in range(1, rounds + 1):
        with open(f"{raw}/{build}-{r}.jsonl") as f:
            for text in f:
                line = json.loads(text)
                key = (build, line["technology"], line.get("pattern", ""), line["size"])
                values.setdefault(key, []).append(figure(line))

def spread(v):
    m = statistics.median(v)
    return (max(v) - min(v)) / m if m else 0.0

rows = []
for (build, tech, pattern, size), v in values.items():
    if build != "base" or tech.startswith("reference"):
        continue
    h = values.get(("head", tech, pattern, size))
    if not h:
        continue
    b_med, h_med = statistics.median(v), statistics.median(h)
    unit = "us p50" if pattern == "pingpong" else "MB/s"
    # head/base as "how much of base's speed": >1 is better for both figures.
    better = (b_med / h_med) if pattern == "pingpong" else (h_med / b_med)
    rows.append((tech, pattern, size, unit, b_med, h_med, h_med / b_med, better, max(spread(v), spread(h))))
rows.sort(key=lambda r: (r[0] != "sci", r[1], r[2]))

print(f"\nmsgpass-bench {base} (base) vs {head} (head), {rounds} rounds each, alternating; medians of rounds")
print("pingpong: p50 one-way latency in us (lower is better); stream: MB/s at the receiver (higher is better)")
print("speed = head's speed as a fraction of base's (>1: head faster); spread = max over both builds of (max-min)/median\n")
print("| size | pattern | base median | head median | head/base | speed | spread |")
print("|---:|---|---:|---:|---:|---:|---:|")
for tech, pattern, size, unit, b, h, ratio, better, spr in rows:
    print(f"| {size_name(size)} | {tech} {pattern} ({unit}) | {b:.3g} | {h:.3g} | {ratio:.2f} | {better:.2f} | {spr:.0%} |")

print("\nFloors of the same run (--reference, median over both builds' rounds), and spread:\n")
print("| size | floor | median | spread |")
print("|---:|---|---:|---:|")
floors = {}
for (build, tech, pattern, size), v in values.items():
    if tech.startswith("reference"):
        floors.setdefault((tech, size), []).extend(v)
for (tech, size), v in sorted(floors.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    unit = "us p50" if tech.endswith("pingpong") else "MB/s"
    print(f"| {size_name(size)} | {tech} ({unit}) | {statistics.median(v):.3g} | {spread(v):.0%} |")
EOF
