// The Buffer-free send of udp (docs/udp.md, "Packed datagrams"): a small message
// given to send_bytes is copied straight into the pack, with no buffer object made
// for it. The test binary counts the allocations (operator new) of the sending
// thread while it sends; the framework's default send_bytes made a HeapBuffer per
// message.
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <msgpass/msgpass.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {
thread_local bool counting = false;
thread_local std::uint64_t allocations = 0;
} // namespace

// (GCC takes the free() of the replaced delete, inlined after a new, for a mismatch.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
    if (counting) ++allocations;
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
#pragma GCC diagnostic pop

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

std::vector<std::byte> message_of(std::uint64_t i, std::size_t size) {
    std::vector<std::byte> bytes(size);
    for (std::size_t k = 0; k < size; ++k)
        bytes[k] = static_cast<std::byte>((i * 131 + k) & 0xff);
    return bytes;
}

// 2000 messages of 64 B through send_bytes, queued before the peer starts (so that
// they pack whatever the timing: nothing leaves before the peer's welcome): the
// sending thread allocates for the packs and the queue (one entry a pack of 19), not
// per message; and every message arrives once, in order, intact.
TEST(UdpBytes, SmallMessagesSentAsBytesAreCopiedIntoThePackWithoutAnAllocationEach) {
    auto c = make_configuration("udp", unique_partition("bytes"), 2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    constexpr std::uint64_t n = 2000;
    std::vector<std::byte> scratch(64);
    for (std::uint64_t i = 0; i < n; ++i) {
        const auto bytes = message_of(i, 64);
        std::memcpy(scratch.data(), bytes.data(), bytes.size());
        counting = true;
        to_b->send_bytes(scratch);
        counting = false;
    }
    const std::uint64_t counted = allocations;
    EXPECT_LT(counted, n / 4) << "an allocation per message sent as bytes";
    auto b = NodeFactory::create(c, 2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i < n; ++i) {
        auto got = from_a->receive(10s);
        ASSERT_NE(got, nullptr) << "message " << i << " never arrived";
        const auto expected = message_of(i, 64);
        ASSERT_EQ(got->size(), expected.size()) << "message " << i;
        ASSERT_NE(got->single(), nullptr);
        ASSERT_EQ(std::memcmp(got->single()->bytes().data(), expected.data(), expected.size()), 0) << "message " << i;
    }
    EXPECT_TRUE(to_b->flush(10s));
    EXPECT_EQ(from_a->receive(), nullptr);
}

} // namespace
} // namespace msgpass::test
