// Unit tests of msgpass/ip/auth.hpp: the challenge-response of an authenticated
// partition, each way it must fail (no key, wrong key, replay, tampering) and the
// one way it succeeds (docs/security.md).
#include <msgpass/ip/auth.hpp>

#include <gtest/gtest.h>

#include <cstring>

namespace msgpass::ip {
namespace {

constexpr Protocol test_protocol{0x4354504d, 9};

AuthKey key_of(std::uint8_t seed) {
    AuthKey k{};
    for (std::size_t i = 0; i < k.size(); ++i)
        k[i] = static_cast<std::uint8_t>(seed + 7 * i);
    return k;
}

Acceptor acceptor_for(std::uint32_t self, bool authenticated) {
    Acceptor a{test_protocol, "run", self, [](std::uint32_t id) { return id >= 1 && id <= 4; }};
    a.authenticated = authenticated;
    return a;
}

struct Exchange {
    AuthHello hello;
    Challenge challenge;
    Proof proof;
};

// The whole exchange, the acceptor holding `acceptor_key` and the connector `connector_key`.
Exchange run(const AuthKey& connector_key, const AuthKey& acceptor_key) {
    Exchange e;
    e.hello = make_auth_hello(test_protocol, 3, 2, 0x77, "run");
    e.challenge = make_challenge(acceptor_key, e.hello, test_protocol, 2, 0x55);
    e.proof = make_proof(connector_key, e.hello, e.challenge);
    return e;
}

TEST(AuthHandshake, TwoSidesWithTheSameKeyProveItToEachOther) {
    const AuthKey key = key_of(1);
    const Exchange e = run(key, key);
    EXPECT_EQ(e.hello.hello.kind, kind_hello_auth);
    EXPECT_TRUE(check_hello(e.hello.hello, acceptor_for(2, true)).accepted());
    EXPECT_EQ(e.challenge.header.kind, kind_challenge);
    EXPECT_EQ(e.challenge.header.from, 2u);
    EXPECT_EQ(e.challenge.header.to, 3u);
    EXPECT_TRUE(challenge_proves_key(key, e.hello, e.challenge));
    EXPECT_EQ(e.proof.header.kind, kind_proof);
    EXPECT_EQ(e.proof.header.from, 3u);
    EXPECT_EQ(e.proof.header.to, 2u);
    EXPECT_TRUE(proof_proves_key(key, e.hello, e.challenge, e.proof));
}

TEST(AuthHandshake, EachSideDrawsAFreshNonce) {
    const AuthKey key = key_of(1);
    const Exchange a = run(key, key);
    const Exchange b = run(key, key);
    EXPECT_NE(a.hello.nonce, b.hello.nonce);
    EXPECT_NE(a.challenge.nonce, b.challenge.nonce);
    EXPECT_NE(a.hello.nonce, Nonce{});
}

TEST(AuthHandshake, AWrongKeyFailsOnBothSides) {
    const Exchange e = run(key_of(1), key_of(2));
    // The connector sees the acceptor's MAC is not of its key and would not answer...
    EXPECT_FALSE(challenge_proves_key(key_of(1), e.hello, e.challenge));
    // ...and a connector that answers anyway is refused.
    EXPECT_FALSE(proof_proves_key(key_of(2), e.hello, e.challenge, e.proof));
}

TEST(AuthHandshake, AKeyThatDiffersInOneBitFails) {
    AuthKey other = key_of(1);
    other[31] ^= 0x01;
    const Exchange e = run(other, key_of(1));
    EXPECT_FALSE(challenge_proves_key(other, e.hello, e.challenge));
    EXPECT_FALSE(proof_proves_key(key_of(1), e.hello, e.challenge, e.proof));
}

// A recorded handshake replayed: the acceptor answers the old Hello with a new
// challenge, and the recorded proof, made for the old challenge, does not prove it.
TEST(AuthHandshake, ARecordedProofDoesNotAnswerANewChallenge) {
    const AuthKey key = key_of(1);
    const Exchange recorded = run(key, key);
    const Challenge fresh = make_challenge(key, recorded.hello, test_protocol, 2, 0x55);
    EXPECT_TRUE(proof_proves_key(key, recorded.hello, recorded.challenge, recorded.proof));
    EXPECT_FALSE(proof_proves_key(key, recorded.hello, fresh, recorded.proof));
}

// A recorded challenge replayed to a connector: it covers the old Hello's nonce.
TEST(AuthHandshake, ARecordedChallengeDoesNotAnswerANewHello) {
    const AuthKey key = key_of(1);
    const Exchange recorded = run(key, key);
    const AuthHello fresh = make_auth_hello(test_protocol, 3, 2, 0x77, "run");
    EXPECT_FALSE(challenge_proves_key(key, fresh, recorded.challenge));
}

// The MACs cover the whole Hello and the headers: a changed byte anywhere fails.
TEST(AuthHandshake, AnyChangedByteOfTheExchangeFailsTheProof) {
    const AuthKey key = key_of(1);
    const Exchange e = run(key, key);
    for (std::size_t i = 0; i < sizeof(AuthHello); ++i) {
        AuthHello h = e.hello;
        reinterpret_cast<std::uint8_t*>(&h)[i] ^= 0x40;
        EXPECT_FALSE(challenge_proves_key(key, h, e.challenge)) << "hello byte " << i;
        EXPECT_FALSE(proof_proves_key(key, h, e.challenge, e.proof)) << "hello byte " << i;
    }
    for (std::size_t i = 0; i < sizeof(Challenge); ++i) {
        Challenge c = e.challenge;
        reinterpret_cast<std::uint8_t*>(&c)[i] ^= 0x40;
        EXPECT_FALSE(challenge_proves_key(key, e.hello, c)) << "challenge byte " << i;
        EXPECT_FALSE(proof_proves_key(key, e.hello, c, e.proof)) << "challenge byte " << i;
    }
    for (std::size_t i = 0; i < sizeof(Proof); ++i) {
        Proof p = e.proof;
        reinterpret_cast<std::uint8_t*>(&p)[i] ^= 0x40;
        EXPECT_FALSE(proof_proves_key(key, e.hello, e.challenge, p)) << "proof byte " << i;
    }
}

// The acceptor's MAC is not the connector's: one side's cannot be reflected as the other's.
TEST(AuthHandshake, TheAcceptorsMacCannotServeAsTheConnectorsProof) {
    const AuthKey key = key_of(1);
    const Exchange e = run(key, key);
    Proof reflected = e.proof;
    reflected.mac = e.challenge.mac;
    EXPECT_FALSE(proof_proves_key(key, e.hello, e.challenge, reflected));
}

TEST(AuthHandshake, AnAcceptorWithAKeyRefusesAPlainHelloAndOneWithoutRefusesAnAuthHello) {
    const Hello plain = make_hello(test_protocol, 3, 2, 0x77, "run");
    const AuthHello auth = make_auth_hello(test_protocol, 3, 2, 0x77, "run");
    Verdict v = check_hello(plain, acceptor_for(2, true));
    EXPECT_EQ(v.refusal, Refusal::unauthenticated);
    EXPECT_NE(v.detail.find("node 3 has no auth_key_file"), std::string::npos) << v.detail;
    v = check_hello(auth.hello, acceptor_for(2, false));
    EXPECT_EQ(v.refusal, Refusal::unauthenticated);
    EXPECT_NE(v.detail.find("this node has none"), std::string::npos) << v.detail;
    EXPECT_TRUE(check_hello(plain, acceptor_for(2, false)).accepted());
    EXPECT_EQ(describe(Refusal::bad_proof), "wrong key or replayed handshake");
}

TEST(AuthMac, AMacOverPartsDependsOnTheKeyEveryByteAndWhereThePartsSplit) {
    const std::array<std::byte, 4> a{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
    const std::array<std::byte, 2> b{std::byte{5}, std::byte{6}};
    const Mac m = mac_over(key_of(1), {a, b});
    EXPECT_TRUE(same_mac(m, mac_over(key_of(1), {a, b})));
    EXPECT_FALSE(same_mac(m, mac_over(key_of(2), {a, b})));
    auto c = a;
    c[3] = std::byte{9};
    EXPECT_FALSE(same_mac(m, mac_over(key_of(1), {c, b})));
    // Parts are concatenated: the same bytes split elsewhere give the same MAC, so a
    // protocol must give its parts fixed sizes (udp's do).
    const std::array<std::byte, 6> whole{std::byte{1}, std::byte{2}, std::byte{3},
                                         std::byte{4}, std::byte{5}, std::byte{6}};
    EXPECT_TRUE(same_mac(m, mac_over(key_of(1), {whole})));
}

} // namespace
} // namespace msgpass::ip
