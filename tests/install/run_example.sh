#!/usr/bin/env bash
# Runs an example program on every node of its configuration through the launcher,
# as a user would, in a partition of its own (so parallel runs never share memory
# segments), and checks the exit status and one line of the output. Removes the
# partition's leftover segments whatever the outcome.
# Usage: run_example.sh MSGPASS_RUN CONFIG_DIR EXPECTED_REGEX [LAUNCHER_OPTIONS...] -- PROGRAM [ARGS...]
# (LAUNCHER_OPTIONS, e.g. --technology tcp, go to msgpass-run.)
set -euo pipefail

launcher=$1 config_dir=$2 expected=$3
shift 3
options=()
while (($#)) && [[ $1 != -- ]]; do
    options+=("$1")
    shift
done
[[ ${1:-} == -- ]] && shift

partition="test-$(basename "$1")-$$-$RANDOM"
files=(--config "$config_dir/network.yaml" --nodes "$config_dir/nodes.yaml" --set "partition=$partition")
output=$(mktemp)
trap '"$launcher" "${files[@]}" --cleanup >/dev/null 2>&1 || true; rm -f "$output"' EXIT

status=0
"$launcher" "${files[@]}" "${options[@]}" -- "$@" >"$output" 2>&1 || status=$?
cat "$output"
if ((status != 0)); then
    echo "run_example: msgpass-run exited with $status" >&2
    exit 1
fi
if ! grep -Eq -- "$expected" "$output"; then
    echo "run_example: no line matches: $expected" >&2
    exit 1
fi
