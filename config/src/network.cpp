// The network-file schema: partition-wide settings, the top-level `sci` context and
// the static groups, and the --set overrides that address the same keys. Values are
// gathered into NetworkLayers (file first, overrides on top) and judged afterwards.
#include "schemas.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>

namespace msgpass::config::detail {

namespace {

constexpr std::int64_t max_peer_timeout_ms = 3600 * 1000;

// The SCI context keys, in the order of the seed.
const std::vector<std::string> sci_keys_list = {"max_outst_buffers", "recv_seg_id",      "recv_seg_size",
                                                "header_area_size",  "recv_buffer_no",   "recv_buffer_size",
                                                "use_send_pool",     "send_buffer_no",   "send_buffer_size",
                                                "inject_error_rate", "inject_error_seed"};

const std::vector<std::string> network_keys = {
    "partition", "technology", "max_message_size", "peer_timeout", "send_queue_limit", "sci", "groups"};
const std::vector<std::string> technologies = {"sci", "tcp", "udp", "auto"};

// An SCI key written at the top level is pointed to its place under sci.
std::string suggest_place(const std::string& key) {
    return contains(sci_keys_list, key) ? "sci." + key : std::string{};
}

void collect_groups(Problems& problems, const Item& v, NetworkLayers& layers) {
    for_each_entry(problems, v, "a mapping of group names to lists of node ids",
                   [&](const std::string& name, const Item& members) {
                       if (!is_name(name)) {
                           report(problems, Item{YAML::Node(name), members.key_mark, v.source, members.path},
                                  "a group " + name_expected);
                           return;
                       }
                       layers.groups.insert_or_assign(name, members);
                   });
}

void collect_network_key(Problems& problems, const std::string& key, const Item& v, NetworkLayers& layers) {
    if (key == "sci") {
        if (v.node.IsDefined() && !v.node.IsNull() && !v.node.IsMap()) {
            report(problems, v, "a mapping of SCI parameters");
            return;
        }
        layers.sci_context = v;
        for_each_key(problems, v, sci_keys_list, "a mapping of SCI parameters",
                     [&](const std::string& k, const Item& value) { layers.sci.insert_or_assign(k, value); });
    } else if (key == "groups") {
        collect_groups(problems, v, layers);
    } else {
        layers.top.insert_or_assign(key, v);
    }
}

void resolve_top(Problems& problems, const NetworkLayers& layers, Configuration& c) {
    for (const auto& [key, v] : layers.top) {
        if (key == "partition") {
            if (auto text = get_scalar(problems, v, "a partition " + name_expected)) {
                if (is_name(*text)) {
                    c.partition = *text;
                } else {
                    report(problems, v, "a partition " + name_expected);
                }
            }
        } else if (key == "technology") {
            const std::string expected = "one of " + join(technologies);
            if (auto text = get_scalar(problems, v, expected)) {
                std::string lower = *text;
                std::transform(lower.begin(), lower.end(), lower.begin(),
                               [](char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); });
                if (contains(technologies, lower)) {
                    c.technology = lower;
                } else {
                    report(problems, v, expected);
                }
            }
        } else if (key == "max_message_size") {
            if (auto n = get_size(problems, v, 2 * GiB)) c.max_message_size = *n;
        } else if (key == "peer_timeout") {
            const std::string expected = "a duration from 1ms to 1 hour such as 500ms, 2.5s or 1000 (milliseconds)";
            if (auto text = get_scalar(problems, v, expected)) {
                auto ms = parse_duration_ms(*text);
                if (!ms || *ms <= 0 || *ms > max_peer_timeout_ms) {
                    report(problems, v, expected);
                } else {
                    c.peer_timeout = std::chrono::milliseconds(*ms);
                }
            }
        } else if (key == "send_queue_limit") {
            if (auto n = get_integer(problems, v, 1, std::numeric_limits<std::uint32_t>::max()))
                c.send_queue_limit = static_cast<std::uint32_t>(*n);
        }
    }
}

} // namespace

const std::vector<std::string>& sci_keys() {
    return sci_keys_list;
}

void collect_network(Problems& problems, const Item& root, NetworkLayers& layers) {
    for_each_key(
        problems, root, network_keys, "a mapping of network settings",
        [&](const std::string& key, const Item& v) { collect_network_key(problems, key, v, layers); }, suggest_place);
}

