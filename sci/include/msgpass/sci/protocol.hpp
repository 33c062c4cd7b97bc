// The layout of an sci segment and the encoding of its control words; see
// docs/sci-protocol.md for the protocol that uses them.
//
//   [ control block: 4 KiB ][ header area: header_area_size ][ receive slots ]
//
// The control block identifies the segment (magic, version, owner id, epoch,
// geometry) and holds the owner's doorbell and ready marks. The header area holds one 128-byte
// header per node of the nodes file (by position), written only by that node.
// Receive slots are recv_buffer_no slots of recv_buffer_size bytes.
#pragma once

#include <msgpass/wait.hpp>

#include <cstddef>
#include <cstdint>

namespace msgpass::sci {

inline constexpr std::uint64_t segment_magic = 0x3149435353504d4dULL; // "MMPSSCI1"
// 9: the ready marks of the control block; 10: records of an open slot; 11: the
// receiver's count of records taken (taken_index); 12: a record's check names its sender
inline constexpr std::uint32_t protocol_version = 12;
inline constexpr std::size_t control_block_size = 4096;
// Ready marks of the control block: one bit per node of the nodes file, which
// therefore holds at most max_nodes nodes.
inline constexpr std::size_t ready_words = 256;
inline constexpr std::size_t max_nodes = ready_words * 64;
// The seed's 64-byte header held 15 outstanding messages per direction by packing
// two 16-bit fields per word; a signed 32-bit word per notification and per grant
// needs two cache lines for as many.
inline constexpr std::size_t header_size = 128;
inline constexpr std::uint32_t max_outstanding = 15; // the seed's limit for max_outst_buffers
// Large messages rotate through the first bytes of a sender's large region (a
// message that starts there may run past it), so the same memory is written again
// only after 8 MiB of other messages: memory the receiver has just read is still in
// its core's cache, and rewriting it from the other core costs 3x to 4x more than
// writing memory that left that cache (measured here: 64 KiB messages over 256 KiB
// reach 8 GB/s, over 8 MiB 30 GB/s). 8 MiB exceeds the L2 of current cores and fits
// their L3. The sender wraps at 4 messages' worth when that is more (up to
// large_ring_size), so that several large messages are in flight.
inline constexpr std::uint64_t large_ring_size = 32ULL << 20; // where a message may start
inline constexpr std::uint64_t large_wrap_min = 8ULL << 20;
constexpr std::uint64_t large_wrap_at(std::uint64_t size) noexcept {
    return size >= large_ring_size / 4 ? large_ring_size : (4 * size > large_wrap_min ? 4 * size : large_wrap_min);
}
inline constexpr std::uint32_t large_in_flight = 64;          // large messages a sender may have unreleased (< 128)
inline constexpr std::uint64_t large_align = 64;              // large messages start on a cache line
inline constexpr std::size_t streaming_min_size = 256 * 1024; // smaller large messages are copied through the cache

struct alignas(64) ControlBlock {
    std::uint64_t magic;
    std::uint32_t version;
    std::uint32_t node_id;
    std::uint64_t epoch; // nonzero once the segment is ready; published last
    std::uint64_t header_offset;
    std::uint64_t header_area_size;
    std::uint64_t slot_offset;
    std::uint64_t slot_size;
    std::uint32_t slot_count;
    std::uint32_t max_outst_buffers;
    std::uint64_t max_message_size;
    // control_barrier: the owner makes a process-wide barrier (membarrier) each time
    // it announces that it sleeps, so that a partner that registered for those
    // barriers needs no fence of its own between writing a message or a grant here
    // and looking whether the owner sleeps (docs/sci-protocol.md, "Receive").
    std::uint32_t flags;
    // Rung by a partner that wrote a message or a grant here while the owner said
    // (in the partner's own segment) that it sleeps.
    alignas(64) Doorbell bell;
    // 1 once the owner's process ended cleanly (its factory's destructor). A partner
    // reads it only in its peer check, after the owner is gone, to tell a clean end
    // from a crash even when a new process of the same node id already introduced
    // itself (and so cleared the closing bit of its header).
    alignas(64) std::uint32_t closed;
    // The ready marks: bit p (word p / 64, bit p % 64) is set, with an atomic OR, by
    // the node at position p of the nodes file after it published a message here when
    // the owner asked it to (status_marks), and by the owner itself for work it left
    // for a later receive; an sci group receive takes the marks of its members and
    // looks only at those (docs/sci-protocol.md, "Ready marks").
    alignas(64) std::uint64_t ready[ready_words];
};
static_assert(sizeof(ControlBlock) <= control_block_size);
inline constexpr std::uint32_t control_barrier = 1u << 0;

// One header: written by one remote node W into the segment of its partner O.
//   epoch         W's epoch (low 32 bits, never 0) once W connected to O
//   status        large_freed:7 | hot signature:7 | closing:1 | asleep:1 | marks:1 | hot slot:15
//                   large_freed: how many of O's large messages W released, in the
//                   order they were sent (mod 128; at most large_in_flight unreleased)
//                   closing: W's process ended cleanly (O is not told "lost")
//                   asleep: a thread of W sleeps on W's doorbell: O rings it after
//                   writing a message or a grant for W (O reads this word in its own
//                   segment: the send path reads no remote memory)
//                   marks: W receives from O through a group: O sets O's ready mark in
//                   W's control block after each message it writes here
//                   hot slot: a slot of W's segment that O may use for any one message
//                   instead of the slot of its index (the slot W freed last, still in
//                   cache), valid when the signature is that of O's next hot use
//   index[i].note notification of W's message to O through outstanding index i
//                 (i < W's max_outst_buffers)
//   index[i].ack  the slot of W's segment that O may use for its next message on
//                 index i (i < O's max_outst_buffers)
// A note and an ack share a pair of words, so that up to 7 outstanding messages
// each way (and every word of max_outst_buffers: 1) stay on the first cache line.
struct alignas(64) Header {
    std::uint32_t epoch;
    std::uint32_t status;
    struct Index {
        std::uint32_t note;
        std::uint32_t ack;
    } index[max_outstanding];
};
static_assert(sizeof(Header) == header_size);

// A signature byte: 1..255, never 0 (0 means "nothing written"), different for
// consecutive rounds of one index, and salted by the writer's epoch so that words
// left by an earlier incarnation do not look like new ones.
constexpr std::uint32_t signature(std::uint64_t round, std::uint32_t salt) noexcept {
    return 1 + static_cast<std::uint32_t>((round + salt) % 255);
}
constexpr std::uint32_t salt_of(std::uint32_t epoch) noexcept {
    return (epoch * 2654435761u) >> 24;
}
// The same signature from the round and the salt each reduced mod 255 beforehand:
// the data path keeps the round of each index as a counter mod 255 and computes
// one signature per message without a division (signature(r, s) ==
// signature_mod(r % 255, s % 255)).
constexpr std::uint32_t signature_mod(std::uint32_t round255, std::uint32_t salt255) noexcept {
    const std::uint32_t s = round255 + salt255;
    return 1 + (s >= 255 ? s - 255 : s);
}
constexpr std::uint32_t next_round255(std::uint32_t round255) noexcept {
    return round255 == 254 ? 0 : round255 + 1;
}

// note = signature:8 | large:1 | hot:1 | batch:1 | size:21 (size of the slot's
// content; hot: the content is in the hot slot, not in the slot granted for the
// index; batch: the content is a batch of small messages, below)
inline constexpr std::uint32_t note_large_flag = 1u << 23;
inline constexpr std::uint32_t note_hot_flag = 1u << 22;
inline constexpr std::uint32_t note_batch_flag = 1u << 21;
inline constexpr std::uint32_t note_size_mask = note_batch_flag - 1;
constexpr std::uint32_t make_note(std::uint32_t sig, bool large, std::uint32_t size, bool hot = false,
                                  bool batch = false) noexcept {
    return (sig << 24) | (large ? note_large_flag : 0) | (hot ? note_hot_flag : 0) | (batch ? note_batch_flag : 0) |
           (size & note_size_mask);
}
// status = large_freed:7 | hot signature:7 | closing:1 | asleep:1 | marks:1 | hot slot:15
inline constexpr std::uint32_t hot_slot_limit = 1u << 15; // slots above cannot be hot
inline constexpr std::size_t hot_min_size = 1024;         // smaller messages keep to their index's slot
inline constexpr std::uint32_t status_closing = 1u << 17;
inline constexpr std::uint32_t status_asleep = 1u << 16;
inline constexpr std::uint32_t status_marks = 1u << 15;
static_assert(large_in_flight < 128); // large_freed counts mod 128
// The signature of the h-th hot slot a node grants: 1..127, salted as signature().
constexpr std::uint32_t hot_signature(std::uint64_t h, std::uint32_t salt) noexcept {
    return 1 + static_cast<std::uint32_t>((h + salt) % 127);
}
constexpr std::uint32_t make_status(std::uint64_t freed, std::uint32_t hot_sig, std::uint32_t hot_slot, bool asleep,
                                    bool closing, bool marks = false) noexcept {
    return (static_cast<std::uint32_t>(freed & 0x7f) << 25) | ((hot_sig & 0x7f) << 18) |
           (closing ? status_closing : 0) | (asleep ? status_asleep : 0) | (marks ? status_marks : 0) |
           (hot_slot & (hot_slot_limit - 1));
}
constexpr std::uint32_t freed_of(std::uint32_t word) noexcept {
    return word >> 25;
}
constexpr std::uint32_t hot_sig_of(std::uint32_t word) noexcept {
    return (word >> 18) & 0x7f;
}
constexpr std::uint32_t hot_slot_of(std::uint32_t word) noexcept {
    return word & (hot_slot_limit - 1);
}
constexpr bool asleep_of(std::uint32_t word) noexcept {
    return (word & status_asleep) != 0;
}
constexpr bool marks_of(std::uint32_t word) noexcept {
    return (word & status_marks) != 0;
}
constexpr bool closing_of(std::uint32_t word) noexcept {
    return (word & status_closing) != 0;
}
// ack = signature:8 | slot:24
inline constexpr std::uint32_t ack_slot_mask = (1u << 24) - 1;
constexpr std::uint32_t make_ack(std::uint32_t sig, std::uint32_t slot) noexcept {
    return (sig << 24) | slot;
}
constexpr std::uint32_t sig_of(std::uint32_t word) noexcept {
    return word >> 24;
}

// The content of a slot that announces a large message (note has the large flag).
// The same descriptor announces a message in the sender's broadcast region (a
// message sent to several peers, copied there once).
struct LargeDescriptor {
    std::uint64_t offset;   // where the message starts in its region
    std::uint64_t size;     // bytes
    std::uint32_t sequence; // number of the descriptor since the introduction (mod 2^32)
    std::uint32_t region;   // region_large or region_broadcast
    std::uint32_t check;    // large_check_of(offset, size, sequence, region)
    std::uint32_t reserved; // 0
};
inline constexpr std::uint32_t region_large = 0;     // the receiver's large region for this sender
inline constexpr std::uint32_t region_broadcast = 1; // the sender's broadcast region
inline constexpr std::uint32_t large_check = 0x5ca1ab1e;
constexpr std::uint32_t large_check_of(std::uint64_t offset, std::uint64_t size, std::uint32_t sequence,
                                       std::uint32_t region) noexcept {
    return static_cast<std::uint32_t>(offset ^ (offset >> 32) ^ size ^ (size >> 32)) ^ sequence ^
           (region * 0x9e3779b9u) ^ large_check;
}
// The content of a slot whose note has the batch flag: several small messages that
// waited in the sender's queue, sent with one note.
//   BatchHeader, then count 32-bit lengths, then the messages in order, the first
//   at batch_data_offset(count), each next one at the following 8-byte boundary;
//   the note's size is where the last one ends.
// sequence is the number of the note that announces the batch since the
// introduction (the note's own count, mod 2^32), so that content left in the slot
// by an earlier round is not taken for this one; check binds it to count and size.
struct BatchHeader {
    std::uint32_t sequence;
    std::uint32_t count;    // messages, at least 1
    std::uint32_t check;    // batch_check_of(sequence, count, size)
    std::uint32_t reserved; // 0
};
inline constexpr std::uint32_t batch_check = 0xba7c4ed5;
constexpr std::uint32_t batch_check_of(std::uint32_t sequence, std::uint32_t count, std::uint32_t size) noexcept {
    return (sequence * 0x9e3779b9u) ^ (count * 0x85ebca6bu) ^ (size * 0xc2b2ae35u) ^ batch_check;
}
inline constexpr std::size_t batch_align = 8;
constexpr std::uint64_t batch_align_up(std::uint64_t n) noexcept {
    return (n + batch_align - 1) / batch_align * batch_align;
}
constexpr std::uint64_t batch_data_offset(std::uint64_t count) noexcept {
    return batch_align_up(sizeof(BatchHeader) + 4 * count);
}
// A sender puts at most this many messages into one batch.
inline constexpr std::uint32_t batch_max_count = 1024;

// An open slot: a note with the batch flag and size 0 (an empty batch, which a
// batch note never is) opens the slot granted for its index to records, small
// messages that the sender appends one after the other, each signed on its own, so
// that a stream of small messages costs one note and one grant per slot instead of
// per message, and its messages lie next to each other (several per cache line):
//   record k at offset o (o = 0 for the first, each next one at
//   o + record_header_size + batch_align_up(length)):
//     word (64 bits, written last, release) = check:32 | length:32, then length bytes
//   check = record_check_of(sender, sequence, k, length): sender is the sending node's
//   id and sequence the number of the note that opened the slot (mod 2^32), so a
//   record left by an earlier round of the slot is not taken for a new one. Both are
//   needed: a slot goes back to the receiver's pool and may next be granted to
//   another peer, whose notes are numbered on their own; a close left at offset o by
//   one peer's round with sequence s was taken as the close of another peer's round
//   that also had sequence s, before that peer's record k reached o (its later records
//   were never read: an MPI program of 5 ranks never ended its collectives). A word
//   of all zeros is never a record.
//   The last record is the close (length = record_close, no bytes): the receiver
//   then looks at the next note. A sender keeps room for it: a message is appended
//   only while offset + 8 + batch_align_up(length) + 8 fits the slot.
// The slot goes back to the sender (its grant) once it is closed and the last of its
// messages is dropped, as a batch's slot does.
inline constexpr std::uint32_t record_close = 1u << 31;
inline constexpr std::uint64_t record_header_size = 8;
inline constexpr std::uint32_t record_check = 0x7ec0bd51;
constexpr std::uint32_t record_check_of(std::uint32_t sender, std::uint32_t sequence, std::uint32_t k,
                                        std::uint32_t length) noexcept {
    std::uint32_t h = (sequence * 0x9e3779b9u) ^ (k * 0x85ebca6bu) ^ record_check;
    h ^= h >> 16;
    h ^= sender * 0x27d4eb2fu;
    h ^= h >> 15;
    h = (h * 0x2c1b3c6du) ^ (length * 0xc2b2ae35u);
    h ^= h >> 13;
    return h == 0 ? 1 : h;
}
// Where the record after one of length bytes at offset starts: right after it (on
// 8 bytes) for a record that fits a cache line, else on the next cache line of the
// slot, so that a reader spinning on the next word does not hold a line that the
// sender still writes message bytes into.
inline constexpr std::uint64_t record_line = 64;
constexpr std::uint64_t record_next(std::uint64_t offset, std::uint64_t length) noexcept {
    const std::uint64_t end = offset + record_header_size + batch_align_up(length);
    return record_header_size + length <= record_line ? end : (end + record_line - 1) / record_line * record_line;
}
constexpr std::uint64_t make_record(std::uint32_t sender, std::uint32_t sequence, std::uint32_t k,
                                    std::uint32_t length) noexcept {
    return (std::uint64_t{record_check_of(sender, sequence, k, length)} << 32) | length;
}
// The taken word: while a slot is open to records, the receiver writes, when it
// opens the slot (0) and each time its next record's offset passes a quarter of the
// slot, how many records of that slot it took, into the ack word of index taken_index of its header at the sender
// (a word no grant uses while the sender's max_outst_buffers is below
// max_outstanding; with 15 the receiver writes no taken word). The sender reads it
// in its own segment (no remote read) to tell how far behind the receiver is, and
// stages its next records while the receiver is more than a quarter of the slot
// behind. taken = check:8 | count:24, check = taken_check_of(sequence) of the note
// that opened the slot (1..255, never 0: 0 is "nothing written", as the
// introduction leaves the word), so that the count of an earlier open slot is not
// read as this one's. A hint only: a wrong count changes when the sender stages,
// never what arrives.
inline constexpr std::uint32_t taken_index = max_outstanding - 1;
inline constexpr std::uint32_t taken_count_mask = (1u << 24) - 1;
constexpr std::uint32_t taken_check_of(std::uint32_t sequence) noexcept {
    return 1 + sequence % 255;
}
constexpr std::uint32_t make_taken(std::uint32_t check, std::uint32_t count) noexcept {
    return (check << 24) | (count & taken_count_mask);
}
// Whether a taken word says that at least count records of the slot opened with
// check were taken (a word of another slot, or none, says not).
constexpr bool taken_reached(std::uint32_t word, std::uint32_t check, std::uint32_t count) noexcept {
    return (word >> 24) == check && (word & taken_count_mask) >= count;
}

// The note that opens a slot to records.
constexpr bool opens_records(std::uint32_t note) noexcept {
    return (note & (note_large_flag | note_hot_flag | note_batch_flag | note_size_mask)) == note_batch_flag;
}

// Shared messages of at least this size go through the broadcast region.
inline constexpr std::size_t broadcast_min_size = 1024;

} // namespace msgpass::sci
