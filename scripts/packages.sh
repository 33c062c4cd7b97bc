#!/usr/bin/env bash
# Debian packages of msgpass: configures a build for a distribution (shared libraries
# with their SONAME, prefix /usr, Release, no tests), builds it, makes the packages
# with `cpack -G DEB` (cmake/packaging.cmake: libmsgpass<SOVERSION>, libmsgpass-dev,
# msgpass-tools) and checks them with lintian, which must report no error. Prints the
# paths of the .deb files; install them with
#   sudo apt install ./build/packages/*.deb
#
# --check (root only; the ctest PackagesInstallBuildAnOutsideProgramAndRunTheDaqExample
# runs it): then installs the packages with dpkg -i, builds tests/install/outside
# against /usr with find_package(msgpass) (and runs it with the installed msgpass-run
# -n 2) and with pkg-config alone, builds
# tests/mpi/pingpong.c with the installed msgpass-mpicc, runs the DAQ example and the
# MPI ping-pong with the installed msgpass-run, and removes (purges) the packages again
# (also when a step failed). Packages of msgpass already installed are refused: the
# check would remove them.
#
# Usage: scripts/packages.sh [--check] [--build DIR]   (default DIR: build/packages)
# Exit: 0 done; 1 a step failed (the step is named); 2 bad usage; 77 --check without
# root (ctest: skipped; scripts/test.sh fails a skipped test when CI is set).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

check=0 build=$repo/build/packages
while (($#)); do
    case $1 in
    --check) check=1 ;;
    --build)
        build=${2:?--build needs a directory}
        shift
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "packages: unknown argument '$1' (see --help)" >&2
        exit 2
        ;;
    esac
    shift
done

if ((check)) && [[ $(id -u) -ne 0 ]]; then
    echo "packages: --check installs packages with dpkg and needs root" >&2
    exit 77
fi

step() { echo "packages: $*"; }
die() {
    echo "packages: $*" >&2
    exit 1
}

msgpass_install_deps
msgpass_install_deps dpkg-dev fakeroot lintian file

step "configuring $build (shared libraries, prefix /usr, Release, no tests)"
msgpass_configure "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_PREFIX=/usr \
    -DMSGPASS_BUILD_TESTS=OFF -DMSGPASS_BUILD_APPS=ON -DMSGPASS_SANITIZE= -DMSGPASS_DEBIAN_LAYOUT=ON >"$build.configure.log" 2>&1 ||
    die "configure failed, see $build.configure.log"
