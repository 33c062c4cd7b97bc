// Tests of msgpass-run. The decisions taken before anything starts (host matching,
// --only, quoting) are tested as functions of plan.hpp; everything else runs the real
// launcher on launcher_probe with YAML files in a fresh directory and a partition of
// its own, and waits on pipes and pidfds with deadlines, never on sleeps. Every
// launcher a test starts is killed and reaped by the test even when it fails; its
// children get SIGTERM through PR_SET_PDEATHSIG then.
#include "local.hpp"
#include "plan.hpp"

#include "../support/environment.hpp"

#include <msgpass/kit/stats_page.hpp>
#include <msgpass/sci/naming.hpp>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string launcher = MSGPASS_RUN_PATH;
const std::string probe = LAUNCHER_PROBE_PATH;

// A directory of its own per test, with a partition name no other test uses.
class Workspace {
public:
    Workspace() {
        std::string pattern = (fs::temp_directory_path() / "msgpass-launcher-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        dir_ = pattern;
        static std::atomic<int> counter{0};
        partition_ = "lt" + std::to_string(::getpid()) + "x" + std::to_string(counter++);
    }
    ~Workspace() {
        std::error_code ignored;
        fs::remove_all(dir_, ignored);
    }
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    const fs::path& dir() const { return dir_; }
    const std::string& partition() const { return partition_; }
    fs::path network() const { return dir_ / "network.yaml"; }
    fs::path nodes() const { return dir_ / "nodes.yaml"; }

    void write(const fs::path& file, const std::string& text) const {
        std::ofstream out(file);
        out << text;
        ASSERT_TRUE(out.good()) << file;
    }
    // network.yaml with this workspace's partition, nodes.yaml with the given lines.
    void write_files(const std::string& node_lines) const {
        write(network(), "partition: " + partition_ + "\ntechnology: sci\n");
        write(nodes(), "nodes:\n" + node_lines);
    }
    // Nodes 1..count named alpha, beta, gamma, delta on localhost.
    void write_local_nodes(int count) const {
        static const char* names[] = {"alpha", "beta", "gamma", "delta"};
        std::string lines;
        for (int i = 0; i < count; ++i)
            lines += "  - {id: " + std::to_string(i + 1) + ", name: " + names[i] + ", host: localhost}\n";
        write_files(lines);
    }
    // Lets other users read the files (a test that runs programs as another user).
    void share() const {
        fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
        for (const auto& file : {network(), nodes()})
            fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                      fs::perms::others_read);
    }
    // A copy of program in this workspace that every user may run: a program run as
    // another user must not depend on where the build tree lies (a checkout under a
    // directory of mode 0700, as mktemp -d and many home directories make, is closed
    // to that user). The test programs link msgpass statically.
    std::string runnable_copy(const std::string& program) const {
        const fs::path copy = dir_ / ("bin-" + fs::path(program).filename().string());
        fs::copy_file(program, copy, fs::copy_options::overwrite_existing);
        fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
        return copy.string();
    }
    std::vector<std::string> files_args() const {
        return {"--config", network().string(), "--nodes", nodes().string()};
    }

private:
    fs::path dir_;
    std::string partition_;
};

// How to start a program other than plainly: variables added to the environment,
// and a user to run as (the test runs as root then).
struct StartAs {
    std::vector<std::string> environment; // "NAME=value", added to the test's own
    std::optional<uid_t> uid;
};

// One msgpass-run (or another program), its stdout and stderr collected as they come.
class Launcher {
public:
    explicit Launcher(const std::vector<std::string>& args, const StartAs& as = {},
                      const std::string& program = launcher) {
        int out[2];
        int err[2];
        if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
        std::vector<char*> argv{const_cast<char*>(program.c_str())};
        for (const auto& arg : args)
            argv.push_back(const_cast<char*>(arg.c_str()));
        argv.push_back(nullptr);
        std::vector<char*> envp; // the added variables first: getenv takes the first of a name
        for (const auto& e : as.environment)
            envp.push_back(const_cast<char*>(e.c_str()));
        for (char** e = environ; *e != nullptr; ++e)
            envp.push_back(*e);
        envp.push_back(nullptr);
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork");
        if (pid_ == 0) {
            ::dup2(out[1], STDOUT_FILENO);
            ::dup2(err[1], STDERR_FILENO);
            if (as.uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*as.uid, *as.uid, *as.uid) != 0 ||
                           ::setresuid(*as.uid, *as.uid, *as.uid) != 0))
                ::_exit(125);
            ::execve(argv[0], argv.data(), envp.data());
            ::_exit(126);
        }
        ::close(out[1]);
        ::close(err[1]);
        out_fd_ = out[0];
        err_fd_ = err[0];
        // Through syscall(): glibc 2.36 declares pidfd_open without C linkage.
        pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
        if (pidfd_ < 0) throw std::runtime_error("pidfd_open");
    }
    ~Launcher() {
        if (!reaped_) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        for (const int fd : {out_fd_, err_fd_, pidfd_})
            if (fd >= 0) ::close(fd);
    }
    Launcher(const Launcher&) = delete;
    Launcher& operator=(const Launcher&) = delete;

    pid_t pid() const { return pid_; }
    const std::string& out() const { return out_; }
    const std::string& err() const { return err_; }

    // Reads until stdout holds `count` occurrences of `text`; false at the deadline
    // or when the launcher closed its output first.
    bool read_until(const std::string& text, int count = 1, std::chrono::milliseconds timeout = 20s) {
        const auto deadline = Clock::now() + timeout;
        while (occurrences(out_, text) < count) {
            if (!read_some(deadline, false)) return false;
        }
        return true;
    }

    // Reads everything and reaps the launcher; its exit code, 128+N when killed by
    // signal N, or -1 when it did not finish within the timeout.
    int finish(std::chrono::milliseconds timeout = 30s) {
        const auto deadline = Clock::now() + timeout;
        while (out_fd_ >= 0 || err_fd_ >= 0 || !exited_) {
            if (!read_some(deadline, true)) return -1;
        }
        int status = 0;
        if (::waitpid(pid_, &status, 0) != pid_) return -1;
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

    static int occurrences(const std::string& haystack, const std::string& needle) {
        int count = 0;
        for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1))
            ++count;
        return count;
    }

