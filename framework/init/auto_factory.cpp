// technology: auto: one factory over the sci and tcp factories (see auto_factory.hpp).
#include "auto_factory.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>

namespace msgpass {

void register_auto_technology() {
    TechnologyRegistry::instance().add("auto", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<AutoNodeFactory>(configuration, self);
    });
}

bool same_machine(const config::NodeConfig& a, const config::NodeConfig& b) {
    if (!a.machine.empty() || !b.machine.empty()) return a.machine == b.machine;
    const auto local = [](const std::string& h) { return h == "localhost" || h.rfind("127.", 0) == 0 || h == "::1"; };
    return a.host == b.host || (local(a.host) && local(b.host));
}

AutoNodeFactory::AutoNodeFactory(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), self_(self) {
    const auto& me = configuration_.node(self);
    sci_ = std::make_unique<sci::SciNodeFactory>(configuration_, self);
    const bool remote = std::any_of(configuration_.nodes.begin(), configuration_.nodes.end(),
                                    [&](const config::NodeConfig& n) { return !same_machine(me, n); });
    if (remote) tcp_ = std::make_unique<tcp::TcpNodeFactory>(configuration_, self);
}

AutoNodeFactory::~AutoNodeFactory() {
    {
        std::lock_guard lock(mutex_);
        groups_.clear();
    }
    tcp_.reset();
    sci_.reset();
}

std::string_view AutoNodeFactory::technology_of(NodeId id) const {
    return same_machine(configuration_.node(self_), configuration_.node(id)) ? "sci" : "tcp";
}

NodePtr AutoNodeFactory::create_node(NodeId id) {
    if (id != self_ && configuration_.find_node(id) != nullptr && technology_of(id) == "tcp") {
        return tcp_->create_node(id);
    }
    return sci_->create_node(id); // also reports self and unknown ids
}

BufferPtr AutoNodeFactory::create_buffer(std::size_t size) {
    return sci_->create_buffer(size);
}

std::unique_ptr<DynamicGroup> AutoNodeFactory::create_group() {
    return std::make_unique<AutoGroup>("", sci_->local_node().bell(), tcp_.get());
}

std::shared_ptr<Group> AutoNodeFactory::create_group(const std::string& name) {
    std::lock_guard lock(mutex_);
    if (auto it = groups_.find(name); it != groups_.end()) return it->second;
    const auto& members = configuration_.group(name);
    auto group = std::make_shared<AutoGroup>(name, sci_->local_node().bell(), tcp_.get());
    for (NodeId id : members) {
        if (id == self_) {
            group->add_self(id);
        } else {
            group->add(create_node(id));
        }
    }
    groups_.emplace(name, group);
    return group;
}

AutoGroup::AutoGroup(std::string name, Doorbell& bell, const tcp::TcpNodeFactory* tcp)
    : BasicGroup(std::move(name), &bell), bell_(bell), tcp_(tcp) {}

namespace {
bool is_tcp(const NodePtr& n) {
    return dynamic_cast<sci::SciNode*>(n.get()) == nullptr;
}
} // namespace

void AutoGroup::add(NodePtr node) {
    if (!node) throw UsageError("DynamicGroup::add: null node");
    if (is_tcp(node) && tcp_ == nullptr)
        throw UsageError("this auto factory has no tcp part for node " + std::to_string(node->id()));
    BasicGroup::add(node);
    std::lock_guard lock(members_mutex_);
    if (std::find(members_.begin(), members_.end(), node) != members_.end()) return;
    if (is_tcp(node)) ++tcp_members_;
    members_.push_back(std::move(node));
}

bool AutoGroup::remove(NodeId id) {
    {
        std::lock_guard lock(members_mutex_);
        auto it = std::find_if(members_.begin(), members_.end(), [id](const NodePtr& n) { return n->id() == id; });
        if (it != members_.end()) {
            if (is_tcp(*it)) --tcp_members_;
            members_.erase(it);
        }
    }
    return BasicGroup::remove(id);
}

BufferPtr AutoGroup::receive(std::chrono::nanoseconds timeout) {
    std::vector<NodePtr> members;
    std::size_t tcp_members = 0;
    {
        std::lock_guard lock(members_mutex_);
        members = members_;
        tcp_members = tcp_members_;
    }
    if (tcp_members == 0 || tcp_ == nullptr) return wait_for([this] { return BasicGroup::receive(); }, timeout, &bell_);
    const bool mixed = tcp_members < members.size();
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout;
    for (;;) {
        if (auto m = BasicGroup::receive()) return m;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return nullptr;
        const auto step = mixed ? std::chrono::nanoseconds(std::chrono::milliseconds(1))
                                : std::chrono::nanoseconds(std::chrono::milliseconds(100));
        tcp_->wait_for_input(members, std::min<std::chrono::nanoseconds>(deadline - now, step),
                             now - start >= std::chrono::milliseconds(1));
    }
}

} // namespace msgpass
