// Runs msgpass-bench briefly and checks what it prints: with --json, only JSON
// objects, one per line, with the keys of shared/design/BENCHMARKS.md; and a clear
// non-zero exit when its peer dies. Timing is never asserted. Each run starts its own
// peers in a partition named after its pid, so runs in parallel never collide.
#include "../support/json.hpp"
#include "../support/netns.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

using namespace std::chrono_literals;

using msgpass::test::Json;
using msgpass::test::parse_json;

struct Run {
    std::vector<std::string> lines;
    int status = -1;
};

// Runs msgpass-bench with args; collects stdout (and stderr when merge) until EOF.
Run run_argv(const std::vector<std::string>& argv,
             const std::function<void(msgpass::test::ChildProcess&)>& during = {});

Run run_bench(const std::vector<std::string>& args, bool merge_stderr = false,
              const std::function<void(msgpass::test::ChildProcess&)>& during = {}) {
    std::vector<std::string> argv;
    if (merge_stderr) {
        std::string command = "exec '" MSGPASS_BENCH "'";
        for (const auto& a : args)
            command += " '" + a + "'";
        argv = {"/bin/sh", "-c", command + " 2>&1"};
    } else {
        argv = {MSGPASS_BENCH};
        argv.insert(argv.end(), args.begin(), args.end());
    }
    return run_argv(argv, during);
}

// Runs argv to its end (at most 120 s without a line), collecting its stdout lines.
Run run_argv(const std::vector<std::string>& argv, const std::function<void(msgpass::test::ChildProcess&)>& during) {
    msgpass::test::ChildProcess child(argv);
    if (during) during(child);
    Run run;
    for (;;) {
        auto line = child.read_line(120s);
        if (line.empty()) break; // EOF (the program prints no empty line) or timeout
        run.lines.push_back(line);
    }
    child.kill(SIGKILL); // only matters when it hung
    run.status = child.wait();
    return run;
}

