// Test support: waits and retries that end. Every loop of a test that waits for
// something another thread or process does has a deadline, and when it passes the
// test fails with a message naming what it waited for, instead of running into the
// ctest timeout without a word.
#pragma once

#include <msgpass/node.hpp>

#include <chrono>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>

namespace msgpass::test {

using Clock = std::chrono::steady_clock;

// A bound for waits on something that happens within milliseconds when the code
// works: long enough for a loaded machine under ThreadSanitizer, short enough that a
// stall reads as a failure and not as a hung test.
inline constexpr std::chrono::seconds default_patience{30};

// Polls a condition (a counter another thread or process moves) until it holds or
// the bound passes; the pause between polls only keeps the CPU free.
template <class Predicate>
bool eventually(Predicate&& holds, std::chrono::nanoseconds bound) {
    const auto deadline = Clock::now() + bound;
    while (!holds()) {
        if (Clock::now() > deadline) return holds();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// A retry loop gave up: its message names what it waited for.
class Stalled : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Calls send_once() until it does not throw SendQueueFull; while the send queue is
// full it drives the queue with flush() and tries again, for at most bound, then
// throws Stalled naming the node and `what` (e.g. "message 17 of stream 2"). Any other
// exception (PeerLost, MessageTooLarge) goes to the caller as it is.
template <class SendOnce>
void retry_while_full(Node& node, const std::string& what, std::chrono::nanoseconds bound, SendOnce&& send_once) {
    const auto deadline = Clock::now() + bound;
    for (;;) {
        try {
            send_once();
            return;
        } catch (const SendQueueFull& e) {
            if (Clock::now() >= deadline) {
                throw Stalled("the send queue to node " + std::to_string(node.id()) + " stayed full for " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()) +
                              " ms (the receiver took nothing) while sending " + what + ": " + e.what());
            }
            (void)node.flush(std::chrono::milliseconds(1));
        }
    }
}

// Sends buffer to node as retry_while_full does; the buffer is the caller's again in
// every failure.
inline void send_retrying(Node& node, BufferPtr& buffer, const std::string& what,
                          std::chrono::nanoseconds bound = default_patience) {
    retry_while_full(node, what, bound, [&] { node.send(std::move(buffer)); });
}

// The same for the bytes of a message (Node::send_bytes).
inline void send_bytes_retrying(Node& node, std::span<const std::byte> bytes, const std::string& what,
                                std::chrono::nanoseconds bound = default_patience) {
    retry_while_full(node, what, bound, [&] { node.send_bytes(bytes); });
}

inline void send_retrying(Node& node, BufferPtr&& buffer, const std::string& what,
                          std::chrono::nanoseconds bound = default_patience) {
    BufferPtr b = std::move(buffer);
    send_retrying(node, b, what, bound);
}

} // namespace msgpass::test
