// Reused memory for the messages the communicator makes of bytes (docs/communicator.md,
// "Sends"). A send of bytes copies them behind the envelope at the post (post_send's
// contract). Fresh memory for that copy cost a page fault per 4 KiB written: glibc
// maps every block of 128 KiB or more anew and unmaps it when freed, and gives the top
// of its heap back once more than 128 KiB are free there, so a window of messages in
// flight (a rendezvous window, a stream of eager messages) was copied into newly
// mapped pages every time; this made the rendezvous path a flat ~290 MB/s over sci
// (docs/mpi.md). A message of pooled_from bytes or more takes its memory from here
// instead. Blocks come in size classes (four per power of two: at most 25 % larger
// than asked) and a freed one is kept for the next message of its class; the kept
// blocks hold at most keep_bytes, those of other classes making room for it. Each
// buffer holds the pool, so blocks outlive the communicator while a node holds one
// of its messages (a Buffer may outlive its factory). Not installed. It stands beside
// the kit's BufferPool (msgpass/kit/pool.hpp), which the factories' create_buffer
// takes large buffers from: one of the two should absorb the other (issue 12's note).
#pragma once

#include <msgpass/buffer.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace msgpass::comm::detail {

class DataPool : public std::enable_shared_from_this<DataPool> {
public:
    // Messages (envelope and payload) of this many bytes or more come from the pool.
    static constexpr std::size_t pooled_from = 4096;

    // keep_bytes: the freed blocks kept for reuse hold at most this many bytes; a
    // block freed beyond it goes back to the heap.
    static std::shared_ptr<DataPool> create(std::size_t keep_bytes) {
        return std::shared_ptr<DataPool>(new DataPool(keep_bytes));
    }

    // A buffer of size bytes (size() == size), in a kept block of its class when
    // there is one, else in a new block. Any thread.
    BufferPtr make(std::size_t size);

    // The bytes of the freed blocks kept now, and how many buffers reused one.
    std::size_t kept_bytes() const {
        std::lock_guard lock(mutex_);
        return kept_bytes_;
    }
    std::size_t reused() const {
        std::lock_guard lock(mutex_);
        return reused_;
    }

    // The class of a size, and the capacity of a class's blocks.
    static std::size_t class_of(std::size_t size) noexcept;
    static std::size_t capacity_of(std::size_t cls) noexcept;

private:
    class Pooled;
    static constexpr std::size_t classes = 4 * 64;
    explicit DataPool(std::size_t keep_bytes) : keep_bytes_(keep_bytes) {}
    void give(std::size_t cls, std::unique_ptr<std::byte[]> memory) noexcept;

    const std::size_t keep_bytes_;
    mutable std::mutex mutex_;
    std::array<std::vector<std::unique_ptr<std::byte[]>>, classes> free_;
    std::size_t kept_bytes_ = 0;
    std::size_t reused_ = 0;
};

} // namespace msgpass::comm::detail