step "building"
# shellcheck disable=SC2154 # msgpass_jobs: set by deps.sh
cmake --build "$build" -j "$msgpass_jobs" >"$build.build.log" 2>&1 || die "build failed, see $build.build.log"
step "making the packages (cpack -G DEB)"
rm -f "$build"/*.deb
(cd "$build" && cpack -G DEB) >"$build.cpack.log" 2>&1 || die "cpack failed, see $build.cpack.log"
mapfile -t debs < <(find "$build" -maxdepth 1 -name '*.deb' | sort)
((${#debs[@]} == 3)) || die "cpack made ${#debs[@]} packages, expected 3: ${debs[*]}"

step "lintian (errors fail)"
lintian_out=$(lintian --tag-display-limit 0 "${debs[@]}" 2>&1 || true)
[[ -n "$lintian_out" ]] && echo "$lintian_out"
if grep -q '^E: ' <<<"$lintian_out"; then
    die "lintian reported errors"
fi
for deb in "${debs[@]}"; do
    echo "$deb"
done
((check)) || exit 0

# ----------------------------------------------------------------------- --check
names=()
for deb in "${debs[@]}"; do
    names+=("$(dpkg-deb -f "$deb" Package)")
done
for name in "${names[@]}"; do
    if [[ $(dpkg-query -W -f='${Status}' "$name" 2>/dev/null) == *"ok installed"* ]]; then
        die "$name is installed already; the check would remove it (dpkg -r $name first)"
    fi
done
work=$(mktemp -d)
cleanup() {
    dpkg -P "${names[@]}" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

step "dpkg -i ${names[*]}"
apt-get install -y -q --no-install-recommends "${debs[@]}" >"$work/install.log" 2>&1 ||
    dpkg -i "${debs[@]}" >>"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    die "the packages do not install"
}
for program in msgpass-run msgpass-bench msgpass-top msgpass-mpicc msgpass-daq; do
    [[ $(command -v "$program") == /usr/bin/$program ]] || die "$program is not installed in /usr/bin"
done
[[ -f /usr/share/man/man1/msgpass-run.1.gz || -f /usr/share/man/man1/msgpass-run.1 ]] ||
    die "the man page of msgpass-run is not installed"

step "an outside project with find_package(msgpass)"
expected="msgpass outside: fragments=2 size=32 nodes=2 technology=sci"
cmake -S "$repo/tests/install/outside" -B "$work/outside" -DCMAKE_BUILD_TYPE=Release >"$work/outside.log" 2>&1 &&
    cmake --build "$work/outside" >>"$work/outside.log" 2>&1 || {
    cat "$work/outside.log" >&2
    die "the outside project does not build against /usr with find_package"
}
[[ $("$work/outside/outside") == "$expected" ]] || die "the find_package build printed something else"
# ldd's output taken whole first: grep -q closing the pipe early would make ldd die of
# SIGPIPE, and pipefail would count that as a failure.
libs=$(ldd "$work/outside/outside")
grep -Eq "libmsgpass.so.* => (/usr)?/lib/" <<<"$libs" ||
    die "the find_package build does not use /usr's libmsgpass: $libs"

step "the outside program under the installed msgpass-run -n 2"
out=$(cd "$work" && msgpass-run -n 2 -- "$work/outside/outside" 2>&1) || die "msgpass-run -n 2 of the outside program failed: $out"
[[ $(grep -c "^\[rank-[01]\] $expected$" <<<"$out") -eq 2 ]] || die "msgpass-run -n 2 of the outside program printed: $out"

step "the same with pkg-config alone"
# shellcheck disable=SC2046 # the flags are words
c++ -std=c++20 "$repo/tests/install/outside/main.cpp" -o "$work/outside-pc" $(pkg-config --cflags --libs msgpass) ||
    die "the outside program does not build with pkg-config msgpass's flags"
[[ $("$work/outside-pc") == "$expected" ]] || die "the pkg-config build printed something else"

step "the DAQ example with the installed msgpass-run"
daq_out=$(cd "$work" && msgpass-run --config /usr/share/msgpass/examples/daq/network.yaml \
    --nodes /usr/share/msgpass/examples/daq/nodes.yaml --set partition=packages-$$ \
    -- msgpass-daq --events 2000 --timeout 20 --progress 0 2>&1) || {
    echo "$daq_out" >&2
    die "the DAQ example failed"
}
grep -Eq '^\[evb\] events built: 2000, rate: [0-9.]+ kHz, fragments lost: 0, corrupt: 0$' <<<"$daq_out" || {
    echo "$daq_out" >&2
    die "the DAQ example did not build its 2000 events"
}

step "an MPI program with the installed msgpass-mpicc and msgpass-run -n 2"
msgpass-mpicc "$repo/tests/mpi/pingpong.c" -o "$work/pingpong" || die "msgpass-mpicc failed"
mpi_out=$(cd "$work" && msgpass-run -n 2 -- "$work/pingpong" 2>&1) || {
    echo "$mpi_out" >&2
    die "the MPI ping-pong failed"
}
grep -q "pingpong: 2 ranks ok" <<<"$mpi_out" || die "the MPI ping-pong did not finish: $mpi_out"

step "dpkg -P ${names[*]}"
dpkg -P "${names[@]}" >"$work/remove.log" 2>&1 || {
    cat "$work/remove.log" >&2
    die "the packages do not remove"
}
[[ ! -e /usr/bin/msgpass-run ]] || die "msgpass-run is still there after dpkg -P"
step "installed, used and removed: ${names[*]}"
