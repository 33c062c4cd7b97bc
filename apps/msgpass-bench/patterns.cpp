// The measurement protocol between the driver and its peers (see patterns.hpp).
// Every benchmark message starts with a 64-bit tag: a sequence number, with flags
// for warm-up and for the last message of a point; commands and reports carry tags
// that no sequence number reaches. Waits always have a timeout, so a lost peer
// surfaces as PeerLost (from the layer or from the health check), never as a hang.
#include "patterns.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace msgpass::bench {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t end_flag = 1ULL << 63;
constexpr std::uint64_t warm_flag = 1ULL << 62;
constexpr std::uint64_t command_tag = 0x3b3bc0de00000001ULL;
constexpr std::uint64_t report_tag = 0x3b3bc0de00000002ULL;
// A wait that sees nothing for this long gives up, even if the peer looks alive.
constexpr auto stall_limit = 30s;

// How this process waits for messages in the current point (see Wait).
Wait wait_mode = Wait::block;
// Whether the current point uses the Buffer-free path (Node::send_bytes and
// Node::receive_view) instead of buffers (--api bytes).
bool bytes_api = false;

std::chrono::nanoseconds flush_step() {
    return wait_mode == Wait::spin ? std::chrono::nanoseconds(0) : std::chrono::nanoseconds(1ms);
}

enum class Op : std::uint32_t { pong = 1, stream = 2, listen = 3, quit = 4, trickle = 5 };

struct Command {
    std::uint64_t tag;
    Op op;
    std::uint32_t spin;  // 1: wait by polling receive() (Wait::spin)
    std::uint32_t bytes; // 1: send_bytes and receive_view (--api bytes)
    std::uint32_t rate;  // trickle: messages per second
    std::uint64_t size;
    std::uint64_t count;      // timed messages; 0: by duration
    std::int64_t duration_ns; // timed part when count is 0
    std::uint64_t warm_count; // warm-up messages; 0: by warm_ns
    std::int64_t warm_ns;
};

struct Report {
    std::uint64_t tag;
    std::uint64_t count;
    std::uint64_t bytes;
    std::int64_t elapsed_ns;
    std::uint64_t fds; // trickle: the member's open file descriptors
};

std::uint64_t tag_of(std::span<const std::byte> bytes) {
    std::uint64_t tag = 0;
    if (bytes.size() >= sizeof tag) std::memcpy(&tag, bytes.data(), sizeof tag);
    return tag;
}

std::uint64_t touch(std::span<const std::byte> bytes) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < bytes.size(); i += 64)
        sum += static_cast<std::uint64_t>(bytes[i]);
    return sum;
}

std::uint64_t tag_of(const Buffer& b) {
    std::uint64_t tag = 0;
    if (const auto* s = b.single(); s != nullptr && s->size() >= sizeof tag) std::memcpy(&tag, s->data(), sizeof tag);
    return tag;
}

void set_tag(Buffer& b, std::uint64_t tag) {
    auto* s = b.single();
    if (s == nullptr || s->size() < sizeof tag) throw UsageError("benchmark messages need at least 8 bytes");
    std::memcpy(s->data(), &tag, sizeof tag);
}

// Reads one byte per cache line, as a consumer of the data would.
std::uint64_t touch(const Buffer& b) {
    std::uint64_t sum = 0;
    for (const auto& f : b.fragments()) {
        for (std::size_t i = 0; i < f.size(); i += 64)
            sum += static_cast<std::uint64_t>(f[i]);
    }
    return sum;
}

volatile std::uint64_t sink;

