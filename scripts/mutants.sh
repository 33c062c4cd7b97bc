#!/usr/bin/env bash
# Planted-bug check: plants each bug of tests/mutants/ (one unified diff per mutant,
# its first line says what the bug is) into a copy of the tree, one at a time,
# rebuilds incrementally and runs the tests. A mutant must be killed by a contract
# test, one that checks a layer through its public interface on every technology
# (tests/conformance: conformance_test, auto_test, timeout_test; the communicator's
# CommConformance suite, comm_test; the configuration files as a user writes them,
# config_test; the real launcher, launcher_test; the MPI test programs of tests/mpi run
# by the launcher over each technology), not only by a unit or white-box test
# of the piece it breaks. Prints the table
#   mutant | killed by | verdict
# and exits non-zero when a mutant survives (or does not build).
#
# Not run in CI (minutes per mutant); run it before an issue that touches the
# receive, send, wait or deadline paths is resolved, and keep the last table in
# docs/testing.md (--write).
#
# Usage: scripts/mutants.sh [--list] [--only NAME[,NAME...]] [--quick] [--write] [--full] [--no-baseline]
#                           [--contract-only] [--tests REGEX]
#   --list   list the mutants and what each plants, run nothing
#   --only   run only these mutants (names without .patch)
#   --quick  a chosen few, one or two per layer (the QUICK list below), in about ten
#            minutes on 2 CPUs once the copy is built: run it before resolving an issue
#   --write  put the table into docs/testing.md between the mutants markers
#   --full   run the rest of the suite even when a contract test killed the mutant
#            (by default it runs only for a survivor, to tell "unit only" from "none")
#   --contract-only  never build and run the rest of the suite (a survivor's verdict
#            is then "SURVIVED (rest not run)"): the first full build takes long
#   --tests REGEX  run only the contract tests whose ctest name matches REGEX (grep -E),
#            e.g. the tests written for these mutants on a loaded machine; a survivor's
#            verdict then names the filter, and --full and the rest of the suite are off
#   --no-baseline  do not run the contract tests on the unmutated copy first (by
#            default they are, and a test failing there is not counted as a kill)
# Environment: MSGPASS_MUTANTS_DIR (default build/mutants: the copy in src/, the
# Debug build without sanitizers in build/, logs in logs/), MSGPASS_JOBS (default 2),
# MSGPASS_MUTANT_TIMEOUT (seconds per test, default 60).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

