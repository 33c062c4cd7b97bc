// The receive side's read buffer as reference-counted chunks of memory, so that the
// small messages one read brings are lent to the application in place
// (Node::receive_view, a MessageView into the chunk) instead of each being copied
// into a Buffer of its own (docs/tcp.md, "Received small messages as views").
// ReadChunk is one block with its count of references: one held by the ReadBuffer
// that reads into it, one per message lent and not released yet; the last release
// frees it, from whatever thread releases. ReadBuffer is the Receiver's read buffer
// over such chunks: it appends at its end, parses from its beginning, and before it
// would overwrite bytes (moving the unparsed tail to the front, or starting afresh
// after a broken connection) it checks whether a message of the chunk is still lent;
// if one is, it reads on in another chunk (its spare, or a new one) and leaves the old
// one to its views. ChunkShelf keeps the idle chunks of a factory: a connection holds
// a chunk only while it has bytes read and not parsed, or lent.
#pragma once

#include <msgpass/message_view.hpp>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace msgpass::tcp {

class ReadChunk {
public:
    // A chunk of capacity bytes with one reference: its ReadBuffer's.
    static ReadChunk* make(std::size_t capacity) { return new ReadChunk(capacity); }

    ReadChunk(const ReadChunk&) = delete;
    ReadChunk& operator=(const ReadChunk&) = delete;

