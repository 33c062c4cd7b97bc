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

// The entries of one pool that this thread dropped last and takes first. They
// count as out (out_), so the pool lives while a thread caches some; a thread that
// ends gives them back (and may so delete a closed pool). Trivially destructible,
// as kit::BlockCache's, so that the destructors of other thread-local objects may
// still drop buffers: after the Guard ran, entries go straight to the queue.
struct SendPool::ThreadCache {
    static constexpr std::uint32_t capacity = 32;
    SendPool* pool;
    std::uint32_t count;
    bool ended;
    bool guarded; // the Guard exists (made on the first use, not looked at on every one)
    std::uint32_t entries[capacity];

    void drain() noexcept {
        SendPool* p = pool;
        const std::uint32_t n = count;
        count = 0;
        pool = nullptr;
        for (std::uint32_t k = 0; k < n; ++k)
            p->return_shared(entries[k]); // the last one may delete p
    }
    struct Guard {
        ThreadCache* t;
        ~Guard() {
            t->ended = true;
            if (t->count != 0) t->drain();
        }
    };
    static ThreadCache& local() noexcept {
        thread_local ThreadCache t{};
        if (!t.guarded) [[unlikely]] {
            t.guarded = true;
            thread_local Guard guard{&t};
            (void)guard;
        }
        return t;
    }
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
    if (size > buffer_size_) return nullptr;
    std::uint32_t e = 0;
    ThreadCache& t = ThreadCache::local();
    if (t.pool == this && t.count != 0) {
        e = t.entries[--t.count]; // counted as out already
    } else {
        if (!pop(e)) return nullptr;
        out_.fetch_add(1, std::memory_order_relaxed);
    }
    Entry& entry = entries_[e];
    return BufferPtr(::new (entry.object) Pooled(memory_.get() + std::size_t{e} * buffer_size_, size, buffer_size_));
}

void SendPool::give_back(std::uint32_t entry) noexcept {
    ThreadCache& t = ThreadCache::local();
    if (!t.ended && (out_.load(std::memory_order_relaxed) & closing_bit) == 0) {
        if (t.pool != this) {
            if (t.count != 0) t.drain(); // the cached entries keep their pool: it is alive
            t.pool = this;               // the pool this thread uses now
        }
        if (t.count < ThreadCache::capacity) {
            t.entries[t.count++] = entry;
            return;
        }
    } else if (t.pool == this && t.count != 0) {
        t.drain(); // closed: what this thread caches goes back too
    }
    return_shared(entry);
}

void SendPool::return_shared(std::uint32_t entry) noexcept {
    push(entry);
    if (out_.fetch_sub(1, std::memory_order_acq_rel) == closing_bit + 1) delete this;
}

void SendPool::close() noexcept {
    // This thread's cached entries go back first; those of other threads come back
    // when those threads drop a buffer of the closed pool or end.
    ThreadCache& t = ThreadCache::local();
    if (t.pool == this && t.count != 0) t.drain();
    if (out_.fetch_or(closing_bit, std::memory_order_acq_rel) == 0) delete this;
}

std::uint32_t SendPool::available() const noexcept {
    return static_cast<std::uint32_t>(enqueue_.load(std::memory_order_relaxed) -
                                      dequeue_.load(std::memory_order_relaxed));
}

namespace {
// A heap buffer whose bytes follow the object in its block, a block of Block bytes.
template <std::size_t Block>
class SmallBuffer final : public SingleBuffer {
public:
    using Cache = kit::BlockCache<Block>;
    static constexpr std::size_t header = (sizeof(SingleBuffer) + 15) / 16 * 16;
    static constexpr std::size_t capacity = Block - header;
    explicit SmallBuffer(std::size_t size) noexcept
        : SingleBuffer(reinterpret_cast<std::byte*>(this) + header, size, capacity) {}
    static void* operator new(std::size_t) { return Cache::get(); }
    static void operator delete(void* p) noexcept { Cache::put(p); }
};
static_assert(sizeof(SmallBuffer<small_buffer_block>) <= SmallBuffer<small_buffer_block>::header);

template <std::size_t Block>
BufferPtr make_small(std::size_t size) {
    return std::make_unique<SmallBuffer<Block>>(size);
}
} // namespace

std::size_t small_buffer_capacity() noexcept {
    return SmallBuffer<small_buffer_largest_block>::capacity;
}

// Classes of 256 B, then a power of two of bytes plus the object up to 4 KiB of
// bytes: a 256 or 512-byte stream whose queue outgrew the send pool (127 buffers by
// default) took malloc and free for every message (a quarter of the sender's
// instructions, and the dip of those sizes to a third of the 1 KiB rate).
BufferPtr small_heap_buffer(std::size_t size) {
    if (size <= SmallBuffer<small_buffer_block>::capacity) return make_small<small_buffer_block>(size);
    if (size <= SmallBuffer<576>::capacity) return make_small<576>(size);
    if (size <= SmallBuffer<1088>::capacity) return make_small<1088>(size);
    if (size <= SmallBuffer<2112>::capacity) return make_small<2112>(size);
    if (size <= SmallBuffer<small_buffer_largest_block>::capacity) return make_small<small_buffer_largest_block>(size);
    return nullptr;
}

} // namespace msgpass::sci