void apply_sci_key(Problems& problems, const std::string& key, const Item& v, SciParameters& sci) {
    constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
    if (key == "max_outst_buffers") {
        if (auto n = get_integer(problems, v, 1, 7)) sci.max_outst_buffers = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_id") {
        if (auto n = get_integer(problems, v, 0, u32)) sci.recv_seg_id = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_size") {
        if (auto n = get_size(problems, v)) sci.recv_seg_size = *n;
    } else if (key == "header_area_size") {
        if (auto n = get_size(problems, v)) {
            if (*n % 64 != 0) {
                report(problems, v, "a multiple of 64 bytes (one 64-byte header per remote node)");
            } else {
                sci.header_area_size = *n;
            }
        }
    } else if (key == "recv_buffer_no") {
        if (auto n = get_integer(problems, v, 1, u32)) sci.recv_buffer_no = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_buffer_size") {
        if (auto n = get_size(problems, v)) {
            if (*n % 64 != 0) {
                report(problems, v, "a multiple of 64 bytes");
            } else {
                sci.recv_buffer_size = *n;
            }
        }
    } else if (key == "use_send_pool") {
        if (auto b = get_bool(problems, v)) sci.use_send_pool = *b;
    } else if (key == "send_buffer_no") {
        if (auto n = get_integer(problems, v, 1, u32)) sci.send_buffer_no = static_cast<std::uint32_t>(*n);
    } else if (key == "send_buffer_size") {
        if (auto n = get_size(problems, v)) sci.send_buffer_size = *n;
    } else if (key == "inject_error_rate") {
        const std::string expected = "a probability from 0.0 to below 1.0";
        if (auto text = get_scalar(problems, v, expected)) {
            auto x = parse_double(*text);
            if (!x || *x < 0.0 || *x >= 1.0) {
                report(problems, v, expected);
            } else {
                sci.inject_error_rate = *x;
            }
        }
    } else if (key == "inject_error_seed") {
        if (auto n = get_integer(problems, v, 0, std::numeric_limits<std::uint64_t>::max())) sci.inject_error_seed = *n;
    }
}

void check_sci(Problems& problems, const SciParameters& sci, const Source& source, const YAML::Mark& mark,
               const std::string& path) {
    // Compared in long double: recv_buffer_no * recv_buffer_size can exceed 64 bits.
    const long double needed = static_cast<long double>(sci.header_area_size) +
                               static_cast<long double>(sci.recv_buffer_no) * sci.recv_buffer_size;
    if (static_cast<long double>(sci.recv_seg_size) < needed) {
        std::ostringstream expected;
        expected << "recv_seg_size >= header_area_size (" << sci.header_area_size << ") + recv_buffer_no ("
                 << sci.recv_buffer_no << ") * recv_buffer_size (" << sci.recv_buffer_size << ") = ";
        if (needed < 1.8e19L) {
            expected << static_cast<std::uint64_t>(needed);
        } else {
            expected << "more than 2^64";
        }
        problems.add(source, mark, path + ".recv_seg_size", expected.str(),
                     "recv_seg_size " + std::to_string(sci.recv_seg_size));
    }
    if (sci.use_send_pool &&
        static_cast<long double>(sci.send_buffer_no) * sci.send_buffer_size > static_cast<long double>(max_size)) {
        problems.add(source, mark, path + ".send_buffer_no",
                     "a send pool (send_buffer_no * send_buffer_size) of at most 16GiB",
                     std::to_string(sci.send_buffer_no) + " * " + std::to_string(sci.send_buffer_size) + " bytes");
    }
}

