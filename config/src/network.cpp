// The network-file schema: partition-wide settings, the sections of the registered
// technologies and the static groups, and the --set overrides that address the same
// keys. Values are gathered into NetworkLayers (file first, overrides on top) and
// judged afterwards; a section is judged by its technology's options.
#include "schemas.hpp"

#include <msgpass/config/comm_options.hpp>
#include <msgpass/config/log_options.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

namespace msgpass::config::detail {

namespace {

const std::vector<std::string> generic_keys = {
    "partition", "technology", "max_message_size", "peer_timeout", "send_queue_limit", "groups", "auth_key_file",
    "comm",      "log"};

// The `comm:` section, read by the generic section reader like a technology's.
const SectionType& comm_type() {
    static const SectionType type = SectionType::of<CommOptions>(
        "a mapping of communicator limits (eager_limit, unexpected_limit, tag_queues, single_copy)");
    return type;
}

// The `log:` section, likewise.
const SectionType& log_type() {
    static const SectionType type = SectionType::of<LogOptions>(
        "a mapping of log settings (level, file, and a level per subsystem: framework, sci, tcp, udp, auto, comm, "
        "mpi, launcher)");
    return type;
}

// The sections config reads itself (not a technology's), or nullptr.
const SectionType* builtin_section(const std::string& key) {
    if (key == "comm") return &comm_type();
    if (key == "log") return &log_type();
    return nullptr;
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

void collect_network_key(Problems& problems, const Schemas& schemas, const std::string& key, const Item& v,
                         NetworkLayers& layers) {
    if (const auto* schema = schemas.section(key)) {
        collect_section(problems, v, *schema->section, layers.sections[key]);
    } else if (const auto* builtin = builtin_section(key)) {
        collect_section(problems, v, *builtin, layers.sections[key]);
    } else if (key == "groups") {
        collect_groups(problems, v, layers);
    } else {
        layers.top.insert_or_assign(key, v);
    }
}

// auth_key_file: a path, relative to the network file's directory (to the working
// directory for --set), to a key file that passes read_auth_key's checks.
void resolve_auth_key(Problems& problems, const Item& v, Configuration& c) {
    const auto text = get_scalar(problems, v, "the path of a 32-byte key file");
    if (!text) return;
    if (text->empty()) {
        report(problems, v, "the path of a 32-byte key file", "an empty path");
        return;
    }
    std::filesystem::path file(*text);
    if (file.is_relative() && v.source != nullptr && !v.source->fixed) {
        file = std::filesystem::path(v.source->name).parent_path() / file;
    }
    std::string problem;
    if (auto key = read_auth_key(file, problem)) {
        c.auth_key_file = file;
        c.auth_key = *key;
    } else {
        report(problems, v, "a key file of this user with mode 0600",
               std::string("'") + file.string() + "', which " + problem);
    }
}

void resolve_top(Problems& problems, const Schemas& schemas, const NetworkLayers& layers, Configuration& c) {
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
            // Only a registered technology: a name nobody registered would pass here
            // and fail later, in NodeFactory::create.
            const auto names = schemas.names();
            const std::string expected =
                names.empty() ? "a registered technology (none is registered)" : "one of " + join(names);
            if (auto text = get_scalar(problems, v, expected)) {
                std::string lower = *text;
                std::transform(lower.begin(), lower.end(), lower.begin(),
                               [](char ch) { return static_cast<char>(std::tolower(static_cast<unsigned char>(ch))); });
                if (schemas.find(lower) != nullptr) {
                    c.technology = lower;
                } else {
                    report(problems, v, expected);
                }
            }
        } else if (key == "max_message_size") {
            if (auto n = get_size(problems, v, 2 * GiB)) c.max_message_size = *n;
        } else if (key == "peer_timeout") {
            if (auto d = get_duration(problems, v, std::chrono::milliseconds(1), std::chrono::hours(1)))
                c.peer_timeout = *d;
        } else if (key == "send_queue_limit") {
            if (auto n = get_integer(problems, v, 1, std::numeric_limits<std::uint32_t>::max()))
                c.send_queue_limit = static_cast<std::uint32_t>(*n);
        } else if (key == "auth_key_file") {
            resolve_auth_key(problems, v, c);
        }
    }
}

} // namespace

const std::vector<std::string>& network_keys() {
    return generic_keys;
}

void collect_network(Problems& problems, const Schemas& schemas, const Item& root, NetworkLayers& layers) {
    for_each_key(
        problems, root, schemas.network_keys(), "a mapping of network settings",
        [&](const std::string& key, const Item& v) { collect_network_key(problems, schemas, key, v, layers); },
        [&](const std::string& key) { return schemas.place_of(key); });
}

