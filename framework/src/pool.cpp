// Recycled memory for large messages (msgpass/kit/pool.hpp).
#include <msgpass/kit/pool.hpp>

#include <bit>
#include <utility>

namespace msgpass::kit {

// A buffer over a block of the pool; dropping it gives the block back.
class BufferPool::Pooled final : public SingleBuffer {
public:
    Pooled(std::shared_ptr<BufferPool> pool, std::size_t cls, std::unique_ptr<std::byte[]> memory,
           std::size_t size) noexcept
        : pool_(std::move(pool)), cls_(cls), memory_(std::move(memory)) {
        reset(memory_.get(), size, capacity_of(cls_));
    }
    Pooled(const Pooled&) = delete;
    Pooled& operator=(const Pooled&) = delete;
    ~Pooled() override { pool_->give(cls_, std::move(memory_)); }

private:
    std::shared_ptr<BufferPool> pool_;
    std::size_t cls_;
    std::unique_ptr<std::byte[]> memory_;
};

std::size_t BufferPool::class_of(std::size_t size) noexcept {
    if (size <= 4) return 8;                                               // 4 bytes: 2^2 * 4/4
    const auto k = static_cast<std::size_t>(std::bit_width(size - 1)) - 1; // 2^k < size <= 2^(k+1)
    const std::size_t quarter = std::size_t{1} << (k - 2);
    const std::size_t q = (size - (std::size_t{1} << k) + quarter - 1) / quarter; // 1..4
    return q == 4 ? 4 * (k + 1) : 4 * k + q;
}

std::size_t BufferPool::capacity_of(std::size_t cls) noexcept {
    const std::size_t k = cls / 4;
    return (std::size_t{1} << k) / 4 * (4 + cls % 4);
}

BufferPtr BufferPool::make(std::size_t size) {
    if (size < pooled_from_) return InlineBuffer::make(size);
    const std::size_t cls = class_of(size);
    if (cls >= classes) return std::make_unique<HeapBuffer>(size);
    std::unique_ptr<std::byte[]> memory;
    {
        std::lock_guard lock(mutex_);
        auto& list = free_[cls];
        if (!list.empty()) {
            memory = std::move(list.back());
            list.pop_back();
            kept_bytes_ -= capacity_of(cls);
            ++reused_;
        }
    }
    if (!memory) memory = std::make_unique_for_overwrite<std::byte[]>(capacity_of(cls));
    return std::make_unique<Pooled>(shared_from_this(), cls, std::move(memory), size);
}

std::size_t BufferPool::kept_bytes() const {
    std::lock_guard lock(mutex_);
    return kept_bytes_;
}

std::size_t BufferPool::reused() const {
    std::lock_guard lock(mutex_);
    return reused_;
}

// Beyond keep_bytes, blocks of the other classes that hold the most bytes go back to
// the heap first; when only this class's remain, the freed block goes back itself.
void BufferPool::give(std::size_t cls, std::unique_ptr<std::byte[]> memory) noexcept {
    std::lock_guard lock(mutex_);
    const std::size_t capacity = capacity_of(cls);
    if (capacity > keep_bytes_) return; // never kept: evict nothing for it
    while (kept_bytes_ + capacity > keep_bytes_) {
        std::size_t victim = classes;
        std::size_t most = 0;
        for (std::size_t c = 0; c < classes; ++c) {
            const std::size_t bytes = free_[c].size() * capacity_of(c);
            if (c != cls && bytes > most) {
                most = bytes;
                victim = c;
            }
        }
        if (victim == classes) return; // the block goes back to the heap
        free_[victim].pop_back();
        kept_bytes_ -= capacity_of(victim);
    }
    try {
        free_[cls].push_back(std::move(memory));
        kept_bytes_ += capacity;
    } catch (...) { // no room in the list: the block goes back to the heap
    }
}

} // namespace msgpass::kit
