// Fuzz target: the communicator's envelope check, through the public API. Node 2
// sends the input as raw messages (no communicator on its side) to node 1, whose
// Communicator takes them; both are sci factories of one partition, made once per
// process. The input is a flags byte, then messages as [u16 little-endian length]
// [bytes]. Flag bit 0 makes the harness write the right magic word and version into
// a message long enough for an envelope, bit 1 the right payload size, so that the
// fuzzer's kind, flags, tag and id fields get past the first checks. With bit 2 node 2
// answers each clear-to-send as a sender would: with the data (kind 5) of that
// announcement, its tag and size (at most 4 KiB: a larger announcement gets 4 KiB,
// which the receiver must refuse as not what was announced). Bit 3 makes node 1
// drain by probe and posted receives first (then an announcement's receive waits for
// its data), else by recv (whose zero timeout gives back the announcements it meets).
// Node 1 answers only clear-to-send (kind 4) and, for a withdrawal (kind 7) of an
// uncleared announcement, kind 8, each naming an announcement of the input.
// The contract: a malformed envelope is one msgpass::Error naming it and counted in
// stats().malformed, the message dropped; every message received has source 2, a
// tag that is not negative and the payload its envelope announced. A request-to-send
// (kind 3) is refused as malformed or waits as an announcement costing its envelope
// alone (probe sees it); a receive that takes it answers one clear-to-send naming its
// id, and completes only with data of the announced size (kind 5), else waits until
// cancelled; a cancelled one goes back into the queue, cleared, and a later receive
// takes it without a second clear-to-send. Once drained, no receive waits for data,
// what stays queued is behind cleared announcements whose data never came (at most
// rendezvous_window of them); nothing crashes, hangs or grows without bound. Each
// input has a communicator of its own (what one input leaves does not block the next),
// and drains in every context its messages name.
#include "fuzz.hpp"

#include "../support/partition.hpp"

#include <msgpass/comm.hpp>
#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace msgpass;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t envelope_size = 24;   // magic, version, kind, context, tag, id, size
constexpr std::uint32_t magic = 0x4d43504d; // "MPCM"
constexpr std::uint8_t version = 1;
constexpr std::uint8_t kind_rts = 3;
constexpr std::uint8_t kind_cts = 4;
constexpr std::uint8_t kind_data = 5;
constexpr std::uint8_t kind_withdrawn = 8; // the answer to a withdrawal (kind 7) of an uncleared announcement
constexpr std::size_t largest_answer = 4096;

struct Envelope {
    std::uint32_t magic;
    std::uint8_t version;
    std::uint8_t kind;
    std::uint16_t context; // comm::Context
    std::int32_t tag;
    std::uint32_t id;
    std::uint64_t size;
};
static_assert(sizeof(Envelope) == envelope_size);

struct Partition {
    Partition() {
        register_builtin_technologies();
        configuration = test::make_configuration("sci", "fuzz-comm-" + std::to_string(::getpid()), 2,
                                                 [](config::Configuration& c) { c.peer_timeout = 10s; });
        receiver = NodeFactory::create(configuration, 1);
        sender = NodeFactory::create(configuration, 2);
        to_receiver = sender->create_node(1);
    }
    config::Configuration configuration;
    comm::Limits limits;
    std::unique_ptr<NodeFactory> receiver;
    std::unique_ptr<NodeFactory> sender;
    NodePtr to_receiver;
    std::unique_ptr<comm::Communicator> comm;
};

// What one input sent and what came of it.
struct Tally {
    bool answer = false;                 // flag bit 2: node 2 answers clear-to-send with data
    bool probe_first = false;            // flag bit 3: node 1 drains by probe and post_recv first, else by recv
    std::vector<Envelope> announcements; // the kind-3 messages sent (a clear-to-send consumes one)
    std::size_t announcements_taken = 0; // taken by a post_recv that did not complete at once
    std::size_t clears = 0;              // clear-to-send messages node 2 received
    std::set<std::uint16_t> contexts{0}; // of the messages sent: the drain receives in each
};

void check_received(const comm::Completion& c, std::size_t longest) {
    MSGPASS_FUZZ_CHECK(!c.is_send);
    MSGPASS_FUZZ_CHECK(c.status == comm::Status::success);
    MSGPASS_FUZZ_CHECK(c.source == 2);
    MSGPASS_FUZZ_CHECK(c.tag >= 0);
    MSGPASS_FUZZ_CHECK(c.buffer != nullptr && c.buffer->size() == c.size && c.size + envelope_size <= longest);
}

