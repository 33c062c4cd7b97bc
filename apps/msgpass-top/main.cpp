// msgpass-top: a live view of the nodes of a partition on this host, read from the
// statistics pages their factories publish (msgpass/kit/stats_page.hpp), with no code
// in the application. Interactive like top (ncurses, a refresh a second, sort by a
// column, a node's peers on demand), or --once (a table, or --json: one JSON object
// per node, for scripts). Exit codes: 0 success, 1 an error while running, 2 bad
// command line or configuration, or no node of the partition on this host. --serve
// PORT serves the same counters to Prometheus (serve.hpp).
// docs/operations.md walks through it.
#include "serve.hpp"
#include "view.hpp"

#include <msgpass/msgpass.hpp>

#include <boost/program_options.hpp>

#include <curses.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace po = boost::program_options;

namespace {

constexpr int exit_usage = 2;

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The columns the screen sorts by, in order; the keys say which.
struct Column {
    const char* title;
    char key;
};
constexpr Column columns[] = {{"ID", 'i'},        {"NAME", 'n'},    {"STATE", 's'},    {"MSG/S IN", 'r'},
                              {"MSG/S OUT", 'w'}, {"MB/S IN", 'b'}, {"MB/S OUT", 'B'}, {"QUEUE", 'd'},
                              {"RETRY", 't'},     {"LOSSES", 'l'},  {"LOST", 'L'}};

double rate_or(const std::optional<msgpass::top::Rates>& r, double msgpass::top::Rates::*field) {
    return r ? (*r).*field : -1;
}

void sort_rows(std::vector<msgpass::top::Row>& rows, std::size_t column, bool descending) {
    using msgpass::top::Rates;
    using msgpass::top::Row;
    const auto less = [column](const Row& a, const Row& b) {
        switch (column) {
        case 1:
            return a.name < b.name;
        case 2:
            return a.state < b.state;
        case 3:
            return rate_or(a.rates, &Rates::msgs_in) < rate_or(b.rates, &Rates::msgs_in);
        case 4:
            return rate_or(a.rates, &Rates::msgs_out) < rate_or(b.rates, &Rates::msgs_out);
        case 5:
            return rate_or(a.rates, &Rates::mb_in) < rate_or(b.rates, &Rates::mb_in);
        case 6:
            return rate_or(a.rates, &Rates::mb_out) < rate_or(b.rates, &Rates::mb_out);
        case 7:
            return a.total.queue_depth < b.total.queue_depth;
        case 8:
            return a.total.retries < b.total.retries;
        case 9:
            return a.losses < b.losses;
        case 10:
            return a.peers_lost < b.peers_lost;
        default:
            return a.id < b.id;
        }
    };
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const Row& a, const Row& b) { return descending ? less(b, a) : less(a, b); });
}

volatile std::sig_atomic_t resized = 0;

