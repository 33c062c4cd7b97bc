// Loading and validation of the network and nodes files (seed section 10). Text is
// parsed by yaml-cpp into a tree; every value is then checked here by hand (type,
// syntax, range) before it reaches a Configuration, so that no file content can throw
// anything but one ConfigError listing every problem as
// "file:line:column: key.path: expected X, found Y". Network-file values and --set
// overrides are first gathered into one layered table (file first, overrides on top)
// and only then validated, so an override replaces a file value before it is judged
// and its errors carry the location "--set:0:0".
#include <msgpass/config.hpp>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sstream>
#include <unistd.h>

namespace msgpass::config {

std::string Location::str() const {
    return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const NodeConfig* Configuration::find_node(NodeId id) const noexcept {
    for (const auto& n : nodes)
        if (n.id == id) return &n;
    return nullptr;
}

const NodeConfig& Configuration::node(NodeId id) const {
    if (const auto* n = find_node(id)) return *n;
    throw ConfigError(nodes_file.string() + ":0:0: nodes: expected a node with id " + std::to_string(id) +
                      ", found nothing");
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

// Files larger than this are refused before parsing: a configuration is a few KiB,
// and the cap bounds the memory and time a wrong path (a log, /dev/zero) can cost.
constexpr std::size_t max_file_size = 16 * MiB;
// Any size key above this is taken as a typo ("huge").
constexpr std::uint64_t max_size = 16 * GiB;
constexpr std::uint64_t max_node_id = 2147483647;
constexpr std::size_t max_name_length = 64;
constexpr std::int64_t max_peer_timeout_ms = 3600 * 1000;

// Where text came from. Locations in a file come from yaml-cpp marks; a fixed source
// (--set) has no positions and reports name:0:0.
struct Source {
    std::string name;
    int rank = 0; // order of the sources in the report
    bool fixed = false;
};

struct Problem {
    int rank;
    int line;
    int column;
    std::string text;
};

class Problems {
public:
    void add(const Source& source, const YAML::Mark& mark, const std::string& path, const std::string& expected,
             const std::string& found) {
        int line = 0;
        int column = 0;
        if (!source.fixed && !mark.is_null()) {
            line = mark.line + 1;
            column = mark.column + 1;
        }
        list_.push_back(
            {source.rank, line, column,
             Location{source.name, line, column}.str() + ": " + path + ": expected " + expected + ", found " + found});
    }
    [[nodiscard]] bool empty() const { return list_.empty(); }
    [[noreturn]] void raise() {
        std::stable_sort(list_.begin(), list_.end(), [](const Problem& a, const Problem& b) {
            return std::tie(a.rank, a.line, a.column) < std::tie(b.rank, b.line, b.column);
        });
        // A file of garbage can hold millions of problems; the first hundred tell the story.
        constexpr std::size_t shown = 100;
        std::string what;
        for (std::size_t i = 0; i < list_.size() && i < shown; ++i)
            what += (what.empty() ? "" : "\n") + list_[i].text;
        if (list_.size() > shown) {
            what += "\n" + list_[shown].text.substr(0, list_[shown].text.find(": ")) + ": errors: expected at most " +
                    std::to_string(shown) + " problems, found " + std::to_string(list_.size() - shown) + " more";
        }
        throw ConfigError(what);
    }

private:
    std::vector<Problem> list_;
};

// A value as found in a file or an override, with what is needed to report on it.
struct Value {
    YAML::Node node;     // may be a Null node when the key has no value
    YAML::Mark key_mark; // where the key was written, for values without a position
    const Source* source = nullptr;
    std::string path; // "sci.recv_buffer_no", "nodes[2].port"

    [[nodiscard]] YAML::Mark mark() const {
        if (node.IsDefined() && !node.IsNull() && !node.Mark().is_null()) return node.Mark();
        return key_mark;
    }
};

std::string quote(const std::string& text) {
    constexpr std::size_t limit = 60;
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (text.size() > limit) out += "...";
    return out + "'";
}

std::string describe(const YAML::Node& node) {
    if (!node.IsDefined() || node.IsNull()) return "nothing";
    if (node.IsScalar()) return quote(node.Scalar());
    if (node.IsSequence()) return node.size() == 0 ? "an empty list" : "a list";
    if (node.IsMap()) return node.size() == 0 ? "an empty mapping" : "a mapping";
    return "an unknown YAML node";
}

void report(Problems& problems, const Value& v, const std::string& expected, const std::string& found = {}) {
    problems.add(*v.source, v.mark(), v.path, expected, found.empty() ? describe(v.node) : found);
}

std::string join(const std::vector<std::string>& words, const std::string& separator = ", ") {
    std::string out;
    for (const auto& w : words)
        out += (out.empty() ? "" : separator) + w;
    return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

const std::vector<std::string>& sci_key_list();

// "a known key (did you mean 'x'? known: a, b)" for an unknown-key error. With
// sci_hint, an SCI key written at the top level is pointed to its place under sci.
std::string known_keys_text(const std::string& key, const std::vector<std::string>& known, bool sci_hint = false) {
    if (sci_hint && std::find(sci_key_list().begin(), sci_key_list().end(), key) != sci_key_list().end()) {
        return "a known key (did you mean 'sci." + key + "'? known: " + join(known) + ")";
    }
    std::string best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    if (key.size() <= 100) {
        for (const auto& k : known) {
            const auto d = edit_distance(key, k);
            if (d < best_distance) {
                best_distance = d;
                best = k;
            }
        }
    }
    std::string text = "a known key (";
    if (!best.empty() && best_distance <= std::max<std::size_t>(2, best.size() / 3)) {
        text += "did you mean '" + best + "'? ";
    }
    return text + "known: " + join(known) + ")";
}

std::string unknown_key_found(const std::string& key) {
    return "unknown key " + quote(key);
}

bool is_name(const std::string& text) {
    if (text.empty() || text.size() > max_name_length) return false;
    return std::all_of(text.begin(), text.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
               c == '-';
    });
}

const std::string name_expected = "name of 1 to 64 characters [A-Za-z0-9_.-]";

// Integer syntax: optional sign, decimal digits, or 0x followed by hex digits.
// nullopt when malformed, negative (other than -0) or beyond 64 bits.
std::optional<std::uint64_t> parse_unsigned(const std::string& text) {
    std::string_view s = text;
    bool negative = false;
    if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
        negative = s.front() == '-';
        s.remove_prefix(1);
    }
    int base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s.remove_prefix(2);
    }
    if (s.empty() || s.front() == '+' || s.front() == '-') return std::nullopt;
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    if (negative && value != 0) return std::nullopt;
    return value;
}

std::optional<std::string> get_scalar(Problems& problems, const Value& v, const std::string& expected) {
    if (!v.node.IsDefined() || !v.node.IsScalar()) {
        report(problems, v, expected);
        return std::nullopt;
    }
    return v.node.Scalar();
}

std::optional<std::uint64_t> get_integer(Problems& problems, const Value& v, std::uint64_t low, std::uint64_t high,
                                         const std::string& what = "an integer") {
    const std::string expected = what + " from " + std::to_string(low) + " to " + std::to_string(high);
    auto text = get_scalar(problems, v, expected);
    if (!text) return std::nullopt;
    auto value = parse_unsigned(*text);
    if (!value || *value < low || *value > high) {
        report(problems, v, expected);
        return std::nullopt;
    }
    return value;
}

std::string size_text(std::uint64_t bytes) {
    if (bytes >= GiB && bytes % GiB == 0) return std::to_string(bytes / GiB) + "GiB";
    if (bytes >= MiB && bytes % MiB == 0) return std::to_string(bytes / MiB) + "MiB";
    if (bytes >= KiB && bytes % KiB == 0) return std::to_string(bytes / KiB) + "KiB";
    return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
}

enum class SizeStatus { ok, malformed, negative, huge };

struct SizeResult {
    SizeStatus status = SizeStatus::malformed;
    std::uint64_t bytes = 0;
};

SizeResult parse_size_detailed(const std::string& text) {
    std::size_t i = 0;
    if (!text.empty() && text[0] == '-') {
        // A negative number with or without a unit: say "negative", not "malformed".
        const auto rest = parse_size_detailed(text.substr(1));
        return {rest.status == SizeStatus::malformed               ? SizeStatus::malformed
                : rest.bytes == 0 && rest.status == SizeStatus::ok ? SizeStatus::ok
                                                                   : SizeStatus::negative,
                0};
    }
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
        ++i;
    if (i == 0) return {};
    std::uint64_t number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + i, number);
    const bool overflow = ec == std::errc::result_out_of_range;
    if (ec != std::errc{} && !overflow) return {};
    (void)end;
    std::size_t j = i;
    if (j < text.size() && text[j] == ' ') ++j;
    const std::string unit = text.substr(j);
    if (j > i && unit.empty()) return {}; // "8 " is not a size
    std::uint64_t factor = 1;
    static const std::vector<std::pair<std::string, std::uint64_t>> units = {
        {"", 1},      {"B", 1},          {"K", KiB},         {"KB", KiB},        {"KiB", KiB},
        {"M", MiB},   {"MB", MiB},       {"MiB", MiB},       {"G", GiB},         {"GB", GiB},
        {"GiB", GiB}, {"T", 1024 * GiB}, {"TB", 1024 * GiB}, {"TiB", 1024 * GiB}};
    bool found = false;
    for (const auto& [name, f] : units) {
        if (name == unit) {
            factor = f;
            found = true;
        }
    }
    if (!found) return {};
    if (overflow || number > std::numeric_limits<std::uint64_t>::max() / factor) return {SizeStatus::huge, 0};
    return {SizeStatus::ok, number * factor};
}

