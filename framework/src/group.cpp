// Group ring helpers and BasicGroup, the technology-independent group: send goes to
// every member through Node::send_shared; receive polls members starting each call
// at the next member, so that no source can starve another (seed section 8).
#include <msgpass/group.hpp>
#include <msgpass/kit/errors.hpp>
#include <msgpass/wait.hpp>

#include <algorithm>
#include <string>

namespace msgpass {

namespace {
std::size_t index_of(const std::vector<NodeId>& ids, NodeId id) {
    auto it = std::find(ids.begin(), ids.end(), id);
    if (it == ids.end()) throw UsageError("node " + std::to_string(id) + " is not a member of the group");
    return static_cast<std::size_t>(it - ids.begin());
}
} // namespace

NodeId Group::first() const {
    auto ids = members();
    if (ids.empty()) throw UsageError("group '" + name() + "' is empty");
    return ids.front();
}

NodeId Group::next_after(NodeId id) const {
    auto ids = members();
    return ids[(index_of(ids, id) + 1) % ids.size()];
}

NodeId Group::previous_before(NodeId id) const {
    auto ids = members();
    return ids[(index_of(ids, id) + ids.size() - 1) % ids.size()];
}

bool Group::contains(NodeId id) const {
    auto ids = members();
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

BasicGroup::BasicGroup(std::string name, Doorbell* bell, WaitPolicy policy)
    : name_(std::move(name)), bell_(bell), policy_(policy) {}

std::vector<NodeId> BasicGroup::members() const {
    std::lock_guard lock(mutex_);
    return ids_;
}

std::size_t BasicGroup::size() const {
    std::lock_guard lock(mutex_);
    return ids_.size();
}

void BasicGroup::send(BufferPtr&& buffer) {
    if (!buffer) kit::throw_null_buffer(*this);
    std::vector<NodePtr> nodes;
    {
        std::lock_guard lock(mutex_);
        nodes = nodes_;
    }
    SharedBuffer shared(std::move(buffer));
    std::string failures;
    bool all_lost = true;
    NodeId lost_peer = 0;
    std::uint64_t unacknowledged = 0;
    for (const auto& node : nodes) {
        try {
            node->send_shared(shared);
        } catch (const PeerLost& e) {
            failures += (failures.empty() ? "" : "; ") + ("node " + std::to_string(node->id()) + ": ") + e.what();
            lost_peer = e.peer();
            unacknowledged += e.unacknowledged();
        } catch (const Error& e) {
            failures += (failures.empty() ? "" : "; ") + ("node " + std::to_string(node->id()) + ": ") + e.what();
            all_lost = false;
        }
    }
    if (failures.empty()) return;
    std::string what = "group '" + name_ + "' send failed for some members: " + failures;
    if (all_lost) throw PeerLost(lost_peer, what, unacknowledged);
    throw Error(what);
}

BufferPtr BasicGroup::receive() {
    // Receiver thread only; add/remove are documented not to run concurrently.
    const std::size_t n = nodes_.size();
    if (n == 0) return nullptr;
    const std::size_t start = next_start_ % n;
    next_start_ = start + 1;
    for (std::size_t k = 0; k < n; ++k) {
        if (auto b = nodes_[(start + k) % n]->receive()) return b;
    }
    return nullptr;
}

BufferPtr BasicGroup::receive(std::chrono::nanoseconds timeout) {
    return wait_for([this] { return receive(); }, timeout, bell_, policy_);
}

void BasicGroup::add(NodePtr node) {
    if (!node) throw UsageError("DynamicGroup::add: null node");
    std::lock_guard lock(mutex_);
    if (std::find(ids_.begin(), ids_.end(), node->id()) != ids_.end()) return;
    ids_.push_back(node->id());
    nodes_.push_back(std::move(node));
}

void BasicGroup::add_self(NodeId self) {
    std::lock_guard lock(mutex_);
    if (std::find(ids_.begin(), ids_.end(), self) == ids_.end()) ids_.push_back(self);
}

bool BasicGroup::remove(NodeId id) {
    std::lock_guard lock(mutex_);
    auto id_it = std::find(ids_.begin(), ids_.end(), id);
    if (id_it == ids_.end()) return false;
    ids_.erase(id_it);
    auto it = std::find_if(nodes_.begin(), nodes_.end(), [id](const NodePtr& n) { return n->id() == id; });
    if (it != nodes_.end()) nodes_.erase(it);
    return true;
}

} // namespace msgpass
