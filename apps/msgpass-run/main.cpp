// msgpass-run [options] -- PROGRAM [ARGS...]: starts one process per node of this
// host from the network and nodes files, or with -n N, N processes in a partition
// made on the fly (local.hpp) (BIP's bipload for a partition, like mpirun),
// telling each its identity through MSGPASS_* variables, and at the end removes the
// shared-memory segments its nodes left behind; --dry-run shows what would start and
// --cleanup removes the partition's leftover shared-memory segments.
// Exit codes: 0 success, 1 a node failed, 2 bad command line or configuration,
// 128+N stopped by signal N. See docs/launcher.md.
#include "local.hpp"
#include "plan.hpp"
#include "supervisor.hpp"

#include <msgpass/kit/stats_page.hpp>
#include <msgpass/msgpass.hpp>

#include <boost/program_options.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
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

// Says what removing a leftover did (or with dry_run would do); false when it failed.
bool report_removal(const std::string& name, msgpass::LeftoverRemoval removal, const std::error_code& error,
                    bool dry_run) {
    switch (removal) {
    case msgpass::LeftoverRemoval::removed:
    case msgpass::LeftoverRemoval::absent:
        std::cout << (dry_run ? "would remove " : "removed ") << name << "\n";
        return true;
    case msgpass::LeftoverRemoval::in_use:
        std::cout << (dry_run ? "would keep " : "kept ") << name << ": a live process holds it\n";
        return true;
    case msgpass::LeftoverRemoval::failed:
        break;
    }
    std::cerr << "msgpass-run: cannot remove " << name << ": " << error.message() << "\n";
    return false;
}

// Removes (or with dry_run only lists) what the partition left behind: the leftovers
// of every technology that has some, listed and removed as the technology registered
// them (sci: its segments), and the statistics pages (named as the kit names them,
// msgpass/kit/stats_page.hpp, and locked by their owner), except those a live
// process holds.
int cleanup(const msgpass::config::Configuration& configuration, bool dry_run) {
    int result = 0;
    for (const auto& [technology, leftovers] : msgpass::TechnologyRegistry::instance().leftovers()) {
        std::error_code error;
        const auto names = leftovers.of_partition(configuration.partition, error);
        if (error) {
            std::cerr << "msgpass-run: cannot list " << leftovers.where << ": " << error.message() << "\n";
            return exit_failure;
        }
        for (const auto& name : names) {
            const auto removal = leftovers.remove(name, error, dry_run);
            if (!report_removal(name, removal, error, dry_run)) result = exit_failure;
        }
    }
    std::error_code error;
    const auto pages = msgpass::kit::find_stats_pages(msgpass::kit::stats_user(), configuration.partition, error);
    if (error) {
        std::cerr << "msgpass-run: cannot list the statistics pages: " << error.message() << "\n";
        return exit_failure;
    }
    for (const auto& page : pages) {
        const auto removal = msgpass::kit::remove_unheld_shm(page, error, dry_run);
        if (!report_removal(page, removal, error, dry_run)) result = exit_failure;
    }
    return result;
}

// At the end of a partition, however it ended: removes what the nodes this launcher
// started left behind that no live process holds any more (a process killed by a
// signal, or one that ended without destroying its factory, leaves its segments).
// What other nodes and partitions left, and what a live process holds (another
// launcher's process with the same node id, say), stays.
void remove_segments_left(const msgpass::config::Configuration& configuration,
                          const std::vector<msgpass::run::Launch>& plan) {
    const auto technologies = msgpass::TechnologyRegistry::instance().leftovers();
    for (const auto& launch : plan) {
        int removed = 0;
        std::error_code error;
        for (const auto& [technology, leftovers] : technologies) {
            const auto names = leftovers.of_node(configuration, launch.id, error);
            if (error) {
                std::cerr << "msgpass-run: cannot list " << leftovers.where << ": " << error.message() << "\n";
                return;
            }
            for (const auto& name : names) {
                const auto removal = leftovers.remove(name, error, false);
                if (removal == msgpass::LeftoverRemoval::removed) ++removed;
                if (removal == msgpass::LeftoverRemoval::failed)
                    std::cerr << "msgpass-run: cannot remove " << name << ": " << error.message() << "\n";
            }
        }
        // The node's statistics page, left by a process that did not destroy its
        // factory; not counted above, which tells of the memory of the segments.
        const auto page = msgpass::kit::stats_page_name(msgpass::kit::stats_user(), configuration.partition, launch.id);
        if (msgpass::kit::remove_unheld_shm(page, error) == msgpass::LeftoverRemoval::failed)
            std::cerr << "msgpass-run: cannot remove " << page << ": " << error.message() << "\n";
        if (removed > 0) {
            std::cerr << "msgpass-run: removed " << removed << " shared-memory segment" << (removed == 1 ? "" : "s")
                      << " left by node " << launch.id << " (" << launch.name << ")\n";
        }
    }
}

void print_config_error(const std::string& what) {
    std::cerr << what;
    if (what.empty() || what.back() != '\n') std::cerr << '\n';
}