list=0 write=0 full=0 baseline=1 contract_only=0 only="" tests=""
# --quick: the order of a message (sci, tcp, udp), a lost one (udp), the group's
# fairness, the communicator's matching, a configuration range, the launcher's exit
# code, the authentication of a peer, tcp's tie-break and sci's usual small send.
QUICK=sci-swap,tcp-swap,udp-drop-every-n,group-rotation-two-members,comm-blocking-recv-overtakes-posted,config-range-one-over,launcher-failure-exits-zero,auth-any-mac-accepted,tcp-crossing-accepted,sci-fast-send-silent
while (($#)); do
    case $1 in
    --list) list=1 ;;
    --quick) only=$QUICK ;;
    --write) write=1 ;;
    --full) full=1 ;;
    --no-baseline) baseline=0 ;;
    --contract-only) contract_only=1 ;;
    --only)
        only=${2:?--only needs a mutant name}
        shift
        ;;
    --only=*) only=${1#--only=} ;;
    --tests)
        tests=${2:?--tests needs a regular expression}
        shift
        ;;
    --tests=*) tests=${1#--tests=} ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "mutants: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

mutants_dir=$repo/tests/mutants
describe() { head -n1 "$mutants_dir/$1.patch"; }

names=()
for f in "$mutants_dir"/*.patch; do names+=("$(basename "$f" .patch)"); done
if [[ -n "$only" ]]; then
    IFS=, read -r -a wanted <<<"$only"
    for n in "${wanted[@]}"; do
        [[ -f "$mutants_dir/$n.patch" ]] || {
            echo "mutants: no mutant '$n' in tests/mutants (--list shows them)" >&2
            exit 2
        }
    done
    names=("${wanted[@]}")
fi

if ((list)); then
    for n in "${names[@]}"; do printf '%-28s %s\n' "$n" "$(describe "$n")"; done
    exit 0
fi

work=${MSGPASS_MUTANTS_DIR:-$repo/build/mutants}
src=$work/src
build=$work/build
logs=$work/logs
timeout=${MSGPASS_MUTANT_TIMEOUT:-60}
mkdir -p "$src" "$logs"

# The copy: the tracked and new files of the working tree. A file whose content did
# not change keeps its time stamp, so that the build stays incremental across runs.
echo "mutants: copying the tree into $src"
(cd "$repo" && git ls-files -z -c -o --exclude-standard) | while IFS= read -r -d '' f; do
    [[ -f "$repo/$f" ]] || continue
    if ! cmp -s "$repo/$f" "$src/$f"; then
        mkdir -p "$src/$(dirname "$f")"
        cp "$repo/$f" "$src/$f" # a new time stamp: the build sees the change
    fi
done
# A git repository in the copy, so that a planted bug is reverted by one checkout.
(
    cd "$src"
    [[ -d .git ]] || git init -q
    git add -A
    git -c user.name=mutants -c user.email=mutants@localhost commit -q --allow-empty -m "tree under test"
)

# What the build needs (Boost, yaml-cpp, ...), as scripts/test.sh installs it.
msgpass_install_deps >"$logs/deps.log" 2>&1 || {
    echo "mutants: installing the dependencies failed, see $logs/deps.log" >&2
    exit 1
}

# Configured from the copy (msgpass_configure configures the tree its deps.sh is in),
# with shared libraries: a bug planted in a library then relinks that library alone,
# not the thirty test programs linked to it (CMAKE_LINK_DEPENDS_NO_SHARED), which took
# minutes of every mutant's build. A configure that failed leaves no cache behind.
if ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt" 2>/dev/null ||
    ! grep -qx "BUILD_SHARED_LIBS:BOOL=ON" "$build/CMakeCache.txt"; then
    rm -rf "$build"
    # shellcheck source=scripts/deps.sh
    (cd "$src" && source scripts/deps.sh && msgpass_configure "$build" -DCMAKE_BUILD_TYPE=Debug \
        -DMSGPASS_SANITIZE= -DMSGPASS_BUILD_TESTS=ON -DMSGPASS_BUILD_APPS=ON \
        -DBUILD_SHARED_LIBS=ON -DCMAKE_LINK_DEPENDS_NO_SHARED=ON) >"$logs/configure.log" 2>&1 || {
        rm -rf "$build"
        echo "mutants: configuring the copy failed, see $logs/configure.log" >&2
        exit 1
    }
fi

# build_copy LOG [TARGET...]: builds the copy (the given targets, else everything).
# The contract tests are built first; the rest only when a mutant survives them.
# Every MPI test program the build defines (the OSU-like benchmarks excepted): a program
# added to tests/mpi is a contract test without a change here (one left unbuilt
# failed on the unmutated copy and was silently left out).
mapfile -t mpi_targets < <(cmake --build "$build" --target help 2>/dev/null |
    sed -nE 's/^(mpi_[A-Za-z0-9_]+): .*/\1/p' | grep -v osu | sort -u)
contract_targets=(conformance_test auto_test timeout_test comm_test config_test launcher_test msgpass-run
    "${mpi_targets[@]}")
# shellcheck disable=SC2154 # msgpass_jobs: set by deps.sh
build_copy() {
    local log=$1
    shift
    local targets=()
    (($#)) && targets=(--target "$@")
    cmake --build "$build" -j "$msgpass_jobs" "${targets[@]}" >"$log" 2>&1
}

echo "mutants: building the unmutated copy"
build_copy "$logs/baseline-build.log" "${contract_targets[@]}" || {
    echo "mutants: the unmutated tree does not build, see $logs/baseline-build.log" >&2
    exit 1
}

# Which executable each ctest test runs: the contract tests are those of tests/conformance.
# Called again after a full build (tests of executables not built yet have no names).
classify_tests() {
    ctest --test-dir "$build" --show-only=json-v1 >"$work/tests.json"
    python3 - "$work/tests.json" "$work/contract.txt" "$work/other.txt" <<'EOF'
import json, os, sys
tests = json.load(open(sys.argv[1]))["tests"]
contract_exes = {"conformance_test", "auto_test", "timeout_test", "comm_test", "config_test", "launcher_test"}
slow = {"install", "bench", "examples", "layers"}
with open(sys.argv[2], "w") as c, open(sys.argv[3], "w") as o:
    for t in tests:
        cmd = t.get("command") or [""]
        labels = set()
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels.update(p["value"])
        if labels & slow:
            continue
        exe = os.path.basename(cmd[0])
        # An MPI test program run by the launcher checks MPI through its C interface
        # over a technology: a contract test of the MPI layer.
        # (the OSU-like benchmark runs are not: they measure, they check nothing)
        mpi_program = exe == "msgpass-run" and "mpi" in labels and "osu" not in t["name"]
        (c if exe in contract_exes or mpi_program else o).write(t["name"] + "\n")
EOF
    if [[ -n "$tests" ]]; then
        grep -E -- "$tests" "$work/contract.txt" >"$work/contract.only" || true
        mv "$work/contract.only" "$work/contract.txt"
    fi
    contract_list=$work/contract.txt
    # (a failed name is its first word: a parameterised test's name goes on with "  # GetParam() = ...")
    if [[ -n "${baseline_failed:-}" ]]; then
        awk 'NR == FNR { bad[$1]; next } !($1 in bad)' "$logs/baseline-contract.log.failed" "$work/contract.txt" \
            >"$work/contract.ok" || true
        contract_list=$work/contract.ok
    fi
}
# tests_file NAMES OUT: writes into OUT the ctest -I list ("0,0,0" and the numbers) of the
# tests named in file NAMES, one a line. By number, not by one -R regex: ctest's
# regular expressions have a size limit, and the ~570 contract names passed it
# ("Expression too big", so no test ran and every mutant a first run missed survived).
# The numbers are read afresh each time: building more targets adds tests.
tests_file() {
    ctest --test-dir "$build" --show-only=json-v1 >"$work/numbers.json"
    python3 - "$work/numbers.json" "$1" "$2" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
want = {l.rstrip("\n") for l in open(sys.argv[2]) if l.strip()}
numbers = [str(i + 1) for i, t in enumerate(tests) if t["name"] in want]
open(sys.argv[3], "w").write(",".join(["0", "0", "0"] + numbers) + "\n" if numbers else "")
PY
}
[[ -n "$tests" ]] && full=0 contract_only=1
classify_tests
[[ -s "$work/contract.txt" ]] || {
    echo "mutants: no contract test matches --tests '$tests'" >&2
    exit 2
}
filter_note=""
[[ -n "$tests" ]] && filter_note="; only those matching '$tests'"
echo "mutants: $(wc -l <"$work/contract.txt") contract tests (install, bench, examples and layers left out$filter_note)"
baseline_failed=""

# run_tests NAMES LOG MAX: runs the tests named in file NAMES and stops after MAX of
# them failed (0: no limit); the failed names go to LOG.failed, one a line.
run_tests() {
    local names_file=$1 log=$2 max=$3
    : >"$log.failed"
    tests_file "$names_file" "$log.numbers"
    if [[ ! -s "$log.numbers" ]]; then
        echo "mutants: no test to run of $names_file" >"$log"
        return 0
    fi
    setsid ctest --test-dir "$build" -j "$msgpass_jobs" --timeout "$timeout" -I "$log.numbers" >"$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if ((max > 0)) && (($(grep -cE '\*\*\*(Failed|Timeout|Exception)|Not Run' "$log" || true) >= max)); then
            kill -TERM -- "-$pid" 2>/dev/null || true
            break
        fi
        sleep 1
    done
    wait "$pid" 2>/dev/null || true
    grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$log" |
        sed -E 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .*/\1/' >"$log.failed" || true
}

shorten() { # up to 3 names of file $1, then "+N more"
    local n
    n=$(wc -l <"$1")
    local first
    first=$(head -n3 "$1" | paste -sd, - | sed 's/,/, /g')
    if ((n > 3)); then echo "$first +$((n - 3)) more"; else echo "$first"; fi
}

# The unmutated tree must pass the contract tests, or a failure proves nothing.
if ((baseline)); then
    echo "mutants: running the contract tests on the unmutated copy"
    run_tests "$contract_list" "$logs/baseline-contract.log" 0
    if [[ -s "$logs/baseline-contract.log.failed" ]]; then
        baseline_failed=$(paste -sd' ' "$logs/baseline-contract.log.failed")
        echo "mutants: WARNING: these contract tests fail without a mutant and are not counted: $baseline_failed" >&2
        classify_tests # now without them
    fi
fi

# known_killers NAME: the contract tests docs/testing.md's table says killed NAME, one a
# line (the names it shows: up to three, "+N more" left out).
known_killers() {
    python3 - "$repo/docs/testing.md" "$1" <<'EOF'
import sys
text = open(sys.argv[1]).read()
begin, end = "<!-- mutants:begin -->", "<!-- mutants:end -->"
if begin in text and end in text:
    for row in text.split(begin, 1)[1].split(end, 1)[0].splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) > 3 and cells[1] == sys.argv[2] and cells[3] == "killed":
            for n in cells[2].split(", "):
                print(n.split(" +")[0])
EOF
}

rows=()
survivors=0
for name in "${names[@]}"; do
    echo "mutants: $name: $(describe "$name")"
    (cd "$src" && git checkout -q -- . && git clean -fdq)
    if ! (cd "$src" && git apply "$mutants_dir/$name.patch"); then
        rows+=("| $name | (the patch does not apply: refresh it) | NOT APPLIED |")
        survivors=$((survivors + 1))
        continue
    fi
    if ! build_copy "$logs/$name-build.log" "${contract_targets[@]}"; then
        rows+=("| $name | (does not build, see $name-build.log) | BUILD FAILED |")
        survivors=$((survivors + 1))
        (cd "$src" && git checkout -q -- .)
        continue
    fi
    # The contract tests that killed this mutant in the last run (its .failed log, or on
    # a machine that has none, the names docs/testing.md's table gives) run first: a kill
    # is then found in seconds, not after the slowest MPI programs that ctest's cost
    # order puts first. Only when none of them fails does the whole set run.
    : >"$work/first.txt"
    if ((!full)); then
        if [[ -s "$logs/$name-contract.log.failed" ]]; then
            cp "$logs/$name-contract.log.failed" "$work/known.txt"
        else
            known_killers "$name" >"$work/known.txt"
        fi
        awk 'NR == FNR { want[$1]; next } ($1 in want)' "$work/known.txt" "$contract_list" >"$work/first.txt"
        [[ -s "$work/first.txt" ]] && run_tests "$work/first.txt" "$logs/$name-contract.log" 3
    fi
    if [[ ! -s "$work/first.txt" || ! -s "$logs/$name-contract.log.failed" ]]; then
        run_tests "$contract_list" "$logs/$name-contract.log" $((full ? 0 : 3))
    fi
    killed_by=$(shorten "$logs/$name-contract.log.failed")
    if [[ -s "$logs/$name-contract.log.failed" ]]; then
        verdict=killed
        if ((full)); then
            build_copy "$logs/$name-build-all.log" || true
            classify_tests
            run_tests "$work/other.txt" "$logs/$name-other.log" 0
        fi
    elif [[ -n "$tests" ]]; then
        verdict="SURVIVED (only tests matching '${tests//|/\\|}' run)"
        killed_by="no contract test run"
        survivors=$((survivors + 1))
    elif ((contract_only)); then
        verdict="SURVIVED (rest not run)"
        killed_by="no contract test"
        survivors=$((survivors + 1))
    else
        build_copy "$logs/$name-build-all.log" || true
        classify_tests
        run_tests "$work/other.txt" "$logs/$name-other.log" 3
        if [[ -s "$logs/$name-other.log.failed" ]]; then
            verdict="SURVIVED (unit only)"
            killed_by="$(shorten "$logs/$name-other.log.failed")"
        else
            verdict=SURVIVED
            killed_by="none"
        fi
        survivors=$((survivors + 1))
    fi
    echo "mutants: $name: $verdict ($killed_by)"
    rows+=("| $name | $killed_by | $verdict |")
    (cd "$src" && git checkout -q -- . && git clean -fdq)
done

table=$(
    echo "| mutant | killed by | verdict |"
    echo "|---|---|---|"
    printf '%s\n' "${rows[@]}"
)
echo
echo "$table"

if ((write)); then
    doc=$repo/docs/testing.md
    begin='<!-- mutants:begin -->' end='<!-- mutants:end -->'
    if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
        echo "mutants: $doc has no $begin ... $end markers" >&2
        exit 1
    fi
    printf '%s\n' "${rows[@]}" >"$work/rows.md"
    # With --only, the rows of the other mutants stay as the last full run left them.
    python3 - "$doc" "$work/rows.md" "$begin" "$end" "$(date -u +%Y-%m-%d)" \
        "$(cd "$repo" && git rev-parse --short HEAD)" "$only" "$tests" <<'EOF'
import sys
doc, rows_file, begin, end, day, commit, only, tests = sys.argv[1:]
text = open(doc).read()
head, rest = text.split(begin, 1)
old, tail = rest.split(end, 1)
name = lambda row: row.split("|")[1].strip()
rows = {name(r): r for r in old.splitlines() if r.startswith("| ") and not r.startswith("| mutant ")}
for r in open(rows_file).read().splitlines():
    rows[name(r)] = r
note = f"Last run: {day} on {commit}" + (f" (only {only}; the other rows are from an earlier run)" if only else "")
note += f", running only the contract tests matching `{tests}`." if tests else "."
table = "\n".join(["| mutant | killed by | verdict |", "|---|---|---|"] + [rows[k] for k in sorted(rows)])
open(doc, "w").write(head + begin + "\n" + note + "\n\n" + table + "\n" + end + tail)
EOF
    echo "mutants: table written into docs/testing.md"
fi

((survivors == 0))
