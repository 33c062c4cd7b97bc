// A 256-process partition on this host (issue 31): msgpass-bench's fanin pattern
// starts 255 members and a receiver in a partition of its own (named after its pid,
// stale segments removed), every member sends a message at once, a few more at a low
// rate and an end marker, then reports how many it sent; the receiver gathers them
// through one group. The test checks that every member reached the receiver and that
// nothing was lost, and prints the start time (until the receiver had heard from every
// member) and the memory per node. Most members are idle (asleep) most of the time.
// The members run with a lighter AddressSanitizer (no quarantine, short allocation
// stacks; leaks still detected) and sleep in their sci waits: under ASan 256 processes
// with the default options need about 60 MiB each (docs/benchmarks.md, the
// seventeenth session). The run is alone on the machine (RUN_SERIAL).
#include "../support/json.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

// msgpass-bench names its partition bench-PID and removes its segments when it ends;
// a run killed (hung, or a sanitizer's abort) leaves them: removed here by that name.
void remove_segments_of(pid_t bench) {
    const std::string partition = ".bench-" + std::to_string(bench) + ".";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
        const auto name = entry.path().filename().string();
        if (name.find(partition) != std::string::npos) std::filesystem::remove(entry.path(), ec);
    }
}

struct Run {
    std::vector<std::string> lines;
    int status = -1;
};

// Runs msgpass-bench's fanin pattern with `members` members, with the environment
// above; collects its stdout lines (the JSON result) and stderr merged after them.
Run run_fanin(unsigned members) {
    std::string asan = std::getenv("ASAN_OPTIONS") != nullptr ? std::getenv("ASAN_OPTIONS") : "";
    asan += std::string(asan.empty() ? "" : ":") +
            "quarantine_size_mb=0:thread_local_quarantine_size_kb=0:malloc_context_size=2";
    std::string command = "exec env ASAN_OPTIONS='" + asan +
                          "' MSGPASS_SCI_WAIT=sleep '" MSGPASS_BENCH "' --json --pattern fanin --members " +
                          std::to_string(members) +
                          " --sizes 64 --seconds 1 --rate 2 --set sci.max_outst_buffers=1 2>&1";
    msgpass::test::ChildProcess child({"/bin/sh", "-c", command});
    Run run;
    for (;;) {
        auto line = child.read_line(240s);
        if (line.empty()) break; // EOF or no line for 240 s
        run.lines.push_back(line);
    }
    child.kill(SIGKILL); // only matters when it hung; its members die with it (PR_SET_PDEATHSIG)
    run.status = child.wait();
    remove_segments_of(child.pid());
    return run;
}

// The number of member key of a parsed line, if it has one.
std::optional<double> number(const msgpass::test::Json& line, const std::string& key) {
    const auto it = line.members.find(key);
    if (it == line.members.end() || it->second.kind != msgpass::test::Json::Kind::number) return std::nullopt;
    return it->second.number;
}

std::string all_of(const Run& run) {
    std::string all;
    for (const auto& line : run.lines)
        all += line + "\n";
    return all;
}

// The result line of a run that must have passed: exit 0, one JSON line for fanin
// with every member, none lost. Nothing when there is no such line.
std::optional<msgpass::test::Json> expect_complete(const Run& run, unsigned members) {
    const auto all = all_of(run);
    EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << "status " << run.status << "\n" << all;
    std::optional<msgpass::test::Json> found;
    std::string result;
    for (const auto& line : run.lines) {
        if (line.empty() || line.front() != '{') continue; // stderr merged in: not JSON
        try {
            auto j = msgpass::test::parse_json(line);
            const auto text = [&](const char* key) {
                const auto it = j.members.find(key);
                return it == j.members.end() ? std::string() : it->second.text;
            };
            if (text("technology") == "sci" && text("pattern") == "fanin") {
                found = std::move(j);
                result = line;
            }
        } catch (const std::exception& e) {
            ADD_FAILURE() << "not JSON (" << e.what() << "): " << line;
        }
    }
    EXPECT_TRUE(found) << all;
    if (!found) return found;
    const auto& r = *found;
    EXPECT_EQ(number(r, "members"), std::optional<double>(members)) << result;
    // Every member's messages (its first, the timed ones, the end marker) arrived.
    EXPECT_EQ(number(r, "lost"), std::optional<double>(0)) << result;
    // The first point times the start: until the receiver heard from every member.
    EXPECT_TRUE(number(r, "start_s").has_value()) << result;
    EXPECT_GT(number(r, "iterations").value_or(0), 0) << result;
    EXPECT_GT(number(r, "member_rss_kib").value_or(0), 0) << result;
    EXPECT_GT(number(r, "shm_kib_per_node").value_or(0), 0) << result;
    return found;
}

TEST(Partition, TwoHundredFiftySixProcessesOnThisHostReachTheReceiverAndLoseNothing) {
    const auto small = run_fanin(3);
    const auto four = expect_complete(small, 3);
    const auto big = run_fanin(255);
    const auto many = expect_complete(big, 255);
    if (!four || !many) return;
    // The figures, for docs/benchmarks.md (never asserted: timing and RSS depend on the
    // build and the machine).
    auto show = [](const char* what, const msgpass::test::Json& line) {
        std::cout << what << ": start " << number(line, "start_s").value_or(-1) << " s, member RSS "
                  << number(line, "member_rss_kib").value_or(-1) << " KiB, receiver RSS "
                  << number(line, "rss_kib").value_or(-1) << " KiB, /dev/shm "
                  << number(line, "shm_kib_per_node").value_or(-1) << " KiB and "
                  << number(line, "shm_objects_per_node").value_or(-1) << " objects per node, "
                  << number(line, "iterations").value_or(-1) << " timed messages\n";
    };
    show("4 processes", *four);
    show("256 processes", *many);
}

} // namespace
