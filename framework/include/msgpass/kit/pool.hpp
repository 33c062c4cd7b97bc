// Recycled memory for large messages (64 KiB and more), for every technology: a
// fresh buffer of a megabyte per message costs page faults on every touch, and with
// glibc an mmap/munmap pair per message, which halved the bandwidth of a 1 MiB
// stream. Freed buffers return here, by power-of-two size class, and the next buffer
// of that class reuses one. A class keeps up to kept_bytes_per_class of buffers, and
// at least keep_per_class: 32 of 64 KiB, 16 of 128 KiB, 4 of 512 KiB and more, so
// that a window of messages just above 64 KiB (a communicator's 64 KiB payload
// behind its envelope) is recycled too, not mapped and unmapped by glibc per
// message (128 KiB is its mmap threshold). Thread-safe; buffers keep their pool
// alive.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/kit/block_cache.hpp>

#include <algorithm>
#include <array>
#include <bit>
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
    static constexpr std::size_t min_size = 64 * 1024;
    static constexpr std::size_t keep_per_class = 4;
    static constexpr std::size_t kept_bytes_per_class = 2 * 1024 * 1024;
    // How many freed buffers of class cls (buffers of 2^cls bytes) are kept.
    static constexpr std::size_t kept(std::size_t cls) {
        return std::max(keep_per_class, kept_bytes_per_class >> std::min<std::size_t>(cls, 63));
    }

    // A buffer of size bytes: pooled from min_size on, else one allocation.
    BufferPtr make(std::size_t size);

private:
    class Pooled;
    static constexpr std::size_t classes = 40;
    std::unique_ptr<std::byte[]> take(std::size_t cls);
    void give(std::size_t cls, std::unique_ptr<std::byte[]> memory);

    std::mutex mutex_;
    std::array<std::vector<std::unique_ptr<std::byte[]>>, classes> free_;
};

class BufferPool::Pooled final : public SingleBuffer {
public:
    Pooled(std::shared_ptr<BufferPool> pool, std::size_t cls, std::unique_ptr<std::byte[]> memory, std::size_t size)
        : pool_(std::move(pool)), cls_(cls), memory_(std::move(memory)) {
        reset(memory_.get(), size, std::size_t{1} << cls_);
    }
    ~Pooled() override { pool_->give(cls_, std::move(memory_)); }

private:
    std::shared_ptr<BufferPool> pool_;
    std::size_t cls_;
    std::unique_ptr<std::byte[]> memory_;
};

inline BufferPtr BufferPool::make(std::size_t size) {
    if (size < min_size) return InlineBuffer::make(size);
    const auto cls = static_cast<std::size_t>(std::bit_width(size - 1));
    if (cls >= classes) return std::make_unique<HeapBuffer>(size);
    auto memory = take(cls);
    if (!memory) memory = std::make_unique_for_overwrite<std::byte[]>(std::size_t{1} << cls);
    return std::make_unique<Pooled>(shared_from_this(), cls, std::move(memory), size);
}

inline std::unique_ptr<std::byte[]> BufferPool::take(std::size_t cls) {
    std::lock_guard lock(mutex_);
    auto& list = free_[cls];
    if (list.empty()) return nullptr;
    auto m = std::move(list.back());
    list.pop_back();
    return m;
}

inline void BufferPool::give(std::size_t cls, std::unique_ptr<std::byte[]> memory) {
    std::lock_guard lock(mutex_);
    if (free_[cls].size() < kept(cls)) free_[cls].push_back(std::move(memory));
}

} // namespace msgpass::kit
