// Fuzz target: the communicator's envelope check, through the public API. Node 2
// sends the input as raw messages (no communicator on its side) to node 1, whose
// Communicator takes them; both are sci factories of one partition, made once per
// process. The input is a flags byte, then messages as [u16 little-endian length]
// [bytes]. Flag bit 0 makes the harness write the right magic word and version into
// a message long enough for an envelope, bit 1 the right payload size, so that the
// fuzzer's kind, flags, tag and reserved fields get past the first checks.
// The contract: a malformed envelope is one msgpass::Error naming it and counted in
// stats().malformed, the message dropped; every message received has source 2, a
// tag that is not negative and the payload its envelope announced; once drained,
// nothing stays queued; nothing crashes or hangs.
#include "fuzz.hpp"

#include "../support/partition.hpp"

#include <msgpass/comm.hpp>
#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace msgpass;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t envelope_size = 24;   // magic, version, kind, flags, tag, reserved, size
constexpr std::uint32_t magic = 0x4d43504d; // "MPCM"
constexpr std::uint8_t version = 1;

struct Partition {
    Partition() {
        register_builtin_technologies();
        configuration = test::make_configuration("sci", "fuzz-comm-" + std::to_string(::getpid()), 2,
                                                 [](config::Configuration& c) { c.peer_timeout = 10s; });
        receiver = NodeFactory::create(configuration, 1);
        sender = NodeFactory::create(configuration, 2);
        to_receiver = sender->create_node(1);
        comm = std::make_unique<comm::Communicator>(*receiver, std::vector<NodeId>{2});
    }
    config::Configuration configuration;
    std::unique_ptr<NodeFactory> receiver;
    std::unique_ptr<NodeFactory> sender;
    NodePtr to_receiver;
    std::unique_ptr<comm::Communicator> comm;
};

// Takes everything that arrived, checking each message, while the sender's queue
// moves (sci grants its slots again as the receiver takes); without waiting: it
// stops after three rounds in which nothing moved. True when the sender's queue is empty.
bool drain(Partition& p, std::size_t longest) {
    bool flushed = false;
    for (int idle = 0; idle < 3;) {
        flushed = p.to_receiver->flush(std::chrono::nanoseconds::zero());
        bool moved = false;
        for (;;) {
            std::optional<comm::Message> m;
            try {
                m = p.comm->recv(comm::any_source, comm::any_tag, std::chrono::nanoseconds::zero());
                if (!m) {
                    auto u = p.comm->test_unexpected(1); // BMI's unexpected class: checked like the others
                    if (!u.empty()) m = std::move(u.front());
                }
            } catch (const PeerLost&) {
                MSGPASS_FUZZ_CHECK(!"node 2 is alive: no loss may be reported");
            } catch (const Error& e) {
                MSGPASS_FUZZ_CHECK(std::string(e.what()).find("malformed envelope") != std::string::npos);
                moved = true;
                continue;
            }
            if (!m) break;
            moved = true;
            msgpass::fuzz::accepted();
            MSGPASS_FUZZ_CHECK(m->source == 2);
            MSGPASS_FUZZ_CHECK(m->tag >= 0);
            MSGPASS_FUZZ_CHECK(m->buffer != nullptr && m->buffer->size() + envelope_size <= longest);
        }
        idle = moved ? 0 : idle + 1;
    }
    return flushed;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Partition p;
    if (size == 0) return 0;
    const std::uint8_t flags = data[0];
    std::size_t at = 1, longest = 0;
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
        }
        longest = std::max(longest, length);
        for (int attempt = 0;; ++attempt) {
            try {
                p.to_receiver->send(std::make_unique<HeapBuffer>(std::span<const std::byte>(bytes)));
                break;
            } catch (const SendQueueFull&) {
                MSGPASS_FUZZ_CHECK(attempt < 100); // the receiver drains; the queue must move
                drain(p, 1 << 16);
            }
        }
    }
    MSGPASS_FUZZ_CHECK(drain(p, std::max<std::size_t>(longest, 1 << 16)));
    const auto stats = p.comm->stats();
    MSGPASS_FUZZ_CHECK(stats.unexpected_messages == 0 && stats.unexpected_bytes == 0);
    MSGPASS_FUZZ_CHECK(stats.malformed >= malformed_before);
    return 0;
}
