#!/usr/bin/env bash
# msgpass-daq --record DIR through the launcher: every node writes its summary
# (DIR/<node>.json, "ok": true), its event rate and queue depth over time
# (DIR/<node>.dat, samples every 5 ms) and their plot (DIR/<node>.png, by gnuplot).
#   record_test.sh DIR RUN_EXAMPLE MSGPASS_RUN DAQ_FILES MSGPASS_DAQ
set -euo pipefail
dir=$1 run_example=$2 launcher=$3 files=$4 daq=$5
rm -rf "$dir"
"$run_example" "$launcher" "$files" \
    '^\[evb\] events built: 100000, rate: [0-9.]+ kHz, fragments lost: 0, corrupt: 0$' \
    -- "$daq" --events 100000 --progress 0 --record "$dir" --record-interval 0.005
for node in ros-1 ros-2 ros-3 ros-4 evb farm-1 farm-2; do
    grep -q '"ok": true' "$dir/$node.json" || { echo "record_test: $node: no summary saying ok in $dir" >&2; exit 1; }
    samples=$(grep -Ec '^[0-9.e+-]+ [0-9.e+-]+ [0-9]+$' "$dir/$node.dat" || true)
    ((samples > 0)) || { echo "record_test: $node: no sample in $dir/$node.dat" >&2; exit 1; }
    [[ $(head -c 4 "$dir/$node.png" | tail -c 3) == PNG ]] || { echo "record_test: $node: no PNG plot" >&2; exit 1; }
    echo "record_test: $node: summary, $samples samples, plot"
done
rm -rf "$dir"
