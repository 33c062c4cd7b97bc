// top_node PARTITION ID COUNT [TECHNOLOGY PORT...]: node ID of a partition of COUNT
// nodes made in code (tests/support's configuration; sci unless TECHNOLOGY, whose
// nodes then listen on the COUNT ports given), for the tests of msgpass-top. It sends one message
// of 100 bytes to every other node (waiting at most 5 s for those that are up to take it), writes its
// statistics page, prints "ready <page>" and waits to be killed.
// top_node --churn PARTITION ID PEERS: a page of node ID with PEERS peers written
// again and again (every counter of every peer is the number of the snapshot), for
// the test of a node killed while it writes its page.
#include "../support/partition.hpp"

#include <msgpass/kit/factory_base.hpp>
#include <msgpass/kit/stats_page.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>

namespace {

int churn(const char* partition, msgpass::NodeId id, std::size_t peers) {
    std::uint64_t snapshot = 0;
    const auto publisher =
        msgpass::kit::StatsPublisher::start({partition, "churn", "none", id, {}, peers},
                                            [&]() -> std::optional<std::vector<msgpass::kit::StatsPublisher::Peer>> {
                                                ++snapshot;
                                                std::vector<msgpass::kit::StatsPublisher::Peer> all(peers);
                                                for (std::size_t i = 0; i < peers; ++i) {
                                                    all[i].id = static_cast<std::uint32_t>(i + 1);
                                                    auto& s = all[i].stats;
                                                    s.messages_sent = s.bytes_sent = s.messages_received =
                                                        s.bytes_received = snapshot;
                                                    s.sends_queued = s.queue_depth = s.retries = s.errors = snapshot;
                                                }
                                                return all;
                                            });
    if (!publisher) {
        std::fprintf(stderr, "top_node: no statistics page\n");
        return 1;
    }
    std::printf("ready %s\n", publisher->name().c_str());
    std::fflush(stdout);
    for (;;)
        publisher->publish();
}

} // namespace

int main(int argc, char** argv) {
    if (argc == 5 && std::strcmp(argv[1], "--churn") == 0)
        return churn(argv[2], static_cast<msgpass::NodeId>(std::atoi(argv[3])),
                     static_cast<std::size_t>(std::atoi(argv[4])));
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
