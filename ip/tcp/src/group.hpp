// The group room of tcp: TcpGroup, a dynamic group whose members are all tcp nodes,
// which receives only from the members whose connection has something to read (an
// epoll set of their sockets) or that marked something for it, and sleeps on that set
// (the kit's ReadyGroup does the rest).
#pragma once

#include <msgpass/kit/factory_base.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/ready_group.hpp>

#include "transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace msgpass::tcp {

class TcpNode;

// TcpGroup: a dynamic group whose members are all tcp nodes; a blocking receive
// sleeps in epoll_wait on the group's epoll set, which holds the factory's wake-up
// descriptor too.
//
// A receive looks only at the pending members (kit::ReadyGroup, a bit per slot of the
// members): those the group's epoll set (each member's connection, level-triggered,
// watched by the group itself) says are readable, those that gave a message on their
// last look (more may be parsed behind it; but a look at a member whose read drained
// its socket and left nothing, TcpNode::drained, ends at once without a system call:
// more input makes its connection readable in the set), and those whose ready mark (kit::
// ReadyMarks, set by the member when it tells its receivers of something: a
// connection installed, a peer lost, a message the background thread read) the
// receive took and that have something a receive finds without reading the socket (a
// message in the inbox, a protocol violation or a loss to report, no connection); a
// marked member's new connection joins the set then. The start rotates among the
// pending members: a round takes them in slot order from the cursor, a member that
// gave a message is looked at again only after every other pending one, and the set
// is asked (epoll_wait without waiting) for the members readable since when a round
// ends with none pending (unless the receive is about to sleep on the set, which asks
// it then) and at least every refresh_rounds receives otherwise (a member whose read
// parsed many messages costs no system call per message, and a member readable
// meanwhile waits at most that many receives). A sweep looks at every member's state
// under its receive lock and registers the connections that are new since: at the
// first receive after the members changed, and every full_sweep_every sweep intervals
// (1 s) in case; every sweep interval (50 ms) the members whose connection is not in
// the set are swept (the others are followed by the set and their marks).
// Its cost per message does not grow with the group: a word of marks and of pending
// bits per 64 members, a look per pending member, an epoll_wait per sleep or round;
// a message that came alone costs one read of its socket and the sleep's epoll_wait.
class TcpGroup final : public kit::ReadyGroup {
public:
    // MSGPASS_TCP_GROUP_SCAN=all in the environment when the group is made: every
    // receive reads every member and a wait sleeps on all their sockets, as before the
    // epoll set (kit::ReadyGroup::scans_all).
    TcpGroup(std::string name, std::shared_ptr<Transport> transport);
    ~TcpGroup() override;
    bool remove(NodeId id) override;

    // For the tests: how many times the epoll set was asked without sleeping, how
    // many times it was slept on, how many times every member was swept, and how many
    // members' states a sweep looked at (under their receive lock).
    [[nodiscard]] std::uint64_t refreshes() const noexcept { return refreshes_; }
    [[nodiscard]] std::uint64_t sleeps() const noexcept { return sleeps_; }
    [[nodiscard]] std::uint64_t sweeps() const noexcept { return sweeps_; }
    [[nodiscard]] std::uint64_t swept_members() const noexcept { return swept_members_; }

    static constexpr std::uint32_t refresh_rounds = 8;
    // The periodic sweep (every sweep interval) looks only at the members whose
    // connection is not in the set; every this many, at every member.
    static constexpr std::uint32_t full_sweep_every = 20;

protected:
    // Throws UsageError when the node is not a tcp node.
    void admit(NodePtr node) override;
    [[nodiscard]] BufferPtr collect() override;
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override;

private:
    struct Member {
        std::shared_ptr<TcpNode> node;
        std::int64_t watched = -1; // the generation of the connection in the set, -1 when none
        bool owes = false;         // gave a message since the last idle acknowledgement
        // Its last message came from a read that drained its socket and left nothing
        // (TcpNode::drained): its next look finds nothing without a system call, until
        // the set reports its connection readable or its mark or a sweep makes it pending.
        bool drained = false;
    };
    struct Sleeper;
    BufferPtr look(std::size_t slot);
    void sweep(bool all);
    void ready(std::size_t slot) noexcept {
        members_[slot].drained = false;
        mark(slot);
    }
    void follow_marks();
    void refresh();
    void mark_readable(int events);
    void sleep(std::chrono::nanoseconds step);
    void rebuild();
    void acknowledge_owed();

    std::shared_ptr<Transport> transport_;
    std::unique_ptr<ip::Epoll> set_;
    std::shared_ptr<kit::ReadyMarks> marks_; // the members' marks, a bit per slot
    std::vector<Member> members_;            // receiver thread (add/remove are not concurrent with receive)
    std::vector<std::size_t> owing_;         // slots with owes set
    std::vector<epoll_event> events_;        // what a refresh or a sleep found
    std::uint32_t since_refresh_ = 0;        // receives since the set was last asked
    bool swept_ = false;                     // a sweep since the members changed
    bool waiting_ = false;                   // in wait(): a round that ends with none pending sleeps next
    std::uint32_t partial_sweeps_ = 0;       // periodic sweeps since the last of every member
    std::uint64_t refreshes_ = 0;
    std::uint64_t sleeps_ = 0;
    std::uint64_t sweeps_ = 0;
    std::uint64_t swept_members_ = 0;
};

} // namespace msgpass::tcp
