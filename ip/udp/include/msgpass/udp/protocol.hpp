// The udp wire protocol (docs/udp.md): every datagram one msgpass process sends to
// another over UDP. Each starts with a 64-byte DatagramHeader (little-endian, the
// wire image on x86 and ARM64) naming the protocol, the pair, the partition (a
// hash), both incarnations and a per-pair datagram sequence number; a data datagram
// carries one piece of a message after it, or (flag_packed) several whole small
// messages, a frame each. A message is cut into datagrams of at
// most udp.datagram_size bytes; the datagrams of a pair are numbered from 0 for each
// pair of incarnations and acknowledged cumulatively; the numbering goes on through
// a loss of the peer for silence (only a new incarnation numbers from 0 again), and a
// skip datagram tells a peer that lived which datagrams it will never get.
//
// decode_datagram() is the one place a datagram from the network is judged: it
// returns the header or the reason it is dropped, before anything is allocated.
#pragma once

#include <msgpass/ip/refusal.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace msgpass::udp {

inline constexpr std::uint32_t magic = 0x4455504d; // "MPUD" in memory order
// 2: a data datagram may carry flag_status_now, and status_request exists; 3: a data
// datagram may carry the status of the other direction (flag_ack). Two versions drop
// each other's datagrams as bad version.
inline constexpr std::uint16_t protocol_version = 3;

enum class DatagramType : std::uint16_t {
    hello = 1,           // who I am; answered by a welcome (sent while the peer is unknown).
                         // With auth_key_file its payload is a 32-byte nonce
    welcome = 2,         // the answer to a hello: my incarnation. With auth_key_file its
                         // payload is welcome_mac(key, this header, the hello's nonce)
    data = 3,            // one piece of a message: seq = datagram number, length, offset; or, with
                         // flag_packed, whole messages in frames: length = the frames' bytes, offset = frames
    status = 4,          // receiver -> sender: seq = next expected datagram, window = datagrams it takes beyond
    nak = 5,             // receiver -> sender: payload = (first, count) pairs of missing datagrams
    keepalive = 6,       // either way when silent for peer_timeout / 4; carries a status
    goodbye = 7,         // the sender closes cleanly: seq = datagrams it sent, window = next expected of ours
    group_data = 8,      // a data datagram sent once to a multicast group: reserved = entries of its member table
    skip = 9,            // sender -> receiver, after it gave the receiver up while it lived: the datagrams
                         // before seq belong to messages it dropped; length = the receiver's next expected
                         // as the sender last heard it (below seq), offset = the messages dropped from
                         // there (at least 1). Numbering goes on from seq
    status_request = 10, // sender -> receiver, from a flush that had nothing left to transmit:
                         // a status at once, please (no payload, no flags, the rest 0)
};

// flags of a data datagram
inline constexpr std::uint16_t flag_first = 1; // the first datagram of a message (offset 0)
// A packed data datagram: whole messages, one frame each (below), instead of a piece.
inline constexpr std::uint16_t flag_packed = 4;
// With either of the above (or alone on a later piece): the sender flushes and this is
// the last datagram it transmitted; the receiver sends its status at the end of the
// read that took it, not status_delay later (docs/udp.md, "A flush asks for the status").
inline constexpr std::uint16_t flag_status_now = 8;
// With any of the above: the datagram ends with an AckTrailer, the status of the other
// direction (what a status datagram would say: next expected, window), carried by the
// data going back instead of a datagram of its own (docs/udp.md, "Acknowledgements
// carried by data"). Its 16 bytes are not the payload's.
inline constexpr std::uint16_t flag_ack = 16;
// flags of a hello, welcome, status or keepalive: the sender joined udp.multicast and
// takes group_data datagrams there
inline constexpr std::uint16_t flag_joined = 2;