private:
    // One poll round; false at the deadline or when there is nothing left to wait for.
    bool read_some(Clock::time_point deadline, bool want_exit) {
        std::vector<pollfd> fds;
        if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
        if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
        if (want_exit && !exited_) fds.push_back({pidfd_, POLLIN, 0});
        if (fds.empty() || (!want_exit && out_fd_ < 0)) return false;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(left));
        if (ready < 0 && errno == EINTR) return true;
        if (ready <= 0) return false;
        for (const auto& entry : fds) {
            if (entry.revents == 0) continue;
            if (entry.fd == pidfd_) {
                exited_ = true;
                continue;
            }
            int& fd = entry.fd == out_fd_ ? out_fd_ : err_fd_;
            std::string& sink = entry.fd == out_fd_ ? out_ : err_;
            char buffer[8192];
            const ssize_t got = ::read(fd, buffer, sizeof buffer);
            if (got > 0) {
                sink.append(buffer, static_cast<std::size_t>(got));
            } else if (got == 0 || errno != EINTR) {
                ::close(fd);
                fd = -1;
            }
        }
        return true;
    }

    pid_t pid_ = -1;
    int out_fd_ = -1;
    int err_fd_ = -1;
    int pidfd_ = -1;
    bool exited_ = false;
    bool reaped_ = false;
    std::string out_;
    std::string err_;
};

std::vector<std::string> concat(std::vector<std::string> first, const std::vector<std::string>& second) {
    first.insert(first.end(), second.begin(), second.end());
    return first;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        lines.push_back(line);
    return lines;
}

// msgpass-run with the workspace's files, then -- probe probe_args.
std::vector<std::string> run_probe(const Workspace& ws, const std::vector<std::string>& options,
                                   const std::vector<std::string>& probe_args) {
    return concat(concat(concat(ws.files_args(), options), {"--", probe}), probe_args);
}

// ---------------------------------------------------------------- plan.hpp

TEST(LauncherPlan, LoopbackNamesAndThisHostAreLocal) {
    for (const char* host : {"localhost", "127.0.0.1", "::1", "LocalHost"})
        EXPECT_TRUE(msgpass::run::is_local_host(host, "pc-a.cern.ch")) << host;
    EXPECT_TRUE(msgpass::run::is_local_host("pc-a.cern.ch", "pc-a.cern.ch"));
    EXPECT_TRUE(msgpass::run::is_local_host("pc-a", "pc-a.cern.ch"));
    EXPECT_TRUE(msgpass::run::is_local_host("PC-A.cern.ch", "pc-a"));
    EXPECT_FALSE(msgpass::run::is_local_host("pc-b", "pc-a.cern.ch"));
    EXPECT_FALSE(msgpass::run::is_local_host("10.0.0.1", "10"));
    EXPECT_FALSE(msgpass::run::is_local_host("", "pc-a"));
}

TEST(LauncherPlan, OnlyAcceptsACommaSeparatedListOfIds) {
    EXPECT_EQ(msgpass::run::parse_only("1, 2,5"), (std::set<msgpass::NodeId>{1, 2, 5}));
    for (const char* bad : {"", "1,,2", "x", "1;2", "-1", "99999999999"})
        EXPECT_THROW(msgpass::run::parse_only(bad), msgpass::run::UsageError) << bad;
}

TEST(LauncherPlan, ShellQuotingSurvivesSpacesQuotesAndNewlines) {
    EXPECT_EQ(msgpass::run::shell_quote("ros-1"), "ros-1");
    EXPECT_EQ(msgpass::run::shell_quote(""), "''");
    EXPECT_EQ(msgpass::run::shell_quote("a b"), "'a b'");
    EXPECT_EQ(msgpass::run::shell_quote("it's"), "'it'\\''s'");
    EXPECT_EQ(msgpass::run::shell_quote("a\nb"), "'a\nb'");
    EXPECT_EQ(msgpass::run::shell_quote("$HOME"), "'$HOME'");
}

