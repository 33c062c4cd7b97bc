// Recycled memory for large messages, for every technology and the communicator. A
// fresh buffer per message costs a page fault per 4 KiB written into it: glibc maps
// every block of 128 KiB or more anew and unmaps it when freed, and gives the top of
// its heap back once more than 128 KiB are free there, so a window of messages in
// flight was copied into newly mapped pages every time (a flat ~290 MB/s for the
// communicator's rendezvous over sci, 0.4x the ring for a 4 MiB sci stream). A buffer
// of pooled_from bytes or more takes its memory from here instead. Blocks come in
// size classes, four per power of two (a block is at most 25 % larger than asked),
// and a freed one is kept for the next buffer of its class; the kept blocks hold at
// most keep_bytes, the classes holding most of them making room first, so that the
// sizes in use now keep their memory and those of the past lose it. Smaller buffers
// are one allocation each (InlineBuffer). Thread-safe; each buffer holds its pool, so
// blocks outlive the pool's other owners (a Buffer may outlive its factory).
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/kit/block_cache.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace msgpass::kit {

// A small message in one allocation: the object and its bytes together (a
// HeapBuffer takes two), which is a tenth of the cost of a 64-byte message in a
// stream. Up to small_block bytes in all, the block comes from a per-thread cache
// (BlockCache) instead of the heap: the thread that frees a message (the background
// thread of tcp and udp, once the peer acknowledged it) is seldom the one that made
// it, and glibc's per-thread caches then miss on every allocation (_int_malloc was
// 11 % of a tcp 64-byte stream's sender).
class InlineBuffer final : public SingleBuffer {
public:
    static constexpr std::size_t small_block = 256;
    static BufferPtr make(std::size_t size);
    static void operator delete(void* p) { ::operator delete(p); }

private:
    explicit InlineBuffer(std::size_t size) { reset(reinterpret_cast<std::byte*>(this + 1), size, size); }
};

namespace detail {
class CachedInlineBuffer final : public SingleBuffer {
public:
    using Cache = BlockCache<InlineBuffer::small_block>;
    static constexpr std::size_t header =
        (sizeof(SingleBuffer) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    static constexpr std::size_t capacity = InlineBuffer::small_block - header;
    explicit CachedInlineBuffer(std::size_t size) noexcept {
        reset(reinterpret_cast<std::byte*>(this) + header, size, capacity);
    }
    static void* operator new(std::size_t) { return Cache::get(); }
    static void operator delete(void* p) noexcept { Cache::put(p); }
};
static_assert(sizeof(CachedInlineBuffer) <= CachedInlineBuffer::header);
} // namespace detail

inline BufferPtr InlineBuffer::make(std::size_t size) {
    if (size <= detail::CachedInlineBuffer::capacity) return std::make_unique<detail::CachedInlineBuffer>(size);
    void* memory = ::operator new(sizeof(InlineBuffer) + size);
    return BufferPtr(new (memory) InlineBuffer(size));
}

class BufferPool : public std::enable_shared_from_this<BufferPool> {
public:
    // The factories pool from 64 KiB on (below, a message is copied once and its
    // pages are warm); the communicator from 4 KiB (its eager messages of bytes).
    static constexpr std::size_t default_pooled_from = 64 * 1024;
    static constexpr std::size_t default_keep_bytes = 32 * 1024 * 1024;

    // Hold it in a shared_ptr (std::make_shared): buffers keep their pool alive.
    explicit BufferPool(std::size_t pooled_from = default_pooled_from,
                        std::size_t keep_bytes = default_keep_bytes) noexcept
        : pooled_from_(pooled_from), keep_bytes_(keep_bytes) {}

    // A buffer of size bytes (size() == size): in a kept block of its class when
    // there is one, else in a new block; below pooled_from, one allocation. Any thread.
    BufferPtr make(std::size_t size);

    // The bytes of the freed blocks kept now, and how many buffers reused one.
    std::size_t kept_bytes() const;
    std::size_t reused() const;

    // The class of a size (from pooled_from on), and the capacity of a class's blocks:
    // class 4k + q holds blocks of 2^k * (4 + q) / 4 bytes, q = 0..3.
    static std::size_t class_of(std::size_t size) noexcept;
    static std::size_t capacity_of(std::size_t cls) noexcept;

private:
    class Pooled;
    static constexpr std::size_t classes = 4 * 48; // blocks up to 2^48 bytes
    void give(std::size_t cls, std::unique_ptr<std::byte[]> memory) noexcept;

    const std::size_t pooled_from_;
    const std::size_t keep_bytes_;
    mutable std::mutex mutex_;
    std::array<std::vector<std::unique_ptr<std::byte[]>>, classes> free_;
    std::size_t kept_bytes_ = 0;
    std::size_t reused_ = 0;
};

} // namespace msgpass::kit
