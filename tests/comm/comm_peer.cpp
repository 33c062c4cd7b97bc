// A peer of the communicator tests in a process of its own, to be killed:
//   comm_peer TECHNOLOGY PARTITION NODES SELF PORT...   (ports: none for sci)
// It makes the same configuration as the test (node i on machine m1 or m2 for auto),
// sends "hi" with tag 1 to node 1, prints "ready", then receives until killed.
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

int main(int argc, char** argv) {
    using namespace msgpass;
    if (argc < 5) {
        std::fprintf(stderr, "usage: comm_peer TECHNOLOGY PARTITION NODES SELF PORT...\n");
        return 2;
    }
    try {
        config::Configuration c;
        c.technology = argv[1];
        c.partition = argv[2];
        c.network_file = "network.yaml";
        c.nodes_file = "nodes.yaml";
        c.peer_timeout = std::chrono::milliseconds(300);
        const int n = std::atoi(argv[3]);
        const auto self = static_cast<NodeId>(std::atoi(argv[4]));
        for (int i = 1; i <= n; ++i) {
            config::NodeConfig node;
            node.id = static_cast<NodeId>(i);
            node.name = "node-" + std::to_string(i);
            if (argc > 4 + i) {
                node.host = "127.0.0.1";
                node.port = static_cast<std::uint16_t>(std::atoi(argv[4 + i]));
            }
            if (c.technology == "auto") node.machine = i % 2 == 1 ? "m1" : "m2";
            c.nodes.push_back(node);
        }
        auto factory = NodeFactory::create(c, self);
        comm::Communicator comm(*factory, c);
        comm.send(1, 1, std::as_bytes(std::span("hi", 2)));
        std::printf("ready\n");
        std::fflush(stdout);
        for (;;)
            (void)comm.recv(comm::any_source, comm::any_tag, std::chrono::seconds(1));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "comm_peer: %s\n", e.what());
        return 1;
    }
}
