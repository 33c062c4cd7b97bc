// msgpass-run [options] -- PROGRAM [ARGS...]: starts one process per node of this
// host from the network and nodes files (BIP's bipload for a partition, like mpirun),
// telling each its identity through MSGPASS_* variables; --dry-run shows what would
// start and --cleanup removes the partition's leftover shared-memory segments.
// Exit codes: 0 success, 1 a node failed, 2 bad command line or configuration,
// 128+N stopped by signal N. See docs/launcher.md.
#include "plan.hpp"
#include "supervisor.hpp"

#include <msgpass/msgpass.hpp>

#include <boost/program_options.hpp>

#include <fcntl.h>
#include <pwd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

// Children and messages rely on descriptors 0-2 being open: a pipe created while
// one of them is closed would otherwise land there and be clobbered by dup2.
void ensure_standard_descriptors() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        const int opened = ::open("/dev/null", O_RDWR);
        if (opened >= 0 && opened != fd) ::close(opened);
    }
}

std::string user_name() {
    if (const passwd* entry = ::getpwuid(::geteuid()); entry != nullptr && entry->pw_name != nullptr)
        return entry->pw_name;
    return std::to_string(::geteuid());
}

// Removes (or with dry_run only lists) /dev/shm/msgpass.<user>.<partition>.*.
int cleanup(const msgpass::config::Configuration& configuration, bool dry_run) {
    const std::string prefix = "msgpass." + user_name() + "." + configuration.partition + ".";
    std::vector<std::string> names;
    std::error_code error;
    for (fs::directory_iterator it("/dev/shm", error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, prefix.size(), prefix) == 0) names.push_back(name);
    }
    if (error) {
        std::cerr << "msgpass-run: cannot list /dev/shm: " << error.message() << "\n";
        return exit_failure;
    }
    std::sort(names.begin(), names.end());
    int result = 0;
    for (const auto& name : names) {
        const std::string shm_name = "/" + name;
        if (dry_run) {
            std::cout << "would remove " << shm_name << "\n";
        } else if (::shm_unlink(shm_name.c_str()) == 0 || errno == ENOENT) {
            std::cout << "removed " << shm_name << "\n";
        } else {
            std::cerr << "msgpass-run: cannot remove " << shm_name << ": " << std::strerror(errno) << "\n";
            result = exit_failure;
        }
    }
    return result;
}

void print_config_error(const std::string& what) {
    std::cerr << what;
    if (what.empty() || what.back() != '\n') std::cerr << '\n';
}

int run(int argc, char** argv) {
    po::options_description visible(
        "Usage: msgpass-run [options] -- PROGRAM [ARGS...]\n\n"
        "Starts one process per node of the nodes file that lives on this host, each running\n"
        "the node's own command or PROGRAM ARGS; forwards their output and signals, and stops\n"
        "the partition when one fails (docs/launcher.md).\n\n"
        "Options");
    visible.add_options()                                                                           //
        ("config", po::value<std::string>()->default_value("network.yaml", "")->value_name("FILE"), //
         "network file (default network.yaml)")                                                     //
        ("nodes", po::value<std::string>()->default_value("nodes.yaml", "")->value_name("FILE"),    //
         "nodes file (default nodes.yaml)")                                                         //
        ("set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),        //
         "override of the network file (repeatable), also passed to the programs")                  //
        ("only", po::value<std::vector<std::string>>()->composing()->value_name("IDS"),             //
         "start only these node ids: 1,2,5")                                                        //
        ("all-hosts", po::bool_switch(), "start the nodes of every host here (tests)")              //
        ("dry-run", po::bool_switch(), "print what would start (or be removed) and do nothing")     //
        ("grace", po::value<double>()->default_value(5.0, "")->value_name("SECONDS"),               //
         "time between SIGTERM and SIGKILL when stopping the others (default 5)")                   //
        ("cleanup", po::bool_switch(), "remove the partition's shared-memory segments and exit")    //
        ("help,h", "show this help");
    po::options_description hidden;
    hidden.add_options()("program", po::value<std::vector<std::string>>());
    po::options_description all;
    all.add(visible).add(hidden);
    po::positional_options_description positional;
    positional.add("program", -1);

    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
    if (vm.count("help") != 0) {
        std::cout << visible << "\n";
        return 0;
    }

    const double grace_seconds = vm["grace"].as<double>();
    if (!std::isfinite(grace_seconds) || grace_seconds < 0 || grace_seconds > 86400)
        throw msgpass::run::UsageError("--grace: expected seconds between 0 and 86400");
    const std::vector<std::string> sets =
        vm.count("set") != 0 ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
    const std::vector<std::string> program =
        vm.count("program") != 0 ? vm["program"].as<std::vector<std::string>>() : std::vector<std::string>{};

    const fs::path config_file = vm["config"].as<std::string>();
    const fs::path nodes_file = vm["nodes"].as<std::string>();
    // The technologies' names and sections, which the files are checked against.
    msgpass::register_builtin_technologies();
    const auto configuration = msgpass::config::load(config_file, nodes_file, sets);

    if (vm["cleanup"].as<bool>()) {
        if (!program.empty()) throw msgpass::run::UsageError("--cleanup takes no PROGRAM");
        return cleanup(configuration, vm["dry-run"].as<bool>());
    }

    msgpass::run::PlanRequest request;
    request.config_file = fs::absolute(config_file);
    request.nodes_file = fs::absolute(nodes_file);
    request.sets = sets;
    if (vm.count("only") != 0) {
        std::set<msgpass::NodeId> only;
        for (const auto& text : vm["only"].as<std::vector<std::string>>())
            only.merge(msgpass::run::parse_only(text));
        request.only = std::move(only);
    }
    request.all_hosts = vm["all-hosts"].as<bool>();
    request.this_host = msgpass::run::this_host_name();
    request.program = program;
    const auto plan = msgpass::run::make_plan(configuration, request);

    if (vm["dry-run"].as<bool>()) {
        for (const auto& launch : plan)
            std::cout << msgpass::run::dry_run_line(launch) << "\n";
        return 0;
    }
    std::cout.flush();
    const auto grace = std::chrono::milliseconds(std::llround(grace_seconds * 1000.0));
    return msgpass::run::supervise(plan, grace);
}

} // namespace

int main(int argc, char** argv) {
    ensure_standard_descriptors();
    try {
        return run(argc, argv);
    } catch (const msgpass::ConfigError& error) {
        print_config_error(error.what());
        return exit_usage;
    } catch (const msgpass::run::UsageError& error) {
        std::cerr << "msgpass-run: " << error.what() << "\n";
        return exit_usage;
    } catch (const po::error& error) {
        std::cerr << "msgpass-run: " << error.what() << "\nTry 'msgpass-run --help'.\n";
        return exit_usage;
    } catch (const std::exception& error) {
        std::cerr << "msgpass-run: " << error.what() << "\n";
        return exit_failure;
    }
}
