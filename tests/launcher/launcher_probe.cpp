// launcher_probe: the program the launcher tests start through msgpass-run. It
// prints the identity msgpass-run gave it ("node <id> <name>") and then does what
// its arguments ask, in this order:
//   --env            print the MSGPASS_* variables ("env NAME=value", newlines as |)
//   --fds            print its open descriptors ("fds 0 1 2")
//   --lines N        print "line 1" .. "line N" on stdout
//   --stderr TEXT    print TEXT on stderr
//   --fail ID:CODE   node ID exits with CODE here
//   --raise ID:SIG   node ID kills itself with signal SIG here
//   --wait           print "ready", wait for SIGINT/SIGTERM/SIGHUP, print "got SIGxxx", exit 0
//   --stubborn       print "ready", ignore SIGTERM and wait for SIGKILL
//   --partial TEXT   print TEXT without a newline
//   --exit CODE      exit with CODE (default 0)
//   --sci            join the partition with the sci technology (a factory and a node
//                    to every other node) and print "segment <name>" for each segment
//                    it made; the factory is never destroyed, as in a program that
//                    ends with exit() or a signal, so its segments stay behind
//   --await-segments N  wait until N segments of the partition exist (so that a
//                    node fails only once every node made its own), at most 60 s
// Signals are blocked from the first instruction so that a signal sent after
// "ready" is always seen by sigwait. Waits end after two minutes at the latest, so a
// broken test cannot leave a probe behind for long.
#include <msgpass/msgpass.hpp>
#include <msgpass/sci/naming.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <string>

namespace {

void put(int fd, const std::string& text) {
    const char* data = text.data();
    std::size_t size = text.size();
    while (size > 0) {
        const ssize_t written = ::write(fd, data, size);
        if (written < 0 && errno == EINTR) continue;
        if (written < 0) std::_Exit(90);
        data += written;
        size -= static_cast<std::size_t>(written);
    }
}

void line(const std::string& text) {
    put(STDOUT_FILENO, text + "\n");
}

std::string env(const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
}

// "ID:VALUE" -> true and VALUE when ID is this node.
bool for_me(const std::string& spec, const std::string& self, int& value) {
    const auto colon = spec.find(':');
    if (colon == std::string::npos) std::_Exit(91);
    if (spec.substr(0, colon) != self) return false;
    value = std::atoi(spec.c_str() + colon + 1);
    return true;
}

const char* signal_name(int sig) {
    switch (sig) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    default:
        return "other";
    }
}

int wait_for(const sigset_t& set) {
    const timespec limit{120, 0};
    while (true) {
        const int sig = ::sigtimedwait(&set, nullptr, &limit);
        if (sig > 0) return sig;
        if (errno != EINTR) std::_Exit(92);
    }
}

// The factory of --sci, kept in a global so that it stays reachable (not a leak for
// the sanitizers) and is never destroyed.
msgpass::NodeFactory* never_destroyed = nullptr;

// --sci: the partition's configuration comes from the MSGPASS_* variables, as for
// any program msgpass-run starts.
void join_sci(char* program) {
    char* args[] = {program, nullptr};
    try {
        const auto options = msgpass::options(1, args);
        never_destroyed = msgpass::NodeFactory::create(options).release();
        for (const auto& node : options.configuration.nodes)
            if (node.id != options.self) never_destroyed->create_node(node.id);
        std::error_code error;
        const auto address = msgpass::sci::segment_address(options.configuration, options.self);
        for (const auto& name : msgpass::sci::node_segments(address, error))
            line("segment " + name);
        if (error) std::_Exit(97);
    } catch (const std::exception& e) {
        put(STDERR_FILENO, std::string("launcher_probe: --sci: ") + e.what() + "\n");
        std::_Exit(98);
    }
}

} // namespace

int main(int argc, char** argv) {
    sigset_t waited;
    sigemptyset(&waited);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP})
        sigaddset(&waited, sig);
    ::sigprocmask(SIG_BLOCK, &waited, nullptr);

    const std::string self = env("MSGPASS_NODE_ID");
    line("node " + self + " " + env("MSGPASS_NODE_NAME"));
    int exit_code = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        int number = 0;
        if (arg == "--env") {
            for (const char* name : {"MSGPASS_NODE_ID", "MSGPASS_NODE_NAME", "MSGPASS_PARTITION", "MSGPASS_CONFIG",
                                     "MSGPASS_NODES", "MSGPASS_SET"}) {
                std::string text = std::getenv(name) != nullptr ? env(name) : "<unset>";
                for (char& c : text)
                    if (c == '\n') c = '|';
                line(std::string("env ") + name + "=" + text);
            }
        } else if (arg == "--fds") {
            DIR* dir = ::opendir("/proc/self/fd");
            if (dir == nullptr) return 93;
            std::set<int> fds;
            while (const dirent* entry = ::readdir(dir)) {
                if (entry->d_name[0] != '.') fds.insert(std::atoi(entry->d_name));
            }
            fds.erase(::dirfd(dir));
            ::closedir(dir);
            std::string text = "fds";
            for (const int fd : fds)
                text += " " + std::to_string(fd);
            line(text);
        } else if (arg == "--lines") {
            const int count = std::atoi(value.c_str());
            std::string text;
            for (int n = 1; n <= count; ++n)
                text += "line " + std::to_string(n) + "\n";
            put(STDOUT_FILENO, text);
            ++i;
        } else if (arg == "--stderr") {
            put(STDERR_FILENO, value + "\n");
            ++i;
        } else if (arg == "--fail") {
            if (for_me(value, self, number)) return number;
            ++i;
        } else if (arg == "--raise") {
            if (for_me(value, self, number)) {
                ::signal(number, SIG_DFL);
                sigset_t one;
                sigemptyset(&one);
                sigaddset(&one, number);
                ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
                ::raise(number);
                return 94;
            }
            ++i;
        } else if (arg == "--wait") {
            line("ready");
            line(std::string("got ") + signal_name(wait_for(waited)));
        } else if (arg == "--stubborn") {
            ::signal(SIGTERM, SIG_IGN);
            sigset_t others;
            sigemptyset(&others);
            sigaddset(&others, SIGHUP);
            line("ready");
            wait_for(others);
            return 95;
        } else if (arg == "--partial") {
            put(STDOUT_FILENO, value);
            ++i;
        } else if (arg == "--sci") {
            join_sci(argv[0]);
        } else if (arg == "--await-segments") {
            const auto wanted = static_cast<std::size_t>(std::atoi(value.c_str()));
            const std::string user = msgpass::sci::segment_user();
            const std::string partition = env("MSGPASS_PARTITION");
            // A condition in /dev/shm has no event to wait on: checked every
            // millisecond, with a deadline.
            for (int waited_ms = 0;; ++waited_ms) {
                std::error_code error;
                if (msgpass::sci::partition_segments(user, partition, error).size() >= wanted) break;
                if (waited_ms >= 60000) {
                    put(STDERR_FILENO, "launcher_probe: fewer than " + value + " segments after 60 s\n");
                    return 99;
                }
                const timespec step{0, 1000000};
                ::nanosleep(&step, nullptr);
            }
            ++i;
        } else if (arg == "--exit") {
            exit_code = std::atoi(value.c_str());
            ++i;
        } else {
            put(STDERR_FILENO, "launcher_probe: unknown argument " + arg + "\n");
            return 96;
        }
    }
    return exit_code;
}