// Node 2's side: what node 1 sent back must be clear-to-send messages, each naming
// an announcement of this input.
bool take_clears(Partition& p, Tally& t) {
    bool moved = false;
    while (auto b = p.to_receiver->receive()) {
        moved = true;
        Envelope w{};
        MSGPASS_FUZZ_CHECK(b->size() == envelope_size);
        b->copy_to(std::as_writable_bytes(std::span(&w, 1)));
        MSGPASS_FUZZ_CHECK(w.magic == magic && w.version == version && w.tag == 0 && w.size == 0);
        MSGPASS_FUZZ_CHECK(w.kind == kind_cts || w.kind == kind_withdrawn);
        auto it = std::find_if(t.announcements.begin(), t.announcements.end(),
                               [&](const Envelope& a) { return a.id == w.id; });
        MSGPASS_FUZZ_CHECK(it != t.announcements.end()); // no clear-to-send for what was not announced
        const Envelope announced = *it;
        t.announcements.erase(it);
        if (w.kind == kind_withdrawn) continue; // taken out of node 1's queue: nothing to answer
        ++t.clears;
        if (!t.answer) continue;
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(announced.size, largest_answer));
        auto data = std::make_unique<HeapBuffer>(envelope_size + n);
        std::memset(data->data(), 0x5a, data->size());
        const Envelope d{magic, version, kind_data, 0, announced.tag, announced.id, n};
        std::memcpy(data->data(), &d, sizeof d);
        try {
            p.to_receiver->send(std::move(data));
        } catch (const SendQueueFull&) { // the receive waits; it is cancelled
        }
    }
    return moved;
}