void collect_override(Problems& problems, const std::string& text, const Source& source, NetworkLayers& layers) {
    const auto equal = text.find('=');
    Item whole{YAML::Node(text), YAML::Mark::null_mark(), &source, "--set"};
    if (equal == std::string::npos || equal == 0) {
        report(problems, whole, "key=value such as sci.recv_buffer_no=255");
        return;
    }
    auto trim = [](std::string s) {
        const auto first = s.find_first_not_of(" \t");
        if (first == std::string::npos) return std::string{};
        return s.substr(first, s.find_last_not_of(" \t") - first + 1);
    };
    const std::string path = trim(text.substr(0, equal));
    const std::string value_text = text.substr(equal + 1);
    YAML::Node node;
    try {
        node = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
        report(problems, Item{YAML::Node(), YAML::Mark::null_mark(), &source, path}, "a YAML value",
               quote(value_text) + " (" + e.msg + ")");
        return;
    }
    Item v{node, YAML::Mark::null_mark(), &source, path};
    std::vector<std::string> parts;
    std::string part;
    for (std::istringstream in(path); std::getline(in, part, '.');)
        parts.push_back(part);
    if (!path.empty() && path.back() == '.') parts.push_back("");
    if (parts.empty()) {
        report(problems, whole, "key=value such as sci.recv_buffer_no=255");
        return;
    }
    Item key_value{YAML::Node(parts[0]), YAML::Mark::null_mark(), &source, path};
    if (!contains(network_keys, parts[0])) {
        report(problems, key_value, known_keys_text(parts[0], network_keys, suggest_place(parts[0])),
               unknown_key_found(parts[0]));
        return;
    }
    if (parts.size() == 1) {
        collect_network_key(problems, parts[0], v, layers);
    } else if (parts.size() == 2 && parts[0] == "sci") {
        if (!contains(sci_keys_list, parts[1])) {
            report(problems, key_value, known_keys_text(parts[1], sci_keys_list), unknown_key_found(parts[1]));
            return;
        }
        layers.sci.insert_or_assign(parts[1], v);
    } else if (parts.size() == 2 && parts[0] == "groups") {
        if (!is_name(parts[1])) {
            report(problems, key_value, "a group " + name_expected, quote(parts[1]));
            return;
        }
        layers.groups.insert_or_assign(parts[1], v);
    } else {
        report(problems, key_value, "a network-file key such as partition or sci.recv_buffer_no", quote(path));
    }
}

void resolve_network(Problems& problems, const NetworkLayers& layers, Configuration& c) {
    resolve_top(problems, layers, c);
    for (const auto& [key, value] : layers.sci)
        apply_sci_key(problems, key, value, c.sci);
    // Consistency errors point at the `sci` mapping, or the first place an SCI key was set.
    const Item* at = layers.sci_context ? &*layers.sci_context : nullptr;
    if (!at && !layers.sci.empty()) at = &layers.sci.begin()->second;
    if (at) check_sci(problems, c.sci, *at->source, at->mark(), "sci");
}

void resolve_groups(Problems& problems, const NetworkLayers& layers, const std::string& nodes_name, Configuration& c,
                    bool nodes_known) {
    std::vector<std::string> known;
    for (const auto& n : c.nodes) {
        if (known.size() == 20) {
            known.push_back("...");
            break;
        }
        known.push_back(std::to_string(n.id));
    }
    const std::string member_expected =
        "a node id of " + nodes_name + " (" + (known.empty() ? "none" : join(known)) + ")";
    std::set<NodeId> node_ids;
    for (const auto& n : c.nodes)
        node_ids.insert(n.id);
    for (const auto& [name, v] : layers.groups) {
        if (!v.node.IsSequence() || v.node.size() == 0) {
            report(problems, v, "a non-empty list of node ids");
            continue;
        }
        std::vector<NodeId> members;
        std::set<NodeId> seen;
        bool ok = true;
        std::size_t i = 0;
        for (const auto& item : v.node) {
            Item m{item, v.mark(), v.source, v.path + "[" + std::to_string(i++) + "]"};
            auto id = get_integer(problems, m, 1, max_node_id, "a node id");
            if (!id) {
                ok = false;
                continue;
            }
            if (nodes_known && !node_ids.contains(static_cast<NodeId>(*id))) {
                report(problems, m, member_expected);
                ok = false;
                continue;
            }
            if (!seen.insert(static_cast<NodeId>(*id)).second) {
                report(problems, m, "each member once", "a repeated member " + quote(item.Scalar()));
                ok = false;
                continue;
            }
            members.push_back(static_cast<NodeId>(*id));
        }
        if (ok) c.groups[name] = std::move(members);
    }
}

} // namespace msgpass::config::detail
