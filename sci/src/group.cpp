// The sci group (group.hpp): the members' ready marks, taken and looked at in turn
// (kit::ReadyGroup).
#include "group.hpp"
#include "link.hpp"
#include "node.hpp"

#include <algorithm>
#include <utility>

namespace msgpass::sci {

SciGroup::SciGroup(std::string name, std::shared_ptr<Transport> transport)
    : ReadyGroup(std::move(name), &transport->bell(), "MSGPASS_SCI_GROUP_SCAN"), transport_(std::move(transport)) {}

void SciGroup::admit(NodePtr node) {
    auto sci = std::dynamic_pointer_cast<SciNode>(node);
    if (!sci) throw UsageError("an sci group takes only sci nodes");
    BasicGroup::add(std::move(node));
    if (std::find(members_.begin(), members_.end(), sci) != members_.end()) return;
    if (!scans_all()) sci->want_marks(); // marks the member itself: its first look comes with the next receive
    members_.push_back(std::move(sci));
    rebuild();
}

bool SciGroup::remove(NodeId id) {
    std::erase_if(members_, [id](const auto& n) { return n->id() == id; });
    rebuild();
    return BasicGroup::remove(id);
}

// The members by position from members_; marks pending for members that stay, stay.
void SciGroup::rebuild() {
    const std::size_t positions = transport_->parameters().node_count;
    at_.assign(positions, nullptr);
    std::vector<std::uint64_t> mask((positions + 63) / 64, 0);
    for (const auto& m : members_) {
        const std::size_t p = m->position();
        at_[p] = m.get();
        mask[p / 64] |= std::uint64_t{1} << (p % 64);
    }
    set_members(std::move(mask));
}

BufferPtr SciGroup::collect() {
    if (scans_all()) return BasicGroup::receive();
    if (members_.empty()) return nullptr;
    // What each member's receive did for the group when it polled them all: the send
    // queues of this process move while it waits here.
    transport_->driver().progress();
    if (sweep_due()) mark_all();
    for (const std::size_t w : member_words())
        mark_bits(w, transport_->take_ready(w, member_bits(w)));
    return next_ready([this](std::size_t p) { return at_[p]->receive(); });
}

BufferPtr SciGroup::wait(std::chrono::nanoseconds timeout) {
    return transport_->wait([this] { return poll(); }, timeout);
}

} // namespace msgpass::sci
