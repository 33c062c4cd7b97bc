// A peer process for the udp tests across network namespaces
// (udp_namespace_test.cpp): it joins a partition given as YAML text on the command
// line, then broadcasts numbered messages to a group or receives them from one
// node, printing one line per step on stdout so that the test can wait on it.
//   udp_peer NETWORK_YAML NODES_YAML SELF MODE [key=value...]
// keys: group=NAME (broadcast; default farm) from=ID (receive; default 1)
//       count=N (broadcast: messages to send) progress=N silence_ms=N
//       high_water=N (broadcast: a member with more messages than this queued is
//       flushed before the next send: the group goes at its slowest member's pace)
// MODE
//   broadcast  sends `count` numbered messages of mixed sizes (stream = SELF) to the
//              group, then an end marker carrying the count. A member reported lost
//              (PeerLost from the group's send or a flush) is removed from the group
//              and said as "lost ID", and the broadcast goes on to the others.
//              Prints "ready", "progress N" every `progress` messages, then
//              "sent N multicast M datagrams D" (the sender's datagrams to the
//              multicast address and in all).
//   receive    takes messages from node `from` and checks that each arrives once,
//              intact and in order from 0, up to the end marker. Prints "ready",
//              "progress N" every `progress` messages, "received N".
// Any failure prints "error: ..." and exits non-zero.
#include <msgpass/udp/factory.hpp>

#include "../support/partition.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace msgpass;
using namespace std::chrono_literals;