TEST(LauncherPlan, ChildEnvironmentReplacesInheritedMsgpassVariables) {
    msgpass::run::Launch launch;
    launch.msgpass_env = {{"MSGPASS_NODE_ID", "3"}};
    std::string keep = "PATH=/bin";
    std::string stale_id = "MSGPASS_NODE_ID=9";
    std::string stale_set = "MSGPASS_SET=old=1";
    char* inherited[] = {keep.data(), stale_id.data(), stale_set.data(), nullptr};
    EXPECT_EQ(msgpass::run::child_environment(launch, inherited),
              (std::vector<std::string>{"PATH=/bin", "MSGPASS_NODE_ID=3"}));
}

// ---------------------------------------------------------------- local.hpp

// msgpass-run --technology T with files: the copy of the nodes file gives each node
// without a port (or with port 0) its own free port and keeps everything else.
TEST(LauncherLocal, ACopyOfTheNodesFileGivesEveryNodeWithoutAPortAFreeOneAndKeepsTheRest) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: alpha, host: localhost}\n"
                   "  - {id: 2, name: beta, host: localhost, port: 0, sci: {recv_buffer_no: 200}}\n"
                   "  - {id: 3, name: gamma, host: localhost, port: 17999}\n");
    const auto copy = msgpass::run::with_free_ports(ws.nodes(), "udp");
    struct Remove {
        const msgpass::run::LocalPartition& local;
        ~Remove() { msgpass::run::remove_local_partition(local); }
    } remove{copy};
    ASSERT_NE(copy.nodes_file, ws.nodes());
    const auto nodes = YAML::LoadFile(copy.nodes_file.string())["nodes"];
    ASSERT_TRUE(nodes.IsSequence());
    ASSERT_EQ(nodes.size(), 3u);
    const auto alpha = nodes[0]["port"].as<int>();
    const auto beta = nodes[1]["port"].as<int>();
    EXPECT_GT(alpha, 0);
    EXPECT_GT(beta, 0);
    EXPECT_NE(alpha, beta);
    EXPECT_EQ(nodes[2]["port"].as<int>(), 17999) << "a port written in the file is kept";
    EXPECT_EQ(nodes[1]["name"].as<std::string>(), "beta");
    EXPECT_EQ(nodes[1]["sci"]["recv_buffer_no"].as<int>(), 200) << "the node's other keys are kept";
    EXPECT_EQ(nodes[0]["host"].as<std::string>(), "localhost");
}

