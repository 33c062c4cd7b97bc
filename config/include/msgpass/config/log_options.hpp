// The `log:` section of the network file: what the library's logger writes
// (msgpass/log.hpp, docs/configuration.md "Logging"). Not a technology: config reads
// it itself, like `comm:`, and stores it among the sections:
// configuration.section<config::LogOptions>() (defaults when not written). The
// environment variables MSGPASS_LOG and MSGPASS_LOG_FILE override it at run time.
#pragma once

#include <msgpass/config/value.hpp>

#include <map>
#include <string>
#include <vector>

namespace msgpass::config {

struct LogOptions {
    // The level of every subsystem without a level of its own: trace, debug, info,
    // warn, error or off.
    std::string level = "info";
    // Where the lines go: empty for stderr, else a file (appended to, created when
    // missing; a relative path is the working directory's).
    std::string file;
    // Per subsystem (framework, sci, tcp, udp, auto, comm, mpi, launcher): its level.
    std::map<std::string, std::string> subsystems;

    static const std::vector<std::string>& keys();
    static const std::vector<std::string>& level_names();
    void set(const std::string& key, const Value& value);
};

} // namespace msgpass::config
