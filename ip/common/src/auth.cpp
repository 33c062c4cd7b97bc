// The authenticated handshake of the ip technologies (see auth.hpp).
#include <msgpass/ip/auth.hpp>

#include <sodium.h>

#include <cstring>
#include <stdexcept>
#include <string_view>

namespace msgpass::ip {

namespace {

static_assert(crypto_auth_KEYBYTES == sizeof(AuthKey));
static_assert(crypto_auth_BYTES == sizeof(Mac));

constexpr std::string_view acceptor_label = "msgpass/ip acceptor";
constexpr std::string_view connector_label = "msgpass/ip connector";

void ensure_sodium() {
    // sodium_init is idempotent and thread-safe; it fails only when the system has no
    // source of randomness, without which no nonce can be fresh.
    if (::sodium_init() < 0) throw std::runtime_error("libsodium could not be initialised (no randomness)");
}

class Mac_state {
public:
    explicit Mac_state(const AuthKey& key) { crypto_auth_hmacsha512256_init(&state_, key.data(), key.size()); }
    Mac_state(const Mac_state&) = delete;
    Mac_state& operator=(const Mac_state&) = delete;
    ~Mac_state() { ::sodium_memzero(&state_, sizeof state_); }

    template <class T>
    Mac_state& add(const T& value) {
        crypto_auth_hmacsha512256_update(&state_, reinterpret_cast<const unsigned char*>(&value), sizeof value);
        return *this;
    }
    Mac_state& add(std::string_view text) {
        crypto_auth_hmacsha512256_update(&state_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
        return *this;
    }
    Mac finish() {
        Mac mac{};
        crypto_auth_hmacsha512256_final(&state_, mac.data());
        return mac;
    }

private:
    crypto_auth_hmacsha512256_state state_{};
};

Mac acceptor_mac(const AuthKey& key, const AuthHello& hello, const Welcome& header, const Nonce& nonce) {
    return Mac_state(key).add(acceptor_label).add(hello).add(header).add(nonce).finish();
}

Mac connector_mac(const AuthKey& key, const AuthHello& hello, const Challenge& challenge, const Welcome& header) {
    return Mac_state(key).add(connector_label).add(hello).add(challenge).add(header).finish();
}

} // namespace

Mac mac_over(const AuthKey& key, std::initializer_list<std::span<const std::byte>> parts) {
    Mac_state state(key);
    for (const auto part : parts)
        state.add(std::string_view(reinterpret_cast<const char*>(part.data()), part.size()));
    return state.finish();
}

bool same_mac(const Mac& a, const Mac& b) noexcept {
    return ::sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

Nonce new_nonce() {
    ensure_sodium();
    Nonce nonce{};
    ::randombytes_buf(nonce.data(), nonce.size());
    return nonce;
}

AuthHello make_auth_hello(const Protocol& protocol, std::uint32_t from, std::uint32_t to, std::uint64_t incarnation,
                          std::string_view partition) {
    AuthHello h;
    h.hello = make_hello(protocol, from, to, incarnation, partition);
    h.hello.kind = kind_hello_auth;
    h.nonce = new_nonce();
    return h;
}

Challenge make_challenge(const AuthKey& key, const AuthHello& hello, const Protocol& protocol, std::uint32_t self,
                         std::uint64_t incarnation) {
    Challenge c;
    c.header = make_welcome(protocol, self, hello.hello.from, incarnation, 0);
    c.header.kind = kind_challenge;
    c.nonce = new_nonce();
    c.mac = acceptor_mac(key, hello, c.header, c.nonce);
    return c;
}

bool challenge_proves_key(const AuthKey& key, const AuthHello& hello, const Challenge& challenge) {
    return same_mac(challenge.mac, acceptor_mac(key, hello, challenge.header, challenge.nonce));
}

Proof make_proof(const AuthKey& key, const AuthHello& hello, const Challenge& challenge) {
    Proof p;
    p.header = challenge.header;
    p.header.kind = kind_proof;
    p.header.from = challenge.header.to;
    p.header.to = challenge.header.from;
    p.header.incarnation = hello.hello.incarnation;
    p.mac = connector_mac(key, hello, challenge, p.header);
    return p;
}

bool proof_proves_key(const AuthKey& key, const AuthHello& hello, const Challenge& challenge, const Proof& proof) {
    if (proof.header.kind != kind_proof || proof.header.from != hello.hello.from || proof.header.to != hello.hello.to ||
        proof.header.incarnation != hello.hello.incarnation) {
        return false;
    }
    return same_mac(proof.mac, connector_mac(key, hello, challenge, proof.header));
}

} // namespace msgpass::ip
