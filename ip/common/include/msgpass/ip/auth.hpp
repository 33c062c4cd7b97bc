// The authenticated handshake of the ip technologies (network key auth_key_file,
// docs/security.md). With a key, the plain exchange (Hello -> Welcome) becomes a
// challenge-response in which both sides contribute a fresh random nonce and prove
// they hold the partition's 32-byte key with a MAC (libsodium's crypto_auth,
// HMAC-SHA-512-256) over everything said so far:
//
//   connector                                      acceptor
//   AuthHello {Hello kind=hello_auth, nonce_c}  ->
//                                               <-  Challenge {header, nonce_a, mac_a}
//     mac_a = MAC(key, "msgpass/ip acceptor"  | AuthHello | Challenge header | nonce_a)
//   Proof {header, mac_c}                       ->
//     mac_c = MAC(key, "msgpass/ip connector" | AuthHello | Challenge | Proof header)
//                                               <-  Welcome (or a refusal)
//
// The connector checks mac_a before it proves anything, so a listener without the
// key learns nothing it could replay; the acceptor checks mac_c, which covers its own
// fresh nonce, so a recorded handshake replayed later is refused (bad_proof). The
// two labels keep one side's MAC from serving as the other's. The messages have the
// layout of handshake.hpp's, little-endian, and are the wire image.
#pragma once

#include <msgpass/config/auth_key.hpp>
#include <msgpass/ip/handshake.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>

namespace msgpass::ip {

using AuthKey = config::AuthKey;
using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// The kinds of the authenticated exchange, beside handshake.hpp's Kind values.
inline constexpr std::uint16_t kind_hello_auth = 4; // a Hello followed by the connector's nonce
inline constexpr std::uint16_t kind_challenge = 5;  // acceptor -> connector: its nonce and proof
inline constexpr std::uint16_t kind_proof = 6;      // connector -> acceptor: its proof

// Connector -> acceptor, 160 bytes: a Hello whose kind is kind_hello_auth.
struct AuthHello {
    Hello hello;
    Nonce nonce{};
};
static_assert(sizeof(AuthHello) == 160);

// Acceptor -> connector, 104 bytes. The header is a Welcome of kind kind_challenge
// (next_expected and reason 0).
struct Challenge {
    Welcome header;
    Nonce nonce{};
    Mac mac{};
};
static_assert(sizeof(Challenge) == 104);

// Connector -> acceptor, 72 bytes. The header is a Welcome of kind kind_proof from
// the connector to the acceptor (next_expected and reason 0).
struct Proof {
    Welcome header;
    Mac mac{};
};
static_assert(sizeof(Proof) == 72);

// A fresh random nonce (libsodium's randombytes_buf).
[[nodiscard]] Nonce new_nonce();

// The connector's first message: make_hello's Hello, kind hello_auth, a fresh nonce.
[[nodiscard]] AuthHello make_auth_hello(const Protocol& protocol, std::uint32_t from, std::uint32_t to,
                                        std::uint64_t incarnation, std::string_view partition);

// The acceptor's answer to an AuthHello that passed check_hello: a fresh nonce and
// the MAC proving the key.
[[nodiscard]] Challenge make_challenge(const AuthKey& key, const AuthHello& hello, const Protocol& protocol,
                                       std::uint32_t self, std::uint64_t incarnation);

// Whether the challenge proves that the acceptor holds the key (constant time).
[[nodiscard]] bool challenge_proves_key(const AuthKey& key, const AuthHello& hello, const Challenge& challenge);

// The connector's proof, made only after challenge_proves_key.
[[nodiscard]] Proof make_proof(const AuthKey& key, const AuthHello& hello, const Challenge& challenge);

// Whether the proof answers this challenge with the key (constant time). A proof made
// for another challenge (a replay) does not.
[[nodiscard]] bool proof_proves_key(const AuthKey& key, const AuthHello& hello, const Challenge& challenge,
                                    const Proof& proof);

// For a protocol that builds its own exchange from these pieces (udp, whose hello
// carries a nonce and whose welcome a MAC over the hello's nonce): the MAC of the
// parts in order, and a constant-time comparison.
[[nodiscard]] Mac mac_over(const AuthKey& key, std::initializer_list<std::span<const std::byte>> parts);
[[nodiscard]] bool same_mac(const Mac& a, const Mac& b) noexcept;

// Whether a Hello's kind is the one an acceptor with (authenticated) or without a
// key expects; check_hello takes both kinds, this says which one is wanted.
[[nodiscard]] constexpr bool hello_kind_matches(const Hello& hello, bool authenticated) noexcept {
    return hello.kind == (authenticated ? kind_hello_auth : static_cast<std::uint16_t>(Kind::hello));
}

} // namespace msgpass::ip
