// Per-node statistics. Technologies count with relaxed atomics on the hot path
// (no lock, no fence); stats() takes a snapshot that is consistent per counter.
#pragma once

#include <atomic>
#include <cstdint>

namespace msgpass {

struct NodeStats {
    // Handed to the peer (not merely queued). Counted when the sending thread learns
    // it (tcp: its write returned), which may be after the receiver took the message.
    std::uint64_t messages_sent = 0;
    std::uint64_t bytes_sent = 0;
    std::uint64_t messages_received = 0;
    std::uint64_t bytes_received = 0;
    std::uint64_t sends_queued = 0; // sends that had to wait in the send queue
    std::uint64_t queue_depth = 0;  // messages in the send queue now
    std::uint64_t retries = 0;      // transfers repeated after an error
    std::uint64_t errors = 0;       // errors raised for this node
};

class StatsCounters {
public:
    void sent(std::uint64_t bytes) noexcept {
        add(messages_sent_, 1);
        add(bytes_sent_, bytes);
    }
    void received(std::uint64_t bytes) noexcept {
        add(messages_received_, 1);
        add(bytes_received_, bytes);
    }
    // The same, for a technology whose sends (receives) of one node are counted by
    // one thread at a time (under its own lock): a load and a store, not a locked
    // read-modify-write, which on x86 would also wait for every store before it
    // (a message just written to the peer's memory) to leave the core.
    void sent_serialized(std::uint64_t bytes, std::uint64_t messages = 1) noexcept {
        bump(messages_sent_, messages);
        bump(bytes_sent_, bytes);
    }
    void received_serialized(std::uint64_t bytes) noexcept {
        bump(messages_received_, 1);
        bump(bytes_received_, bytes);
    }
    void queued() noexcept { add(sends_queued_, 1); }
    void queued_serialized(std::uint64_t n = 1) noexcept { bump(sends_queued_, n); }
    void retried(std::uint64_t n = 1) noexcept { add(retries_, n); }
    void error() noexcept { add(errors_, 1); }

    [[nodiscard]] NodeStats snapshot(std::uint64_t queue_depth = 0) const noexcept {
        NodeStats s;
        s.messages_sent = messages_sent_.load(std::memory_order_relaxed);
        s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
        s.messages_received = messages_received_.load(std::memory_order_relaxed);
        s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
        s.sends_queued = sends_queued_.load(std::memory_order_relaxed);
        s.queue_depth = queue_depth;
        s.retries = retries_.load(std::memory_order_relaxed);
        s.errors = errors_.load(std::memory_order_relaxed);
        return s;
    }

private:
    static void add(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
        c.fetch_add(n, std::memory_order_relaxed);
    }
    static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
        c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    std::atomic<std::uint64_t> messages_sent_{0};
    std::atomic<std::uint64_t> bytes_sent_{0};
    std::atomic<std::uint64_t> messages_received_{0};
    std::atomic<std::uint64_t> bytes_received_{0};
    std::atomic<std::uint64_t> sends_queued_{0};
    std::atomic<std::uint64_t> retries_{0};
    std::atomic<std::uint64_t> errors_{0};
};

} // namespace msgpass
