// The udp technology beyond the conformance suite (docs/udp.md): the decoder of
// datagrams from the network, exactly-once in-order delivery under injected loss,
// duplicates and reordering, hostile datagrams dropped and counted by reason while
// two good nodes exchange checked traffic, and the loss of a peer process that dies
// or restarts.
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>
#include <msgpass/udp/protocol.hpp>

#include "../support/bounded.hpp"
#include "../support/environment.hpp"
#include "../support/multicast.hpp"
#include "../support/partition.hpp"
#include "../support/udp_packed.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <thread>
#include <tuple>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
constexpr auto patience = 10s;

// ---------------------------------------------------------------- decoder

bool knows_2_and_3(const void*, std::uint32_t id) {
    return id == 2 || id == 3;
}

udp::Expect expectation() {
    return udp::Expect{udp::partition_hash("p"), 1, 1 << 20, udp::default_datagram_size, knows_2_and_3, nullptr};
}

udp::DatagramHeader good_data() {
    udp::DatagramHeader h;
    h.magic = udp::magic;
    h.version = udp::protocol_version;
    h.type = static_cast<std::uint16_t>(udp::DatagramType::data);
    h.from = 2;
    h.to = 1;
    h.partition = udp::partition_hash("p");
    h.incarnation = 77;
    h.peer_incarnation = 55;
    h.seq = 3;
    h.length = 100;
    h.offset = 0;
    h.flags = udp::flag_first;
    return h;
}

std::vector<std::byte> datagram(const udp::DatagramHeader& h, std::size_t payload) {
    std::vector<std::byte> bytes(udp::header_size + payload, std::byte{0x5a});
    std::memcpy(bytes.data(), &h, udp::header_size);
    return bytes;
}

udp::Decoded judge(const udp::DatagramHeader& h, std::size_t payload) {
    const auto bytes = datagram(h, payload);
    return udp::decode_datagram(bytes, expectation());
}

TEST(UdpDecoder, AWellFormedDataDatagramIsTakenWithItsPayload) {
    const auto d = judge(good_data(), 100);
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.seq, 3u);
    EXPECT_EQ(d.payload.size(), 100u);
}

// A data datagram may carry the status of the other direction (flag_ack): its last
// 16 bytes, which the decoder hands over as the status and takes off the payload.
TEST(UdpDecoder, ADataDatagramCarryingAStatusIsTakenWithoutItsTrailer) {
    auto h = good_data();
    h.flags = udp::flag_first | udp::flag_ack;
    auto bytes = datagram(h, 100 + udp::ack_trailer_size);
    const udp::AckTrailer trailer{9, 512};
    std::memcpy(bytes.data() + udp::header_size + 100, &trailer, sizeof trailer);
    const auto d = udp::decode_datagram(bytes, expectation());
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.payload.size(), 100u);
    ASSERT_TRUE(d.ack);
    EXPECT_EQ(d.acked.next_expected, 9u);
    EXPECT_EQ(d.acked.window, 512u);
    const auto plain = judge(good_data(), 100);
    ASSERT_TRUE(plain.ok);
    EXPECT_FALSE(plain.ack);
}

TEST(UdpDecoder, AWellFormedSkipIsTakenWithItsNumbers) {
    auto h = good_data();
    h.type = static_cast<std::uint16_t>(udp::DatagramType::skip);
    h.flags = 0;
    h.seq = 40;    // the first datagram kept
    h.length = 12; // the receiver's next expected as the sender knows it
    h.offset = 9;  // messages dropped
    const auto d = judge(h, 0);
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.seq, 40u);
    EXPECT_EQ(d.header.length, 12u);
    EXPECT_EQ(d.header.offset, 9u);
    EXPECT_EQ(udp::describe(udp::Drop::bad_skip), "bad skip");
}

TEST(UdpDecoder, EachFaultIsDroppedUnderItsReason) {
    using udp::Drop;
    struct Case {
        const char* what;
        Drop drop;
        udp::DatagramHeader header;
        std::size_t payload;
    };
    std::vector<Case> cases;
    auto with = [&](const char* what, Drop drop, auto change, std::size_t payload = 100) {
        auto h = good_data();
        change(h);
        cases.push_back({what, drop, h, payload});
    };
    with("bad magic", Drop::bad_magic, [](auto& h) { h.magic = 0x4354504d; });
    with("bad version", Drop::bad_version, [](auto& h) { h.version = udp::protocol_version + 1; });
    with("version 1 (before flag_status_now)", Drop::bad_version, [](auto& h) { h.version = 1; });
    with("unknown type", Drop::bad_type, [](auto& h) { h.type = 99; });
    with("type 0", Drop::bad_type, [](auto& h) { h.type = 0; });
    with("unknown flag", Drop::bad_type, [](auto& h) { h.flags = 32; });
    with(
        "carrying a status, cut short of its trailer", Drop::too_short,
        [](auto& h) { h.flags = udp::flag_first | udp::flag_ack, h.length = 0; }, udp::ack_trailer_size - 1);
    with(
        "a status carrying a status", Drop::bad_type,
        [](auto& h) { h.type = static_cast<std::uint16_t>(udp::DatagramType::status), h.flags = udp::flag_ack; }, 0);
    with("first and packed carrying a status", Drop::bad_type,
         [](auto& h) { h.flags = udp::flag_first | udp::flag_packed | udp::flag_ack; });
    with("first and packed", Drop::bad_type, [](auto& h) { h.flags = udp::flag_first | udp::flag_packed; });
    with("first and packed asking a status", Drop::bad_type,
         [](auto& h) { h.flags = udp::flag_first | udp::flag_packed | udp::flag_status_now; });
    auto request = [](udp::DatagramHeader& h) { // a good status_request
        h.type = static_cast<std::uint16_t>(udp::DatagramType::status_request);
        h.flags = 0, h.seq = 0, h.length = 0, h.offset = 0;
    };
    with("status request with a payload", Drop::bad_type, request);
    with(
        "status request with flags", Drop::bad_type, [&](auto& h) { request(h), h.flags = udp::flag_status_now; }, 0);
    with(
        "status request with a number", Drop::bad_type, [&](auto& h) { request(h), h.seq = 4; }, 0);
    with(
        "status request with a length", Drop::bad_type, [&](auto& h) { request(h), h.length = 4; }, 0);
    with(
        "status request with an offset", Drop::bad_type, [&](auto& h) { request(h), h.offset = 4; }, 0);
    with("status with a payload", Drop::bad_type,
         [](auto& h) { h.type = static_cast<std::uint16_t>(udp::DatagramType::status), h.flags = 0; });
    with(
        "nak cut short", Drop::too_short,
        [](auto& h) { h.type = static_cast<std::uint16_t>(udp::DatagramType::nak), h.flags = 0; }, 17);
    with(
        "nak with too many ranges", Drop::bad_type,
        [](auto& h) { h.type = static_cast<std::uint16_t>(udp::DatagramType::nak), h.flags = 0; },
        16 * (udp::max_nak_ranges + 1));
    with("wrong partition", Drop::wrong_partition, [](auto& h) { h.partition = udp::partition_hash("q"); });
    with("to another node", Drop::wrong_target, [](auto& h) { h.to = 2; });
    with("from a node not in the nodes file", Drop::unknown_sender, [](auto& h) { h.from = 9; });
    with("from itself", Drop::unknown_sender, [](auto& h) { h.from = 1; });
    with("incarnation 0", Drop::unknown_sender, [](auto& h) { h.incarnation = 0; });
    with("piece beyond the message", Drop::bad_fragment, [](auto& h) { h.length = 50; });
    with("offset beyond the message", Drop::bad_fragment, [](auto& h) { h.offset = 90, h.flags = 0; });
    with("offset that wraps", Drop::bad_fragment, [](auto& h) { h.offset = 0xffffffffu, h.flags = 0; });
    with("message beyond max_message_size", Drop::bad_fragment, [](auto& h) { h.length = (1u << 20) + 1; });
    with("first piece not at offset 0", Drop::bad_fragment, [](auto& h) { h.offset = 10, h.length = 200; });
    with("later piece at offset 0", Drop::bad_fragment, [](auto& h) { h.flags = 0; });
    with(
        "larger than udp.datagram_size", Drop::bad_fragment, [](auto& h) { h.length = 4000; },
        udp::default_datagram_size);
    auto skip = [](udp::DatagramHeader& h) { // a good skip: h.seq 3 kept, next expected 1, 2 messages
        h.type = static_cast<std::uint16_t>(udp::DatagramType::skip), h.flags = 0, h.length = 1, h.offset = 2;
    };
    with("skip with a payload", Drop::bad_type, skip);
    with(
        "skip with flags", Drop::bad_type, [&](auto& h) { skip(h), h.flags = 1; }, 0);
    with(
        "skip that skips nothing", Drop::bad_skip, [&](auto& h) { skip(h), h.length = 3; }, 0);
    with(
        "skip below its next expected", Drop::bad_skip, [&](auto& h) { skip(h), h.length = 7; }, 0);
    with(
        "skip of no message", Drop::bad_skip, [&](auto& h) { skip(h), h.offset = 0; }, 0);
    for (const auto& c : cases) {
        const auto d = judge(c.header, c.payload);
        EXPECT_FALSE(d.ok) << c.what;
        EXPECT_EQ(udp::describe(d.drop), udp::describe(c.drop)) << c.what;
    }
}

// A flushing sender's last datagram asks for a status at once (flag_status_now): a
// first piece, a later piece or a packed datagram with it is taken as without it, as
// is a status_request; the flag on a group datagram or a control is dropped.
TEST(UdpDecoder, ADatagramAskingForAStatusIsTakenAsItsKindAndTheRequestAlone) {
    auto first = good_data();
    first.flags = udp::flag_first | udp::flag_status_now;
    auto d = judge(first, 100);
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.flags, udp::flag_first | udp::flag_status_now);
    EXPECT_EQ(d.payload.size(), 100u);

    auto later = good_data();
    later.flags = udp::flag_status_now;
    later.length = 3000;
    later.offset = 1408;
    d = judge(later, 1408);
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    later.offset = 0; // a later piece still needs its offset
    EXPECT_EQ(udp::describe(judge(later, 1408).drop), udp::describe(udp::Drop::bad_fragment));

    auto bytes = packed_datagram(good_data(), {64, 64, 7});
    udp::DatagramHeader h;
    std::memcpy(&h, bytes.data(), udp::header_size);
    h.flags |= udp::flag_status_now;
    std::memcpy(bytes.data(), &h, udp::header_size);
    d = udp::decode_datagram(bytes, expectation());
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.offset, 3u);

    auto request = good_data();
    request.type = static_cast<std::uint16_t>(udp::DatagramType::status_request);
    request.flags = 0, request.seq = 0, request.length = 0, request.offset = 0;
    d = judge(request, 0);
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);

    auto status = good_data();
    status.type = static_cast<std::uint16_t>(udp::DatagramType::status);
    status.flags = udp::flag_status_now, status.length = 10, status.offset = 0;
    EXPECT_EQ(udp::describe(judge(status, 0).drop), udp::describe(udp::Drop::bad_type));
}

// A group data datagram is, to the member its table names, the data datagram it
// would have been unicast; anything else about it is dropped by reason.
TEST(UdpDecoder, AGroupDataDatagramIsTakenAsTheMembersOwnDataAndFaultsAreDropped) {
    auto group_datagram = [](std::vector<udp::GroupEntry> table, std::size_t piece, auto change) {
        auto h = good_data();
        h.type = static_cast<std::uint16_t>(udp::DatagramType::group_data);
        h.to = 0;
        h.seq = 0;
        h.peer_incarnation = 0;
        h.reserved = static_cast<std::uint16_t>(table.size());
        h.length = piece;
        change(h);
        std::vector<std::byte> bytes(udp::header_size + udp::group_table_bytes(table.size()) + piece, std::byte{7});
        std::memcpy(bytes.data(), &h, udp::header_size);
        if (!table.empty())
            std::memcpy(bytes.data() + udp::header_size, table.data(), udp::group_table_bytes(table.size()));
        return bytes;
    };
    const std::vector<udp::GroupEntry> table{{3, 0, 11, 40}, {1, 0, 55, 9}};
    auto same = [](udp::DatagramHeader&) {};
    const auto good = group_datagram(table, 100, same);
    const auto d = udp::decode_datagram(good, expectation());
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.type, static_cast<std::uint16_t>(udp::DatagramType::data));
    EXPECT_EQ(d.header.to, 1u);
    EXPECT_EQ(d.header.seq, 9u);
    EXPECT_EQ(d.header.peer_incarnation, 55u);
    EXPECT_EQ(d.payload.size(), 100u);
    auto drop_of = [](const std::vector<std::byte>& bytes) {
        const auto x = udp::decode_datagram(bytes, expectation());
        return x.ok ? std::string("taken") : std::string(udp::describe(x.drop));
    };
    using udp::describe, udp::Drop;
    EXPECT_EQ(drop_of(group_datagram({{3, 0, 11, 40}}, 100, same)), describe(Drop::wrong_target));
    EXPECT_EQ(drop_of(group_datagram({}, 100, same)), describe(Drop::bad_type));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.to = 1; })), describe(Drop::bad_type));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.seq = 1; })), describe(Drop::bad_type));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.reserved = 7; })), describe(Drop::too_short));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.reserved = 2000; })), describe(Drop::bad_type));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.length = 50; })), describe(Drop::bad_fragment));
    EXPECT_EQ(drop_of(group_datagram(table, 100, [](auto& h) { h.partition = 1; })), describe(Drop::wrong_partition));
}

// The frame at byte `at` of a packed datagram's payload gets this length field.
void set_frame_length(std::vector<std::byte>& bytes, std::size_t at, std::uint32_t length) {
    std::memcpy(bytes.data() + udp::header_size + at, &length, sizeof length);
}

