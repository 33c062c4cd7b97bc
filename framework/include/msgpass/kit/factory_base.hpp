// The implementer kit: what every technology's factory does the same way. A
// technology derives its factory from FactoryBase and writes only how a node and an
// empty group of its own are made; the base keeps one node per peer id and one
// object per static group, fills static groups from the network file, flushes all
// nodes with one deadline, and at the end reports what could not be handed over.
// It also keeps the lifetime contract of node_factory.hpp (kit/lifetime.hpp): the
// nodes and groups it hands out that derive from FactoryBound are bound to its
// lifetime() token, which expires when it is destroyed. And it publishes the
// counters of its nodes in the statistics page (kit/stats_page.hpp), for
// msgpass-top, written by the node calls of the process (no thread), until close()
// or forget().
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/kit/health.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/stats_page.hpp>
#include <msgpass/node_factory.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace msgpass::kit {

class FactoryBase : public NodeFactory {
public:
    // Throws ConfigError (Configuration::node's wording) when self is not in the
    // nodes file.
    // A client's factory (NodeFactory::create_client) has self no_node, and its
    // configuration needs no node at all.
    FactoryBase(const config::Configuration& configuration, NodeId self);
    ~FactoryBase() override;
    [[nodiscard]] NodeId self_id() const noexcept final { return self_; }
    // The node of a peer, made on the first call by make_node and the same object
    // afterwards. UsageError for self_id(), ConfigError for an id that is not in
    // the nodes file.
    NodePtr create_node(NodeId id) final;
    std::unique_ptr<DynamicGroup> create_group() final;
    // The static group of the network file, made on the first call: its members in
    // file order, this process listed with add_self.
    std::shared_ptr<Group> create_group(const std::string& name) final;
    // Flushes every node made so far, with one deadline for all.
    bool flush(std::chrono::nanoseconds timeout) override;

    [[nodiscard]] const config::Configuration& configuration() const noexcept { return configuration_; }

    // Writes the statistics page now (the node calls write it every interval): a test,
    // or a program about to report, need not wait for the next one. Nothing when
    // this factory publishes no page (MSGPASS_STATS=0, or see StatsPublisher::start).
    void publish_stats();
    // The name of the statistics page, "" when this factory publishes none.
    [[nodiscard]] std::string stats_page() const;

protected:
    // Makes the node for a peer: id is in the nodes file and is not self_id().
    // Called once per id, with the factory's lock held. A node that derives from
    // FactoryBound is bound to this factory's life before create_node returns it.
    virtual NodePtr make_node(NodeId id) = 0;
    // Makes an empty group of this technology (a kit::GroupBase, bound to this
    // factory's life as a node is). Called without the factory's lock (a group's
    // add() may call create_node).
    virtual std::unique_ptr<BasicGroup> make_group(std::string name) = 0;

    // For the derived destructor, before it tears its transport down: flushes every
    // node for at most timeout (one deadline), writes one line on stderr per node
    // whose queue is not empty then, and drops the groups and the factory's
    // references to the nodes. True when every queue was emptied.
    bool close(std::chrono::nanoseconds timeout);
    // Drops the groups and the factory's references to the nodes, without flushing
    // (for a factory whose parts flush and report their own nodes).
    void forget();
    // Binds a node made outside make_node (a peer found at run time) to lifetime().
    void adopt(Node& node) const { bind(node); }
    // The nodes made so far, in id order.
    [[nodiscard]] std::vector<NodePtr> nodes() const;

private:
    FactoryBase(const config::Configuration& configuration, NodeId self, const std::string& name);
    static std::string name_of(const config::Configuration& configuration, NodeId self);
    // Stops publishing and removes the page (before the nodes go).
    void stop_publishing();
    // Binds what make_node or make_group returned to lifetime(), when it is FactoryBound.
    void bind(Node& node) const;
    void bind(Group& group) const;

    config::Configuration configuration_;
    NodeId self_;
    mutable std::mutex mutex_;
    std::map<NodeId, NodePtr> nodes_;
    std::map<std::string, std::shared_ptr<Group>> groups_;
    std::map<NodeId, std::shared_ptr<PeerHealth>> health_; // told by the nodes' loss latches
    std::unique_ptr<StatsPublisher> publisher_;            // last: its snapshots read the above
};

} // namespace msgpass::kit
