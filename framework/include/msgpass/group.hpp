// Group: a set of nodes; send to all of them, receive from any of them (seed
// section 8). Group is abstract so that a technology with multicast can serve a
// static group natively; DynamicGroup adds insertion and removal at run time.
// BasicGroup is the portable implementation on top of Node: a send goes to every
// member in turn; a receive polls the members starting each time from the next
// member (fair rotation).
#pragma once

#include <msgpass/node.hpp>
#include <msgpass/wait.hpp>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace msgpass {

class Group {
public:
    Group() = default;
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    virtual ~Group() = default;

    // The group's name ("" for a dynamic group made at run time).
    [[nodiscard]] virtual const std::string& name() const noexcept = 0;
    // Member ids in the order of the configuration (or of insertion). Any thread.
    [[nodiscard]] virtual std::vector<NodeId> members() const = 0;
    [[nodiscard]] virtual std::size_t size() const = 0;

    // Sends the message to every member. Non-blocking, as Node::send; any thread.
    // The layer owns the buffer afterwards, even on error: every member is tried, and
    // if some failed an Error naming each failing member and its reason is thrown
    // after the others got the message (a PeerLost when all failures are losses).
    virtual void send(BufferPtr&& buffer) = 0;

    // Non-blocking receive from any member, starting each call at the member after
    // the one that was polled first last time. Buffer::source() names the sender.
    [[nodiscard]] virtual BufferPtr receive() = 0;
    // Blocking receive from any member, at most timeout; null on timeout.
    [[nodiscard]] virtual BufferPtr receive(std::chrono::nanoseconds timeout) = 0;

    // Ring helpers (BIP's token ring): members in configuration order, wrapping.
    // Throw UsageError when id is not a member or the group is empty.
    [[nodiscard]] NodeId first() const;
    [[nodiscard]] NodeId next_after(NodeId id) const;
    [[nodiscard]] NodeId previous_before(NodeId id) const;
    [[nodiscard]] bool contains(NodeId id) const;
};

class DynamicGroup : public Group {
public:
    // Adds a node (no effect if it is a member). Not concurrent with receive().
    virtual void add(NodePtr node) = 0;
    // Removes a node; returns false if it was not a member. Not concurrent with receive().
    virtual bool remove(NodeId id) = 0;
};

// The technology-independent group. Send and receive go through Node; a
// technology passes its doorbell so that a blocking receive sleeps on it, and may
// pass the wait policy of that receive (tests pass a long max_sleep, so that only
// the doorbell's ring can wake the receiver in time).
class BasicGroup : public DynamicGroup {
public:
    explicit BasicGroup(std::string name = {}, Doorbell* bell = nullptr, WaitPolicy policy = {});

    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    [[nodiscard]] std::vector<NodeId> members() const override;
    [[nodiscard]] std::size_t size() const override;
    void send(BufferPtr&& buffer) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    void add(NodePtr node) override;
    bool remove(NodeId id) override;
    // Lists the calling process's own id as a member (a static group that contains
    // it, as a ring does): members() shows it, send and receive skip it.
    void add_self(NodeId self);

private:
    std::string name_;
    Doorbell* bell_;
    WaitPolicy policy_;
    mutable std::mutex mutex_; // guards the lists against add/remove during send
    std::vector<NodeId> ids_;  // members in order, self included
    std::vector<NodePtr> nodes_;
    std::size_t next_start_ = 0; // receiver thread only
};

} // namespace msgpass
