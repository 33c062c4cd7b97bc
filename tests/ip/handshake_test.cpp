// Unit tests of msgpass/ip/handshake.hpp: the wire image of Hello and Welcome, and
// the checks an acceptor makes of a Hello and a connector of the answer, each
// refusal with its reason (docs/tcp.md, Handshake).
#include <msgpass/ip/handshake.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>

namespace msgpass::ip {
namespace {

constexpr Protocol test_protocol{0x4354504d, 1}; // tcp's "MPTC", version 1

template <class T>
std::array<std::uint8_t, sizeof(T)> bytes_of(const T& t) {
    std::array<std::uint8_t, sizeof(T)> b{};
    std::memcpy(b.data(), &t, sizeof t);
    return b;
}

Acceptor acceptor_for(std::uint32_t self, std::string partition) {
    return Acceptor{test_protocol, std::move(partition), self, [](std::uint32_t id) { return id >= 1 && id <= 4; }};
}

// "Every integer is little-endian": the Hello on the wire, byte by byte.
TEST(HandshakeWire, AHelloIsTheDocumentedLittleEndianImageOf128Bytes) {
    const Hello h = make_hello(test_protocol, 3, 2, 0x0102030405060708ULL, "run-7");
    const auto b = bytes_of(h);
    const std::array<std::uint8_t, 32> expected{
        'M', 'P', 'T', 'C', 1, 0, 1, 0, // magic, version 1, kind hello
        3,   0,   0,   0,   2, 0, 0, 0, // from 3, to 2
        8,   7,   6,   5,   4, 3, 2, 1, // incarnation
        5,   0,   0,   0,   0, 0, 0, 0, // partition length
    };
    for (std::size_t i = 0; i < expected.size(); ++i)
        EXPECT_EQ(b[i], expected[i]) << "byte " << i;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data() + 32), 5), "run-7");
    for (std::size_t i = 37; i < b.size(); ++i)
        EXPECT_EQ(b[i], 0) << "byte " << i << " after the partition";
}

TEST(HandshakeWire, AWelcomeIsTheDocumentedImageOf40BytesAndARefusalCarriesItsReason) {
    const Welcome w = make_welcome(test_protocol, 2, 3, 0x1122334455667788ULL, 513);
    const auto b = bytes_of(w);
    EXPECT_EQ(b.size(), 40u);
    EXPECT_EQ(std::memcmp(b.data(), "MPTC", 4), 0);
    EXPECT_EQ(b[4], 1);
    EXPECT_EQ(b[6], static_cast<std::uint8_t>(Kind::welcome));
    EXPECT_EQ(b[8], 2);
    EXPECT_EQ(b[12], 3);
    EXPECT_EQ(b[16], 0x88);
    EXPECT_EQ(b[23], 0x11);
    EXPECT_EQ(b[24], 1); // next_expected 513 = 0x201
    EXPECT_EQ(b[25], 2);
    EXPECT_EQ(w.reason, 0u);

    const Welcome r = make_refusal(test_protocol, 2, 3, 9, Refusal::wrong_partition);
    EXPECT_EQ(r.kind, static_cast<std::uint16_t>(Kind::refusal));
    EXPECT_EQ(r.reason, static_cast<std::uint32_t>(Refusal::wrong_partition));
    EXPECT_EQ(r.next_expected, 0u);
    EXPECT_EQ(bytes_of(r)[32], static_cast<std::uint8_t>(Refusal::wrong_partition));
}

TEST(HandshakeWire, APartitionLongerThanTheFieldIsCutToIt) {
    const std::string long_name(max_partition_length + 20, 'p');
    const Hello h = make_hello(test_protocol, 1, 2, 5, long_name);
    EXPECT_EQ(h.partition_length, max_partition_length);
}

TEST(CheckHello, AcceptsAGoodHello) {
    const Verdict v = check_hello(make_hello(test_protocol, 3, 2, 77, "run"), acceptor_for(2, "run"));
    EXPECT_TRUE(v.accepted()) << describe(v.refusal) << ": " << v.detail;
    EXPECT_EQ(v.detail, "");
}

TEST(CheckHello, AnotherVersionIsRefusedAsBadVersion) {
    Hello h = make_hello(test_protocol, 3, 2, 77, "run");
    h.version = 2;
    const Verdict v = check_hello(h, acceptor_for(2, "run"));
    EXPECT_EQ(v.refusal, Refusal::bad_version);
    EXPECT_EQ(v.detail, "version 2");
}

TEST(CheckHello, AKindOtherThanHelloIsAProtocolError) {
    Hello h = make_hello(test_protocol, 3, 2, 77, "run");
    h.kind = static_cast<std::uint16_t>(Kind::welcome);
    const Verdict v = check_hello(h, acceptor_for(2, "run"));
    EXPECT_EQ(v.refusal, Refusal::protocol_error);
    EXPECT_EQ(v.detail, "handshake kind 2");
}

// "check every length against what is left before using it"
TEST(CheckHello, APartitionLengthBeyondTheFieldIsRefusedAsBadLengthBeforeItIsRead) {
    Hello h = make_hello(test_protocol, 3, 2, 77, "run");
    h.partition_length = 1ULL << 63;
    const Verdict v = check_hello(h, acceptor_for(2, "run"));
    EXPECT_EQ(v.refusal, Refusal::bad_length);
    EXPECT_EQ(v.detail, "partition length 9223372036854775808");
    h.partition_length = max_partition_length + 1;
    EXPECT_EQ(check_hello(h, acceptor_for(2, "run")).refusal, Refusal::bad_length);
}

