# Test support for the shell tests (sourced, not run): a temporary directory whose
# logs a failure shows, processes stopped whatever the outcome, bounded waits and
# free ports. A script sets `name` (its name in messages) before sourcing it, then
# puts what it starts in `stop_pids` (process groups: started with setsid) or
# `stop_plain_pids`, and logs as $work/<what>.log.
# shellcheck shell=bash

work=$(mktemp -d)
stop_pids=()
stop_plain_pids=()
# cleanup_more: a function the script may define, run before the directory goes.
script_cleanup() {
    local pid
    for pid in "${stop_pids[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${stop_plain_pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${stop_pids[@]}" "${stop_plain_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if declare -F cleanup_more >/dev/null; then cleanup_more; fi
    rm -rf "$work"
}
trap script_cleanup EXIT

# fail MESSAGE: says it, shows the end of every log of $work, exits 1.
fail() {
    echo "${name:-test}: $*" >&2
    local log
    for log in "$work"/*.log; do
        [[ -f $log ]] || continue
        echo "--- $(basename "$log"):" >&2
        tail -n 20 "$log" >&2
    done
    exit 1
}

# within SECONDS COMMAND...: runs the command every 0.2 s until it succeeds (0) or
# the seconds passed (1). A bounded wait for an event another process causes.
within() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# free_port VAR: sets VAR to a TCP port nothing listens on now and not given before
# in this script (a variable, not an output: a $(...) subshell would forget it).
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        [[ " ${given_ports:-} " == *" $p "* ]] && continue
        if [[ -z $(ss -Hltn "sport = :$p" 2>/dev/null) ]]; then
            given_ports="${given_ports:-} $p"
            printf -v "$1" '%s' "$p"
            return 0
        fi
    done
    echo "${name:-test}: no free port found" >&2
    return 1
}
