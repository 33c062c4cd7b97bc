#!/usr/bin/env bash
# Partitions started by a real batch system or MPI launcher instead of msgpass-run:
# each process takes its rank (SLURM_PROCID, OMPI_COMM_WORLD_RANK) as an index into the
# nodes file (docs/launcher.md, "Batch systems").
#   batch_test.sh slurm   TOKEN_RING DAQ EXAMPLES_DIR
#     starts Slurm on this host (Debian's slurmctld and slurmd, installed when missing,
#     with a generated slurm.conf: AuthType=auth/none, this host as the only node with
#     8 CPUs, free ports, state and logs in a temporary directory), then
#     - srun -n 3: the token ring over sci and over tcp;
#     - srun -n 7: the DAQ example over sci and over tcp (a nodes file with free ports);
#     - sbatch --wait of the script docs/launcher.md shows, running the DAQ example;
#     and stops the daemons.
#   batch_test.sh mpirun  TOKEN_RING DAQ EXAMPLES_DIR
#     the same partitions with Open MPI's mpirun (Debian's openmpi-bin) instead of srun.
# Each run uses a partition name of its own, and its shared-memory leftovers are
# removed. Exit 77 (ctest: skipped; a failure in CI) when the batch system is missing
# and cannot be installed (not root).
set -euo pipefail
mode=$1 ring=$2 daq=$3 examples=$4
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/deps.sh
source "$repo/scripts/deps.sh"

case $mode in
slurm) packages=(slurmctld slurmd slurm-client) ;;
mpirun) packages=(openmpi-bin) ;;
*)
    echo "batch_test: mode is slurm or mpirun, not '$mode'" >&2
    exit 2
    ;;
esac
if ! deps_log=$(msgpass_install_deps "${packages[@]}" 2>&1); then
    echo "$deps_log" >&2
    echo "batch_test: Debian's ${packages[*]} are needed and could not be installed (root?)" >&2
    exit 77
fi
if [[ $mode == slurm && $(id -u) -ne 0 ]]; then
    echo "batch_test: slurmd runs jobs as their user and must be started as root" >&2
    exit 77
fi

name=batch_test
# shellcheck source=tests/support/script.sh
source "$repo/tests/support/script.sh"
partitions=()
cleanup_more() {
    local p
    for p in "${partitions[@]}"; do
        rm -f /dev/shm/msgpass."$(id -un)"."$p".* 2>/dev/null || true
    done
}

# The DAQ example's nodes with a free port each, for tcp (the files of
# apps/examples/daq have no ports: msgpass-run gives them, a batch system does not).
sed -n '/^nodes:/,$p' "$examples/daq/nodes.yaml" | grep -v '^#' >"$work/daq-nodes.src"
{
    echo "nodes:"
    while IFS= read -r line; do
        [[ $line == *"id:"* ]] || continue
        free_port port
        echo "${line%\}}, port: $port}"
    done <"$work/daq-nodes.src"
} >"$work/daq-nodes-tcp.yaml"

# launch N PROGRAM ARGS...: the batch system's way of starting N processes (at most 120 s).
launch() {
    local n=$1
    shift
    if [[ $mode == slurm ]]; then
        SLURM_CONF=$work/slurm.conf timeout 120 srun -n "$n" --kill-on-bad-exit=1 "$@"
    else
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe -n "$n" "$@"
    fi
}

if [[ $mode == slurm ]]; then
    host=$(hostname -s)
    free_port ctld_port
    free_port slurmd_port
    mkdir -p "$work/state" "$work/spool"
    cat >"$work/slurm.conf" <<EOF
ClusterName=msgpasstest
SlurmctldHost=$host
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
ProctrackType=proctrack/pgid
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=msgpass Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
    slurmctld -D -f "$work/slurm.conf" >"$work/slurmctld.out.log" 2>&1 &
    stop_plain_pids+=($!)
    slurmd -D -f "$work/slurm.conf" >"$work/slurmd.out.log" 2>&1 &
    stop_plain_pids+=($!)
    idle() { SLURM_CONF=$work/slurm.conf sinfo -h -o %t 2>/dev/null | grep -qx idle; }
    within 60 idle || fail "the Slurm node did not become idle"
fi

# run WHAT EXPECTED_REGEX N PROGRAM ARGS...: launches, checks exit code and output.
run() {
    local what=$1 expected=$2 n=$3
    shift 3
    local out
    if ! out=$(cd "$work" && launch "$n" "$@" 2>&1); then
        echo "$out" >&2
        fail "$what: the partition failed"
    fi
    grep -Eq "$expected" <<<"$out" || {
        echo "$out" >&2
        fail "$what: no line matching '$expected'"
    }
    echo "batch_test: $mode: $what: ok"
}

ring_expected='^token arrived back on 1 after 3 nodes: 333$'
daq_expected='^events built: 2000, rate: [0-9.]+ kHz, fragments lost: 0, corrupt: 0$'
for technology in sci tcp; do
    p=batch-$mode-ring-$technology-$$
    partitions+=("$p")
    run "token ring over $technology (3 processes)" "$ring_expected" 3 "$ring" --config "$examples/ring/network.yaml" \
        --nodes "$examples/ring/nodes.yaml" --set "partition=$p" --set "technology=$technology"
    p=batch-$mode-daq-$technology-$$
    partitions+=("$p")
    nodes=$examples/daq/nodes.yaml
    [[ $technology == tcp ]] && nodes=$work/daq-nodes-tcp.yaml
    run "DAQ example over $technology (7 processes)" "$daq_expected" 7 "$daq" --config "$examples/daq/network.yaml" \
        --nodes "$nodes" --set "partition=$p" --set "technology=$technology" --events 2000 --timeout 30 --progress 0
done

if [[ $mode == slurm ]]; then
    # The batch script of docs/launcher.md, "Batch systems", for the DAQ example.
    p=batch-sbatch-$$
    partitions+=("$p")
    cat >"$work/daq.sbatch" <<EOF
#!/bin/sh
#SBATCH --ntasks=7
#SBATCH --output=$work/sbatch.out
srun $daq --config $examples/daq/network.yaml --nodes $examples/daq/nodes.yaml --set partition=$p \\
    --events 2000 --timeout 30 --progress 0
EOF
    SLURM_CONF=$work/slurm.conf timeout 120 sbatch --wait "$work/daq.sbatch" >"$work/sbatch.log" 2>&1 ||
        fail "sbatch --wait of the DAQ script failed: $(cat "$work/sbatch.out" 2>/dev/null)"
    grep -Eq "$daq_expected" "$work/sbatch.out" || fail "the sbatch job did not build its events: $(cat "$work/sbatch.out")"
    echo "batch_test: slurm: sbatch --wait of the DAQ script: ok"
fi
echo "batch_test: $mode: ok"
