// What msgpass-run will start, decided before anything starts: which nodes of the
// nodes file run on this host, the command and environment of each, and the
// shell-quoted form --dry-run prints. Kept apart from process control so that the
// decisions are plain functions of the configuration and the command line.
#pragma once

#include <msgpass/config.hpp>

#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace msgpass::run {

// A command line of msgpass-run that cannot be honoured (exit code 2).
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One process to start.
struct Launch {
    NodeId id = 0;
    std::string name;
    std::vector<std::string> argv;                                // program and arguments
    std::vector<std::pair<std::string, std::string>> msgpass_env; // MSGPASS_* variables given to it
};

// The names of the variables msgpass-run sets; inherited values of these are dropped.
const std::vector<std::string>& managed_variables();

// True when `host` names this machine: localhost, 127.0.0.1, ::1, or this host's
// name (`this_host`, from gethostname), also compared by the short name before the
// first dot, case-insensitively.
bool is_local_host(const std::string& host, const std::string& this_host);

// This machine's name from gethostname(), or "" when it cannot be read.
std::string this_host_name();

// Parses "1,2,5" (spaces allowed around ids). Throws UsageError when malformed.
std::set<NodeId> parse_only(const std::string& text);

struct PlanRequest {
    std::filesystem::path config_file; // absolute
    std::filesystem::path nodes_file;  // absolute
    std::vector<std::string> sets;     // --set values, in order
    std::optional<std::set<NodeId>> only;
    bool all_hosts = false;
    std::string this_host;
    // --launch-agent: the words of a command that starts a process on another host
    // ("ssh {host}", "ip netns exec ... sh -c"); empty: only this host's nodes start.
    std::vector<std::string> launch_agent;
    std::vector<std::string> program; // PROGRAM ARGS after --, may be empty
};

// A node of another host started through the launch agent: its words with {host}
// replaced by the node's host and {command} by the node's whole command line as one
// shell word (MSGPASS_* assignments, then the program and its arguments: what
// --dry-run prints); without {command} that line is the last word. Throws UsageError
// for an empty agent.
std::vector<std::string> agent_argv(const std::vector<std::string>& agent, const std::string& host,
                                    const std::string& command_line);

// The processes to start, in nodes-file order. Throws UsageError when an id of
// --only is not in the nodes file, when a node has neither its own command nor a
// PROGRAM, or when no node is left to start.
std::vector<Launch> make_plan(const config::Configuration& configuration, const PlanRequest& request);

// The child's whole environment: `inherited` (as environ) without the managed
// variables, then the launch's own.
std::vector<std::string> child_environment(const Launch& launch, char* const* inherited);

// A word as a POSIX shell reads it back unchanged: safe words as they are, others
// in single quotes.
std::string shell_quote(const std::string& word);

// "MSGPASS_NODE_ID=1 MSGPASS_NODE_NAME=ros-1 ... PROGRAM ARGS", shell-quoted.
std::string dry_run_line(const Launch& launch);

} // namespace msgpass::run