// A packed datagram is taken with its frames; one whose frames do not tile it
// exactly - a frame length past its end, zero, below the frame header, near 2^32,
// beyond max_message_size, a reserved field set, a count or length the header does
// not state, trailing bytes - is dropped as a bad frame, and never read past (the
// sanitizers' builds run this on exact-size copies).
TEST(UdpDecoder, APackedDatagramIsTakenAndOneThatLiesAboutAFrameIsABadFrame) {
    const auto good = packed_datagram(good_data(), {64, 0, 13, 1});
    const auto d = udp::decode_datagram(good, expectation());
    ASSERT_TRUE(d.ok) << udp::describe(d.drop);
    EXPECT_EQ(d.header.offset, 4u);
    EXPECT_EQ(d.payload.size(), 72u + 8u + 24u + 16u);
    EXPECT_EQ(udp::describe(udp::Drop::bad_frame), "bad frame");

    auto drop_of = [](std::vector<std::byte> bytes) {
        // An exact copy on the heap: a read past its end is a sanitizer's finding.
        const auto copy = std::make_unique<std::byte[]>(bytes.size());
        std::memcpy(copy.get(), bytes.data(), bytes.size());
        const auto x = udp::decode_datagram(std::span(copy.get(), bytes.size()), expectation());
        return x.ok ? std::string("taken") : std::string(udp::describe(x.drop));
    };
    using udp::describe, udp::Drop;
    auto header = [&](auto change) {
        auto bytes = good;
        udp::DatagramHeader h;
        std::memcpy(&h, bytes.data(), udp::header_size);
        change(h);
        std::memcpy(bytes.data(), &h, udp::header_size);
        return bytes;
    };
    const std::string bad_frame(describe(Drop::bad_frame));
    EXPECT_EQ(drop_of(header([](auto& h) { h.offset = 3; })), bad_frame) << "a frame more than the header says";
    EXPECT_EQ(drop_of(header([](auto& h) { h.offset = 5; })), bad_frame) << "a frame fewer";
    EXPECT_EQ(drop_of(header([](auto& h) { h.offset = 0; })), bad_frame) << "no frame";
    EXPECT_EQ(drop_of(header([](auto& h) { h.length -= 8; })), bad_frame) << "a length not the payload's";
    EXPECT_EQ(drop_of(header([](auto& h) { h.length = ~0ull; })), bad_frame);
    EXPECT_EQ(drop_of(header([](auto& h) { h.flags |= udp::flag_first; })), describe(Drop::bad_type));
    for (const std::uint32_t lie : {0u, 1u, 7u, 73u, 200u, 0xfffffff8u, 0xffffffffu}) {
        auto bytes = good;
        set_frame_length(bytes, 0, lie);
        EXPECT_EQ(drop_of(bytes), bad_frame) << "first frame's length " << lie;
        bytes = good;
        set_frame_length(bytes, 72 + 8 + 24, lie); // the last frame
        EXPECT_EQ(drop_of(bytes), bad_frame) << "last frame's length " << lie;
    }
    {
        auto bytes = good;
        bytes[udp::header_size + 4] = std::byte{1}; // the first frame's reserved field
        EXPECT_EQ(drop_of(bytes), bad_frame) << "reserved field set";
    }
    {
        auto bytes = good;
        bytes.resize(bytes.size() + 8); // a frame header of zeros after the last frame
        udp::DatagramHeader h;
        std::memcpy(&h, bytes.data(), udp::header_size);
        h.length += 8;
        std::memcpy(bytes.data(), &h, udp::header_size);
        EXPECT_EQ(drop_of(bytes), bad_frame) << "trailing zeros";
        h.offset += 1;
        std::memcpy(bytes.data(), &h, udp::header_size);
        set_frame_length(bytes, h.length - 8, 8);
        EXPECT_EQ(drop_of(bytes), "taken") << "an empty message's frame";
    }
    {
        auto bytes = good;
        bytes.resize(bytes.size() - 4); // cut inside the last frame's padding
        EXPECT_EQ(drop_of(bytes), bad_frame) << "cut";
    }
    // A frame whose message is beyond max_message_size (1 MiB here), in a datagram as
    // large as udp.datagram_size allows.
    EXPECT_EQ(drop_of(packed_datagram(good_data(), {1000})), "taken");
    {
        auto bytes = packed_datagram(good_data(), {1000});
        set_frame_length(bytes, 0, (1u << 20) + 9);
        EXPECT_EQ(drop_of(bytes), bad_frame) << "beyond max_message_size";
    }
    EXPECT_EQ(drop_of(packed_datagram(good_data(), {1500})), describe(Drop::bad_fragment))
        << "larger than udp.datagram_size";
    // Random frame lengths and counts over a good pack: taken or dropped, never read past.
    std::uint64_t x = 777;
    for (int i = 0; i < 20000; ++i) {
        auto bytes = good;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const std::size_t at = static_cast<std::size_t>((x >> 20) % (bytes.size() - udp::header_size - 3));
        const auto value = static_cast<std::uint32_t>(x >> 32);
        std::memcpy(bytes.data() + udp::header_size + at, &value, sizeof value);
        if ((x & 1) != 0) bytes.resize(udp::header_size + static_cast<std::size_t>((x >> 8) % 121));
        (void)drop_of(bytes);
    }
}

TEST(UdpDecoder, EveryLengthShorterThanAHeaderIsTooShortAndRandomBytesNeverPass) {
    const auto whole = datagram(good_data(), 0);
    for (std::size_t n = 0; n < udp::header_size; ++n) {
        const auto d = udp::decode_datagram(std::span(whole.data(), n), expectation());
        EXPECT_FALSE(d.ok);
        EXPECT_EQ(d.drop, udp::Drop::too_short) << n << " bytes";
    }
    std::uint64_t x = 12345;
    for (int i = 0; i < 10000; ++i) {
        std::vector<std::byte> bytes(static_cast<std::size_t>(x % 2000));
        for (auto& b : bytes) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            b = static_cast<std::byte>(x >> 56);
        }
        EXPECT_FALSE(udp::decode_datagram(bytes, expectation()).ok);
    }
}

// ---------------------------------------------------------------- loss, duplicates, reordering

// Message i of the stream: mostly small (1 B to 600 B, one datagram), every 20th
// from 2 KiB to 10 KiB, every 10 000th (from the 7th) up to 1 MiB (about 715
// datagrams of the default size).
std::size_t size_of(std::uint64_t i) {
    if (i % 10000 == 7) return 1024 * 1024 - (i % 13) * 1000;
    if (i % 20 == 3) return 2000 + (i * 7919) % 8000;
    return 1 + (i * 104729) % 600;
}

BufferPtr numbered(NodeFactory& f, std::uint64_t i) {
    const std::size_t size = size_of(i);
    if (size >= sizeof(PayloadHeader)) return make_message(f, size, 0, i);
    auto b = f.create_buffer(size);
    for (std::size_t k = 0; k < size; ++k)
        b->single()->bytes()[k] = static_cast<std::byte>(i + k);
    return b;
}

// "" when b is message i, whole; else what is wrong.
std::string check_numbered(const Buffer& b, std::uint64_t i) {
    if (b.size() != size_of(i)) {
        return "message " + std::to_string(i) + ": " + std::to_string(b.size()) + " bytes, expected " +
               std::to_string(size_of(i));
    }
    if (b.size() >= sizeof(PayloadHeader)) {
        try {
            const auto h = check_payload(b);
            if (h.seq != i) return "message " + std::to_string(h.seq) + " where " + std::to_string(i) + " was due";
        } catch (const std::string& e) {
            return e;
        }
        return "";
    }
    for (std::size_t k = 0; k < b.size(); ++k)
        if (b.single()->bytes()[k] != static_cast<std::byte>(i + k)) return "message " + std::to_string(i) + " changed";
    return "";
}

// Four nodes started at once, each sending to every other while receiving from all
// through a group (what the soak's udp partition does): every pair must come up and
// every message arrive, in order per sender.
TEST(Udp, FourNodesSendingToEachOtherAtOnceAllHearFromAll) {
    constexpr int n = 4;
    constexpr std::uint64_t per_peer = 2000;
    auto c = make_configuration("udp", unique_partition("all"), n);
    std::vector<std::unique_ptr<NodeFactory>> factories;
    for (int i = 1; i <= n; ++i)
        factories.push_back(NodeFactory::create(c, static_cast<NodeId>(i)));
    std::vector<std::string> errors(n);
    std::vector<std::jthread> threads;
    for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
            auto& f = *factories[static_cast<std::size_t>(i)];
            auto group = f.create_group();
            std::vector<NodePtr> peers;
            for (int j = 1; j <= n; ++j) {
                if (j == i + 1) continue;
                peers.push_back(f.create_node(static_cast<NodeId>(j)));
                group->add(peers.back());
            }
            std::map<NodeId, std::uint64_t> next;
            std::uint64_t sent = 0, got = 0;
            const auto deadline = Clock::now() + patience;
            while ((got < per_peer * (n - 1) || sent < per_peer) && Clock::now() < deadline) {
                if (sent < per_peer) {
                    for (auto& p : peers)
                        send_retrying(*p, make_message(f, 64, static_cast<std::uint32_t>(i + 1), sent), "a message");
                    ++sent;
                }
                while (auto m = group->receive(sent < per_peer ? 0ms : 10ms)) {
                    const auto h = check_payload(*m);
                    if (h.seq != next[m->source()]++) {
                        errors[static_cast<std::size_t>(i)] = "out of order from " + std::to_string(m->source());
                        return;
                    }
                    ++got;
                }
            }
            if (got != per_peer * (n - 1)) {
                std::string heard;
                for (auto& [id, k] : next)
                    heard += " " + std::to_string(id) + ":" + std::to_string(k);
                errors[static_cast<std::size_t>(i)] = "node " + std::to_string(i + 1) + " received " +
                                                      std::to_string(got) + " of " +
                                                      std::to_string(per_peer * (n - 1)) + " (from" + heard + ")";
            }
        });
    }
    threads.clear();
    for (const auto& e : errors)
        EXPECT_EQ(e, "");
}

// A node that sends before its peer's process is up: the first datagrams go to a
// closed port, and everything must still arrive once the peer starts (the soak's
// partitions start their processes one after the other).
TEST(Udp, MessagesSentBeforeThePeerStartsArriveWhenItDoes) {
    auto c = make_configuration("udp", unique_partition("late"), 2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    constexpr std::uint64_t n = 200;
    for (std::uint64_t i = 0; i < n; ++i)
        send_retrying(*to_b, make_message(*a, 64 + i, 1, i), "message " + std::to_string(i));
    // Node 1 has tried the closed port; now node 2 starts.
    const auto tried = dynamic_cast<udp::UdpNodeFactory&>(*a).datagram_stats().sent;
    EXPECT_GT(tried, 0u);
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i < n; ++i) // node 2 sends at once too, before it heard from node 1
        send_retrying(*from_a, make_message(*b, 64 + i, 2, i), "message " + std::to_string(i) + " back");
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = from_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
        EXPECT_EQ(check_payload(*m).seq, i);
    }
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = to_b->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " back never arrived";
        EXPECT_EQ(check_payload(*m).seq, i);
    }
}

// Small messages queued together (here: before the peer starts) travel packed, many
// to a datagram, and arrive once, in order and intact, the large ones among them cut
// into pieces as before; with loss, duplicates and reordering injected the packed
// datagrams are repaired as any.

class UdpPacked : public ::testing::TestWithParam<double> {};

