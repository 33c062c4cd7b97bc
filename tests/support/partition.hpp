// Test support: a partition built in code (no files), with a name unique to the
// test so that tests run in parallel without sharing segments, and checksummed,
// numbered payloads to check integrity and order.
#pragma once

#include <msgpass/msgpass.hpp>

#include <boost/crc.hpp>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <pwd.h>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace msgpass::test {

inline std::string unique_partition(const std::string& tag) {
    static int counter = 0;
    std::string clean;
    for (char ch : tag.substr(0, 40))
        clean += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
    return "t" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" + clean;
}

// Removes every shared-memory segment of a partition when the test ends, even when
// it fails: processes a test killed leave theirs behind.
class SegmentCleanup {
public:
    explicit SegmentCleanup(std::string partition) : partition_(std::move(partition)) {}
    SegmentCleanup(const SegmentCleanup&) = delete;
    SegmentCleanup& operator=(const SegmentCleanup&) = delete;
    ~SegmentCleanup() {
        const passwd* pw = getpwuid(geteuid());
        const std::string user = pw != nullptr ? pw->pw_name : "uid" + std::to_string(geteuid());
        const std::string prefix = "msgpass." + user + "." + partition_ + ".";
        std::error_code ec;
        for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
            const auto name = entry.path().filename().string();
            if (name.rfind(prefix, 0) == 0) ::shm_unlink(("/" + name).c_str());
        }
    }
    [[nodiscard]] const std::string& partition() const { return partition_; }

private:
    std::string partition_;
};

// A configuration of nodes 1..n on localhost; tweak changes the top level, which
// every node then inherits (change node scope on the result).
inline config::Configuration make_configuration(const std::string& technology, const std::string& partition, int n,
                                                const std::function<void(config::Configuration&)>& tweak = {}) {
    config::Configuration c;
    c.partition = partition;
    c.technology = technology;
    c.network_file = "network.yaml";
    c.nodes_file = "nodes.yaml";
    for (int i = 1; i <= n; ++i) {
        config::NodeConfig node;
        node.id = static_cast<NodeId>(i);
        node.name = "node-" + std::to_string(i);
        c.nodes.push_back(node);
    }
    if (tweak) tweak(c);
    for (auto& node : c.nodes)
        node.sci = c.sci; // node scope inherits the top-level context
    return c;
}

// A payload: [stream:4][seq:8][crc:4][bytes...], bytes derived from (stream, seq).
struct PayloadHeader {
    std::uint32_t stream;
    std::uint64_t seq;
    std::uint32_t crc;
} __attribute__((packed));

inline std::uint32_t crc_of(const std::byte* p, std::size_t n) {
    boost::crc_32_type crc;
    crc.process_bytes(p, n);
    return crc.checksum();
}

inline void fill_payload(std::span<std::byte> bytes, std::uint32_t stream, std::uint64_t seq) {
    std::uint64_t x = seq * 0x9e3779b97f4a7c15ULL + stream + 1;
    const std::size_t start = bytes.size() >= sizeof(PayloadHeader) ? sizeof(PayloadHeader) : 0;
    for (std::size_t i = start; i < bytes.size(); ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes[i] = static_cast<std::byte>(x);
    }
    if (bytes.size() >= sizeof(PayloadHeader)) {
        PayloadHeader h{stream, seq, crc_of(bytes.data() + start, bytes.size() - start)};
        std::memcpy(bytes.data(), &h, sizeof h);
    }
}

inline BufferPtr make_message(NodeFactory& factory, std::size_t size, std::uint32_t stream, std::uint64_t seq) {
    auto b = factory.create_buffer(size);
    fill_payload(b->single()->bytes(), stream, seq);
    return b;
}

// Checks a received payload; returns its header (stream, seq) or throws a string.
inline PayloadHeader check_payload(const Buffer& b) {
    const auto* s = b.single();
    if (s == nullptr) throw std::string("received buffer is not contiguous");
    if (s->size() < sizeof(PayloadHeader)) throw std::string("payload too short");
    PayloadHeader h{};
    std::memcpy(&h, s->data(), sizeof h);
    if (crc_of(s->data() + sizeof h, s->size() - sizeof h) != h.crc) {
        throw std::string("checksum mismatch in stream ") + std::to_string(h.stream) + " message " +
            std::to_string(h.seq);
    }
    return h;
}

} // namespace msgpass::test
