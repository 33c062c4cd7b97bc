// Decisions of msgpass-run that need no process: host matching, --only, the command
// and environment of each node, and shell quoting for --dry-run.
#include "plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstring>

namespace msgpass::run {

namespace {

std::string lower(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return text;
}

// An IPv4 or IPv6 literal: its part before the first dot is not a host's short name.
bool is_address_literal(const std::string& host) {
    if (host.find(':') != std::string::npos) return true;
    return !host.empty() &&
           std::all_of(host.begin(), host.end(), [](unsigned char c) { return std::isdigit(c) || c == '.'; });
}

std::string short_name(const std::string& host) {
    return host.substr(0, host.find('.'));
}

std::string trim(const std::string& text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos) return {};
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

std::string join_sets(const std::vector<std::string>& sets) {
    std::string joined;
    for (const auto& set : sets) {
        if (!joined.empty()) joined += '\n';
        joined += set;
    }
    return joined;
}

} // namespace

const std::vector<std::string>& managed_variables() {
    static const std::vector<std::string> names{"MSGPASS_NODE_ID", "MSGPASS_NODE_NAME", "MSGPASS_PARTITION",
                                                "MSGPASS_CONFIG",  "MSGPASS_NODES",     "MSGPASS_SET"};
    return names;
}

bool is_local_host(const std::string& host_in, const std::string& this_host_in) {
    const std::string host = lower(host_in);
    const std::string this_host = lower(this_host_in);
    if (host == "localhost" || host == "127.0.0.1" || host == "::1") return true;
    if (host.empty() || this_host.empty()) return false;
    if (host == this_host) return true;
    if (is_address_literal(host) || is_address_literal(this_host)) return false;
    return short_name(host) == short_name(this_host);
}

std::string this_host_name() {
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return {};
    return name;
}

std::set<NodeId> parse_only(const std::string& text) {
    std::set<NodeId> ids;
    std::size_t start = 0;
    while (true) {
        const auto comma = text.find(',', start);
        const std::string item =
            trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        NodeId id = 0;
        const auto* end = item.data() + item.size();
        const auto [ptr, ec] = std::from_chars(item.data(), end, id);
        if (item.empty() || ec != std::errc{} || ptr != end)
            throw UsageError("--only: expected a comma-separated list of node ids, found '" + text + "'");
        ids.insert(id);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return ids;
}

std::vector<Launch> make_plan(const config::Configuration& configuration, const PlanRequest& request) {
    if (request.only) {
        for (const NodeId id : *request.only) {
            if (configuration.find_node(id) == nullptr)
                throw UsageError("--only: node " + std::to_string(id) + " is not in " + request.nodes_file.string());
        }
    }
    std::vector<Launch> plan;
    for (const auto& node : configuration.nodes) {
        if (request.only && request.only->count(node.id) == 0) continue;
        const bool here = request.all_hosts || is_local_host(node.host, request.this_host);
        if (!here && request.launch_agent.empty()) continue;
        Launch launch;
        launch.id = node.id;
        launch.name = node.name.empty() ? "node-" + std::to_string(node.id) : node.name;
        launch.argv = node.command.empty() ? request.program : node.command;
        if (launch.argv.empty())
            throw UsageError("node " + std::to_string(node.id) + " (" + launch.name +
                             ") has no command in the nodes file and no PROGRAM was given after --");
        launch.msgpass_env = {{"MSGPASS_NODE_ID", std::to_string(node.id)},
                              {"MSGPASS_NODE_NAME", launch.name},
                              {"MSGPASS_PARTITION", configuration.partition},
                              {"MSGPASS_CONFIG", request.config_file.string()},
                              {"MSGPASS_NODES", request.nodes_file.string()}};
        // Unset rather than empty when there is nothing to pass, so that an inherited
        // value cannot leak in.
        if (!request.sets.empty()) launch.msgpass_env.emplace_back("MSGPASS_SET", join_sets(request.sets));
        // Another host's node: the agent runs there what would run here (the files'
        // paths must be the same there: a shared file system, as for a batch system).
        if (!here) launch.argv = agent_argv(request.launch_agent, node.host, dry_run_line(launch));
        plan.push_back(std::move(launch));
    }
    if (plan.empty()) {
        throw UsageError("no node of " + request.nodes_file.string() + " runs on this host ('" + request.this_host +
                         "')" + (request.only ? " among the ids of --only" : "") +
                         (request.all_hosts ? "" : "; --all-hosts starts them regardless of host"));
    }
    return plan;
}

std::vector<std::string> agent_argv(const std::vector<std::string>& agent, const std::string& host,
                                    const std::string& command_line) {
    if (agent.empty()) throw UsageError("--launch-agent: the command is empty");
    std::vector<std::string> argv;
    bool placed = false;
    for (const auto& word : agent) {
        if (word == "{command}") {
            argv.push_back(command_line);
            placed = true;
            continue;
        }
        std::string out;
        for (std::size_t i = 0; i < word.size();) {
            if (word.compare(i, 6, "{host}") == 0) {
                out += host;
                i += 6;
            } else {
                out += word[i++];
            }
        }
        argv.push_back(std::move(out));
    }
    if (!placed) argv.push_back(command_line);
    return argv;
}

std::vector<std::string> child_environment(const Launch& launch, char* const* inherited) {
    std::vector<std::string> env;
    for (char* const* entry = inherited; entry != nullptr && *entry != nullptr; ++entry) {
        const std::string text = *entry;
        const std::string name = text.substr(0, text.find('='));
        const auto& managed = managed_variables();
        if (std::find(managed.begin(), managed.end(), name) == managed.end()) env.push_back(text);
    }
    for (const auto& [name, value] : launch.msgpass_env)
        env.push_back(name + "=" + value);
    return env;
}

std::string shell_quote(const std::string& word) {
    const bool safe = !word.empty() && std::all_of(word.begin(), word.end(), [](unsigned char c) {
        return std::isalnum(c) || (c != 0 && std::strchr("@%+=:,./-_", c) != nullptr);
    });
    if (safe) return word;
    std::string quoted = "'";
    for (const char c : word) {
        if (c == '\'')
            quoted += "'\\''";
        else
            quoted += c;
    }
    return quoted + "'";
}

std::string dry_run_line(const Launch& launch) {
    std::string line;
    for (const auto& [name, value] : launch.msgpass_env)
        line += name + "=" + shell_quote(value) + " ";
    for (std::size_t i = 0; i < launch.argv.size(); ++i) {
        if (i > 0) line += ' ';
        line += shell_quote(launch.argv[i]);
    }
    return line;
}

} // namespace msgpass::run
