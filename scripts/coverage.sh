#!/usr/bin/env bash
# Line coverage of the libraries by the test suite: a gcc build with --coverage at
# -O0 in build/coverage (counters updated atomically: the libraries count from
# several threads), the suite run by ctest (without the install, examples, layers
# and bench labels, nor mpi_wrappers_build_and_run: they build or time other things,
# and a program the MPI wrappers build has no --coverage), then gcovr. Prints one row
# per library directory (base, config, framework, sci, ip/common, ip/tcp, ip/udp,
# auto, comm, mpi, umbrella) and the uncovered line blocks of the hot-path files
# (sci/src/node*.cpp, ip/tcp/src/*.cpp, ip/udp/src/*.cpp); with --write both go into docs/testing.md
# between the coverage markers. The target is >= 95 % of lines in framework, sci,
# ip and config.
#
# Usage: scripts/coverage.sh [--write] [--no-build]
#   --no-build  use the counters the last run left (no build, no ctest)
# Environment: MSGPASS_JOBS (default 2), MSGPASS_COVERAGE_DIR (default build/coverage).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

write=0 build_it=1
for a in "$@"; do
    case $a in
    --write) write=1 ;;
    --no-build) build_it=0 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "coverage: unknown argument '$a' (see --help)" >&2
        exit 2
        ;;
    esac
done

msgpass_install_deps
dir=${MSGPASS_COVERAGE_DIR:-$repo/build/coverage}

if ((build_it)); then
    msgpass_configure "$dir" -DCMAKE_BUILD_TYPE=Debug -DMSGPASS_SANITIZE= -DMSGPASS_BUILD_TESTS=ON \
        -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc \
        -DCMAKE_CXX_FLAGS="--coverage -fprofile-update=atomic -O0" \
        -DCMAKE_C_FLAGS="--coverage -fprofile-update=atomic -O0" \
        -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null
    cmake --build "$dir" -j "$msgpass_jobs"
    find "$dir" -name '*.gcda' -delete # counters of this run only
    # A failing test lowers the coverage but does not stop the report; it is named.
    ctest --test-dir "$dir" -j "$msgpass_jobs" -LE 'install|examples|layers|bench' \
        -E '^mpi_wrappers_build_and_run$' --timeout 300 \
        --output-on-failure >"$dir/ctest.log" 2>&1 || {
        echo "coverage: some tests failed (see $dir/ctest.log):" >&2
        grep -E '\*\*\*(Failed|Timeout|Exception)' "$dir/ctest.log" >&2 || true
    }
fi

# Library sources only: tests, apps and the build tree are not measured.
gcovr --root "$repo" --object-directory "$dir" \
    --filter "$repo/(base|config|framework|sci|ip|auto|comm|mpi|umbrella)/" \
    --exclude-unreachable-branches --json "$dir/coverage.json" >/dev/null

python3 - "$dir/coverage.json" "$dir/report.md" "$repo" <<'EOF'
import json, re, sys
data = json.load(open(sys.argv[1]))
out = open(sys.argv[2], "w")
repo = sys.argv[3]
groups = ["base", "config", "framework", "sci", "ip/common", "ip/tcp", "ip/udp", "auto", "comm", "mpi", "umbrella"]
target = {"framework", "sci", "ip/common", "ip/tcp", "ip/udp", "config"}
lines = {}  # file -> {line: count}
for f in data["files"]:
    per = lines.setdefault(f["file"], {})
    for l in f["lines"]:
        if l.get("gcovr/noncode"):
            continue
        per[l["line_number"]] = per.get(l["line_number"], 0) + l["count"]
rows = []
for g in groups:
    total = covered = 0
    for name, per in lines.items():
        if name.startswith(g + "/"):
            total += len(per)
            covered += sum(1 for c in per.values() if c > 0)
    pct = 100.0 * covered / total if total else 100.0
    mark = "" if g not in target else (" (>= 95 %)" if pct >= 95 else " **below 95 %**")
    rows.append(f"| {g} | {covered} / {total} | {pct:.1f} %{mark} |")
print("| directory | lines covered | coverage |", file=out)
print("|---|---|---|", file=out)
print("\n".join(rows), file=out)

hot = sorted(n for n in lines if re.fullmatch(r"sci/src/node[^/]*\.cpp|ip/(tcp|udp)/src/[^/]*\.cpp", n))
print("\nUncovered lines of the hot-path files (blocks of consecutive uncovered lines; the first line shown):\n", file=out)
for name in hot:
    per = lines[name]
    missing = sorted(l for l, c in per.items() if c == 0)
    if not missing:
        print(f"- {name}: every line covered", file=out)
        continue
    src = open(f"{repo}/{name}").read().splitlines()
    blocks, start, prev = [], None, None
    for l in missing:
        # uncovered lines separated only by non-code lines form one block
        if start is not None and all((k not in per) for k in range(prev + 1, l)):
            prev = l
            continue
        if start is not None:
            blocks.append((start, prev))
        start = prev = l
    blocks.append((start, prev))
    print(f"- {name}: {len(missing)} of {len(per)} lines uncovered", file=out)
    for a, b in blocks:
        where = f"{a}" if a == b else f"{a}-{b}"
        text = src[a - 1].strip().replace("|", "\\|")
        if len(text) > 90:
            text = text[:87] + "..."
        print(f"  - {where}: `{text}`", file=out)
EOF
cat "$dir/report.md"

if ((write)); then
    doc=$repo/docs/testing.md
    begin='<!-- coverage:begin -->' end='<!-- coverage:end -->'
    if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
        echo "coverage: $doc has no $begin ... $end markers" >&2
        exit 1
    fi
    python3 - "$doc" "$dir/report.md" "$begin" "$end" "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD)" \
        "$dir/ctest.log" <<'EOF'
import os, re, sys
doc, report, begin, end, day, commit, log = sys.argv[1:]
outcome = ""
if os.path.exists(log):
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", open(log).read())
    if m:
        outcome = f": {int(m.group(3)) - int(m.group(2))} of {m.group(3)} tests passed"
text = open(doc).read()
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
note = (f"Last run: {day} on {commit} (gcc --coverage -fprofile-update=atomic -O0, ctest without the install, "
        f"examples, layers and bench labels and mpi_wrappers_build_and_run{outcome}).\n\n")
open(doc, "w").write(head + begin + "\n" + note + open(report).read() + end + tail)
EOF
    echo "coverage: table written into docs/testing.md"
fi
