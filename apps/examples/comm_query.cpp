// msgpass-comm-query: a request/response query to an event builder through the
// communicator (msgpass::comm, docs/communicator.md), in one process with a thread
// per node over sci: node 1 is the event builder, nodes 2 and 3 ask it for events.
// A client posts its receive for the answer first (a request with a user pointer),
// then sends the query (tag 1, the event number); the builder takes queries from any
// source with recv(any_source, tag 1) and answers with tag 2 (the event: number and
// a payload of 100 KiB, above comm.eager_limit, so it goes by rendezvous into the
// client's posted buffer). Exits 0 when every answer came back right.
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace msgpass;
constexpr comm::Tag tag_query = 1;
constexpr comm::Tag tag_event = 2;
constexpr int queries_per_client = 20;
constexpr std::size_t event_size = 100 * 1024;

std::byte pattern(std::uint32_t event, std::size_t i) {
    return static_cast<std::byte>((event * 31 + i) & 0xff);
}

void builder(const config::Configuration& c, int expected, std::atomic<bool>& failed) {
    auto factory = NodeFactory::create(c, 1);
    comm::Communicator comm(*factory, c);
    std::vector<std::byte> event(event_size);
    for (int i = 0; i < expected; ++i) {
        auto q = comm.recv(comm::any_source, tag_query, 10s);
        if (!q || q->buffer->size() != sizeof(std::uint32_t)) {
            std::fprintf(stderr, "builder: no query or a malformed one\n");
            failed = true;
            return;
        }
        std::uint32_t number = 0;
        q->buffer->copy_to(std::as_writable_bytes(std::span(&number, 1)));
        std::memcpy(event.data(), &number, sizeof number);
        for (std::size_t k = sizeof number; k < event.size(); ++k)
            event[k] = pattern(number, k);
        comm.send(q->source, tag_event, event); // returns once the client took it
    }
    (void)comm.flush(5s);
}

void client(const config::Configuration& c, NodeId self, std::atomic<bool>& failed) {
    auto factory = NodeFactory::create(c, self);
    comm::Communicator comm(*factory, c);
    std::vector<std::byte> answer(event_size);
    for (std::uint32_t n = 0; n < queries_per_client; ++n) {
        const std::uint32_t number = self * 1000 + n;
        auto r = comm.post_recv(1, tag_event, answer, &answer); // the answer's place, first
        comm.send(1, tag_query, std::as_bytes(std::span(&number, 1)));
        auto done = r.done ? std::move(r.done) : comm.wait(r.id, 10s);
        std::uint32_t got = 0;
        if (done) std::memcpy(&got, answer.data(), sizeof got);
        bool ok = done && done->status == comm::Status::success && done->user == &answer && done->size == event_size &&
                  got == number;
        for (std::size_t k = sizeof got; ok && k < answer.size(); ++k)
            ok = answer[k] == pattern(number, k);
        if (!ok) {
            std::fprintf(stderr, "client %u: event %u did not come back right\n", self, number);
            failed = true;
            return;
        }
    }
    std::printf("client %u: %d events received\n", self, queries_per_client);
}

} // namespace

int main() {
    try {
        config::Configuration c;
        c.technology = "sci";
        c.partition = "comm-query-" + std::to_string(::getpid());
        for (NodeId id = 1; id <= 3; ++id) {
            config::NodeConfig node;
            node.id = id;
            node.name = id == 1 ? "evb" : "client-" + std::to_string(id);
            c.nodes.push_back(node);
        }
        c.edit_section<config::CommOptions>().eager_limit = 16 * 1024;
        std::atomic<bool> failed{false};
        std::thread evb([&] { builder(c, 2 * queries_per_client, failed); });
        std::thread a([&] { client(c, 2, failed); });
        std::thread b([&] { client(c, 3, failed); });
        a.join();
        b.join();
        evb.join();
        return failed ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "msgpass-comm-query: %s\n", e.what());
        return 1;
    }
}