void collect_override(Problems& problems, const Schemas& schemas, const std::string& text, const Source& source,
                      NetworkLayers& layers) {
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
    const auto known = schemas.network_keys();
    if (!contains(known, parts[0])) {
        report(problems, key_value, known_keys_text(parts[0], known, schemas.place_of(parts[0])),
               unknown_key_found(parts[0]));
        return;
    }
    const auto* schema = schemas.section(parts[0]);
    const SectionType* section = schema != nullptr ? &*schema->section : builtin_section(parts[0]);
    if (parts.size() == 1) {
        collect_network_key(problems, schemas, parts[0], v, layers);
    } else if (parts.size() == 2 && section != nullptr) {
        const auto& keys = section->keys();
        if (!contains(keys, parts[1])) {
            report(problems, key_value, known_keys_text(parts[1], keys), unknown_key_found(parts[1]));
            return;
        }
        layers.sections[parts[0]].keys.insert_or_assign(parts[1], v);
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

void resolve_network(Problems& problems, const Schemas& schemas, const NetworkLayers& layers, Configuration& c) {
    resolve_top(problems, schemas, layers, c);
    // Every registered section is stored, with its defaults when nobody wrote it.
    for (const auto& schema : schemas.list()) {
        if (!schema->section) continue;
        std::any options = schema->section->make();
        if (auto it = layers.sections.find(schema->name); it != layers.sections.end())
            resolve_section(problems, *schema->section, it->second, schema->name, options);
        c.sections.put(std::move(options));
    }
    if (auto it = layers.sections.find("comm"); it != layers.sections.end()) {
        std::any options = CommOptions{};
        resolve_section(problems, comm_type(), it->second, "comm", options);
        c.sections.put(std::move(options));
    }
    if (auto it = layers.sections.find("log"); it != layers.sections.end()) {
        std::any options = LogOptions{};
        resolve_section(problems, log_type(), it->second, "log", options);
        c.sections.put(std::move(options));
    }
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

namespace msgpass::config {

const std::vector<std::string>& CommOptions::keys() {
    static const std::vector<std::string> list = {"eager_limit", "unexpected_limit", "tag_queues", "single_copy"};
    return list;
}

namespace {

// "64KiB" and the like: digits and an optional unit (B, KiB, MiB, GiB); 0 when not one.
std::uint64_t parse_size_text(const std::string& t) {
    std::size_t i = 0;
    std::uint64_t n = 0;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
        if (n > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) return 0;
        n = n * 10 + static_cast<std::uint64_t>(t[i++] - '0');
    }
    if (i == 0) return 0;
    const std::string unit = t.substr(i);
    std::uint64_t scale = 1;
    if (unit == "KiB")
        scale = KiB;
    else if (unit == "MiB")
        scale = MiB;
    else if (unit == "GiB")
        scale = GiB;
    else if (!unit.empty() && unit != "B")
        return 0;
    if (n > std::numeric_limits<std::uint64_t>::max() / scale) return 0;
    return n * scale;
}

// A tag of a tag_queues entry: 0 to 2^31-1; nullopt otherwise.
std::optional<std::int32_t> parse_tag_text(const std::string& t) {
    if (t.empty() || t.size() > 10) return std::nullopt;
    std::uint64_t n = 0;
    for (char ch : t) {
        if (ch < '0' || ch > '9') return std::nullopt;
        n = n * 10 + static_cast<std::uint64_t>(ch - '0');
    }
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) return std::nullopt;
    return static_cast<std::int32_t>(n);
}

} // namespace

const std::vector<std::string>& LogOptions::keys() {
    static const std::vector<std::string> list = {"level", "file", "framework", "sci", "tcp",
                                                  "udp",   "auto", "comm",      "mpi", "launcher"};
    return list;
}

const std::vector<std::string>& LogOptions::level_names() {
    static const std::vector<std::string> list = {"trace", "debug", "info", "warn", "error", "off"};
    return list;
}

void LogOptions::set(const std::string& key, const Value& value) {
    if (key == "file") {
        if (auto t = value.text("a file path (empty: stderr)")) file = *t;
        return;
    }
    const std::string expected = "a log level: trace, debug, info, warn, error or off";
    auto t = value.text(expected);
    if (!t) return;
    const auto& names = level_names();
    if (std::find(names.begin(), names.end(), *t) == names.end()) {
        value.report(expected);
        return;
    }
    if (key == "level")
        level = *t;
    else
        subsystems[key] = *t;
}

void CommOptions::set(const std::string& key, const Value& value) {
    if (key == "eager_limit") {
        if (auto n = value.size(2 * GiB)) eager_limit = *n;
    } else if (key == "unexpected_limit") {
        if (auto n = value.size()) unexpected_limit = *n;
    } else if (key == "single_copy") {
        if (auto b = value.boolean()) single_copy = *b;
    } else if (key == "tag_queues") {
        const std::string expected =
            "tag queues as first-last:size or tag:size, comma-separated, ranges apart (e.g. 100-199:64KiB,7:4KiB)";
        auto text = value.text(expected);
        if (!text) return;
        std::vector<TagQueue> out;
        std::istringstream in(*text);
        for (std::string entry; std::getline(in, entry, ',');) {
            entry.erase(std::remove(entry.begin(), entry.end(), ' '), entry.end());
            const auto colon = entry.find(':');
            if (colon == std::string::npos) return value.report(expected, "'" + entry + "' (no size)");
            const std::string range = entry.substr(0, colon);
            const auto dash = range.find('-');
            const auto first = parse_tag_text(range.substr(0, dash));
            const auto last = dash == std::string::npos ? first : parse_tag_text(range.substr(dash + 1));
            const std::uint64_t limit = parse_size_text(entry.substr(colon + 1));
            if (!first || !last || *last < *first)
                return value.report(expected, "'" + entry + "' (tags from 0 to 2147483647, first <= last)");
            if (limit == 0) return value.report(expected, "'" + entry + "' (a size of at least 1 byte)");
            for (const auto& q : out)
                if (*first <= q.last && q.first <= *last)
                    return value.report(expected, "'" + entry + "' (overlaps " + std::to_string(q.first) + "-" +
                                                      std::to_string(q.last) + ")");
            out.push_back(TagQueue{*first, *last, limit});
        }
        if (out.empty()) return value.report(expected);
        tag_queues = std::move(out);
    }
}

} // namespace msgpass::config
