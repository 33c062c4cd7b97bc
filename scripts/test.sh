#!/usr/bin/env bash
# The whole test suite, as CI runs it: every test under AddressSanitizer and
# UndefinedBehaviorSanitizer, then the tests labelled `tsan` (shared memory and
# threads) again under ThreadSanitizer, which cannot be combined with ASan.
# Works from any directory; exits non-zero on the first failing step.
# Environment: MSGPASS_JOBS (default 2) sets build and ctest parallelism.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=scripts/deps.sh
source scripts/deps.sh

jobs=$msgpass_jobs
# A sanitizer finding must fail the test, not scroll by in its output.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

total_start=$SECONDS
step() {
    local name=$1
    shift
    local start=$SECONDS
    echo "==> $name"
    if ! "$@"; then
        echo "==> $name: FAILED after $((SECONDS - start)) s" >&2
        exit 1
    fi
    echo "==> $name: ok ($((SECONDS - start)) s)"
}

# ctest with the arguments given; then lists the tests that skipped (a test that
# could not run here, GTEST_SKIP). With CI set (.ci/run sets it) a skipped test fails
# the run: a CI machine that lost a tool, root or a kernel feature must not pass by
# running fewer tests.
run_ctest() {
    local log skipped
    log=$(mktemp)
    local status=0
    ctest "$@" 2>&1 | tee "$log" || status=$? # pipefail: ctest's status
    skipped=$(grep -E '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$log" || true)
    rm -f "$log"
    if [[ -n "$skipped" ]]; then
        echo "==> tests that did not run here (skipped):"
        echo "$skipped"
        if [[ -n "${CI:-}" && "${CI}" != 0 && "${CI}" != false ]]; then
            echo "==> CI is set: a skipped test fails the run" >&2
            return 1
        fi
    fi
    return "$status"
}

step "dependencies" msgpass_install_deps

asan=build/test-asan
step "configure (address,undefined)" msgpass_configure "$asan" -DCMAKE_BUILD_TYPE=Debug -DMSGPASS_SANITIZE=address,undefined
step "build (address,undefined)" cmake --build "$asan" -j"$jobs"
step "ctest (address,undefined)" run_ctest --test-dir "$asan" -j"$jobs" --output-on-failure --timeout 600

tsan=build/test-tsan
step "configure (thread)" msgpass_configure "$tsan" -DCMAKE_BUILD_TYPE=Debug -DMSGPASS_SANITIZE=thread
step "build (thread)" cmake --build "$tsan" -j"$jobs"
step "ctest -L tsan (thread)" run_ctest --test-dir "$tsan" -L tsan --no-tests=error -j"$jobs" --output-on-failure --timeout 600

echo "==> all tests passed ($((SECONDS - total_start)) s)"
