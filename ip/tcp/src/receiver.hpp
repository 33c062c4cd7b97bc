// Receiver: the receive side of one peer (the room "receiver" of
// shared/design/ARCHITECTURE.md), under in_mutex_: the read buffer, from which one
// read parses many frames, the large message read straight into its buffer, the
// order of the peer's messages (ReceiveWindow), the inbox with the markers of a
// restarted peer's loss, the protocol violation reported once, and the spin of a
// blocking receive. What a read found besides messages (acknowledgements, goodbye,
// resume, the end of the connection) it returns as a Control, which TcpNode applies
// to the send side (receiver.cpp).
#pragma once

#include "link.hpp"
#include "read_chunk.hpp"

#include <type_traits>

namespace msgpass::tcp {

// A message handed out by the receiving thread: a buffer (a message copied out of
// the read buffer, or read straight into its own), or bytes lent from a read chunk,
// of which it holds one reference. Trivially copyable, so that the list of them
// (Receiver::taken_) is cleared without a pass over it: it owns its buffer or its
// reference until to_buffer or to_view hands it over, and the list's owner drops
// those never handed out (Receiver's destructor).
class Held {
public:
    // Implicit: the inbox's messages are moved into the list (Inbox::pop_messages).
    Held(BufferPtr buffer) noexcept : buffer_(buffer.release()) {}
    Held(const std::byte* data, std::size_t size, ReadChunk* chunk) noexcept
        : data_(data), size_(size), chunk_(chunk) {}

    // The message as a buffer: the lent bytes are copied into one from pool.
    BufferPtr to_buffer(BufferPool& pool, NodeId source) {
        if (buffer_ != nullptr) return BufferPtr(buffer_);
        return copy_out(pool, source);
    }
    // The message as a view: the lent bytes with their reference, or the buffer held.
    MessageView to_view(NodeId source) {
        if (buffer_ != nullptr) return MessageView(BufferPtr(buffer_));
        return MessageView({data_, size_}, source, &chunk_lender, chunk_, 0);
    }
    // What it holds, for a message never handed out.
    void drop() noexcept {
        const BufferPtr owned(buffer_); // freed here
        if (chunk_ != nullptr) chunk_->release();
    }

private:
    BufferPtr copy_out(BufferPool& pool, NodeId source);

    Buffer* buffer_ = nullptr;
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    ReadChunk* chunk_ = nullptr;
};
static_assert(std::is_trivially_copyable_v<Held> && std::is_trivially_destructible_v<Held>);

class Receiver : public virtual Link {
protected:
    Receiver(std::shared_ptr<Shared> shared, const config::NodeConfig& peer) : Link(std::move(shared), peer) {}
    ~Receiver() override {
        for (std::size_t i = taken_at_; i < taken_.size(); ++i)
            taken_[i].drop();
    }

    // What one parse found beside messages, applied under out_mutex_ after it.
    struct Control {
        bool ack = false;
        std::uint64_t ack_to = 0;
        bool goodbye = false;
        bool resume = false;
        std::uint64_t resume_to = 0;
        bool resume_compact = false; // the resume frame says its writer reads compact frames
        bool bad_ack = false;        // a frame broke the protocol (violation_ says how)
        bool closed = false;         // the connection ended (after the frames parsed)
        bool delivered = false;
        bool large = false; // a message of large_ack_size or more arrived whole: acknowledged at once
    };
    // A message this large is acknowledged as soon as it has been read whole, not
    // after ack_every messages or ack_bytes: its sender holds it (comm's send of the
    // caller's memory completes) until then, and one frame of 24 bytes per such
    // message costs nothing beside it.
    static constexpr std::size_t large_ack_size = 128 * 1024;

    // under in_mutex_
    Control read_in_side();
    void parse_in_buffer(Control& c);
    void reset_in();
    [[nodiscard]] bool ack_due() const;
    void deliver(BufferPtr message);
    // Moves the next messages of the inbox to taken_ (see below); whether taken_ has one.
    bool take_locked(std::unique_lock<std::mutex>& lock);
    // the receiving thread, without in_mutex_: the next message of taken_ (null or empty when none)
    [[nodiscard]] bool has_taken() const noexcept { return taken_at_ != taken_.size(); }
    BufferPtr take_taken();
    MessageView lend_taken();

    ReceiveWindow in_window_; // the peer incarnation's next expected message, acknowledgements owed
    ReadBuffer rx_;           // the read buffer: chunks from which small messages are lent (read_chunk.hpp)
    BufferPtr assembling_;    // a message larger than what rx_ holds (a SingleBuffer)
    std::byte* assembling_data_ = nullptr;
    std::size_t assembled_ = 0;
    ip::Inbox inbox_; // with a marker where a restarted peer's old incarnation was lost
    std::size_t inbox_count_ = 0;
    // Messages moved out of the inbox in one take of in_mutex_ (at most take_batch),
    // or parsed by the receiving thread's own read (direct_), handed out one by one
    // by the receiving thread without it: only one thread receives from a node
    // (msgpass/node.hpp), and these are older than anything still in the inbox.
    static constexpr std::size_t take_batch = 256;
    std::vector<Held> taken_;
    std::size_t taken_at_ = 0;
    // in_mutex_: the receiving thread reads (TcpNode::receive, taken_ handed out): a
    // message parsed while the inbox is empty goes straight to taken_, not through
    // the inbox's deque (a push and a move per message of a stream).
    bool direct_ = false;
    // ... and, when the read is receive_view's, a message that lies whole in the read
    // buffer goes to taken_ as its bytes lent from the chunk, with no buffer made.
    bool lend_ = false;
    std::vector<Outgoing> rx_acknowledged_; // acknowledged by what the receiver read: freed outside out_mutex_
    bool in_goodbye_ = false;
    // in_mutex_: the socket's SO_RCVLOWAT, the bytes its readiness waits for: 1 (the
    // kernel's default), but while a large message is assembled the bytes it still
    // lacks, never more (nothing else can come before them).
    // (docs/tcp.md, "A large message wakes its reader once").
    void set_low_water(std::size_t bytes);
    static constexpr std::size_t whole_wait_max = 1024 * 1024;
    static constexpr std::size_t low_water_step = 128 * 1024;
    int low_water_ = 1;
    // in_mutex_: the last read_in_side ended on a read that found the socket drained
    // (fewer bytes than asked, or none): more comes with the socket's readiness.
    bool drained_ = false;
    // The receiving thread's reads of the socket (direct_), and those that found
    // nothing: for the tests (TcpGroup reads a member only when its socket is readable).
    std::atomic<std::uint64_t> socket_reads_{0};
    std::atomic<std::uint64_t> empty_reads_{0};
    std::string violation_;                      // reported once by receive()
    std::atomic<std::uint32_t> spin_skip_{0};    // blocking receives left that do not spin (receive)
    std::atomic<std::uint32_t> spin_backoff_{0}; // how many to skip after the next spin that finds nothing
};

} // namespace msgpass::tcp
