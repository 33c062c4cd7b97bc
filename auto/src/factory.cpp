// technology: auto: one factory over the sci and tcp factories (see msgpass/auto/factory.hpp).
#include <msgpass/auto/factory.hpp>

#include <msgpass/wait.hpp>

#include <algorithm>

namespace msgpass::auto_ {

void register_technology() {
    // auto runs the sci and tcp factories and reads their sections; it adds none.
    sci::register_technology();
    tcp::register_technology();
    config::SchemaRegistry::instance().add(config::TechnologySchema("auto"));
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
    if (remote) {
        tcp_ = std::make_unique<tcp::TcpNodeFactory>(configuration_, self);
        tcp_->ring_on_input(sci_->bell());
    }
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
    return std::make_unique<AutoGroup>("", *this);
}

std::shared_ptr<Group> AutoNodeFactory::create_group(const std::string& name) {
    std::lock_guard lock(mutex_);
    if (auto it = groups_.find(name); it != groups_.end()) return it->second;
    const auto& members = configuration_.group(name);
    auto group = std::make_shared<AutoGroup>(name, *this);
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

bool AutoNodeFactory::flush(std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    const bool sci = sci_->flush(time_left(deadline));
    return (tcp_ == nullptr || tcp_->flush(time_left(deadline))) && sci;
}

bool AutoNodeFactory::made(const Node& node) {
    if (node.id() == self_ || configuration_.find_node(node.id()) == nullptr) return false;
    return create_node(node.id()).get() == &node;
}

BufferPtr AutoGroup::receive(std::chrono::nanoseconds timeout) {
    return factory_.wait([this] { return BasicGroup::receive(); }, timeout);
}

void AutoGroup::add(NodePtr node) {
    if (!node) throw UsageError("DynamicGroup::add: null node");
    if (!factory_.made(*node)) {
        throw UsageError("node " + std::to_string(node->id()) + " was not made by this auto factory");
    }
    BasicGroup::add(std::move(node));
}

} // namespace msgpass::auto_