// Takes everything that arrived, checking each message, while the sender's queue
// moves (sci grants its slots again as the receiver takes); without waiting: it
// stops after three rounds in which nothing moved. True when the sender's queue is empty.
bool drain(Partition& p, Tally& t, std::size_t longest) {
    auto& c = *p.comm;
    // recv's fast path takes eager messages; an announcement it meets is cleared and,
    // as the data cannot come within a zero timeout, cancelled.
    auto by_recv = [&](comm::Context context) {
        auto m = c.recv(context, comm::any_source, comm::any_tag, std::chrono::nanoseconds::zero());
        if (!m) return false;
        msgpass::fuzz::accepted();
        MSGPASS_FUZZ_CHECK(m->source == 2 && m->tag >= 0);
        MSGPASS_FUZZ_CHECK(m->buffer != nullptr && m->buffer->size() + envelope_size <= longest);
        return true;
    };
    // probe, then a posted receive of what it saw: an eager message completes at
    // once; an announcement is cleared, then completed by its data (node 2 answers
    // the clear-to-send at once with flags bit 2) or cancelled.
    auto by_probe = [&](comm::Context context) {
        auto e = c.iprobe(context, comm::any_source, comm::any_tag);
        if (!e) return false;
        MSGPASS_FUZZ_CHECK(e->source == 2 && e->tag >= 0);
        MSGPASS_FUZZ_CHECK(c.stats().unexpected_bytes <= p.limits.unexpected_limit + longest);
        const std::uint64_t returned_before = c.stats().rendezvous_returned;
        const std::size_t clears_before = t.clears;
        auto r = c.post_recv(context, comm::any_source, comm::any_tag);
        if (r.done) {
            msgpass::fuzz::accepted();
            MSGPASS_FUZZ_CHECK(r.done->size == e->size);
            check_received(*r.done, longest);
            return true;
        }
        const bool retaken = c.stats().rendezvous_returned < returned_before; // cleared before: no new clear
        if (!retaken) ++t.announcements_taken;
        std::optional<comm::Completion> done;
        for (int look = 0; look < 3 && !done; ++look) {
            (void)c.flush(std::chrono::nanoseconds::zero());
            take_clears(p, t);
            try {
                done = c.test(r.id);
            } catch (const PeerLost&) {
                throw;
            } catch (const Error& e2) { // what came may be malformed: the receive stays
                MSGPASS_FUZZ_CHECK(std::string(e2.what()).find("malformed envelope") != std::string::npos);
            }
        }
        if (!done) {
            MSGPASS_FUZZ_CHECK(c.cancel(r.id));
            done = c.test(r.id);
            MSGPASS_FUZZ_CHECK(done && done->status == comm::Status::cancelled);
            const auto back = c.iprobe(context, comm::any_source, comm::any_tag); // not lost: queued again
            MSGPASS_FUZZ_CHECK(back && back->size == e->size && back->tag == e->tag);
            return t.clears != clears_before; // a returned one whose data never comes: nothing moved
        }
        msgpass::fuzz::accepted();
        MSGPASS_FUZZ_CHECK(done->size == e->size && done->tag == e->tag); // data as announced
        check_received(*done, longest);
        return true;
    };
    bool flushed = false;
    for (int idle = 0; idle < 3;) {
        flushed = p.to_receiver->flush(std::chrono::nanoseconds::zero());
        bool moved = take_clears(p, t);
        for (;;) {
            try {
                bool took = false;
                for (const std::uint16_t x : t.contexts) {
                    const comm::Context context{x};
                    took =
                        t.probe_first ? by_probe(context) || by_recv(context) : by_recv(context) || by_probe(context);
                    if (took) break;
                }
                if (took) {
                    moved = true;
                    continue;
                }
                auto u = c.test_unexpected(1); // BMI's unexpected class: checked like the others
                if (u.empty()) break;
                msgpass::fuzz::accepted();
                moved = true;
                MSGPASS_FUZZ_CHECK(u.front().source == 2 && u.front().tag >= 0);
                MSGPASS_FUZZ_CHECK(u.front().buffer->size() + envelope_size <= longest);
            } catch (const PeerLost&) {
                MSGPASS_FUZZ_CHECK(!"node 2 is alive: no loss may be reported");
            } catch (const Error& e) {
                MSGPASS_FUZZ_CHECK(std::string(e.what()).find("malformed envelope") != std::string::npos);
                moved = true;
            }
        }
        (void)c.flush(std::chrono::nanoseconds::zero()); // clear-to-send messages waiting for room
        moved = take_clears(p, t) || moved;
        idle = moved ? 0 : idle + 1;
    }
    return flushed;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Partition p;
    if (size == 0) return 0;
    p.comm.reset();
    p.comm = std::make_unique<comm::Communicator>(*p.receiver, std::vector<NodeId>{2}, p.limits);
    const std::uint8_t flags = data[0];
    std::size_t at = 1, longest = 0;
    Tally t;
    t.answer = (flags & 4) != 0;
    t.probe_first = (flags & 8) != 0;
    const std::uint64_t malformed_before = p.comm->stats().malformed;
    while (at + 2 <= size) {
        std::size_t length = data[at] | (std::size_t{data[at + 1]} << 8);
        at += 2;
        length = std::min(length, size - at);
        const auto* first = reinterpret_cast<const std::byte*>(data + at);
        std::vector<std::byte> bytes(first, first + length); // no memcpy of a null pointer for length 0
        at += length;
        if (length >= envelope_size) {
            if ((flags & 1) != 0) {
                std::memcpy(bytes.data(), &magic, sizeof magic);
                std::memcpy(bytes.data() + 4, &version, sizeof version);
            }
            if ((flags & 2) != 0) {
                const std::uint64_t payload = length - envelope_size;
                std::memcpy(bytes.data() + 16, &payload, sizeof payload);
            }
            Envelope w{};
            std::memcpy(&w, bytes.data(), sizeof w);
            if (w.kind == kind_rts) t.announcements.push_back(w);
            t.contexts.insert(w.context);
        }
        longest = std::max(longest, length);
        for (int attempt = 0;; ++attempt) {
            try {
                p.to_receiver->send(std::make_unique<HeapBuffer>(std::span<const std::byte>(bytes)));
                break;
            } catch (const SendQueueFull&) {
                MSGPASS_FUZZ_CHECK(attempt < 100); // the receiver drains; the queue must move
                drain(p, t, 1 << 16);
            }
        }
    }
    MSGPASS_FUZZ_CHECK(drain(p, t, std::max<std::size_t>(longest, 1 << 16)));
    const auto stats = p.comm->stats();
    MSGPASS_FUZZ_CHECK(stats.rendezvous_awaiting == 0);                          // cancelled or completed
    MSGPASS_FUZZ_CHECK(stats.rendezvous_returned <= p.limits.rendezvous_window); // bounded for one peer
    if (stats.rendezvous_returned == 0) // else what came after the first one waits behind it
        MSGPASS_FUZZ_CHECK(stats.unexpected_messages == 0 && stats.unexpected_bytes == 0);
    MSGPASS_FUZZ_CHECK(stats.unexpected_messages >= stats.rendezvous_returned);
    MSGPASS_FUZZ_CHECK(t.announcements_taken <= t.clears); // each taken one was cleared
    MSGPASS_FUZZ_CHECK(stats.malformed >= malformed_before);
    return 0;
}
