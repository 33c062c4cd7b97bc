#!/usr/bin/env bash
# A real Prometheus server scrapes msgpass-top --serve while a DAQ partition runs, and
# a msgpass counter comes back through Prometheus's HTTP API, growing between two
# queries (the scrape is live, not one snapshot):
#   - the DAQ example (apps/examples/daq, over sci) runs under msgpass-run, with a
#     partition name of its own;
#   - msgpass-top --serve 0 --partition P serves its metrics on a free port;
#   - Debian's prometheus (installed here when missing) scrapes it every second, with
#     a configuration and a database in a temporary directory;
#   - /api/v1/query of sum(msgpass_messages_received_total{partition=P,name="evb"})
#     must give a value above 0, then a larger one.
# Everything started is stopped and the partition's leftovers removed, whatever the
# outcome. Exit 77 (ctest: skipped; a failure in CI) when prometheus is missing and
# cannot be installed (not root).
#   prometheus_test.sh MSGPASS_RUN MSGPASS_TOP MSGPASS_DAQ DAQ_FILES_DIR
set -euo pipefail
run=$1 top=$2 daq=$3 files=$4
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

if ! deps_log=$(msgpass_install_deps prometheus curl 2>&1); then
    echo "$deps_log" >&2
    echo "prometheus_test: Debian's prometheus and curl are needed and could not be installed (root?)" >&2
    exit 77
fi
prometheus=$(command -v prometheus || echo /usr/bin/prometheus)

name=prometheus_test
# shellcheck source=tests/support/script.sh
source "$repo/tests/support/script.sh"
partition=prom-$$
cleanup_more() {
    "$run" --config "$files/network.yaml" --nodes "$files/nodes.yaml" --set "partition=$partition" --cleanup \
        >/dev/null 2>&1 || true
}

# A partition that runs until it is stopped: far more events than the test waits for.
"$run" --config "$files/network.yaml" --nodes "$files/nodes.yaml" --set "partition=$partition" \
    -- "$daq" --events 100000000 --timeout 600 --progress 0 >"$work/partition.log" 2>&1 &
stop_plain_pids+=($!)

"$top" --serve 0 --partition "$partition" >"$work/top.log" 2>&1 &
stop_plain_pids+=($!)
served() { grep -q '^serving http://127.0.0.1:[0-9]*/metrics$' "$work/top.log"; }
within 30 served || fail "msgpass-top did not say where it serves"
top_port=$(sed -n 's|^serving http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$work/top.log")

# A free port for Prometheus's own web server (its API).
free_port prom_port || fail "no free port for prometheus"

cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: msgpass
    static_configs:
      - targets: ['127.0.0.1:$top_port']
EOF
"$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
stop_plain_pids+=($!)

query="sum(msgpass_messages_received_total{partition=\"$partition\",name=\"evb\"})"
# The value of the query's single sample, or nothing.
value() {
    curl -sf --max-time 2 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$query" |
        sed -n 's/.*"value":\[[0-9.e+]*,"\([0-9.e+]*\)"\].*/\1/p'
}
above() { # above LIMIT: the value is there and larger than LIMIT
    local v
    v=$(value)
    [[ -n $v ]] && awk -v v="$v" -v l="$1" 'BEGIN { exit !(v > l) }'
}
within 60 above 0 || fail "Prometheus never returned $query above 0 (last answer: '$(value)')"
first=$(value)
within 60 above "$first" || fail "$query stayed at $first: the scrapes are not live"
second=$(value)
echo "prometheus_test: Prometheus returned $query = $first, then $second"

# The target is up in Prometheus's own view too.
grep -q '"health":"up"' <<<"$(curl -sf --max-time 2 "http://127.0.0.1:$prom_port/api/v1/targets")" ||
    fail "Prometheus does not report the msgpass-top target up"
echo "prometheus_test: ok"
