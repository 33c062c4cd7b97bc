#!/usr/bin/env bash
# msgpass-top across hosts: two "hosts" made of mount namespaces with a /dev/shm each
# (so neither sees the other's statistics pages, nor does this shell), sharing the
# network. On each, one node of a two-node tcp partition (top_node: it sends one
# message to the other and publishes its page) and msgpass-top --serve 0. Then, from
# here, where no page of the partition exists:
#   - msgpass-top --once --json --partition P exits 2 (nothing on this host);
#   - with --remote A --remote B it shows both nodes, running over tcp, each with
#     its one message of 100 bytes counted;
#   - a remote that does not answer is named on stderr and the others still show.
# Needs root (unshare --mount): exit 77 without (ctest: skipped; a failure in CI).
#   remote_test.sh MSGPASS_TOP TOP_NODE
set -euo pipefail
top=$1 node=$2
if [[ $(id -u) -ne 0 ]] || ! command -v unshare >/dev/null; then
    echo "remote_test: needs root and unshare to give each 'host' its own /dev/shm" >&2
    exit 77
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=remote_test
# shellcheck source=tests/support/script.sh
source "$repo/tests/support/script.sh"
partition=remote-$$
free_port port1
free_port port2

# host ID: node ID of the partition and a msgpass-top --serve, in a mount namespace
# with a /dev/shm of its own; the process group's leader is remembered for cleanup.
host() {
    local id=$1
    setsid unshare --mount --propagation private sh -c \
        "mount -t tmpfs tmpfs /dev/shm && { '$node' '$partition' $id 2 tcp $port1 $port2 >'$work/node$id.log' 2>&1 & } &&
         exec '$top' --serve 0 --partition '$partition'" >"$work/serve$id.log" 2>&1 &
    stop_pids+=($!)
}
host 1
host 2
serving() { grep -q '^serving http://127.0.0.1:[0-9]*/metrics$' "$work/serve$1.log"; }
ready() { grep -q '^ready ' "$work/node$1.log"; }
for id in 1 2; do
    within 30 serving "$id" || fail "msgpass-top --serve of host $id did not start"
    within 60 ready "$id" || fail "node $id did not publish its page"
done
remote1=127.0.0.1:$(sed -n 's|^serving http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$work/serve1.log")
remote2=127.0.0.1:$(sed -n 's|^serving http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$work/serve2.log")

status=0
"$top" --once --json --partition "$partition" --interval 100 >"$work/local.log" 2>&1 || status=$?
((status == 2)) || fail "without --remote msgpass-top exited $status, not 2: this host has no page of $partition"

"$top" --once --json --partition "$partition" --interval 100 --remote "$remote1" --remote "$remote2" \
    >"$work/both.log" 2>"$work/both.err.log" || fail "msgpass-top with two remotes failed"
for id in 1 2; do
    line=$(grep "\"id\":$id," "$work/both.log") || fail "node $id is not in the view of both remotes"
    for field in '"state":"running"' '"technology":"tcp"' '"messages_out":1,' '"bytes_out":100,'; do
        [[ $line == *"$field"* ]] || fail "node $id: no $field in $line"
    done
done
[[ $(wc -l <"$work/both.log") -eq 2 ]] || fail "not exactly two nodes in the view"

"$top" --once --json --partition "$partition" --interval 100 --remote "$remote1" --remote 127.0.0.1:1 \
    >"$work/one.log" 2>"$work/one.err.log" || fail "msgpass-top with a dead remote failed"
grep -q '127.0.0.1:1: cannot connect' "$work/one.err.log" || fail "the remote that does not answer is not named"
grep -q '"id":1,' "$work/one.log" || fail "node 1 is missing when the other remote does not answer"
echo "remote_test: ok"
