// Loading of the network and nodes files (seed section 10) and the lookups of a
// Configuration. The generic reader (reader.cpp) checks each value and collects every
// problem; the network schema (network.cpp) and the nodes schema (nodes.cpp) say
// which keys exist and what they hold. Network-file values and --set overrides are
// first gathered into one layered table (file first, overrides on top) and only then
// validated, so an override replaces a file value before it is judged and its errors
// carry the location "--set:0:0".
#include <msgpass/config.hpp>

#include "schemas.hpp"

namespace msgpass::config {

const NodeConfig* Configuration::find_node(NodeId id) const noexcept {
    for (const auto& n : nodes)
        if (n.id == id) return &n;
    return nullptr;
}

const NodeConfig& Configuration::node(NodeId id) const {
    if (const auto* n = find_node(id)) return *n;
    std::string known;
    for (const auto& n : nodes)
        known += (known.empty() ? "" : ", ") + std::to_string(n.id);
    throw ConfigError(nodes_file.string() + ": node id " + std::to_string(id) +
                      " is not in the nodes file (ids: " + (known.empty() ? "none" : known) + ")");
}

std::size_t Configuration::node_index(NodeId id) const {
    return static_cast<std::size_t>(&node(id) - nodes.data());
}

const std::vector<NodeId>& Configuration::group(const std::string& name) const {
    if (auto it = groups.find(name); it != groups.end()) return it->second;
    std::string known;
    for (const auto& [n, ids] : groups)
        known += (known.empty() ? "" : ", ") + n;
    throw ConfigError(network_file.string() + ": groups: no group named '" + name +
                      "' (known: " + (known.empty() ? "none" : known) + ")");
}

const Machine* Configuration::find_machine(const std::string& name) const noexcept {
    for (const auto& m : machines)
        if (m.name == name) return &m;
    return nullptr;
}

namespace {
bool local_host(const std::string& h) noexcept {
    return h == "localhost" || h.rfind("127.", 0) == 0 || h == "::1";
}
} // namespace

bool same_machine(const NodeConfig& a, const NodeConfig& b) noexcept {
    if (!a.machine.empty() || !b.machine.empty()) return a.machine == b.machine;
    return a.host == b.host || (local_host(a.host) && local_host(b.host));
}

// A named machine, a host, or "this host" for every loopback name: the prefixes keep
// a machine named like a host apart from that host, as same_machine does.
std::string machine_key(const NodeConfig& node) {
    if (!node.machine.empty()) return "machine:" + node.machine;
    return local_host(node.host) ? std::string("loopback") : "host:" + node.host;
}

bool Configuration::sci_partners(const NodeConfig& a, const NodeConfig& b) const noexcept {
    return technology != "auto" || same_machine(a, b);
}

namespace {

using namespace detail;

Configuration load_documents(Problems& problems, const std::optional<std::string>& network_text,
                             const std::optional<std::string>& nodes_text, const std::vector<std::string>& overrides,
                             const Source& network_source, const Source& nodes_source) {
    Configuration c;
    c.network_file = network_source.name; // for the messages of the technologies' checks
    c.nodes_file = nodes_source.name;
    std::optional<YAML::Node> network_root;
    std::optional<YAML::Node> nodes_root;
    if (network_text) network_root = parse_yaml(problems, *network_text, network_source);
    if (nodes_text) nodes_root = parse_yaml(problems, *nodes_text, nodes_source);

    const Schemas schemas(SchemaRegistry::instance().schemas());
    NetworkLayers layers;
    if (network_root)
        collect_network(problems, schemas, Item{*network_root, YAML::Mark::null_mark(), &network_source, ""}, layers);
    std::vector<Source> override_sources;
    override_sources.reserve(overrides.size());
    for (std::size_t i = 0; i < overrides.size(); ++i)
        override_sources.push_back(Source{"--set", 2, true});
    for (std::size_t i = 0; i < overrides.size(); ++i)
        collect_override(problems, schemas, overrides[i], override_sources[i], layers);
    resolve_network(problems, schemas, layers, c);

    if (nodes_root)
        collect_nodes_file(problems, schemas, Item{*nodes_root, YAML::Mark::null_mark(), &nodes_source, ""}, c);
    resolve_groups(problems, layers, nodes_source.name, c, nodes_root.has_value());

    for (const auto* source : {&network_source, &nodes_source})
        problems.know(*source);
    if (!override_sources.empty()) problems.know(override_sources.front());
    for (const auto& schema : schemas.list())
        if (schema->resolve) schema->resolve(c);
    for (const auto& schema : schemas.list())
        if (schema->check) schema->check(c, Reporter(problems));
    return c;
}

Configuration load_guarded(const std::optional<std::string>& network_text, const std::optional<std::string>& nodes_text,
                           const std::vector<std::string>& overrides, Problems& problems, const Source& network_source,
                           const Source& nodes_source) {
    Configuration c;
    try {
        c = load_documents(problems, network_text, nodes_text, overrides, network_source, nodes_source);
    } catch (const YAML::Exception& e) {
        // Every access above is type-checked; this is the last line of defence.
        problems.add(network_source, e.mark, "yaml", "a YAML document the loader can read", quote(e.msg));
    }
    if (!problems.empty()) problems.raise();
    return c;
}

} // namespace

Configuration load(const std::filesystem::path& network_file, const std::filesystem::path& nodes_file,
                   const std::vector<std::string>& overrides) {
    Problems problems;
    const Source network_source{network_file.string(), 0, false};
    const Source nodes_source{nodes_file.string(), 1, false};
    const auto network_text = read_file(problems, network_file, network_source);
    const auto nodes_text = read_file(problems, nodes_file, nodes_source);
    auto c = load_guarded(network_text, nodes_text, overrides, problems, network_source, nodes_source);
    c.network_file = network_file;
    c.nodes_file = nodes_file;
    return c;
}

Configuration load_text(const std::string& network_yaml, const std::string& nodes_yaml,
                        const std::vector<std::string>& overrides, const std::string& network_name,
                        const std::string& nodes_name) {
    Problems problems;
    const Source network_source{network_name, 0, false};
    const Source nodes_source{nodes_name, 1, false};
    auto c = load_guarded(network_yaml, nodes_yaml, overrides, problems, network_source, nodes_source);
    c.network_file = network_name;
    c.nodes_file = nodes_name;
    return c;
}

Configuration load_network(const std::filesystem::path& network_file, const std::vector<std::string>& overrides) {
    Problems problems;
    const Source network_source{network_file.string(), 0, false};
    const Source nodes_source{"(no nodes file: a client)", 1, false};
    const auto network_text = read_file(problems, network_file, network_source);
    auto c = load_guarded(network_text, std::nullopt, overrides, problems, network_source, nodes_source);
    c.network_file = network_file;
    c.nodes_file.clear();
    return c;
}

Configuration load_network_text(const std::string& network_yaml, const std::vector<std::string>& overrides,
                                const std::string& network_name) {
    Problems problems;
    const Source network_source{network_name, 0, false};
    const Source nodes_source{"(no nodes file: a client)", 1, false};
    auto c = load_guarded(network_yaml, std::nullopt, overrides, problems, network_source, nodes_source);
    c.network_file = network_name;
    c.nodes_file.clear();
    return c;
}

} // namespace msgpass::config
