// The generic validating YAML reader under the network and nodes schemas: text is
// parsed by yaml-cpp into a tree, and every value is checked here by hand (type,
// syntax, range) before it reaches a Configuration, so that no file content can throw
// anything but one ConfigError listing every problem as
// "file:line:column: key.path: expected X, found Y". Nothing here knows a key of
// either file.
#pragma once

#include <msgpass/config.hpp>

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace msgpass::config::detail {

// Files larger than this are refused before parsing: a configuration is a few KiB,
// and the cap bounds the memory and time a wrong path (a log, /dev/zero) can cost.
constexpr std::size_t max_file_size = 16 * MiB;
constexpr std::size_t max_name_length = 64;

// Where text came from. Locations in a file come from yaml-cpp marks; a fixed source
// (--set) has no positions and reports name:0:0.
struct Source {
    std::string name;
    int rank = 0; // order of the sources in the report
    bool fixed = false;
};

// Every problem found, reported at once in source and file order.
class Problems {
public:
    void add(const Source& source, const YAML::Mark& mark, const std::string& path, const std::string& expected,
             const std::string& found);
    // The same at a location kept from a value; its file is one of the sources
    // announced with know(), which gives its place in the report.
    void add(const Location& at, const std::string& path, const std::string& expected, const std::string& found);
    void know(const Source& source) { ranks_.insert_or_assign(source.name, source.rank); }
    [[nodiscard]] bool empty() const { return list_.empty(); }
    // Throws one ConfigError with a line per problem (at most a hundred).
    [[noreturn]] void raise();

private:
    struct Problem {
        int rank;
        int line;
        int column;
        std::string text;
    };
    std::vector<Problem> list_;
    std::map<std::string, int> ranks_; // source name -> rank
};

// A value as found in a file or an override, with what is needed to report on it.
struct Item {
    YAML::Node node;     // may be a Null node when the key has no value
    YAML::Mark key_mark; // where the key was written, for values without a position
    const Source* source = nullptr;
    std::string path; // "sci.recv_buffer_no", "nodes[2].port"

    [[nodiscard]] YAML::Mark mark() const {
        if (node.IsDefined() && !node.IsNull() && !node.Mark().is_null()) return node.Mark();
        return key_mark;
    }
    [[nodiscard]] Location location() const;
};

// 'text', cut at 60 characters, control characters escaped.
std::string quote(const std::string& text);
// What a node holds, for "found ...": 'text', a list, a mapping, nothing.
std::string describe(const YAML::Node& node);
void report(Problems& problems, const Item& v, const std::string& expected, const std::string& found = {});
std::string join(const std::vector<std::string>& words, const std::string& separator = ", ");
bool contains(const std::vector<std::string>& list, const std::string& word);

// "a known key (did you mean 'x'? known: a, b)" for an unknown-key error; a non-empty
// suggestion replaces the guess from the closest known key.
std::string known_keys_text(const std::string& key, const std::vector<std::string>& known,
                            const std::string& suggestion = {});
std::string unknown_key_found(const std::string& key);

extern const std::string name_expected; // "name of 1 to 64 characters [A-Za-z0-9_.-]"
bool is_name(const std::string& text);

std::string size_text(std::uint64_t bytes);

// Readers: each checks the value, reports what was wrong and returns nullopt, or
// returns the value.
std::optional<std::string> get_scalar(Problems& problems, const Item& v, const std::string& expected);
std::optional<std::uint64_t> get_integer(Problems& problems, const Item& v, std::uint64_t low, std::uint64_t high,
                                         const std::string& what = "an integer");
std::optional<std::uint64_t> get_size(Problems& problems, const Item& v, std::uint64_t high = max_size);
std::optional<bool> get_bool(Problems& problems, const Item& v);
std::optional<std::chrono::milliseconds> get_duration(Problems& problems, const Item& v, std::chrono::milliseconds low,
                                                      std::chrono::milliseconds high);
std::optional<double> parse_double(const std::string& text);
// A duration in milliseconds: an integer (milliseconds), or a number with the unit
// ms, s or min, optionally after one space ("2.5s", "500 ms"). Negative values are
// returned as such for the caller to refuse.
std::optional<std::int64_t> parse_duration_ms(const std::string& text);

// Iterates over a mapping, checking that keys are scalars and not repeated; calls
// visit(key, value) for each good key. A Null node is an empty mapping. known(key,
// item) may refuse a key before it is counted (it reports why and returns false).
template <typename Known, typename Visit>
void for_each_entry(Problems& problems, const Item& map, const std::string& what, Known known, Visit visit) {
    if (!map.node.IsDefined() || map.node.IsNull()) return;
    if (!map.node.IsMap()) {
        report(problems, map, what);
        return;
    }
    std::set<std::string> seen;
    const std::string prefix = map.path.empty() ? "" : map.path + ".";
    for (auto it = map.node.begin(); it != map.node.end(); ++it) {
        const YAML::Node key = it->first;
        Item key_value{key, key.Mark(), map.source, map.path};
        if (!key.IsScalar()) {
            report(problems, key_value, "a key name", describe(key));
            continue;
        }
        const std::string& name = key.Scalar();
        key_value.path = prefix + name;
        if (!known(name, key_value)) continue;
        if (!seen.insert(name).second) {
            report(problems, key_value, "each key once", "a repeated key " + quote(name));
            continue;
        }
        visit(name, Item{it->second, key.Mark(), map.source, prefix + name});
    }
}

// The same for a mapping whose keys the file chooses (group and machine names).
template <typename Visit>
void for_each_entry(Problems& problems, const Item& map, const std::string& what, Visit visit) {
    for_each_entry(
        problems, map, what, [](const std::string&, const Item&) { return true; }, visit);
}

// The same for a mapping of known keys: an unknown key is reported with the closest
// known one, or with suggest(key) when that is not empty ("sci.recv_buffer_no" for a
// key of the sci section written at the top level).
template <typename Visit, typename Suggest>
void for_each_key(Problems& problems, const Item& map, const std::vector<std::string>& known, const std::string& what,
                  Visit visit, Suggest suggest) {
    for_each_entry(
        problems, map, what,
        [&](const std::string& name, const Item& key) {
            if (contains(known, name)) return true;
            report(problems, key, known_keys_text(name, known, suggest(name)), unknown_key_found(name));
            return false;
        },
        visit);
}

template <typename Visit>
void for_each_key(Problems& problems, const Item& map, const std::vector<std::string>& known, const std::string& what,
                  Visit visit) {
    for_each_key(problems, map, known, what, visit, [](const std::string&) { return std::string{}; });
}

// Reads a file into text, refusing unreadable and oversized files.
std::optional<std::string> read_file(Problems& problems, const std::filesystem::path& path, const Source& source);
// Parses YAML text; a syntax error is one problem at its line and column.
std::optional<YAML::Node> parse_yaml(Problems& problems, const std::string& text, const Source& source);

} // namespace msgpass::config::detail
