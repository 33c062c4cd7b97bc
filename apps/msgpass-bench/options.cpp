// The command line of msgpass-bench (options.hpp).
#include "options.hpp"

#include <boost/program_options.hpp>

#include <iostream>
#include <sched.h>
#include <sstream>

namespace po = boost::program_options;

namespace msgpass::bench {

Settings parse(int argc, char** argv, bool& help) {
    Settings s;
    std::string sizes;
    std::string cpus;
    std::string ports;
    std::string wait = "block";
    std::string api = "buffer";
    std::string floors;
    std::string floor_addresses;
    po::options_description visible(
        "Usage: msgpass-bench [options]\n\n"
        "Without options: starts its peer, runs pingpong and stream over sci for 8 B..4 MiB\n"
        "and prints a table beside the SCI seed's 1999 figures and this machine's floors.\n\n"
        "Options");
    visible.add_options()                                              //
        ("help,h", "this help")                                        //
        ("technology", po::value<std::string>()->value_name("NAME"),   //
         "sci | tcp | udp | auto (default: the configuration's, sci)") //
        ("pattern", po::value<std::string>()->value_name("NAME"),
         "pingpong | stream | broadcast | gather | fanin | idle")                                                     //
        ("sizes", po::value(&sizes)->value_name("LIST"), "message sizes, e.g. 8,64,1KiB,4MiB")                        //
        ("iterations", po::value(&s.budget.iterations)->value_name("N"), "timed messages (or round trips) per point") //
        ("seconds", po::value(&s.budget.seconds)->value_name("SECONDS"),                                              //
         "time per point when --iterations is not given (default 0.4; idle: 5)")                                      //
        ("members", po::value(&s.members)->value_name("N"),
         "group size for broadcast and gather, 1..1023 (default 4)") //
        ("rate", po::value(&s.rate)->value_name("R"),
         "fanin: messages per second each member sends, 1..100000 (default 100)") //
        ("compare-scan", po::bool_switch(&s.compare_scan),
         "fanin: each point first with the group receive looking at every member "
         "(MSGPASS_{SCI,TCP,UDP}_GROUP_SCAN=all, the receive before the ready marks and tcp's "
         "epoll set), rows fanin-scan")                                                                         //
        ("json", po::bool_switch(&s.json), "one JSON object per line on stdout, nothing else")                  //
        ("cpu", po::value(&cpus)->value_name("A,B"), "pin the driver to CPU A and the peers to B,...")          //
        ("reference", po::bool_switch(&s.reference), "measure the floors of this machine instead of msgpass")   //
        ("floors", po::value(&floors)->value_name("LIST"),                                                      //
         "with --reference: the floors to run, of shm,memcpy,tcp,udp (default: all)")                           //
        ("floor-addresses", po::value(&floor_addresses)->value_name("A,B"),                                     //
         "with --reference: IPv4 addresses of the two ends of the tcp and udp floors (127.0.0.1,127.0.0.1)")    //
        ("floor-netns", po::value(&s.floor_netns)->value_name("NAME"),                                          //
         "with --reference: run the second end of the tcp and udp floors in this network namespace (ip netns)") //
        ("config", po::value<std::string>()->value_name("FILE"),                                                //
         "network file: run one side only (with --nodes, --node-id)")                                           //
        ("nodes", po::value<std::string>()->value_name("FILE"), "nodes file (one-side mode)")                   //
        ("node-id", po::value<NodeId>()->value_name("ID"),                                                      //
         "own node id (one-side mode; else MSGPASS_NODE_ID or the launcher's rank)")                            //
        ("started-at", po::value<double>()->value_name("SECONDS"),                                              //
         "one-side mode, fanin: when the partition was launched, seconds since the epoch (date +%s.%N); "
         "the first point reports start_s, until the driver heard from every member, from then") //
        ("wait", po::value(&wait)->value_name("MODE"),                                           //
         "block: receive(timeout), the layer's wait (default); spin: poll receive()")            //
        ("api", po::value(&api)->value_name("API"),                                              //
         "buffer: send(BufferPtr) and receive() (default); bytes: the Buffer-free send_bytes and receive_view "
         "(pingpong and stream; rows pingpong-bytes, stream-bytes)") //
        ("contention", po::value(&s.contention)->value_name("N"),    //
         "each point runs quiet, then again beside N busy-loop processes (pinned like the peers with --cpu), "
         "its rows marked +Nbusy")                                        //
        ("set", po::value(&s.sets)->composing()->value_name("KEY=VALUE"), //
         "override of the network file (repeatable)")                     //
        ("layer", po::value(&s.layer)->value_name("LAYER"),               //
         "node (default) | comm: pingpong and stream through the communicator beside the Node path, same run");
    po::options_description hidden;
    hidden.add_options()("role", po::value(&s.role))("partition", po::value(&s.partition))("node-count",
                                                                                           po::value(&s.node_count))(
        "max-size", po::value(&s.max_size))("peer-index", po::value(&s.peer_index))("ports", po::value(&ports));
    po::options_description all;
    all.add(visible).add(hidden);
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
    po::notify(vm);
    if (vm.count("help")) {
        help = true;
        std::cout << visible << '\n';
        return s;
    }
    if (vm.count("technology")) s.technology = vm["technology"].as<std::string>();
    if (vm.count("pattern")) s.pattern = vm["pattern"].as<std::string>();
    if (vm.count("config")) s.config_file = vm["config"].as<std::string>();
    if (vm.count("nodes")) s.nodes_file = vm["nodes"].as<std::string>();
    if (vm.count("node-id")) s.node_id = vm["node-id"].as<NodeId>();
    if (vm.count("started-at")) {
        s.started_at = vm["started-at"].as<double>();
        if (!(*s.started_at > 0)) throw po::error("--started-at must be a time in seconds since the epoch");
        if (s.pattern != "fanin" || !(vm.count("config") || vm.count("nodes") || vm.count("node-id")))
            throw po::error("--started-at goes with --pattern fanin in one-side mode (--config, --nodes, --node-id)");
    }
    if (!sizes.empty()) s.sizes = parse_sizes(sizes);
    s.timed_by_default = !vm.count("iterations") && !vm.count("seconds");
    if (vm.count("iterations") && s.budget.iterations == 0) throw po::error("--iterations must be at least 1");
    if (vm.count("seconds") && !(s.budget.seconds > 0 && s.budget.seconds < 3600)) {
        throw po::error("--seconds must be in (0, 3600)");
    }
    if (s.pattern == "idle" && !vm.count("seconds")) s.budget.seconds = 5;
    if (s.pattern == "fanin" && !vm.count("seconds")) s.budget.seconds = 3;
    if (s.pattern == "fanin" && vm.count("iterations")) throw po::error("fanin runs for --seconds, not --iterations");
    if (!(s.rate >= 1 && s.rate <= 100000)) throw po::error("--rate must be in 1..100000");
    if (s.compare_scan && s.pattern != "fanin") throw po::error("--compare-scan goes with --pattern fanin");
    if (s.layer != "node" && s.layer != "comm") throw po::error("--layer is node or comm, not '" + s.layer + "'");
    if (s.layer == "comm" && (s.pattern || s.reference || s.json || vm.count("config") || vm.count("nodes")))
        throw po::error("--layer comm runs its own table (self-spawning; no --pattern, --reference, --json, --config)");
    if ((!floors.empty() || !floor_addresses.empty() || !s.floor_netns.empty()) && !s.reference)
        throw po::error("--floors, --floor-addresses and --floor-netns go with --reference");
    if (!floors.empty()) {
        std::stringstream in(floors);
        std::string item;
        while (std::getline(in, item, ',')) {
            if (item != "shm" && item != "memcpy" && item != "tcp" && item != "udp")
                throw po::error("unknown floor '" + item + "' in --floors (shm, memcpy, tcp, udp)");
            s.floors.push_back(item);
        }
    }
    if (!floor_addresses.empty()) {
        const auto comma = floor_addresses.find(',');
        if (comma == std::string::npos || comma == 0 || comma + 1 == floor_addresses.size())
            throw po::error("--floor-addresses takes two addresses, A,B");
        s.floor_driver_address = floor_addresses.substr(0, comma);
        s.floor_peer_address = floor_addresses.substr(comma + 1);
    }
    if (api == "bytes")
        s.bytes_api = true;
    else if (api != "buffer")
        throw po::error("--api is buffer or bytes");
    if (s.bytes_api &&
        (s.reference || s.layer == "comm" || (s.pattern && *s.pattern != "pingpong" && *s.pattern != "stream")))
        throw po::error("--api bytes goes with the pingpong and stream patterns (not --reference or --layer comm)");
    if (s.contention > 64) throw po::error("--contention must be in 0..64");
    if (s.contention != 0 &&
        (!s.pattern || s.reference || s.layer == "comm" || s.pattern == std::optional<std::string>("idle")))
        throw po::error(
            "--contention goes with --pattern pingpong, stream, broadcast or gather (not --reference or --layer comm)");
    if (s.members == 0 || s.members > max_members)
        throw po::error("--members must be in 1.." + std::to_string(max_members) + " (a partition of at most " +
                        std::to_string(max_members + 1) + " processes on this host), found " +
                        std::to_string(s.members));
    if (wait == "spin")
        s.wait = Wait::spin;
    else if (wait != "block")
        throw po::error("--wait is block or spin");
    if (!cpus.empty()) {
        std::stringstream in(cpus);
        std::string item;
        while (std::getline(in, item, ',')) {
            char* end = nullptr;
            const long c = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || c < 0 || c >= CPU_SETSIZE)
                throw po::error("bad cpu '" + item + "' in --cpu");
            s.cpus.push_back(static_cast<int>(c));
        }
    }
    if (!ports.empty()) {
        std::stringstream in(ports);
        std::string item;
        while (std::getline(in, item, ',')) {
            char* end = nullptr;
            const long p = std::strtol(item.c_str(), &end, 10);
            if (item.empty() || *end != '\0' || p <= 0 || p > 65535) throw po::error("bad port '" + item + "'");
            s.ports.push_back(static_cast<std::uint16_t>(p));
        }
    }
    if (s.pattern && *s.pattern != "pingpong" && *s.pattern != "stream" && !group_pattern(*s.pattern) &&
        *s.pattern != "idle") {
        throw po::error("unknown pattern '" + *s.pattern + "' (pingpong, stream, broadcast, gather, fanin, idle)");
    }
    if (s.pattern == "fanin-scan") throw po::error("the fanin-scan rows come from --pattern fanin --compare-scan");
    return s;
}

} // namespace msgpass::bench