void say(const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

struct Arguments {
    std::string group = "farm";
    NodeId from = 1;
    std::uint64_t count = 0;
    std::uint64_t progress = 5000;
    std::uint64_t high_water = 1000;
    std::chrono::milliseconds silence{30000}; // a receive this long with nothing is a stall
};

// Mostly small fragments, every 97th of a few datagrams.
std::size_t size_of(std::uint64_t seq) {
    if (seq % 97 == 0) return 8192 + seq % 1000;
    return sizeof(test::PayloadHeader) + (seq * 131) % 1400;
}

class Broadcaster {
public:
    Broadcaster(NodeFactory& factory, const Arguments& a) : factory_(factory), a_(a) {
        group_ = std::dynamic_pointer_cast<DynamicGroup>(factory.create_group(a.group));
        if (!group_) throw std::string("group ") + a.group + " cannot lose a member";
        for (const auto id : group_->members())
            members_[id] = factory.create_node(id);
    }

    int run(NodeId self) {
        say("ready");
        for (std::uint64_t i = 0; i < a_.count; ++i) {
            pace();
            send(test::make_message(factory_, size_of(i), self, i));
            if ((i + 1) % a_.progress == 0) say("progress " + std::to_string(i + 1));
        }
        send(test::make_end_marker(factory_, a_.count));
        for (auto it = members_.begin(); it != members_.end();) {
            const auto id = it->first;
            try {
                if (!it->second->flush(60s)) {
                    say("error: the messages to node " + std::to_string(id) + " were not acknowledged in 60 s");
                    return 1;
                }
                // A member lost while this flush waited had its queue dropped (the
                // flush returned true); its receive says so.
                (void)it->second->receive(std::chrono::nanoseconds(0));
                ++it;
            } catch (const PeerLost&) {
                it = lose(id);
            }
        }
        const auto d = dynamic_cast<udp::UdpNodeFactory&>(factory_).datagram_stats();
        say("sent " + std::to_string(a_.count) + " multicast " + std::to_string(d.multicast_sent) + " datagrams " +
            std::to_string(d.sent));
        return 0;
    }

private:
    // A member with more than high_water messages not yet transmitted whole is
    // flushed first (its window is full: it is slow, or cut off).
    void pace() {
        for (auto it = members_.begin(); it != members_.end();) {
            const auto id = it->first;
            try {
                if (it->second->stats().queue_depth > a_.high_water && !it->second->flush(60s)) {
                    throw std::string("node ") + std::to_string(id) + " acknowledged nothing for 60 s";
                }
                ++it;
            } catch (const PeerLost&) {
                it = lose(id);
            }
        }
    }

    // The group's send; a member lost is reported by it once (the others got the
    // message), then removed.
    void send(BufferPtr&& message) {
        try {
            group_->send(std::move(message));
        } catch (const PeerLost& e) {
            if (members_.count(e.peer()) == 0) throw;
            (void)lose(e.peer());
        }
    }

    std::map<NodeId, NodePtr>::iterator lose(NodeId id) {
        say("lost " + std::to_string(id));
        group_->remove(id);
        return members_.erase(members_.find(id));
    }

    NodeFactory& factory_;
    const Arguments& a_;
    std::shared_ptr<DynamicGroup> group_;
    std::map<NodeId, NodePtr> members_;
};

int receive(NodeFactory& factory, const Arguments& a) {
    auto from = factory.create_node(a.from);
    say("ready");
    std::uint64_t next = 0;
    for (;;) {
        auto m = from->receive(a.silence);
        if (!m) {
            say("error: nothing arrived for " + std::to_string(a.silence.count()) + " ms after message " +
                std::to_string(next));
            return 1;
        }
        const auto h = test::check_payload(*m);
        if (h.stream == test::end_stream) {
            if (h.seq != next) {
                say("error: node " + std::to_string(a.from) + " sent " + std::to_string(h.seq) + " messages, " +
                    std::to_string(next) + " arrived");
                return 1;
            }
            break;
        }
        if (h.stream != a.from || h.seq != next) {
            say("error: expected message " + std::to_string(next) + " of stream " + std::to_string(a.from) + ", got " +
                std::to_string(h.seq) + " of stream " + std::to_string(h.stream));
            return 1;
        }
        if (m->size() != size_of(next)) {
            say("error: message " + std::to_string(next) + " has " + std::to_string(m->size()) + " bytes, not " +
                std::to_string(size_of(next)));
            return 1;
        }
        ++next;
        if (next % a.progress == 0) say("progress " + std::to_string(next));
    }
    say("received " + std::to_string(next));
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: udp_peer NETWORK_YAML NODES_YAML SELF MODE [key=value...]\n");
        return 2;
    }
    const auto self = static_cast<NodeId>(std::strtoul(argv[3], nullptr, 10));
    const std::string mode = argv[4];
    Arguments a;
    try {
        for (int i = 5; i < argc; ++i) {
            const std::string arg = argv[i];
            const auto eq = arg.find('=');
            const std::string key = arg.substr(0, eq);
            const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
            if (key == "group") {
                a.group = value;
            } else if (key == "from") {
                a.from = static_cast<NodeId>(std::stoul(value));
            } else if (key == "count") {
                a.count = std::stoull(value);
            } else if (key == "progress") {
                a.progress = std::max<std::uint64_t>(1, std::stoull(value));
            } else if (key == "high_water") {
                a.high_water = std::stoull(value);
            } else if (key == "silence_ms") {
                a.silence = std::chrono::milliseconds(std::stoll(value));
            } else {
                std::fprintf(stderr, "udp_peer: unknown argument %s\n", arg.c_str());
                return 2;
            }
        }
        const auto c = config::load_text(argv[1], argv[2]);
        auto factory = NodeFactory::create(c, self);
        if (mode == "broadcast") return Broadcaster(*factory, a).run(self);
        if (mode == "receive") return receive(*factory, a);
        std::fprintf(stderr, "udp_peer: unknown mode %s\n", mode.c_str());
        return 2;
    } catch (const PeerLost& e) {
        say("error: lost " + std::to_string(e.peer()) + ": " + e.what());
        return 3;
    } catch (const std::exception& e) {
        say(std::string("error: ") + e.what());
        return 1;
    } catch (const std::string& e) {
        say("error: " + e);
        return 1;
    }
}
