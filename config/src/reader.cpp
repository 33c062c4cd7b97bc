// The generic validating YAML reader: the checks of every kind of value (integers,
// sizes, durations, booleans, names), the reporting of problems at their file, line
// and column, and the reading and parsing of a file. See reader.hpp.
#include "reader.hpp"

#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <unistd.h>

namespace msgpass::config {

std::string Location::str() const {
    return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

namespace detail {

namespace {

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

// Appends c, with a line break as \n and other control characters as \xNN, so that
// every problem stays on one line.
void append_escaped(std::string& out, unsigned char c) {
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

// A key path as a problem shows it: escaped, as found values are (a quoted YAML key
// may hold a line break).
std::string escaped(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text)
        append_escaped(out, static_cast<unsigned char>(c));
    return out;
}

} // namespace

void Problems::add(const Source& source, const YAML::Mark& mark, const std::string& path, const std::string& expected,
                   const std::string& found) {
    int line = 0;
    int column = 0;
    if (!source.fixed && !mark.is_null()) {
        line = mark.line + 1;
        column = mark.column + 1;
    }
    list_.push_back({source.rank, line, column,
                     Location{source.name, line, column}.str() + ": " + escaped(path) + ": expected " + expected +
                         ", found " + found});
}

void Problems::add(const Location& at, const std::string& path, const std::string& expected, const std::string& found) {
    const auto rank = ranks_.find(at.file);
    list_.push_back({rank == ranks_.end() ? 0 : rank->second, at.line, at.column,
                     at.str() + ": " + escaped(path) + ": expected " + expected + ", found " + found});
}

void Problems::raise() {
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

Location Item::location() const {
    const auto at = mark();
    if (source->fixed || at.is_null()) return Location{source->name, 0, 0};
    return Location{source->name, at.line + 1, at.column + 1};
}

std::string quote(const std::string& text) {
    constexpr std::size_t limit = 60;
    std::string out = "'";
    for (std::size_t i = 0; i < text.size() && i < limit; ++i)
        append_escaped(out, static_cast<unsigned char>(text[i]));
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

void report(Problems& problems, const Item& v, const std::string& expected, const std::string& found) {
    problems.add(*v.source, v.mark(), v.path, expected, found.empty() ? describe(v.node) : found);
}

std::string join(const std::vector<std::string>& words, const std::string& separator) {
    std::string out;
    for (const auto& w : words)
        out += (out.empty() ? "" : separator) + w;
    return out;
}

std::string known_keys_text(const std::string& key, const std::vector<std::string>& known,
                            const std::string& suggestion) {
    const std::string list = known.empty() ? "none" : join(known);
    if (!suggestion.empty()) return "a known key (did you mean '" + suggestion + "'? known: " + list + ")";
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
    return text + "known: " + list + ")";
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

std::optional<std::string> get_scalar(Problems& problems, const Item& v, const std::string& expected) {
    if (!v.node.IsDefined() || !v.node.IsScalar()) {
        report(problems, v, expected);
        return std::nullopt;
    }
    return v.node.Scalar();
}

std::optional<std::uint64_t> get_integer(Problems& problems, const Item& v, std::uint64_t low, std::uint64_t high,
                                         const std::string& what) {
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

std::optional<std::uint64_t> get_size(Problems& problems, const Item& v, std::uint64_t high) {
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

std::optional<bool> get_bool(Problems& problems, const Item& v) {
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

std::string duration_text(std::chrono::milliseconds duration) {
    const auto ms = duration.count();
    if (ms >= 3600000 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + (ms == 3600000 ? " hour" : " hours");
    if (ms >= 60000 && ms % 60000 == 0) return std::to_string(ms / 60000) + " min";
    if (ms >= 1000 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
    return std::to_string(ms) + "ms";
}

std::optional<std::chrono::milliseconds> get_duration(Problems& problems, const Item& v, std::chrono::milliseconds low,
                                                      std::chrono::milliseconds high) {
    const std::string expected = "a duration from " + duration_text(low) + " to " + duration_text(high) +
                                 " such as 500ms, 2.5s or 1000 (milliseconds)";
    auto text = get_scalar(problems, v, expected);
    if (!text) return std::nullopt;
    const auto ms = parse_duration_ms(*text);
    if (!ms || *ms < low.count() || *ms > high.count()) {
        report(problems, v, expected);
        return std::nullopt;
    }
    return std::chrono::milliseconds(*ms);
}

bool contains(const std::vector<std::string>& list, const std::string& word) {
    return std::find(list.begin(), list.end(), word) != list.end();
}

std::optional<std::string> read_file(Problems& problems, const std::filesystem::path& path, const Source& source) {
    const Item file{YAML::Node(), YAML::Mark::null_mark(), &source, "file"};
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

} // namespace detail

const std::string& Value::path() const noexcept {
    return item_->path;
}

Location Value::location() const {
    return item_->location();
}

std::optional<std::string> Value::text(const std::string& expected) const {
    return detail::get_scalar(*problems_, *item_, expected);
}

std::optional<std::uint64_t> Value::integer(std::uint64_t low, std::uint64_t high, const std::string& what) const {
    return detail::get_integer(*problems_, *item_, low, high, what);
}

std::optional<std::uint64_t> Value::size(std::uint64_t high) const {
    return detail::get_size(*problems_, *item_, high);
}

std::optional<std::chrono::milliseconds> Value::duration(std::chrono::milliseconds low,
                                                         std::chrono::milliseconds high) const {
    return detail::get_duration(*problems_, *item_, low, high);
}

std::optional<bool> Value::boolean() const {
    return detail::get_bool(*problems_, *item_);
}

std::optional<double> Value::number(const std::string& expected) const {
    const auto written = detail::get_scalar(*problems_, *item_, expected);
    if (!written) return std::nullopt;
    auto x = detail::parse_double(*written);
    if (!x) detail::report(*problems_, *item_, expected);
    return x;
}

void Value::report(const std::string& expected, const std::string& found) const {
    detail::report(*problems_, *item_, expected, found);
}

void Value::report_key(const std::string& key, const std::string& expected, const std::string& found) const {
    problems_->add(*item_->source, item_->mark(), item_->path + "." + key, expected, found);
}

void Reporter::report(const Location& at, const std::string& path, const std::string& expected,
                      const std::string& found) const {
    problems_->add(at, path, expected, found);
}

std::optional<std::uint64_t> parse_size(const std::string& text) {
    const auto result = detail::parse_size_detailed(text);
    if (result.status != detail::SizeStatus::ok) return std::nullopt;
    return result.bytes;
}

} // namespace msgpass::config
