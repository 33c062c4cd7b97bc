// Buffers: raw bytes that msgpass transfers and never interprets (seed section 6).
// A Buffer is a list of contiguous fragments; a SingleBuffer has exactly one, and a
// FragmentList sends several buffers as one message (scatter/gather, as BMI's list
// I/O). Technologies derive their own SingleBuffers (a receive buffer that points
// into a shared segment, a send buffer from a pool); the application sees Buffer.
#pragma once

#include <msgpass/error.hpp>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace msgpass {

class SingleBuffer;

class Buffer {
public:
    using Fragment = std::span<std::byte>;

    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    virtual ~Buffer() = default;

    // Total number of bytes of the message. Never blocks, never throws.
    [[nodiscard]] virtual std::size_t size() const noexcept = 0;

    // The contiguous pieces of the message in order; their sizes add up to size().
    // The view stays valid until the buffer is changed or destroyed.
    [[nodiscard]] virtual std::span<const Fragment> fragments() const noexcept = 0;

    // The buffer as one contiguous piece, or nullptr when it has several fragments.
    [[nodiscard]] virtual SingleBuffer* single() noexcept { return nullptr; }
    [[nodiscard]] virtual const SingleBuffer* single() const noexcept { return nullptr; }

    // Copies the message into dst (dst.size() >= size()). Returns the bytes copied.
    std::size_t copy_to(std::span<std::byte> dst) const;

    // Node that sent this buffer, set by receive(); 0 for buffers made locally.
    [[nodiscard]] NodeId source() const noexcept { return source_; }
    void set_source(NodeId id) noexcept { source_ = id; }

    // Typed access to the start of a contiguous buffer. Throws UsageError when the
    // buffer is not contiguous or smaller than T.
    template <class T>
    T& as();
    template <class T>
    const T& as() const;

private:
    NodeId source_ = 0;
};

using BufferPtr = std::unique_ptr<Buffer>;
using SharedBuffer = std::shared_ptr<const Buffer>;

// A contiguous buffer. size() may be changed with resize() up to capacity(), so a
// buffer allocated for the largest message can carry a smaller one.
class SingleBuffer : public Buffer {
public:
    [[nodiscard]] std::size_t size() const noexcept final { return size_; }
    [[nodiscard]] std::span<const Fragment> fragments() const noexcept final { return {&view_, 1}; }
    [[nodiscard]] SingleBuffer* single() noexcept final { return this; }
    [[nodiscard]] const SingleBuffer* single() const noexcept final { return this; }

    [[nodiscard]] std::byte* data() noexcept { return view_.data(); }
    [[nodiscard]] const std::byte* data() const noexcept { return view_.data(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::span<std::byte> bytes() noexcept { return view_; }
    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return view_; }

    // Sets the message size. Throws MessageTooLarge when n > capacity().
    void resize(std::size_t n);

protected:
    SingleBuffer() = default;
    SingleBuffer(std::byte* data, std::size_t size, std::size_t capacity) noexcept { reset(data, size, capacity); }
    void reset(std::byte* data, std::size_t size, std::size_t capacity) noexcept {
        capacity_ = capacity;
        size_ = size;
        view_ = Fragment(data, size);
    }

private:
    Fragment view_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

// A SingleBuffer that owns heap memory. The default buffer of every technology.
class HeapBuffer final : public SingleBuffer {
public:
    explicit HeapBuffer(std::size_t size);
    HeapBuffer(std::span<const std::byte> content);
    static BufferPtr copy_of(const Buffer& other);

private:
    std::unique_ptr<std::byte[]> storage_;
};

// Several buffers sent as one message, fragment after fragment, without a staging
// copy where the technology can gather (scatter/gather, BMI list I/O). The receiver
// gets one contiguous buffer whatever the sender's fragmentation.
class FragmentList final : public Buffer {
public:
    FragmentList() = default;

    // Appends a whole buffer (single or itself a list); the list owns it.
    void append(BufferPtr part);
    // Appends a view of memory the caller keeps alive and unchanged until the
    // message is sent (the send call returned and no copy is queued) or dropped.
    void append_view(std::span<std::byte> bytes);

    [[nodiscard]] std::size_t size() const noexcept override { return size_; }
    [[nodiscard]] std::span<const Fragment> fragments() const noexcept override { return views_; }
    [[nodiscard]] std::size_t parts() const noexcept { return owned_.size(); }

private:
    std::vector<BufferPtr> owned_;
    std::vector<Fragment> views_;
    std::size_t size_ = 0;
};

template <class T>
T& Buffer::as() {
    static_assert(std::is_trivially_copyable_v<T>, "as<T>() reads raw bytes");
    auto* s = single();
    if (s == nullptr || s->size() < sizeof(T)) {
        throw UsageError("Buffer::as<T>(): buffer is not contiguous or smaller than T");
    }
    return *reinterpret_cast<T*>(s->data());
}

template <class T>
const T& Buffer::as() const {
    return const_cast<Buffer*>(this)->as<T>();
}

} // namespace msgpass
