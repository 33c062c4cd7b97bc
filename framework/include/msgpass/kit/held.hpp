// Sends held while the calling thread has input waiting. A thread whose receive
// found its message already waiting is working through a backlog (an event builder
// taking fragments that arrived together); a small message it sends then to a node
// it did not just hear from may stay in that node's queue instead of costing a
// system call and a wake-up of its receiver each: the technology registers the node
// here, and its queue is written in one gathered write when the thread next finds
// nothing to receive (wait_with calls write_held before it spins or sleeps, or
// reports nothing), at the batch's size, at flush, or by the technology's background
// thread after a bound. tcp holds (docs/tcp.md, "Sends while the thread has input").
#pragma once

#include <memory>

namespace msgpass::kit::held {

// A node whose queue a thread holds: write_held writes what waits (no wait).
class Writer {
public:
    virtual void write_held() noexcept = 0;

protected:
    Writer() = default;
    Writer(const Writer&) = default;
    Writer& operator=(const Writer&) = default;
    ~Writer() = default;
};

// What the calling thread's last receive found: its message waiting (true), or
// nothing, or a message it had to wait for (false).
void input(bool waiting) noexcept;
[[nodiscard]] bool input_waiting() noexcept;
// Registers a writer whose queue this thread now holds.
void hold(std::weak_ptr<Writer> writer);
// Writes every queue this thread holds (and notes that no input waits).
void write_held() noexcept;
// What a receive's look that did not wait found, noted: a message (input waits) or
// nothing (the held queues go). Returns it.
template <class M>
M found(M m) {
    if (m) {
        input(true);
    } else {
        write_held();
    }
    return m;
}

} // namespace msgpass::kit::held
