// A peer process for the tcp tests: it joins a partition given as YAML text on the
// command line (the same text the test loads), then streams, receives or exchanges,
// printing one line per step on stdout so that the test can wait on it. The tests
// run it on 127.0.0.1 to kill it with SIGKILL, and with `ip netns exec` in network
// namespaces to put it on another "host". (Peer life on every technology uses
// tests/conformance/peer.cpp.)
//   tcp_peer NETWORK_YAML NODES_YAML SELF MODE [key=value...]
// keys: to=ID[,ID...] from=ID[,ID...] count=N size=N|mixed progress=N silence_ms=N
//       stream=N (receive: check stream N instead of the source's id, and count and
//       skip messages of other streams, reported as "received N other M")
//       stay=1 (stream: after "sent N", stay until killed instead of leaving)
// MODE
//   stream   send numbered messages (stream id = SELF) to every `to` in turn; count=0
//            streams until SIGTERM, then sends each target an end marker that
//            carries the number it was sent. Prints "ready", "streaming", "sent N".
//   receive  take messages from every `from` and check that each source's arrive
//            once, intact and in order from 0; count=N stops after N per source,
//            count=0 at the end marker of every source. Prints "ready",
//            "progress ID:N ID:N..." every `progress` messages, "received N".
//   exchange stream to every `to` and receive from every `to` at once (count each
//            way). Prints "ready", "done N", then stays until SIGTERM.
// Any failure prints "error: ..." (or "lost ID unacknowledged N" for PeerLost) and
// exits non-zero.
#include "../support/bounded.hpp"
#include "tcp_support.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using namespace msgpass;
using namespace std::chrono_literals;

volatile std::sig_atomic_t stop_requested = 0;

void on_sigterm(int) {
    stop_requested = 1;
}

// Waits for SIGTERM without the race of a signal that comes before pause().
void wait_for_sigterm() {
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &old);
    while (stop_requested == 0)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, nullptr);
}