TEST_P(UdpPacked, SmallMessagesQueuedTogetherTravelPackedAndArriveOnceInOrderAndIntact) {
    const double loss = GetParam();
    auto c = make_configuration("udp", unique_partition("packed"), 2, [&](config::Configuration& c) {
        auto& o = c.edit_section<udp::Options>();
        o.inject_loss = loss;
        o.inject_duplicate = loss / 2;
        o.inject_reorder = loss / 2;
        o.inject_seed = 7;
        c.max_message_size = 1024 * 1024;
    });
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    constexpr std::uint64_t n = 5000; // (message 7 is about 1 MiB, every 20th 2 to 10 KiB)
    std::uint64_t bytes = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = numbered(*a, i);
        bytes += m->size();
        send_retrying(*to_b, std::move(m), "message " + std::to_string(i));
    }
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = from_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
        ASSERT_EQ(check_numbered(*m, i), "");
    }
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "");
    const auto sent = dynamic_cast<udp::UdpNodeFactory&>(*a).datagram_stats();
    const auto got = dynamic_cast<udp::UdpNodeFactory&>(*b).datagram_stats();
    // Cut one to a datagram, the messages would take more than n datagrams; packed,
    // what their bytes fill (1408 a datagram) and a few more.
    const std::uint64_t filled = bytes / (udp::default_datagram_size - udp::header_size);
    EXPECT_LT(sent.sent - sent.repairs, filled + n / 4) << "the small messages did not travel packed";
    EXPECT_EQ(got.count(udp::Drop::bad_frame), 0u);
    EXPECT_EQ(got.count(udp::Drop::bad_fragment), 0u);
    EXPECT_EQ(from_a->stats().messages_received, n);
    if (loss > 0) {
        EXPECT_GT(got.count(udp::Drop::injected), 0u);
        EXPECT_GT(sent.repairs, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Loss, UdpPacked, ::testing::Values(0.0, 0.05),
                         [](const auto& info) { return info.param > 0 ? "FivePercentLoss" : "NoLoss"; });

// A flush waits until the peer acknowledged everything. A receiver acknowledges the
// last datagrams of a burst (fewer than 16 small ones, or than 64 of a large message)
// only status_delay after they came, unless the sender asks: the last datagram a flush
// transmits asks for a status at once, and a flush that finds everything transmitted
// sends a status_request. Here status_delay is an hour and no keepalive (peer_timeout
// / 4) comes within the test's patience: a burst of 3 small messages (packed, or
// transmitted before the flush) and a large one of 72 datagrams (a status after 64)
// are acknowledged only because the flush asked; 200 small ones may be acknowledged
// whole by the status a receiver of small messages sends every 16 datagrams.
TEST(Udp, AFlushAsksThePeerForItsStatusAndDoesNotWaitForTheStatusDelay) {
    auto c = make_configuration("udp", unique_partition("ask"), 2, [](config::Configuration& c) {
        c.peer_timeout = std::chrono::minutes(2);
        c.max_message_size = 1024 * 1024;
        c.edit_section<udp::Options>().status_delay = std::chrono::hours(1);
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    std::uint64_t seq = 0;
    struct Burst {
        int count;
        std::size_t size;
        bool must_ask;
    };
    for (const auto& [count, size, must_ask] : {Burst{3, 64, true}, Burst{200, 64, false}, Burst{1, 100000, true}}) {
        const auto asked = ub.datagram_stats().statuses_asked;
        const std::uint64_t first = seq;
        for (int i = 0; i < count; ++i)
            send_retrying(*to_b, make_message(*a, size, 1, seq++), "a message");
        ASSERT_TRUE(to_b->flush(patience)) << count << " messages of " << size << " B were never acknowledged";
        if (must_ask) {
            EXPECT_GT(ub.datagram_stats().statuses_asked, asked) << "no status was sent at the flush's request";
        }
        for (std::uint64_t i = first; i < seq; ++i) {
            auto m = from_a->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
            EXPECT_EQ(check_payload(*m).seq, i);
        }
    }
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
}

// In a request-response exchange each side owes a status for every message and sends
// a message back: the status rides on it (flag_ack), and no status datagram goes -
// before, one went every hold_in_flight (16) messages, a system call on the way to the
// reply. status_delay is an hour and no keepalive comes within the test's patience: a
// status datagram in the exchange could only come from the rules that carrying
// replaces (every 16 small messages, every status_every datagrams, the window's
// reopening by a quarter).
TEST(Udp, ARequestResponseExchangeCarriesItsStatusesOnTheRepliesAndSendsNoStatusDatagram) {
    auto c = make_configuration("udp", unique_partition("carry"), 2, [](config::Configuration& c) {
        c.peer_timeout = std::chrono::minutes(2);
        c.edit_section<udp::Options>().status_delay = std::chrono::hours(1);
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto to_a = b->create_node(1);
    const auto& ua = dynamic_cast<udp::UdpNodeFactory&>(*a);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    std::uint64_t seq = 0;
    auto round_trip = [&] {
        send_retrying(*to_b, make_message(*a, 64, 1, seq), "a request");
        auto request = to_a->receive(patience);
        ASSERT_NE(request, nullptr) << "request " << seq << " never arrived";
        EXPECT_EQ(check_payload(*request).seq, seq);
        send_retrying(*to_a, make_message(*b, 64, 2, seq), "a reply");
        auto reply = to_b->receive(patience);
        ASSERT_NE(reply, nullptr) << "reply " << seq << " never arrived";
        EXPECT_EQ(check_payload(*reply).seq, seq);
        ++seq;
    };
    for (int i = 0; i < 4; ++i) // contact made, windows told (the first receive tells its window)
        round_trip();
    const auto a_before = ua.datagram_stats(), b_before = ub.datagram_stats();
    constexpr std::uint64_t exchanges = 200;
    for (std::uint64_t i = 0; i < exchanges && !::testing::Test::HasFatalFailure(); ++i)
        round_trip();
    const auto a_after = ua.datagram_stats(), b_after = ub.datagram_stats();
    EXPECT_EQ(a_after.statuses_sent - a_before.statuses_sent, 0u) << "the requester sent status datagrams";
    EXPECT_EQ(b_after.statuses_sent - b_before.statuses_sent, 0u) << "the responder sent status datagrams";
    // Every request carries the status of the reply before it, every reply that of its request.
    EXPECT_GE(a_after.acks_carried - a_before.acks_carried, exchanges);
    EXPECT_GE(b_after.acks_carried - b_before.acks_carried, exchanges);
}

// A receiver waiting in a blocking receive has the socket lent to it; the background
// thread runs the timers of every node every status_delay only while such receivers
// read (a datagram within receivers_reading), otherwise when a node's timer asks
// (docs/udp.md, "Timers while a receiver waits"). Run every status_delay through a
// whole wait, the timers of 128 processes of 129 nodes each (a fan-in's senders
// waiting for their command) took the machine's 2 CPUs, and the receiver's background
// thread, preempted, fell silent for peer_timeout. Counted here: over a wait that
// reads nothing (peer_timeout is long: no keepalive comes), the factory runs its
// timers fewer than once every 4 status_delay (an idle peer's timer asks every
// resend_timeout, 10 ms); and a receiver that reads still sends the status it owes,
// unasked (no flush) and long before any keepalive.
TEST(Udp, AReceiverThatWaitsLeavesTheTimersToTheNodesAndOneThatReadsStillSendsItsStatus) {
    constexpr std::chrono::microseconds status_delay{1000}; // the default
    auto c = make_configuration("udp", unique_partition("idle"), 2, [&](config::Configuration& c) {
        c.peer_timeout = std::chrono::minutes(2);
        c.edit_section<udp::Options>().status_delay = status_delay;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    send_retrying(*to_b, make_message(*a, 64, 1, 0), "the first message");
    ASSERT_TRUE(to_b->flush(patience)) << "the first message was never acknowledged";
    auto first = from_a->receive(patience);
    ASSERT_NE(first, nullptr) << "the first message never arrived";

    const auto runs = ub.datagram_stats().timer_runs;
    const auto began = Clock::now();
    EXPECT_EQ(from_a->receive(300ms), nullptr) << "a message came during the wait";
    const auto waited = Clock::now() - began;
    const auto ran = ub.datagram_stats().timer_runs - runs;
    const auto every_4_status_delays = static_cast<std::uint64_t>(waited / (4 * status_delay));
    EXPECT_LT(ran, every_4_status_delays)
        << "the timers ran " << ran << " times during a wait of "
        << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms that read nothing";

    const auto before = ub.datagram_stats();
    for (std::uint64_t i = 1; i <= 3; ++i)
        send_retrying(*to_b, make_message(*a, 64, 1, i), "message " + std::to_string(i));
    for (std::uint64_t i = 1; i <= 3; ++i) {
        auto m = from_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
        EXPECT_EQ(check_payload(*m).seq, i);
    }
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().sent > before.sent; }, patience))
        << "the receiver never sent the status it owed";
    EXPECT_EQ(ub.datagram_stats().statuses_asked, before.statuses_asked) << "the sender asked for the status";
}

// The background thread ticks the nodes that are due or that a datagram touched since
// their last tick, not every node of the nodes file at each run: the receiver of 256
// udp senders at 100 msgs/s each ticked 256 nodes per datagram it read, more than its
// CPU, and its peers found it silent for peer_timeout (docs/udp.md, "Timers"). Counted
// with a nodes file of 64 nodes, two of them running: over 300 messages, each
// acknowledged before the next and read by node 2's background thread (which runs the
// timers after each read), node 2 ticks a few nodes per run, not 63.
TEST(Udp, TheTimersTickTheNodesThatAreDueNotEveryNodeOfTheFile) {
    auto c = make_configuration("udp", unique_partition("ticks"), 64,
                                [](config::Configuration& c) { c.peer_timeout = std::chrono::minutes(2); });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    send_retrying(*to_b, make_message(*a, 64, 1, 0), "the first message");
    ASSERT_TRUE(to_b->flush(patience)) << "the first message was never acknowledged";
    const auto before = ub.datagram_stats();
    constexpr std::uint64_t n = 300;
    for (std::uint64_t i = 1; i <= n; ++i) {
        send_retrying(*to_b, make_message(*a, 64, 1, i), "message " + std::to_string(i));
        ASSERT_TRUE(to_b->flush(patience)) << "message " << i << " was never acknowledged";
    }
    const auto after = ub.datagram_stats();
    const auto runs = after.timer_runs - before.timer_runs;
    const auto ticks = after.node_ticks - before.node_ticks;
    ASSERT_GT(runs, n / 4) << "node 2's background thread did not run its timers after its reads";
    EXPECT_LT(ticks, 8 * runs) << ticks << " nodes ticked in " << runs << " runs of the timers";
    for (std::uint64_t i = 0; i <= n; ++i) {
        auto m = from_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " never arrived";
        EXPECT_EQ(check_payload(*m).seq, i);
    }
}

// A sender whose acknowledgement does not move probes its peer after resend_timeout,
// then after twice as long each time, up to resend_most (as TCP's retransmission timer
// backs off): every 10 ms from each of 256 senders kept their receiver's socket full
// once it fell behind. Node 2 here drops every data datagram it receives
// (udp.inject_loss = 1 on its side): in 1.5 s node 1 resends its datagram some ten
// times, not 150.
TEST(Udp, ASenderWhosePeerDoesNotAcknowledgeBacksOffItsProbes) {
    auto c = make_configuration("udp", unique_partition("backoff"), 2,
                                [](config::Configuration& c) { c.peer_timeout = std::chrono::minutes(2); });
    auto dropping = c;
    dropping.edit_section<udp::Options>().inject_loss = 1.0;
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(dropping, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto& ua = dynamic_cast<udp::UdpNodeFactory&>(*a);
    send_retrying(*to_b, make_message(*a, 64, 1, 0), "the message");
    ASSERT_TRUE(eventually([&] { return ua.datagram_stats().repairs > 0; }, patience))
        << "node 1 never resent the datagram node 2 did not acknowledge";
    const auto first = ua.datagram_stats().repairs;
    EXPECT_EQ(from_a->receive(1500ms), nullptr) << "node 2 received although it drops every data datagram";
    const auto resent = ua.datagram_stats().repairs - first;
    EXPECT_GE(resent, 3u) << "node 1 stopped probing";
    EXPECT_LT(resent, 30u) << "node 1 resent its datagram " << resent << " times in 1.5 s";
}

// A receiver whose holes are not repaired NAKs them again after nak_repeat, then after
// twice as long each time, up to nak_repeat_most: a NAK of every hole every millisecond
// from a receiver that fell behind, each answered by up to nak_burst datagrams, kept it
// behind. Node 2 here loses 30 % of node 1's data datagrams and node 1 every datagram
// node 2 sends (its NAKs and statuses; inject_loss = 1 on its side): in 1.5 s node 2
// sends some tens of NAKs, not one per millisecond.
TEST(Udp, AReceiverWhoseHolesAreNotRepairedBacksOffItsNaks) {
    auto c = make_configuration("udp", unique_partition("nakoff"), 2, [](config::Configuration& c) {
        c.peer_timeout = std::chrono::minutes(2);
        c.edit_section<udp::Options>().inject_seed = 7;
    });
    auto deaf = c;
    deaf.edit_section<udp::Options>().inject_loss = 1.0;
    auto lossy = c;
    lossy.edit_section<udp::Options>().inject_loss = 0.3;
    auto a = NodeFactory::create(deaf, 1);
    auto b = NodeFactory::create(lossy, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    for (std::uint64_t i = 0; i < 20; ++i)
        send_retrying(*to_b, make_message(*a, 3000, 1, i), "message " + std::to_string(i));
    ASSERT_TRUE(eventually([&] { return ub.datagram_stats().naks_sent > 0; }, patience))
        << "node 2 never NAKed the datagrams it lost";
    const auto first = ub.datagram_stats().naks_sent;
    while (from_a->receive(1500ms) != nullptr) {
    } // (what came in order is taken; the wait is the one that finds nothing)
    const auto naked = ub.datagram_stats().naks_sent - first;
    EXPECT_LT(naked, 300u) << "node 2 sent " << naked << " NAKs in 1.5 s";
}

// A node that learned its peer from the peer's hello (its welcome went the other
// way) does not know the peer's window; while the peer keeps sending (so it never
// sends a keepalive naming the window), the node's own messages must still go out:
// it probes for the window. Found by the soak: a pair of processes where one
// direction carried nothing for the whole run, with no error.
TEST(Udp, ANodeThatLearnedItsPeerFromAHelloStillSendsWhileThePeerKeepsSending) {
    // A keepalive names the window too, but only after peer_timeout / 4 of silence:
    // with 2 minutes, none comes within the test's patience.
    auto c = make_configuration("udp", unique_partition("probe"), 2,
                                [](config::Configuration& c) { c.peer_timeout = std::chrono::minutes(2); });
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    send_retrying(*to_b, make_message(*a, 64, 1, 0), "the first message"); // to a closed port: node 2 is not up
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    auto first = from_a->receive(patience); // node 2 learned node 1 from its hello
    ASSERT_NE(first, nullptr) << "the first message never arrived";
    std::atomic<bool> stop{false};
    std::jthread keep_sending([&] { // node 1 is never silent towards node 2
        for (std::uint64_t i = 1; !stop; ++i) {
            try {
                to_b->send(make_message(*a, 64, 1, i));
            } catch (const SendQueueFull&) {
            }
            (void)to_b->receive(1ms); // also the way node 2's message comes back
        }
    });
    send_retrying(*from_a, make_message(*b, 64, 2, 0), "the answer");
    EXPECT_TRUE(eventually([&] { return from_a->stats().messages_sent >= 1; }, patience))
        << "node 2's message never left: it waits for a window node 1 never named";
    stop = true;
}

class UdpLoss : public ::testing::TestWithParam<double> {};

// The issue's loss test: 200 000 messages of 1 B to 1 MiB, under injected loss,
// duplicates and reordering, taken by a receiving thread while the sender queues
// (the stream is larger than the send queue and the window together).
TEST_P(UdpLoss, TwoHundredThousandMessagesOfOneByteToOneMebibyteArriveOnceInOrderAndIntact) {
    const double loss = GetParam();
    auto c = make_configuration("udp", unique_partition("loss"), 2, [&](config::Configuration& c) {
        auto& o = c.edit_section<udp::Options>();
        o.inject_loss = loss;
        o.inject_duplicate = 0.01;
        o.inject_reorder = 0.02;
        o.inject_seed = 42;
        c.peer_timeout = 5s;
        c.max_message_size = 1024 * 1024;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 200000;
    std::string error;
    std::uint64_t received = 0;
    std::jthread receiver([&] { // joined on every way out, a Stalled send included
        for (; received < n && error.empty(); ++received) {
            BufferPtr m;
            try {
                m = from_a->receive(patience);
            } catch (const Error& e) {
                error = std::string("receive: ") + e.what();
                return;
            }
            if (!m) {
                error = "message " + std::to_string(received) + " never arrived";
                return;
            }
            error = check_numbered(*m, received);
        }
    });
    for (std::uint64_t i = 0; i < n; ++i)
        send_retrying(*to_b, numbered(*a, i), "message " + std::to_string(i));
    send_retrying(*to_b, make_end_marker(*a, n), "the end marker");
    receiver.join();
    ASSERT_EQ(error, "") << "after " << received << " messages";
    ASSERT_EQ(received, n);
    auto end = from_a->receive(patience);
    ASSERT_NE(end, nullptr) << "the end marker never arrived";
    EXPECT_EQ(check_payload(*end).stream, end_stream);
    EXPECT_EQ(nothing_more_once_quiet(*to_b, *from_a), "");
    const auto& ua = dynamic_cast<udp::UdpNodeFactory&>(*a);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    const auto sent = ua.datagram_stats();
    const auto got = ub.datagram_stats();
    EXPECT_GT(got.count(udp::Drop::injected), 0u);
    EXPECT_GT(got.count(udp::Drop::duplicate), 0u) << "injected duplicates were not dropped as such";
    EXPECT_GT(sent.repairs, 0u) << "nothing was resent although datagrams were dropped";
    EXPECT_GT(got.naks_sent, 0u);
    EXPECT_EQ(from_a->stats().messages_received, n + 1);
    EXPECT_EQ(got.count(udp::Drop::bad_fragment), 0u);
    EXPECT_EQ(got.count(udp::Drop::beyond_window), 0u);
}

INSTANTIATE_TEST_SUITE_P(Loss, UdpLoss, ::testing::Values(0.01, 0.05),
                         [](const auto& info) { return info.param < 0.02 ? "OnePercent" : "FivePercent"; });

// A slow receiver never makes the sender drop: the sender stops at the window, and
// everything arrives once the receiver takes it.
TEST(Udp, ASlowReceiverHoldsTheSenderAtItsWindowAndLosesNothing) {
    auto c = make_configuration("udp", unique_partition("slow"), 2,
                                [](config::Configuration& c) { c.edit_section<udp::Options>().window = 64; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 500;
    for (std::uint64_t i = 0; i < n; ++i)
        to_b->send(make_message(*a, 1000, 0, i));
    // The receiver takes nothing: the sender stops at the window (64 datagrams).
    EXPECT_FALSE(to_b->flush(200ms));
    EXPECT_GE(to_b->stats().queue_depth, n - 64);
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = from_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i;
        ASSERT_EQ(check_payload(*m).seq, i);
    }
    EXPECT_TRUE(to_b->flush(patience));
    EXPECT_EQ(dynamic_cast<udp::UdpNodeFactory&>(*b).datagram_stats().count(udp::Drop::beyond_window), 0u);
}

// ---------------------------------------------------------------- groups over IP multicast

// A partition of the sender (node 1) and `members` more nodes in group "farm",
// broadcast over udp.multicast on the loopback interface (a free port, an address of
// its own per process).
config::Configuration multicast_partition(const std::string& tag, int members,
                                          const std::function<void(config::Configuration&)>& tweak = {}) {
    const auto port = free_ports(1).at(0);
    return make_configuration("udp", unique_partition(tag), members + 1, [&](config::Configuration& c) {
        std::vector<NodeId> farm;
        for (int i = 2; i <= members + 1; ++i)
            farm.push_back(static_cast<NodeId>(i));
        c.groups["farm"] = farm;
        loopback_multicast(c, "farm", 255, port);
        if (tweak) tweak(c);
    });
}

// A member's receiving thread: n messages from node 1, each once, in order, intact.
std::string take_all(Node& from, std::uint64_t n, std::uint64_t& received) {
    for (received = 0; received < n; ++received) {
        BufferPtr m;
        try {
            m = from.receive(patience);
        } catch (const Error& e) {
            return std::string("receive: ") + e.what();
        }
        if (!m) return "message " + std::to_string(received) + " never arrived";
        if (auto e = check_numbered(*m, received); !e.empty()) return e;
    }
    return nothing_more(from);
}

class UdpMulticast : public ::testing::TestWithParam<double> {};

// A sender (node 1) and `members` member factories (nodes 2 on) of the group "farm",
// each member with its node from 1.
struct MulticastFarm {
    MulticastFarm(const config::Configuration& c, int members) : sender(NodeFactory::create(c, 1)) {
        for (int i = 2; i <= members + 1; ++i) {
            farm.push_back(NodeFactory::create(c, static_cast<NodeId>(i)));
            from1.push_back(farm.back()->create_node(1));
        }
        group = sender->create_group("farm");
    }
    // Runs send() while every member takes n numbered messages on a thread of its own
    // (take_all); returns when every member is done.
    template <class Send>
    void stream(std::uint64_t n, Send&& send) {
        errors.assign(from1.size(), "");
        received.assign(from1.size(), 0);
        std::vector<std::jthread> receivers;
        for (std::size_t k = 0; k < from1.size(); ++k)
            receivers.emplace_back([&, k] { errors[k] = take_all(*from1[k], n, received[k]); });
        send();
    }
    // Every member received every message once, in order, intact.
    void expect_everything_received() const {
        for (std::size_t k = 0; k < errors.size(); ++k)
            EXPECT_EQ(errors[k], "") << "member " << k + 2 << " after " << received[k] << " messages";
    }
    udp::DatagramStats sender_stats() const { return dynamic_cast<udp::UdpNodeFactory&>(*sender).datagram_stats(); }

    std::unique_ptr<NodeFactory> sender;
    std::vector<std::unique_ptr<NodeFactory>> farm;
    std::vector<NodePtr> from1;
    std::shared_ptr<Group> group;
    std::vector<std::string> errors;
    std::vector<std::uint64_t> received;
};

// Three members of a multicast group, the sender broadcasting to the group: every
// member receives every message once, in order, intact, under injected loss,
// duplicates and reordering; without loss the sender sends about one datagram per
// piece of the stream (not one per member).
TEST_P(UdpMulticast, EveryMemberOfTheGroupReceivesEveryBroadcastOnceInOrderAndIntact) {
    const double loss = GetParam();
    constexpr int members = 3;
    auto c = multicast_partition("mcast", members, [&](config::Configuration& c) {
        auto& o = c.edit_section<udp::Options>();
        o.inject_loss = loss;
        o.inject_duplicate = loss > 0 ? 0.01 : 0;
        o.inject_reorder = loss > 0 ? 0.02 : 0;
        o.inject_seed = 7;
        c.peer_timeout = 5s;
        c.max_message_size = 1024 * 1024;
    });
    MulticastFarm f(c, members);
    constexpr std::uint64_t n = 20000;
    std::uint64_t datagrams = 0;
    f.stream(n, [&] {
        const auto payload = udp::default_datagram_size - udp::header_size - udp::group_table_bytes(members);
        for (std::uint64_t i = 0; i < n; ++i) {
            auto m = numbered(*f.sender, i);
            datagrams += std::max<std::uint64_t>(1, (m->size() + payload - 1) / payload);
            f.group->send(std::move(m));
        }
    });
    const auto stats = f.sender_stats();
    EXPECT_GT(stats.multicast_sent, 0u) << "nothing went to the multicast address";
    if (loss == 0) {
        // Per member it would be 3 x datagrams; a message goes by multicast to the
        // members that keep up, per member to one whose window was full.
        EXPECT_LT(stats.sent, members * datagrams) << stats.multicast_sent << " multicast of " << datagrams;
        std::printf("[ multicast ] %llu datagrams of stream, sender sent %llu (%llu multicast): %.2f x\n",
                    static_cast<unsigned long long>(datagrams), static_cast<unsigned long long>(stats.sent),
                    static_cast<unsigned long long>(stats.multicast_sent),
                    static_cast<double>(stats.sent) / static_cast<double>(datagrams));
    }
    f.expect_everything_received();
    if (loss > 0) {
        std::uint64_t injected = 0, naks = 0;
        for (auto& member : f.farm) {
            const auto d = dynamic_cast<udp::UdpNodeFactory&>(*member).datagram_stats();
            injected += d.count(udp::Drop::injected);
            naks += d.naks_sent;
        }
        EXPECT_GT(injected, 0u);
        EXPECT_GT(naks, 0u);
        EXPECT_GT(stats.repairs, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Group, UdpMulticast, ::testing::Values(0.0, 0.02),
                         [](const auto& info) { return info.param == 0 ? "LossFree" : "TwoPercentLoss"; });

// A member process killed while the sender broadcasts: the group's send reports it
// (PeerLost naming it, once, after peer_timeout) and the other members receive
// every message without a stall. The first message is flushed to every member before
// the rest go, so that some of the stream goes by multicast whatever the load.
TEST(UdpMulticast, AMemberKilledMidBroadcastIsReportedAndTheOthersReceiveEverything) {
    constexpr int members = 3;
    // (peer_timeout: long enough that a loaded machine does not make the live members
    // look dead.)
    auto c = multicast_partition("mkill", members, [](config::Configuration& c) { c.peer_timeout = 2s; });
    const SegmentCleanup pages(c.partition); // the statistics page the killed member leaves
    // Node 4 in a child process, forked before this process makes a thread: it takes
    // what comes until the parent closes its pipe, then ends without a goodbye.
    int end_pipe[2];
    ASSERT_EQ(::pipe(end_pipe), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(end_pipe[1]);
        auto f = NodeFactory::create(c, 4);
        auto from = f->create_node(1);
        for (;;) {
            try {
                (void)from->receive(5ms);
            } catch (...) {
            }
            pollfd p{end_pipe[0], POLLIN, 0};
            if (::poll(&p, 1, 0) != 0) ::_exit(0);
        }
    }
    ::close(end_pipe[0]);
    struct Reap {
        int fd;
        pid_t pid;
        void now() {
            if (pid <= 0) return;
            ::close(fd);
            ::waitpid(pid, nullptr, 0);
            pid = -1;
        }
        ~Reap() { now(); }
    } reap{end_pipe[1], child};
    ASSERT_GT(child, 0);
    auto sender = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto from1_2 = f2->create_node(1);
    auto from1_3 = f3->create_node(1);
    auto group = std::dynamic_pointer_cast<DynamicGroup>(sender->create_group("farm"));
    ASSERT_NE(group, nullptr);
    constexpr std::uint64_t n = 6000;
    std::string e2, e3;
    std::uint64_t r2 = 0, r3 = 0;
    int losses = 0;
    {
        std::jthread t2([&] { e2 = take_all(*from1_2, n, r2); });
        std::jthread t3([&] { e3 = take_all(*from1_3, n, r3); });
        auto to4 = sender->create_node(4);
        for (std::uint64_t i = 0; i < n; ++i) {
            if (i == n / 3) reap.now(); // node 4 dies
            try {
                group->send(numbered(*sender, i));
            } catch (const PeerLost& e) {
                ++losses;
                EXPECT_EQ(e.peer(), 4u) << e.what();
                group->remove(4); // the application drops the dead member; the send went to the others
            }
            if (i == 0) {
                // Every member known and its window open before the stream: a group
                // message goes to the address only to members with nothing queued, and
                // a stream sent before the first contact completes queues per member
                // (multicast_sent 0 on a loaded machine).
                for (NodeId k = 2; k <= 4; ++k) {
                    ASSERT_TRUE(sender->create_node(k)->flush(patience)) << "member " << k << " was never reached";
                }
            }
            if (i >= n / 3 && losses == 0 && i + 1 == n) {
                // The loss comes after peer_timeout: wait for it before the last send.
                for (auto deadline = Clock::now() + patience; losses == 0 && Clock::now() < deadline;) {
                    try {
                        (void)to4->receive(50ms);
                    } catch (const PeerLost&) {
                        ++losses;
                        group->remove(4);
                    }
                }
            }
        }
    }
    {
        const auto d = dynamic_cast<udp::UdpNodeFactory&>(*f2).datagram_stats();
        std::string drops;
        for (std::size_t k = 0; k < d.dropped.size(); ++k)
            if (d.dropped[k] != 0)
                drops +=
                    " " + std::string(udp::describe(static_cast<udp::Drop>(k))) + ":" + std::to_string(d.dropped[k]);
        const auto s = dynamic_cast<udp::UdpNodeFactory&>(*sender).datagram_stats();
        EXPECT_EQ(e2, "") << "member 2 after " << r2 << "; it received " << d.received << " datagrams, dropped" << drops
                          << "; the sender sent " << s.sent << " (" << s.multicast_sent << " multicast)";
    }
    EXPECT_EQ(e3, "") << "member 3 after " << r3;
    EXPECT_EQ(losses, 1) << "the killed member was not reported once";
    EXPECT_GT(dynamic_cast<udp::UdpNodeFactory&>(*sender).datagram_stats().multicast_sent, 0u);
}

// One loss seen by every member: the sender withholds a fraction of the group's
// datagrams at their first transmission to the multicast address
// (udp.inject_multicast_loss), so that the three members miss the same ones. Each
// such datagram is sent to the address again at most once (its first NAK; the NAKs of
// the other members back off at random and are not sent once the repair filled the
// hole, and the sender ignores those that come within nak_interval of it; a later one
// is answered per member): the multicast repairs stay below twice the datagrams lost,
// where a repair per member's NAK would be three times. Every member receives the
// stream once, in order, intact. The stream goes in chunks of 200, each flushed
// before the next: a group message goes to the address only while no member has
// messages queued, and an unpaced stream on a loaded machine queued behind the first
// repair and went per member from then on (67 withheld of 20 000 in one run).
TEST(UdpMulticast, ALossEveryMemberSeesIsRepairedByMulticastOnceForAllMembers) {
    constexpr int members = 3;
    auto c = multicast_partition("mrepair", members, [&](config::Configuration& c) {
        auto& o = c.edit_section<udp::Options>();
        o.inject_multicast_loss = 0.05;
        o.inject_seed = 11;
        c.peer_timeout = 5s;
        c.max_message_size = 1024 * 1024;
    });
    MulticastFarm f(c, members);
    constexpr std::uint64_t n = 20000;
    std::vector<NodePtr> to;
    for (int k = 2; k <= members + 1; ++k)
        to.push_back(f.sender->create_node(static_cast<NodeId>(k)));
    f.stream(n, [&] {
        for (std::uint64_t i = 0; i < n; ++i) {
            f.group->send(numbered(*f.sender, i));
            if (i % 200 != 199) continue;
            for (auto& node : to) {
                ASSERT_TRUE(node->flush(5s)) << "member " << node->id() << " did not acknowledge";
            }
        }
    });
    f.expect_everything_received();
    const auto s = f.sender_stats();
    const std::uint64_t lost = s.count(udp::Drop::injected);
    std::uint64_t withheld = 0, duplicates = 0, naks = 0;
    for (auto& member : f.farm) {
        const auto d = dynamic_cast<udp::UdpNodeFactory&>(*member).datagram_stats();
        EXPECT_EQ(d.count(udp::Drop::injected), 0u) << "the loss is the sender's alone here";
        withheld += d.naks_withheld;
        duplicates += d.count(udp::Drop::duplicate);
        naks += d.naks_sent;
    }
    std::printf("[ repair    ] %llu datagrams withheld of %llu sent to the group; %llu multicast repairs, %llu "
                "unicast; members sent %llu NAKs and withheld %llu, the sender ignored %llu NAKed datagrams; "
                "members dropped %llu duplicates\n",
                static_cast<unsigned long long>(lost),
                static_cast<unsigned long long>(s.multicast_sent - s.multicast_repairs + lost),
                static_cast<unsigned long long>(s.multicast_repairs),
                static_cast<unsigned long long>(s.repairs - s.multicast_repairs), static_cast<unsigned long long>(naks),
                static_cast<unsigned long long>(withheld), static_cast<unsigned long long>(s.naks_coalesced),
                static_cast<unsigned long long>(duplicates));
    ASSERT_GT(lost, 100u) << "udp.inject_multicast_loss withheld (almost) nothing";
    EXPECT_GT(s.multicast_repairs, 0u) << "nothing was repaired by multicast";
    EXPECT_LT(s.multicast_repairs, 2 * lost) << "a loss every member saw was repaired by multicast per member";
    EXPECT_GT(s.naks_coalesced + withheld, 0u) << "no NAK of a loss seen by several members was suppressed";
}

// The multicast group keeps the factory-lifetime contract (node_factory.hpp). A
// member that another factory made, destroyed since, fails the broadcast as its own
// send would ("send on node 3 (node-3) after its factory was destroyed"), and the
// other member gets the message; once the group's own factory is destroyed, its send
// is refused before it reaches any member, and the buffer stays with the caller.
TEST(UdpMulticast, ABroadcastAfterAFactoryIsGoneIsAUsageErrorNotASendIntoAnEndedTransport) {
    auto c = multicast_partition("mgone", 3, [](config::Configuration& c) {
        c.groups["farm"] = {2, 3}; // node 4 only makes the foreign member
        c.peer_timeout = 2s;
    });
    auto sender = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    auto from1_2 = f2->create_node(1);
    auto from1_3 = f3->create_node(1);
    auto group = std::dynamic_pointer_cast<DynamicGroup>(sender->create_group("farm"));
    ASSERT_NE(group, nullptr);
    // Broadcasts until one went over the multicast address (the members must know
    // the sender first): the group's multicast path is the one in use.
    std::uint64_t seq = 0;
    for (const auto deadline = Clock::now() + patience;; ++seq) {
        group->send(numbered(*sender, seq));
        for (auto* from : {&from1_2, &from1_3}) {
            auto m = (*from)->receive(patience);
            ASSERT_NE(m, nullptr) << "broadcast " << seq << " never reached node " << (from == &from1_2 ? 2 : 3);
            ASSERT_EQ(check_numbered(*m, seq), "");
        }
        if (dynamic_cast<udp::UdpNodeFactory&>(*sender).datagram_stats().multicast_sent > 0) break;
        ASSERT_LT(Clock::now(), deadline) << "none of " << seq + 1 << " broadcasts went to the multicast address";
    }
    ++seq;

    // Member 3 replaced by node 3 as factory 4 made it, then factory 4 destroyed.
    {
        auto f4 = NodeFactory::create(c, 4);
        auto foreign = f4->create_node(3);
        ASSERT_TRUE(group->remove(3));
        group->add(foreign);
    }
    std::string error;
    try {
        group->send(numbered(*sender, seq));
    } catch (const PeerLost& e) {
        error = std::string("(PeerLost, not Error) ") + e.what();
    } catch (const Error& e) {
        error = e.what();
    }
    EXPECT_NE(error.find("group 'farm' send failed for some members: node 3: send on node 3 (node-3) after its "
                         "factory was destroyed"),
              std::string::npos)
        << error;
    auto m = from1_2->receive(patience);
    ASSERT_NE(m, nullptr) << "member 2 did not get the broadcast that failed for the foreign member";
    EXPECT_EQ(check_numbered(*m, seq), "");
    EXPECT_EQ(nothing_more(*from1_3), "") << "node 3 is no member now";

    // The group's own factory destroyed: the send is refused before any member.
    sender.reset();
    BufferPtr keep = std::make_unique<HeapBuffer>(64);
    error.clear();
    try {
        group->send(std::move(keep));
    } catch (const UsageError& e) {
        error = e.what();
    }
    EXPECT_NE(error.find("send on group 'farm' after its factory was destroyed"), std::string::npos) << error;
    ASSERT_NE(keep, nullptr) << "the refused broadcast took the buffer";
    EXPECT_EQ(keep->size(), 64u);
    EXPECT_EQ(nothing_more(*from1_2), "");
}

// udp.multicast_interface an address of no interface here: the system refuses both
// sending to the group's address and joining it. Each factory says so once on stderr,
// naming the address and the group, and the group sends per member: every member
// receives every message, none by multicast.
TEST(UdpMulticast, AnInterfaceTheSystemRefusesIsSaidOnceAndTheGroupSendsPerMember) {
    constexpr int members = 2;
    auto c = multicast_partition("mcast-refused", members, [](config::Configuration& c) {
        c.edit_section<udp::Options>().multicast_interface = "192.0.2.1"; // TEST-NET-1: on no interface
    });
    const auto& o = c.section<udp::Options>();
    ::testing::internal::CaptureStderr();
    auto sender = NodeFactory::create(c, 1);
    std::vector<std::unique_ptr<NodeFactory>> farm;
    std::vector<NodePtr> from1;
    for (int i = 2; i <= members + 1; ++i) {
        farm.push_back(NodeFactory::create(c, static_cast<NodeId>(i)));
        from1.push_back(farm.back()->create_node(1));
    }
    const std::string said = ::testing::internal::GetCapturedStderr();
    auto times = [&](const std::string& what) {
        std::size_t n = 0;
        for (auto at = said.find(what); at != std::string::npos; at = said.find(what, at + 1))
            ++n;
        return n;
    };
    const std::string tail = "; group 'farm' sends per member";
    EXPECT_EQ(times("udp.multicast " + o.multicast + ": the socket cannot send multicast ("), 3u) << said;
    EXPECT_EQ(times("udp.multicast " + o.multicast + ": this member cannot join it ("), 2u) << said;
    EXPECT_EQ(times(tail), 5u) << said;
    EXPECT_EQ(times(": node 1: udp.multicast"), 1u) << said;

    auto group = sender->create_group("farm");
    constexpr std::uint64_t n = 200;
    for (std::uint64_t i = 0; i < n; ++i)
        group->send(numbered(*sender, i));
    for (int k = 0; k < members; ++k) {
        std::uint64_t received = 0;
        EXPECT_EQ(take_all(*from1[static_cast<std::size_t>(k)], n, received), "") << "member " << k + 2;
    }
    EXPECT_EQ(dynamic_cast<udp::UdpNodeFactory&>(*sender).datagram_stats().multicast_sent, 0u);
}

// The multicast keys are checked where they are written.
TEST(UdpMulticast, BadMulticastKeysAreErrorsNamingTheKeyAndLine) {
    const std::string nodes = "nodes:\n  - {id: 1, name: a, host: 127.0.0.1, port: 17001}\n"
                              "  - {id: 2, name: b, host: 127.0.0.1, port: 17002}\n";
    auto error_of = [&](const std::string& network) -> std::string {
        try {
            (void)config::load_text(network, nodes);
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "";
    };
    const std::string head = "partition: p\ntechnology: udp\ngroups:\n  farm: [1, 2]\n";
    EXPECT_EQ(error_of(head + "udp:\n  multicast_group: farm\n  multicast: 239.1.2.3:4000\n"), "");
    auto has = [](const std::string& e, const std::string& want) {
        return e.find(want) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
    };
    EXPECT_TRUE(has(error_of(head + "udp:\n  multicast_group: farm\n  multicast: 10.1.2.3:4000\n"),
                    "network.yaml:7:14: udp.multicast: expected an IPv4 multicast address and port"));
    EXPECT_TRUE(has(error_of(head + "udp:\n  multicast_group: farm\n  multicast: 239.1.2.3:70000\n"),
                    "network.yaml:7:14: udp.multicast: expected"));
    EXPECT_TRUE(has(error_of(head + "udp:\n  multicast_group: herd\n  multicast: 239.1.2.3:4000\n"),
                    "network.yaml:6:20: udp.multicast_group: expected the name of a static group of groups (farm)"));
    EXPECT_TRUE(has(error_of(head + "udp:\n  multicast: 239.1.2.3:4000\n"), "udp.multicast_group: expected"));
    EXPECT_TRUE(
        has(error_of(head + "udp:\n  multicast_group: farm\n  multicast: 239.1.2.3:4000\n  multicast_ttl: 300\n"),
            "network.yaml:8:18: udp.multicast_ttl: expected"));
    EXPECT_TRUE(has(error_of(head + "udp:\n  multicast_group: farm\n  multicast: 239.1.2.3:4000\n"
                                    "  multicast_interface: eth0\n"),
                    "network.yaml:8:24: udp.multicast_interface: expected the IPv4 address of an interface"));
}

// Every other key of the udp section: a value in its range is taken as written, one
// outside it is an error naming the key, the line and the range.
TEST(UdpOptions, EachKeyTakesAValueInItsRangeAndRefusesOneOutsideNamingKeyAndLine) {
    std::string nodes = "nodes:\n";
    for (int i = 1; i <= 11; ++i)
        nodes += "  - {id: " + std::to_string(i) + ", name: n" + std::to_string(i) +
                 ", host: 127.0.0.1, port: " + std::to_string(17000 + i) + "}\n";
    const std::string head = "partition: p\ntechnology: udp\ngroups:\n  farm: [1, 2]\n"
                             "  big: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\nudp:\n";
    auto error_of = [&](const std::string& udp_keys) -> std::string {
        try {
            (void)config::load_text(head + udp_keys, nodes);
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "";
    };
    auto has = [](const std::string& e, const std::string& want) {
        return e.find(want) != std::string::npos ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << e;
    };

    const auto c = config::load_text(head + "  socket_buffer: 8MiB\n  window: 4096\n  inject_loss: 0.5\n"
                                            "  inject_multicast_loss: 0.25\n  inject_seed: 12345\n"
                                            "  multicast_group: farm\n  multicast: 239.1.2.3:4000\n"
                                            "  multicast_interface: 127.0.0.1\n",
                                     nodes);
    const auto& o = c.section<udp::Options>();
    EXPECT_EQ(o.socket_buffer, 8u * 1024 * 1024);
    EXPECT_EQ(o.window, 4096u);
    EXPECT_EQ(o.inject_loss, 0.5);
    EXPECT_EQ(o.inject_multicast_loss, 0.25);
    EXPECT_EQ(o.inject_seed, 12345u);
    EXPECT_EQ(o.multicast_interface, "127.0.0.1");

    EXPECT_TRUE(has(error_of("  socket_buffer: 32KiB\n"),
                    "network.yaml:7:18: udp.socket_buffer: expected a size from 64KiB to 1GiB"));
    EXPECT_TRUE(has(error_of("  window: 8\n"), "network.yaml:7:11: udp.window: expected"));
    EXPECT_TRUE(has(error_of("  window: 65537\n"), "network.yaml:7:11: udp.window: expected"));
    EXPECT_TRUE(
        has(error_of("  inject_loss: 0.6\n"), "network.yaml:7:16: udp.inject_loss: expected a fraction from 0 to 0.5"));
    EXPECT_TRUE(has(error_of("  inject_duplicate: -0.1\n"),
                    "network.yaml:7:21: udp.inject_duplicate: expected a fraction from 0 to 0.5"));
    EXPECT_TRUE(has(error_of("  inject_multicast_loss: 0.75\n"),
                    "network.yaml:7:26: udp.inject_multicast_loss: expected a fraction from 0 to 0.5"));
    EXPECT_TRUE(has(error_of("  inject_seed: -1\n"), "network.yaml:7:16: udp.inject_seed: expected"));
    // A group's table of members (24 bytes each) must leave half of a datagram of 512
    // bytes to the message: at most 10 members.
    EXPECT_TRUE(has(error_of("  datagram_size: 512\n  multicast_group: big\n  multicast: 239.1.2.3:4000\n"),
                    "network.yaml:8:20: udp.multicast_group: expected a group of at most 10 members with "
                    "udp.datagram_size 512"));
    EXPECT_EQ(error_of("  datagram_size: 512\n  multicast_group: farm\n  multicast: 239.1.2.3:4000\n"), "");
}

// ---------------------------------------------------------------- hostile datagrams

class RawSocket {
public:
    explicit RawSocket(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    }
    ~RawSocket() { ::close(fd_); }
    RawSocket(const RawSocket&) = delete;
    RawSocket& operator=(const RawSocket&) = delete;
    [[nodiscard]] bool bound() const { return bound_; }
    void send_to(std::uint16_t port, std::span<const std::byte> bytes) const {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        (void)::sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    }
    // The next datagram within timeout; empty when none.
    std::vector<std::byte> receive(std::chrono::milliseconds timeout) const {
        timeval tv{0, static_cast<suseconds_t>(std::chrono::microseconds(timeout).count())};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        std::vector<std::byte> b(65536);
        const auto n = ::recv(fd_, b.data(), b.size(), 0);
        b.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        return b;
    }

private:
    int fd_;
    bool bound_ = false;
};

// As node `from` (the raw socket s), a hello to node `to` on to_port: the header of
// that pair (type hello) with to's incarnation from its welcome; none when no welcome
// came within patience.
std::optional<udp::DatagramHeader> greet(const RawSocket& s, const std::string& partition, std::uint32_t from,
                                         std::uint32_t to, std::uint16_t to_port, std::uint64_t incarnation) {
    udp::DatagramHeader h;
    h.magic = udp::magic;
    h.version = udp::protocol_version;
    h.type = static_cast<std::uint16_t>(udp::DatagramType::hello);
    h.from = from;
    h.to = to;
    h.partition = udp::partition_hash(partition);
    h.incarnation = incarnation;
    s.send_to(to_port, datagram(h, 0));
    for (const auto deadline = Clock::now() + patience; Clock::now() < deadline;) {
        const auto answer = s.receive(100ms);
        if (answer.size() < udp::header_size) continue;
        udp::DatagramHeader welcome;
        std::memcpy(&welcome, answer.data(), udp::header_size);
        if (welcome.type != static_cast<std::uint16_t>(udp::DatagramType::welcome)) continue;
        h.peer_incarnation = welcome.incarnation;
        return h;
    }
    return std::nullopt;
}

TEST(Udp, HostileDatagramsAreDroppedAndCountedByReasonWhileGoodTrafficFlows) {
    auto c = make_configuration("udp", unique_partition("hostile"), 3);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const std::uint16_t port_b = c.nodes[1].port;
    RawSocket intruder(c.nodes[2].port); // poses as node 3, which never starts
    ASSERT_TRUE(intruder.bound());
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);

    // As node 3, learn node 2's incarnation from the welcome to a hello.
    const auto h = greet(intruder, c.partition, 3, 2, port_b, 0x1234);
    ASSERT_TRUE(h) << "no welcome to a hello";
    auto data = *h;
    data.type = static_cast<std::uint16_t>(udp::DatagramType::data);
    data.flags = udp::flag_first;
    data.length = 10;
    std::uint64_t seq = 0;
    auto exchange = [&](std::uint64_t count) {
        for (std::uint64_t i = 0; i < count; ++i, ++seq) {
            to_b->send(make_message(*a, 64 + seq % 3000, 0, seq));
            auto m = from_a->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << seq;
            ASSERT_EQ(check_payload(*m).seq, seq);
        }
    };
    exchange(100);
    using udp::Drop;
    struct Attack {
        Drop drop;
        std::vector<std::byte> bytes;
    };
    std::vector<Attack> attacks;
    attacks.push_back({Drop::too_short, std::vector<std::byte>(10, std::byte{1})});
    auto bad = data;
    bad.magic = 0;
    attacks.push_back({Drop::bad_magic, datagram(bad, 10)});
    bad = data, bad.version = 9;
    attacks.push_back({Drop::bad_version, datagram(bad, 10)});
    bad = data, bad.type = 42;
    attacks.push_back({Drop::bad_type, datagram(bad, 10)});
    bad = data, bad.partition ^= 1;
    attacks.push_back({Drop::wrong_partition, datagram(bad, 10)});
    bad = data, bad.from = 99;
    attacks.push_back({Drop::unknown_sender, datagram(bad, 10)});
    bad = data, bad.to = 1;
    attacks.push_back({Drop::wrong_target, datagram(bad, 10)});
    bad = data, bad.peer_incarnation ^= 1;
    attacks.push_back({Drop::stale, datagram(bad, 10)});
    bad = data, bad.seq = 1'000'000'000;
    attacks.push_back({Drop::beyond_window, datagram(bad, 10)});
    bad = data, bad.length = 5;
    attacks.push_back({Drop::bad_fragment, datagram(bad, 10)});
    bad = data, bad.flags = 0, bad.offset = 0xfffffff0u, bad.length = 0xffffffffu;
    attacks.push_back({Drop::bad_fragment, datagram(bad, 10)});
    // Data carrying a status (flag_ack): its trailer cut short, or naming a next
    // expected beyond anything node 2 sent node 3 (the whole datagram is dropped).
    bad = data, bad.flags = udp::flag_first | udp::flag_ack;
    attacks.push_back({Drop::too_short, datagram(bad, udp::ack_trailer_size - 1)});
    {
        auto lying = datagram(bad, 10 + udp::ack_trailer_size);
        const udp::AckTrailer ack{5, 64};
        std::memcpy(lying.data() + lying.size() - sizeof ack, &ack, sizeof ack);
        attacks.push_back({Drop::beyond_window, lying});
    }
    // Packed datagrams that lie about a frame: its length past the datagram's end,
    // zero, near 2^32 (an overflow when added), or a frame count the header does not
    // state. Each would be datagram seq, due now: taken, it would deliver messages.
    for (const std::uint32_t lie : {1000u, 0u, 0xfffffff9u}) {
        auto lying = packed_datagram(data, {64, 64});
        set_frame_length(lying, 72, lie);
        attacks.push_back({Drop::bad_frame, lying});
    }
    {
        auto lying = packed_datagram(data, {64, 64});
        lying[offsetof(udp::DatagramHeader, offset)] = std::byte{3};
        attacks.push_back({Drop::bad_frame, lying});
    }
    std::array<std::uint64_t, static_cast<std::size_t>(Drop::kinds)> expected{};
    for (int round = 0; round < 20; ++round) {
        for (const auto& attack : attacks) {
            intruder.send_to(port_b, attack.bytes);
            ++expected[static_cast<std::size_t>(attack.drop)];
        }
        exchange(20);
    }
    for (std::size_t r = 0; r < expected.size(); ++r) {
        const auto drop = static_cast<Drop>(r);
        if (expected[r] == 0) continue;
        EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(drop) >= expected[r]; }, patience))
            << udp::describe(drop) << ": " << ub.datagram_stats().count(drop) << " counted, " << expected[r] << " sent";
    }
    exchange(100);
    EXPECT_EQ(from_a->stats().errors, 0u);
}

// Two nodes on ::1 (IPv6): messages flow both ways, and an empty datagram from
// another IPv6 socket is counted as too short, not skipped as the wake-up a factory
// sends itself (an empty datagram from its own port).
TEST(Udp, NodesOnIpv6ExchangeMessagesAndAnEmptyDatagramFromElsewhereIsTooShort) {
    auto c = make_configuration("udp", unique_partition("ipv6"), 2, [](config::Configuration& c) {
        for (auto& n : c.nodes)
            n.host = "::1";
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto a_with_b = a->create_node(2);
    auto b_with_a = b->create_node(1);
    for (std::uint64_t i = 0; i < 50; ++i) {
        a_with_b->send(make_message(*a, 64 + i * 97, 1, i));
        auto m = b_with_a->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " from node 1";
        EXPECT_EQ(check_payload(*m).seq, i);
        b_with_a->send(make_message(*b, 64 + i * 89, 2, i));
        m = a_with_b->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i << " from node 2";
        EXPECT_EQ(check_payload(*m).seq, i);
    }

    const int fd = ::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in6 to{};
    to.sin6_family = AF_INET6;
    to.sin6_addr = in6addr_loopback;
    to.sin6_port = htons(c.nodes[1].port);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    const std::uint64_t before = ub.datagram_stats().count(udp::Drop::too_short);
    EXPECT_EQ(::sendto(fd, nullptr, 0, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to), 0)
        << std::strerror(errno);
    ::close(fd);
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(udp::Drop::too_short) == before + 1; }, patience))
        << ub.datagram_stats().count(udp::Drop::too_short) - before << " counted";
    a_with_b->send(make_message(*a, 100, 1, 50));
    auto m = b_with_a->receive(patience);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(check_payload(*m).seq, 50u);
}

// Datagrams that pass the decoder but that a peer never sends (a datagram longer than
// any a peer sends, a piece in the middle of a message never begun, a NAK and a status
// of datagrams never sent to it) are each dropped and counted once under their
// reason, deliver nothing, and good traffic flows on.
TEST(Udp, DatagramsNoPeerSendsAreEachDroppedAndCountedOnceAndDeliverNothing) {
    // (peer_timeout: node 3, silent between the forged datagrams, is not lost.)
    auto c = make_configuration("udp", unique_partition("forged"), 3,
                                [](config::Configuration& c) { c.peer_timeout = 60s; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    auto from_3 = b->create_node(3);
    const std::uint16_t port_b = c.nodes[1].port;
    RawSocket intruder(c.nodes[2].port); // poses as node 3, which never starts
    ASSERT_TRUE(intruder.bound());
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    EXPECT_EQ(ub.port(), port_b);
    EXPECT_FALSE(RawSocket(port_b).bound()) << "the factory's port is not its socket's";

    // As node 3, learn node 2's incarnation from the welcome to a hello.
    const auto greeted = greet(intruder, c.partition, 3, 2, port_b, 0x4321);
    ASSERT_TRUE(greeted) << "no welcome to a hello";
    udp::DatagramHeader h = *greeted;

    std::uint64_t seq = 0;
    auto exchange = [&](std::uint64_t count) {
        for (std::uint64_t i = 0; i < count; ++i, ++seq) {
            to_b->send(make_message(*a, 64 + seq % 3000, 0, seq));
            auto m = from_a->receive(patience);
            ASSERT_NE(m, nullptr) << "message " << seq;
            ASSERT_EQ(check_payload(*m).seq, seq);
        }
    };
    exchange(20);
    using udp::Drop;
    auto count = [&](Drop d) { return ub.datagram_stats().count(d); };
    const std::uint64_t bad_fragment = count(Drop::bad_fragment), bad_magic = count(Drop::bad_magic),
                        beyond_window = count(Drop::beyond_window);
    auto counted_once = [&](Drop d, std::uint64_t before) {
        if (!eventually([&] { return count(d) >= before + 1; }, patience)) {
            return ::testing::AssertionFailure() << udp::describe(d) << " not counted";
        }
        exchange(10); // what came after it was handled
        if (count(d) != before + 1) return ::testing::AssertionFailure() << udp::describe(d) << ": " << count(d);
        return ::testing::AssertionSuccess();
    };

    // 60000 zero bytes: longer than any datagram of a peer (truncated, not read as a
    // datagram of bad magic).
    intruder.send_to(port_b, std::vector<std::byte>(60000, std::byte{0}));
    EXPECT_TRUE(counted_once(Drop::bad_fragment, bad_fragment));
    EXPECT_EQ(count(Drop::bad_magic), bad_magic);

    // The second half of a message of 10 bytes whose first half never came, in order
    // (datagram 0 of node 3).
    auto middle = h;
    middle.type = static_cast<std::uint16_t>(udp::DatagramType::data);
    middle.seq = 0;
    middle.length = 10;
    middle.offset = 5;
    middle.flags = 0;
    intruder.send_to(port_b, datagram(middle, 5));
    EXPECT_TRUE(counted_once(Drop::bad_fragment, bad_fragment + 1));

    // A NAK of datagram 5 and a status acknowledging datagram 0: node 2 never sent
    // anything to node 3.
    auto nak = h;
    nak.type = static_cast<std::uint16_t>(udp::DatagramType::nak);
    nak.seq = 1;
    auto nak_bytes = datagram(nak, 16);
    const std::uint64_t range[2] = {5, 1};
    std::memcpy(nak_bytes.data() + udp::header_size, range, sizeof range);
    intruder.send_to(port_b, nak_bytes);
    EXPECT_TRUE(counted_once(Drop::beyond_window, beyond_window));
    auto status = h;
    status.type = static_cast<std::uint16_t>(udp::DatagramType::status);
    status.seq = 1;
    status.length = 64;
    intruder.send_to(port_b, datagram(status, 0));
    EXPECT_TRUE(counted_once(Drop::beyond_window, beyond_window + 1));

    EXPECT_EQ(nothing_more(*from_3), "");
    exchange(20);
    EXPECT_EQ(from_a->stats().errors, 0u);
}

// ---------------------------------------------------------------- a loss declared while the peer lives

// A relay between nodes 1 and 2: each reaches the other only through it (node 1's
// nodes file puts node 2 on the relay's port for 2, node 2's puts node 1 on its port
// for 1), and each direction can be cut: its datagrams are then dropped (data
// datagrams counted apart).
class UdpRelay {
public:
    enum Direction { toward_1 = 0, toward_2 = 1 };

    // for_1: where node 2 sends to node 1, forwarded to node_1; for_2 likewise.
    UdpRelay(std::uint16_t for_1, std::uint16_t node_1, std::uint16_t for_2, std::uint16_t node_2)
        : to_{node_1, node_2} {
        const std::uint16_t listen[2] = {for_1, for_2};
        for (int d = 0; d < 2; ++d) {
            fd_[d] = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons(listen[d]);
            valid_ = valid_ && fd_[d] >= 0 && ::bind(fd_[d], reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
        }
        if (valid_) thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
    }
    ~UdpRelay() {
        if (thread_.joinable()) {
            thread_.request_stop();
            thread_.join();
        }
        for (const int fd : fd_)
            if (fd >= 0) ::close(fd);
    }
    UdpRelay(const UdpRelay&) = delete;
    UdpRelay& operator=(const UdpRelay&) = delete;

    [[nodiscard]] bool valid() const { return valid_; }
    void cut(Direction d, bool cut) { cut_[d] = cut; }
    [[nodiscard]] std::uint64_t relayed(Direction d) const { return relayed_[d]; }
    [[nodiscard]] std::uint64_t data_dropped(Direction d) const { return data_dropped_[d]; }

private:
    void run(const std::stop_token& stop) {
        std::vector<std::byte> b(65536);
        while (!stop.stop_requested()) {
            pollfd p[2] = {{fd_[0], POLLIN, 0}, {fd_[1], POLLIN, 0}};
            if (::poll(p, 2, 20) <= 0) continue;
            for (int d = 0; d < 2; ++d) {
                if (p[d].revents == 0) continue;
                const ssize_t n = ::recv(fd_[d], b.data(), b.size(), MSG_DONTWAIT);
                if (n <= 0) continue;
                if (cut_[d]) {
                    udp::DatagramHeader h{};
                    if (static_cast<std::size_t>(n) >= udp::header_size) std::memcpy(&h, b.data(), udp::header_size);
                    if (h.type == static_cast<std::uint16_t>(udp::DatagramType::data)) ++data_dropped_[d];
                    continue;
                }
                sockaddr_in a{};
                a.sin_family = AF_INET;
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                a.sin_port = htons(to_[d]);
                (void)::sendto(fd_[d], b.data(), static_cast<std::size_t>(n), 0, reinterpret_cast<const sockaddr*>(&a),
                               sizeof a);
                ++relayed_[d];
            }
        }
    }

    const std::uint16_t to_[2];
    int fd_[2] = {-1, -1};
    bool valid_ = true;
    std::atomic<bool> cut_[2] = {false, false};
    std::atomic<std::uint64_t> relayed_[2] = {0, 0}, data_dropped_[2] = {0, 0};
    std::jthread thread_;
};

// What a node sees of its peer's numbered stream: every message intact and in order,
// a gap only right after a PeerLost (the soak's rule).
struct StreamSeen {
    explicit StreamSeen(std::uint32_t of) : stream(of) {}
    std::uint32_t stream;
    std::uint64_t next = 0;          // the next number due
    std::vector<std::string> losses; // the PeerLosts this node was told (by a send or a receive), in order
    std::uint64_t gaps = 0;          // gaps, each right after a PeerLost
    std::uint64_t skipped = 0;       // the messages the gaps skipped
    bool loss_before_next = false;
    std::string violation;

    void lost(const PeerLost& e) {
        losses.emplace_back(e.what());
        loss_before_next = true;
    }
    // One receive within wait; true when a message came.
    bool take(Node& from, std::chrono::milliseconds wait) {
        try {
            auto m = from.receive(wait);
            if (!m) return false;
            const auto h = check_payload(*m);
            if (h.stream != stream) {
                violation = "a message of stream " + std::to_string(h.stream) + " where " + std::to_string(stream) +
                            " was expected";
            } else if (h.seq < next) {
                violation = "message " + std::to_string(h.seq) + " came again after " + std::to_string(next - 1);
            } else if (h.seq > next && !loss_before_next) {
                violation = "expected message " + std::to_string(next) + ", got " + std::to_string(h.seq) +
                            " (a gap) with no PeerLost before it";
            } else if (h.seq > next) {
                ++gaps;
                skipped += h.seq - next;
            }
            loss_before_next = false;
            next = h.seq + 1;
            return true;
        } catch (const PeerLost& e) {
            lost(e);
        } catch (const Error& e) {
            violation = std::string("receive: ") + e.what();
        } catch (const std::string& e) {
            violation = e;
        }
        return false;
    }
};

// What is cut while node 1 gives node 2 up for silence (peer_timeout), with node 2
// alive all along and hearing node 1 (node 1 keeps sending):
// - one_way: only node 2 -> node 1. Node 1 goes deaf; every message it sends reaches
//   node 2, which is told nothing: node 1 dropped what node 2 has.
// - both_then_one: both ways while node 1 sends 5 messages (dropped by the relay),
//   then only node 2 -> node 1. Node 2 lacks messages node 1 dropped: one PeerLost
//   there, then node 1's stream goes on.
// - both_give_up: both ways, with nothing sent, until each gives the other up.
// Then the relay joins again and both send on; with and without auth_key_file (an
// incarnation given up must prove itself again). Before the fix, node 1 (and in the
// last case node 2) numbered its datagrams from 0 again while the live peer went on
// counting: "node 1 waited for message 10 of node 2 in vain" (its repairs never
// reached back before what node 1 now expected) and node 1's new messages dropped
// at node 2 as duplicates. Every wait is on an event, with a bound.
enum class Cut { one_way, both_then_one, both_give_up };

void PrintTo(Cut cut, std::ostream* os) {
    *os << (cut == Cut::one_way ? "one way" : cut == Cut::both_then_one ? "both ways, then one" : "both give up");
}

class UdpLossWhileAlive : public ::testing::TestWithParam<std::tuple<Cut, bool>> {};

TEST_P(UdpLossWhileAlive, EachSideGetsEveryMessageInOrderOrAPeerLostBeforeTheGap) {
    const auto [cut, keyed] = GetParam();
    constexpr std::uint64_t before = 10, after = 5, last = 10;
    const auto timeout = 1000ms;
    const auto ports = free_ports(4);
    ASSERT_EQ(ports.size(), 4u) << "no free ports";
    const std::string partition = unique_partition("alive");
    auto config = [&](std::uint16_t one, std::uint16_t two) {
        return make_configuration("udp", partition, 2, [&](config::Configuration& c) {
            c.peer_timeout = timeout;
            if (keyed) {
                config::AuthKey key{};
                for (std::size_t i = 0; i < key.size(); ++i)
                    key[i] = static_cast<std::uint8_t>(7 * i + 1);
                c.auth_key = key;
            }
            c.nodes[0].port = one;
            c.nodes[1].port = two;
        });
    };
    // node 1 on ports[0], node 2 on ports[1]; the relay takes ports[2] for 1, ports[3] for 2.
    UdpRelay relay(ports[2], ports[0], ports[3], ports[1]);
    ASSERT_TRUE(relay.valid()) << "the relay could not bind ports " << ports[2] << " and " << ports[3];
    auto a = NodeFactory::create(config(ports[0], ports[3]), 1);
    auto b = NodeFactory::create(config(ports[2], ports[1]), 2);
    auto to_2 = a->create_node(2);
    auto to_1 = b->create_node(1);

    StreamSeen at_1(2), at_2(1); // node 1's view of node 2's stream, node 2's of node 1's
    std::uint64_t sent_1 = 0, sent_2 = 0;
    // One message each way (a send that reports the loss is tried again with the same
    // number), then what arrived: node 2 drains, node 1 waits up to 10 ms (the pace).
    auto step = [&](bool send_1, bool send_2) {
        if (send_1) {
            try {
                to_2->send(make_message(*a, 64, 1, sent_1));
                ++sent_1;
            } catch (const PeerLost& e) {
                at_1.lost(e);
            } catch (const SendQueueFull&) {
            }
        }
        if (send_2) {
            try {
                to_1->send(make_message(*b, 64, 2, sent_2));
                ++sent_2;
            } catch (const PeerLost& e) {
                at_2.lost(e);
            } catch (const SendQueueFull&) {
            }
        }
        while (at_2.take(*to_1, 0ms)) {
        }
        while (at_1.take(*to_2, 0ms)) {
        }
        (void)at_1.take(*to_2, 10ms);
    };
    auto fine = [&] { return at_1.violation.empty() && at_2.violation.empty(); };
    // Until each side took everything the other sent.
    auto drain = [&](const char* phase) {
        const auto deadline = Clock::now() + patience;
        while (fine() && (at_1.next < sent_2 || at_2.next < sent_1)) {
            if (Clock::now() > deadline) {
                if (at_1.next < sent_2)
                    at_1.violation =
                        "node 1 waited for message " + std::to_string(at_1.next) + " of node 2 in vain (" + phase + ")";
                if (at_2.next < sent_1)
                    at_2.violation =
                        "node 2 waited for message " + std::to_string(at_2.next) + " of node 1 in vain (" + phase + ")";
                break;
            }
            step(false, false);
        }
    };

    while (sent_1 < before)
        step(true, true);
    drain("before the cut");
    ASSERT_TRUE(fine()) << at_1.violation << " / " << at_2.violation;

    relay.cut(UdpRelay::toward_1, true);
    if (cut != Cut::one_way) relay.cut(UdpRelay::toward_2, true);
    if (cut == Cut::both_then_one) {
        for (int i = 0; i < 5; ++i)
            step(true, false);
        ASSERT_TRUE(eventually([&] { return relay.data_dropped(UdpRelay::toward_2) >= 5; }, patience))
            << "the relay never dropped node 1's five messages";
        relay.cut(UdpRelay::toward_2, false);
    }
    // Node 1 gives node 2 up (and in both_give_up node 2 gives node 1 up).
    const bool keep_sending = cut != Cut::both_give_up;
    const std::size_t lost_before = at_2.losses.size();
    for (const auto deadline = Clock::now() + patience; fine() && at_1.losses.empty() && Clock::now() < deadline;)
        step(keep_sending, keep_sending);
    ASSERT_EQ(at_1.losses.size(), 1u) << "node 1 never gave node 2 up while node 2 could not reach it";
    if (cut == Cut::both_give_up) {
        for (const auto deadline = Clock::now() + patience;
             fine() && at_2.losses.size() == lost_before && Clock::now() < deadline;)
            step(false, false);
        ASSERT_EQ(at_2.losses.size(), 1u) << "node 2 never gave node 1 up while cut off";
    }
    for (std::uint64_t i = 0; i < after; ++i)
        step(true, true);
    const auto relayed_1 = relay.relayed(UdpRelay::toward_1);
    relay.cut(UdpRelay::toward_1, false);
    relay.cut(UdpRelay::toward_2, false);
    for (std::uint64_t i = 0; i < last; ++i)
        step(true, true);
    drain("after the relay joined again");

    EXPECT_EQ(at_1.violation, "");
    EXPECT_EQ(at_2.violation, "");
    EXPECT_GT(relay.relayed(UdpRelay::toward_1), relayed_1) << "nothing reached node 1 after the relay joined";
    auto said = [](const StreamSeen& s) {
        std::string all;
        for (const auto& l : s.losses)
            all += "\n  " + l;
        return all;
    };
    // Node 1 gave node 2 up once; node 2 never gave up (but in both_give_up) and
    // dropped nothing: node 1 gets its whole stream without a gap.
    EXPECT_EQ(at_1.losses.size(), 1u) << "node 1's PeerLosts:" << said(at_1);
    EXPECT_EQ(at_1.gaps, 0u) << "node 2 dropped nothing, yet node 1 saw a gap";
    switch (cut) {
    case Cut::one_way: // node 2 has every message node 1 dropped: it is told nothing
        EXPECT_EQ(at_2.losses.size(), 0u) << "node 2's PeerLosts:" << said(at_2);
        EXPECT_EQ(at_2.gaps, 0u);
        break;
    case Cut::both_then_one: // node 2 lacks what node 1 dropped: told once, where it belongs
        ASSERT_EQ(at_2.losses.size(), 1u) << "node 2's PeerLosts:" << said(at_2);
        EXPECT_EQ(at_2.gaps, 1u);
        EXPECT_NE(at_2.losses[0].find("dropped " + std::to_string(at_2.skipped) + " messages"), std::string::npos)
            << at_2.losses[0] << " (node 2 missed " << at_2.skipped << ")";
        break;
    case Cut::both_give_up: // each gave the other up; neither sent while cut off
        EXPECT_EQ(at_2.losses.size(), 1u) << "node 2's PeerLosts:" << said(at_2);
        EXPECT_EQ(at_2.gaps, 0u);
        break;
    }
}

INSTANTIATE_TEST_SUITE_P(Cuts, UdpLossWhileAlive,
                         ::testing::Combine(::testing::Values(Cut::one_way, Cut::both_then_one, Cut::both_give_up),
                                            ::testing::Bool()),
                         [](const auto& info) {
                             const Cut cut = std::get<0>(info.param); // (no structured binding in a macro)
                             const bool keyed = std::get<1>(info.param);
                             const std::string name = cut == Cut::one_way         ? "OneWay"
                                                      : cut == Cut::both_then_one ? "BothThenOne"
                                                                                  : "BothGiveUp";
                             return name + (keyed ? "WithAuthKey" : "");
                         });

// The receiving side of a skip, from a raw socket posing as node 1 (one datagram per
// message but message 3, whose first piece of two arrives alone): a skip over
// datagrams that never came is one PeerLost between the messages around it, naming
// the messages, and the count goes on from the skip; a late copy is a duplicate, a
// skip from an older next expected is stale, one naming a next expected beyond what
// arrived is a bad skip, and a malformed one is dropped by the decoder. Nothing of the
// half message comes out.
TEST(UdpSkip, ASkipIsOnePeerLostBetweenTheMessagesAroundItAndABadOneIsDropped) {
    auto c = make_configuration("udp", unique_partition("skip"), 2);
    auto b = NodeFactory::create(c, 2);
    auto from_1 = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    const std::uint16_t port_b = c.nodes[1].port;
    RawSocket one(c.nodes[0].port); // poses as node 1
    ASSERT_TRUE(one.bound());
    const auto greeted = greet(one, c.partition, 1, 2, port_b, 0x5151);
    ASSERT_TRUE(greeted) << "no welcome to a hello";
    const udp::DatagramHeader h = *greeted;

    auto message = [&](std::uint64_t seq) { // datagram seq: message seq, 64 bytes, whole
        auto d = h;
        d.type = static_cast<std::uint16_t>(udp::DatagramType::data);
        d.seq = seq;
        d.length = 64;
        d.flags = udp::flag_first;
        std::vector<std::byte> bytes(udp::header_size + 64);
        fill_payload(std::span(bytes).subspan(udp::header_size), 1, seq);
        std::memcpy(bytes.data(), &d, udp::header_size);
        one.send_to(port_b, bytes);
    };
    auto skip = [&](std::uint64_t first_kept, std::uint64_t expected, std::uint32_t messages) {
        auto d = h;
        d.type = static_cast<std::uint16_t>(udp::DatagramType::skip);
        d.seq = first_kept;
        d.length = expected;
        d.offset = messages;
        one.send_to(port_b, datagram(d, 0));
    };
    auto next = [&](const std::string& what) -> std::string { // "message n", "lost: ...", "nothing"
        try {
            auto m = from_1->receive(patience);
            if (!m) return "nothing (waited for " + what + ")";
            return "message " + std::to_string(check_payload(*m).seq);
        } catch (const PeerLost& e) {
            return std::string("lost: ") + e.what();
        } catch (const std::string& e) {
            return e;
        }
    };
    using udp::Drop;
    for (std::uint64_t i = 0; i < 3; ++i) {
        message(i);
        EXPECT_EQ(next("message " + std::to_string(i)), "message " + std::to_string(i));
    }
    auto half = h; // datagram 3: the first piece of a message of two
    half.type = static_cast<std::uint16_t>(udp::DatagramType::data);
    half.seq = 3;
    half.length = 2000;
    half.flags = udp::flag_first;
    one.send_to(port_b, datagram(half, udp::default_datagram_size - udp::header_size));
    ASSERT_TRUE(eventually([&] { return ub.datagram_stats().received >= 4; }, patience))
        << "the half message never arrived";

    // Node 1 "dropped" datagrams 3..5 (the half message, 3 and 4, and message 5):
    // message 6 follows. A skip counted from an older next expected (3: node 1 had not
    // heard that datagram 3 arrived) is stale, answered with a status; the one counted
    // from node 2's next expected (4) is taken.
    const auto stale = ub.datagram_stats().count(Drop::stale);
    skip(6, 3, 3);
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::stale) > stale; }, patience))
        << "a skip from an older next expected was not dropped as stale";
    message(6);
    skip(6, 4, 2);
    const std::string lost = next("the PeerLost of the skip");
    EXPECT_EQ(lost.rfind("lost: ", 0), 0u) << lost;
    EXPECT_NE(lost.find("dropped 2 messages to this node (its datagrams 4..5)"), std::string::npos) << lost;
    EXPECT_EQ(next("message 6"), "message 6");

    const auto duplicates = ub.datagram_stats().count(Drop::duplicate);
    skip(6, 4, 2);   // a late copy
    skip(12, 10, 1); // it claims node 2 expected 10: only 7 arrived
    auto malformed = h;
    malformed.type = static_cast<std::uint16_t>(udp::DatagramType::skip);
    malformed.seq = 9;
    malformed.length = 9; // skips nothing
    malformed.offset = 1;
    one.send_to(port_b, datagram(malformed, 0));
    malformed.length = 7, malformed.offset = 0; // no message dropped
    one.send_to(port_b, datagram(malformed, 0));
    malformed.offset = 1;
    one.send_to(port_b, datagram(malformed, 8)); // a payload
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::bad_skip) >= 3; }, patience))
        << "bad skips counted: " << ub.datagram_stats().count(Drop::bad_skip) << " of 3";
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::bad_type) >= 1; }, patience))
        << "a skip with a payload was not dropped as a bad type";
    EXPECT_TRUE(eventually([&] { return ub.datagram_stats().count(Drop::duplicate) > duplicates; }, patience))
        << "the late copy of the skip was not counted as a duplicate";
    message(7); // the count went on from 6, and none of the bad skips moved it
    EXPECT_EQ(next("message 7"), "message 7");
    EXPECT_EQ(ub.datagram_stats().count(Drop::bad_fragment), 0u) << "the half message's piece was not dropped with it";
    EXPECT_EQ(from_1->stats().errors, 1u) << "one PeerLost";
    EXPECT_EQ(nothing_more(*from_1, 100ms), "");
}

