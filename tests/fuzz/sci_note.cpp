// Fuzz target: what an sci receiver does with a notification its peer writes into
// its segment, the one place where a hostile or broken peer speaks to sci. For each
// input two factories of an sci partition are made (nodes 1 and 2, max_outst_buffers
// 4); node 2 sends one message, node 1 takes it; then the harness, as node 2 gone
// mad, writes the input into node 1's segment: the note of the next message (index 1,
// round 0), with the right signature so the fuzzer gets past it, and the content of
// every receive slot. Node 1 then receives until nothing more comes.
// Input: [u32 note: the low 24 bits (large flag, hot flag, batch flag, size) are the
// input's, the signature the harness's][u8 flags: bit 0 makes each 32-byte
// descriptor's sequence, check and reserved word right, so the fuzzer's offset, size
// and region reach the region checks; bit 1 makes a batch header's sequence, check
// and reserved word right (for the note's size), so the fuzzer's count and lengths
// reach the length checks; bit 2 signs the records of an open slot (a note of batch
// and size 0) for the lengths the input gives them, so they reach the record
// checks][slot bytes].
// The contract: whatever the note says, node 1 either delivers messages no larger
// than max_message_size whose bytes lie in its own memory, or reports node 2 lost
// once (PeerLost naming the break); it never reads outside its segment or regions
// (ASan), never hangs, and its factory ends cleanly.
#include "fuzz.hpp"

#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>
#include <msgpass/sci/factory.hpp>
#include <msgpass/sci/naming.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>

#include "remote_memory.hpp"

#include "../support/partition.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

using namespace msgpass;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t max_message = 1 << 20;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool registered = (register_builtin_technologies(), true);
    (void)registered;
    if (size < 5) return 0;
    static std::uint64_t run = 0;
    const std::string partition = "fuzz-sci-" + std::to_string(::getpid()) + "-" + std::to_string(run++ % 4);
    const test::SegmentCleanup cleanup(partition);
    auto c = test::make_configuration("sci", partition, 2, [](config::Configuration& c) {
        c.max_message_size = max_message;
        c.peer_timeout = 10s;
        c.edit_section<sci::Options>().max_outst_buffers = 4;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto from_b = a->create_node(2);
    auto to_a = b->create_node(1);
    to_a->send(test::make_message(*b, sci::hot_min_size, 0, 0)); // alone: a smaller one opens index 0 to records
    BufferPtr first;
    for (int i = 0; i < 1000 && !first; ++i)
        first = from_b->receive(1ms);
    MSGPASS_FUZZ_CHECK(first != nullptr); // the harness's own message must arrive
    first.reset();

    // Node 2's header and the slots in node 1's segment (node 2 is second in the file).
    sci::VirtualDevice device(partition);
    sci::RemoteSegment segment;
    MSGPASS_FUZZ_CHECK(segment.connect(device.segment_name(1, 8)));
    segment.map();
    const auto& control = *reinterpret_cast<const sci::ControlBlock*>(segment.address());
    auto* header = reinterpret_cast<sci::Header*>(segment.address() + control.header_offset + 1 * sci::header_size);
    const std::uint32_t epoch = std::atomic_ref<std::uint32_t>(header->epoch).load();
    MSGPASS_FUZZ_CHECK(epoch != 0);

    std::uint32_t low = 0;
    std::memcpy(&low, data, sizeof low);
    const bool fix_descriptors = (data[4] & 1) != 0;
    const bool fix_batch = (data[4] & 2) != 0;
    const bool fix_records = (data[4] & 4) != 0;
    const std::uint8_t* slot_bytes = data + 5;
    const std::size_t slot_length = std::min<std::size_t>(size - 5, control.slot_size);
    for (std::uint32_t s = 0; s < control.slot_count; ++s) {
        std::byte* slot = segment.address() + control.slot_offset + s * control.slot_size;
        std::memcpy(slot, slot_bytes, slot_length);
        if (fix_descriptors) {
            for (std::size_t k = 0; (k + 1) * sizeof(sci::LargeDescriptor) <= slot_length; ++k) {
                sci::LargeDescriptor d{};
                std::memcpy(&d, slot + k * sizeof d, sizeof d);
                d.sequence = static_cast<std::uint32_t>(k);
                d.reserved = 0;
                d.check = sci::large_check_of(d.offset, d.size, d.sequence, d.region);
                std::memcpy(slot + k * sizeof d, &d, sizeof d);
            }
        }
        if (fix_batch && slot_length >= sizeof(sci::BatchHeader)) {
            sci::BatchHeader h{};
            std::memcpy(&h, slot, sizeof h);
            h.sequence = 1; // the note of message 1
            h.reserved = 0;
            h.check = sci::batch_check_of(h.sequence, h.count, low & sci::note_size_mask);
            std::memcpy(slot, &h, sizeof h);
        }
        if (fix_records) { // opened by the note of message 1
            std::uint64_t at = 0;
            for (std::uint32_t r = 0; at + sci::record_header_size <= slot_length; ++r) {
                std::uint64_t word = 0;
                std::memcpy(&word, slot + at, sizeof word);
                const auto length = static_cast<std::uint32_t>(word);
                word = sci::make_record(2, 1, r, length);
                std::memcpy(slot + at, &word, sizeof word);
                at += sci::record_header_size + sci::batch_align_up(length & ~sci::record_close);
            }
        }
    }
    // One message was taken: the next is message 1, on index 1 of round 0.
    const std::uint32_t k = 4;
    const std::uint32_t sig = sci::signature(1 / k, sci::salt_of(epoch));
    std::atomic_ref<std::uint32_t>(header->index[1 % k].note).store((sig << 24) | (low & 0xffffffu));
    const std::uint64_t slot_size = control.slot_size;

    int quiet = 0, losses = 0;
    for (int rounds = 0; quiet < 3 && rounds < 10000; ++rounds) {
        try {
            BufferPtr m = from_b->receive();
            if (!m) {
                ++quiet;
                continue;
            }
            quiet = 0;
            msgpass::fuzz::accepted();
            MSGPASS_FUZZ_CHECK(m->size() <= max_message);
            if ((low & sci::note_batch_flag) != 0) {
                MSGPASS_FUZZ_CHECK(m->size() <= slot_size); // a batch is one slot
            }
            std::vector<std::byte> copy(m->size());
            m->copy_to(copy); // reads every byte: outside the mappings, ASan stops here
        } catch (const PeerLost&) {
            ++losses;
        }
    }
    MSGPASS_FUZZ_CHECK(losses <= 1); // a break is reported once
    return 0;
}
