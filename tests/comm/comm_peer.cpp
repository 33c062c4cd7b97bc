// A peer of the communicator tests in a process of its own, to be killed:
//   comm_peer [--announce|--receive-large|--receive-in-place] TECHNOLOGY PARTITION NODES SELF PORT...   (ports: none
//   for sci)
// It makes the same configuration as the test (node i on machine m1 or m2 for auto),
// sends "hi" with tag 1 to node 1, prints "ready", then receives until killed.
// --announce: with comm.eager_limit 1KiB, it also posts three 64 KiB sends to node 1
// (tags 9, 10, 11: announcements only, by rendezvous), hands them over, prints
// "ready" and then makes no progress, so that no clear-to-send is ever answered.
// --receive-large: with comm.eager_limit 1KiB, it waits (probe) until node 1's
// announcements with tags 9, 10 and 11 arrived, posts a receive for tag 9 (which
// clears it: its clear-to-send goes), hands that over, prints "ready" and then makes
// no progress: the data of tag 9 is never taken, 10 and 11 are never cleared.
// --receive-in-place: the same with a receive posted in place (post_recv_in_place):
// its clear-to-send names its buffer, for node 1 to write into (one copy).
//   comm_peer --client PARTITION ADDRESS: a tcp or udp client in no nodes file (run_client).
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>
#include <vector>

namespace {
// --client PARTITION ADDRESS: a client in no nodes file (tcp, or udp for a udp://
// address; peer_timeout 300 ms):
// it looks the server up, sends "hi" with tag 1, prints "ready", then receives until
// killed.
int run_client(const char* partition, const char* address) {
    using namespace msgpass;
    try {
        config::Configuration c;
        c.technology = std::string(address).rfind("udp://", 0) == 0 ? "udp" : "tcp"; // the address says which
        c.partition = partition;
        c.peer_timeout = std::chrono::milliseconds(300);
        auto factory = NodeFactory::create_client(c);
        comm::Communicator comm(*factory, c);
        const NodeId server = comm.lookup(address);
        comm.send(server, 1, std::as_bytes(std::span("hi", 2)));
        std::printf("ready\n");
        std::fflush(stdout);
        for (;;)
            (void)comm.recv(comm::any_source, comm::any_tag, std::chrono::seconds(1));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "comm_peer: %s\n", e.what());
        return 1;
    }
}
} // namespace

int main(int argc, char** argv) {
    using namespace msgpass;
    if (argc == 4 && std::strcmp(argv[1], "--client") == 0) return run_client(argv[2], argv[3]);
    const bool announce = argc > 1 && std::strcmp(argv[1], "--announce") == 0;
    const bool in_place = argc > 1 && std::strcmp(argv[1], "--receive-in-place") == 0;
    const bool receive_large = in_place || (argc > 1 && std::strcmp(argv[1], "--receive-large") == 0);
    if (announce || receive_large) {
        --argc;
        ++argv;
    }
    if (argc < 5) {
        std::fprintf(stderr, "usage: comm_peer [--announce|--receive-large|--receive-in-place] TECHNOLOGY PARTITION "
                             "NODES SELF PORT...\n");
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
        if (announce || receive_large) c.edit_section<config::CommOptions>().eager_limit = config::KiB;
        auto factory = NodeFactory::create(c, self);
        comm::Communicator comm(*factory, c);
        comm.send(1, 1, std::as_bytes(std::span("hi", 2)));
        if (announce) {
            const std::vector<std::byte> big(64 * config::KiB, std::byte{0x42});
            for (comm::Tag tag : {9, 10, 11})
                if (comm.post_send(1, tag, big).done) {
                    std::fprintf(stderr, "comm_peer: a 64 KiB send completed at once: not a rendezvous\n");
                    return 1;
                }
            if (!comm.flush(std::chrono::seconds(10))) {
                std::fprintf(stderr, "comm_peer: the announcements were not handed over in 10 s\n");
                return 1;
            }
            std::printf("ready\n");
            std::fflush(stdout);
            for (;;)
                pause(); // no progress: clear-to-send is never answered
        }
        if (receive_large) {
            for (comm::Tag tag : {9, 10, 11})
                if (!comm.probe(1, tag, std::chrono::seconds(10))) {
                    std::fprintf(stderr, "comm_peer: node 1's announcement with tag %d did not come in 10 s\n", tag);
                    return 1;
                }
            std::vector<std::byte> into(64 * config::KiB); // alive: this branch never returns
            if ((in_place ? comm.post_recv_in_place(comm::Context{}, 1, 9, into) : comm.post_recv(1, 9, into)).done) {
                std::fprintf(stderr, "comm_peer: the receive of a 64 KiB message completed at once\n");
                return 1;
            }
            if (!comm.flush(std::chrono::seconds(10))) {
                std::fprintf(stderr, "comm_peer: the clear-to-send was not handed over in 10 s\n");
                return 1;
            }
            std::printf("ready\n");
            std::fflush(stdout);
            for (;;)
                pause(); // no progress: the data is never taken, the others never cleared
        }
        std::printf("ready\n");
        std::fflush(stdout);
        for (;;)
            (void)comm.recv(comm::any_source, comm::any_tag, std::chrono::seconds(1));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "comm_peer: %s\n", e.what());
        return 1;
    }
}
