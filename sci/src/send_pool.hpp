// The send buffers of the local node (seed section 4, allocate_send_buffer): a
// pre-allocated pool (use_send_pool) and, for the heap, small buffers that live in
// one recycled block with their bytes. A message costs no heap allocation and no
// lock on either path: the pool hands its buffers out and takes them back through
// a bounded lock-free queue of their numbers (Vyukov's MPMC ring: one
// compare-exchange each way), and its buffer objects are built in place in the
// pool's own memory. In front of the queue, each thread keeps a few entries of the
// pool it used last (no atomic operation at all while a thread makes and drops its
// own messages, as a stream's sender does: the queue's four atomic operations per
// message were 16 % of a 64-byte stream's profile).
#pragma once

#include <msgpass/buffer.hpp>

#include <msgpass/kit/block_cache.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace msgpass::sci {

class SendPool {
public:
    // A pool of count buffers of buffer_size bytes each. It lives until close() was
    // called and every buffer it handed out came back (buffers may outlive the
    // factory), so it is made here and never deleted by its user.
    static SendPool* create(std::uint32_t count, std::size_t buffer_size);
    SendPool(const SendPool&) = delete;
    SendPool& operator=(const SendPool&) = delete;

    // A buffer of size bytes (at most buffer_size()), or null when every buffer is
    // out. Any thread.
    BufferPtr get(std::size_t size);
    // The owner lets go; the pool ends now or when its last buffer comes back.
    void close() noexcept;

    [[nodiscard]] std::size_t buffer_size() const noexcept { return buffer_size_; }
    [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
    // Buffers not handed out (exact when no other thread uses the pool).
    [[nodiscard]] std::uint32_t available() const noexcept;

    class Pooled; // a buffer of the pool: its operator delete gives it back

private:
    SendPool(std::uint32_t count, std::size_t buffer_size);
    ~SendPool();
    struct Cell {
        std::atomic<std::uint64_t> sequence;
        std::uint32_t entry;
    };
    struct Entry;
    struct ThreadCache;
    bool pop(std::uint32_t& entry) noexcept;
    void push(std::uint32_t entry) noexcept;
    void give_back(std::uint32_t entry) noexcept;
    // Back to the shared queue: the buffer is no longer out.
    void return_shared(std::uint32_t entry) noexcept;

    std::uint32_t count_;
    std::size_t buffer_size_;
    std::uint64_t mask_; // cells - 1 (a power of two of at least count_ cells)
    std::unique_ptr<Cell[]> cells_;
    std::unique_ptr<Entry[]> entries_;
    std::unique_ptr<std::byte[]> memory_;
    alignas(64) std::atomic<std::uint64_t> enqueue_{0};
    alignas(64) std::atomic<std::uint64_t> dequeue_{0};
    // Buffers handed out, with closing_bit once the owner let go: whoever brings it
    // to exactly closing_bit (the owner or the last buffer) deletes the pool.
    alignas(64) std::atomic<std::uint64_t> out_{0};
    static constexpr std::uint64_t closing_bit = std::uint64_t{1} << 63;
};

// A heap buffer of up to small_buffer_capacity bytes (4 KiB) whose object and bytes
// share one block of a per-thread cache (BlockCache, a few size classes): no
// allocation per message. Larger sizes return null (the caller takes a HeapBuffer).
inline constexpr std::size_t small_buffer_block = 256;
inline constexpr std::size_t small_buffer_largest_block = 4160;
BufferPtr small_heap_buffer(std::size_t size);
std::size_t small_buffer_capacity() noexcept;

} // namespace msgpass::sci