// A receive takes the messages in the inbox out together (up to 64 under one lock) and
// the next receives hand them out without it: they come out in order, and a gap a
// skip reported after they were taken comes after them, before the messages that
// follow it. From a raw socket posing as node 1: packed datagrams 0 and 1 of three
// messages each (their sizes tell them apart), one receive (which takes all six),
// then a skip over datagrams 2..3 and packed datagram 4 of two messages.
TEST(UdpSkip, MessagesTakenOutTogetherComeInOrderBeforeAGapReportedAfterThem) {
    auto c = make_configuration("udp", unique_partition("taken"), 2);
    auto b = NodeFactory::create(c, 2);
    auto from_1 = b->create_node(1);
    const auto& ub = dynamic_cast<udp::UdpNodeFactory&>(*b);
    const std::uint16_t port_b = c.nodes[1].port;
    RawSocket one(c.nodes[0].port); // poses as node 1
    ASSERT_TRUE(one.bound());
    const auto greeted = greet(one, c.partition, 1, 2, port_b, 0x7272);
    ASSERT_TRUE(greeted) << "no welcome to a hello";
    const udp::DatagramHeader h = *greeted;

    auto packed = [&](std::uint64_t seq, const std::vector<std::uint32_t>& sizes) {
        auto d = h;
        d.type = static_cast<std::uint16_t>(udp::DatagramType::data);
        d.seq = seq;
        one.send_to(port_b, packed_datagram(d, sizes));
    };
    auto next = [&]() -> std::string { // "N bytes", "lost: ...", "nothing"
        try {
            auto m = from_1->receive(patience);
            if (!m) return "nothing";
            for (const auto byte : m->single()->bytes())
                if (byte != std::byte{0x5a}) return "a changed message of " + std::to_string(m->size()) + " bytes";
            return std::to_string(m->size()) + " bytes";
        } catch (const PeerLost& e) {
            return std::string("lost: ") + e.what();
        }
    };
    packed(0, {10, 11, 12});
    packed(1, {13, 14, 15});
    ASSERT_TRUE(eventually([&] { return from_1->stats().messages_received >= 6; }, patience))
        << "the packed datagrams never arrived";
    EXPECT_EQ(next(), "10 bytes");
    auto d = h; // node 1 "dropped" datagrams 2 and 3 (two messages): datagram 4 follows
    d.type = static_cast<std::uint16_t>(udp::DatagramType::skip);
    d.seq = 4;
    d.length = 2;
    d.offset = 2;
    one.send_to(port_b, datagram(d, 0));
    packed(4, {18, 19});
    ASSERT_TRUE(eventually([&] { return from_1->stats().messages_received >= 8; }, patience))
        << "datagram 4 never arrived";
    for (std::uint32_t size = 11; size <= 15; ++size)
        EXPECT_EQ(next(), std::to_string(size) + " bytes");
    const std::string lost = next();
    EXPECT_EQ(lost.rfind("lost: ", 0), 0u) << lost;
    EXPECT_NE(lost.find("dropped 2 messages to this node (its datagrams 2..3)"), std::string::npos) << lost;
    EXPECT_EQ(next(), "18 bytes");
    EXPECT_EQ(next(), "19 bytes");
    EXPECT_EQ(ub.datagram_stats().count(udp::Drop::bad_frame), 0u);
    EXPECT_EQ(from_1->stats().errors, 1u) << "one PeerLost";
    EXPECT_EQ(nothing_more(*from_1, 100ms), "");
}

