// The two schemas over the generic reader: the network file (with its --set
// overrides) and the nodes file, each with the sections of the registered
// technologies. config.cpp runs them in order: network file and overrides, nodes
// file, then the groups, whose members must be nodes.
#pragma once

#include "reader.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::config::detail {

constexpr std::uint64_t max_node_id = 2147483647;

// The keys of each file that belong to no technology.
const std::vector<std::string>& network_keys();
const std::vector<std::string>& node_keys();

// The registered technologies as one load sees them (a snapshot of SchemaRegistry).
class Schemas {
public:
    explicit Schemas(std::vector<std::shared_ptr<const TechnologySchema>> list) : list_(std::move(list)) {}

    [[nodiscard]] const std::vector<std::shared_ptr<const TechnologySchema>>& list() const { return list_; }
    [[nodiscard]] const TechnologySchema* find(const std::string& name) const;
    // The schema whose top-level section is called name, or nullptr.
    [[nodiscard]] const TechnologySchema* section(const std::string& name) const;
    [[nodiscard]] std::vector<std::string> names() const;
    // The keys allowed at the top of the network file, in a node and in a machine.
    [[nodiscard]] std::vector<std::string> network_keys() const;
    [[nodiscard]] std::vector<std::string> node_keys() const;
    [[nodiscard]] std::vector<std::string> machine_keys() const;
    // "sci.recv_buffer_no" for a key of a section written at the top level, else "".
    [[nodiscard]] std::string place_of(const std::string& key) const;

private:
    std::vector<std::shared_ptr<const TechnologySchema>> list_;
};

// One technology section as written: the mapping and its keys (for the top level:
// file first, overrides on top).
struct SectionLayers {
    std::optional<Item> context;      // the `<name>:` mapping itself, where the section's rules report
    std::map<std::string, Item> keys; // key -> value
};

// Reads a section mapping's keys into layers (a wrong shape or key is reported).
void collect_section(Problems& problems, const Item& v, const SectionType& type, SectionLayers& layers);
// Applies the keys of layers over options, then the type's rules when the section
// was written, reported under path at its mapping, or where its first key was set.
void resolve_section(Problems& problems, const SectionType& type, const SectionLayers& layers, const std::string& path,
                     std::any& options);

// The network file's values, layered: file first, then each override on top. They
// are judged only once every layer is in, so an override replaces a wrong file value
// before it is checked.
struct NetworkLayers {
    std::map<std::string, Item> top;               // partition, technology, ... (not sections, not groups)
    std::map<std::string, SectionLayers> sections; // technology name -> its section
    std::map<std::string, Item> groups;            // group name -> list of node ids
};

// network.cpp
void collect_network(Problems& problems, const Schemas& schemas, const Item& root, NetworkLayers& layers);
// An override "key.path=value": the value is YAML, addressed like the network file.
void collect_override(Problems& problems, const Schemas& schemas, const std::string& text, const Source& source,
                      NetworkLayers& layers);
// Judges the layered values into c (all but the groups).
void resolve_network(Problems& problems, const Schemas& schemas, const NetworkLayers& layers, Configuration& c);
// Members are checked against the nodes only when the nodes file was read
// (nodes_known), so that an unreadable nodes file is one error, not one per member.
void resolve_groups(Problems& problems, const NetworkLayers& layers, const std::string& nodes_name, Configuration& c,
                    bool nodes_known);

// nodes.cpp: machines and nodes into c (after resolve_network: a node's own sections
// are resolved over c's).
void collect_nodes_file(Problems& problems, const Schemas& schemas, const Item& root, Configuration& c);

} // namespace msgpass::config::detail
