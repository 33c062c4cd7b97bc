#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz for SECONDS each (default 60), built with
# clang under AddressSanitizer and UndefinedBehaviorSanitizer in build/fuzz. Each
# target starts from its corpus in tests/fuzz/corpus/<target> (the seeds and every
# crash found before) and grows a working corpus in build/fuzz/corpus/<target>. A
# crash, leak, sanitizer finding, broken invariant or timeout is written into
# tests/fuzz/corpus/<target>/ as crash-*/leak-*/timeout-*: commit it, and the
# corpus replay of scripts/test.sh (ctest -L fuzz) runs it from then on, so the fix
# is checked for good. Exits non-zero when any target found something.
#   scripts/fuzz.sh [SECONDS] [--only T1,T2] [--seeds]
# --seeds rewrites the decoder seeds with the library's encoders (after a format
# change) before fuzzing. Environment: MSGPASS_JOBS (build parallelism, default 2).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

seconds=60 only="" seeds=0
while (($#)); do
    case $1 in
    --only) only=${2:?--only needs a list}; shift 2 ;;
    --seeds) seeds=1; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
        [[ "$1" =~ ^[1-9][0-9]*$ ]] || { echo "$0: SECONDS must be a positive integer, not '$1'" >&2; exit 2; }
        seconds=$1; shift ;;
    esac
done

targets=()
for source in tests/fuzz/*.cpp; do
    name=$(basename "$source" .cpp)
    [[ $name == replay_main || $name == make_seeds ]] && continue
    [[ -z "$only" || ",$only," == *",$name,"* ]] && targets+=("$name")
done
((${#targets[@]} > 0)) || { echo "$0: no target matches '$only'" >&2; exit 2; }

msgpass_install_deps
msgpass_install_deps "${MSGPASS_FUZZ_PACKAGES[@]}"

build=build/fuzz
msgpass_configure "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DMSGPASS_FUZZ=ON \
    -DMSGPASS_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
    -DMSGPASS_BUILD_APPS=OFF >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
((seeds)) && build_targets+=(fuzz_make_seeds)
cmake --build "$build" -j"$msgpass_jobs" --target "${build_targets[@]}"
((seeds)) && "$build/tests/fuzz/fuzz_make_seeds" tests/fuzz/corpus

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
found=()
for t in "${targets[@]}"; do
    corpus=tests/fuzz/corpus/$t work=$build/corpus/$t log=$build/fuzz-$t.log
    mkdir -p "$work"
    echo "==> fuzz_$t for ${seconds} s (log $log)"
    status=0
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$corpus/" -print_final_stats=1 "$work" "$corpus" >"$log" 2>&1 || status=$?
    grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::new_units_added)' "$log" | sed 's/^/    /' || true
    if ((status != 0)); then
        echo "==> fuzz_$t: FOUND something (exit $status); the input is in $corpus/, the report in $log" >&2
        grep -E 'ERROR|invariant broken|SUMMARY' "$log" | head -5 | sed 's/^/    /' >&2 || true
        found+=("$t")
    fi
done
if ((${#found[@]} > 0)); then
    echo "==> findings in: ${found[*]}" >&2
    exit 1
fi
echo "==> no finding in ${targets[*]} (${seconds} s each)"
