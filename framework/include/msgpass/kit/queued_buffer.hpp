// The implementer kit: a message in a technology's send queue (sci's queue, the ip
// send window, udp's outgoing list). It holds either the buffer the caller handed
// over with Node::send (owned: the layer may reuse or free it once sent) or a
// reference to the one shared between the sends of Node::send_shared (never changed,
// and it may go to other nodes too), never a copy.
#pragma once

#include <msgpass/buffer.hpp>

#include <utility>

namespace msgpass::kit {

class QueuedBuffer {
public:
    QueuedBuffer() = default;
    explicit QueuedBuffer(BufferPtr owned) noexcept : owned_(std::move(owned)) {}
    explicit QueuedBuffer(SharedBuffer shared) noexcept : shared_(std::move(shared)) {}

    // Holds this message instead of the one held before.
    void hold(BufferPtr owned) noexcept {
        owned_ = std::move(owned);
        shared_ = nullptr;
    }
    void hold(SharedBuffer shared) noexcept {
        shared_ = std::move(shared);
        owned_ = nullptr;
    }

    // The message; the entry must hold one.
    [[nodiscard]] const Buffer& buffer() const noexcept { return owned_ ? *owned_ : *shared_; }
    // The buffer of a send_shared, null for an owned one.
    [[nodiscard]] const SharedBuffer& shared() const noexcept { return shared_; }
    // Holds nothing (default-made, or moved from).
    [[nodiscard]] bool empty() const noexcept { return !owned_ && !shared_; }

private:
    BufferPtr owned_;
    SharedBuffer shared_;
};

} // namespace msgpass::kit
