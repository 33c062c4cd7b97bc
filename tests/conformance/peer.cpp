// The peer process of the peer-life tests, the same program on every technology: it
// builds its partition in code from its arguments (tests/conformance/peer_life.hpp),
// joins it as SELF with a node to PEER, and streams, receives, idles or echoes,
// printing one line per step on stdout so that the test can wait on it.
//   peer TECHNOLOGY PARTITION NODES PORTS SELF PEER MODE COUNT SIZE PEER_TIMEOUT_MS
// PORTS is "P1,P2,..." (one per node) for tcp and auto, "-" for sci.
// MODE
//   stream   send COUNT numbered messages (stream SELF) and then an end marker that
//            carries COUNT, flush, print "sent COUNT" and exit; COUNT 0 streams
//            until killed. Prints "streaming" after message 1000.
//   burst    send COUNT numbered messages, flush them, print "sent COUNT", then stay
//            until killed.
//   receive  take messages from PEER and check that they arrive intact and in order
//            from 0; print "progress N" every 500, and "received COUNT" at the end
//            (COUNT 0: until killed).
//   idle     make the node, print "ready" and stay until killed.
//   echo     send every message received back as it is, until killed.
// Every mode prints "ready" once its node exists. A failure prints "error: ..." (or
// "lost ID" for PeerLost) and exits non-zero.
#include "../support/bounded.hpp"
#include "peer_life.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/prctl.h>
#include <unistd.h>

namespace {

using namespace msgpass;
using namespace std::chrono_literals;

void say(const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

[[noreturn]] void stay() {
    for (;;)
        ::pause(); // until the test kills it
}

int run(NodeFactory& factory, Node& node, NodeId self, const std::string& mode, std::uint64_t count, std::size_t size) {
    if (mode == "stream" || mode == "burst") {
        for (std::uint64_t i = 0; count == 0 || i < count; ++i) {
            test::send_retrying(node, test::make_message(factory, size, self, i), "message " + std::to_string(i));
            if (i == 1000) say("streaming");
        }
        if (mode == "stream") test::send_retrying(node, test::make_end_marker(factory, count), "the end marker");
        if (!node.flush(30s)) {
            say("error: could not flush to node " + std::to_string(node.id()));
            return 1;
        }
        say("sent " + std::to_string(count));
        if (mode == "burst") stay();
        return 0;
    }
    if (mode == "receive") {
        for (std::uint64_t i = 0; count == 0 || i < count; ++i) {
            auto m = node.receive(30s);
            if (!m) {
                say("error: nothing arrived for 30 s at message " + std::to_string(i));
                return 1;
            }
            if (const auto h = test::check_payload(*m); h.seq != i) {
                say("error: expected message " + std::to_string(i) + ", got " + std::to_string(h.seq));
                return 1;
            }
            if ((i + 1) % 500 == 0) say("progress " + std::to_string(i + 1));
        }
        say("received " + std::to_string(count));
        return 0;
    }
    if (mode == "idle") stay();
    if (mode == "echo") {
        for (;;)
            if (auto m = node.receive(1s)) test::send_retrying(node, std::move(m), "an echo");
    }
    say("error: unknown mode " + mode);
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 11) {
        std::fprintf(stderr, "usage: peer TECHNOLOGY PARTITION NODES PORTS SELF PEER MODE COUNT SIZE "
                             "PEER_TIMEOUT_MS\n");
        return 2;
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // a test that dies must not leave it running
    std::signal(SIGPIPE, SIG_IGN);
    try {
        test::PeerPartition p;
        p.technology = argv[1];
        p.partition = argv[2];
        p.nodes = std::stoi(argv[3]);
        p.ports = test::PeerPartition::parse_ports(argv[4]);
        p.peer_timeout = std::chrono::milliseconds(std::stoll(argv[10]));
        const auto self = static_cast<NodeId>(std::stoul(argv[5]));
        const auto peer = static_cast<NodeId>(std::stoul(argv[6]));
        auto factory = NodeFactory::create(p.configuration(), self);
        auto node = factory->create_node(peer);
        say("ready");
        return run(*factory, *node, self, argv[7], std::stoull(argv[8]), std::stoull(argv[9]));
    } catch (const PeerLost& e) {
        say("lost " + std::to_string(e.peer()) + ": " + e.what());
        return 3;
    } catch (const std::exception& e) {
        say(std::string("error: ") + e.what());
        return 1;
    } catch (const std::string& e) {
        say("error: " + e);
        return 1;
    }
}