// ---------------------------------------------------------------- socket buffers

// The largest udp.socket_buffer (1 GiB) with CAP_NET_ADMIN: the kernel keeps at most
// INT_MAX / 2 bytes, one less than 1 GiB; that is all the option can ask, so no
// warning. (Each ctest test is its own process: no earlier warning hides this one.)
TEST(UdpResources, TheLargestBufferWithThePowerToForceItIsTakenWithoutAWarning) {
    bool may_force = false;
    {
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
        may_force = ::syscall(SYS_capget, &header, data) == 0 &&
                    (data[CAP_TO_INDEX(CAP_NET_ADMIN)].effective & CAP_TO_MASK(CAP_NET_ADMIN)) != 0;
    }
    MSGPASS_REQUIRE(may_force, "CAP_NET_ADMIN, to force a buffer above net.core.rmem_max (run as root)");
    auto c = make_configuration("udp", unique_partition("rmem1g"), 2, [&](config::Configuration& c) {
        c.edit_section<udp::Options>().socket_buffer = config::GiB;
    });
    ::testing::internal::CaptureStderr();
    {
        auto one = NodeFactory::create(c, 1);
        auto two = NodeFactory::create(c, 2);
        auto to_2 = one->create_node(2);
        auto from_1 = two->create_node(1);
        to_2->send(make_message(*one, 1000, 1, 0));
        EXPECT_NE(from_1->receive(patience), nullptr);
    }
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(said.find("the kernel gave a receive buffer"), std::string::npos) << said;
}