// The interactive screen: redraws every interval, or at once on a key.
int interactive(const msgpass::top::Source& source, std::chrono::milliseconds interval) {
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    std::signal(SIGWINCH, [](int) { resized = 1; });
    std::size_t column = 0;
    bool descending = false;
    std::size_t selected = 0;
    std::uint32_t expanded = 0;
    bool any_expanded = false;
    auto previous = msgpass::top::take_sample(source);
    auto current = previous;
    auto next_sample = std::chrono::steady_clock::now() + interval;
    timeout(100);
    bool first = true;
    for (;;) {
        if (first || std::chrono::steady_clock::now() >= next_sample) {
            if (!first) {
                previous = std::move(current);
                current = msgpass::top::take_sample(source);
            } else {
                std::this_thread::sleep_for(std::chrono::milliseconds(200)); // a first rate, soon
                current = msgpass::top::take_sample(source);
            }
            first = false;
            next_sample = std::chrono::steady_clock::now() + interval;
        }
        auto rows = msgpass::top::make_rows(source, &previous, current);
        sort_rows(rows, column, descending);
        if (!rows.empty()) selected = std::min(selected, rows.size() - 1);
        if (resized) {
            resized = 0;
            endwin();
            refresh();
        }
        erase();
        mvprintw(0, 0, "msgpass-top  partition %s  %zu nodes  sorted by %s%s   keys: %s", source.partition.c_str(),
                 rows.size(), columns[column].title, descending ? " (desc)" : "",
                 "i n s r w b B d t l L sort, same key again reverses, arrows select, enter peers, q quit");
        std::vector<msgpass::top::Row> shown_rows = rows;
        for (auto& r : shown_rows)
            if (!(any_expanded && r.id == expanded)) r.peers.clear();
        // The table of --once, one node at a time so that the selected one is marked.
        int y = 2;
        const std::string header = msgpass::top::table({}, false);
        attron(A_BOLD);
        mvaddnstr(y++, 2, header.substr(0, header.find('\n')).c_str(), COLS - 3);
        attroff(A_BOLD);
        for (std::size_t i = 0; i < shown_rows.size() && y < LINES - 1; ++i) {
            auto text = msgpass::top::table({shown_rows[i]}, any_expanded && shown_rows[i].id == expanded);
            text = text.substr(text.find('\n') + 1); // without the header
            // Without the group lines of a single row.
            std::size_t at = 0;
            bool first_line = true;
            while (at < text.size() && y < LINES - 1) {
                const auto end = text.find('\n', at);
                const std::string l = text.substr(at, end - at);
                at = end == std::string::npos ? text.size() : end + 1;
                if (!first_line && l.find(" -> ") == std::string::npos) continue;
                const bool mark = i == selected && first_line;
                if (mark) attron(A_REVERSE);
                mvaddnstr(y++, 2, l.c_str(), COLS - 3);
                if (mark) attroff(A_REVERSE);
                first_line = false;
            }
        }
        ++y;
        const auto totals = msgpass::top::table(rows, false);
        for (std::size_t at = 0; at < totals.size() && y < LINES - 1;) {
            const auto end = totals.find('\n', at);
            const std::string l = totals.substr(at, end - at);
            at = end == std::string::npos ? totals.size() : end + 1;
            if (l.find("group ") != std::string::npos) mvaddnstr(y++, 2, l.c_str(), COLS - 3);
        }
        if (rows.empty())
            mvprintw(y, 2, "no node of partition %s publishes statistics on this host now", source.partition.c_str());
        refresh();
        const int key = getch();
        if (key == ERR) continue;
        if (key == 'q' || key == 'Q') break;
        if (key == KEY_UP && selected > 0) --selected;
        if (key == KEY_DOWN) ++selected;
        if ((key == '\n' || key == KEY_ENTER || key == ' ') && !rows.empty()) {
            const auto id = rows[std::min(selected, rows.size() - 1)].id;
            any_expanded = !(any_expanded && expanded == id);
            expanded = id;
        }
        for (std::size_t c = 0; c < std::size(columns); ++c) {
            if (key == columns[c].key) {
                descending = column == c ? !descending : c >= 3;
                column = c;
            }
        }
    }
    endwin();
    return 0;
}

