#!/usr/bin/env bash
# Installs the Debian packages msgpass builds against, only those that are missing,
# so that scripts/test.sh and scripts/demo.sh work on a fresh machine and cost
# nothing on a prepared one. Source it and call msgpass_install_deps, or run it;
# msgpass_configure is the one place that configures a build directory for them.
# The package index is refreshed only when an install fails (a stale index is the
# usual cause), so an offline machine that has everything never touches the network.

MSGPASS_PACKAGES=(
    cmake
    libboost-dev
    libboost-program-options-dev
    libyaml-cpp-dev
    libgtest-dev
    libgmock-dev
    libbenchmark-dev
    pkg-config
    help2man
    util-linux # unshare, for tests/sci/shm_full_test (mount comes with the essential mount package)
    iproute2 # ip and ss: the tcp tests across network namespaces (required when CI is set)
    libsodium-dev # crypto_auth (HMAC-SHA-512-256) of the authenticated tcp and udp handshakes (docs/security.md)
    gcovr # scripts/coverage.sh: the per-directory line coverage table of docs/testing.md
    libncurses-dev # msgpass-top's interactive view (apps/msgpass-top)
    gnuplot-nox # msgpass-daq --record's plot (and its test); compare-peers.sh's PNG
    libspdlog-dev # the library's logger (framework/src/log.cpp, header-only; MSGPASS_LOG)
)
# scripts/fuzz.sh only: clang and its libFuzzer runtime (the replay of the corpora in
# scripts/test.sh needs neither).
MSGPASS_FUZZ_PACKAGES=(clang libclang-rt-dev)

# msgpass_missing PACKAGE...: prints those that are not installed, one a line.
msgpass_missing() {
    local pkg status
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [[ "$status" == "install ok installed" ]] || echo "$pkg"
    done
}

# msgpass_install_deps [PACKAGE...]: the packages given, or MSGPASS_PACKAGES.
# Installs run one at a time: tests that install what they need (Slurm, Prometheus) run
# side by side under ctest -j2, and dpkg refuses a second install while one runs (a
# test then found its package "missing" and skipped). A lock of msgpass's own orders
# them, and apt waits for dpkg's lock held by anything else.
msgpass_install_deps() {
    local -a wanted=("$@") missing=()
    ((${#wanted[@]} > 0)) || wanted=("${MSGPASS_PACKAGES[@]}")
    mapfile -t missing < <(msgpass_missing "${wanted[@]}")
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    local lock=${TMPDIR:-/tmp}/msgpass-deps.lock lockfd=""
    if { : >>"$lock" && exec {lockfd}<"$lock"; } 2>/dev/null; then
        flock -w 1200 "$lockfd" || true
        # Another install may have brought them while this one waited.
        mapfile -t missing < <(msgpass_missing "${wanted[@]}")
        if ((${#missing[@]} == 0)); then
            exec {lockfd}<&-
            return 0
        fi
    fi
    local status=0
    msgpass_install_missing "${missing[@]}" || status=$?
    [[ -z "$lockfd" ]] || exec {lockfd}<&-
    return "$status"
}

# msgpass_install_missing PACKAGE...: apt-get install, refreshing the index once when
# that fails.
msgpass_install_missing() {
    local -a missing=("$@")

    local -a sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "deps: missing packages (${missing[*]}) and not root, no sudo: install them first" >&2
            return 1
        fi
    fi

    echo "deps: installing ${missing[*]}"
    local log
    log=$(mktemp)
    local -a install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}")
    if ! "${install[@]}" >"$log" 2>&1; then
        echo "deps: install failed, refreshing the package index and retrying"
        if ! "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q >"$log" 2>&1 || ! "${install[@]}" >"$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            echo "deps: could not install ${missing[*]}" >&2
            return 1
        fi
    fi
    rm -f "$log"
}

# Build parallelism for the scripts (MSGPASS_JOBS, default 2: the machines have 2 cores).
msgpass_jobs=${MSGPASS_JOBS:-2}

# msgpass_configure DIR [cmake arguments...]: configures the source tree into DIR with
# Ninja when it is installed. A build directory made with another generator cannot
# be reused, so it is started afresh.
msgpass_configure() {
    local dir=$1
    shift
    local generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    if [[ -f "$dir/CMakeCache.txt" ]]; then
        local cached
        cached=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$dir/CMakeCache.txt")
        [[ "$cached" == "${generator[1]:-Unix Makefiles}" ]] || rm -rf "$dir"
    fi
    cmake -S "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" -B "$dir" "${generator[@]}" "$@"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    msgpass_install_deps
fi