double ns_between(Clock::time_point a, Clock::time_point b) {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// How many messages may wait in a node's send queue before the sender stops to
// flush: enough to keep the peer busy, few enough to bound memory for large sizes.
std::uint64_t queue_bound(std::uint64_t size) {
    return std::clamp<std::uint64_t>((16 * config::MiB) / size, 4, 512);
}

// Sends, retrying through flush while the queue is full, and keeps the queue
// below queue_bound (checked every message for large sizes, every 32 for small).
class Pacer {
public:
    explicit Pacer(std::uint64_t size) : size_(size), bound_(queue_bound(size)) {}

    void send(Node& node, BufferPtr&& b) {
        for (;;) {
            try {
                node.send(std::move(b));
                break;
            } catch (const SendQueueFull&) {
                node.flush(flush_step());
            }
        }
        limit(node);
    }

    void limit(Node& node) {
        if (size_ <= 8 * config::KiB && (++sent_ & 31) != 0) return;
        while (node.stats().queue_depth > bound_)
            node.flush(flush_step());
    }

private:
    std::uint64_t size_;
    std::uint64_t bound_;
    std::uint64_t sent_ = 0;
};

// Sends a command or report and waits until it was handed over, checking the
// peers' health meanwhile (a peer that never started cannot be declared lost by the layer).
void send_control(NodeFactory& factory, Node& node, const void* data, std::size_t size, const HealthCheck& check) {
    auto b = factory.create_buffer(size);
    std::memcpy(b->single()->data(), data, size);
    Pacer(size).send(node, std::move(b));
    const auto give_up = Clock::now() + stall_limit;
    while (!node.flush(200ms)) {
        if (check) check();
        if (Clock::now() < give_up) continue;
        throw PeerLost(node.id(), "peer " + std::to_string(node.id()) + " lost: it took no message for " +
                                      std::to_string(stall_limit.count()) + " s");
    }
}

template <class Source>
BufferPtr wait_from(Source& source, NodeId id, const HealthCheck& check) {
    // One poll before the clock is read: a stream's receiver finds a message nearly
    // every time, and a clock read costs as much as a small message on a VM.
    if (auto b = source.receive()) return b;
    const auto give_up = Clock::now() + stall_limit;
    for (;;) {
        if (wait_mode == Wait::spin) {
            const auto until = Clock::now() + 200ms;
            for (std::uint32_t i = 1;; ++i) {
                if (auto b = source.receive()) return b;
                if ((i & 255) == 0 && Clock::now() > until) break;
            }
        } else if (auto b = source.receive(std::chrono::nanoseconds(200ms))) {
            return b;
        }
        if (check) check();
        if (Clock::now() > give_up) {
            throw PeerLost(id, "peer " + (id == 0 ? std::string("group") : std::to_string(id)) +
                                   " lost: nothing received for " + std::to_string(stall_limit.count()) + " s");
        }
    }
}

// wait_from for the Buffer-free path: the next message lent as a view.
MessageView wait_view(Node& node, NodeId id, const HealthCheck& check) {
    if (auto v = node.receive_view()) return v; // one poll before the clock, as in wait_from
    const auto give_up = Clock::now() + stall_limit;
    for (;;) {
        if (wait_mode == Wait::spin) {
            const auto until = Clock::now() + 200ms;
            for (std::uint32_t i = 1;; ++i) {
                if (auto v = node.receive_view()) return v;
                if ((i & 255) == 0 && Clock::now() > until) break;
            }
        } else if (auto v = node.receive_view(std::chrono::nanoseconds(200ms))) {
            return v;
        }
        if (check) check();
        if (Clock::now() > give_up) {
            throw PeerLost(id, "peer " + std::to_string(id) + " lost: nothing received for " +
                                   std::to_string(stall_limit.count()) + " s");
        }
    }
}

// Pacer::send for the Buffer-free path: the bytes are copied by the call.
void send_bytes_paced(Node& node, std::span<const std::byte> bytes, std::uint64_t size, std::uint64_t& sent) {
    for (;;) {
        try {
            node.send_bytes(bytes);
            break;
        } catch (const SendQueueFull&) {
            node.flush(flush_step());
        }
    }
    if (size <= 8 * config::KiB && (++sent & 31) != 0) return;
    while (node.stats().queue_depth > queue_bound(size))
        node.flush(flush_step());
}

Command make_command(Op op, std::uint64_t size, const Budget& budget) {
    Command c{};
    c.tag = command_tag;
    c.op = op;
    c.size = size;
    c.spin = wait_mode == Wait::spin ? 1 : 0;
    c.bytes = bytes_api ? 1 : 0;
    if (budget.iterations != 0) {
        c.count = budget.iterations;
        c.warm_count = std::max<std::uint64_t>(10, budget.iterations / 10);
    } else {
        c.duration_ns = static_cast<std::int64_t>(budget.seconds * 1e9);
        c.warm_ns = c.duration_ns / 10;
    }
    return c;
}

// The sends of a stream: the warm-up (flagged) and the measured ones, each by count or
// for a duration (the clock read every 16th send), then the end marker.
template <class Emit>
void emit_phases(const Command& c, Emit&& emit) {
    auto phase = [&](std::uint64_t count, std::int64_t ns, std::uint64_t flags) {
        if (count != 0) {
            for (std::uint64_t i = 0; i < count; ++i)
                emit(flags);
            return;
        }
        const auto end = Clock::now() + std::chrono::nanoseconds(ns);
        for (std::uint64_t i = 0;; ++i) {
            if ((i & 15) == 0 && Clock::now() >= end) break;
            emit(flags);
        }
    };
    phase(c.warm_count, c.warm_ns, warm_flag);
    phase(c.count, c.duration_ns, 0);
    emit(end_flag);
}

// Sends a warm-up then the timed messages then an end marker, all of size bytes;
// send(BufferPtr&&) is the node or group send; limit() keeps queues bounded.
template <class Send, class Limit>
void produce(NodeFactory& factory, const Command& c, Send&& send, Limit&& limit) {
    std::uint64_t seq = 0;
    auto emit = [&](std::uint64_t flags) {
        auto b = factory.create_buffer(c.size);
        set_tag(*b, seq++ | flags);
        send(std::move(b));
        limit();
    };
    emit_phases(c, emit);
}

// produce() for the Buffer-free path: every message is sent from one array of this
// process, its tag written in before each send_bytes.
void produce_bytes(Node& node, const Command& c) {
    std::vector<std::byte> message(c.size);
    std::uint64_t seq = 0;
    std::uint64_t sent = 0;
    auto emit = [&](std::uint64_t flags) {
        const std::uint64_t tag = seq++ | flags;
        std::memcpy(message.data(), &tag, sizeof tag);
        send_bytes_paced(node, message, c.size, sent);
    };
    emit_phases(c, emit);
}

// Counts what arrives after the warm-up until the end marker.
struct Tally {
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    Clock::time_point first{};
    Clock::time_point last{};
    bool started = false;

    // Returns true at the end marker.
    bool take(const Buffer& b) {
        const auto tag = tag_of(b);
        sink = sink + touch(b);
        return count_tag(tag, b.size());
    }
    bool take(std::span<const std::byte> bytes) {
        const auto tag = tag_of(bytes);
        sink = sink + touch(bytes);
        return count_tag(tag, bytes.size());
    }
    // The clock is read at the first timed message and at the end marker only: a
    // read costs 20-50 ns on the VM, as much as a whole small message, and read per
    // message it made the receiver of a stream the slower end.
    bool count_tag(std::uint64_t tag, std::size_t size) {
        if ((tag & warm_flag) != 0 && (tag & end_flag) == 0) return false;
        const bool end = (tag & end_flag) != 0;
        if (!started) {
            started = true;
            first = Clock::now();
            last = first;
        } else {
            ++count;
            bytes += size;
        }
        if (end) last = Clock::now();
        return end;
    }
    [[nodiscard]] double seconds() const { return ns_between(first, last) / 1e9; }
};

std::int64_t cpu_ns(clockid_t clock) {
    timespec ts{};
    ::clock_gettime(clock, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
std::int64_t thread_cpu_ns() {
    return cpu_ns(CLOCK_THREAD_CPUTIME_ID);
}
std::int64_t process_cpu_ns() {
    return cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
}

// VmRSS of this process, in bytes (0 when /proc is not there).
std::uint64_t rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
    }
    return 0;
}

// The open file descriptors of this process (0 when /proc is not there).
std::uint64_t fd_count() {
    std::uint64_t n = 0;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec))
        ++n;
    return n > 0 ? n - 1 : 0; // the iterator's own descriptor of /proc/self/fd
}

