// The runner and printer of msgpass-bench: the progress line, the run of the floors
// (--reference), the run of the chosen points with a ready driver, and the human
// tables (the list of results, and the default table beside the SCI seed's 1999
// figures and the floors of the same run). JSON lines go out as results come.
#pragma once

#include "options.hpp"
#include "patterns.hpp"
#include "report.hpp"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

namespace msgpass::bench {

class Progress {
public:
    Progress() : on_(::isatty(STDERR_FILENO) != 0) {}
    void show(const std::string& text) const {
        if (on_) std::fprintf(stderr, "\r\033[K%s", text.c_str());
    }
    void clear() const {
        if (on_) std::fprintf(stderr, "\r\033[K");
    }

private:
    bool on_;
};

// The JSON line of one result on stdout, flushed.
void emit_json(const Result& r);

// The list of results, one row each (patterns other than the default table).
void print_results(const std::vector<Result>& results);

// Two spinning processes on one CPU take turns by time slices: a cache-line
// ping-pong of milliseconds instead of a fraction of a microsecond. Every figure of
// such a run is about the scheduler, not msgpass, so say so.
void warn_if_shared_cpu(const std::map<std::uint64_t, Result>& floor);

// The floors of s.sizes (--reference); JSON lines as they come when s.json.
std::vector<Result> run_reference(const Settings& s, const Progress& progress);

// The default table: pingpong and stream per size, beside Table 1 and the floors.
void print_default_table(const std::vector<std::uint64_t>& sizes, const std::map<std::uint64_t, Result>& ping,
                         const std::map<std::uint64_t, Result>& stream, const std::map<std::uint64_t, Result>& floor,
                         const std::map<std::uint64_t, Result>& ring, const std::string& technology);

// Runs the chosen points with a ready driver; returns the results (printed as JSON
// lines as they come when --json).
// Sizes in the outer loop, so that before_size() (the floors of the table) runs
// next to the points it is compared with, under the same load of the machine.
std::vector<Result> drive(Driver& driver, const Settings& s, const std::vector<std::string>& patterns,
                          const Progress& progress, const std::function<void(std::uint64_t)>& before_size = {});

// --layer comm: per size, the Node path's and the communicator's ping-pong p50
// latency and stream rate (same run) and their ratios.
void print_comm_table(const std::vector<std::uint64_t>& sizes, const std::vector<Result>& node,
                      const std::vector<Result>& through_comm, const std::string& technology);

} // namespace msgpass::bench
