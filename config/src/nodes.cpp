// The nodes-file schema: the machines (with the machine sections of the registered
// technologies) and the nodes (id, name, host, port, machine, command, and a node's
// own sections over the top-level ones), with the checks that span nodes (unique ids,
// names and endpoints).
#include "schemas.hpp"

#include <set>
#include <sstream>

namespace msgpass::config::detail {

namespace {

struct NodeEntry {
    NodeConfig node;
    bool id_ok = false;
    Item id_value;
    Item name_value;
    bool name_explicit = false;
    std::optional<Item> port_value;
    std::size_t index = 0;
};

const std::vector<std::string> generic_keys = {"id", "name", "host", "port", "machine", "command"};

void collect_machines(Problems& problems, const Schemas& schemas, const Item& v, Configuration& c) {
    const auto known = schemas.machine_keys();
    const std::string what = "a mapping of machine settings (" + (known.empty() ? "none" : join(known)) + ")";
    for_each_entry(
        problems, v, "a mapping of machine names to machine settings", [&](const std::string& name, const Item& m) {
            Machine machine;
            machine.name = name;
            machine.where = Location{v.source->name, m.key_mark.line + 1, m.key_mark.column + 1};
            if (!is_name(name)) {
                report(problems, Item{YAML::Node(name), m.key_mark, v.source, m.path}, "a machine " + name_expected);
                return;
            }
            for_each_key(problems, m, known, what, [&](const std::string& key, const Item& section) {
                const auto& type = *schemas.find(key)->machine;
                SectionLayers layers;
                collect_section(problems, section, type, layers);
                std::any options = type.make();
                resolve_section(problems, type, layers, section.path, options);
                machine.sections.put(std::move(options));
            });
            c.machines.push_back(machine);
        });
}

void collect_node(Problems& problems, const Schemas& schemas, const Item& v, std::size_t index, Configuration& c,
                  const std::set<std::string>& machine_names, std::vector<NodeEntry>& entries) {
    NodeEntry entry;
    entry.index = index;
    entry.node.where = Location{v.source->name, v.mark().line + 1, v.mark().column + 1};
    const auto known = schemas.node_keys();
    if (!v.node.IsMap()) {
        report(problems, v, "a mapping of node settings (" + join(known) + ")");
        return;
    }
    bool has_id = false;
    bool has_name = false;
    std::map<std::string, SectionLayers> sections; // the node's own, by technology
    for_each_key(problems, v, known, "a mapping of node settings", [&](const std::string& key, const Item& x) {
        if (key == "id") {
            has_id = true;
            entry.id_value = x;
            if (auto n = get_integer(problems, x, 1, max_node_id, "an integer node id")) {
                entry.node.id = static_cast<NodeId>(*n);
                entry.id_ok = true;
            }
        } else if (key == "name") {
            has_name = true;
            entry.name_explicit = true;
            entry.name_value = x;
            if (auto text = get_scalar(problems, x, "a node " + name_expected)) {
                if (is_name(*text)) {
                    entry.node.name = *text;
                } else {
                    report(problems, x, "a node " + name_expected);
                }
            }
        } else if (key == "host") {
            if (auto text = get_scalar(problems, x, "a host name or address")) {
                if (text->empty() || text->size() > 255 || text->find_first_of(" \t\r\n/") != std::string::npos) {
                    report(problems, x, "a host name or address");
                } else {
                    entry.node.host = *text;
                }
            }
        } else if (key == "port") {
            if (auto n = get_integer(problems, x, 0, 65535, "a port")) {
                entry.node.port = static_cast<std::uint16_t>(*n);
                entry.port_value = x;
            }
        } else if (key == "machine") {
            if (auto text = get_scalar(problems, x, "the name of a machine in machines")) {
                if (!machine_names.contains(*text)) {
                    std::vector<std::string> names;
                    for (const auto& m : c.machines) {
                        if (names.size() == 20) {
                            names.emplace_back("...");
                            break;
                        }
                        names.push_back(m.name);
                    }
                    report(problems, x,
                           "the name of a machine in machines (" + (names.empty() ? "none" : join(names)) + ")");
                } else {
                    entry.node.machine = *text;
                }
            }
        } else if (key == "command") {
            const std::string expected = "a command: a non-empty string or a list of strings";
            if (x.node.IsScalar()) {
                std::istringstream words(x.node.Scalar());
                for (std::string w; words >> w;)
                    entry.node.command.push_back(w);
                if (entry.node.command.empty()) report(problems, x, expected);
            } else if (x.node.IsSequence() && x.node.size() > 0) {
                std::size_t i = 0;
                for (const auto& word : x.node) {
                    Item w{word, x.mark(), x.source, x.path + "[" + std::to_string(i++) + "]"};
                    if (!word.IsScalar() || word.Scalar().empty()) {
                        report(problems, w, "a non-empty string");
                    } else {
                        entry.node.command.push_back(word.Scalar());
                    }
                }
            } else {
                report(problems, x, expected);
            }
        } else if (const auto* schema = schemas.section(key)) {
            collect_section(problems, x, *schema->section, sections[key]);
        }
    });
    if (!has_id) {
        problems.add(*v.source, v.mark(), v.path + ".id", "an integer node id", "nothing");
    }
    if (entry.id_ok && !has_name) entry.node.name = "node-" + std::to_string(entry.node.id);
    // A node's keys override single keys of the top-level section; a node that sets
    // none keeps no section of its own (Configuration::section<T>(node) falls back).
    for (const auto& [name, layers] : sections) {
        if (layers.keys.empty()) continue;
        const auto& type = *schemas.find(name)->section;
        const std::any* top = c.sections.find(type.type());
        std::any options = top != nullptr ? *top : type.make();
        resolve_section(problems, type, layers, layers.context->path, options);
        entry.node.sections.put(std::move(options));
    }
    if (!has_name) entry.name_value = Item{YAML::Node(), v.mark(), v.source, v.path + ".name"};
    entries.push_back(std::move(entry));
}

void check_unique_nodes(Problems& problems, const std::vector<NodeEntry>& entries) {
    // Each map leads to the first entry that used the id, the name or the endpoint.
    std::map<NodeId, const NodeEntry*> ids;
    std::map<std::string, const NodeEntry*> names;
    std::map<std::pair<std::string, std::uint16_t>, const NodeEntry*> endpoints;
    auto holder = [](const NodeEntry* first) { return " (nodes[" + std::to_string(first->index) + "] has it)"; };
    for (const auto& e : entries) {
        if (e.id_ok) {
            auto [it, fresh] = ids.emplace(e.node.id, &e);
            if (!fresh) report(problems, e.id_value, "a unique node id" + holder(it->second));
        }
        if (!e.node.name.empty()) {
            auto [it, fresh] = names.emplace(e.node.name, &e);
            // Two default names clash only when the ids do, which is reported already.
            if (!fresh && (e.name_explicit || it->second->name_explicit)) {
                report(problems, e.name_value, "a unique node name" + holder(it->second), quote(e.node.name));
            }
        }
        if (e.node.port != 0 && e.port_value) {
            auto [it, fresh] = endpoints.emplace(std::make_pair(e.node.host, e.node.port), &e);
            if (!fresh) {
                report(problems, *e.port_value,
                       "a port not used by another node on host " + quote(e.node.host) + holder(it->second));
            }
        }
    }
}

} // namespace

const std::vector<std::string>& node_keys() {
    return generic_keys;
}

void collect_nodes_file(Problems& problems, const Schemas& schemas, const Item& root, Configuration& c) {
    std::optional<Item> nodes_list;
    std::optional<Item> machines;
    for_each_key(problems, root, {"machines", "nodes"}, "a mapping with machines and nodes",
                 [&](const std::string& key, const Item& v) {
                     if (key == "machines") {
                         machines = v;
                     } else {
                         nodes_list = v;
                     }
                 });
    if (machines) collect_machines(problems, schemas, *machines, c);
    if (!root.node.IsDefined() || !(root.node.IsNull() || root.node.IsMap())) return;
    if (!nodes_list) {
        problems.add(*root.source, root.mark(), "nodes", "a non-empty list of nodes", "nothing");
    } else if (!nodes_list->node.IsSequence() || nodes_list->node.size() == 0) {
        report(problems, *nodes_list, "a non-empty list of nodes");
    } else {
        std::vector<NodeEntry> entries;
        std::set<std::string> machine_names;
        for (const auto& m : c.machines)
            machine_names.insert(m.name);
        std::size_t i = 0;
        for (const auto& item : nodes_list->node) {
            Item v{item, nodes_list->mark(), root.source, "nodes[" + std::to_string(i) + "]"};
            collect_node(problems, schemas, v, i, c, machine_names, entries);
            ++i;
        }
        check_unique_nodes(problems, entries);
        std::set<NodeId> ids;
        for (auto& e : entries)
            if (e.id_ok && ids.insert(e.node.id).second) c.nodes.push_back(std::move(e.node));
    }
}

} // namespace msgpass::config::detail
