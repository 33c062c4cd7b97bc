// The two schemas over the generic reader: the network file (with its --set
// overrides) and the nodes file. config.cpp runs them in order: network file and
// overrides, nodes file, then the groups, whose members must be nodes.
#pragma once

#include "reader.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::config::detail {

constexpr std::uint64_t max_node_id = 2147483647;

// The network file's values, layered: file first, then each override on top. They
// are judged only once every layer is in, so an override replaces a wrong file value
// before it is checked.
struct NetworkLayers {
    std::map<std::string, Item> top;    // partition, technology, ... (not sci, not groups)
    std::map<std::string, Item> sci;    // top-level SCI context keys
    std::optional<Item> sci_context;    // the `sci` mapping itself, for consistency errors
    std::map<std::string, Item> groups; // group name -> list of node ids
};

// network.cpp
void collect_network(Problems& problems, const Item& root, NetworkLayers& layers);
// An override "key.path=value": the value is YAML, addressed like the network file.
void collect_override(Problems& problems, const std::string& text, const Source& source, NetworkLayers& layers);
// Judges the layered values into c (all but the groups).
void resolve_network(Problems& problems, const NetworkLayers& layers, Configuration& c);
// Members are checked against the nodes only when the nodes file was read
// (nodes_known), so that an unreadable nodes file is one error, not one per member.
void resolve_groups(Problems& problems, const NetworkLayers& layers, const std::string& nodes_name, Configuration& c,
                    bool nodes_known);

const std::vector<std::string>& sci_keys();
// Applies one SCI key to a context (a wrong value is reported and leaves it as it was).
void apply_sci_key(Problems& problems, const std::string& key, const Item& v, SciParameters& sci);
// The rules that tie several SCI keys together, reported at mark with path.
void check_sci(Problems& problems, const SciParameters& sci, const Source& source, const YAML::Mark& mark,
               const std::string& path);

// nodes.cpp: machines and nodes into c (after resolve_network: nodes inherit c.sci).
void collect_nodes_file(Problems& problems, const Item& root, Configuration& c);

} // namespace msgpass::config::detail
