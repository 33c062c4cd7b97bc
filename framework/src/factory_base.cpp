// The factory base of the implementer kit (msgpass/kit/factory_base.hpp).
#include <msgpass/deadline.hpp>
#include <msgpass/kit/factory_base.hpp>
#include <msgpass/log.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace msgpass::kit {

std::string FactoryBase::name_of(const config::Configuration& configuration, NodeId self) {
    return self == no_node ? "client" : configuration.node(self).name;
}

FactoryBase::FactoryBase(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self, name_of(configuration, self)) {}

FactoryBase::FactoryBase(const config::Configuration& configuration, NodeId self, const std::string& name)
    : configuration_(configuration), self_(self) {
    log::configure(configuration_);
    StatsPublisher::Identity identity;
    identity.partition = configuration_.partition;
    identity.node = self;
    identity.name = name;
    // The technology's name is not known to a base under construction; the file's is.
    identity.technology = configuration_.technology;
    for (const auto& [name, members] : configuration_.groups)
        if (std::find(members.begin(), members.end(), self) != members.end()) identity.groups.push_back(name);
    identity.peers = configuration_.nodes.size();
    // A client has no node id of its own to name a page by (several may run on a host).
    if (self == no_node) return;
    publisher_ = StatsPublisher::start(identity, [this]() -> std::optional<std::vector<StatsPublisher::Peer>> {
        std::vector<StatsPublisher::Peer> peers;
        std::map<NodeId, std::shared_ptr<PeerHealth>> health;
        std::vector<NodePtr> made;
        {
            // Tried, not waited for: the node call that writes the page may come from
            // this very thread inside create_node (a technology's make_node).
            std::unique_lock lock(mutex_, std::try_to_lock);
            if (!lock.owns_lock()) return std::nullopt;
            health = health_;
            for (const auto& [id, node] : nodes_)
                made.push_back(node);
        }
        for (const auto& node : made) {
            StatsPublisher::Peer peer;
            peer.id = node->id();
            peer.stats = node->stats();
            if (auto it = health.find(peer.id); it != health.end()) peer.health = it->second;
            peers.push_back(std::move(peer));
        }
        return peers;
    });
}

FactoryBase::~FactoryBase() {
    stop_publishing();
}

void FactoryBase::stop_publishing() {
    if (publisher_) publisher_->stop();
}

void FactoryBase::publish_stats() {
    if (publisher_) publisher_->publish();
}

std::string FactoryBase::stats_page() const {
    return publisher_ ? publisher_->name() : std::string();
}

void FactoryBase::bind(Node& node) const {
    if (auto* bound = dynamic_cast<FactoryBound*>(&node)) bound->bind(lifetime());
}

void FactoryBase::bind(Group& group) const {
    if (auto* bound = dynamic_cast<FactoryBound*>(&group)) bound->bind(lifetime());
}

NodePtr FactoryBase::create_node(NodeId id) {
    if (id == self_) {
        throw UsageError("node " + std::to_string(id) + " is this process itself: a node cannot send to itself");
    }
    (void)configuration_.node(id);
    std::lock_guard lock(mutex_);
    auto& node = nodes_[id];
    if (!node) {
        auto& health = health_[id];
        if (!health) health = std::make_shared<PeerHealth>();
        const HealthScope scope(health); // the node's loss latch reports to it
        node = make_node(id);
        bind(*node);
    }
    return node;
}

std::unique_ptr<DynamicGroup> FactoryBase::create_group() {
    auto group = make_group("");
    bind(*group);
    return group;
}

std::shared_ptr<Group> FactoryBase::create_group(const std::string& name) {
    {
        std::lock_guard lock(mutex_);
        if (auto it = groups_.find(name); it != groups_.end()) return it->second;
    }
    // Made outside the lock: a group's add() may ask this factory whether it made a
    // node (technology: auto). Two threads may both make it; the first one stored wins.
    const auto& members = configuration_.group(name);
    std::shared_ptr<BasicGroup> group = make_group(name);
    bind(*group);
    for (NodeId id : members) {
        if (id == self_) {
            group->add_self(id);
        } else {
            group->add(create_node(id));
        }
    }
    std::lock_guard lock(mutex_);
    return groups_.emplace(name, std::move(group)).first->second;
}

std::vector<NodePtr> FactoryBase::nodes() const {
    std::lock_guard lock(mutex_);
    std::vector<NodePtr> all;
    all.reserve(nodes_.size());
    for (const auto& [id, node] : nodes_)
        all.push_back(node);
    return all;
}

bool FactoryBase::flush(std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    bool all = true;
    for (const auto& node : nodes())
        all = node->flush(time_left(deadline)) && all;
    return all;
}

bool FactoryBase::close(std::chrono::nanoseconds timeout) {
    stop_publishing();
    const auto deadline = deadline_after(timeout);
    bool all = true;
    for (const auto& node : nodes()) {
        if (node->flush(time_left(deadline))) continue;
        all = false;
        MSGPASS_LOG(framework, warn,
                    "msgpass " + std::string(technology()) + " node " + std::to_string(self_) + ": " +
                        std::to_string(node->stats().queue_depth) + " messages to node " + std::to_string(node->id()) +
                        " (" + node->name() + ") were never handed over: the node did not take them within " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) + " ms");
    }
    forget();
    return all;
}

void FactoryBase::forget() {
    stop_publishing();
    std::map<NodeId, NodePtr> nodes;
    std::map<std::string, std::shared_ptr<Group>> groups;
    {
        std::lock_guard lock(mutex_);
        nodes.swap(nodes_);
        groups.swap(groups_);
    }
    groups.clear(); // before the nodes they hold, outside the lock
}

} // namespace msgpass::kit
