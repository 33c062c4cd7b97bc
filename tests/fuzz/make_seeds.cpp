// Writes the seed inputs of the decoder fuzz targets (tests/fuzz/corpus/<target>/
// seed-*) with the library's own encoders, so that each seed is a well-formed input
// of today's format: scripts/fuzz.sh --seeds runs it after a format change. The
// configuration seeds are the example files, copied by scripts/fuzz.sh.
//   fuzz_make_seeds CORPUS_DIR
#include <msgpass/ip/auth.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/udp/protocol.hpp>

#include "../support/udp_packed.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <string>
#include <vector>

using namespace msgpass;

namespace {

std::filesystem::path root;

void write(const std::string& target, const std::string& name, const std::vector<std::byte>& bytes) {
    const auto dir = root / target;
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / ("seed-" + name), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <class T>
void append(std::vector<std::byte>& out, const T& value) {
    const std::size_t at = out.size(); // resize and copy: GCC 12's -Wstringop-overflow misfires on insert here
    out.resize(at + sizeof value);
    std::memcpy(out.data() + at, &value, sizeof value);
}

udp::DatagramHeader udp_header(udp::DatagramType type) {
    udp::DatagramHeader h;
    h.magic = udp::magic;
    h.version = udp::protocol_version;
    h.type = static_cast<std::uint16_t>(type);
    h.from = 2;
    h.to = 1;
    h.partition = udp::partition_hash("fuzz");
    h.incarnation = 0x1234567890abcdefull;
    h.peer_incarnation = 0x0fedcba987654321ull;
    return h;
}

// A packed data datagram (tests/support/udp_packed.hpp) of messages of these sizes.
std::vector<std::byte> packed_datagram(std::uint64_t seq, std::initializer_list<std::uint32_t> sizes) {
    auto h = udp_header(udp::DatagramType::data);
    h.seq = seq;
    return msgpass::test::packed_datagram(h, std::vector<std::uint32_t>(sizes));
}

void udp_seeds() {
    for (std::uint32_t piece : {0u, 1u, 100u, 1408u}) {
        auto h = udp_header(udp::DatagramType::data);
        h.seq = 7;
        h.length = piece;
        h.offset = 0;
        h.flags = udp::flag_first;
        std::vector<std::byte> out;
        append(out, h);
        out.resize(out.size() + piece, std::byte{0x5a});
        write("udp_datagram", "data-" + std::to_string(piece), out);
    }
    {
        auto h = udp_header(udp::DatagramType::data); // a middle piece of a 3000-byte message
        h.seq = 8;
        h.length = 3000;
        h.offset = 1408;
        std::vector<std::byte> out;
        append(out, h);
        out.resize(out.size() + 1408, std::byte{0xa5});
        write("udp_datagram", "data-middle", out);
    }
    {
        auto h = udp_header(udp::DatagramType::nak);
        std::vector<std::byte> out;
        append(out, h);
        append(out, std::uint64_t{3});
        append(out, std::uint64_t{2});
        append(out, std::uint64_t{9});
        append(out, std::uint64_t{1});
        write("udp_datagram", "nak", out);
    }
    for (auto [type, name] : {std::pair{udp::DatagramType::hello, "hello"},
                              {udp::DatagramType::welcome, "welcome"},
                              {udp::DatagramType::status, "status"},
                              {udp::DatagramType::keepalive, "keepalive"},
                              {udp::DatagramType::goodbye, "goodbye"}}) {
        auto h = udp_header(type);
        h.seq = 42;
        h.length = 64;
        std::vector<std::byte> out;
        append(out, h);
        write("udp_datagram", name, out);
    }
    {
        auto h = udp_header(udp::DatagramType::skip); // datagrams 10..41 of 3 messages dropped
        h.seq = 42;
        h.length = 10;
        h.offset = 3;
        std::vector<std::byte> out;
        append(out, h);
        write("udp_datagram", "skip", out);
    }
    // A packed data datagram: messages of 64, 0 and 13 bytes, a frame each.
    write("udp_datagram", "data-packed", packed_datagram(7, {64, 0, 13}));
    {
        // The last datagram of a flush, a packed one asking for a status at once; the
        // request alone.
        auto bytes = packed_datagram(9, {64, 64});
        udp::DatagramHeader h;
        std::memcpy(&h, bytes.data(), sizeof h);
        h.flags |= udp::flag_status_now;
        std::memcpy(bytes.data(), &h, sizeof h);
        write("udp_datagram", "data-packed-asking", bytes);
        std::vector<std::byte> out;
        append(out, udp_header(udp::DatagramType::status_request));
        write("udp_datagram", "status-request", out);
    }
    {
        // A reply carrying the status of the other direction (flag_ack): a lone message
        // of 64 bytes as a plain piece, then the trailer (next expected 7, window 1024).
        auto h = udp_header(udp::DatagramType::data);
        h.seq = 3;
        h.length = 64;
        h.flags = udp::flag_first | udp::flag_ack;
        std::vector<std::byte> out;
        append(out, h);
        out.resize(out.size() + 64, std::byte{0x5a});
        append(out, udp::AckTrailer{7, 1024});
        write("udp_datagram", "data-carrying-ack", out);
    }
}

void frame_seeds() {
    for (auto [header, name] : {std::pair{tcp::data_frame(0, 64), "data"},
                                {tcp::data_frame(9, 0), "data-empty"},
                                {tcp::ack_frame(10), "ack"},
                                {tcp::goodbye_frame(3), "goodbye"}}) {
        std::vector<std::byte> out(tcp::frame_header_size);
        tcp::encode(header, out.data());
        write("ip_frame", name, out);
    }
}

void handshake_seeds() {
    const auto hello = tcp::make_hello(2, 1, 0x1234567890abcdefull, "fuzz");
    for (auto [answer, name] :
         {std::pair{ip::make_welcome(tcp::protocol, 1, 2, 0x0fedcba987654321ull, 5), "welcome"},
          {ip::make_refusal(tcp::protocol, 1, 2, 0x0fedcba987654321ull, ip::Refusal::wrong_partition), "refusal"}}) {
        std::vector<std::byte> out;
        append(out, hello);
        append(out, answer);
        write("ip_handshake", name, out);
    }
    // An authenticated exchange with the target's key whose proof passes.
    ip::AuthKey key{};
    key.fill(0x5a);
    const auto auth_hello = ip::make_auth_hello(tcp::protocol, 2, 1, 0x1234567890abcdefull, "fuzz");
    const auto challenge = ip::make_challenge(key, auth_hello, tcp::protocol, 1, 0x0fedcba987654321ull);
    std::vector<std::byte> out;
    append(out, hello);
    append(out, ip::make_welcome(tcp::protocol, 1, 2, 0x0fedcba987654321ull, 5));
    append(out, auth_hello);
    append(out, challenge);
    append(out, ip::make_proof(key, auth_hello, challenge));
    write("ip_handshake", "auth-proof", out);
}

// tcp_stream: the frames a connector writes after its handshake.
void stream_seeds() {
    auto frame = [](std::vector<std::byte>& out, std::uint64_t seq, std::size_t length) {
        const std::size_t at = out.size();
        out.resize(at + tcp::frame_header_size + length, std::byte{0x42});
        tcp::encode(tcp::data_frame(seq, length), out.data() + at);
    };
    std::vector<std::byte> one;
    frame(one, 0, 100);
    write("tcp_stream", "one-message", one);
    std::vector<std::byte> three;
    frame(three, 0, 0);
    frame(three, 1, 1);
    frame(three, 2, 4096);
    write("tcp_stream", "three-messages", three);
    std::vector<std::byte> goodbye;
    frame(goodbye, 0, 8);
    goodbye.resize(goodbye.size() + tcp::frame_header_size);
    tcp::encode(tcp::goodbye_frame(0), goodbye.data() + goodbye.size() - tcp::frame_header_size);
    write("tcp_stream", "message-then-goodbye", goodbye);
    // Compact frames (frame.hpp) between full ones: a plain one, one carrying an
    // acknowledgement, then a full frame numbered after them.
    auto compact = [](std::vector<std::byte>& out, std::size_t length, bool acked) {
        const std::size_t at = out.size();
        out.resize(at + tcp::compact_header_size + length, std::byte{0x43});
        const std::uint32_t c[2] = {tcp::compact_word(length, acked), 0};
        std::memcpy(out.data() + at, c, sizeof c);
    };
    std::vector<std::byte> mixed;
    compact(mixed, 64, false);
    compact(mixed, 8, true);
    frame(mixed, 2, 100);
    compact(mixed, 0, false);
    write("tcp_stream", "compact-frames", mixed);
}

// udp_stream: datagrams, each [u16 length][bytes]; the harness makes the identity
// fields right, so only type, seq, length, offset, flags and payload matter here.
void udp_stream_seeds() {
    auto datagram = [](std::vector<std::byte>& out, udp::DatagramType type, std::uint64_t seq, std::uint64_t length,
                       std::uint32_t offset, std::uint16_t flags, std::size_t piece) {
        auto h = udp_header(type);
        h.seq = seq;
        h.length = length;
        h.offset = offset;
        h.flags = flags;
        const auto size = static_cast<std::uint16_t>(udp::header_size + piece);
        append(out, size);
        append(out, h);
        out.resize(out.size() + piece, std::byte{0x33});
    };
    std::vector<std::byte> one;
    datagram(one, udp::DatagramType::data, 0, 100, 0, udp::flag_first, 100);
    write("udp_stream", "one-message", one);
    std::vector<std::byte> pieces; // a 3000-byte message in three pieces, the last first
    datagram(pieces, udp::DatagramType::data, 2, 3000, 2816, 0, 184);
    datagram(pieces, udp::DatagramType::data, 0, 3000, 0, udp::flag_first, 1408);
    datagram(pieces, udp::DatagramType::data, 1, 3000, 1408, 0, 1408);
    datagram(pieces, udp::DatagramType::data, 3, 0, 0, udp::flag_first, 0);
    write("udp_stream", "pieces-out-of-order", pieces);
    std::vector<std::byte> gap; // a gap, a duplicate, then a goodbye
    datagram(gap, udp::DatagramType::data, 0, 10, 0, udp::flag_first, 10);
    datagram(gap, udp::DatagramType::data, 2, 10, 0, udp::flag_first, 10);
    datagram(gap, udp::DatagramType::data, 0, 10, 0, udp::flag_first, 10);
    datagram(gap, udp::DatagramType::data, 1, 10, 0, udp::flag_first, 10);
    datagram(gap, udp::DatagramType::goodbye, 3, 0, 0, 0, 0);
    write("udp_stream", "gap-duplicate-goodbye", gap);
    std::vector<std::byte> skip; // half a message, a skip over it and one more, then the next message
    datagram(skip, udp::DatagramType::data, 0, 10, 0, udp::flag_first, 10);
    datagram(skip, udp::DatagramType::data, 1, 3000, 0, udp::flag_first, 1408);
    datagram(skip, udp::DatagramType::skip, 4, 1, 2, 0, 0);
    datagram(skip, udp::DatagramType::data, 4, 10, 0, udp::flag_first, 10);
    datagram(skip, udp::DatagramType::skip, 4, 1, 2, 0, 0);
    write("udp_stream", "skip-over-half-a-message", skip);
    std::vector<std::byte> packed; // a packed datagram after a message and before another, then its duplicate
    datagram(packed, udp::DatagramType::data, 0, 10, 0, udp::flag_first, 10);
    for (const auto& d : {packed_datagram(1, {64, 0, 13}), packed_datagram(2, {1, 2}), packed_datagram(1, {64})}) {
        append(packed, static_cast<std::uint16_t>(d.size()));
        packed.insert(packed.end(), d.begin(), d.end());
    }
    write("udp_stream", "packed", packed);
    std::vector<std::byte> flush; // the last datagrams of flushes ask for a status, then a status_request
    const auto asking = static_cast<std::uint16_t>(udp::flag_first | udp::flag_status_now);
    datagram(flush, udp::DatagramType::data, 0, 10, 0, asking, 10);
    datagram(flush, udp::DatagramType::data, 1, 2000, 0, udp::flag_first, 1408);
    datagram(flush, udp::DatagramType::data, 2, 2000, 1408, udp::flag_status_now, 592);
    datagram(flush, udp::DatagramType::status_request, 0, 0, 0, 0, 0);
    write("udp_stream", "flush-asks-a-status", flush);
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2 || argv[1][0] == '-') { // an option is no directory ("--help" would be made one)
        std::cerr << "usage: fuzz_make_seeds CORPUS_DIR\n"
                     "writes the seed inputs of each target into CORPUS_DIR/<target>/seed-*\n";
        return argc == 2 && std::string(argv[1]) == "--help" ? 0 : 2;
    }
    root = argv[1];
    udp_seeds();
    frame_seeds();
    handshake_seeds();
    stream_seeds();
    udp_stream_seeds();
    std::cout << "seeds written under " << root << "\n";
    return 0;
}
