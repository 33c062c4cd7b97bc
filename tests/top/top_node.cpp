// top_node PARTITION ID COUNT [TECHNOLOGY PORT...]: node ID of a partition of COUNT
// nodes made in code (tests/support's configuration; sci unless TECHNOLOGY, whose
// nodes then listen on the COUNT ports given), for the tests of msgpass-top. It sends one message
// of 100 bytes to every other node (waiting at most 5 s for those that are up to take it), writes its
// statistics page, prints "ready <page>" and waits to be killed.
#include "../support/partition.hpp"

#include <msgpass/kit/factory_base.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>

int main(int argc, char** argv) {
    const int count = argc >= 4 ? std::atoi(argv[3]) : 0;
    if (argc != 4 && argc != 5 + count) {
        std::fprintf(stderr, "usage: top_node PARTITION ID COUNT [TECHNOLOGY PORT...]\n");
        return 2;
    }
    const auto id = static_cast<msgpass::NodeId>(std::atoi(argv[2]));
    const std::string technology = argc > 4 ? argv[4] : "sci";
    msgpass::register_builtin_technologies();
    const auto configuration =
        msgpass::test::make_configuration(technology, argv[1], count, [&](msgpass::config::Configuration& c) {
            for (int i = 0; argc > 4 && i < count; ++i)
                c.nodes.at(static_cast<std::size_t>(i)).port = static_cast<std::uint16_t>(std::atoi(argv[5 + i]));
        });
    auto factory = msgpass::NodeFactory::create(configuration, id);
    std::vector<msgpass::NodePtr> peers;
    for (int peer = 1; peer <= count; ++peer) {
        if (static_cast<msgpass::NodeId>(peer) == id) continue;
        auto node = factory->create_node(static_cast<msgpass::NodeId>(peer));
        auto buffer = factory->create_buffer(100);
        std::memset(buffer->fragments()[0].data(), 7, 100);
        node->send(std::move(buffer));
        peers.push_back(node);
    }
    (void)factory->flush(std::chrono::seconds(5)); // a send may wait for the peer's next call
    auto& base = dynamic_cast<msgpass::kit::FactoryBase&>(*factory);
    base.publish_stats();
    std::printf("ready %s\n", base.stats_page().c_str());
    std::fflush(stdout);
    // Alive until killed, writing its page as a node that keeps calling the library
    // would: a page older than five intervals and a second reads as idle, and a node
    // parked in pause() wrote none after "ready" (under load msgpass-top asked more
    // than 2 s later and saw "idle", not "running").
    for (;;) {
        base.publish_stats();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}
