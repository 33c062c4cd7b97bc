// Node: a peer process that buffers are sent to and received from (seed section 7).
// This header is the contract every technology keeps; a new technology is written
// from it alone, and the conformance suite (tests/conformance) checks it.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/error.hpp>
#include <msgpass/message_view.hpp>
#include <msgpass/stats.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <string>

namespace msgpass {

class Node {
public:
    Node() = default;
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    virtual ~Node() = default;

    // The node id of the peer, as in the nodes file. Never throws.
    [[nodiscard]] virtual NodeId id() const noexcept = 0;
    // The node name of the peer, as in the nodes file ("" when it has none).
    [[nodiscard]] virtual const std::string& name() const noexcept = 0;

    // Sends one message. Never blocks on a slow or absent peer: when the transfer
    // cannot happen now, the message is queued and sent later, in order, by any later
    // send() or receive() call of this process on the same factory.
    // Any thread may call it, concurrently with other senders and the receiver.
    // On success the layer owns the buffer (buffer is null afterwards); on an
    // exception the buffer is left untouched in the caller's hands.
    // Throws MessageTooLarge (size > max_message_size), SendQueueFull (the queue
    // holds send_queue_limit messages), PeerLost (the peer died; raised once per
    // loss, the node then accepts sends again for a restarted peer).
    virtual void send(BufferPtr&& buffer) = 0;

    // As send(BufferPtr&&), for a message shared with other sends (group send): the
    // layer keeps a reference until the message is transferred, and never changes it.
    virtual void send_shared(const SharedBuffer& buffer) = 0;

    // Non-blocking receive: the next message from this peer, or null if none arrived.
    // Only one thread of a process receives (the seed's contract). The caller owns
    // the returned buffer; dropping it returns its memory to the layer.
    // Throws PeerLost when the peer died and every message it delivered was taken
    // (a restarted peer: before the first message of its new process), and Error,
    // once, when the peer broke the protocol (a length beyond max_message_size, a
    // sequence number out of order); the connection is then closed.
    [[nodiscard]] virtual BufferPtr receive() = 0;

    // Blocking receive: waits at most timeout (spin briefly, then sleep until a
    // sender rings); returns null on timeout. Same thread rule and errors as above.
    [[nodiscard]] virtual BufferPtr receive(std::chrono::nanoseconds timeout) = 0;

    // The Buffer-free path, beside the Buffer API above (the two may be mixed: one
    // stream of messages, in the order of the calls). A technology may implement
    // it without any per-message object (sci copies the bytes straight into the
    // peer's receive slot and lends views into its own); the default implementation
    // here goes through the Buffer API.
    //
    // Sends a copy of bytes (made before the call returns: the caller's memory is
    // free again at once). Same thread rule, queueing and errors as send(BufferPtr&&).
    virtual void send_bytes(std::span<const std::byte> bytes);
    // Non-blocking: the next message from this peer, lent (see MessageView), or an
    // empty view if none arrived. Same thread rule and errors as receive(). Views may
    // be held several at a time and released in any order, from any thread; each
    // holds layer memory (sci: its receive slot) until released, so a receiver that
    // keeps many may make the sender queue. Release them before the factory goes.
    [[nodiscard]] virtual MessageView receive_view();
    // Blocking: as receive(timeout); an empty view on timeout.
    [[nodiscard]] virtual MessageView receive_view(std::chrono::nanoseconds timeout);

    // Waits at most timeout until every queued message was handed over to the peer
    // (transferred, not necessarily received yet). Returns true when the queue is
    // empty. Any thread. A process that sends and then exits calls this first (the
    // factory's destructor does it too, and reports what it could not hand over).
    virtual bool flush(std::chrono::nanoseconds timeout) = 0;

    // Counters of this peer's traffic. Any thread; never blocks.
    [[nodiscard]] virtual NodeStats stats() const noexcept = 0;
};

using NodePtr = std::shared_ptr<Node>;

} // namespace msgpass