bool exited_with(int status, int code) {
    return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

void expect_number(const Json& object, const std::string& key) {
    auto it = object.members.find(key);
    ASSERT_NE(it, object.members.end()) << "missing key " << key;
    EXPECT_EQ(it->second.kind, Json::Kind::number) << key << " is not a number";
}

// The keys every line of a pattern run has (BENCHMARKS.md); one_way_us when asked.
void expect_result_line(const std::string& line, const std::string& technology, const std::string& pattern, double size,
                        bool latency) {
    SCOPED_TRACE(line);
    Json j;
    ASSERT_NO_THROW(j = parse_json(line));
    ASSERT_EQ(j.kind, Json::Kind::object);
    EXPECT_EQ(j.members["technology"].text, technology);
    EXPECT_EQ(j.members["pattern"].text, pattern);
    expect_number(j, "size");
    EXPECT_EQ(j.members["size"].number, size);
    expect_number(j, "iterations");
    EXPECT_GT(j.members["iterations"].number, 0);
    expect_number(j, "msgs_per_s");
    expect_number(j, "MBps");
    if (latency) {
        ASSERT_EQ(j.members["one_way_us"].kind, Json::Kind::object);
        for (const char* key : {"mean", "p50", "p99", "p999", "max"})
            expect_number(j.members["one_way_us"], key);
    }
}

TEST(BenchJson, PingpongPrintsExactlyOneWellFormedLineWithTheDocumentedKeys) {
    const auto run =
        run_bench({"--json", "--technology", "sci", "--pattern", "pingpong", "--sizes", "64", "--iterations", "2000"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    expect_result_line(run.lines[0], "sci", "pingpong", 64, true);
    EXPECT_EQ(parse_json(run.lines[0]).members.at("iterations").number, 2000);
}

TEST(BenchJson, StreamPrintsOneLinePerSize) {
    const auto run = run_bench({"--json", "--pattern", "stream", "--sizes", "64,16KiB", "--iterations", "300"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 2U);
    expect_result_line(run.lines[0], "sci", "stream", 64, false);
    expect_result_line(run.lines[1], "sci", "stream", 16384, false);
}

// --contention: each point quiet, then beside busy loops (its own row), and no busy
// loop is left running after the run.
TEST(BenchJson, ContentionRunsEachPointQuietThenBesideBusyLoops) {
    const auto run = run_bench({"--json", "--technology", "sci", "--pattern", "pingpong", "--sizes", "64",
                                "--iterations", "300", "--contention", "2"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 2U);
    expect_result_line(run.lines[0], "sci", "pingpong", 64, true);
    expect_result_line(run.lines[1], "sci", "pingpong +2busy", 64, true);
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"--json", "--contention", "2"},
                                               {"--json", "--pattern", "idle", "--contention", "1"},
                                               {"--json", "--pattern", "stream", "--contention", "65"}}) {
        const auto bad = run_bench(args);
        EXPECT_TRUE(exited_with(bad.status, 2)) << "status " << bad.status;
    }
}

// --api bytes: pingpong and stream through send_bytes and receive_view.
TEST(BenchJson, BytesApiRunsPingpongAndStreamThroughTheBufferFreePath) {
    const auto ping = run_bench({"--json", "--technology", "sci", "--pattern", "pingpong", "--sizes", "64",
                                 "--iterations", "500", "--api", "bytes"});
    EXPECT_TRUE(exited_with(ping.status, 0)) << "status " << ping.status;
    ASSERT_EQ(ping.lines.size(), 1U);
    expect_result_line(ping.lines[0], "sci", "pingpong-bytes", 64, true);
    const auto stream = run_bench({"--json", "--technology", "sci", "--pattern", "stream", "--sizes", "8,16KiB",
                                   "--iterations", "2000", "--api", "bytes"});
    EXPECT_TRUE(exited_with(stream.status, 0)) << "status " << stream.status;
    ASSERT_EQ(stream.lines.size(), 2U);
    expect_result_line(stream.lines[0], "sci", "stream-bytes", 8, false);
    expect_result_line(stream.lines[1], "sci", "stream-bytes", 16384, false);
    EXPECT_EQ(parse_json(stream.lines[0]).members.at("iterations").number, 2000);
    for (const auto& args :
         std::vector<std::vector<std::string>>{{"--json", "--pattern", "broadcast", "--api", "bytes"},
                                               {"--json", "--pattern", "stream", "--api", "views"}}) {
        const auto bad = run_bench(args);
        EXPECT_TRUE(exited_with(bad.status, 2)) << "status " << bad.status;
    }
}

TEST(BenchJson, BroadcastToTwoMembersPrintsOneLineNamingTheMembers) {
    const auto run =
        run_bench({"--json", "--pattern", "broadcast", "--members", "2", "--sizes", "256", "--iterations", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    expect_result_line(run.lines[0], "sci", "broadcast", 256, false);
    EXPECT_EQ(parse_json(run.lines[0]).members.at("members").number, 2);
}

TEST(BenchJson, GatherFromTwoMembersPrintsOneLineNamingTheMembers) {
    const auto run =
        run_bench({"--json", "--pattern", "gather", "--members", "2", "--sizes", "1KiB", "--iterations", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    expect_result_line(run.lines[0], "sci", "gather", 1024, false);
    EXPECT_EQ(parse_json(run.lines[0]).members.at("members").number, 2);
}

// The fanin pattern: members sending at a fixed rate, the receiver's CPU per message,
// the partition's start (first point only) and the memory per node; with
// --compare-scan the same point first through a group that looks at every member.
TEST(BenchJson, FaninFromThreeMembersReportsTheReceiversCpuBeforeAndAfterTheMarks) {
    const auto run = run_bench({"--json", "--pattern", "fanin", "--compare-scan", "--members", "3", "--sizes", "64",
                                "--seconds", "0.5", "--rate", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 2U);
    const std::vector<std::string> patterns{"fanin-scan", "fanin"};
    for (std::size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(run.lines[i]);
        auto j = parse_json(run.lines[i]);
        EXPECT_EQ(j.members["pattern"].text, patterns[i]);
        EXPECT_EQ(j.members["members"].number, 3);
        EXPECT_EQ(j.members["rate_per_member"].number, 200);
        EXPECT_GT(j.members["iterations"].number, 0);
        EXPECT_GT(j.members["cpu_us_per_msg"].number, 0);
        EXPECT_GT(j.members["shm_kib_per_node"].number, 0);
        EXPECT_GT(j.members["rss_kib"].number, 0);
        EXPECT_GT(j.members["member_rss_kib"].number, 0);
        ASSERT_EQ(j.members.count("lost"), 1U);
        EXPECT_EQ(j.members["lost"].number, 0) << "every message a member reported sending arrived";
        EXPECT_EQ(j.members.count("start_s"), i == 0 ? 1U : 0U) << "the start is timed on the first point only";
    }
    const auto bad = run_bench({"--pattern", "gather", "--compare-scan"}, true);
    EXPECT_TRUE(exited_with(bad.status, 2)) << "status " << bad.status;
}

// The fanin pattern with every process started on its own (one-side mode, as a
// launcher on each host starts a partition spread over hosts, scripts/partition-hosts.sh):
// --started-at, the launch's wall-clock time, gives the start, and each member's
// report its descriptors and RSS, so the driver prints them per node.
TEST(BenchJson, FaninStartedProcessByProcessReportsItsStartAndTheDescriptorsPerNode) {
    const std::string partition = "onesided-" + std::to_string(::getpid());
    const auto dir = std::filesystem::temp_directory_path() / partition;
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "network.yaml") << "partition: " << partition << "\ntechnology: sci\n";
    {
        std::ofstream nodes(dir / "nodes.yaml");
        nodes << "nodes:\n";
        for (int id = 1; id <= 4; ++id)
            nodes << "  - {id: " << id << ", name: n" << id << ", host: 127.0.0.1}\n";
    }
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const std::string started =
        std::to_string(now.tv_sec) + "." + std::to_string(now.tv_nsec / 1000000 + 1000).substr(1);
    auto argv = [&](int id) {
        return std::vector<std::string>{MSGPASS_BENCH,
                                        "--config",
                                        (dir / "network.yaml").string(),
                                        "--nodes",
                                        (dir / "nodes.yaml").string(),
                                        "--node-id",
                                        std::to_string(id),
                                        "--json",
                                        "--pattern",
                                        "fanin",
                                        "--members",
                                        "3",
                                        "--sizes",
                                        "64",
                                        "--seconds",
                                        "0.5",
                                        "--rate",
                                        "20",
                                        "--started-at",
                                        started};
    };
    std::vector<std::unique_ptr<msgpass::test::ChildProcess>> members;
    for (int id = 2; id <= 4; ++id)
        members.push_back(std::make_unique<msgpass::test::ChildProcess>(argv(id)));
    const auto run = run_argv(argv(1), {});
    std::vector<int> statuses;
    for (auto& m : members)
        statuses.push_back(m->wait());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
        if (entry.path().filename().string().find("." + partition + ".") != std::string::npos)
            std::filesystem::remove(entry.path(), ec);
    }
    std::filesystem::remove_all(dir, ec);
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    for (int status : statuses)
        EXPECT_TRUE(exited_with(status, 0)) << "a member's status " << status;
    ASSERT_EQ(run.lines.size(), 1U);
    SCOPED_TRACE(run.lines[0]);
    auto j = parse_json(run.lines[0]);
    EXPECT_EQ(j.members["pattern"].text, "fanin");
    EXPECT_EQ(j.members["members"].number, 3);
    EXPECT_EQ(j.members["lost"].number, 0);
    ASSERT_EQ(j.members.count("start_s"), 1U) << "the start, from --started-at";
    EXPECT_GE(j.members["start_s"].number, 0);
    for (const char* key : {"fds", "member_fds", "member_fds_max", "member_rss_kib", "member_rss_max_kib"}) {
        expect_number(j, key);
        EXPECT_GT(j.members[key].number, 0) << key;
    }
    EXPECT_GE(j.members["member_fds_max"].number, j.members["member_fds"].number);
    EXPECT_GE(j.members["member_rss_max_kib"].number, j.members["member_rss_kib"].number);
    // --started-at times a partition started by others: a self-spawning run times its own.
    const auto bad = run_bench({"--pattern", "fanin", "--started-at", started}, true);
    EXPECT_TRUE(exited_with(bad.status, 2)) << "status " << bad.status;
}

// More members than the 64 it once took: a partition of 71 processes whose sci sizes
// (header area, receive slots) follow the node count; beyond 1023 a clear refusal.
TEST(BenchJson, GatherFromSeventyMembersRunsAndTooManyAreRefused) {
    const auto run =
        run_bench({"--json", "--pattern", "gather", "--members", "70", "--sizes", "64", "--iterations", "20"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    expect_result_line(run.lines[0], "sci", "gather", 64, false);
    EXPECT_EQ(parse_json(run.lines[0]).members.at("members").number, 70);
    const auto bad = run_bench({"--pattern", "gather", "--members", "1024"}, true);
    EXPECT_TRUE(exited_with(bad.status, 2)) << "status " << bad.status;
    std::string all;
    for (const auto& line : bad.lines)
        all += line + "\n";
    EXPECT_NE(all.find("--members must be in 1..1023 (a partition of at most 1024 processes on this host), found 1024"),
              std::string::npos)
        << all;
}

// The tcp technology refuses a node without a port, so these runs finish only when
// the generated nodes file gives every node one.
TEST(BenchJson, PingpongOverTcpRunsOnTheGeneratedNodesPorts) {
    const auto run =
        run_bench({"--json", "--technology", "tcp", "--pattern", "pingpong", "--sizes", "64", "--iterations", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    expect_result_line(run.lines[0], "tcp", "pingpong", 64, true);
}

TEST(BenchJson, TwoTcpRunsAtOnceEachGetTheirOwnPorts) {
    const std::vector<std::string> gather = {"--json", "--technology", "tcp",  "--pattern",    "gather", "--members",
                                             "2",      "--sizes",      "1KiB", "--iterations", "200"};
    ::Run second;
    ::Run first = run_bench(gather, false, [&](msgpass::test::ChildProcess&) { second = run_bench(gather); });
    for (const ::Run* run : {&first, &second}) {
        EXPECT_TRUE(exited_with(run->status, 0)) << "status " << run->status;
        ASSERT_EQ(run->lines.size(), 1U);
        expect_result_line(run->lines[0], "tcp", "gather", 1024, false);
    }
}

TEST(BenchJson, ReferencePrintsOneWellFormedLinePerFloor) {
    const auto run = run_bench({"--reference", "--json", "--sizes", "64", "--iterations", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    std::set<std::string> technologies;
    for (const auto& line : run.lines) {
        SCOPED_TRACE(line);
        Json j;
        ASSERT_NO_THROW(j = parse_json(line));
        const auto& technology = j.members["technology"].text;
        technologies.insert(technology);
        const bool latency = technology.find("pingpong") != std::string::npos;
        expect_result_line(line, technology, j.members["pattern"].text, 64, latency);
    }
    EXPECT_EQ(technologies, (std::set<std::string>{"reference-shm-pingpong", "reference-shm-ring", "reference-memcpy",
                                                   "reference-tcp-pingpong", "reference-udp-pingpong",
                                                   "reference-tcp-stream", "reference-udp-stream"}));
    EXPECT_EQ(run.lines.size(), technologies.size());
}

// The technologies of a --reference run's lines, each checked as a result line.
std::multiset<std::string> floor_lines(const Run& run, std::uint64_t size) {
    std::multiset<std::string> technologies;
    for (const auto& line : run.lines) {
        SCOPED_TRACE(line);
        Json j;
        EXPECT_NO_THROW(j = parse_json(line));
        const auto& technology = j.members["technology"].text;
        technologies.insert(technology);
        expect_result_line(line, technology, j.members["pattern"].text, size,
                           technology.find("pingpong") != std::string::npos);
    }
    return technologies;
}

TEST(BenchJson, ReferenceRunsOnlyTheFloorsAsked) {
    const auto run =
        run_bench({"--reference", "--json", "--floors", "tcp,udp", "--sizes", "64", "--iterations", "200"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    EXPECT_EQ(floor_lines(run, 64), (std::multiset<std::string>{"reference-tcp-pingpong", "reference-udp-pingpong",
                                                                "reference-tcp-stream", "reference-udp-stream"}));
}

// The tcp and udp floors with their second end in another network namespace, as
// scripts/compare-peers.sh measures them between two namespaces joined by a link.
TEST(BenchJson, ReferenceFloorsCrossToAnotherNetworkNamespace) {
    msgpass::test::Hosts hosts(2);
    REQUIRE_NAMESPACES(hosts);
    const auto run =
        run_argv(hosts.in(1, {MSGPASS_BENCH, "--reference", "--json", "--floors", "tcp,udp", "--floor-addresses",
                              msgpass::test::Hosts::address(1) + "," + msgpass::test::Hosts::address(2),
                              "--floor-netns", hosts.name(2), "--sizes", "1KiB", "--iterations", "200"}));
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    EXPECT_EQ(floor_lines(run, 1024), (std::multiset<std::string>{"reference-tcp-pingpong", "reference-udp-pingpong",
                                                                  "reference-tcp-stream", "reference-udp-stream"}));
    // Within host 1 alone, the second end's address is not there: the floors cannot
    // have run without crossing to host 2.
    const auto alone =
        run_argv(hosts.in(1, {MSGPASS_BENCH, "--reference", "--json", "--floors", "tcp", "--floor-addresses",
                              msgpass::test::Hosts::address(1) + "," + msgpass::test::Hosts::address(2), "--sizes",
                              "1KiB", "--iterations", "50"}));
    EXPECT_FALSE(exited_with(alone.status, 0)) << "status " << alone.status;
}

TEST(BenchErrors, FloorOptionsAreCheckedWithUsageStatus) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"--reference", "--json", "--floors", "tcp,disk"},
             {"--json", "--floors", "tcp"},
             {"--reference", "--json", "--floor-addresses", "10.1.2.3"},
             {"--reference", "--json", "--floors", "tcp", "--floor-addresses", "10.1.2.3,localhost"},
             {"--reference", "--json", "--floors", "tcp", "--floor-netns", "msgpass-no-such-namespace"}}) {
        const auto run = run_bench(args);
        EXPECT_TRUE(exited_with(run.status, 2)) << "status " << run.status << " for " << args[args.size() - 2];
        EXPECT_TRUE(run.lines.empty());
    }
}

TEST(BenchJson, IdleReportsTheCpuOfAReceiverThatWaits) {
    const auto run = run_bench({"--json", "--pattern", "idle", "--seconds", "0.5"});
    EXPECT_TRUE(exited_with(run.status, 0)) << "status " << run.status;
    ASSERT_EQ(run.lines.size(), 1U);
    Json j;
    ASSERT_NO_THROW(j = parse_json(run.lines[0]));
    EXPECT_EQ(j.members["pattern"].text, "idle");
    expect_number(j, "cpu_percent");
    expect_number(j, "seconds");
}

TEST(BenchErrors, MalformedSizesAreRejectedWithUsageStatus) {
    const auto run = run_bench({"--json", "--pattern", "pingpong", "--sizes", "64,lots"});
    EXPECT_TRUE(exited_with(run.status, 2)) << "status " << run.status;
    EXPECT_TRUE(run.lines.empty());
}

// The peers of a self-spawning run are children of msgpass-bench.
std::vector<pid_t> children_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    std::vector<pid_t> out;
    for (pid_t p; in >> p;)
        out.push_back(p);
    return out;
}

TEST(BenchErrors, ALostPeerEndsTheRunWithAPeerLostMessage) {
    const auto run = run_bench({"--json", "--pattern", "stream", "--sizes", "64", "--seconds", "60"}, true,
                               [](msgpass::test::ChildProcess& bench) {
                                   // Wait (bounded) until the peer exists, then kill it.
                                   const auto deadline = std::chrono::steady_clock::now() + 30s;
                                   std::vector<pid_t> peers;
                                   while (peers.empty() && std::chrono::steady_clock::now() < deadline) {
                                       peers = children_of(bench.pid());
                                       if (peers.empty()) std::this_thread::yield();
                                   }
                                   ASSERT_FALSE(peers.empty()) << "the peer never started";
                                   ::kill(peers.front(), SIGKILL);
                               });
    EXPECT_TRUE(exited_with(run.status, 3)) << "status " << run.status;
    bool said = false;
    for (const auto& line : run.lines)
        said = said || line.find("peer 2 lost") != std::string::npos;
    EXPECT_TRUE(said) << "no 'peer 2 lost' in the output";
}

} // namespace
