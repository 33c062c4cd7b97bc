// msgpass-soak-node: one process of the soak (scripts/soak.sh). It sends numbered
// messages of random sizes to every other node of its partition at a steady rate and
// receives from all of them, for --seconds, while the soak script kills and restarts
// nodes, flaps links and injects transfer errors and datagram loss. What it checks of
// every message it receives, per sender:
//   - intact: the header names this pair, the size is the header's, and the payload
//     is the one the sender's (incarnation, sequence number) generates;
//   - once and in order: each sender incarnation's sequence numbers follow each
//     other, unless a loss of that sender was reported in between;
//   - every loss reported: a message of a new incarnation of a sender arrives only
//     after PeerLost for its previous one. A loss is reported once, to a send or to a
//     receive, whichever comes first; messages the old process delivered before it
//     died may still be taken after a send reported its loss, so a report counts for
//     the next gap or new incarnation, whenever it came, and each gap or new
//     incarnation uses one report: a sender restarted twice may have both its deaths
//     reported to this node's sends before its middle process's messages are taken.
//     (A loss of a live peer given up for silence, which makes no gap here, leaves a
//     report unused: the check is looser after it, never wrong.)
// Each broken rule prints a line "VIOLATION: ..." and makes the exit status 1. At the
// end it prints one summary line with what it sent and received, the losses reported
// and its resident memory and open descriptors at a quarter of the run and at the end.
#include <msgpass/msgpass.hpp>
#include <msgpass/udp/factory.hpp>

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using msgpass::NodeId;

constexpr std::uint64_t magic = 0x4b414f5353504d4dull; // "MMPSSOAK"

struct Header {
    std::uint64_t magic;
    std::uint64_t incarnation; // the sender's, random per process
    std::uint64_t seq;         // per receiver, from 0
    std::uint32_t from;
    std::uint32_t to;
    std::uint64_t size; // whole message
};

// The payload a (incarnation, seq, to) generates: a 64-bit LCG, eight bytes a step.
void fill(std::span<std::byte> payload, std::uint64_t incarnation, std::uint64_t seq, NodeId to) {
    std::uint64_t x = incarnation ^ (seq * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t{to} << 40);
    for (std::size_t i = 0; i < payload.size(); i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::memcpy(payload.data() + i, &x, std::min<std::size_t>(8, payload.size() - i));
    }
}

struct Usage {
    long rss_kb = 0;
    long fds = 0;
};

Usage usage() {
    Usage u;
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    if (statm >> pages >> resident) u.rss_kb = resident * (::sysconf(_SC_PAGESIZE) / 1024);
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
        ++u.fds;
    return u;
}

struct Sender {
    std::uint64_t incarnation = 0; // 0: none seen
    std::uint64_t next = 0;
    std::uint64_t unexplained = 0; // losses reported (to a send or a receive) that no gap or new
                                   // incarnation has used yet
    std::uint64_t incarnations = 0;
};

class Soak {
public:
    Soak(msgpass::NodeFactory& factory, const msgpass::config::Configuration& configuration,
         std::chrono::milliseconds interval, std::size_t max_size)
        : factory_(factory), self_(factory.self_id()), interval_(interval), max_size_(max_size),
          rng_(std::random_device{}()) {
        incarnation_ = (std::uint64_t{rng_()} << 32 | rng_()) | 1;
        group_ = factory.create_group();
        for (const auto& n : configuration.nodes) {
            if (n.id == self_) continue;
            auto node = factory.create_node(n.id);
            peers_.push_back(node);
            group_->add(node);
        }
    }