// The shared-memory objects of a partition in /dev/shm: their number and the bytes
// they use (allocated blocks, not their sparse apparent size).
std::pair<std::uint64_t, std::uint64_t> shm_usage(const std::string& partition) {
    std::uint64_t objects = 0;
    std::uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
        const std::string name = entry.path().filename().string();
        if (partition.empty() || name.find(partition) == std::string::npos) continue;
        struct stat st {};
        if (::stat(entry.path().c_str(), &st) != 0) continue;
        ++objects;
        bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
    }
    return {objects, bytes};
}

// The sends of a fanin member: one message at once (the partition's start is timed
// to it), then rate per second, the first at a place of the period that depends on
// the node id so that the members do not send in step; warm-up, timed part, end marker.
// Returns how many messages it sent (the end marker counted).
std::uint64_t trickle(NodeFactory& factory, Node& node, NodeId self, const Command& c) {
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / c.rate));
    Pacer pacer(c.size);
    std::uint64_t seq = 0;
    auto emit = [&](std::uint64_t flags) {
        auto b = factory.create_buffer(c.size);
        set_tag(*b, seq++ | flags);
        pacer.send(node, std::move(b));
    };
    emit(warm_flag);
    auto next = Clock::now() + period * (static_cast<double>((self * 2654435761u) % 1000) / 1000.0);
    auto phase = [&](std::int64_t ns, std::uint64_t flags) {
        const auto end = Clock::now() + std::chrono::nanoseconds(ns);
        for (;;) {
            std::this_thread::sleep_until(next);
            next += period;
            if (Clock::now() >= end) break;
            emit(flags);
        }
    };
    phase(c.warm_ns, warm_flag);
    phase(c.duration_ns, 0);
    emit(end_flag);
    return seq;
}

