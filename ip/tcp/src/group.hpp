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
// last look (more may be parsed behind it), and those whose ready mark (kit::
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
// first receive after the members changed, and every sweep interval (50 ms) in case.
// Its cost per message does not grow with the group: a word of marks and of pending
// bits per 64 members, a look per pending member, an epoll_wait per sleep or round.
class TcpGroup final : public kit::ReadyGroup {
public:
    // MSGPASS_TCP_GROUP_SCAN=all in the environment when the group is made: every
    // receive reads every member and a wait sleeps on all their sockets, as before the
    // epoll set (kit::ReadyGroup::scans_all).
    TcpGroup(std::string name, std::shared_ptr<Transport> transport);
    ~TcpGroup() override;
    bool remove(NodeId id) override;

    // For the tests: how many times the epoll set was asked without sleeping, and how
    // many times every member was swept.
    [[nodiscard]] std::uint64_t refreshes() const noexcept { return refreshes_; }
    [[nodiscard]] std::uint64_t sweeps() const noexcept { return sweeps_; }

    static constexpr std::uint32_t refresh_rounds = 8;

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
    };
    struct Sleeper;
    BufferPtr look(std::size_t slot);
    void sweep();
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
    std::uint64_t refreshes_ = 0;
    std::uint64_t sweeps_ = 0;
};

} // namespace msgpass::tcp