    int run(Clock::time_point end) {
        const auto quarter_at = Clock::now() + (end - Clock::now()) / 4;
        bool sampled = false;
        auto next_send = Clock::now();
        while (Clock::now() < end) {
            if (!sampled && Clock::now() >= quarter_at) {
                quarter_ = usage();
                sampled = true;
            }
            if (Clock::now() >= next_send) {
                for (const auto& peer : peers_)
                    send_to(*peer);
                next_send += interval_;
                if (next_send < Clock::now()) next_send = Clock::now(); // behind: do not burst
            }
            receive_until(std::min(next_send, end));
        }
        if (!sampled) quarter_ = usage();
        for (const auto& peer : peers_) {
            try {
                (void)peer->flush(std::chrono::milliseconds(200));
            } catch (const msgpass::Error&) {
            }
        }
        const Usage last = usage();
        if (std::getenv("SOAK_DEBUG") != nullptr) {
            if (auto* u = dynamic_cast<msgpass::udp::UdpNodeFactory*>(&factory_)) {
                const auto d = u->datagram_stats();
                std::printf("soak node %u: datagrams sent %llu received %llu naks %llu repairs %llu drops:", self_,
                            ull(d.sent), ull(d.received), ull(d.naks_sent), ull(d.repairs));
                for (std::size_t i = 0; i < d.dropped.size(); ++i)
                    if (d.dropped[i] != 0)
                        std::printf(" %s %llu",
                                    std::string(msgpass::udp::describe(static_cast<msgpass::udp::Drop>(i))).c_str(),
                                    ull(d.dropped[i]));
                std::printf("\n");
            }
            for (const auto& peer : peers_) {
                const auto st = peer->stats();
                std::printf("soak node %u: peer %u: stats sent %llu received %llu queue %llu errors %llu\n", self_,
                            peer->id(), ull(st.messages_sent), ull(st.messages_received), ull(st.queue_depth),
                            ull(st.errors));
            }
        }
        if (std::getenv("SOAK_DEBUG") != nullptr) {
            std::error_code ec;
            for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
                 !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
                std::error_code ec2;
                const auto target = std::filesystem::read_symlink(it->path(), ec2);
                std::printf("soak node %u: fd %s -> %s\n", self_, it->path().filename().c_str(),
                            ec2 ? "?" : target.c_str());
            }
        }
        std::uint64_t incarnations = 0;
        std::size_t heard = 0;
        for (const auto& [id, s] : senders_) {
            incarnations += s.incarnations;
            heard += s.incarnations > 0 ? 1 : 0;
        }
        const double ran = std::chrono::duration<double>(Clock::now() - started_).count();
        std::printf("soak node %u: ran %.1f s, sent %llu, received %llu from %llu incarnations, heard from %zu of %zu "
                    "peers, losses reported %llu, send refusals %llu (queue full %llu), rss_kb %ld -> %ld, fds %ld -> "
                    "%ld, violations %llu\n",
                    self_, ran, ull(sent_), ull(received_), ull(incarnations), heard, peers_.size(), ull(losses_),
                    ull(send_errors_), ull(queue_full_), quarter_.rss_kb, last.rss_kb, quarter_.fds, last.fds,
                    ull(violations_));
        return violations_ == 0 ? 0 : 1;
    }