TEST(CheckHello, AnotherPartitionIsRefusedNamingIt) {
    const Verdict v = check_hello(make_hello(test_protocol, 3, 2, 77, "other"), acceptor_for(2, "run"));
    EXPECT_EQ(v.refusal, Refusal::wrong_partition);
    EXPECT_EQ(v.detail, "partition 'other'");
    // A prefix of the partition is another partition.
    EXPECT_EQ(check_hello(make_hello(test_protocol, 3, 2, 77, "ru"), acceptor_for(2, "run")).refusal,
              Refusal::wrong_partition);
}

TEST(CheckHello, AHelloForAnotherNodeIsRefusedAsWrongTarget) {
    const Verdict v = check_hello(make_hello(test_protocol, 3, 4, 77, "run"), acceptor_for(2, "run"));
    EXPECT_EQ(v.refusal, Refusal::wrong_target);
    EXPECT_EQ(v.detail, "addressed to node 4");
}

TEST(CheckHello, ASenderOutsideTheNodesFileItselfOrWithoutIncarnationIsAnUnknownNode) {
    const auto a = acceptor_for(2, "run");
    for (const auto& h : {make_hello(test_protocol, 9, 2, 77, "run"), make_hello(test_protocol, 2, 2, 77, "run"),
                          make_hello(test_protocol, 3, 2, 0, "run")}) {
        const Verdict v = check_hello(h, a);
        EXPECT_EQ(v.refusal, Refusal::unknown_node) << "from " << h.from << " incarnation " << h.incarnation;
        EXPECT_EQ(v.detail, "from node " + std::to_string(h.from));
    }
}

TEST(CheckHello, ANewcomerFromNodeZeroIsTakenOnlyByAnAcceptorOfClientsAndMayNotKnowItsId) {
    auto a = acceptor_for(2, "run");
    Verdict v = check_hello(make_hello(test_protocol, 0, 0, 77, "run"), a);
    EXPECT_EQ(v.refusal, Refusal::unknown_node);
    EXPECT_EQ(v.detail, "from a client in no nodes file (node id 0): this node takes no clients");
    a.newcomers = true;
    EXPECT_TRUE(check_hello(make_hello(test_protocol, 0, 0, 77, "run"), a).accepted()) << "to 0: whoever listens";
    EXPECT_TRUE(check_hello(make_hello(test_protocol, 0, 2, 77, "run"), a).accepted());
    EXPECT_EQ(check_hello(make_hello(test_protocol, 0, 3, 77, "run"), a).refusal, Refusal::wrong_target);
    EXPECT_EQ(check_hello(make_hello(test_protocol, 0, 0, 0, "run"), a).refusal, Refusal::unknown_node);
    EXPECT_EQ(check_hello(make_hello(test_protocol, 3, 0, 77, "run"), a).refusal, Refusal::wrong_target)
        << "only a newcomer may leave the acceptor's id out";
}

TEST(CheckHello, ChecksInTheDocumentedOrderVersionFirst) {
    Hello h = make_hello(test_protocol, 9, 4, 0, "other");
    h.version = 7;
    EXPECT_EQ(check_hello(h, acceptor_for(2, "run")).refusal, Refusal::bad_version);
    h.version = test_protocol.version;
    EXPECT_EQ(check_hello(h, acceptor_for(2, "run")).refusal, Refusal::wrong_partition);
    h = make_hello(test_protocol, 9, 4, 0, "run");
    EXPECT_EQ(check_hello(h, acceptor_for(2, "run")).refusal, Refusal::wrong_target);
}

TEST(CheckAnswer, TellsAWelcomeARefusalAndAnUnexpectedKind) {
    EXPECT_EQ(check_answer(make_welcome(test_protocol, 2, 3, 9, 0), test_protocol, 3, 2), Answer::welcome);
    const Welcome r = make_refusal(test_protocol, 2, 3, 9, Refusal::unknown_node);
    EXPECT_EQ(check_answer(r, test_protocol, 3, 2), Answer::refusal);
    EXPECT_EQ(refusal_reason(r), Refusal::unknown_node);
    Welcome odd = make_welcome(test_protocol, 2, 3, 9, 0);
    odd.kind = static_cast<std::uint16_t>(Kind::hello);
    EXPECT_EQ(check_answer(odd, test_protocol, 3, 2), Answer::unexpected);
}

TEST(CheckAnswer, AnAnswerOfAnotherProtocolVersionOrPairIsForeign) {
    const Welcome w = make_welcome(test_protocol, 2, 3, 9, 0);
    EXPECT_EQ(check_answer(w, Protocol{0x5044504d, 1}, 3, 2), Answer::foreign) << "another magic";
    EXPECT_EQ(check_answer(w, Protocol{test_protocol.magic, 2}, 3, 2), Answer::foreign) << "another version";
    EXPECT_EQ(check_answer(w, test_protocol, 3, 4), Answer::foreign) << "from another peer";
    EXPECT_EQ(check_answer(w, test_protocol, 5, 2), Answer::foreign) << "to another node";
}

TEST(CheckAnswer, ARefusalReasonThisSideDoesNotKnowReadsAsNone) {
    Welcome r = make_refusal(test_protocol, 2, 3, 9, Refusal::bad_version);
    r.reason = 4000;
    EXPECT_EQ(refusal_reason(r), Refusal::none);
    r.reason = static_cast<std::uint32_t>(Refusal::kinds);
    EXPECT_EQ(refusal_reason(r), Refusal::none);
}

TEST(RefusalNames, EveryReasonHasItsOwnName) {
    for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(Refusal::kinds); ++i) {
        EXPECT_NE(describe(static_cast<Refusal>(i)), "unknown") << i;
        for (std::uint32_t j = 0; j < i; ++j)
            EXPECT_NE(describe(static_cast<Refusal>(i)), describe(static_cast<Refusal>(j))) << i << " and " << j;
    }
}

} // namespace
} // namespace msgpass::ip
