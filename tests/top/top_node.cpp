// top_node PARTITION ID COUNT: node ID of a sci partition of COUNT nodes made in code
// (tests/support's configuration), for the tests of msgpass-top. It sends one message
// of 100 bytes to every other node (waiting at most 5 s for those that are up to take it), writes its
// statistics page, prints "ready <page>" and waits to be killed.
#include "../support/partition.hpp"

#include <msgpass/kit/factory_base.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: top_node PARTITION ID COUNT\n");
        return 2;
    }
    const auto id = static_cast<msgpass::NodeId>(std::atoi(argv[2]));
    const int count = std::atoi(argv[3]);
    msgpass::register_builtin_technologies();
    const auto configuration = msgpass::test::make_configuration("sci", argv[1], count);
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
    for (;;)
        ::pause();
}
