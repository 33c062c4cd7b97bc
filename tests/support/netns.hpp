// Test support: "hosts" made of Linux network namespaces joined by a bridge, for the
// tests that put nodes on different hosts (tests/tcp/tcp_namespace_test.cpp,
// tests/udp/udp_namespace_test.cpp), and the rule for a machine that cannot make them.
#pragma once

#include "environment.hpp"
#include "process.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace msgpass::test {

// Runs a command to its end; returns its exit code (-1 when it did not exit).
inline int run_to_end(const std::vector<std::string>& argv) {
    ChildProcess p(argv);
    while (!p.read_line(std::chrono::seconds(60)).empty()) {
    }
    const int status = p.wait();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// "Hosts" 1..n: one network namespace each, with the address 10.77.0.<i>/24 on
// eth0, joined by a bridge in a namespace of their own (the switch). Names carry
// the test process id and a counter, so parallel runs never meet. The destructor
// deletes every namespace, which takes the links and the bridge with them;
// namespaces left by a run that was killed are deleted at the next start.
class Hosts {
public:
    explicit Hosts(int n) {
        static int counter = 0;
        prefix_ = "mpt" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
        ip_ = tool("ip");
        if (ip_.empty()) {
            error_ = "no ip tool";
            return;
        }
        remove_stale();
        if (!cmd({"netns", "add", hub()})) {
            error_ = "ip netns add failed";
            return;
        }
        made_.push_back(hub());
        ok_ = cmd({"-n", hub(), "link", "add", "br0", "type", "bridge"}) &&
              cmd({"-n", hub(), "link", "set", "br0", "up"});
        for (int i = 1; ok_ && i <= n; ++i) {
            ok_ = cmd({"netns", "add", name(i)});
            if (!ok_) break;
            made_.push_back(name(i));
            const auto port = "p" + std::to_string(i);
            ok_ = cmd({"-n", hub(), "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name(i)}) &&
                  cmd({"-n", hub(), "link", "set", port, "master", "br0"}) &&
                  cmd({"-n", hub(), "link", "set", port, "up"}) && cmd({"-n", name(i), "link", "set", "lo", "up"}) &&
                  cmd({"-n", name(i), "addr", "add", address(i) + "/24", "dev", "eth0"}) &&
                  cmd({"-n", name(i), "link", "set", "eth0", "up"});
        }
        if (!ok_) error_ = "setting up the namespaces and links failed";
    }
    Hosts(const Hosts&) = delete;
    Hosts& operator=(const Hosts&) = delete;
    ~Hosts() {
        for (auto it = made_.rbegin(); it != made_.rend(); ++it)
            cmd({"netns", "del", *it});
    }

    [[nodiscard]] bool ok() const { return ok_; }
    [[nodiscard]] const std::string& error() const { return error_; }
    [[nodiscard]] std::string name(int i) const { return prefix_ + "-" + std::to_string(i); }
    [[nodiscard]] static std::string address(int i) { return "10.77.0." + std::to_string(i); }
    // The switch port of host i goes down or up, as a pulled cable would.
    bool set_link(int i, bool up) {
        return cmd({"-n", hub(), "link", "set", "p" + std::to_string(i), up ? "up" : "down"});
    }
    // The established TCP connections of host i as (local, peer) addresses (needs
    // the ss tool, which the tests require with the ip tool).
    [[nodiscard]] std::vector<std::pair<std::string, std::string>> connections(int i) const {
        ChildProcess p(in(i, {tool("ss"), "-Htn", "state", "established"}));
        std::vector<std::pair<std::string, std::string>> all;
        for (auto line = p.read_line(std::chrono::seconds(10)); !line.empty();
             line = p.read_line(std::chrono::seconds(10))) {
            std::istringstream fields(line);
            std::string recv_q, send_q, local, peer;
            if (fields >> recv_q >> send_q >> local >> peer) all.emplace_back(local, peer);
        }
        p.wait();
        return all;
    }
    // argv to run a program in host i's namespace.
    [[nodiscard]] std::vector<std::string> in(int i, std::vector<std::string> argv) const {
        argv.insert(argv.begin(), {ip_, "netns", "exec", name(i)});
        return argv;
    }

private:
    [[nodiscard]] std::string hub() const { return prefix_ + "-hub"; }
    bool cmd(std::vector<std::string> args) const {
        args.insert(args.begin(), ip_);
        return run_to_end(args) == 0;
    }
    // Deletes namespaces "mpt<pid>-..." whose process is gone.
    void remove_stale() const {
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator("/var/run/netns", ec)) {
            const auto n = entry.path().filename().string();
            if (n.rfind("mpt", 0) != 0) continue;
            const auto dash = n.find('-');
            if (dash == std::string::npos || dash == 3) continue;
            const auto digits = n.substr(3, dash - 3);
            if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
            const auto pid = static_cast<pid_t>(std::stol(digits));
            if (::kill(pid, 0) != 0 && errno == ESRCH) cmd({"netns", "del", n});
        }
    }

    std::string ip_;
    std::string prefix_;
    std::string error_;
    bool ok_ = false;
    std::vector<std::string> made_;
};

} // namespace msgpass::test

// Network namespaces need root, the ip tool (iproute2, which scripts/deps.sh
// installs) and a kernel that lets this process make them; ss (iproute2 too) shows
// their connections. Missing any of them skips the test with the reason, or fails
// it in CI.
#define REQUIRE_NAMESPACES(hosts)                                                                                      \
    do {                                                                                                               \
        MSGPASS_REQUIRE(::geteuid() == 0, "network namespaces need root; this test runs as uid " << ::geteuid());      \
        MSGPASS_REQUIRE(!::msgpass::test::tool("ss").empty(), "no ss tool (package iproute2)");                        \
        MSGPASS_REQUIRE((hosts).ok(), "no network namespaces here: " << (hosts).error());                              \
    } while (false)
