// The implementer kit: the lifetime contract of node_factory.hpp. A Node or Group may
// be held past the destruction of the factory that made it, and dropping it then is
// safe; a call that moves messages (send, receive, flush, a group's add) is refused
// with a UsageError instead of touching a transport that has ended. What a factory
// hands out learns of its end by deriving from FactoryBound, which FactoryBase binds
// to the factory's NodeFactory::lifetime() token when the object is made.
#pragma once

#include <msgpass/group.hpp>
#include <msgpass/kit/stats_page.hpp>
#include <msgpass/node.hpp>

#include <chrono>
#include <memory>
#include <utility>

namespace msgpass::kit {

// A node or group of a technology derives from this (beside Node or BasicGroup) and
// calls check_factory at the start of each call that moves messages. FactoryBase
// binds it to its lifetime() token when make_node or make_group returned it (for a node
// made by another factory, as auto's parts make them, the last binding holds).
class FactoryBound {
public:
    FactoryBound() = default;
    FactoryBound(const FactoryBound&) = delete;
    FactoryBound& operator=(const FactoryBound&) = delete;

    // Before the object is handed out (the factory's lock or its construction
    // orders this before any call).
    void bind(std::weak_ptr<const void> life) noexcept {
        life_ = std::move(life);
        bound_ = true;
    }

protected:
    virtual ~FactoryBound() = default;

    // Throws UsageError "<call> on node N (name) after its factory was destroyed ..."
    // (or "group 'name'") once the factory that made this object is gone; nothing
    // before bind. One atomic load otherwise, and the statistics tick (a thread-local
    // count): the data path calls it.
    void check_factory(const char* call) const {
        if (bound_ && life_.expired()) [[unlikely]]
            refuse(call);
        stats_tick(); // the statistics pages are written from the node calls (kit/stats_page.hpp)
    }

private:
    [[noreturn]] void refuse(const char* call) const;
    std::weak_ptr<const void> life_;
    bool bound_ = false;
};

// BasicGroup with the factory check in front of every call that moves messages: a
// technology derives its groups from it and changes how a message reaches the
// members (distribute), the blocking receive (wait) or what a member may be (admit)
// in the hooks below, which run only after the check.
class GroupBase : public BasicGroup, public FactoryBound {
public:
    using BasicGroup::BasicGroup;

    void send(BufferPtr&& buffer) final;
    [[nodiscard]] BufferPtr receive() final;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) final;
    void add(NodePtr node) final;

protected:
    // Sends to the members: BasicGroup's (one send_shared per member) unless the
    // technology reaches them its own way (udp's multicast group).
    virtual void distribute(BufferPtr&& buffer) { BasicGroup::send(std::move(buffer)); }
    // The blocking receive: BasicGroup's (polling receive() and sleeping on the
    // doorbell given at construction) unless the technology sleeps its own way.
    [[nodiscard]] virtual BufferPtr wait(std::chrono::nanoseconds timeout) { return BasicGroup::receive(timeout); }
    // Adds a member: BasicGroup's unless the technology checks the node first.
    virtual void admit(NodePtr node) { BasicGroup::add(std::move(node)); }
    // One non-blocking receive from the members: BasicGroup's (every member polled,
    // the start rotating) unless the technology knows which members have something
    // (sci's ready marks).
    [[nodiscard]] virtual BufferPtr collect() { return BasicGroup::receive(); }
    // One poll of the members without the check, for a technology's wait.
    [[nodiscard]] BufferPtr poll() { return collect(); }
};

} // namespace msgpass::kit