// A frame of a packed data datagram: its length (this header's 8 bytes and the
// message's), 4 bytes of zero, then the message, padded with zeros to a multiple of
// frame_alignment; the frames follow one another to the datagram's end exactly.
// Numbering, acknowledgements and repair stay the datagram's (docs/udp.md, "Packed
// datagrams"): a packed datagram is made once and resent as it first went.
struct FrameHeader {
    std::uint32_t length = 0; // frame_header_size + the message's bytes, padding excluded
    std::uint32_t reserved = 0;
};
static_assert(sizeof(FrameHeader) == 8);
inline constexpr std::size_t frame_header_size = sizeof(FrameHeader);
inline constexpr std::size_t frame_alignment = 8;
// The bytes a message of `size` takes in a packed datagram, padding included.
[[nodiscard]] constexpr std::uint64_t frame_bytes(std::uint64_t size) noexcept {
    return (frame_header_size + size + frame_alignment - 1) & ~std::uint64_t{frame_alignment - 1};
}

// A group_data datagram carries, after its header, one entry per member it is for:
// the member, its incarnation as the sender knows it, and the number of this datagram
// in the member's own stream (the sequence it would carry as a data datagram); then
// the piece of the message. The header's `to` is 0, its `seq` and
// `peer_incarnation` 0, its `reserved` the number of entries (1 to max_group_entries).
struct GroupEntry {
    std::uint32_t member = 0;
    std::uint32_t reserved = 0;
    std::uint64_t peer_incarnation = 0;
    std::uint64_t seq = 0;
};
static_assert(sizeof(GroupEntry) == 24);
inline constexpr std::size_t group_entry_size = sizeof(GroupEntry);
inline constexpr std::size_t max_group_entries = 1024;
[[nodiscard]] constexpr std::size_t group_table_bytes(std::size_t members) noexcept {
    return members * group_entry_size;
}

// The last 16 bytes of a data datagram with flag_ack: the sender's next expected
// datagram of the receiver's stream and the window beyond it, as a status's seq and length.
struct AckTrailer {
    std::uint64_t next_expected = 0;
    std::uint64_t window = 0;
};
static_assert(sizeof(AckTrailer) == 16);
inline constexpr std::size_t ack_trailer_size = sizeof(AckTrailer);

struct DatagramHeader {
    std::uint32_t magic = 0;
    std::uint16_t version = 0;
    std::uint16_t type = 0;
    std::uint32_t from = 0;             // sender's node id
    std::uint32_t to = 0;               // receiver's node id
    std::uint64_t partition = 0;        // partition_hash() of the partition name
    std::uint64_t incarnation = 0;      // the sender's incarnation (never 0)
    std::uint64_t peer_incarnation = 0; // the receiver's incarnation as the sender knows it (0: none)
    std::uint64_t seq = 0;    // data: datagram number; status, keepalive: next expected; goodbye: datagrams sent;
                              // skip: the first datagram kept
    std::uint64_t length = 0; // data: the message's length; status, keepalive, goodbye: window / next expected;
                              // skip: the receiver's next expected as the sender knows it
    std::uint32_t offset = 0; // data: where this piece goes in the message; skip: messages dropped
    std::uint16_t flags = 0;  // data: flag_first or flag_packed, and flag_status_now, flag_ack
    std::uint16_t reserved = 0;
};
static_assert(sizeof(DatagramHeader) == 64);
inline constexpr std::size_t header_size = sizeof(DatagramHeader);

// The fields every datagram a node sends carries: this protocol, its type, the
// sender's id, partition and incarnation; the rest is zero.
[[nodiscard]] inline DatagramHeader header_of(DatagramType type, std::uint32_t from, std::uint64_t partition,
                                              std::uint64_t incarnation) noexcept {
    DatagramHeader h;
    h.magic = magic;
    h.version = protocol_version;
    h.type = static_cast<std::uint16_t>(type);
    h.from = from;
    h.partition = partition;
    h.incarnation = incarnation;
    return h;
}
// The payload of a hello (its nonce) or welcome (its MAC) under auth_key_file.
inline constexpr std::size_t auth_payload_size = 32;
// A NAK lists at most this many (first, count) ranges.
inline constexpr std::size_t max_nak_ranges = 64;
// udp.datagram_size: 1472 fits a 1500-byte MTU (IPv4 20 + UDP 8); 65507 is the most IPv4 takes.
inline constexpr std::size_t default_datagram_size = 1472;
inline constexpr std::size_t min_datagram_size = 512;
inline constexpr std::size_t max_datagram_size = 65507;

