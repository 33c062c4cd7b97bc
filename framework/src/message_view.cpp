// MessageView's hold of a received buffer, and the default implementation of the
// Buffer-free path of Node (send_bytes, receive_view) through the Buffer API, for
// technologies without their own (tcp, udp).
#include <msgpass/message_view.hpp>
#include <msgpass/node.hpp>

namespace msgpass {

MessageView::MessageView(BufferPtr buffer) {
    if (!buffer) return;
    if (buffer->single() == nullptr) {
        // Several fragments: one contiguous copy, so that the view is one span.
        auto joined = HeapBuffer::copy_of(*buffer);
        joined->set_source(buffer->source());
        buffer = std::move(joined);
    }
    bytes_ = buffer->single()->bytes();
    source_ = buffer->source();
    engaged_ = true;
    held_ = std::move(buffer);
}

void Node::send_bytes(std::span<const std::byte> bytes) {
    send(std::make_unique<HeapBuffer>(bytes));
}

MessageView Node::receive_view() {
    return MessageView(receive());
}

MessageView Node::receive_view(std::chrono::nanoseconds timeout) {
    return MessageView(receive(timeout));
}

} // namespace msgpass