void fill_rates(Result& r, std::uint64_t count, std::uint64_t bytes, double seconds) {
    r.iterations = count;
    r.msgs_per_s = seconds > 0 ? static_cast<double>(count) / seconds : 0;
    r.MBps = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0;
}

// The ping-pong of the Buffer-free path: each ping is sent from this process's own
// bytes (the tag written into them), each echo is lent as a view and released.
// The rounds of a ping-pong: warm-up rounds (flagged), then timed ones until the
// command's count or duration; each sample is half a round trip in microseconds.
template <class Round>
std::pair<std::vector<double>, double> timed_rounds(const Command& c, Round&& round) {
    if (c.warm_count != 0) {
        for (std::uint64_t i = 0; i < c.warm_count; ++i)
            round(warm_flag);
    } else {
        for (const auto end = Clock::now() + std::chrono::nanoseconds(c.warm_ns); Clock::now() < end;)
            round(warm_flag);
    }
    std::vector<double> samples;
    samples.reserve(c.count != 0 ? c.count : 1 << 20);
    const auto start = Clock::now();
    const auto end = start + std::chrono::nanoseconds(c.duration_ns);
    for (;;) {
        const auto t0 = Clock::now();
        if (c.count != 0 ? samples.size() >= c.count : t0 >= end) break;
        round(0);
        samples.push_back(ns_between(t0, Clock::now()) / 2e3);
    }
    const double seconds = ns_between(start, Clock::now()) / 1e9;
    return {std::move(samples), seconds};
}

Result pingpong_result(std::vector<double> samples, double seconds, std::uint64_t size) {
    Result r;
    r.iterations = samples.size();
    r.msgs_per_s = seconds > 0 ? 2.0 * static_cast<double>(samples.size()) / seconds : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    r.one_way_us = summarize(samples);
    return r;
}

