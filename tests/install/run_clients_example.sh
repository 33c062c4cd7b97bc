#!/usr/bin/env bash
# Runs msgpass-comm-server with clients in no nodes file (BMI's peers found at run
# time, docs/communicator.md): the server is node 1 of a one-node nodes file over tcp
# (or udp) with max_clients, and three clients started with the network file alone
# and --lookup tcp://127.0.0.1:PORT (udp://...). Checks that every client got every
# answer right and that the server answered three clients under run-time ids. A port
# taken by another process makes the server fail at start: another port is tried.
# Usage: run_clients_example.sh PROGRAM [tcp|udp]
set -euo pipefail

program=$1
technology=${2:-tcp}
dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/network.yaml" <<YAML
partition: clients-$$-$RANDOM
technology: $technology
peer_timeout: 2s
$technology: {max_clients: 3}
groups:
  server: [1]
YAML

for attempt in 1 2 3 4 5; do
    port=$((20000 + (RANDOM % 12000)))
    printf 'nodes:\n  - {id: 1, name: server, host: 127.0.0.1, port: %d}\n' "$port" >"$dir/nodes.yaml"
    "$program" --config "$dir/network.yaml" --nodes "$dir/nodes.yaml" --node-id 1 --clients 3 --timeout 30 \
        >"$dir/server.out" 2>&1 &
    server=$!
    pids=("$server")
    clients=()
    for c in 1 2 3; do
        "$program" --config "$dir/network.yaml" --lookup "$technology://127.0.0.1:$port" --requests 20 --window 4 \
            --timeout 30 >"$dir/client$c.out" 2>&1 &
        clients+=($!)
        pids+=($!)
    done
    status=0
    wait "$server" || status=$?
    if ((status == 2)) && grep -Eq "cannot (listen|bind)" "$dir/server.out"; then
        for pid in "${clients[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
        continue # the port was taken: another one
    fi
    cat "$dir/server.out"
    failed=0
    for c in 1 2 3; do
        client_status=0
        wait "${clients[$((c - 1))]}" || client_status=$?
        cat "$dir/client$c.out"
        ((client_status == 0)) || failed=1
        grep -Eq "^client of $technology://127\\.0\\.0\\.1:[0-9]+: 20 answers of server 1 right\$" "$dir/client$c.out" || failed=1
    done
    ((status == 0)) || failed=1
    grep -Eq '^answered 60 requests of 3 clients it had not known \(nodes 2147483648, 2147483649, 2147483650\), 0 malformed$' \
        "$dir/server.out" || failed=1
    if ((failed)); then
        echo "run_clients_example: the server exited with $status, or a client or a line was wrong" >&2
        exit 1
    fi
    exit 0
done
echo "run_clients_example: no free port in 5 tries" >&2
exit 1