std::optional<std::uint64_t> get_size(Problems& problems, const Value& v, std::uint64_t high = max_size) {
    const std::string expected_malformed = "a size such as 8KiB";
    auto text = get_scalar(problems, v, expected_malformed);
    if (!text) return std::nullopt;
    const auto result = parse_size_detailed(*text);
    const std::string range = "a size from 1 byte to " + size_text(high);
    switch (result.status) {
    case SizeStatus::malformed:
        report(problems, v, expected_malformed);
        return std::nullopt;
    case SizeStatus::negative:
        report(problems, v, range, "a negative size " + quote(*text));
        return std::nullopt;
    case SizeStatus::huge:
        report(problems, v, range, "a huge size " + quote(*text));
        return std::nullopt;
    case SizeStatus::ok:
        break;
    }
    if (result.bytes == 0) {
        report(problems, v, range, "a zero size " + quote(*text));
        return std::nullopt;
    }
    if (result.bytes > high) {
        report(problems, v, range, (result.bytes > max_size ? "a huge size " : "") + quote(*text));
        return std::nullopt;
    }
    return result.bytes;
}

std::optional<bool> get_bool(Problems& problems, const Value& v) {
    const std::string expected = "a boolean (true, false, or a number: 0 is false)";
    auto text = get_scalar(problems, v, expected);
    if (!text) return std::nullopt;
    static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    if (yes.contains(*text)) return true;
    if (no.contains(*text)) return false;
    // The seed's rule: 0 means false, any other number true (however long).
    std::string_view digits = *text;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    if (!digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return digits.find_first_not_of('0') != std::string_view::npos;
    report(problems, v, expected);
    return std::nullopt;
}

std::optional<double> parse_double(const std::string& text) {
    if (text.empty()) return std::nullopt;
    double value = 0;
    const char* begin = text.data();
    if (*begin == '+') ++begin;
    const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
    return value;
}

// A duration in milliseconds: an integer (milliseconds), or a number with the unit
// ms, s or min, optionally after one space ("2.5s", "500 ms"). Negative values are
// returned as such for the caller to refuse.
std::optional<std::int64_t> parse_duration_ms(const std::string& text) {
    const auto end = text.find_first_not_of("0123456789.+-");
    const std::string number_text = text.substr(0, end);
    std::string unit = end == std::string::npos ? "" : text.substr(end);
    if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
    double factor = 0;
    if (end == std::string::npos) {
        if (number_text.find('.') != std::string::npos) return std::nullopt; // no fractions of a millisecond
        factor = 1;
    } else if (unit == "ms") {
        factor = 1;
    } else if (unit == "s") {
        factor = 1000;
    } else if (unit == "min") {
        factor = 60000;
    } else {
        return std::nullopt;
    }
    const auto number = parse_double(number_text);
    if (!number) return std::nullopt;
    const double ms = std::round(*number * factor);
    if (ms > 1e15) return std::numeric_limits<std::int64_t>::max();
    if (ms < -1e15) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(ms);
}

// The SCI context keys, in the order of the seed.
const std::vector<std::string> sci_keys = {"max_outst_buffers", "recv_seg_id",      "recv_seg_size",
                                           "header_area_size",  "recv_buffer_no",   "recv_buffer_size",
                                           "use_send_pool",     "send_buffer_no",   "send_buffer_size",
                                           "inject_error_rate", "inject_error_seed"};

const std::vector<std::string>& sci_key_list() {
    return sci_keys;
}

const std::vector<std::string> network_keys = {
    "partition", "technology", "max_message_size", "peer_timeout", "send_queue_limit", "sci", "groups"};
const std::vector<std::string> technologies = {"sci", "tcp", "udp", "auto"};

bool contains(const std::vector<std::string>& list, const std::string& word) {
    return std::find(list.begin(), list.end(), word) != list.end();
}

// Applies one SCI key to a context; false when the value is wrong (reported).
void apply_sci_key(Problems& problems, const std::string& key, const Value& v, SciParameters& sci) {
    constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
    if (key == "max_outst_buffers") {
        if (auto n = get_integer(problems, v, 1, 15)) sci.max_outst_buffers = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_id") {
        if (auto n = get_integer(problems, v, 0, u32)) sci.recv_seg_id = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_size") {
        if (auto n = get_size(problems, v)) sci.recv_seg_size = *n;
    } else if (key == "header_area_size") {
        if (auto n = get_size(problems, v)) {
            if (*n % 128 != 0) {
                report(problems, v, "a multiple of 128 bytes (one 128-byte header per node)");
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

// The rules that tie several SCI keys together.
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

// Iterates over a mapping, checking that keys are known scalars and not repeated;
// calls visit(key, value) for each good key. A Null node is an empty mapping.
template <typename Visit>
void for_each_key(Problems& problems, const Value& map, const std::vector<std::string>& known, const std::string& what,
                  Visit visit, bool sci_hint = false) {
    if (!map.node.IsDefined() || map.node.IsNull()) return;
    if (!map.node.IsMap()) {
        report(problems, map, what);
        return;
    }
    std::set<std::string> seen;
    for (auto it = map.node.begin(); it != map.node.end(); ++it) {
        const YAML::Node key = it->first;
        const std::string prefix = map.path.empty() ? "" : map.path + ".";
        Value key_value{key, key.Mark(), map.source, map.path};
        if (!key.IsScalar()) {
            report(problems, key_value, "a key name", describe(key));
            continue;
        }
        const std::string& name = key.Scalar();
        key_value.path = prefix + name;
        if (!known.empty() && !contains(known, name)) {
            report(problems, key_value, known_keys_text(name, known, sci_hint), unknown_key_found(name));
            continue;
        }
        if (!seen.insert(name).second) {
            report(problems, key_value, "each key once", "a repeated key " + quote(name));
            continue;
        }
        visit(name, Value{it->second, key.Mark(), map.source, prefix + name});
    }
}

// The network file's values, layered: file first, then each override on top.
struct NetworkLayers {
    std::map<std::string, Value> top;    // partition, technology, ... (not sci, not groups)
    std::map<std::string, Value> sci;    // top-level SCI context keys
    std::optional<Value> sci_context;    // the `sci` mapping itself, for consistency errors
    std::map<std::string, Value> groups; // group name -> list of node ids
};

void collect_groups(Problems& problems, const Value& v, NetworkLayers& layers) {
    for_each_key(problems, v, {}, "a mapping of group names to lists of node ids",
                 [&](const std::string& name, const Value& members) {
                     if (!is_name(name)) {
                         report(problems, Value{YAML::Node(name), members.key_mark, v.source, members.path},
                                "a group " + name_expected);
                         return;
                     }
                     layers.groups.insert_or_assign(name, members);
                 });
}

void collect_network_key(Problems& problems, const std::string& key, const Value& v, NetworkLayers& layers) {
    if (key == "sci") {
        if (v.node.IsDefined() && !v.node.IsNull() && !v.node.IsMap()) {
            report(problems, v, "a mapping of SCI parameters");
            return;
        }
        layers.sci_context = v;
        for_each_key(problems, v, sci_keys, "a mapping of SCI parameters",
                     [&](const std::string& k, const Value& value) { layers.sci.insert_or_assign(k, value); });
    } else if (key == "groups") {
        collect_groups(problems, v, layers);
    } else {
        layers.top.insert_or_assign(key, v);
    }
}

void collect_network(Problems& problems, const Value& root, NetworkLayers& layers) {
    for_each_key(
        problems, root, network_keys, "a mapping of network settings",
        [&](const std::string& key, const Value& v) { collect_network_key(problems, key, v, layers); }, true);
}

// An override "key.path=value": the value is YAML, addressed like the network file.
void collect_override(Problems& problems, const std::string& text, const Source& source, NetworkLayers& layers) {
    const auto equal = text.find('=');
    Value whole{YAML::Node(text), YAML::Mark::null_mark(), &source, "--set"};
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
        report(problems, Value{YAML::Node(), YAML::Mark::null_mark(), &source, path}, "a YAML value",
               quote(value_text) + " (" + e.msg + ")");
        return;
    }
    Value v{node, YAML::Mark::null_mark(), &source, path};
    std::vector<std::string> parts;
    std::string part;
    for (std::istringstream in(path); std::getline(in, part, '.');)
        parts.push_back(part);
    if (!path.empty() && path.back() == '.') parts.push_back("");
    if (parts.empty()) {
        report(problems, whole, "key=value such as sci.recv_buffer_no=255");
        return;
    }
    Value key_value{YAML::Node(parts[0]), YAML::Mark::null_mark(), &source, path};
    if (!contains(network_keys, parts[0])) {
        report(problems, key_value, known_keys_text(parts[0], network_keys, true), unknown_key_found(parts[0]));
        return;
    }
    if (parts.size() == 1) {
        collect_network_key(problems, parts[0], v, layers);
    } else if (parts.size() == 2 && parts[0] == "sci") {
        if (!contains(sci_keys, parts[1])) {
            report(problems, key_value, known_keys_text(parts[1], sci_keys), unknown_key_found(parts[1]));
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

// Reads a file into text, refusing unreadable and oversized files.
std::optional<std::string> read_file(Problems& problems, const std::filesystem::path& path, const Source& source) {
    const Value file{YAML::Node(), YAML::Mark::null_mark(), &source, "file"};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        report(problems, file, "a readable YAML file", std::strerror(errno));
        return std::nullopt;
    }
    std::string text;
    char chunk[65536];
    for (;;) {
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int error = errno;
            ::close(fd);
            report(problems, file, "a readable YAML file", std::strerror(error));
            return std::nullopt;
        }
        if (n == 0) break;
        if (text.size() + static_cast<std::size_t>(n) > max_file_size) {
            ::close(fd);
            report(problems, file, "a YAML file of at most 16MiB", "a larger file");
            return std::nullopt;
        }
        text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return text;
}

std::optional<YAML::Node> parse_yaml(Problems& problems, const std::string& text, const Source& source) {
    if (text.size() > max_file_size) {
        problems.add(source, YAML::Mark::null_mark(), "file", "a YAML file of at most 16MiB", "a larger file");
        return std::nullopt;
    }
    try {
        return YAML::Load(text);
    } catch (const YAML::DeepRecursion& e) {
        problems.add(source, e.mark, "yaml", "YAML nested less deeply", "nesting too deep for the parser");
    } catch (const YAML::ParserException& e) {
        problems.add(source, e.mark, "yaml", "valid YAML", "a syntax error: " + e.msg);
    } catch (const YAML::Exception& e) {
        problems.add(source, e.mark, "yaml", "valid YAML", "an error: " + e.msg);
    }
    return std::nullopt;
}

struct NodeEntry {
    NodeConfig node;
    bool id_ok = false;
    Value id_value;
    Value name_value;
    bool name_explicit = false;
    std::optional<Value> port_value;
    std::size_t index = 0;
};

const std::vector<std::string> node_keys = {"id", "name", "host", "port", "machine", "command", "sci"};

void collect_machines(Problems& problems, const Value& v, Configuration& c) {
    for_each_key(
        problems, v, {}, "a mapping of machine names to machine settings",
        [&](const std::string& name, const Value& m) {
            Machine machine;
            machine.name = name;
            machine.where = Location{v.source->name, m.key_mark.line + 1, m.key_mark.column + 1};
            if (!is_name(name)) {
                report(problems, Value{YAML::Node(name), m.key_mark, v.source, m.path}, "a machine " + name_expected);
                return;
            }
            for_each_key(problems, m, {"sci"}, "a mapping of machine settings (sci)",
                         [&](const std::string&, const Value& sci) {
                             for_each_key(problems, sci, {"node_id"}, "a mapping with the SCI node_id",
                                          [&](const std::string&, const Value& id) {
                                              if (auto n = get_integer(problems, id, 0,
                                                                       std::numeric_limits<std::uint32_t>::max(),
                                                                       "an SCI node id"))
                                                  machine.sci_node_id = static_cast<std::uint32_t>(*n);
                                          });
                         });
            c.machines.push_back(machine);
        });
}

void collect_node(Problems& problems, const Value& v, std::size_t index, Configuration& c,
                  const std::set<std::string>& machine_names, std::vector<NodeEntry>& entries) {
    NodeEntry entry;
    entry.index = index;
    entry.node.sci = c.sci;
    entry.node.where = Location{v.source->name, v.mark().line + 1, v.mark().column + 1};
    if (!v.node.IsMap()) {
        report(problems, v, "a mapping of node settings (id, name, host, port, machine, command, sci)");
        return;
    }
    bool has_id = false;
    bool has_name = false;
    std::optional<Value> sci_context;
    std::map<std::string, Value> sci;
    for_each_key(problems, v, node_keys, "a mapping of node settings", [&](const std::string& key, const Value& x) {
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
                    Value w{word, x.mark(), x.source, x.path + "[" + std::to_string(i++) + "]"};
                    if (!word.IsScalar() || word.Scalar().empty()) {
                        report(problems, w, "a non-empty string");
                    } else {
                        entry.node.command.push_back(word.Scalar());
                    }
                }
            } else {
                report(problems, x, expected);
            }
        } else if (key == "sci") {
            if (x.node.IsDefined() && !x.node.IsNull() && !x.node.IsMap()) {
                report(problems, x, "a mapping of SCI parameters");
                return;
            }
            sci_context = x;
            for_each_key(problems, x, sci_keys, "a mapping of SCI parameters",
                         [&](const std::string& k, const Value& value) { sci.insert_or_assign(k, value); });
        }
    });
    if (!has_id) {
        problems.add(*v.source, v.mark(), v.path + ".id", "an integer node id", "nothing");
    }
    if (entry.id_ok && !has_name) entry.node.name = "node-" + std::to_string(entry.node.id);
    for (const auto& [key, value] : sci)
        apply_sci_key(problems, key, value, entry.node.sci);
    if (sci_context && !sci.empty())
        check_sci(problems, entry.node.sci, *v.source, sci_context->mark(), sci_context->path);
    if (!has_name) entry.name_value = Value{YAML::Node(), v.mark(), v.source, v.path + ".name"};
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

// Members are checked against the nodes only when the nodes file was read, so that an
// unreadable nodes file is one error, not one per group member.
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
            Value m{item, v.mark(), v.source, v.path + "[" + std::to_string(i++) + "]"};
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

Configuration load_documents(Problems& problems, const std::optional<std::string>& network_text,
                             const std::optional<std::string>& nodes_text, const std::vector<std::string>& overrides,
                             const Source& network_source, const Source& nodes_source) {
    Configuration c;
    std::optional<YAML::Node> network_root;
    std::optional<YAML::Node> nodes_root;
    if (network_text) network_root = parse_yaml(problems, *network_text, network_source);
    if (nodes_text) nodes_root = parse_yaml(problems, *nodes_text, nodes_source);

    NetworkLayers layers;
    if (network_root) {
        collect_network(problems, Value{*network_root, YAML::Mark::null_mark(), &network_source, ""}, layers);
    }
    std::vector<Source> override_sources;
    override_sources.reserve(overrides.size());
    for (std::size_t i = 0; i < overrides.size(); ++i)
        override_sources.push_back(Source{"--set", 2, true});
    for (std::size_t i = 0; i < overrides.size(); ++i)
        collect_override(problems, overrides[i], override_sources[i], layers);

    resolve_top(problems, layers, c);
    for (const auto& [key, value] : layers.sci)
        apply_sci_key(problems, key, value, c.sci);
    {
        // Consistency errors point at the `sci` mapping, or the first place an SCI key was set.
        const Value* at = layers.sci_context ? &*layers.sci_context : nullptr;
        if (!at && !layers.sci.empty()) at = &layers.sci.begin()->second;
        if (at) check_sci(problems, c.sci, *at->source, at->mark(), "sci");
    }

    if (nodes_root) {
        const Value root{*nodes_root, YAML::Mark::null_mark(), &nodes_source, ""};
        std::optional<Value> nodes_list;
        std::optional<Value> machines;
        for_each_key(problems, root, {"machines", "nodes"}, "a mapping with machines and nodes",
                     [&](const std::string& key, const Value& v) {
                         if (key == "machines") {
                             machines = v;
                         } else {
                             nodes_list = v;
                         }
                     });
        if (machines) collect_machines(problems, *machines, c);
        if (root.node.IsDefined() && (root.node.IsNull() || root.node.IsMap())) {
            if (!nodes_list) {
                problems.add(nodes_source, root.mark(), "nodes", "a non-empty list of nodes", "nothing");
            } else if (!nodes_list->node.IsSequence() || nodes_list->node.size() == 0) {
                report(problems, *nodes_list, "a non-empty list of nodes");
            } else {
                std::vector<NodeEntry> entries;
                std::set<std::string> machine_names;
                for (const auto& m : c.machines)
                    machine_names.insert(m.name);
                std::size_t i = 0;
                for (const auto& item : nodes_list->node) {
                    Value v{item, nodes_list->mark(), &nodes_source, "nodes[" + std::to_string(i) + "]"};
                    collect_node(problems, v, i, c, machine_names, entries);
                    ++i;
                }
                check_unique_nodes(problems, entries);
                std::set<NodeId> ids;
                for (auto& e : entries)
                    if (e.id_ok && ids.insert(e.node.id).second) c.nodes.push_back(std::move(e.node));
            }
        }
    }
    resolve_groups(problems, layers, nodes_source.name, c, nodes_root.has_value());
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

std::optional<std::uint64_t> parse_size(const std::string& text) {
    const auto result = parse_size_detailed(text);
    if (result.status != SizeStatus::ok) return std::nullopt;
    return result.bytes;
}

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

} // namespace msgpass::config
