// technology: auto (BMI's several methods active at once): nodes on this machine
// are reached through sci, nodes on other machines through tcp, inside one factory
// and one group. Two nodes are on the same machine when they name the same
// `machine` in the nodes file, or, when neither names one, the same host.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/node_factory.hpp>
#include <msgpass/sci/factory.hpp>
#include <msgpass/tcp/factory.hpp>

#include <map>
#include <memory>
#include <mutex>

namespace msgpass {

// Registers "auto" with the TechnologyRegistry. Idempotent.
void register_auto_technology();

// True when the two nodes of the configuration are on the same machine.
[[nodiscard]] bool same_machine(const config::NodeConfig& a, const config::NodeConfig& b);

class AutoNodeFactory final : public NodeFactory {
public:
    // Makes the sci factory always and the tcp factory when a node of the nodes
    // file is on another machine (this node then needs a port).
    AutoNodeFactory(const config::Configuration& configuration, NodeId self);
    ~AutoNodeFactory() override;

    [[nodiscard]] std::string_view technology() const noexcept override { return "auto"; }
    [[nodiscard]] NodeId self_id() const noexcept override { return self_; }
    NodePtr create_node(NodeId id) override;
    BufferPtr create_buffer(std::size_t size) override;
    std::unique_ptr<DynamicGroup> create_group() override;
    std::shared_ptr<Group> create_group(const std::string& name) override;

    // The technology that reaches node id ("sci" or "tcp").
    [[nodiscard]] std::string_view technology_of(NodeId id) const;

private:
    config::Configuration configuration_;
    NodeId self_;
    std::unique_ptr<sci::SciNodeFactory> sci_;
    std::unique_ptr<tcp::TcpNodeFactory> tcp_;
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<Group>> groups_;
};

// A group whose members may be sci and tcp nodes. A blocking receive sleeps on the
// sci doorbell, which the tcp factory rings on input from any of its connections.
class AutoGroup final : public BasicGroup {
public:
    AutoGroup(std::string name, Doorbell& bell, bool has_tcp) : BasicGroup(std::move(name), &bell), has_tcp_(has_tcp) {}
    // Throws UsageError for a tcp node when the factory has no tcp part.
    void add(NodePtr node) override;

private:
    bool has_tcp_;
};

} // namespace msgpass
