// A peer process for the sci white-box tests: it joins a partition built in code (the
// same one the test builds), printing one line per step on stdout so the test can
// wait on it. (Peer life on every technology uses tests/conformance/peer.cpp.)
//   sci_peer PARTITION NODES SELF PEER MODE [COUNT] [SIZE] [PEER_TIMEOUT_MS]
// MODE: blind-stream (send COUNT numbered messages and flush them, after making this
// process's mapping of the partner's control block inaccessible: any read of it
// kills the process), idle (until killed), receive (take COUNT messages and check
// them), echo (send every received buffer back as it is, until killed or the
// partner is lost).
#include <msgpass/sci/naming.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>

#include "../support/bounded.hpp"
#include "../support/partition.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

// Makes the first page (the control block) of this process's mapping of the shared
// object `name` inaccessible. False when there is no such mapping.
bool hide_control_block(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    const std::string path = "/dev/shm" + name;
    for (std::string line; std::getline(maps, line);) {
        if (line.size() < path.size() || line.compare(line.size() - path.size(), path.size(), path) != 0) continue;
        std::istringstream fields(line); // start-end perms offset ...
        std::string range, perms, offset;
        fields >> range >> perms >> offset;
        if (std::stoull(offset, nullptr, 16) != 0) continue;
        const auto start = static_cast<std::uintptr_t>(std::stoull(range, nullptr, 16));
        return ::mprotect(reinterpret_cast<void*>(start), // NOLINT(performance-no-int-to-ptr): from /proc/self/maps
                          msgpass::sci::control_block_size, PROT_NONE) == 0;
    }
    return false;
}

} // namespace

int main(int argc, char** argv) {
    using namespace msgpass;
    if (argc < 6) {
        std::fprintf(stderr, "usage: sci_peer PARTITION NODES SELF PEER MODE [COUNT] [SIZE] [PEER_TIMEOUT_MS]\n");
        return 2;
    }
    const std::string partition = argv[1];
    const int nodes = std::atoi(argv[2]);
    const auto self = static_cast<NodeId>(std::atoi(argv[3]));
    const auto peer = static_cast<NodeId>(std::atoi(argv[4]));
    const std::string mode = argv[5];
    const std::uint64_t count = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 0;
    const std::size_t size = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 256;
    const int timeout_ms = argc > 8 ? std::atoi(argv[8]) : 1000;
    auto c = test::make_configuration("sci", partition, nodes, [&](config::Configuration& c) {
        c.peer_timeout = std::chrono::milliseconds(timeout_ms);
        c.edit_section<sci::Options>().max_outst_buffers = 4;
    });
    try {
        auto factory = NodeFactory::create(c, self);
        auto node = factory->create_node(peer);
        std::printf("ready\n");
        std::fflush(stdout);
        if (mode == "blind-stream" && !hide_control_block(sci::segment_name(sci::segment_address(c, peer)))) {
            std::printf("error: no mapping of node %u's segment\n", peer);
            return 1;
        }
        if (mode == "blind-stream") {
            for (std::uint64_t i = 0; i < count; ++i) {
                test::send_retrying(*node, test::make_message(*factory, size, self, i), "message " + std::to_string(i));
            }
            if (!node->flush(std::chrono::seconds(10))) {
                std::printf("flush timed out with %llu queued\n",
                            static_cast<unsigned long long>(node->stats().queue_depth));
                std::fflush(stdout);
            }
            std::printf("sent %llu\n", static_cast<unsigned long long>(count));
        } else if (mode == "idle") {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL); // a test that dies must not leave it idling forever
            for (;;)
                ::pause(); // until the test kills it
        } else if (mode == "echo") {
            // A test that dies must not leave an echo running forever.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (;;) {
                if (auto m = node->receive(std::chrono::seconds(1))) node->send(std::move(m));
            }
        } else if (mode == "receive") {
            for (std::uint64_t i = 0; i < count; ++i) {
                auto m = node->receive(std::chrono::seconds(10));
                if (!m) {
                    std::printf("timeout at %llu\n", static_cast<unsigned long long>(i));
                    return 1;
                }
                if (test::check_payload(*m).seq != i) {
                    std::printf("out of order at %llu\n", static_cast<unsigned long long>(i));
                    return 1;
                }
            }
            std::printf("received %llu\n", static_cast<unsigned long long>(count));
        } else {
            std::printf("error: unknown mode %s\n", mode.c_str());
            return 2;
        }
    } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
        return 1;
    } catch (const std::string& e) {
        std::printf("error: %s\n", e.c_str());
        return 1;
    }
    return 0;
}
