// The send pool and the small heap buffers (see send_pool.hpp).
#include "send_pool.hpp"

#include <cstddef>
#include <new>

namespace msgpass::sci {

// A buffer of the pool, built in place in its entry; deleting it runs its (trivial)
// destructor, then this operator delete, which gives the entry back instead of
// freeing it.
class SendPool::Pooled final : public SingleBuffer {
public:
    Pooled(std::byte* data, std::size_t size, std::size_t capacity) noexcept : SingleBuffer(data, size, capacity) {}
    static void operator delete(void* p) noexcept;
};

struct SendPool::Entry {
    SendPool* pool;
    std::uint32_t index;
    alignas(Pooled) std::byte object[sizeof(Pooled)];
};

void SendPool::Pooled::operator delete(void* p) noexcept {
    auto* entry = reinterpret_cast<Entry*>(static_cast<std::byte*>(p) - offsetof(Entry, object));
    entry->pool->give_back(entry->index);
}

SendPool* SendPool::create(std::uint32_t count, std::size_t buffer_size) {
    return new SendPool(count, buffer_size);
}

SendPool::SendPool(std::uint32_t count, std::size_t buffer_size) : count_(count), buffer_size_(buffer_size) {
    std::uint64_t cells = 1;
    while (cells < count_)
        cells <<= 1;
    mask_ = cells - 1;
    cells_ = std::make_unique<Cell[]>(cells);
    for (std::uint64_t i = 0; i < cells; ++i)
        cells_[i].sequence.store(i, std::memory_order_relaxed);
    entries_ = std::make_unique<Entry[]>(count_);
    memory_ = std::make_unique_for_overwrite<std::byte[]>(std::size_t{count_} * buffer_size_);
    for (std::uint32_t i = 0; i < count_; ++i) {
        entries_[i].pool = this;
        entries_[i].index = i;
        push(i);
    }
}

SendPool::~SendPool() = default;

// Vyukov's bounded MPMC queue: a cell is free for the enqueue at position pos when
// its sequence is pos, and full for the dequeue at pos when it is pos + 1. The
// queue never holds more than count_ entries, so a push always finds its cell.
void SendPool::push(std::uint32_t entry) noexcept {
    std::uint64_t pos = enqueue_.load(std::memory_order_relaxed);
    for (;;) {
        Cell& cell = cells_[pos & mask_];
        const std::uint64_t seq = cell.sequence.load(std::memory_order_acquire);
        const auto dif = static_cast<std::int64_t>(seq - pos);
        if (dif == 0) {
            if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                cell.entry = entry;
                cell.sequence.store(pos + 1, std::memory_order_release);
                return;
            }
        } else {
            pos = enqueue_.load(std::memory_order_relaxed); // another push took this cell
        }
    }
}

bool SendPool::pop(std::uint32_t& entry) noexcept {
    std::uint64_t pos = dequeue_.load(std::memory_order_relaxed);
    for (;;) {
        Cell& cell = cells_[pos & mask_];
        const std::uint64_t seq = cell.sequence.load(std::memory_order_acquire);
        const auto dif = static_cast<std::int64_t>(seq - (pos + 1));
        if (dif == 0) {
            if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                entry = cell.entry;
                cell.sequence.store(pos + mask_ + 1, std::memory_order_release);
                return true;
            }
        } else if (dif < 0) {
            return false; // empty (or a push not finished yet: the caller takes the heap)
        } else {
            pos = dequeue_.load(std::memory_order_relaxed);
        }
    }
}

BufferPtr SendPool::get(std::size_t size) {
    std::uint32_t e = 0;
    if (size > buffer_size_ || !pop(e)) return nullptr;
    out_.fetch_add(1, std::memory_order_relaxed);
    Entry& entry = entries_[e];
    return BufferPtr(::new (entry.object) Pooled(memory_.get() + std::size_t{e} * buffer_size_, size, buffer_size_));
}

void SendPool::give_back(std::uint32_t entry) noexcept {
    push(entry);
    if (out_.fetch_sub(1, std::memory_order_acq_rel) == closing_bit + 1) delete this;
}

void SendPool::close() noexcept {
    if (out_.fetch_or(closing_bit, std::memory_order_acq_rel) == 0) delete this;
}

std::uint32_t SendPool::available() const noexcept {
    return static_cast<std::uint32_t>(enqueue_.load(std::memory_order_relaxed) -
                                      dequeue_.load(std::memory_order_relaxed));
}

namespace {
// A heap buffer whose bytes follow the object in its block.
class SmallBuffer final : public SingleBuffer {
public:
    using Cache = kit::BlockCache<small_buffer_block>;
    static const std::size_t header;
    explicit SmallBuffer(std::size_t size) noexcept
        : SingleBuffer(reinterpret_cast<std::byte*>(this) + header, size, small_buffer_block - header) {}
    static void* operator new(std::size_t) { return Cache::get(); }
    static void operator delete(void* p) noexcept { Cache::put(p); }
};
const std::size_t SmallBuffer::header = (sizeof(SmallBuffer) + 15) / 16 * 16;
} // namespace

std::size_t small_buffer_capacity() noexcept {
    return small_buffer_block - SmallBuffer::header;
}

BufferPtr small_heap_buffer(std::size_t size) {
    if (size > small_buffer_capacity()) return nullptr;
    return std::make_unique<SmallBuffer>(size);
}

} // namespace msgpass::sci
