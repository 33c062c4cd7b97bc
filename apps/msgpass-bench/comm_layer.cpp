// msgpass-bench --layer comm (comm_layer.hpp). Control travels through the
// communicator too, with tags of its own: tag 1 a command {op, size, duration}, tag 2
// the ping-pong payload, tag 3 the end of a ping-pong, tag 4 the stream payload,
// tag 5 the end of a stream.
#include "comm_layer.hpp"

#include <msgpass/comm.hpp>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

namespace msgpass::bench {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum : comm::Tag { tag_command = 1, tag_ping = 2, tag_ping_end = 3, tag_data = 4, tag_data_end = 5 };
enum class CommOp : std::uint32_t { pingpong = 1, stream = 2, stop = 3 };

struct Command {
    CommOp op;
    std::uint32_t reserved;
    std::uint64_t size;
    std::uint64_t duration_ns;
};

constexpr auto patience = 10s;

comm::Message must_recv(comm::Communicator& c, NodeId from, comm::Tag tag) {
    auto m = c.recv(from, tag, patience);
    if (!m)
        throw PeerLost(from, "peer " + std::to_string(from) + " lost: nothing with tag " + std::to_string(tag) +
                                 " came for 10 s");
    return std::move(*m);
}

double ns_between(Clock::time_point a, Clock::time_point b) {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

void command(comm::Communicator& c, NodeId peer, CommOp op, std::uint64_t size, std::chrono::nanoseconds duration) {
    const Command cmd{op, 0, size, static_cast<std::uint64_t>(duration.count())};
    c.send(peer, tag_command, std::as_bytes(std::span(&cmd, 1)));
}

Result pingpong(comm::Communicator& c, NodeId peer, std::uint64_t size, const Budget& budget) {
    command(c, peer, CommOp::pingpong, size, {});
    BufferPtr b = c.create_buffer(size);
    auto round = [&] {
        c.send(peer, tag_ping, std::move(b));
        b = std::move(must_recv(c, peer, tag_ping).buffer);
    };
    const auto seconds_of = std::chrono::duration<double>(budget.seconds);
    const auto warm_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(seconds_of / 10);
    if (budget.iterations != 0)
        for (std::uint64_t i = 0; i < budget.iterations / 10; ++i)
            round();
    else
        while (Clock::now() < warm_end)
            round();
    std::vector<double> samples;
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(seconds_of);
    for (;;) {
        const auto t0 = Clock::now();
        if (budget.iterations != 0 ? samples.size() >= budget.iterations : t0 >= end) break;
        round();
        samples.push_back(ns_between(t0, Clock::now()) / 2e3);
    }
    const double seconds = ns_between(start, Clock::now()) / 1e9;
    c.send(peer, tag_ping_end, std::span<const std::byte>{});
    Result r;
    r.pattern = "comm-pingpong";
    r.size = size;
    r.iterations = samples.size();
    r.msgs_per_s = seconds > 0 ? 2.0 * static_cast<double>(samples.size()) / seconds : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    r.one_way_us = summarize(samples);
    return r;
}

Result stream(comm::Communicator& c, NodeId peer, std::uint64_t size, const Budget& budget) {
    const auto duration = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(budget.seconds > 0 ? budget.seconds : 0.4));
    command(c, peer, CommOp::stream, size, duration);
    std::uint64_t count = 0;
    Clock::time_point first{};
    Clock::time_point last{};
    for (;;) {
        auto m = must_recv(c, peer, comm::any_tag);
        if (m.tag == tag_data_end) break;
        if (m.tag != tag_data) throw std::runtime_error("comm stream: unexpected tag " + std::to_string(m.tag));
        last = Clock::now();
        if (count++ == 0) first = last;
    }
    Result r;
    r.pattern = "comm-stream";
    r.size = size;
    // The first message starts the clock: count - 1 messages in (last - first).
    r.iterations = count;
    const double seconds = ns_between(first, last) / 1e9;
    r.msgs_per_s = count > 1 && seconds > 0 ? static_cast<double>(count - 1) / seconds : 0;
    r.MBps = r.msgs_per_s * static_cast<double>(size) / 1e6;
    return r;
}

} // namespace

std::vector<Result> comm_drive(NodeFactory& factory, NodeId peer, const std::vector<std::uint64_t>& sizes,
                               const Budget& budget) {
    comm::Communicator c(factory, std::vector<NodeId>{peer});
    std::vector<Result> results;
    for (auto size : sizes) {
        results.push_back(pingpong(c, peer, size, budget));
        results.push_back(stream(c, peer, size, budget));
    }
    command(c, peer, CommOp::stop, 0, {});
    (void)c.flush(2s);
    for (auto& r : results)
        r.technology = std::string(factory.technology());
    return results;
}

int comm_serve(NodeFactory& factory, NodeId driver) {
    comm::Communicator c(factory, std::vector<NodeId>{driver});
    for (;;) {
        auto m = c.recv(driver, tag_command, std::chrono::seconds(60));
        if (!m) throw PeerLost(driver, "peer " + std::to_string(driver) + " lost: no command for 60 s");
        Command cmd{};
        if (m->buffer->size() != sizeof cmd) throw std::runtime_error("comm_serve: a malformed command");
        m->buffer->copy_to(std::as_writable_bytes(std::span(&cmd, 1)));
        switch (cmd.op) {
        case CommOp::pingpong:
            for (;;) {
                auto p = must_recv(c, driver, comm::any_tag);
                if (p.tag == tag_ping_end) break;
                c.send(driver, tag_ping, std::move(p.buffer));
            }
            break;
        case CommOp::stream: {
            const auto end = Clock::now() + std::chrono::nanoseconds(cmd.duration_ns);
            while (Clock::now() < end)
                c.send(driver, tag_data, c.create_buffer(cmd.size));
            c.send(driver, tag_data_end, std::span<const std::byte>{});
            if (!c.flush(10s))
                throw PeerLost(driver, "peer " + std::to_string(driver) + " lost: it stopped taking messages");
            break;
        }
        case CommOp::stop:
            (void)c.flush(2s);
            return 0;
        default:
            throw std::runtime_error("comm_serve: unknown command");
        }
    }
}

} // namespace msgpass::bench
