// Test support: a child process with a pipe on its stdout, killed and reaped when
// the test ends (even when it fails), and line reads with a deadline (no sleeps).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace msgpass::test {

class ChildProcess {
public:
    explicit ChildProcess(const std::vector<std::string>& argv) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        program_ = argv.empty() ? std::string() : argv[0];
        const int rc = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[1]);
        out_ = fds[0];
        if (rc != 0) {
            ::close(out_);
            throw std::runtime_error("cannot start " + argv[0]);
        }
    }
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess() {
        kill(SIGKILL);
        wait();
        if (out_ >= 0) ::close(out_);
    }

    [[nodiscard]] pid_t pid() const { return pid_; }
    void kill(int signal) {
        if (pid_ > 0 && !reaped_) ::kill(pid_, signal);
    }
    // A child that has not exited this long after the test waits for it is taken for
    // hung: shorter than ctest's timeout, so the test fails with a word, not silently.
    static constexpr std::chrono::seconds wait_bound{120};

    // Waits at most bound for the exit and returns the raw wait status. A child still
    // running then is killed (SIGKILL) and reaped, and stderr says which program it
    // was: the caller sees "killed by signal 9" where it expected an exit.
    int wait(std::chrono::milliseconds bound = wait_bound) {
        if (pid_ <= 0 || reaped_) return status_;
        if (!exits_within(bound)) {
            std::fprintf(stderr, "ChildProcess: %s (pid %d) did not exit within %lld ms of the wait; killed\n",
                         program_.c_str(), static_cast<int>(pid_), static_cast<long long>(bound.count()));
            ::kill(pid_, SIGKILL);
        }
        while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
        }
        reaped_ = true;
        return status_;
    }

    // The next line of the child's stdout, or "" at EOF or after timeout.
    std::string read_line(std::chrono::milliseconds timeout) { return next_line(timeout).value_or(""); }
    // The next line of the child's stdout, empty ones included; nullopt at EOF or
    // after timeout.
    std::optional<std::string> next_line(std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
                std::string line = buffer_.substr(0, nl);
                buffer_.erase(0, nl + 1);
                return line;
            }
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return std::nullopt;
            pollfd p{out_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            char chunk[4096];
            const ssize_t n = ::read(out_, chunk, sizeof chunk);
            if (n <= 0) return std::nullopt;
            buffer_.append(chunk, static_cast<std::size_t>(n));
        }
    }
    // Reads lines until one starts with prefix; returns it or "" on timeout/EOF.
    std::string wait_for_line(const std::string& prefix, std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            auto line = read_line(
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
            if (line.rfind(prefix, 0) == 0) return line;
            if (line.empty()) return "";
        }
        return "";
    }

private:
    // True once the child exited (it is then reaped by waitpid without blocking), false
    // when bound passed first. Waits on a pidfd: an event, not a poll loop.
    bool exits_within(std::chrono::milliseconds bound) const {
        const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
        if (fd < 0) return true; // no pidfd here: waitpid blocks as before
        const auto deadline = std::chrono::steady_clock::now() + bound;
        bool exited = false;
        for (;;) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd p{fd, POLLIN, 0};
            const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
            if (n > 0) {
                exited = true;
                break;
            }
            if (n == 0 || (n < 0 && errno != EINTR)) break;
        }
        ::close(fd);
        return exited;
    }

    std::string program_;
    pid_t pid_ = -1;
    int out_ = -1;
    int status_ = 0;
    bool reaped_ = false;
    std::string buffer_;
};

} // namespace msgpass::test
