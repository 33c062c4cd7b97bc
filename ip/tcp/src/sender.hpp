// Sender: the send side of one peer (the room "sender" of
// shared/design/ARCHITECTURE.md), under out_mutex_: the window of messages kept
// until the peer acknowledges them (window.hpp, numbered per peer incarnation), the
// batch a stream's messages join, the gathered writes over the window's staged
// frames (window.hpp) that carry this side's acknowledgement of the peer's
// messages, the control frames (resume, skip, an acknowledgement alone) between
// data frames, and what an acknowledgement frees.
// It writes to the Link's socket; the send() that fills it is TcpNode's (sender.cpp).
#pragma once

#include "link.hpp"

namespace msgpass::tcp {

class Sender : public virtual Link {
public:
    // Waits until the peer acknowledged every message written (or deadline).
    bool wait_acknowledged(Clock::time_point deadline);

protected:
    Sender(std::shared_ptr<Shared> shared, const config::NodeConfig& peer) : Link(std::move(shared), peer) {}
    ~Sender() override = default;

    // under out_mutex_
    void write_pending();
    bool write_control();
    void queue_control(const FrameHeader& h);
    bool acknowledged(std::uint64_t next_expected);
    void apply_pending_ack(bool write = true);
    void trimmed();

    SendWindow window_;                                       // messages not yet acknowledged
    GatherList gather_;                                       // the iovecs of one write
    std::vector<Outgoing> acknowledged_scratch_;              // freed outside out_mutex_
    std::array<std::byte, 4 * sizeof(FrameHeader)> ctl_tx_{}; // control frames (resume, skip, ack) not yet written
    std::size_t ctl_len_ = 0, ctl_off_ = 0;
    Clock::time_point last_write_{};           // of the last write by a sender or a batch
    Clock::time_point batch_start_{};          // when the batch now waiting began
    bool batch_timed_ = false;                 // the background thread holds a batch's deadline (tick)
    std::uint64_t takes_at_write_ = 0;         // takes_ at the last immediate write
    std::atomic<std::uint64_t> held_sends_{0}; // sends held while their thread had input (kit/held.hpp)
    // The peer incarnation whose count of our messages window_'s numbers follow (0:
    // none yet); a handshake with another one renumbers them from 0. Kept through a
    // loss: a peer given up for silence may still count them.
    std::uint64_t numbered_for_ = 0;
};

} // namespace msgpass::tcp
