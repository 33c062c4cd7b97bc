# Hosts on one machine for the scripts that run a partition across hosts
# (scripts/daq-hosts.sh, scripts/partition-hosts.sh): network namespaces joined by a
# bridge in a namespace of its own, each with a veth link (MTU 1500) and an address
# on one /24, as machines on one switch. Sourced, not run.
#
#   hosts_init TOOL TAG NET   names the run: namespaces TAG<pid>-hub, TAG<pid>-1, ...,
#                             host H at NET.H (NET: three octets, e.g. 10.78.0);
#                             TOOL leads the messages
#   hosts_require             root and the ip tool, or hosts_unavailable
#   hosts_reap_stale          removes the namespaces of runs of TAG that were killed
#   hosts_make N              hosts 1..N on one bridge
#   hosts_remove              removes what hosts_make made (the caller's EXIT trap)
#   host_ns H, host_addr H    host H's namespace and address
#   hosts_write_agent FILE    a launch agent for msgpass-run --launch-agent
#                             'FILE {host} {command}': runs the command in the
#                             namespace of the host whose address is given
#   hosts_unavailable WHY     exit 77 (ctest: skipped), or 1 when CI is set

hosts_init() {
    hosts_tool=$1
    hosts_tag=$2
    hosts_net=$3
    hosts_prefix="$hosts_tag$$"
    hosts_made=()
}

# What the machine must allow; in CI a missing piece is an error, not a skip.
hosts_unavailable() {
    local why=$1
    if [[ -n ${CI:-} && ${CI} != 0 && ${CI} != false ]]; then
        echo "$hosts_tool: required in CI (CI is set): $why" >&2
        exit 1
    fi
    echo "$hosts_tool: skipped: $why" >&2
    exit 77
}

hosts_require() {
    [[ $(id -u) -eq 0 ]] || hosts_unavailable "network namespaces need root; this runs as uid $(id -u)"
    command -v ip >/dev/null 2>&1 || hosts_unavailable "no ip tool (package iproute2)"
}

host_ns() { echo "$hosts_prefix-$1"; }
host_addr() { echo "$hosts_net.$1"; }

# Namespaces left by a run that was killed (TAG<pid>-..., the pid gone).
hosts_reap_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$hosts_tag[0-9]+-" || true); do
        pid=${ns#"$hosts_tag"}
        pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
    done
}

hosts_make() {
    local count=$1 hub="$hosts_prefix-hub" h ns
    ip netns add "$hub" || hosts_unavailable "ip netns add failed (no network namespaces here)"
    hosts_made+=("$hub")
    ip -n "$hub" link add br0 type bridge
    ip -n "$hub" link set br0 up
    for ((h = 1; h <= count; h++)); do
        ns=$(host_ns "$h")
        ip netns add "$ns"
        hosts_made+=("$ns")
        ip -n "$hub" link add "p$h" type veth peer name eth0 netns "$ns"
        ip -n "$hub" link set "p$h" master br0
        ip -n "$hub" link set "p$h" up
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 mtu 1500
        ip -n "$ns" addr add "$(host_addr "$h")/24" dev eth0
        ip -n "$ns" link set eth0 up
    done
}

hosts_remove() {
    local i
    for ((i = ${#hosts_made[@]} - 1; i >= 0; i--)); do
        ip netns del "${hosts_made[i]}" 2>/dev/null || true
    done
    hosts_made=()
}

hosts_write_agent() {
    printf '#!/bin/sh\nexec ip netns exec "%s-${1##*.}" sh -c "$2"\n' "$hosts_prefix" >"$1"
    chmod +x "$1"
}