Result pingpong_bytes(Node& node, const Command& c, const HealthCheck& check) {
    std::vector<std::byte> ping(c.size);
    std::uint64_t seq = 0;
    auto round = [&](std::uint64_t flags) {
        const std::uint64_t tag = seq++ | flags;
        std::memcpy(ping.data(), &tag, sizeof tag);
        node.send_bytes(ping);
        auto echo = wait_view(node, node.id(), check);
        sink = sink + touch(echo.bytes());
    };
    auto [samples, seconds] = timed_rounds(c, round);
    std::memcpy(ping.data(), &end_flag, sizeof end_flag);
    node.send_bytes(ping);
    node.flush(10s);
    return pingpong_result(std::move(samples), seconds, c.size);
}

} // namespace

Driver::Driver(NodeFactory& factory, std::vector<NodeId> peers, HealthCheck check, Wait wait)
    : factory_(factory), peers_(std::move(peers)), check_(std::move(check)), wait_(wait) {}

NodePtr Driver::peer(std::size_t index) {
    if (index >= peers_.size()) {
        throw UsageError("this run needs " + std::to_string(index + 1) + " peers, the nodes file has " +
                         std::to_string(peers_.size()));
    }
    return factory_.create_node(peers_[index]);
}

Result Driver::run(const std::string& pattern, std::uint64_t size, const Budget& budget, std::uint32_t members) {
    if (size < sizeof(std::uint64_t)) throw UsageError("msgpass patterns need sizes of at least 8 bytes");
    wait_mode = wait_;
    bytes_api = bytes_;
    if (bytes_ && pattern != "pingpong" && pattern != "stream")
        throw UsageError("--api bytes goes with pingpong and stream, not " + pattern);
    Result r;
    if (pattern == "pingpong")
        r = pingpong(size, budget);
    else if (pattern == "stream")
        r = stream(size, budget);
    else if (pattern == "broadcast")
        r = broadcast(size, budget, members);
    else if (pattern == "gather")
        r = gather(size, budget, members);
    else if (pattern == "fanin" || pattern == "fanin-scan")
        r = fanin(size, budget, members, pattern == "fanin-scan");
    else
        throw UsageError("unknown pattern '" + pattern + "' (pingpong, stream, broadcast, gather, fanin, idle)");
    r.technology = std::string(factory_.technology());
    r.pattern = bytes_ ? pattern + "-bytes" : pattern;
    r.size = size;
    return r;
}

Result Driver::pingpong(std::uint64_t size, const Budget& budget) {
    auto node = peer(0);
    const auto c = make_command(Op::pong, size, budget);
    send_control(factory_, *node, &c, sizeof c, check_);
    if (bytes_) return pingpong_bytes(*node, c, check_);
    // The echo comes back in a receive buffer, which is sent again as the next ping:
    // one copy per direction, no allocation in the loop.
    auto b = factory_.create_buffer(size);
    std::uint64_t seq = 0;
    auto round = [&](std::uint64_t flags) {
        set_tag(*b, seq++ | flags);
        node->send(std::move(b));
        b = wait_from(*node, node->id(), check_);
    };
    auto [samples, seconds] = timed_rounds(c, round);
    set_tag(*b, end_flag);
    node->send(std::move(b));
    node->flush(10s);
    return pingpong_result(std::move(samples), seconds, size);
}

Result Driver::stream(std::uint64_t size, const Budget& budget) {
    auto node = peer(0);
    const auto c = make_command(Op::stream, size, budget);
    send_control(factory_, *node, &c, sizeof c, check_);
    if (bytes_) {
        Tally t;
        while (!t.take(wait_view(*node, node->id(), check_).bytes())) {
        }
        Result r;
        fill_rates(r, t.count, t.bytes, t.seconds());
        return r;
    }
    Tally t;
    while (!t.take(*wait_from(*node, node->id(), check_))) {
    }
    Result r;
    fill_rates(r, t.count, t.bytes, t.seconds());
    return r;
}