// udp.socket_buffer above net.core.rmem_max, in a thread without CAP_NET_ADMIN (which
// SO_RCVBUFFORCE needs): the factory asks for it with SO_RCVBUF instead, gets
// rmem_max, and says once on stderr what it got, what was asked and which sysctl to
// raise. (Without the capability there is nothing to drop: skipped, failed in CI.)
TEST(UdpResources, ABufferAboveWhatTheKernelGrantsIsTakenAsGrantedAndSaidOnce) {
    std::uint64_t rmem_max = 0;
    if (std::FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
        unsigned long long v = 0;
        if (std::fscanf(f, "%llu", &v) == 1) rmem_max = v;
        std::fclose(f);
    }
    MSGPASS_REQUIRE(rmem_max != 0 && rmem_max <= 128 * config::MiB,
                    "net.core.rmem_max readable and at most 128 MiB (the test asks for 256 MiB)");
    const std::uint64_t asked = 256 * config::MiB;
    auto c = make_configuration("udp", unique_partition("rmem"), 2, [&](config::Configuration& c) {
        c.edit_section<udp::Options>().socket_buffer = asked;
    });
    std::string said, second;
    bool dropped = false;
    std::thread([&] {
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
        const auto word = CAP_TO_INDEX(CAP_NET_ADMIN);
        const auto bit = CAP_TO_MASK(CAP_NET_ADMIN);
        if (::syscall(SYS_capget, &header, data) != 0 || (data[word].effective & bit) == 0) return;
        data[word].effective &= ~bit; // this thread's only
        if (::syscall(SYS_capset, &header, data) != 0) return;
        dropped = true;
        ::testing::internal::CaptureStderr();
        {
            auto one = NodeFactory::create(c, 1);
            auto two = NodeFactory::create(c, 2);
            auto to_2 = one->create_node(2);
            auto from_1 = two->create_node(1);
            to_2->send(make_message(*one, 1000, 1, 0));
            auto m = from_1->receive(patience);
            EXPECT_NE(m, nullptr) << "no message with the smaller buffer";
        }
        said = ::testing::internal::GetCapturedStderr();
    }).join();
    MSGPASS_REQUIRE(dropped, "CAP_NET_ADMIN, to drop it in one thread (run as root)");
    const std::string warning = "the kernel gave a receive buffer of " + std::to_string(rmem_max) +
                                " bytes, below udp.socket_buffer (" + std::to_string(asked) +
                                " bytes); raise net.core.rmem_max (sysctl) to get it";
    EXPECT_NE(said.find("msgpass udp nodes.yaml: node 1: " + warning), std::string::npos) << said;
    EXPECT_EQ(said.find(warning, said.find(warning) + 1), std::string::npos) << "said twice: " << said;
}

