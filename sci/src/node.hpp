// SCINode (seed section 7): a peer process reached through its shared segment, as
// the application sees it. The facade only: send, receive and flush, each handed to
// the rooms of the peer, which hold their own state: the sender (sender.hpp), the
// receiver (receiver.hpp) and what both share, the link (link.hpp). The
// factory-wide engine is the transport (transport.hpp). docs/sci-protocol.md
// describes the protocol; msgpass/node.hpp the contract.
#pragma once

#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/progress.hpp>
#include <msgpass/node.hpp>

#include "link.hpp"
#include "receiver.hpp"
#include "sender.hpp"

#include <chrono>
#include <memory>
#include <span>
#include <string>

namespace msgpass::sci {

class SciNode final : public Node, public kit::FactoryBound, private kit::Progressing {
public:
    SciNode(std::shared_ptr<Transport> transport, NodeParameters parameters);
    ~SciNode() override;

    [[nodiscard]] NodeId id() const noexcept override { return links_.parameters.peer; }
    [[nodiscard]] const std::string& name() const noexcept override { return links_.parameters.name; }
    void send(BufferPtr&& buffer) override;
    void send_shared(const SharedBuffer& buffer) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    // The Buffer-free path: send_bytes copies the caller's bytes straight into the
    // peer's slot (or into the staged batch of a queue), without a buffer; a view
    // of a message that shares its slot with others (a batch) is lent without any
    // object, the slot going back with the last of them.
    void send_bytes(std::span<const std::byte> bytes) override;
    [[nodiscard]] MessageView receive_view() override;
    [[nodiscard]] MessageView receive_view(std::chrono::nanoseconds timeout) override;
    [[nodiscard]] NodeStats stats() const noexcept override;

    bool flush(std::chrono::nanoseconds timeout) override;
    // Writes the grants a receive call would write (Receiver::publish_pending).
    void publish_pending() { receiver_.publish_pending(); }
    // The peer's position in the nodes file: its ready mark in our control block.
    [[nodiscard]] std::size_t position() const noexcept { return links_.parameters.peer_index; }
    // Asks the peer for its ready mark after each message (Receiver::want_marks).
    void want_marks() { receiver_.want_marks(); }
    // Messages waiting in the send queue.
    [[nodiscard]] std::size_t queued() const noexcept { return sender_.queued(); }
    // How the messages to and from the peer went (PathCounters), for tests and
    // measurements; MSGPASS_SCI_PATHS=1 prints them to stderr when the node ends.
    [[nodiscard]] const PathCounters& paths() const noexcept { return links_.grants->paths; }

private:
    MessageView poll_view();
    void try_flush_queue() override { sender_.try_flush(); }
    void state_changed() override { receiver_.write_status(); }

    // Declared in this order: the receiver and the sender use the link, and each
    // refers to the other (the receiver lets go of links under the send lock, the
    // sender asks the receiver for hot slots).
    Links links_;
    Receiver receiver_;
    Sender sender_;
};

} // namespace msgpass::sci