// FNV-1a of the partition name: every datagram names its partition by this hash.
[[nodiscard]] constexpr std::uint64_t partition_hash(std::string_view partition) noexcept {
    std::uint64_t h = 14695981039346656037ull;
    for (char c : partition) {
        h ^= static_cast<unsigned char>(c);
        h *= 1099511628211ull;
    }
    return h;
}

// Why a datagram was dropped; counted per reason (UdpNodeFactory::drops()).
enum class Drop : std::uint32_t {
    too_short = 0,        // shorter than the header, or a NAK's ranges cut short
    bad_magic = 1,        // not msgpass udp
    bad_version = 2,      // another protocol version
    bad_type = 3,         // an unknown type, or flags or payload where none belong
    wrong_partition = 4,  // another partition's hash
    unknown_sender = 5,   // `from` not in the nodes file, or this node itself; or incarnation 0
    wrong_target = 6,     // `to` is not this node
    stale = 7,            // addressed to an earlier incarnation of this process, or from a peer's ended one;
                          // a skip counted from an older next expected than this node's
    beyond_window = 8,    // a sequence number beyond the window this side advertised
    bad_fragment = 9,     // offset or length beyond its message, or beyond max_message_size
    duplicate = 10,       // a datagram that had arrived already
    injected = 11,        // udp.inject_loss (on receipt), udp.inject_multicast_loss (at the sender)
    unauthenticated = 12, // with auth_key_file: a hello or welcome without its nonce or MAC, or
                          // a datagram of an incarnation whose welcome did not prove the key
    bad_proof = 13,       // with auth_key_file: a welcome whose MAC does not prove the key for
                          // the nonce this node sent (another key, or a replay)
    bad_skip = 14,        // a skip whose numbers do not hold: its first kept datagram not beyond the
                          // receiver's next expected it names, no message dropped, or (at the node) a
                          // next expected beyond what this node received
    bad_frame = 15,       // a packed datagram whose frames do not tile it: a frame length below its
                          // header, past the datagram's end or beyond max_message_size, a reserved
                          // field not zero, a frame count or byte count not the header's
    too_many = 16,        // a newcomer's hello (a client in no nodes file) while udp.max_clients
                          // clients are here already
    kinds = 17,
};

inline constexpr std::array<std::string_view, static_cast<std::size_t>(Drop::kinds)> drop_names{
    "too short",       "bad magic", "bad version",   "bad type",     "wrong partition", "unknown sender",
    "wrong target",    "stale",     "beyond window", "bad fragment", "duplicate",       "injected loss",
    "unauthenticated", "bad proof", "bad skip",      "bad frame",    "too many clients"};

[[nodiscard]] constexpr std::string_view describe(Drop d) noexcept {
    const auto i = static_cast<std::size_t>(d);
    return i < drop_names.size() ? drop_names[i] : std::string_view("unknown");
}

// What a receiver expects of every datagram.
struct Expect {
    std::uint64_t partition = 0;
    std::uint32_t self = 0;
    std::uint64_t max_message_size = 0;
    std::size_t datagram_size = default_datagram_size;
    bool (*knows)(const void* context, std::uint32_t id) = nullptr; // is `from` a peer of the nodes file?
    const void* context = nullptr;
    // Peers found at run time (docs/udp.md, "Clients in no nodes file"): this node
    // takes newcomers' hellos (from 0: udp.max_clients above 0); the caller checks
    // `to` per sender (a server this process looked up addresses it by the run-time
    // id it gave, not by this node's id), not this function.
    bool newcomers = false;
    bool client = false;
};

