// What a technology's options see of the configuration files while they load: one
// value at a time, with the readers of the generic validating reader (integers, sizes,
// durations, booleans, numbers, text). A reader checks the value; a wrong one is
// reported as "file:line:column: key.path: expected X, found Y" and the reader returns
// nullopt. load() gathers every problem of both files and the overrides and throws
// them together as one ConfigError, so a reader never throws.
#pragma once

#include <msgpass/sizes.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace msgpass::config {

// Where a value came from, for error messages ("network.yaml:12:5").
struct Location {
    std::string file;
    int line = 0;   // 1-based; 0 when unknown (defaults, --set)
    int column = 0; // 1-based
    [[nodiscard]] std::string str() const;
};

// Any size key above this is taken as a typo ("huge").
inline constexpr std::uint64_t max_size = 16 * GiB;

namespace detail {
struct Item;
class Problems;
} // namespace detail

// One value of the network file, the nodes file or a --set override. Made by the
// loader and valid only during the call that received it.
class Value {
public:
    Value(const detail::Item& item, detail::Problems& problems) noexcept : item_(&item), problems_(&problems) {}

    // The key path errors name: "sci.recv_buffer_no", "nodes[2].sci.recv_seg_size".
    [[nodiscard]] const std::string& path() const noexcept;
    // Where it was written: file, line and column, or "--set:0:0".
    [[nodiscard]] Location location() const;

    // Any scalar, as written.
    [[nodiscard]] std::optional<std::string> text(const std::string& expected) const;
    // Decimal or 0x hexadecimal, from low to high: "expected <what> from <low> to <high>".
    [[nodiscard]] std::optional<std::uint64_t> integer(std::uint64_t low, std::uint64_t high,
                                                       const std::string& what = "an integer") const;
    // 1 byte to high, with an optional unit (8KiB, 16MiB; docs/configuration.md).
    [[nodiscard]] std::optional<std::uint64_t> size(std::uint64_t high = max_size) const;
    // Milliseconds, or a number with ms, s or min, from low to high.
    [[nodiscard]] std::optional<std::chrono::milliseconds> duration(std::chrono::milliseconds low,
                                                                    std::chrono::milliseconds high) const;
    // true/false, yes/no, on/off, or a number (0 is false; the seed's rule).
    [[nodiscard]] std::optional<bool> boolean() const;
    // A finite decimal number; the caller checks its range and reports with report().
    [[nodiscard]] std::optional<double> number(const std::string& expected) const;

    // Reports this value: "path: expected <expected>, found <found>" (found defaults
    // to the value as written).
    void report(const std::string& expected, const std::string& found = {}) const;
    // Reports at this value's place under the path "<path>.<key>": for rules that tie
    // several keys of a section together, reported at the section.
    void report_key(const std::string& key, const std::string& expected, const std::string& found) const;

private:
    const detail::Item* item_;
    detail::Problems* problems_;
};

// Reports what a technology finds across the loaded configuration (a rule over
// several nodes or machines) at the place of a value its options kept
// (Value::location()). Made by the loader for TechnologySchema::check.
class Reporter {
public:
    explicit Reporter(detail::Problems& problems) noexcept : problems_(&problems) {}
    // "<at>: <path>: expected <expected>, found <found>".
    void report(const Location& at, const std::string& path, const std::string& expected,
                const std::string& found) const;

private:
    detail::Problems* problems_;
};

} // namespace msgpass::config
