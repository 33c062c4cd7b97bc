// osu.c's two measurements over the communicator (msgpass::comm) itself, the layer
// under msgpass's MPI, with the same patterns, sizes, iterations and output lines, so
// that the two programs run in one partition setup give the MPI layer's cost
// (docs/mpi.md). Two nodes, started by msgpass-run -n 2; the first node of the nodes
// file prints.
//
//   latency: comm.send then a receive posted into the caller's buffer (post_recv with
//            a span, then wait), as MPI_Send/MPI_Recv
//   bandwidth: a window of post_send / post_recv into spans, wait_all, a 4-byte answer
//
//   comm_osu [quick] [SIZE...]
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using msgpass::comm::Communicator;
using msgpass::comm::RequestId;
using msgpass::comm::Status;

constexpr long max_window = 64;
constexpr long max_in_flight = 16L << 20;
constexpr auto forever = std::chrono::seconds(60);

int window_of(long size) {
    long window = size > 0 ? max_in_flight / size : max_window;
    if (window > max_window) window = max_window;
    return window < 1 ? 1 : static_cast<int>(window);
}

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what);
}

void recv_into(Communicator& comm, msgpass::NodeId peer, int tag, std::span<std::byte> into) {
    auto posted = comm.post_recv(peer, tag, into);
    auto done = posted.done ? std::move(posted.done) : comm.wait(posted.id, forever);
    if (!done) fail("no message of " + std::to_string(into.size()) + " bytes within 60 s");
    if (done->status != Status::success) fail(std::string("receive: ") + msgpass::comm::to_string(done->status));
}

void wait_all(Communicator& comm, const std::vector<RequestId>& ids) {
    if (ids.empty()) return;
    const auto done = comm.wait_all(ids, forever);
    if (done.size() != ids.size()) fail("a window did not complete within 60 s");
    for (const auto& c : done)
        if (c.status != Status::success) fail(std::string("window: ") + msgpass::comm::to_string(c.status));
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

double latency(Communicator& comm, bool first, msgpass::NodeId peer, std::vector<std::byte>& buf, long size,
               int iterations, int skip) {
    const std::span<std::byte> msg(buf.data(), static_cast<std::size_t>(size));
    Clock::time_point start;
    for (int i = 0; i < iterations + skip; ++i) {
        if (i == skip) start = Clock::now();
        if (first) {
            comm.send(peer, 1, msg);
            recv_into(comm, peer, 1, msg);
        } else {
            recv_into(comm, peer, 1, msg);
            comm.send(peer, 1, msg);
        }
    }
    return seconds_since(start) * 1e6 / (2.0 * iterations);
}

double bandwidth(Communicator& comm, bool first, msgpass::NodeId peer, std::vector<std::byte>& buf, long size,
                 int iterations, int skip) {
    const int window = window_of(size);
    std::byte ack[4]{};
    std::vector<RequestId> ids;
    Clock::time_point start;
    for (int i = 0; i < iterations + skip; ++i) {
        if (i == skip) start = Clock::now();
        ids.clear();
        for (int w = 0; w < window; ++w) {
            const std::span<std::byte> slot(buf.data() + static_cast<std::size_t>(w) * static_cast<std::size_t>(size),
                                            static_cast<std::size_t>(size));
            auto posted = first ? comm.post_send(peer, 2, slot) : comm.post_recv(peer, 2, slot);
            if (!posted.done)
                ids.push_back(posted.id);
            else if (posted.done->status != Status::success)
                fail(std::string("window: ") + msgpass::comm::to_string(posted.done->status));
        }
        wait_all(comm, ids);
        if (first)
            recv_into(comm, peer, 3, ack);
        else
            comm.send(peer, 3, std::span<const std::byte>(ack));
    }
    return static_cast<double>(size) * window * iterations / seconds_since(start) / 1e6;
}

int run(int argc, char** argv) {
    std::vector<long> sizes;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "quick") == 0) {
            quick = true;
            continue;
        }
        char* end = nullptr;
        const long s = std::strtol(argv[i], &end, 10);
        if (*argv[i] == '\0' || *end != '\0' || s < 1 || s > (64L << 20))
            fail("expected 'quick' or sizes in bytes from 1 to 64 MiB, found '" + std::string(argv[i]) + "'");
        sizes.push_back(s);
    }
    if (sizes.empty()) sizes = {8, 64, 512, 1024, 4096, 8192, 65536, 262144, 1048576, 4194304};

    const char* args[] = {argv[0], nullptr};
    const auto options = msgpass::options(1, args);
    const auto& nodes = options.configuration.nodes;
    if (nodes.size() != 2) fail("needs exactly 2 nodes (msgpass-run -n 2)");
    const bool first = options.self == nodes[0].id;
    const msgpass::NodeId peer = first ? nodes[1].id : nodes[0].id;
    auto factory = msgpass::NodeFactory::create(options);
    Communicator comm(*factory, options.configuration);

    long largest = 0;
    for (long s : sizes)
        largest = std::max(largest, window_of(s) * s);
    std::vector<std::byte> buf(static_cast<std::size_t>(largest), std::byte{'a'});
    std::byte token[1]{};
    auto barrier = [&] { // both ends start each point together
        if (first) {
            comm.send(peer, 4, std::span<const std::byte>(token));
            recv_into(comm, peer, 5, token);
        } else {
            recv_into(comm, peer, 4, token);
            comm.send(peer, 5, std::span<const std::byte>(token));
        }
    };
    for (long s : sizes) {
        const int iterations = quick ? 5 : (s <= 8192 ? 20000 : s <= 262144 ? 2000 : 200);
        barrier();
        const double us = latency(comm, first, peer, buf, s, iterations, quick ? 1 : iterations / 10);
        if (first) std::printf("latency %ld %.3f\n", s, us);
    }
    for (long s : sizes) {
        const int iterations = quick ? 2 : (s <= 8192 ? 2000 : s <= 262144 ? 200 : 40);
        barrier();
        const double mbps = bandwidth(comm, first, peer, buf, s, iterations, quick ? 1 : iterations / 10);
        if (first) std::printf("bandwidth %ld %.1f\n", s, mbps);
    }
    std::fflush(stdout);
    barrier();
    if (!comm.flush(std::chrono::seconds(30))) fail("messages not handed to the peer within 30 s");
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "comm_osu: %s\n", e.what());
        return 1;
    }
}