Result Driver::broadcast(std::uint64_t size, const Budget& budget, std::uint32_t members) {
    std::vector<NodePtr> nodes;
    std::vector<NodeId> ids;
    for (std::uint32_t i = 0; i < members; ++i) {
        nodes.push_back(peer(i));
        ids.push_back(nodes.back()->id());
    }
    std::sort(ids.begin(), ids.end());
    std::shared_ptr<Group> group;
    for (auto [name, group_ids] : static_groups_) {
        std::sort(group_ids.begin(), group_ids.end());
        if (group_ids == ids) group = factory_.create_group(name);
    }
    if (!group) {
        auto made = factory_.create_group();
        for (auto& n : nodes)
            made->add(n);
        group = std::move(made);
    }
    const auto c = make_command(Op::listen, size, budget);
    for (auto& n : nodes)
        send_control(factory_, *n, &c, sizeof c, check_);
    // Group send throws after a partial send when a queue is full, so the queues are
    // kept well below send_queue_limit instead.
    std::vector<Pacer> pacers(nodes.size(), Pacer(size));
    produce(
        factory_, c, [&](BufferPtr&& b) { group->send(std::move(b)); },
        [&] {
            for (std::size_t i = 0; i < nodes.size(); ++i)
                pacers[i].limit(*nodes[i]);
        });
    Result r;
    r.members = members;
    std::uint64_t count = 0;
    for (auto& n : nodes) {
        if (!n->flush(10s))
            throw PeerLost(n->id(), "peer " + std::to_string(n->id()) + " lost: it stopped taking messages");
        BufferPtr m;
        do {
            m = wait_from(*n, n->id(), check_);
        } while (tag_of(*m) != report_tag || m->size() != sizeof(Report));
        Report rep{};
        m->copy_to(std::as_writable_bytes(std::span(&rep, 1)));
        const double s = static_cast<double>(rep.elapsed_ns) / 1e9;
        if (s > 0) {
            r.msgs_per_s += static_cast<double>(rep.count) / s;
            r.MBps += static_cast<double>(rep.bytes) / s / 1e6;
        }
        count += rep.count;
    }
    r.iterations = count;
    return r;
}

Result Driver::gather(std::uint64_t size, const Budget& budget, std::uint32_t members) {
    auto group = factory_.create_group();
    for (std::uint32_t i = 0; i < members; ++i)
        group->add(peer(i));
    const auto c = make_command(Op::stream, size, budget);
    for (std::uint32_t i = 0; i < members; ++i)
        send_control(factory_, *peer(i), &c, sizeof c, check_);
    // One clock for all senders: from the first timed message of any to the last end marker.
    Tally t;
    std::uint32_t ended = 0;
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    Clock::time_point first{};
    bool started = false;
    while (ended < members) {
        auto b = wait_from(*group, 0, check_);
        const auto tag = tag_of(*b);
        sink = sink + touch(*b);
        if ((tag & warm_flag) != 0 && (tag & end_flag) == 0) continue;
        if (!started) {
            started = true;
            first = Clock::now();
            t.last = first;
        } else {
            ++count;
            bytes += b->size();
        }
        if ((tag & end_flag) != 0) {
            t.last = Clock::now(); // as in Tally: the clock at the first message and the end markers only
            ++ended;
        }
    }
    Result r;
    r.members = members;
    fill_rates(r, count, bytes, ns_between(first, t.last) / 1e9);
    return r;
}

namespace {
void scan_all_unset() {
    ::unsetenv("MSGPASS_SCI_GROUP_SCAN");
    ::unsetenv("MSGPASS_TCP_GROUP_SCAN");
    ::unsetenv("MSGPASS_UDP_GROUP_SCAN");
}
} // namespace

