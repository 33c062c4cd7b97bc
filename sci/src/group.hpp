// The group room of sci: SciGroup, a dynamic group whose members are all sci nodes,
// which waits as they do and receives only from the members whose ready mark is set
// (the kit's GroupBase does the rest).
#pragma once

#include <msgpass/kit/factory_base.hpp>

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
// members are taken into pending_ (cleared in the segment before the members are
// looked at, so a message published after the take brings a new mark), and the start
// rotates among the pending members: a member that had a message is looked at again
// only after every other pending one. Every 50 ms (sweep_interval_) every member is looked at
// once, in case a mark was spent on a look that could not take its message yet (a
// connection made at most every 2 ms, a peer check every peer_timeout / 4): a loss, a
// restart or a new peer is found within it. Its cost per message does not grow with
// the group: at most a word of marks per 64 members, one look per message and one
// sweep per 50 ms (docs/sci-protocol.md, "Ready marks").
class SciGroup final : public kit::GroupBase {
public:
    SciGroup(std::string name, std::shared_ptr<Transport> transport);
    bool remove(NodeId id) override;

    // The measurement switch of msgpass-bench's fanin pattern (MSGPASS_SCI_GROUP_SCAN=all
    // in the environment when the group is made): every receive looks at every member,
    // as before the ready marks. Not for production.
    [[nodiscard]] bool scans_all() const noexcept { return scan_all_; }
    // For the tests: how many times a member was looked at, and the sweep's period
    // (a test that sets it long sees only what the marks bring).
    [[nodiscard]] std::uint64_t looks() const noexcept { return looks_; }
    void set_sweep_interval(std::chrono::nanoseconds interval) noexcept;

protected:
    // Throws UsageError when the node is not an SCINode.
    void admit(NodePtr node) override;
    [[nodiscard]] BufferPtr collect() override;
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override;

private:
    BufferPtr look(std::size_t position);
    void rebuild();

    std::shared_ptr<Transport> transport_; // the doorbell and the marks live in its segment
    const bool scan_all_;
    std::vector<std::shared_ptr<SciNode>> members_; // receiver thread (add/remove are not concurrent with receive)
    std::vector<SciNode*> at_;                      // member by position in the nodes file, or null
    std::vector<std::size_t> words_;                // words of marks that hold a member
    std::vector<std::uint64_t> mask_;               // the members' bits, per word
    std::vector<std::uint64_t> pending_;            // marks taken and not looked at yet, per word
    std::size_t cursor_ = 0;                        // the look starts at the first pending position from here
    std::chrono::nanoseconds sweep_interval_{std::chrono::milliseconds(50)};
    std::int64_t next_sweep_ns_ = 0;
    std::uint64_t looks_ = 0;
};

} // namespace msgpass::sci
