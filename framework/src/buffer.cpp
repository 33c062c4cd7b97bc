// Buffer, SingleBuffer, HeapBuffer and FragmentList: the technology-independent
// buffers of msgpass/buffer.hpp.
#include <msgpass/buffer.hpp>

#include <string>

namespace msgpass {

std::size_t Buffer::copy_to(std::span<std::byte> dst) const {
    if (dst.size() < size()) {
        throw UsageError("Buffer::copy_to: destination of " + std::to_string(dst.size()) +
                         " bytes is smaller than the message of " + std::to_string(size()) + " bytes");
    }
    std::size_t at = 0;
    for (const auto& f : fragments()) {
        if (!f.empty()) std::memcpy(dst.data() + at, f.data(), f.size());
        at += f.size();
    }
    return at;
}

void SingleBuffer::resize(std::size_t n) {
    if (n > capacity_) {
        throw MessageTooLarge("SingleBuffer::resize: " + std::to_string(n) + " bytes exceed the capacity of " +
                              std::to_string(capacity_) + " bytes");
    }
    size_ = n;
    view_ = Fragment(view_.data(), n);
}

HeapBuffer::HeapBuffer(std::size_t size) : storage_(std::make_unique_for_overwrite<std::byte[]>(size == 0 ? 1 : size)) {
    reset(storage_.get(), size, size);
}

HeapBuffer::HeapBuffer(std::span<const std::byte> content) : HeapBuffer(content.size()) {
    if (!content.empty()) std::memcpy(data(), content.data(), content.size());
}

BufferPtr HeapBuffer::copy_of(const Buffer& other) {
    auto copy = std::make_unique<HeapBuffer>(other.size());
    other.copy_to(copy->bytes());
    copy->set_source(other.source());
    return copy;
}

void FragmentList::append(BufferPtr part) {
    if (!part) throw UsageError("FragmentList::append: null buffer");
    for (const auto& f : part->fragments()) {
        views_.push_back(f);
        size_ += f.size();
    }
    owned_.push_back(std::move(part));
}

void FragmentList::append_view(std::span<std::byte> bytes) {
    views_.push_back(bytes);
    size_ += bytes.size();
}

} // namespace msgpass
