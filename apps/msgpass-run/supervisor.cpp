// Process control of msgpass-run. Each child runs in its own process group, with
// stdin from /dev/null and stdout/stderr on pipes that the launcher reads with
// poll(). SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked and read from a signalfd
// in the same loop, so no handler races with the bookkeeping and no sleep is needed.
// Own process groups mean a terminal's Ctrl-C reaches only the launcher, which
// forwards it exactly once to every child (and to whatever the child started); a
// child that was told to stop by the terminal and by the launcher would otherwise
// see the signal twice. PR_SET_PDEATHSIG sends SIGTERM to the children when the
// launcher itself dies without cleaning up (SIGKILL).
#include "supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

extern char** environ;

namespace msgpass::run {

namespace {

using Clock = std::chrono::steady_clock;

// A child's line longer than this is forwarded in pieces, so that a child that never
// writes a newline cannot make the launcher's memory grow without bound.
constexpr std::size_t max_line = 64 * 1024;

// Writes everything, retrying after EINTR and waiting when the descriptor is
// non-blocking and full. False when the reader is gone (EPIPE) or on another error.
bool write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
        const ssize_t written = ::write(fd, data, size);
        if (written >= 0) {
            data += written;
            size -= static_cast<std::size_t>(written);
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            pollfd out{fd, POLLOUT, 0};
            if (::poll(&out, 1, -1) < 0 && errno != EINTR) return false;
            continue;
        }
        return false;
    }
    return true;
}

void say(const std::string& message) {
    const std::string line = "msgpass-run: " + message + "\n";
    write_all(STDERR_FILENO, line.data(), line.size());
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = ::strsignal(sig);
        return "killed by signal " + std::to_string(sig) + " (" + (name != nullptr ? name : "unknown") + ")";
    }
    return "status " + std::to_string(status);
}

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd); // EINTR on close still releases the descriptor on Linux
    fd = -1;
}

// Output of one child stream on its way to the launcher's stdout or stderr.
struct Stream {
    int fd = -1;
    int target = STDOUT_FILENO;
    std::string partial; // the start of a line whose newline has not arrived yet
};

struct Child {
    const Launch* launch = nullptr;
    std::string prefix; // "[name] "
    pid_t pid = -1;
    bool running = false;
    bool killed_by_us = false; // SIGKILL after the grace time
    Stream out;
    Stream err;
};

enum class ReadResult { data, again, eof };

[[noreturn]] void exec_child(const Launch& launch, int null_fd, int out_fd, int err_fd, char* const* argv,
                             char* const* envp, pid_t parent, const sigset_t& original_mask) {
    ::setpgid(0, 0);
    if (::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 || ::dup2(err_fd, STDERR_FILENO) < 0)
        ::_exit(127);
    ::signal(SIGPIPE, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &original_mask, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1); // the launcher died before PDEATHSIG was armed
    ::execvpe(argv[0], argv, envp);
    const int error = errno;
    const char* reason = ::strerror(error);
    const std::string& program = launch.argv.front();
    const char* pieces[] = {"msgpass-run: cannot execute '", program.c_str(), "': ", reason, "\n"};
    for (const char* piece : pieces)
        write_all(STDERR_FILENO, piece, std::strlen(piece));
    ::_exit(127);
}

class Supervisor {
public:
    explicit Supervisor(std::chrono::milliseconds grace) : grace_(grace) {}
    Supervisor(const Supervisor&) = delete;
    Supervisor& operator=(const Supervisor&) = delete;

    ~Supervisor() {
        // Reached with children still running only when an exception left run().
        for (auto& child : children_) {
            if (!child.running) continue;
            ::kill(-child.pid, SIGKILL);
            ::kill(child.pid, SIGKILL);
            while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
            }
        }
        for (auto& child : children_) {
            close_fd(child.out.fd);
            close_fd(child.err.fd);
        }
        close_fd(signal_fd_);
        close_fd(null_fd_);
        if (mask_saved_) ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
    }

    int run(const std::vector<Launch>& plan) {
        if (!setup()) return 1;
        children_.reserve(plan.size()); // Child addresses stay valid while polling
        for (const auto& launch : plan) {
            children_.emplace_back();
            Child& child = children_.back();
            child.launch = &launch;
            child.prefix = "[" + launch.name + "] ";
            child.out.target = STDOUT_FILENO;
            child.err.target = STDERR_FILENO;
            if (!spawn(child)) {
                children_.pop_back();
                stop(SIGTERM, 1);
                break;
            }
        }
        loop();
        return exit_code_;
    }