// A datagram judged: its header, or why it is dropped (ok false).
struct Decoded {
    bool ok = false;
    Drop drop = Drop::too_short;
    DatagramHeader header{};
    std::span<const std::byte> payload{};
    bool group = false; // it came as group_data (sent to udp.multicast); header is this member's data
    // A data datagram with flag_ack: the status it carries (not part of payload).
    bool ack = false;
    AckTrailer acked{};
    // A newcomer's hello: from 0 (a client in no nodes file), to 0 or this node; only
    // when Expect::newcomers. Its seq and length carry the cookie of a keyed server's
    // answer, when it has one (docs/udp.md).
    bool newcomer = false;
};

// The frames of a packed datagram's payload: each at least its header, within the
// payload and max_message_size, its reserved field zero, and together exactly the
// payload, `bytes` long, `frames` of them (the header's length and offset). Reads
// nothing past the payload; every length is summed in 64 bits.
[[nodiscard]] inline bool packed_frames_hold(std::span<const std::byte> payload, std::uint64_t bytes,
                                             std::uint64_t frames, std::uint64_t max_message_size) noexcept {
    if (bytes != payload.size() || frames == 0 || payload.size() % frame_alignment != 0) return false;
    std::uint64_t at = 0, seen = 0;
    while (at < payload.size()) {
        if (payload.size() - at < frame_header_size) return false;
        FrameHeader f;
        std::memcpy(&f, payload.data() + at, frame_header_size);
        if (f.reserved != 0 || f.length < frame_header_size || f.length - frame_header_size > max_message_size)
            return false;
        const std::uint64_t span = frame_bytes(f.length - frame_header_size);
        if (span > payload.size() - at) return false;
        at += span;
        ++seen;
    }
    return seen == frames;
}

