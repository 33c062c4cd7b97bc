// The group room of sci: SciGroup, a dynamic group whose members are all sci nodes,
// which waits as they do and receives only from the members whose ready mark is set
// (the kit's ReadyGroup does the rest).
#pragma once

#include <msgpass/kit/factory_base.hpp>
#include <msgpass/kit/ready_group.hpp>

#include "transport.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace msgpass::sci {

class SciNode;

// SCIGroup: a dynamic group whose members are all SCINodes; a blocking receive
// waits as the nodes do (Transport::wait) and sleeps on the local segment's doorbell.
//
// A receive looks only at members with a ready mark (protocol.hpp, ControlBlock::ready):
// a member asked for marks (SciNode::want_marks) sets its mark after each message,
// and the receiver sets it for work it left (a message taken with more behind it, a
// grant the empty pool could not give, a large buffer released). The marks of the
// members are taken as the kit's pending bits (cleared in the segment before the
// members are looked at, so a message published after the take brings a new mark), a
// bit per position in the nodes file, and the start rotates among the pending members
// (kit::ReadyGroup): a member that had a message is looked at again only after every
// other pending one. Every 50 ms (the kit's sweep interval) every member is looked at
// once, in case a mark was spent on a look that could not take its message yet (a
// connection made at most every 2 ms, a peer check every peer_timeout / 4): a loss, a
// restart or a new peer is found within it. Its cost per message does not grow with
// the group: at most a word of marks per 64 members, one look per message and one
// sweep per 50 ms (docs/sci-protocol.md, "Ready marks").
class SciGroup final : public kit::ReadyGroup {
public:
    // MSGPASS_SCI_GROUP_SCAN=all in the environment when the group is made: every
    // receive looks at every member, as before the ready marks (kit::ReadyGroup::scans_all).
    SciGroup(std::string name, std::shared_ptr<Transport> transport);
    bool remove(NodeId id) override;

protected:
    // Throws UsageError when the node is not an SCINode.
    void admit(NodePtr node) override;
    [[nodiscard]] BufferPtr collect() override;
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override;

private:
    void rebuild();

    std::shared_ptr<Transport> transport_;          // the doorbell and the marks live in its segment
    std::vector<std::shared_ptr<SciNode>> members_; // receiver thread (add/remove are not concurrent with receive)
    std::vector<SciNode*> at_;                      // member by position in the nodes file, or null
};

} // namespace msgpass::sci