// ---------------------------------------------------------------- datagrams on the wire

// A message's datagrams leave together (one UDP GSO send, or one sendmmsg() where
// the kernel refuses GSO: docs/udp.md, "Data path"), and still arrive as datagrams of
// their own: at most datagram_size each, numbered in order, every piece but a
// message's last full, the bytes of the message; datagram_stats().sent counts each.
TEST(Udp, AMessageOfManyDatagramsArrivesAsNumberedDatagramsOfAtMostDatagramSize) {
    auto c = make_configuration("udp", unique_partition("wire"), 2);
    auto a = NodeFactory::create(c, 1);
    auto to_2 = a->create_node(2);
    const auto& ua = dynamic_cast<udp::UdpNodeFactory&>(*a);
    RawSocket two(c.nodes[1].port); // poses as node 2
    ASSERT_TRUE(two.bound());
    const std::uint16_t port_1 = c.nodes[0].port;
    const std::size_t payload = udp::default_datagram_size - udp::header_size;

    // 8 KiB (six datagrams), 50 000 B (more than one batch of 16), a FragmentList of
    // 80 fragments of 50 B (a piece spans about 29 of them, more than the 15 iovecs
    // a datagram has after its header: each piece is copied into one), a datagram
    // exactly full, and ten of 64 B; the first four are queued before the peer is
    // known, so that they leave in one batch, the others as they are sent.
    std::vector<std::vector<std::byte>> sent;
    auto message = [&](std::size_t size) {
        auto m = make_message(*a, size, 1, sent.size());
        const auto bytes = m->single()->bytes();
        sent.emplace_back(bytes.begin(), bytes.end());
        return m;
    };
    auto fragmented = [&] {
        auto whole = message(80 * 50);
        auto list = std::make_unique<FragmentList>();
        const auto bytes = whole->single()->bytes();
        for (std::size_t i = 0; i < 80; ++i)
            list->append(std::make_unique<HeapBuffer>(bytes.subspan(i * 50, 50)));
        return list;
    };
    to_2->send(message(8192));
    to_2->send(message(50000));
    to_2->send(fragmented());
    to_2->send(message(payload));

    udp::DatagramHeader hello{};
    std::uint64_t datagrams = 0; // every datagram node 1 sent here
    auto next = [&](std::chrono::milliseconds timeout) {
        auto d = two.receive(timeout);
        if (!d.empty()) ++datagrams;
        return d;
    };
    for (auto deadline = Clock::now() + patience; hello.type != static_cast<std::uint16_t>(udp::DatagramType::hello);) {
        ASSERT_LT(Clock::now(), deadline) << "node 1 sent no hello";
        const auto d = next(100ms);
        if (d.size() >= udp::header_size) std::memcpy(&hello, d.data(), udp::header_size);
    }
    udp::DatagramHeader h = hello;
    h.from = 2;
    h.to = 1;
    h.incarnation = 0x2222;
    h.peer_incarnation = hello.incarnation;
    h.flags = 0;
    h.type = static_cast<std::uint16_t>(udp::DatagramType::welcome);
    h.seq = 0;       // the next datagram expected
    h.length = 1024; // the window
    two.send_to(port_1, datagram(h, 0));
    for (std::size_t i = 0; i < 10; ++i)
        to_2->send(message(64));

    // The messages the data datagrams received end: a packed one's frames, a piece
    // that ends its message. (The ten of 64 B may go packed, some of them or all: those
    // sent before node 1 took the welcome wait, queued, in one datagram.)
    std::map<std::uint64_t, std::vector<std::byte>> got; // data datagrams by number
    auto ended = [&] {
        std::size_t n = 0;
        for (const auto& [number, d] : got) {
            udp::DatagramHeader dh;
            std::memcpy(&dh, d.data(), udp::header_size);
            n += dh.flags == udp::flag_packed ? dh.offset : (dh.offset + d.size() - udp::header_size == dh.length);
        }
        return n;
    };
    for (auto deadline = Clock::now() + patience; ended() < sent.size();) {
        ASSERT_LT(Clock::now(), deadline) << "node 1 sent " << got.size() << " datagrams, the end of " << ended()
                                          << " of " << sent.size() << " messages";
        auto d = next(100ms);
        if (d.empty()) continue;
        ASSERT_GE(d.size(), udp::header_size);
        ASSERT_LE(d.size(), udp::default_datagram_size) << "a datagram larger than datagram_size";
        udp::DatagramHeader dh;
        std::memcpy(&dh, d.data(), udp::header_size);
        if (dh.type != static_cast<std::uint16_t>(udp::DatagramType::data)) continue;
        auto [at, fresh] = got.emplace(dh.seq, d);
        if (!fresh) {
            EXPECT_EQ(at->second, d) << "datagram " << dh.seq << " resent with other bytes";
        }
    }
    // Reassembled in the order of their numbers, the datagrams are the messages.
    std::size_t index = 0, done = 0;
    std::uint64_t seq = 0;
    for (const auto& [number, d] : got) {
        ASSERT_EQ(number, seq++) << "datagrams not numbered from 0 without a gap";
        ASSERT_LT(index, sent.size()) << "datagram " << number << " beyond the messages";
        udp::DatagramHeader dh;
        std::memcpy(&dh, d.data(), udp::header_size);
        const auto piece = std::span(d).subspan(udp::header_size);
        if (dh.flags == udp::flag_packed) { // whole messages of 64 B, a frame each
            ASSERT_EQ(done, 0u) << "datagram " << number << " packed inside a message";
            ASSERT_GE(dh.offset, 2u) << "datagram " << number << ": a lone message goes as a plain piece";
            EXPECT_EQ(dh.length, piece.size()) << "datagram " << number;
            std::size_t at = 0;
            for (std::uint32_t f = 0; f < dh.offset; ++f, ++index) {
                ASSERT_LT(index, sent.size()) << "datagram " << number << " beyond the messages";
                const auto& m = sent[index];
                ASSERT_EQ(m.size(), 64u) << "message " << index << " packed";
                ASSERT_LE(at + udp::frame_bytes(m.size()), piece.size()) << "datagram " << number;
                udp::FrameHeader fh;
                std::memcpy(&fh, piece.data() + at, udp::frame_header_size);
                EXPECT_EQ(fh.length, udp::frame_header_size + m.size()) << "datagram " << number << " frame " << f;
                EXPECT_EQ(fh.reserved, 0u);
                const auto bytes = piece.subspan(at + udp::frame_header_size, m.size());
                EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), m.begin()))
                    << "datagram " << number << " frame " << f << " is not message " << index;
                at += udp::frame_bytes(m.size());
            }
            EXPECT_EQ(at, piece.size()) << "datagram " << number;
            continue;
        }
        const auto& m = sent[index];
        EXPECT_EQ(dh.length, m.size()) << "datagram " << number;
        EXPECT_EQ(dh.offset, done) << "datagram " << number;
        EXPECT_EQ(dh.flags == udp::flag_first, done == 0) << "datagram " << number;
        EXPECT_EQ(piece.size(), std::min(payload, m.size() - done)) << "datagram " << number;
        EXPECT_TRUE(std::equal(piece.begin(), piece.end(), m.begin() + static_cast<std::ptrdiff_t>(done)))
            << "datagram " << number << " does not carry bytes " << done << ".. of message " << index;
        done += piece.size();
        if (done == m.size()) ++index, done = 0;
    }
    EXPECT_EQ(index, sent.size());

    h.type = static_cast<std::uint16_t>(udp::DatagramType::status);
    h.seq = got.size(); // all arrived: nothing more is resent
    two.send_to(port_1, datagram(h, 0));
    EXPECT_TRUE(eventually(
        [&] {
            while (!next(20ms).empty()) {
            }
            return datagrams == ua.datagram_stats().sent;
        },
        patience))
        << "node 1 counted " << ua.datagram_stats().sent << " datagrams sent, " << datagrams << " arrived";
}