int run(int argc, char** argv) {
    po::options_description visible(
        "Usage: msgpass-run [options] -- PROGRAM [ARGS...]\n"
        "       msgpass-run -n N [--technology T] [options] -- PROGRAM [ARGS...]\n\n"
        "Starts one process per node of the nodes file that lives on this host, each running\n"
        "the node's own command or PROGRAM ARGS; forwards their output and signals, and stops\n"
        "the partition when one fails (docs/launcher.md). With -n, starts N processes of\n"
        "PROGRAM on this host in a partition made on the fly, no files needed: rank r is\n"
        "node r+1, named rank-r (MPI programs, docs/mpi.md).\n\n"
        "Options");
    visible.add_options()                                                                              //
        ("config", po::value<std::string>()->default_value("network.yaml", "")->value_name("FILE"),    //
         "network file (default network.yaml)")                                                        //
        ("nodes", po::value<std::string>()->default_value("nodes.yaml", "")->value_name("FILE"),       //
         "nodes file (default nodes.yaml)")                                                            //
        ("np,n", po::value<int>()->value_name("N"),                                                    //
         "start N processes of PROGRAM in a partition made on the fly (no --config, --nodes)")         //
        ("technology", po::value<std::string>()->value_name("T"),                                      //
         "the technology, sci (default with -n), tcp, udp or auto; with files: run their partition "   //
         "over T, nodes without a port getting one free here")                                         //
        ("set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),           //
         "override of the network file (repeatable), also passed to the programs")                     //
        ("only", po::value<std::vector<std::string>>()->composing()->value_name("IDS"),                //
         "start only these node ids: 1,2,5")                                                           //
        ("all-hosts", po::bool_switch(), "start the nodes of every host here (tests)")                 //
        ("launch-agent", po::value<std::string>()->value_name("COMMAND"),                              //
         "start the nodes of other hosts through COMMAND, e.g. 'ssh -tt {host}' ({host}: the node's "  //
         "host; {command}: its command line as one word, else appended)")                              //
        ("dry-run", po::bool_switch(), "print what would start (or be removed) and do nothing")        //
        ("grace", po::value<double>()->default_value(5.0, "")->value_name("SECONDS"),                  //
         "time between SIGTERM and SIGKILL when stopping the others (default 5)")                      //
        ("cleanup", po::bool_switch(), "remove the partition's stale shared-memory segments and exit") //
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

    fs::path config_file = vm["config"].as<std::string>();
    fs::path nodes_file = vm["nodes"].as<std::string>();
    // -n: the files of a partition made on the fly, removed however the run ends.
    struct LocalFiles {
        std::optional<msgpass::run::LocalPartition> local;
        ~LocalFiles() {
            if (local) msgpass::run::remove_local_partition(*local);
        }
    } local_files;
    if (vm.count("np") != 0) {
        if (!vm["config"].defaulted() || !vm["nodes"].defaulted())
            throw msgpass::run::UsageError("-n makes its own partition: it takes no --config or --nodes");
        if (vm.count("only") != 0 || vm["cleanup"].as<bool>())
            throw msgpass::run::UsageError("-n starts every rank: it takes no --only or --cleanup");
        if (program.empty()) throw msgpass::run::UsageError("-n needs a PROGRAM after --");
        const std::string technology = vm.count("technology") != 0 ? vm["technology"].as<std::string>() : "sci";
        local_files.local = msgpass::run::make_local_partition(vm["np"].as<int>(), technology);
        config_file = local_files.local->network_file;
        nodes_file = local_files.local->nodes_file;
    }
    // The technologies' names and sections, which the files are checked against.
    msgpass::register_builtin_technologies();
    auto configuration = msgpass::config::load(config_file, nodes_file, sets);
    std::vector<std::string> all_sets = sets;
    if (vm.count("np") == 0 && vm.count("technology") != 0) {
        // The files as written are checked above (errors name their lines); then the
        // partition runs over T from a copy of the nodes file with free ports.
        const std::string technology = vm["technology"].as<std::string>();
        local_files.local = msgpass::run::with_free_ports(nodes_file, technology);
        nodes_file = local_files.local->nodes_file;
        all_sets.push_back("technology=" + technology);
        configuration = msgpass::config::load(config_file, nodes_file, all_sets);
    }

    if (vm["cleanup"].as<bool>()) {
        if (!program.empty()) throw msgpass::run::UsageError("--cleanup takes no PROGRAM");
        return cleanup(configuration, vm["dry-run"].as<bool>());
    }

    msgpass::run::PlanRequest request;
    request.config_file = fs::absolute(config_file);
    request.nodes_file = fs::absolute(nodes_file);
    request.sets = all_sets;
    if (vm.count("only") != 0) {
        std::set<msgpass::NodeId> only;
        for (const auto& text : vm["only"].as<std::vector<std::string>>())
            only.merge(msgpass::run::parse_only(text));
        request.only = std::move(only);
    }
    request.all_hosts = vm["all-hosts"].as<bool>() || vm.count("np") != 0;
    request.this_host = msgpass::run::this_host_name();
    request.program = program;
    if (vm.count("launch-agent") != 0) {
        std::istringstream words(vm["launch-agent"].as<std::string>());
        for (std::string word; words >> word;)
            request.launch_agent.push_back(word);
        if (request.launch_agent.empty()) throw msgpass::run::UsageError("--launch-agent: the command is empty");
    }
    const auto plan = msgpass::run::make_plan(configuration, request);

    if (vm["dry-run"].as<bool>()) {
        for (const auto& launch : plan)
            std::cout << msgpass::run::dry_run_line(launch) << "\n";
        return 0;
    }
    std::cout.flush();
    const auto grace = std::chrono::milliseconds(std::llround(grace_seconds * 1000.0));
    const int code = msgpass::run::supervise(plan, grace);
    remove_segments_left(configuration, plan);
    return code;
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
