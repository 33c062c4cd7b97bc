// Fuzz target: the handshake of the ip technologies (ip/common handshake.hpp) under
// tcp's magic and version. The first 128 bytes are a Hello as an acceptor reads it
// off a new connection, the next 40 a Welcome as a connector reads the answer.
// After them, an AuthHello, a Challenge and a Proof of the authenticated handshake
// (ip/common auth.hpp) as an acceptor holding the fuzz key judges them.
// Invariants: an accepted Hello is of this partition, for this node, from a known
// peer with an incarnation; a refusal always says what was found; the only proof
// that passes is the one made with the key for this very AuthHello and Challenge.
#include "fuzz.hpp"

#include <msgpass/ip/auth.hpp>
#include <msgpass/tcp/protocol.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>

using namespace msgpass;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < sizeof(ip::Hello)) return 0;
    ip::Hello hello;
    std::memcpy(&hello, data, sizeof hello);
    if (hello.magic != tcp::magic) return 0; // closed without an answer before check_hello
    const ip::Acceptor acceptor{tcp::protocol, "fuzz", 1, [](std::uint32_t id) { return id == 2 || id == 3; }};
    const ip::Verdict verdict = ip::check_hello(hello, acceptor);
    if (verdict.accepted()) {
        msgpass::fuzz::accepted();
        MSGPASS_FUZZ_CHECK(hello.version == tcp::protocol_version);
        MSGPASS_FUZZ_CHECK(hello.partition_length == 4);
        MSGPASS_FUZZ_CHECK(std::string_view(hello.partition, 4) == "fuzz");
        MSGPASS_FUZZ_CHECK(hello.to == 1 && (hello.from == 2 || hello.from == 3) && hello.incarnation != 0);
    } else {
        MSGPASS_FUZZ_CHECK(!verdict.detail.empty());
        MSGPASS_FUZZ_CHECK(!ip::describe(verdict.refusal).empty());
    }
    if (size < sizeof(ip::Hello) + sizeof(ip::Welcome)) return 0;
    ip::Welcome answer;
    std::memcpy(&answer, data + sizeof(ip::Hello), sizeof answer);
    const ip::Answer kind = ip::check_answer(answer, tcp::protocol, 2, 1);
    if (kind == ip::Answer::welcome || kind == ip::Answer::refusal) {
        MSGPASS_FUZZ_CHECK(answer.magic == tcp::magic && answer.from == 1 && answer.to == 2);
    }
    (void)ip::refusal_reason(answer);

    constexpr std::size_t at = sizeof(ip::Hello) + sizeof(ip::Welcome);
    if (size < at + sizeof(ip::AuthHello) + sizeof(ip::Challenge) + sizeof(ip::Proof)) return 0;
    ip::AuthHello auth_hello;
    ip::Challenge challenge;
    ip::Proof proof;
    std::memcpy(&auth_hello, data + at, sizeof auth_hello);
    std::memcpy(&challenge, data + at + sizeof auth_hello, sizeof challenge);
    std::memcpy(&proof, data + at + sizeof auth_hello + sizeof challenge, sizeof proof);
    ip::AuthKey key{};
    key.fill(0x5a);
    (void)ip::challenge_proves_key(key, auth_hello, challenge);
    if (ip::proof_proves_key(key, auth_hello, challenge, proof)) {
        msgpass::fuzz::accepted();
        const ip::Proof right = ip::make_proof(key, auth_hello, challenge);
        MSGPASS_FUZZ_CHECK(std::memcmp(&right, &proof, sizeof proof) == 0);
    }
    return 0;
}