void say(const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

std::vector<NodeId> parse_ids(const std::string& text) {
    std::vector<NodeId> ids;
    std::size_t start = 0;
    while (start < text.size()) {
        auto comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        ids.push_back(static_cast<NodeId>(std::stoul(text.substr(start, comma - start))));
        start = comma + 1;
    }
    return ids;
}

struct Arguments {
    std::vector<NodeId> to;
    std::vector<NodeId> from;
    std::uint64_t count = 0;
    std::string size = "256";
    std::uint64_t progress = 1000;
    std::chrono::milliseconds silence{30000}; // a receive this long with nothing is a stall
    std::optional<std::uint32_t> stream;      // the stream to check; others are counted and skipped
    bool stay = false;                        // stream: stay after "sent" until killed
};

std::size_t size_of(const Arguments& a, std::uint64_t seq) {
    return a.size == "mixed" ? test::mixed_size(seq) : static_cast<std::size_t>(std::stoull(a.size));
}

// Sends one message, flushing while the queue is full (test::Stalled when it stays
// full for default_patience); PeerLost goes to the caller.
void send_one(NodeFactory& factory, Node& node, std::size_t size, std::uint32_t stream, std::uint64_t seq) {
    test::send_retrying(node, test::make_message(factory, size, stream, seq),
                        "message " + std::to_string(seq) + " of stream " + std::to_string(stream));
}

enum class Taken { message, end, other };

// Checks one received message against what its source sent so far.
Taken take(const Buffer& m, std::map<NodeId, std::uint64_t>& next, const Arguments& a) {
    const auto h = test::check_payload(m);
    const NodeId source = m.source();
    if (a.stream && h.stream != *a.stream && h.stream != test::end_stream) return Taken::other;
    auto it = next.find(source);
    if (it == next.end()) throw std::string("message from unexpected node ") + std::to_string(source);
    if (h.stream == test::end_stream) {
        if (h.seq != it->second) {
            throw std::string("node ") + std::to_string(source) + " sent " + std::to_string(h.seq) + " messages, " +
                std::to_string(it->second) + " arrived";
        }
        return Taken::end;
    }
    if (h.stream != a.stream.value_or(source)) {
        throw std::string("message of stream ") + std::to_string(h.stream) + " from node " + std::to_string(source);
    }
    if (h.seq != it->second) {
        throw std::string("node ") + std::to_string(source) + ": expected message " + std::to_string(it->second) +
            ", got " + std::to_string(h.seq);
    }
    ++it->second;
    return Taken::message;
}

std::string progress_line(const std::map<NodeId, std::uint64_t>& next) {
    std::string line = "progress";
    for (const auto& [id, n] : next) { // piece by piece: GCC 12's -Wrestrict misfires on " " + std::string
        line += ' ';
        line += std::to_string(id);
        line += ':';
        line += std::to_string(n);
    }
    return line;
}

int stream(NodeFactory& factory, const Arguments& a, NodeId self) {
    std::vector<NodePtr> targets;
    for (auto id : a.to)
        targets.push_back(factory.create_node(id));
    say("ready");
    std::uint64_t i = 0;
    for (; (a.count == 0 || i < a.count) && stop_requested == 0; ++i) {
        for (auto& node : targets)
            send_one(factory, *node, size_of(a, i), self, i);
        if (i == 1000) say("streaming");
    }
    for (auto& node : targets)
        send_one(factory, *node, sizeof(test::PayloadHeader), test::end_stream, i);
    for (auto& node : targets) {
        if (!node->flush(60s)) {
            say("error: could not flush to node " + std::to_string(node->id()));
            return 1;
        }
    }
    say("sent " + std::to_string(i));
    if (a.stay) {
        for (;;)
            ::pause(); // until the test kills it, once the receiver took everything
    }
    return 0;
}

int receive(NodeFactory& factory, const Arguments& a) {
    auto group = factory.create_group();
    std::map<NodeId, std::uint64_t> next;
    for (auto id : a.from) {
        group->add(factory.create_node(id));
        next[id] = 0;
    }
    say("ready");
    std::size_t finished = 0;
    std::uint64_t total = 0, other = 0;
    while (finished < next.size()) {
        auto m = group->receive(a.silence);
        if (!m) {
            say("error: nothing arrived for " + std::to_string(a.silence.count()) + " ms; " + progress_line(next));
            return 1;
        }
        const auto taken = take(*m, next, a);
        if (taken == Taken::other) {
            ++other;
            continue;
        }
        if (taken == Taken::end) {
            ++finished;
            continue;
        }
        ++total;
        if (a.count != 0 && next[m->source()] == a.count) ++finished;
        if (total % a.progress == 0) say(progress_line(next));
    }
    say("received " + std::to_string(total) + (other == 0 ? "" : " other " + std::to_string(other)));
    return 0;
}

int exchange(NodeFactory& factory, const Arguments& a, NodeId self) {
    auto group = factory.create_group();
    std::vector<NodePtr> peers;
    std::map<NodeId, std::uint64_t> next;
    for (auto id : a.to) {
        peers.push_back(factory.create_node(id));
        group->add(peers.back());
        next[id] = 0;
    }
    say("ready");
    const auto all_arrived = [&] {
        for (const auto& [id, n] : next)
            if (n < a.count) return false;
        return true;
    };
    for (std::uint64_t i = 0; i < a.count; ++i) {
        for (auto& node : peers)
            send_one(factory, *node, size_of(a, i), self, i);
        while (auto m = group->receive())
            (void)take(*m, next, a);
    }
    while (!all_arrived()) {
        auto m = group->receive(a.silence);
        if (!m) {
            say("error: nothing arrived for " + std::to_string(a.silence.count()) + " ms; " + progress_line(next));
            return 1;
        }
        (void)take(*m, next, a);
    }
    for (auto& node : peers) {
        if (!node->flush(60s)) {
            say("error: could not flush to node " + std::to_string(node->id()));
            return 1;
        }
    }
    say("done " + std::to_string(a.count));
    // The peers may still be waiting for the last messages of this one: it stays
    // until the test saw every peer done.
    wait_for_sigterm();
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: tcp_peer NETWORK_YAML NODES_YAML SELF MODE [key=value...]\n");
        return 2;
    }
    std::signal(SIGTERM, on_sigterm);
    std::signal(SIGPIPE, SIG_IGN);
    const auto self = static_cast<NodeId>(std::strtoul(argv[3], nullptr, 10));
    const std::string mode = argv[4];
    Arguments a;
    try {
        for (int i = 5; i < argc; ++i) {
            const std::string arg = argv[i];
            const auto eq = arg.find('=');
            const std::string key = arg.substr(0, eq);
            const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
            if (key == "to") {
                a.to = parse_ids(value);
            } else if (key == "from") {
                a.from = parse_ids(value);
            } else if (key == "count") {
                a.count = std::stoull(value);
            } else if (key == "size") {
                a.size = value;
            } else if (key == "progress") {
                a.progress = std::max<std::uint64_t>(1, std::stoull(value));
            } else if (key == "stay") {
                a.stay = value == "1";
            } else if (key == "stream") {
                a.stream = static_cast<std::uint32_t>(std::stoul(value));
            } else if (key == "silence_ms") {
                a.silence = std::chrono::milliseconds(std::stoll(value));
            } else {
                std::fprintf(stderr, "tcp_peer: unknown argument %s\n", arg.c_str());
                return 2;
            }
        }
        const auto c = config::load_text(argv[1], argv[2]);
        auto factory = NodeFactory::create(c, self);
        if (mode == "stream") return stream(*factory, a, self);
        if (mode == "receive") return receive(*factory, a);
        if (mode == "exchange") return exchange(*factory, a, self);
        std::fprintf(stderr, "tcp_peer: unknown mode %s\n", mode.c_str());
        return 2;
    } catch (const PeerLost& e) {
        say("lost " + std::to_string(e.peer()) + " unacknowledged " + std::to_string(e.unacknowledged()) + ": " +
            e.what());
        return 3;
    } catch (const std::exception& e) {
        say(std::string("error: ") + e.what());
        return 1;
    } catch (const std::string& e) {
        say("error: " + e);
        return 1;
    }
}
