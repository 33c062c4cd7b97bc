// The library's logger (BMI's gossip): connection events, losses, retries and
// refusals, each line tagged with its subsystem and level. What is written is set by
// the network file's `log:` section when a factory is made (log::configure) and by
// the environment on top of it: MSGPASS_LOG=debug, or MSGPASS_LOG=warn,tcp=debug
// (a default level, then subsystem=level pairs), and MSGPASS_LOG_FILE=path. The
// default is info to stderr, the lines a user saw before the logger existed. A call
// site tests log::enabled first (one relaxed atomic load), so a line below the
// level costs no formatting: MSGPASS_LOG(tcp, debug, "text " + ...) does both.
// Written through spdlog (Debian's libspdlog-dev, header-only, used in log.cpp alone).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

namespace msgpass::config {
struct Configuration;
}

namespace msgpass::log {

enum class Level : int { trace = 0, debug, info, warn, error, off };
enum class Subsystem : int { framework = 0, sci, tcp, udp, auto_, comm, mpi, launcher, count };

[[nodiscard]] const char* to_string(Level level) noexcept;
[[nodiscard]] const char* to_string(Subsystem subsystem) noexcept;
[[nodiscard]] std::optional<Level> level_from(std::string_view name) noexcept;
[[nodiscard]] std::optional<Subsystem> subsystem_from(std::string_view name) noexcept;

namespace detail {
// The lowest level each subsystem writes (constant-initialised: info).
inline std::atomic<int> thresholds[static_cast<int>(Subsystem::count)] = {2, 2, 2, 2, 2, 2, 2, 2};
} // namespace detail

[[nodiscard]] inline bool enabled(Subsystem subsystem, Level level) noexcept {
    return static_cast<int>(level) >= detail::thresholds[static_cast<int>(subsystem)].load(std::memory_order_relaxed);
}

// Writes one line (no trailing newline needed) when enabled.
void write(Subsystem subsystem, Level level, std::string_view text);

// The `log:` section of configuration, then MSGPASS_LOG and MSGPASS_LOG_FILE over
// it. Every factory calls it when it is made; the last call wins.
void configure(const config::Configuration& configuration);
// The same from a settings text as MSGPASS_LOG takes ("warn,tcp=debug") and a file
// ("" for stderr); throws UsageError naming what was wrong.
void configure(std::string_view settings, const std::string& file);

} // namespace msgpass::log

// MSGPASS_LOG(tcp, debug, expression): builds and writes the line only when
// enabled.
#define MSGPASS_LOG(subsystem, level, ...)                                                                             \
    do {                                                                                                               \
        if (::msgpass::log::enabled(::msgpass::log::Subsystem::subsystem, ::msgpass::log::Level::level))               \
            ::msgpass::log::write(::msgpass::log::Subsystem::subsystem, ::msgpass::log::Level::level, (__VA_ARGS__));  \
    } while (0)