// Each member sends at a fixed low rate; the driver receives through a group as an
// event builder does (receive(timeout)) and counts its thread's CPU time from the
// first timed message to the last end marker. scan_all: a group made with
// MSGPASS_{SCI,TCP,UDP}_GROUP_SCAN=all, which looks at every member on every receive.
Result Driver::fanin(std::uint64_t size, const Budget& budget, std::uint32_t members, bool scan_all) {
    if (scan_all) {
        ::setenv("MSGPASS_SCI_GROUP_SCAN", "all", 1);
        ::setenv("MSGPASS_TCP_GROUP_SCAN", "all", 1);
        ::setenv("MSGPASS_UDP_GROUP_SCAN", "all", 1);
    }
    std::unique_ptr<DynamicGroup> group;
    try {
        group = factory_.create_group();
        for (std::uint32_t i = 0; i < members; ++i)
            group->add(peer(i));
    } catch (...) {
        if (scan_all) scan_all_unset();
        throw;
    }
    if (scan_all) scan_all_unset();
    auto c = make_command(Op::trickle, size, Budget{0, budget.seconds});
    c.rate = static_cast<std::uint32_t>(fanin_rate_);
    for (std::uint32_t i = 0; i < members; ++i)
        send_control(factory_, *peer(i), &c, sizeof c, check_);
    std::set<NodeId> heard;
    std::map<NodeId, std::uint64_t> received; // every message of a member, warm-up and end marker too
    std::uint64_t lost = 0;
    std::optional<double> start_s;
    std::uint32_t ended = 0;
    std::uint32_t reports = 0;
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
    std::uint64_t member_rss = 0;
    std::uint64_t member_rss_max = 0;
    std::uint64_t member_fds = 0;
    std::uint64_t member_fds_max = 0;
    bool started = false;
    std::int64_t cpu0 = 0;
    std::int64_t cpu1 = 0;
    std::int64_t process0 = 0;
    std::int64_t process1 = 0;
    Clock::time_point first{};
    Clock::time_point last{};
    while (reports < members) {
        auto b = wait_from(*group, 0, check_);
        const auto tag = tag_of(*b);
        if (tag == report_tag && b->size() == sizeof(Report)) {
            Report rep{};
            b->copy_to(std::as_writable_bytes(std::span(&rep, 1)));
            member_rss += rep.bytes;
            member_rss_max = std::max(member_rss_max, rep.bytes);
            member_fds += rep.fds;
            member_fds_max = std::max(member_fds_max, rep.fds);
            // The report follows the member's end marker on the same link: whatever it
            // sent and this driver has not received by now is lost.
            const auto got = received[b->source()];
            lost += rep.count > got ? rep.count - got : 0;
            ++reports;
            continue;
        }
        ++received[b->source()];
        sink = sink + touch(*b);
        if (spawned_ && heard.insert(b->source()).second && heard.size() == members) {
            start_s = ns_between(*spawned_, Clock::now()) / 1e9;
            spawned_.reset(); // the first point only
        }
        if ((tag & warm_flag) != 0 && (tag & end_flag) == 0) continue;
        if (!started) {
            started = true;
            cpu0 = thread_cpu_ns();
            process0 = process_cpu_ns();
            first = Clock::now();
            last = first;
            continue;
        }
        ++count;
        bytes += b->size();
        if ((tag & end_flag) != 0 && ++ended == members) {
            cpu1 = thread_cpu_ns();
            process1 = process_cpu_ns();
            last = Clock::now();
        }
    }
    Result r;
    r.members = members;
    fill_rates(r, count, bytes, ns_between(first, last) / 1e9);
    if (count > 0) {
        r.cpu_us_per_msg = static_cast<double>(cpu1 - cpu0) / 1e3 / static_cast<double>(count);
        r.process_cpu_us_per_msg = static_cast<double>(process1 - process0) / 1e3 / static_cast<double>(count);
    }
    r.rate_per_member = fanin_rate_;
    r.start_s = start_s;
    const auto [objects, used] = shm_usage(partition_);
    if (!partition_.empty()) {
        r.shm_kib_per_node = static_cast<double>(used) / 1024.0 / (members + 1);
        r.shm_objects_per_node = static_cast<double>(objects) / (members + 1);
    }
    r.rss_kib = static_cast<double>(rss_bytes()) / 1024.0;
    r.member_rss_kib = static_cast<double>(member_rss) / 1024.0 / members;
    r.member_rss_max_kib = static_cast<double>(member_rss_max) / 1024.0;
    r.fds = static_cast<double>(fd_count());
    r.member_fds = static_cast<double>(member_fds) / members;
    r.member_fds_max = static_cast<double>(member_fds_max);
    r.lost = static_cast<double>(lost);
    return r;
}