int run(int argc, char** argv) {
    po::options_description visible(
        "Usage: msgpass-top --partition NAME [options]\n"
        "       msgpass-top [--config network.yaml] [--nodes nodes.yaml] [--set k=v]... [options]\n\n"
        "Shows the nodes of a partition on this host, from the statistics pages their\n"
        "factories publish: one line per node (id, name, technology, state, messages/s and\n"
        "MB/s in and out, send-queue depth, retries, losses, peers lost, last error) and the\n"
        "totals per group. Interactive like top, or --once. Exits 2 when no node of the\n"
        "partition publishes on this host (docs/operations.md).\n\n"
        "Options");
    visible.add_options()                                                                           //
        ("partition", po::value<std::string>()->value_name("NAME"), "the partition to show")        //
        ("config", po::value<std::string>()->value_name("FILE"), "network file (its partition)")    //
        ("nodes", po::value<std::string>()->value_name("FILE"),                                     //
         "nodes file (default nodes.yaml with --config): its nodes without a page show as absent")  //
        ("set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),        //
         "override of the network file (repeatable), as msgpass-run takes it")                      //
        ("once", po::bool_switch(), "print one view and exit (rates over --interval)")              //
        ("json", po::bool_switch(), "with --once: one JSON object per node, one a line")            //
        ("peers", po::bool_switch(), "with --once: the peers of each node under it")                //
        ("interval", po::value<int>()->default_value(1000, "")->value_name("MS"),                   //
         "time between the two snapshots that give the rates, and between refreshes "               //
         "(default 1000)")                                                                          //
        ("serve", po::value<int>()->value_name("PORT"),                                             //
         "serve the counters as OpenMetrics (Prometheus) at http://ADDRESS:PORT/metrics; without "  //
         "--partition or files, those of every partition of this user")                             //
        ("bind", po::value<std::string>()->default_value("127.0.0.1", "")->value_name("ADDRESS"),   //
         "with --serve: the address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)") //
        ("remote", po::value<std::vector<std::string>>()->composing()->value_name("HOST:PORT"),     //
         "also the nodes of another host, from its msgpass-top --serve (repeatable)")               //
        ("help,h", "show this help");
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(visible).run(), vm);
    po::notify(vm);
    if (vm.count("help") != 0) {
        std::cout << visible << "\n";
        return 0;
    }
    const int interval_ms = vm["interval"].as<int>();
    if (interval_ms < 10 || interval_ms > 3'600'000) throw UsageError("--interval: expected 10 to 3600000 ms");
    if (vm["json"].as<bool>() && !vm["once"].as<bool>()) throw UsageError("--json goes with --once");

    msgpass::top::Source source;
    source.user = msgpass::kit::stats_user();
    const bool files = vm.count("config") != 0 || vm.count("nodes") != 0 || vm.count("set") != 0;
    if (vm.count("serve") != 0) {
        const int port = vm["serve"].as<int>();
        if (port < 0 || port > 65535) throw UsageError("--serve: expected a port from 0 to 65535");
        if (vm["once"].as<bool>()) throw UsageError("--serve takes no --once");
        if (vm.count("remote") != 0) throw UsageError("--serve takes no --remote: each host serves its own nodes");
        if (vm.count("partition") != 0) source.partition = vm["partition"].as<std::string>();
        if (files) {
            msgpass::register_builtin_technologies();
            source.partition =
                msgpass::config::load(vm.count("config") ? vm["config"].as<std::string>() : "network.yaml",
                                      vm.count("nodes") ? vm["nodes"].as<std::string>() : "nodes.yaml",
                                      vm.count("set") ? vm["set"].as<std::vector<std::string>>()
                                                      : std::vector<std::string>{})
                    .partition;
        }
        return msgpass::top::serve(source, vm["bind"].as<std::string>(), static_cast<unsigned short>(port));
    }
    if (vm.count("partition") != 0) {
        if (files) throw UsageError("--partition takes no --config, --nodes or --set");
        source.partition = vm["partition"].as<std::string>();
        if (source.partition.empty()) throw UsageError("--partition: the name is empty");
    } else {
        const std::string config = vm.count("config") ? vm["config"].as<std::string>() : "network.yaml";
        const std::string nodes = vm.count("nodes") ? vm["nodes"].as<std::string>() : "nodes.yaml";
        const auto sets = vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
        msgpass::register_builtin_technologies();
        const auto configuration = msgpass::config::load(config, nodes, sets);
        source.partition = configuration.partition;
        source.technology = configuration.technology;
        for (const auto& node : configuration.nodes) {
            msgpass::top::Source::Expected e{node.id, node.name, node.host, {}};
            for (const auto& [group, members] : configuration.groups)
                if (std::find(members.begin(), members.end(), node.id) != members.end()) e.groups.push_back(group);
            source.expected.push_back(std::move(e));
        }
    }

    if (vm.count("remote") != 0) source.remotes = vm["remote"].as<std::vector<std::string>>();
    const auto first = msgpass::top::take_sample(source);
    for (const auto& problem : first.problems)
        std::cerr << "msgpass-top: " << problem << "\n";
    if (first.pages.empty()) {
        std::cerr << "msgpass-top: no node of partition '" << source.partition << "' publishes statistics on this host"
                  << (source.remotes.empty() ? "" : " nor on the remotes") << " (no /dev/shm/"
                  << msgpass::kit::stats_page_prefix(source.user, source.partition)
                  << "<N>): the partition does not exist here, or its nodes run with MSGPASS_STATS=0\n";
        return exit_usage;
    }
    const auto interval = std::chrono::milliseconds(interval_ms);
    if (!vm["once"].as<bool>()) return interactive(source, interval);

    std::this_thread::sleep_for(interval); // the second snapshot of the rates
    const auto second = msgpass::top::take_sample(source);
    const auto rows = msgpass::top::make_rows(source, &first, second);
    if (vm["json"].as<bool>()) {
        for (const auto& row : rows)
            std::cout << msgpass::top::json(source.partition, row) << "\n";
    } else {
        std::cout << msgpass::top::table(rows, vm["peers"].as<bool>());
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const msgpass::ConfigError& error) {
        std::cerr << error.what() << "\n";
        return exit_usage;
    } catch (const po::error& error) {
        std::cerr << "msgpass-top: " << error.what() << "\n";
        return exit_usage;
    } catch (const UsageError& error) {
        std::cerr << "msgpass-top: " << error.what() << "\n";
        return exit_usage;
    } catch (const std::exception& error) {
        std::cerr << "msgpass-top: " << error.what() << "\n";
        return 1;
    }
}
