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

namespace msgpass::tcp {

class Receiver : public virtual Link {
protected:
    Receiver(std::shared_ptr<Shared> shared, const config::NodeConfig& peer) : Link(std::move(shared), peer) {}
    ~Receiver() override = default;

    // What one parse found beside messages, applied under out_mutex_ after it.
    struct Control {
        bool ack = false;
        std::uint64_t ack_to = 0;
        bool goodbye = false;
        bool resume = false;
        std::uint64_t resume_to = 0;
        bool bad_ack = false; // a frame broke the protocol (violation_ says how)
        bool closed = false;  // the connection ended (after the frames parsed)
        bool delivered = false;
    };

    // under in_mutex_
    Control read_in_side();
    void parse_in_buffer(Control& c);
    void reset_in();
    [[nodiscard]] bool ack_due() const;
    void deliver(BufferPtr message);
    BufferPtr take_locked(std::unique_lock<std::mutex>& lock);
    // the receiving thread, without in_mutex_
    BufferPtr take_taken() noexcept;

    ReceiveWindow in_window_;   // the peer incarnation's next expected message, acknowledgements owed
    std::vector<std::byte> rx_; // read buffer
    std::size_t rx_begin_ = 0, rx_end_ = 0;
    BufferPtr assembling_; // a message larger than what rx_ holds (a SingleBuffer)
    std::byte* assembling_data_ = nullptr;
    std::size_t assembled_ = 0;
    ip::Inbox inbox_; // with a marker where a restarted peer's old incarnation was lost
    std::size_t inbox_count_ = 0;
    // Messages moved out of the inbox in one take of in_mutex_ (at most take_batch),
    // or parsed by the receiving thread's own read (direct_), handed out one by one
    // by the receiving thread without it: only one thread receives from a node
    // (msgpass/node.hpp), and these are older than anything still in the inbox.
    static constexpr std::size_t take_batch = 256;
    std::vector<BufferPtr> taken_;
    std::size_t taken_at_ = 0;
    // in_mutex_: the receiving thread reads (TcpNode::receive, taken_ handed out): a
    // message parsed while the inbox is empty goes straight to taken_, not through
    // the inbox's deque (a push and a move per message of a stream).
    bool direct_ = false;
    std::vector<Outgoing> rx_acknowledged_; // acknowledged by what the receiver read: freed outside out_mutex_
    bool in_goodbye_ = false;
    std::string violation_;                      // reported once by receive()
    std::atomic<std::uint32_t> spin_skip_{0};    // blocking receives left that do not spin (receive)
    std::atomic<std::uint32_t> spin_backoff_{0}; // how many to skip after the next spin that finds nothing
};

} // namespace msgpass::tcp