// ---------------------------------------------------------------- peer life

// A child process that, once the parent writes to `start`, runs node 2, sends one
// message (stream 2, seq) to node 1, and ends without a goodbye (_exit) when the
// parent closes `release`. Forked before the parent makes any thread (ThreadSanitizer
// does not support a fork of a threaded process).
struct Child {
    pid_t pid = -1;
    int start = -1;
    int release = -1;
};

Child fork_node_2(const config::Configuration& c, std::uint64_t seq, const Child& sibling = {}) {
    int go[2], end[2];
    if (::pipe(go) != 0 || ::pipe(end) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(go[1]);
        ::close(end[1]);
        if (sibling.pid > 0) { // its pipes must close when the parent closes them
            ::close(sibling.start);
            ::close(sibling.release);
        }
        char byte;
        if (::read(go[0], &byte, 1) != 1) ::_exit(0); // the parent ended without starting it
        auto f = NodeFactory::create(c, 2);
        auto to1 = f->create_node(1);
        to1->send(make_message(*f, 100, 2, seq));
        (void)::read(end[0], &byte, 1); // until the parent closes its end
        ::_exit(0);                     // no destructor: no goodbye
    }
    ::close(go[0]);
    ::close(end[0]);
    return {pid, go[1], end[1]};
}

void start(const Child& child) {
    const char byte = 1;
    ASSERT_EQ(::write(child.start, &byte, 1), 1);
}

void end(Child& child) {
    ::close(child.start);
    ::close(child.release);
    if (child.pid > 0) ::waitpid(child.pid, nullptr, 0);
    child.pid = -1;
}

TEST(Udp, APeerThatDiesIsLostAfterPeerTimeoutAndARestartedOneIsANewIncarnation) {
    auto c = make_configuration("udp", unique_partition("life"), 2,
                                [](config::Configuration& c) { c.peer_timeout = 500ms; });
    const SegmentCleanup pages(c.partition); // the statistics pages the killed children leave
    Child first = fork_node_2(c, 1);
    Child second = fork_node_2(c, 2, first);
    ASSERT_GT(first.pid, 0);
    ASSERT_GT(second.pid, 0);
    struct Reap {
        Child& a;
        Child& b;
        ~Reap() {
            if (a.pid > 0) end(a);
            if (b.pid > 0) end(b);
        }
    } reap{first, second};
    auto f = NodeFactory::create(c, 1);
    auto from2 = f->create_node(2);
    start(first);
    auto m = from2->receive(patience);
    ASSERT_NE(m, nullptr) << "nothing from the first process of node 2";
    EXPECT_EQ(check_payload(*m).seq, 1u);
    end(first);

    // The restarted node 2: its old incarnation's loss comes before its new message
    // (or, on a slow start, after peer_timeout of silence: also once).
    start(second);
    int losses = 0;
    BufferPtr next;
    for (auto deadline = Clock::now() + patience; !next && Clock::now() < deadline;) {
        try {
            next = from2->receive(100ms);
        } catch (const PeerLost& e) {
            ++losses;
            EXPECT_EQ(e.peer(), 2u);
        }
    }
    ASSERT_NE(next, nullptr) << "nothing from the restarted node 2";
    EXPECT_EQ(check_payload(*next).seq, 2u);
    EXPECT_EQ(losses, 1) << "the first process's loss was not reported once before the new process's message";

    // Killed without a word: lost after peer_timeout.
    end(second);
    const auto begin = Clock::now();
    bool lost = false;
    for (auto deadline = begin + patience; !lost && Clock::now() < deadline;) {
        try {
            EXPECT_EQ(from2->receive(100ms), nullptr);
        } catch (const PeerLost&) {
            lost = true;
        }
    }
    EXPECT_TRUE(lost) << "a dead peer was never reported";
    EXPECT_GE(Clock::now() - begin, c.peer_timeout / 2);
}

// A peer that ends cleanly (its factory's destructor says goodbye) is not a loss.
TEST(Udp, APeerThatClosesCleanlyIsNotReportedLost) {
    auto c = make_configuration("udp", unique_partition("clean"), 2,
                                [](config::Configuration& c) { c.peer_timeout = 300ms; });
    auto f = NodeFactory::create(c, 1);
    auto from2 = f->create_node(2);
    {
        auto g = NodeFactory::create(c, 2);
        g->create_node(1)->send(make_message(*g, 100, 2, 5));
    }
    auto m = from2->receive(patience);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(check_payload(*m).seq, 5u);
    for (const auto end = Clock::now() + 3 * c.peer_timeout; Clock::now() < end;)
        ASSERT_EQ(nothing_more(*from2, 50ms), "") << "after the peer ended cleanly";
}

} // namespace
} // namespace msgpass::test