    [[nodiscard]] std::byte* data() noexcept { return data_.get(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    // n more messages of the chunk are lent (the reading thread, before it hands them out).
    void lend(std::size_t n) noexcept { refs_.fetch_add(n, std::memory_order_relaxed); }
    // One reference dropped (a view released, or the ReadBuffer's own); the last frees it.
    // Release: the reads of the bytes happen before a reuse or the free.
    void release() noexcept {
        if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
    }
    // Whether any message of the chunk is lent (the ReadBuffer's reference is not the
    // only one). Acquire: a false answer lets the reader overwrite bytes the views read.
    [[nodiscard]] bool lent() const noexcept { return refs_.load(std::memory_order_acquire) != 1; }

private:
    explicit ReadChunk(std::size_t capacity)
        : data_(std::make_unique_for_overwrite<std::byte[]>(capacity)), capacity_(capacity) {}
    ~ReadChunk() = default;

    std::unique_ptr<std::byte[]> data_;
    std::size_t capacity_;
    std::atomic<std::size_t> refs_{1};
};

// Takes back a lent message: the view's context is its chunk. Stateless, one for all.
class ChunkLender final : public MessageView::Lender {
public:
    void give_back(void* context, std::uint64_t /*token*/) noexcept override {
        static_cast<ReadChunk*>(context)->release();
    }
};
inline ChunkLender chunk_lender;

// The size of a read chunk: one read takes up to this much of a stream.
inline constexpr std::size_t read_chunk_capacity = 256 * 1024;

// The idle read chunks of a factory's connections (Shared::chunks), nothing lent from
// any: a read buffer takes one when it reads and gives it back once everything it
// read is parsed and nothing of it is lent (ReadBuffer::shelve), so that the idle
// connections of a large partition hold none (a chunk each was 256 KiB of address
// space and its touched pages), and the reads of many connections in turn use the same
// few chunks, warm in the cache. At most `most` are kept; any thread, under a mutex
// held for a push or a pop.
class ChunkShelf {
public:
    explicit ChunkShelf(std::size_t capacity, std::size_t most = 8) : capacity_(capacity), most_(most) {
        chunks_.reserve(most_);
    }
    ChunkShelf(const ChunkShelf&) = delete;
    ChunkShelf& operator=(const ChunkShelf&) = delete;
    ~ChunkShelf() {
        for (ReadChunk* c : chunks_)
            c->release();
    }

    // A chunk nothing is lent from, with the caller's reference.
    [[nodiscard]] ReadChunk* take() {
        {
            std::lock_guard lock(mutex_);
            if (!chunks_.empty()) {
                ReadChunk* c = chunks_.back();
                chunks_.pop_back();
                return c;
            }
        }
        return ReadChunk::make(capacity_);
    }
    // A chunk nothing is lent from, with the caller's reference: kept, or freed when
    // the shelf is full.
    void give(ReadChunk* c) noexcept {
        {
            std::lock_guard lock(mutex_);
            if (chunks_.size() < most_) {
                chunks_.push_back(c); // reserved: no allocation
                return;
            }
        }
        c->release();
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

private:
    const std::size_t capacity_;
    const std::size_t most_;
    std::mutex mutex_;
    std::vector<ReadChunk*> chunks_;
};

// The read buffer: the bytes [begin, end) of the current chunk are read and not parsed
// yet. Only the thread that holds the receiving side's lock uses it.
class ReadBuffer {
public:
    ReadBuffer() = default;
    ReadBuffer(const ReadBuffer&) = delete;
    ReadBuffer& operator=(const ReadBuffer&) = delete;
    ~ReadBuffer() {
        if (chunk_ != nullptr) chunk_->release();
        if (spare_ != nullptr) spare_->release();
    }

    // Allocates the first chunk (of capacity bytes) when there is none.
    void ensure(std::size_t capacity) {
        if (chunk_ == nullptr) chunk_ = ReadChunk::make(capacity);
    }
    // Takes a chunk of the shelf when there is none.
    void ensure(ChunkShelf& shelf) {
        if (chunk_ == nullptr) chunk_ = shelf.take();
    }
    // Gives the chunk back to the shelf when everything read is parsed and nothing of
    // it is lent (the next read takes one again).
    void shelve(ChunkShelf& shelf) noexcept {
        if (chunk_ == nullptr || begin != end || chunk_->lent()) return;
        shelf.give(std::exchange(chunk_, nullptr));
        begin = end = 0;
    }
    [[nodiscard]] bool empty_capacity() const noexcept { return chunk_ == nullptr; }
    [[nodiscard]] std::byte* data() noexcept { return chunk_->data(); }
    [[nodiscard]] std::size_t size() const noexcept { return chunk_ == nullptr ? 0 : chunk_->capacity(); }
    [[nodiscard]] ReadChunk* chunk() noexcept { return chunk_; }

    // Moves the unparsed bytes to the front of a chunk (this one when nothing of it
    // is lent, else another), so that the free space behind them grows.
    void compact() {
        if (begin == 0) return;
        if (chunk_->lent()) {
            ReadChunk* fresh = take_fresh();
            std::memcpy(fresh->data(), chunk_->data() + begin, end - begin);
            retire(fresh);
        } else {
            std::memmove(chunk_->data(), chunk_->data() + begin, end - begin);
        }
        end -= begin;
        begin = 0;
    }
    // Starts again at the front of the chunk when everything read is parsed and
    // nothing of it is lent (none_lent_here: the caller's parse lent nothing it has
    // not counted yet); else the next read goes on behind the lent bytes.
    void rewind(bool none_lent_here) noexcept {
        if (begin == end && none_lent_here && !chunk_->lent()) begin = end = 0;
    }
    // Forgets what is read (a broken connection): the next read starts at the front
    // of a chunk nothing is lent from.
    void clear() {
        begin = end = 0;
        if (chunk_ != nullptr && chunk_->lent()) retire(take_fresh());
    }

    std::size_t begin = 0, end = 0;

private:
    // A chunk nothing is lent from: the spare when its views are all released, else a new one.
    ReadChunk* take_fresh() {
        if (spare_ != nullptr && !spare_->lent()) return std::exchange(spare_, nullptr);
        return ReadChunk::make(chunk_->capacity());
    }
    // fresh becomes the current chunk; the old one the spare, kept for when its views
    // are released (a spare still lent when replaced is left to its views).
    void retire(ReadChunk* fresh) {
        if (spare_ != nullptr) spare_->release();
        spare_ = std::exchange(chunk_, fresh);
    }

    ReadChunk* chunk_ = nullptr;
    ReadChunk* spare_ = nullptr;
};

} // namespace msgpass::tcp
