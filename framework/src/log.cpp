// The library's logger (msgpass/log.hpp): thresholds per subsystem, and one spdlog
// logger writing to stderr or a file. spdlog and fmt are used header-only here alone
// (SPDLOG_FMT_EXTERNAL, FMT_HEADER_ONLY), so nothing of them reaches the library's
// users or its packages' dependencies.
#include <msgpass/config.hpp>
#include <msgpass/config/log_options.hpp>
#include <msgpass/error.hpp>
#include <msgpass/log.hpp>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace msgpass::log {

namespace {

constexpr std::array<const char*, 6> level_names{"trace", "debug", "info", "warn", "error", "off"};
constexpr std::array<const char*, static_cast<int>(Subsystem::count)> subsystem_names{
    "framework", "sci", "tcp", "udp", "auto", "comm", "mpi", "launcher"};

struct Sink {
    std::mutex mutex;
    std::shared_ptr<spdlog::logger> logger;
    std::string file; // "" for stderr
};

Sink& sink() {
    static Sink s;
    return s;
}

// The logger for file ("" for stderr), made anew only when the place changed.
void open_locked(Sink& s, const std::string& file) {
    if (s.logger && s.file == file) return;
    std::shared_ptr<spdlog::logger> logger;
    if (file.empty()) {
        logger = std::make_shared<spdlog::logger>("msgpass", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        logger->set_pattern("%v"); // the lines as the user saw them before the logger
    } else {
        try {
            logger = std::make_shared<spdlog::logger>("msgpass",
                                                      std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, false));
        } catch (const spdlog::spdlog_ex& e) {
            throw UsageError("msgpass: the log file '" + file + "' cannot be opened: " + e.what());
        }
        logger->set_pattern("%Y-%m-%dT%H:%M:%S.%f %P [%l] %v");
        logger->flush_on(spdlog::level::trace); // each line whole in the file at once (a dying process loses none)
    }
    logger->set_level(spdlog::level::trace); // the thresholds decide
    s.logger = std::move(logger);
    s.file = file;
}

spdlog::level::level_enum spdlog_level(Level level) {
    switch (level) {
    case Level::trace:
        return spdlog::level::trace;
    case Level::debug:
        return spdlog::level::debug;
    case Level::info:
        return spdlog::level::info;
    case Level::warn:
        return spdlog::level::warn;
    case Level::error:
        return spdlog::level::err;
    case Level::off:
        break;
    }
    return spdlog::level::off;
}

// "warn,tcp=debug,udp=trace" into thresholds (every subsystem's, then each named
// one's); throws UsageError naming the first wrong part.
std::array<int, static_cast<int>(Subsystem::count)> parse(std::string_view settings, Level base,
                                                          std::array<int, static_cast<int>(Subsystem::count)> out) {
    bool first = true;
    while (!settings.empty()) {
        const auto comma = settings.find(',');
        const std::string_view part = settings.substr(0, comma);
        settings = comma == std::string_view::npos ? std::string_view{} : settings.substr(comma + 1);
        if (part.empty()) continue;
        const auto eq = part.find('=');
        if (eq == std::string_view::npos) {
            auto l = level_from(part);
            if (!l || !first)
                throw UsageError("msgpass: MSGPASS_LOG: '" + std::string(part) +
                                 "' is not a level (trace, debug, info, warn, error, off) first, nor subsystem=level");
            base = *l;
            out.fill(static_cast<int>(base));
        } else {
            auto sub = subsystem_from(part.substr(0, eq));
            auto l = level_from(part.substr(eq + 1));
            if (!sub || !l)
                throw UsageError("msgpass: MSGPASS_LOG: '" + std::string(part) +
                                 "' is not subsystem=level (subsystems: framework, sci, tcp, udp, auto, comm, mpi, "
                                 "launcher; levels: trace, debug, info, warn, error, off)");
            out[static_cast<int>(*sub)] = static_cast<int>(*l);
        }
        first = false;
    }
    return out;
}

void apply_levels(const std::array<int, static_cast<int>(Subsystem::count)>& levels, const std::string& file) {
    auto& s = sink();
    std::lock_guard lock(s.mutex);
    open_locked(s, file);
    for (int i = 0; i < static_cast<int>(Subsystem::count); ++i)
        detail::thresholds[i].store(levels[static_cast<std::size_t>(i)], std::memory_order_relaxed);
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
}

// A process that never makes a factory (a tool, a test of one layer) still follows
// the environment.
const bool from_environment = [] {
    try {
        if (!env("MSGPASS_LOG").empty() || !env("MSGPASS_LOG_FILE").empty())
            configure(env("MSGPASS_LOG"), env("MSGPASS_LOG_FILE"));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s; logging at info to stderr\n", e.what());
    }
    return true;
}();

} // namespace

const char* to_string(Level level) noexcept {
    return level_names[static_cast<std::size_t>(level)];
}

const char* to_string(Subsystem subsystem) noexcept {
    return subsystem_names[static_cast<std::size_t>(subsystem)];
}

std::optional<Level> level_from(std::string_view name) noexcept {
    for (std::size_t i = 0; i < level_names.size(); ++i)
        if (name == level_names[i]) return static_cast<Level>(i);
    return std::nullopt;
}

std::optional<Subsystem> subsystem_from(std::string_view name) noexcept {
    for (std::size_t i = 0; i < subsystem_names.size(); ++i)
        if (name == subsystem_names[i]) return static_cast<Subsystem>(i);
    return std::nullopt;
}

void write(Subsystem subsystem, Level level, std::string_view text) {
    if (!enabled(subsystem, level) || level == Level::off) return;
    auto& s = sink();
    std::shared_ptr<spdlog::logger> logger;
    bool to_stderr = true;
    {
        std::lock_guard lock(s.mutex); // configure() may change the logger meanwhile
        if (!s.logger) open_locked(s, "");
        logger = s.logger;
        to_stderr = s.file.empty();
    }
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    if (to_stderr)
        logger->log(spdlog_level(level), "{}", text);
    else
        logger->log(spdlog_level(level), "{}: {}", to_string(subsystem), text);
}

void configure(std::string_view settings, const std::string& file) {
    std::array<int, static_cast<int>(Subsystem::count)> levels{};
    levels.fill(static_cast<int>(Level::info));
    apply_levels(parse(settings, Level::info, levels), file);
}

void configure(const config::Configuration& configuration) {
    const auto& o = configuration.section<config::LogOptions>();
    std::array<int, static_cast<int>(Subsystem::count)> levels{};
    levels.fill(static_cast<int>(level_from(o.level).value_or(Level::info)));
    for (const auto& [name, level] : o.subsystems)
        if (auto sub = subsystem_from(name))
            levels[static_cast<std::size_t>(*sub)] = static_cast<int>(level_from(level).value_or(Level::info));
    std::string file = o.file;
    if (const auto v = env("MSGPASS_LOG_FILE"); !v.empty()) file = v;
    try {
        levels = parse(env("MSGPASS_LOG"), Level::info, levels);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s; the log: section's levels apply\n", e.what());
    }
    apply_levels(levels, file);
}

} // namespace msgpass::log