Result Driver::idle(double seconds) {
    auto node = peer(0);
    const double cpu0 = process_cpu_seconds();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < end) {
        if (node->receive(std::chrono::duration_cast<std::chrono::nanoseconds>(end - Clock::now()))) {
            throw UsageError("peer " + std::to_string(node->id()) + " sent a message during the idle measurement");
        }
    }
    const double wall = ns_between(start, Clock::now()) / 1e9;
    Result r;
    r.technology = std::string(factory_.technology());
    r.pattern = "idle";
    r.seconds = wall;
    r.cpu_percent = 100.0 * (process_cpu_seconds() - cpu0) / wall;
    return r;
}

void Driver::quit() {
    Command c{};
    c.tag = command_tag;
    c.op = Op::quit;
    for (std::size_t i = 0; i < peers_.size(); ++i) {
        auto n = factory_.create_node(peers_[i]);
        auto b = factory_.create_buffer(sizeof c);
        std::memcpy(b->single()->data(), &c, sizeof c);
        n->send(std::move(b));
        n->flush(2s);
    }
}

int serve(NodeFactory& factory, NodeId driver) {
    auto node = factory.create_node(driver);
    for (;;) {
        auto m = node->receive(std::chrono::nanoseconds(1s));
        if (!m || m->size() != sizeof(Command) || tag_of(*m) != command_tag) continue; // idle, or left from a point
        Command c{};
        m->copy_to(std::as_writable_bytes(std::span(&c, 1)));
        m.reset();
        wait_mode = c.spin != 0 ? Wait::spin : Wait::block;
        bytes_api = c.bytes != 0;
        if (bytes_api && c.op == Op::pong) {
            for (;;) {
                auto v = wait_view(*node, driver, {});
                if ((tag_of(v.bytes()) & end_flag) != 0) break;
                node->send_bytes(v.bytes());
            }
            continue;
        }
        if (bytes_api && c.op == Op::stream) {
            produce_bytes(*node, c);
            if (!node->flush(10s))
                throw PeerLost(driver, "peer " + std::to_string(driver) + " lost: it stopped taking messages");
            continue;
        }
        switch (c.op) {
        case Op::pong:
            for (;;) {
                auto b = wait_from(*node, driver, {});
                if ((tag_of(*b) & end_flag) != 0) break;
                node->send(std::move(b));
            }
            break;
        case Op::stream: {
            Pacer pacer(c.size);
            produce(
                factory, c, [&](BufferPtr&& b) { pacer.send(*node, std::move(b)); }, [] {});
            if (!node->flush(10s))
                throw PeerLost(driver, "peer " + std::to_string(driver) + " lost: it stopped taking messages");
            break;
        }
        case Op::listen: {
            Tally t;
            while (!t.take(*wait_from(*node, driver, {}))) {
            }
            const Report rep{report_tag, t.count, t.bytes,
                             std::chrono::duration_cast<std::chrono::nanoseconds>(t.last - t.first).count(), 0};
            send_control(factory, *node, &rep, sizeof rep, {});
            break;
        }
        case Op::trickle: {
            // The member's report after its end marker: how many messages it sent, its
            // RSS and its open descriptors.
            const auto sent = trickle(factory, *node, factory.self_id(), c);
            const Report rep{report_tag, sent, rss_bytes(), 0, fd_count()};
            send_control(factory, *node, &rep, sizeof rep, {});
            break;
        }
        case Op::quit:
            node->flush(2s);
            return 0;
        }
    }
}

double process_cpu_seconds() {
    std::ifstream in("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name, which is in parentheses and may hold spaces:
    // state(3) ... utime(14) stime(15).
    const auto close = text.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    unsigned long long utime = 0;
    unsigned long long stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

} // namespace msgpass::bench
