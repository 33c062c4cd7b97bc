// The sci factory and group, and the registration of the technology.
#include <msgpass/sci/factory.hpp>
#include <msgpass/sci/options.hpp>

#include "local_node.hpp"
#include "node.hpp"

#include <cstdio>

namespace msgpass::sci {

void register_technology() {
    config::SchemaRegistry::instance().add(schema());
    TechnologyRegistry::instance().add("sci", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<SciNodeFactory>(configuration, self);
    });
}

SciGroup::SciGroup(std::string name, std::shared_ptr<LocalNode> local)
    : BasicGroup(std::move(name), &local->bell()), local_(std::move(local)) {}

void SciGroup::add(NodePtr node) {
    if (node == nullptr || dynamic_cast<SciNode*>(node.get()) == nullptr) {
        throw UsageError("an sci group takes only sci nodes");
    }
    BasicGroup::add(std::move(node));
}

BufferPtr SciGroup::receive(std::chrono::nanoseconds timeout) {
    return local_->wait([this] { return BasicGroup::receive(); }, timeout);
}

SciNodeFactory::SciNodeFactory(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), self_(self),
      local_(std::make_shared<LocalNode>(LocalNodeParameters::from(configuration, self))) {}

SciNodeFactory::~SciNodeFactory() {
    std::lock_guard lock(mutex_);
    const auto deadline = deadline_after(configuration_.peer_timeout);
    for (auto& [id, node] : nodes_) {
        if (!node->flush(time_left(deadline))) {
            std::fprintf(stderr,
                         "msgpass: %zu messages to node %u (%s) were never transferred: the node did not "
                         "take them within peer_timeout\n",
                         node->queued(), id, node->name().c_str());
        }
    }
    for (auto& [id, node] : nodes_)
        node->publish_pending();
    // A clean end: partners that find this process gone with nothing outstanding
    // do not report it as lost (written into our header at each of them).
    local_->set_closing();
    groups_.clear();
    nodes_.clear();
}

Doorbell& SciNodeFactory::bell() const noexcept {
    return local_->bell();
}

BufferPtr SciNodeFactory::wait(const std::function<BufferPtr()>& poll, std::chrono::nanoseconds timeout) {
    return local_->wait(poll, timeout);
}

std::shared_ptr<SciNode> SciNodeFactory::make_node(NodeId id) {
    if (auto it = nodes_.find(id); it != nodes_.end()) return it->second;
    auto node = std::make_shared<SciNode>(local_, NodeParameters::from(configuration_, *local_, id));
    nodes_.emplace(id, node);
    return node;
}

NodePtr SciNodeFactory::create_node(NodeId id) {
    std::lock_guard lock(mutex_);
    return make_node(id);
}

BufferPtr SciNodeFactory::create_buffer(std::size_t size) {
    return local_->allocate_send_buffer(size);
}

std::unique_ptr<DynamicGroup> SciNodeFactory::create_group() {
    return std::make_unique<SciGroup>("", local_);
}

std::shared_ptr<Group> SciNodeFactory::create_group(const std::string& name) {
    std::lock_guard lock(mutex_);
    if (auto it = groups_.find(name); it != groups_.end()) return it->second;
    const auto& members = configuration_.group(name);
    auto group = std::make_shared<SciGroup>(name, local_);
    for (NodeId id : members) {
        if (id == self_) {
            group->add_self(id);
        } else {
            group->SciGroup::add(make_node(id));
        }
    }
    groups_.emplace(name, group);
    return group;
}

bool SciNodeFactory::flush(std::chrono::nanoseconds timeout) {
    std::vector<std::shared_ptr<SciNode>> nodes;
    {
        std::lock_guard lock(mutex_);
        for (auto& [id, n] : nodes_)
            nodes.push_back(n);
    }
    const auto deadline = deadline_after(timeout);
    bool all = true;
    for (auto& n : nodes)
        all = n->flush(time_left(deadline)) && all;
    return all;
}

} // namespace msgpass::sci