// Checks, in order: size, magic, version, type (and the layout of its type, a data
// datagram's AckTrailer taken off its payload),
// partition, target, sender, then for data the fragment (offset + piece <= length
// <= max_message_size, a first piece at offset 0) or the frames of a packed one
// (packed_frames_hold), for a skip its numbers (length <
// seq, offset >= 1). The window is the caller's.
[[nodiscard]] inline Decoded decode_datagram(std::span<const std::byte> bytes, const Expect& expect) noexcept {
    Decoded d;
    if (bytes.size() < header_size) return d;
    std::memcpy(&d.header, bytes.data(), header_size);
    const DatagramHeader& h = d.header;
    d.payload = bytes.subspan(header_size);
    auto drop = [&](Drop why) {
        d.drop = why;
        return d;
    };
    if (h.magic != magic) return drop(Drop::bad_magic);
    if (h.version != protocol_version) return drop(Drop::bad_version);
    const auto type = static_cast<DatagramType>(h.type);
    switch (type) {
    case DatagramType::data: {
        const auto kind = static_cast<std::uint16_t>(h.flags & ~(flag_status_now | flag_ack));
        if ((kind != 0 && kind != flag_first && kind != flag_packed) || h.reserved != 0) return drop(Drop::bad_type);
        if ((h.flags & flag_ack) != 0) { // the trailer is no part of the payload
            if (d.payload.size() < ack_trailer_size) return drop(Drop::too_short);
            d.ack = true;
            std::memcpy(&d.acked, d.payload.data() + d.payload.size() - ack_trailer_size, ack_trailer_size);
            d.payload = d.payload.first(d.payload.size() - ack_trailer_size);
        }
        break;
    }
    case DatagramType::group_data:
        if ((h.flags & ~flag_first) != 0 || h.reserved == 0 || h.reserved > max_group_entries || h.to != 0 ||
            h.seq != 0 || h.peer_incarnation != 0) {
            return drop(Drop::bad_type);
        }
        if (d.payload.size() < group_table_bytes(h.reserved)) return drop(Drop::too_short);
        break;
    case DatagramType::nak:
        if (d.payload.empty() || d.payload.size() % 16 != 0 || d.payload.size() > max_nak_ranges * 16) {
            return drop(d.payload.size() % 16 != 0 ? Drop::too_short : Drop::bad_type);
        }
        break;
    case DatagramType::hello:
    case DatagramType::welcome:
        // no payload, or the nonce (hello) or MAC (welcome) of auth_key_file
        if ((!d.payload.empty() && d.payload.size() != auth_payload_size) || (h.flags & ~flag_joined) != 0 ||
            h.offset != 0)
            return drop(Drop::bad_type);
        break;
    case DatagramType::status:
    case DatagramType::keepalive:
        if (!d.payload.empty() || (h.flags & ~flag_joined) != 0 || h.offset != 0) return drop(Drop::bad_type);
        break;
    case DatagramType::goodbye:
        if (!d.payload.empty() || h.flags != 0 || h.offset != 0) return drop(Drop::bad_type);
        break;
    case DatagramType::status_request:
        if (!d.payload.empty() || h.flags != 0 || h.offset != 0 || h.seq != 0 || h.length != 0 || h.reserved != 0)
            return drop(Drop::bad_type);
        break;
    case DatagramType::skip:
        if (!d.payload.empty() || h.flags != 0 || h.reserved != 0) return drop(Drop::bad_type);
        break;
    default:
        return drop(Drop::bad_type);
    }
    if (h.partition != expect.partition) return drop(Drop::wrong_partition);
    if (type == DatagramType::group_data) {
        // This member's entry makes it the data datagram it would have been unicast:
        // the rest of the checks are those of data.
        bool mine = false;
        for (std::size_t i = 0; i < h.reserved; ++i) {
            GroupEntry e;
            std::memcpy(&e, d.payload.data() + i * group_entry_size, group_entry_size);
            if (e.member != expect.self) continue;
            mine = true;
            d.header.type = static_cast<std::uint16_t>(DatagramType::data);
            d.header.to = e.member;
            d.header.peer_incarnation = e.peer_incarnation;
            d.header.seq = e.seq;
            break;
        }
        if (!mine) return drop(Drop::wrong_target);
        d.payload = d.payload.subspan(group_table_bytes(h.reserved));
        d.header.reserved = 0;
        d.group = true;
    }
    if (type == DatagramType::hello && h.from == 0 && expect.self != 0 && h.incarnation != 0 &&
        (h.to == 0 || h.to == expect.self)) {
        if (!expect.newcomers) return drop(Drop::unknown_sender);
        d.ok = true;
        d.newcomer = true;
        return d;
    }
    if (h.to != expect.self && !expect.client) return drop(Drop::wrong_target);
    if (h.from == expect.self || h.incarnation == 0 || expect.knows == nullptr ||
        !expect.knows(expect.context, h.from)) {
        return drop(Drop::unknown_sender);
    }
    if (type == DatagramType::data && (h.flags & flag_packed) != 0) {
        if (bytes.size() > expect.datagram_size) return drop(Drop::bad_fragment);
        if (!packed_frames_hold(d.payload, h.length, h.offset, expect.max_message_size)) return drop(Drop::bad_frame);
    } else if (type == DatagramType::data || type == DatagramType::group_data) {
        const std::uint64_t piece = d.payload.size();
        const bool first = (h.flags & flag_first) != 0;
        if (h.length > expect.max_message_size || bytes.size() > expect.datagram_size ||
            std::uint64_t{h.offset} + piece > h.length || (first && h.offset != 0) || (!first && h.offset == 0) ||
            (piece == 0 && h.length != 0)) {
            return drop(Drop::bad_fragment);
        }
    }
    if (type == DatagramType::skip && (h.length >= h.seq || h.offset == 0)) return drop(Drop::bad_skip);
    d.ok = true;
    return d;
}

} // namespace msgpass::udp