TEST(LauncherLocal, ANodesFileThatCannotBeReadIsAnErrorNamingIt) {
    Workspace ws;
    try {
        (void)msgpass::run::with_free_ports(ws.dir() / "missing.yaml", "tcp");
        FAIL() << "no error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("missing.yaml"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------- msgpass-run

TEST(Launcher, StartsOneProcessPerNodeAndTellsEachItsIdentity) {
    Workspace ws;
    ws.write_local_nodes(3);
    Launcher run(run_probe(ws, {"--set", "send_queue_limit=100", "--set", "sci.recv_buffer_no=100"}, {"--env"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    const auto out = lines_of(run.out());
    const std::pair<int, std::string> nodes[] = {{1, "alpha"}, {2, "beta"}, {3, "gamma"}};
    for (const auto& [id, name] : nodes) {
        const std::string prefix = "[" + name + "] ";
        auto has = [&](const std::string& text) {
            return std::find(out.begin(), out.end(), prefix + text) != out.end();
        };
        EXPECT_TRUE(has("node " + std::to_string(id) + " " + name)) << run.out();
        EXPECT_TRUE(has("env MSGPASS_PARTITION=" + ws.partition())) << run.out();
        EXPECT_TRUE(has("env MSGPASS_CONFIG=" + ws.network().string())) << run.out();
        EXPECT_TRUE(has("env MSGPASS_NODES=" + ws.nodes().string())) << run.out();
        EXPECT_TRUE(has("env MSGPASS_SET=send_queue_limit=100|sci.recv_buffer_no=100")) << run.out();
    }
    EXPECT_EQ(out.size(), 3u * 7u) << run.out();
}

// --technology with files: the partition of files written for sci runs over tcp;
// the programs get the copy of the nodes file with ports and the override, and the
// copy is removed at the end.
TEST(Launcher, TechnologyRunsTheFilesPartitionOverItWithFreePorts) {
    Workspace ws;
    ws.write_local_nodes(2);
    Launcher run(run_probe(ws, {"--technology", "tcp"}, {"--env"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    const auto out = lines_of(run.out());
    for (const std::string name : {"alpha", "beta"}) {
        EXPECT_NE(std::find(out.begin(), out.end(), "[" + name + "] env MSGPASS_SET=technology=tcp"), out.end())
            << run.out();
        const std::string prefix = "[" + name + "] env MSGPASS_NODES=";
        const auto line = std::find_if(out.begin(), out.end(), [&](const auto& l) { return l.rfind(prefix, 0) == 0; });
        ASSERT_NE(line, out.end()) << run.out();
        const fs::path copy = line->substr(prefix.size());
        EXPECT_NE(copy, ws.nodes());
        EXPECT_FALSE(fs::exists(copy)) << "the copy outlived the run: " << copy;
    }
    Launcher bad(run_probe(ws, {"--technology", "carrier-pigeon"}, {}));
    EXPECT_EQ(bad.finish(), 2);
    EXPECT_NE(bad.err().find("carrier-pigeon"), std::string::npos) << bad.err();
}

TEST(Launcher, RelativeFilePathsReachTheProgramsAsAbsolutePaths) {
    Workspace ws;
    ws.write_local_nodes(1);
    const fs::path here = fs::current_path();
    fs::current_path(ws.dir());
    Launcher run({"--", probe, "--env"}); // default network.yaml and nodes.yaml
    fs::current_path(here);
    ASSERT_EQ(run.finish(), 0) << run.err();
    EXPECT_NE(run.out().find("[alpha] env MSGPASS_CONFIG=" + (ws.dir() / "network.yaml").string() + "\n"),
              std::string::npos)
        << run.out();
    EXPECT_NE(run.out().find("[alpha] env MSGPASS_SET=<unset>\n"), std::string::npos) << run.out();
}

TEST(Launcher, OnlyStartsTheListedNodes) {
    Workspace ws;
    ws.write_local_nodes(4);
    Launcher run(run_probe(ws, {"--only", "2,4"}, {}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    auto lines = lines_of(run.out()); // the nodes run concurrently: any order
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines, (std::vector<std::string>{"[beta] node 2 beta", "[delta] node 4 delta"})) << run.out();
}

TEST(Launcher, OnlyRejectsAnIdThatIsNotInTheNodesFile) {
    Workspace ws;
    ws.write_local_nodes(2);
    Launcher run(run_probe(ws, {"--only", "1,7"}, {}));
    EXPECT_EQ(run.finish(), 2);
    EXPECT_NE(run.err().find("node 7 is not in"), std::string::npos) << run.err();
    EXPECT_EQ(run.out(), "");
}

TEST(Launcher, NodesOfOtherHostsStartOnlyWithAllHosts) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: here, host: localhost}\n"
                   "  - {id: 2, name: there, host: elsewhere.invalid}\n");
    {
        Launcher run(run_probe(ws, {}, {}));
        ASSERT_EQ(run.finish(), 0) << run.err();
        EXPECT_EQ(lines_of(run.out()), (std::vector<std::string>{"[here] node 1 here"}));
    }
    {
        Launcher run(run_probe(ws, {"--all-hosts"}, {}));
        ASSERT_EQ(run.finish(), 0) << run.err();
        EXPECT_EQ(Launcher::occurrences(run.out(), "[there] node 2 there\n"), 1) << run.out();
    }
    {
        Launcher run(run_probe(ws, {"--only", "2"}, {}));
        EXPECT_EQ(run.finish(), 2);
        EXPECT_NE(run.err().find("no node of"), std::string::npos) << run.err();
    }
}

// --launch-agent (BIP's bipload over hosts): a node of another host starts through
// the agent, {host} its host and {command} its whole command line as one word, and
// its output and exit are the launcher's like a local node's; this host's nodes
// start as before.
TEST(Launcher, NodesOfOtherHostsStartThroughTheLaunchAgent) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: here, host: localhost}\n"
                   "  - {id: 2, name: there, host: elsewhere.invalid}\n");
    {
        Launcher run(run_probe(ws, {"--launch-agent", "ssh -tt {host} {command} --", "--dry-run"}, {}));
        ASSERT_EQ(run.finish(), 0) << run.err();
        const auto lines = lines_of(run.out());
        ASSERT_EQ(lines.size(), 2u) << run.out();
        EXPECT_EQ(lines[0].find("MSGPASS_NODE_ID=1 "), 0u) << lines[0];
        EXPECT_EQ(lines[0].find("ssh"), std::string::npos) << "this host's node went through the agent: " << lines[0];
        EXPECT_NE(lines[1].find(" ssh -tt elsewhere.invalid 'MSGPASS_NODE_ID=2 MSGPASS_NODE_NAME=there "),
                  std::string::npos)
            << lines[1];
        EXPECT_EQ(lines[1].substr(lines[1].size() - 3), " --")
            << "the words after {command} stay after it: " << lines[1];
    }
    {
        Launcher run(run_probe(ws, {"--launch-agent", "sh -c"}, {}));
        ASSERT_EQ(run.finish(), 0) << run.err();
        EXPECT_EQ(Launcher::occurrences(run.out(), "[here] node 1 here\n"), 1) << run.out();
        EXPECT_EQ(Launcher::occurrences(run.out(), "[there] node 2 there\n"), 1) << run.out();
    }
    {
        Launcher run(run_probe(ws, {"--launch-agent", "sh -c", "--only", "2"}, {"--exit", "3"}));
        EXPECT_EQ(run.finish(), 1);
        EXPECT_NE(run.err().find("node 2 (there) failed: exit code 3"), std::string::npos) << run.err();
    }
    {
        Launcher run(run_probe(ws, {"--launch-agent", " "}, {}));
        EXPECT_EQ(run.finish(), 2);
        EXPECT_NE(run.err().find("--launch-agent: the command is empty"), std::string::npos) << run.err();
    }
}

TEST(Launcher, ANodesOwnCommandReplacesTheProgram) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: own, host: localhost, command: [" + probe +
                   ", --exit, 0, --stderr, mine]}\n"
                   "  - {id: 2, name: shared, host: localhost}\n");
    Launcher run(run_probe(ws, {}, {"--stderr", "shared"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    EXPECT_NE(run.err().find("[own] mine\n"), std::string::npos) << run.err();
    EXPECT_NE(run.err().find("[shared] shared\n"), std::string::npos) << run.err();
}

TEST(Launcher, WithoutAProgramEveryNodeNeedsItsOwnCommand) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: own, host: localhost, command: [" + probe +
                   "]}\n"
                   "  - {id: 2, name: bare, host: localhost}\n");
    {
        Launcher run(ws.files_args());
        EXPECT_EQ(run.finish(), 2);
        EXPECT_NE(run.err().find("node 2 (bare) has no command"), std::string::npos) << run.err();
        EXPECT_EQ(run.out(), "");
    }
    Launcher run(concat(ws.files_args(), {"--only", "1"}));
    EXPECT_EQ(run.finish(), 0) << run.err();
    EXPECT_EQ(run.out(), "[own] node 1 own\n");
}

TEST(Launcher, DryRunPrintsOneCommandPerNodeAndStartsNothing) {
    Workspace ws;
    ws.write_local_nodes(3);
    Launcher run(run_probe(ws, {"--dry-run", "--set", "send_queue_limit=100"}, {"--stderr", "it's started"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    const auto out = lines_of(run.out());
    ASSERT_EQ(out.size(), 3u) << run.out();
    const char* names[] = {"alpha", "beta", "gamma"};
    for (int i = 0; i < 3; ++i) {
        const std::string start = "MSGPASS_NODE_ID=" + std::to_string(i + 1) + " MSGPASS_NODE_NAME=" + names[i] + " ";
        EXPECT_EQ(out[i].rfind(start, 0), 0u) << out[i];
        EXPECT_NE(out[i].find(" MSGPASS_PARTITION=" + ws.partition() + " "), std::string::npos) << out[i];
        EXPECT_NE(out[i].find(" MSGPASS_SET=send_queue_limit=100 "), std::string::npos) << out[i];
        const std::string end = " " + probe + " --stderr 'it'\\''s started'";
        EXPECT_EQ(out[i].substr(out[i].size() - std::min(out[i].size(), end.size())), end) << out[i];
    }
    EXPECT_EQ(run.err(), "");
}

TEST(Launcher, OneFailingNodeStopsTheOthersAndIsNamedWithItsExitCode) {
    Workspace ws;
    ws.write_local_nodes(3);
    const auto start = Clock::now();
    Launcher run(run_probe(ws, {"--grace", "20"}, {"--fail", "2:3", "--wait"}));
    EXPECT_EQ(run.finish(), 1) << run.err();
    EXPECT_NE(run.err().find("msgpass-run: node 2 (beta) failed: exit code 3\n"), std::string::npos) << run.err();
    EXPECT_EQ(Launcher::occurrences(run.err(), "failed:"), 1) << run.err();
    // The others wait for a signal for two minutes and the grace time is 20 s: only
    // the launcher's SIGTERM can have ended them this early.
    EXPECT_LT(Clock::now() - start, 15s);
    EXPECT_EQ(run.err().find("SIGKILL"), std::string::npos) << run.err();
}

TEST(Launcher, ANodeKilledByASignalIsReportedWithTheSignal) {
    Workspace ws;
    ws.write_local_nodes(2);
    Launcher run(run_probe(ws, {}, {"--raise", "1:9", "--wait"}));
    EXPECT_EQ(run.finish(), 1) << run.err();
    EXPECT_NE(run.err().find("msgpass-run: node 1 (alpha) failed: killed by signal 9 (Killed)\n"), std::string::npos)
        << run.err();
}

TEST(Launcher, ANodeThatIgnoresSigtermIsKilledAfterTheGraceTime) {
    Workspace ws;
    ws.write_files("  - {id: 1, name: alpha, host: localhost}\n"
                   "  - {id: 2, name: stubborn, host: localhost, command: [" +
                   probe + ", --stubborn]}\n");
    Launcher run(run_probe(ws, {"--grace", "0.2"}, {"--wait"}));
    ASSERT_TRUE(run.read_until("ready", 2)) << run.out() << run.err();
    ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
    EXPECT_EQ(run.finish(), 128 + SIGTERM) << run.err();
    EXPECT_NE(run.out().find("[alpha] got SIGTERM\n"), std::string::npos) << run.out();
    EXPECT_NE(run.err().find("node 2 (stubborn) did not stop within"), std::string::npos) << run.err();
}

class LauncherSignal : public ::testing::TestWithParam<int> {};

TEST_P(LauncherSignal, IsForwardedToEveryNodeAndEndsTheLauncher) {
    const int sig = GetParam();
    Workspace ws;
    ws.write_local_nodes(3);
    Launcher run(run_probe(ws, {}, {"--wait"}));
    ASSERT_TRUE(run.read_until("] ready\n", 3)) << run.out() << run.err();
    ASSERT_EQ(::kill(run.pid(), sig), 0);
    EXPECT_EQ(run.finish(), 128 + sig) << run.err();
    const std::string got = std::string("got ") + (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
    for (const char* name : {"alpha", "beta", "gamma"})
        EXPECT_EQ(Launcher::occurrences(run.out(), "[" + std::string(name) + "] " + got + "\n"), 1) << run.out();
    EXPECT_EQ(run.err().find("failed"), std::string::npos) << run.err();
}

INSTANTIATE_TEST_SUITE_P(Launcher, LauncherSignal, ::testing::Values(SIGTERM, SIGINT, SIGHUP),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

TEST(Launcher, AMalformedNodesFileGivesOneLocatedErrorLine) {
    Workspace ws;
    ws.write_files("  - {id: one, name: alpha, host: localhost}\n");
    Launcher run(run_probe(ws, {}, {}));
    EXPECT_NE(run.finish(), 0);
    const auto err = lines_of(run.err());
    ASSERT_EQ(err.size(), 1u) << run.err();
    EXPECT_TRUE(std::regex_search(err[0], std::regex("^[^:]*nodes\\.yaml:[0-9]+:[0-9]+: "))) << err[0];
    EXPECT_EQ(run.out(), "");
}

TEST(Launcher, AProgramThatDoesNotExistIsReportedAsThatNodesFailure) {
    Workspace ws;
    ws.write_local_nodes(1); // with more, the first failure stops the others before they report
    const std::string missing = (ws.dir() / "no-such-program").string();
    Launcher run(concat(ws.files_args(), {"--", missing}));
    EXPECT_EQ(run.finish(), 1);
    EXPECT_NE(run.err().find("[alpha] msgpass-run: cannot execute '" + missing + "': No such file or directory\n"),
              std::string::npos)
        << run.err();
    EXPECT_NE(run.err().find("msgpass-run: node 1 (alpha) failed: exit code 127\n"), std::string::npos) << run.err();
}

TEST(Launcher, EveryLineIsPrefixedIncludingLongAndUnterminatedOnes) {
    Workspace ws;
    ws.write_local_nodes(2);
    Launcher run(run_probe(ws, {}, {"--lines", "3000", "--stderr", "to stderr", "--partial", "no newline"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    for (const char* name : {"alpha", "beta"}) {
        const std::string prefix = "[" + std::string(name) + "] ";
        std::vector<std::string> mine;
        for (const auto& line : lines_of(run.out()))
            if (line.rfind(prefix, 0) == 0) mine.push_back(line.substr(prefix.size()));
        ASSERT_EQ(mine.size(), 3002u);
        for (int n = 1; n <= 3000; ++n)
            ASSERT_EQ(mine[static_cast<std::size_t>(n)], "line " + std::to_string(n));
        EXPECT_EQ(mine.back(), "no newline");
        EXPECT_NE(run.err().find(prefix + "to stderr\n"), std::string::npos) << run.err();
    }
    for (const auto& line : lines_of(run.out()))
        EXPECT_TRUE(line.rfind("[alpha] ", 0) == 0 || line.rfind("[beta] ", 0) == 0) << line;
}

TEST(Launcher, ChildrenInheritOnlyTheStandardDescriptors) {
    Workspace ws;
    ws.write_local_nodes(2);
    // Descriptors this test itself passes on (inherited from ctest or a shell) reach
    // the probes through the launcher legitimately; none of the launcher's own may.
    std::set<int> passed_on{0, 1, 2};
    for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
        const int fd = std::stoi(entry.path().filename().string());
        const int flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0 && (flags & FD_CLOEXEC) == 0) passed_on.insert(fd);
    }
    std::string expected = "fds";
    for (const int fd : passed_on)
        expected += " " + std::to_string(fd);
    Launcher run(run_probe(ws, {}, {"--fds"}));
    ASSERT_EQ(run.finish(), 0) << run.err();
    EXPECT_EQ(Launcher::occurrences(run.out(), "] " + expected + "\n"), 2) << run.out();
}

TEST(Launcher, CleanupRemovesOnlyThePartitionsSegments) {
    Workspace ws;
    ws.write_local_nodes(1);
    const std::string user = msgpass::sci::segment_user();
    const std::string mine = "/" + msgpass::sci::partition_prefix(user, ws.partition()) + "seg1";
    const std::string other = "/" + msgpass::sci::partition_prefix(user, ws.partition() + "x") + "seg1";
    for (const auto& name : {mine, other}) {
        const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
        ::close(fd);
    }
    Launcher dry(concat(ws.files_args(), {"--cleanup", "--dry-run"}));
    EXPECT_EQ(dry.finish(), 0) << dry.err();
    EXPECT_EQ(dry.out(), "would remove " + mine + "\n");
    Launcher run(concat(ws.files_args(), {"--cleanup"}));
    EXPECT_EQ(run.finish(), 0) << run.err();
    EXPECT_EQ(run.out(), "removed " + mine + "\n");
    EXPECT_FALSE(fs::exists(msgpass::sci::shm_path(mine)));
    EXPECT_TRUE(fs::exists(msgpass::sci::shm_path(other)));
    ::shm_unlink(mine.c_str());
    ::shm_unlink(other.c_str());
}

// Removes every segment of a partition at the end of a test, passed or failed.
class PartitionSegments {
public:
    PartitionSegments(std::string user, std::string partition)
        : user_(std::move(user)), partition_(std::move(partition)) {}
    ~PartitionSegments() {
        for (const auto& name : list())
            ::shm_unlink(name.c_str());
    }
    PartitionSegments(const PartitionSegments&) = delete;
    PartitionSegments& operator=(const PartitionSegments&) = delete;
    std::vector<std::string> list() const {
        std::error_code error;
        auto names = msgpass::sci::partition_segments(user_, partition_, error);
        EXPECT_FALSE(error) << error.message();
        return names;
    }

private:
    std::string user_;
    std::string partition_;
};

// Node 1 of a two-node sci partition (launcher_probe --sci, started directly) makes
// its segments and dies by SIGKILL; msgpass-run --cleanup, run as the same user,
// lists and removes exactly those segments.
void expect_cleanup_finds_what_sci_made(const std::optional<uid_t>& uid) {
    Workspace ws;
    ws.write_local_nodes(2);
    ws.share();
    const std::string user = uid ? msgpass::sci::segment_user(*uid) : msgpass::sci::segment_user();
    const PartitionSegments segments(user, ws.partition());
    const StartAs as{{}, uid};
    const StartAs node_1{
        {"MSGPASS_NODE_ID=1", "MSGPASS_CONFIG=" + ws.network().string(), "MSGPASS_NODES=" + ws.nodes().string()}, uid};
    const std::string probe_program = uid ? ws.runnable_copy(probe) : probe;
    const std::string launcher_program = uid ? ws.runnable_copy(launcher) : launcher;
    Launcher probe_run({"--sci", "--raise", "1:9"}, node_1, probe_program);
    ASSERT_EQ(probe_run.finish(), 128 + SIGKILL) << probe_run.err();
    std::vector<std::string> made;
    for (const auto& line : lines_of(probe_run.out()))
        if (line.rfind("segment ", 0) == 0) made.push_back(line.substr(8));
    const msgpass::sci::SegmentAddress address{user, ws.partition(), std::nullopt, 1, 8};
    ASSERT_EQ(made, (std::vector<std::string>{msgpass::sci::segment_name(address),
                                              msgpass::sci::segment_name(address, "bcast"),
                                              msgpass::sci::segment_name(address, "large.2")}))
        << probe_run.out();
    EXPECT_EQ(segments.list(), made);
    // And its statistics page (msgpass/kit/stats_page.hpp), which --cleanup lists after them.
    made.push_back(msgpass::kit::stats_page_name(user, ws.partition(), 1));
    EXPECT_TRUE(fs::exists(msgpass::sci::shm_path(made.back())));

    Launcher dry(concat(ws.files_args(), {"--cleanup", "--dry-run"}), as, launcher_program);
    EXPECT_EQ(dry.finish(), 0) << dry.err();
    std::string expected;
    for (const auto& name : made)
        expected += "would remove " + name + "\n";
    EXPECT_EQ(dry.out(), expected);
    Launcher run(concat(ws.files_args(), {"--cleanup"}), as, launcher_program);
    EXPECT_EQ(run.finish(), 0) << run.err();
    expected.clear();
    for (const auto& name : made)
        expected += "removed " + name + "\n";
    EXPECT_EQ(run.out(), expected);
    EXPECT_EQ(segments.list(), std::vector<std::string>{});
    EXPECT_FALSE(fs::exists(msgpass::sci::shm_path(made.back())));
}

TEST(LauncherCleanup, FindsWhatTheSciTechnologyMade) {
    expect_cleanup_finds_what_sci_made(std::nullopt);
}

// A user without a passwd entry is "uid<N>" in segment names, for sci and for
// msgpass-run alike (msgpass-run once said "<N>" and missed every segment).
TEST(LauncherCleanup, FindsWhatTheSciTechnologyMadeForAUserWithoutAPasswdEntry) {
    MSGPASS_REQUIRE(::geteuid() == 0,
                    "running programs as another user needs root; this test runs as uid " << ::geteuid());
    std::optional<uid_t> uid;
    for (uid_t candidate = 47001; !uid && candidate < 47101; ++candidate)
        if (::getpwuid(candidate) == nullptr) uid = candidate;
    ASSERT_TRUE(uid) << "every uid from 47001 to 47100 has a passwd entry";
    ASSERT_EQ(msgpass::sci::segment_user(*uid), "uid" + std::to_string(*uid));
    expect_cleanup_finds_what_sci_made(uid);
}

// ----------------------------------------------- segments at the end of a partition

// The "segment <name>" lines launcher_probe --sci printed through the launcher.
std::vector<std::string> segments_reported(const std::string& out) {
    std::vector<std::string> names;
    for (const auto& line : lines_of(out)) {
        const auto at = line.find("] segment ");
        if (at != std::string::npos) names.push_back(line.substr(at + 10));
    }
    return names;
}

// Nodes that fail (exit code 3), are killed (SIGKILL) or are stopped by the launcher
// (SIGTERM) after making their segments, and never destroy their factories: when
// msgpass-run returns, no segment of the partition is left.
TEST(LauncherSegments, AFailedPartitionLeavesNoSegmentBehind) {
    Workspace ws;
    ws.write_local_nodes(3);
    const PartitionSegments segments(msgpass::sci::segment_user(), ws.partition());
    Launcher run(run_probe(ws, {}, {"--sci", "--await-segments", "12", "--fail", "2:3", "--raise", "3:9", "--wait"}));
    EXPECT_EQ(run.finish(), 1) << run.err();
    // Each made its segment, its broadcast region and a large region per peer.
    EXPECT_EQ(segments_reported(run.out()).size(), 12u) << run.out() << run.err();
    EXPECT_EQ(segments.list(), std::vector<std::string>{});
    std::error_code error; // nor a statistics page of the killed node
    EXPECT_EQ(msgpass::kit::find_stats_pages(msgpass::kit::stats_user(), ws.partition(), error),
              std::vector<std::string>{});
    for (const char* node : {"node 1 (alpha)", "node 2 (beta)", "node 3 (gamma)"})
        EXPECT_NE(run.err().find(std::string("msgpass-run: removed 4 shared-memory segments left by ") + node + "\n"),
                  std::string::npos)
            << run.err();
}

TEST(LauncherSegments, ACleanPartitionLeavesNoSegmentBehind) {
    Workspace ws;
    ws.write_local_nodes(2);
    const PartitionSegments segments(msgpass::sci::segment_user(), ws.partition());
    Launcher run(run_probe(ws, {}, {"--sci"}));
    EXPECT_EQ(run.finish(), 0) << run.err();
    EXPECT_EQ(segments_reported(run.out()).size(), 6u) << run.out() << run.err();
    EXPECT_EQ(segments.list(), std::vector<std::string>{});
}

// Segments that a live process holds stay: node 1 of a partition started by another
// launcher (a second launcher of node 1 fails, as the id is taken, and ends), and a
// process of another partition. --cleanup keeps them too.
TEST(LauncherSegments, SegmentsOfLiveProcessesAreLeftAlone) {
    Workspace ws;
    ws.write_local_nodes(2);
    Workspace other;
    other.write_local_nodes(1);
    const PartitionSegments segments(msgpass::sci::segment_user(), ws.partition());
    const PartitionSegments other_segments(msgpass::sci::segment_user(), other.partition());
    Launcher first(run_probe(ws, {"--only", "1"}, {"--sci", "--wait"}));
    ASSERT_TRUE(first.read_until("[alpha] ready\n")) << first.out() << first.err();
    Launcher elsewhere(run_probe(other, {}, {"--sci", "--wait"}));
    ASSERT_TRUE(elsewhere.read_until("[alpha] ready\n")) << elsewhere.out() << elsewhere.err();
    const auto live = segments.list();
    ASSERT_EQ(live, segments_reported(first.out()));
    ASSERT_EQ(live.size(), 3u);
    const auto other_live = other_segments.list();
    ASSERT_EQ(other_live.size(), 2u);

    Launcher second(run_probe(ws, {"--only", "1"}, {"--sci"}));
    EXPECT_EQ(second.finish(), 1) << second.err();
    EXPECT_NE(second.err().find("same node id"), std::string::npos) << second.err();
    EXPECT_EQ(segments.list(), live);
    Launcher node_2(run_probe(ws, {"--only", "2"}, {"--sci"}));
    EXPECT_EQ(node_2.finish(), 0) << node_2.err();
    EXPECT_EQ(segments_reported(node_2.out()).size(), 3u) << node_2.out();
    EXPECT_EQ(segments.list(), live) << "node 2's segments were left, or node 1's removed";
    EXPECT_EQ(other_segments.list(), other_live);

    Launcher cleanup(concat(ws.files_args(), {"--cleanup"}));
    EXPECT_EQ(cleanup.finish(), 0) << cleanup.err();
    std::string kept;
    for (const auto& name : live)
        kept += "kept " + name + ": a live process holds it\n";
    const auto page = msgpass::kit::stats_page_name(msgpass::kit::stats_user(), ws.partition(), 1);
    kept += "kept " + page + ": a live process holds it\n"; // the live node's statistics page
    EXPECT_EQ(cleanup.out(), kept);
    EXPECT_EQ(segments.list(), live);

    // Stopped, the live node's launcher removes them at its end.
    ::kill(first.pid(), SIGTERM);
    EXPECT_EQ(first.finish(), 128 + SIGTERM) << first.err();
    EXPECT_EQ(segments.list(), std::vector<std::string>{});
    EXPECT_FALSE(fs::exists(msgpass::sci::shm_path(page)));
    EXPECT_EQ(other_segments.list(), other_live);
    ::kill(elsewhere.pid(), SIGTERM);
    EXPECT_EQ(elsewhere.finish(), 128 + SIGTERM) << elsewhere.err();
    EXPECT_EQ(other_segments.list(), std::vector<std::string>{});
}

TEST(Launcher, BadOptionsExitWithUsageError) {
    Workspace ws;
    ws.write_local_nodes(1);
    for (const auto& options : std::vector<std::vector<std::string>>{
             {"--grace", "-1"}, {"--only", "x"}, {"--no-such-option"}, {"--grace", "soon"}}) {
        Launcher run(run_probe(ws, options, {}));
        EXPECT_EQ(run.finish(), 2) << options[0];
        EXPECT_NE(run.err().find("msgpass-run: "), std::string::npos) << run.err();
        EXPECT_EQ(run.out(), "");
    }
}

} // namespace