private:
    bool setup() {
        // Children must be reapable here even if our parent asked to ignore SIGCHLD.
        ::signal(SIGCHLD, SIG_DFL);
        // A launcher whose reader went away keeps supervising rather than dying.
        ::signal(SIGPIPE, SIG_IGN);
        sigset_t mask;
        sigemptyset(&mask);
        for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD})
            sigaddset(&mask, sig);
        if (::sigprocmask(SIG_BLOCK, &mask, &original_mask_) != 0) {
            say(std::string("sigprocmask: ") + std::strerror(errno));
            return false;
        }
        mask_saved_ = true;
        signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        null_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (signal_fd_ < 0 || null_fd_ < 0) {
            say(std::string("cannot set up: ") + std::strerror(errno));
            return false;
        }
        return true;
    }

    bool spawn(Child& child) {
        const Launch& launch = *child.launch;
        int out[2] = {-1, -1};
        int err[2] = {-1, -1};
        if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
            say("node " + std::to_string(launch.id) + " (" + launch.name + "): pipe: " + std::strerror(errno));
            for (int* fd : {&out[0], &out[1], &err[0], &err[1]})
                close_fd(*fd);
            return false;
        }
        // Everything the child needs is built before fork, so that the child only
        // calls the few functions between fork and exec.
        const std::vector<std::string> env = child_environment(launch, environ);
        std::vector<char*> argv;
        for (const auto& arg : launch.argv)
            argv.push_back(const_cast<char*>(arg.c_str()));
        argv.push_back(nullptr);
        std::vector<char*> envp;
        for (const auto& entry : env)
            envp.push_back(const_cast<char*>(entry.c_str()));
        envp.push_back(nullptr);

        const pid_t parent = ::getpid();
        const pid_t pid = ::fork();
        if (pid == 0) exec_child(launch, null_fd_, out[1], err[1], argv.data(), envp.data(), parent, original_mask_);
        const int fork_error = errno;
        close_fd(out[1]);
        close_fd(err[1]);
        if (pid < 0) {
            say("node " + std::to_string(launch.id) + " (" + launch.name + "): fork: " + std::strerror(fork_error));
            close_fd(out[0]);
            close_fd(err[0]);
            return false;
        }
        // Also here, so that the group exists before any signal is sent to it.
        ::setpgid(pid, pid);
        child.pid = pid;
        child.running = true;
        child.out.fd = out[0];
        child.err.fd = err[0];
        for (const int fd : {out[0], err[0]})
            ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        return true;
    }

    bool any_running() const {
        for (const auto& child : children_)
            if (child.running) return true;
        return false;
    }

    // Sends `sig` to every running child's process group; on the first call also
    // starts the grace period and fixes the exit code.
    void stop(int sig, int exit_code) {
        if (!stopping_) {
            stopping_ = true;
            deadline_ = Clock::now() + grace_;
            exit_code_ = exit_code;
        }
        for (auto& child : children_) {
            if (!child.running) continue;
            if (::kill(-child.pid, sig) != 0) ::kill(child.pid, sig);
        }
    }

    void kill_remaining() {
        killed_ = true;
        for (auto& child : children_) {
            if (!child.running) continue;
            say("node " + std::to_string(child.launch->id) + " (" + child.launch->name + ") did not stop within the " +
                std::to_string(grace_.count()) + " ms grace time; sending SIGKILL");
            child.killed_by_us = true;
            if (::kill(-child.pid, SIGKILL) != 0) ::kill(child.pid, SIGKILL);
        }
    }

    void emit(int target, const std::string& text) {
        bool& broken = target == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
        if (broken || text.empty()) return;
        if (!write_all(target, text.data(), text.size())) broken = true;
    }

    // Forwards every complete line held in the stream; `final` also forwards the rest.
    void forward(Stream& stream, const std::string& prefix, bool final) {
        std::string text;
        std::size_t start = 0;
        for (auto newline = stream.partial.find('\n'); newline != std::string::npos;
             newline = stream.partial.find('\n', start)) {
            text += prefix;
            text.append(stream.partial, start, newline - start + 1);
            start = newline + 1;
        }
        stream.partial.erase(0, start);
        if (!stream.partial.empty() && (final || stream.partial.size() >= max_line)) {
            text += prefix + stream.partial + "\n";
            stream.partial.clear();
        }
        emit(stream.target, text);
    }

    ReadResult read_some(Stream& stream, const std::string& prefix) {
        char buffer[16384];
        while (true) {
            const ssize_t got = ::read(stream.fd, buffer, sizeof buffer);
            if (got > 0) {
                stream.partial.append(buffer, static_cast<std::size_t>(got));
                forward(stream, prefix, false);
                return ReadResult::data;
            }
            if (got < 0 && errno == EINTR) continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::again;
            return ReadResult::eof; // end of file, or an error that ends the stream too
        }
    }

    void finish_stream(Stream& stream, const std::string& prefix) {
        forward(stream, prefix, true);
        close_fd(stream.fd);
    }

    // Everything a dead child wrote is already in its pipes: forward it and close
    // them, so that a grandchild holding the pipe open cannot keep the launcher alive.
    void drain(Child& child) {
        for (Stream* stream : {&child.out, &child.err}) {
            if (stream->fd < 0) continue;
            // Bounded, in case a grandchild keeps writing into the inherited pipe.
            for (int reads = 0; reads < 256 && read_some(*stream, child.prefix) == ReadResult::data; ++reads) {
            }
            finish_stream(*stream, child.prefix);
        }
    }

    void reap() {
        for (auto& child : children_) {
            if (!child.running) continue;
            int status = 0;
            pid_t done = 0;
            do {
                done = ::waitpid(child.pid, &status, WNOHANG);
            } while (done < 0 && errno == EINTR);
            if (done == 0) continue;
            child.running = false;
            drain(child);
            if (done < 0) {
                say("node " + std::to_string(child.launch->id) + " (" + child.launch->name +
                    "): waitpid: " + std::strerror(errno));
                stop(SIGTERM, 1);
                continue;
            }
            const bool success = WIFEXITED(status) && WEXITSTATUS(status) == 0;
            if (!success && !stopping_) {
                say("node " + std::to_string(child.launch->id) + " (" + child.launch->name +
                    ") failed: " + describe_status(status));
                stop(SIGTERM, 1);
            }
        }
    }

    void read_signals() {
        signalfd_siginfo info{};
        while (true) {
            const ssize_t got = ::read(signal_fd_, &info, sizeof info);
            if (got < 0 && errno == EINTR) continue;
            if (got != static_cast<ssize_t>(sizeof info)) return;
            const int sig = static_cast<int>(info.ssi_signo);
            if (sig == SIGCHLD)
                reap();
            else
                stop(sig, 128 + sig);
        }
    }

    void loop() {
        std::vector<pollfd> fds;
        std::vector<std::pair<Child*, Stream*>> streams;
        while (any_running()) {
            fds.assign(1, pollfd{signal_fd_, POLLIN, 0});
            streams.clear();
            for (auto& child : children_) {
                for (Stream* stream : {&child.out, &child.err}) {
                    if (stream->fd < 0) continue;
                    fds.push_back(pollfd{stream->fd, POLLIN, 0});
                    streams.emplace_back(&child, stream);
                }
            }
            int timeout = -1;
            if (stopping_ && !killed_) {
                const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
                timeout = static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, left.count()));
            }
            const int ready = ::poll(fds.data(), fds.size(), timeout);
            if (ready < 0 && errno != EINTR) {
                say(std::string("poll: ") + std::strerror(errno));
                if (!stopping_) exit_code_ = 1;
                stopping_ = true;
                kill_remaining();
                wait_all_blocking();
                return;
            }
            for (std::size_t i = 0; ready > 0 && i < streams.size(); ++i) {
                if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
                auto [child, stream] = streams[i];
                if (stream->fd >= 0 && read_some(*stream, child->prefix) == ReadResult::eof)
                    finish_stream(*stream, child->prefix);
            }
            if (ready > 0 && (fds[0].revents & POLLIN) != 0) read_signals();
            if (stopping_ && !killed_ && Clock::now() >= deadline_) kill_remaining();
        }
    }

    void wait_all_blocking() {
        for (auto& child : children_) {
            if (!child.running) continue;
            while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
            }
            child.running = false;
            drain(child);
        }
    }

    std::chrono::milliseconds grace_;
    std::vector<Child> children_;
    sigset_t original_mask_{};
    bool mask_saved_ = false;
    int signal_fd_ = -1;
    int null_fd_ = -1;
    bool stopping_ = false;
    bool killed_ = false;
    Clock::time_point deadline_{};
    int exit_code_ = 0;
    bool stdout_broken_ = false;
    bool stderr_broken_ = false;
};

} // namespace

int supervise(const std::vector<Launch>& plan, std::chrono::milliseconds grace) {
    Supervisor supervisor(grace);
    return supervisor.run(plan);
}

} // namespace msgpass::run