private:
    static unsigned long long ull(std::uint64_t v) { return v; }

    void violation(const std::string& what) {
        ++violations_;
        std::printf("soak node %u: VIOLATION: %s\n", self_, what.c_str());
        std::fflush(stdout);
    }

    void send_to(msgpass::Node& peer) {
        // Mostly small, some up to max_size.
        std::size_t size = sizeof(Header) + rng_() % 512;
        if (rng_() % 16 == 0) size = sizeof(Header) + rng_() % max_size_;
        auto& seq = next_seq_[peer.id()];
        auto buffer = factory_.create_buffer(size);
        auto bytes = buffer->single()->bytes();
        const Header h{magic, incarnation_, seq, self_, peer.id(), size};
        std::memcpy(bytes.data(), &h, sizeof h);
        fill(bytes.subspan(sizeof h), incarnation_, seq, peer.id());
        try {
            peer.send(std::move(buffer));
            ++seq;
            ++sent_;
        } catch (const msgpass::SendQueueFull&) {
            ++queue_full_;
            ++send_errors_;
        } catch (const msgpass::PeerLost& e) {
            note_loss(e.peer());
            if (send_errors_++ < 3) std::printf("soak node %u: send to %u: %s\n", self_, peer.id(), e.what());
        } catch (const msgpass::Error& e) {
            if (send_errors_++ < 3) std::printf("soak node %u: send to %u: %s\n", self_, peer.id(), e.what());
        }
    }

    void note_loss(NodeId peer) {
        ++losses_;
        ++senders_[peer].unexplained;
    }

    void receive_until(Clock::time_point until) {
        for (;;) {
            const auto left = until - Clock::now();
            if (left <= Clock::duration::zero()) return;
            msgpass::BufferPtr m;
            try {
                m = group_->receive(std::chrono::duration_cast<std::chrono::nanoseconds>(left));
            } catch (const msgpass::PeerLost& e) {
                note_loss(e.peer());
                continue;
            } catch (const msgpass::Error& e) {
                violation(std::string("receive: ") + e.what());
                continue;
            }
            if (!m) return;
            check(*m);
        }
    }

    void check(const msgpass::Buffer& m) {
        ++received_;
        const NodeId from = m.source();
        std::vector<std::byte> copy(m.size());
        m.copy_to(copy);
        Header h{};
        if (copy.size() < sizeof h) return violation("a message of " + std::to_string(copy.size()) + " bytes");
        std::memcpy(&h, copy.data(), sizeof h);
        if (h.magic != magic || h.from != from || h.to != self_ || h.size != copy.size()) {
            return violation("a message from node " + std::to_string(from) + " with a wrong header (from " +
                             std::to_string(h.from) + ", to " + std::to_string(h.to) + ", size " +
                             std::to_string(h.size) + " of " + std::to_string(copy.size()) + ")");
        }
        std::vector<std::byte> expected(copy.size() - sizeof h);
        fill(expected, h.incarnation, h.seq, self_);
        if (!std::equal(expected.begin(), expected.end(), copy.begin() + sizeof h)) { // no memcmp of null for 0 bytes
            return violation("message " + std::to_string(h.seq) + " from node " + std::to_string(from) + " is corrupt");
        }
        Sender& s = senders_[from];
        const bool jump = h.incarnation != s.incarnation || h.seq != s.next; // needs a loss reported
        if (h.incarnation != s.incarnation) {
            if (s.incarnation != 0 && s.unexplained == 0) {
                violation("node " + std::to_string(from) +
                          " came back as a new process without a loss of the old one reported");
            }
            s.incarnation = h.incarnation;
            s.next = h.seq; // a new receiver or sender: numbering goes on from here
            ++s.incarnations;
        } else if (h.seq != s.next && s.unexplained == 0) {
            violation("from node " + std::to_string(from) + " expected message " + std::to_string(s.next) + ", got " +
                      std::to_string(h.seq) + (h.seq < s.next ? " (a duplicate or reordered)" : " (a gap)"));
        }
        s.next = h.seq + 1;
        if (jump && s.unexplained > 0) --s.unexplained;
    }

    msgpass::NodeFactory& factory_;
    const NodeId self_;
    const std::chrono::milliseconds interval_;
    const std::size_t max_size_;
    std::mt19937 rng_;
    std::uint64_t incarnation_ = 0;
    std::unique_ptr<msgpass::DynamicGroup> group_;
    std::vector<msgpass::NodePtr> peers_;
    std::map<NodeId, std::uint64_t> next_seq_;
    std::map<NodeId, Sender> senders_;
    std::uint64_t sent_ = 0, received_ = 0, losses_ = 0, send_errors_ = 0, queue_full_ = 0, violations_ = 0;
    Usage quarter_;
    const Clock::time_point started_ = Clock::now();
};

} // namespace

int main(int argc, char** argv) try {
    const auto options = msgpass::options(argc, argv);
    namespace po = boost::program_options;
    double seconds = 10, interval_ms = 2;
    std::size_t max_size = 64 * 1024;
    po::options_description desc("msgpass-soak-node options");
    desc.add_options()("seconds", po::value(&seconds), "how long to run (default 10)")(
        "interval-ms", po::value(&interval_ms), "milliseconds between rounds of one message per peer (default 2)")(
        "max-size", po::value(&max_size), "largest message in bytes (default 65536)");
    po::variables_map vm;
    po::store(po::command_line_parser(options.rest).options(desc).run(), vm);
    po::notify(vm);
    if (!(seconds > 0 && seconds < 86400)) throw msgpass::UsageError("--seconds: expected 0 < seconds < 86400");
    if (!(interval_ms > 0 && interval_ms < 10000)) throw msgpass::UsageError("--interval-ms: expected 0 < ms < 10000");
    if (max_size < 1) throw msgpass::UsageError("--max-size: expected at least 1");
    auto factory = msgpass::NodeFactory::create(options);
    Soak soak(*factory, options.configuration,
              std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(interval_ms))), max_size);
    return soak.run(Clock::now() + std::chrono::milliseconds(static_cast<long long>(seconds * 1000)));
} catch (const std::exception& e) {
    std::fprintf(stderr, "msgpass-soak-node: %s\n", e.what());
    return 2;
}
