// The command line of a msgpass program and its own node id. Options come from
// Boost.Program_options, with defaults from the environment that the launcher
// (msgpass-run) sets for each process: MSGPASS_CONFIG, MSGPASS_NODES, MSGPASS_SET and
// MSGPASS_NODE_ID. Options msgpass does not know are handed back to the application
// untouched and in order. The node id falls back to the rank of mpirun/srun so that
// cluster launchers can start a partition too.
#include <msgpass/config.hpp>

#include <boost/program_options.hpp>

#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

namespace msgpass::config {

namespace {

constexpr std::uint64_t max_node_id = 2147483647;

std::optional<std::string> environment(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt; // set but empty counts as unset
    return std::string(value);
}

// A plain decimal number without sign or spaces, or nullopt.
std::optional<std::uint64_t> parse_decimal(const std::string& text) {
    if (text.empty() || text.size() > 19) return std::nullopt;
    std::uint64_t value = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return value;
}

std::string shown(const std::string& text) {
    return "'" + (text.size() > 60 ? text.substr(0, 60) + "..." : text) + "'";
}

[[noreturn]] void fail(const std::string& source, const std::string& key, const std::string& expected,
                       const std::string& found) {
    throw ConfigError(source + ":0:0: " + key + ": expected " + expected + ", found " + found);
}

std::string known_ids(const Configuration& configuration) {
    std::string out;
    std::size_t count = 0;
    for (const auto& n : configuration.nodes) {
        if (count++ == 20) return out + ", ...";
        out += (out.empty() ? "" : ", ") + std::to_string(n.id);
    }
    return out.empty() ? "none" : out;
}

NodeId checked_id(const Configuration& configuration, const std::string& source, const std::string& text) {
    const auto id = parse_decimal(text);
    const std::string expected =
        "a node id of " + configuration.nodes_file.string() + " (" + known_ids(configuration) + ")";
    if (!id || *id == 0 || *id > max_node_id || configuration.find_node(static_cast<NodeId>(*id)) == nullptr) {
        fail(source, source, expected, shown(text));
    }
    return static_cast<NodeId>(*id);
}

} // namespace

NodeId resolve_self_id(const Configuration& configuration, std::optional<NodeId> from_cli) {
    if (from_cli) return checked_id(configuration, "--node-id", std::to_string(*from_cli));
    if (auto text = environment("MSGPASS_NODE_ID")) return checked_id(configuration, "MSGPASS_NODE_ID", *text);
    for (const char* rank_variable : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        auto text = environment(rank_variable);
        if (!text) continue;
        const auto rank = parse_decimal(*text);
        if (!rank || *rank >= configuration.nodes.size()) {
            fail(rank_variable, rank_variable,
                 configuration.nodes.empty() ? std::string("a rank, but the nodes file lists no nodes")
                                             : "a rank from 0 to " + std::to_string(configuration.nodes.size() - 1) +
                                                   " (an index into " + configuration.nodes_file.string() + ")",
                 shown(*text));
        }
        return configuration.nodes[*rank].id;
    }
    fail("environment", "node id",
         "--node-id, MSGPASS_NODE_ID or a launcher rank (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)", "nothing");
}

Options parse_command_line(int argc, const char* const* argv) {
    namespace po = boost::program_options;
    const std::string program = (argc > 0 && argv != nullptr && argv[0] != nullptr) ? argv[0] : "msgpass";
    po::options_description description("msgpass options");
    // clang-format off
    description.add_options()
        ("config", po::value<std::string>(), "network file (default: $MSGPASS_CONFIG, else network.yaml)")
        ("nodes", po::value<std::string>(), "nodes file (default: $MSGPASS_NODES, else nodes.yaml)")
        ("node-id", po::value<std::string>(), "own node id (default: $MSGPASS_NODE_ID, else the launcher rank)")
        ("set", po::value<std::vector<std::string>>()->composing(),
         "override a network-file key, e.g. sci.recv_buffer_no=255 (repeatable; $MSGPASS_SET first)")
        ("help", "print this help and exit");
    // clang-format on

    std::vector<std::string> arguments;
    for (int i = 1; argv != nullptr && i < argc; ++i)
        if (argv[i] != nullptr) arguments.emplace_back(argv[i]);

    po::variables_map values;
    Options options;
    try {
        // No guessing of abbreviations: "--no" or "--he" may belong to the application.
        const auto style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
        auto parsed = po::command_line_parser(arguments).options(description).style(style).allow_unregistered().run();
        options.rest = po::collect_unrecognized(parsed.options, po::include_positional);
        po::store(parsed, values);
        po::notify(values);
    } catch (const po::error& e) {
        fail("command line", "options", "valid msgpass options", shown(e.what()));
    }

    if (values.count("help") != 0) {
        std::cout << "Usage: " << program << " [msgpass options] [application arguments]\n" << description;
        std::cout.flush();
        std::exit(0);
    }

    const std::string network = values.count("config") != 0 ? values["config"].as<std::string>()
                                                            : environment("MSGPASS_CONFIG").value_or("network.yaml");
    const std::string nodes = values.count("nodes") != 0 ? values["nodes"].as<std::string>()
                                                         : environment("MSGPASS_NODES").value_or("nodes.yaml");
    std::vector<std::string> overrides;
    if (auto text = environment("MSGPASS_SET")) {
        std::istringstream lines(*text);
        for (std::string line; std::getline(lines, line);) {
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (line.find_first_not_of(" \t") != std::string::npos) overrides.push_back(line);
        }
    }
    if (values.count("set") != 0) {
        for (const auto& s : values["set"].as<std::vector<std::string>>())
            overrides.push_back(s);
    }

    std::optional<NodeId> cli_id;
    if (values.count("node-id") != 0) {
        const auto text = values["node-id"].as<std::string>();
        const auto id = parse_decimal(text);
        if (!id || *id == 0 || *id > max_node_id) {
            fail("--node-id", "--node-id", "a node id from 1 to " + std::to_string(max_node_id), shown(text));
        }
        cli_id = static_cast<NodeId>(*id);
    }

    options.configuration = load(network, nodes, overrides);
    const bool any_source = cli_id || environment("MSGPASS_NODE_ID") || environment("OMPI_COMM_WORLD_RANK") ||
                            environment("PMI_RANK") || environment("SLURM_PROCID");
    if (any_source) options.self = resolve_self_id(options.configuration, cli_id);
    return options;
}

} // namespace msgpass::config
