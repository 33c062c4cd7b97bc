// technology: auto (BMI's several methods active at once): nodes on this machine
// are reached through sci, nodes on other machines through tcp (or udp, with
// `auto: {inter_host: udp}`), inside one factory
// and one group. Two nodes are on the same machine when they name the same
// `machine` in the nodes file, or, when neither names one, the same host.
// The namespace is msgpass::auto_ because `auto` is a C++ keyword.
#pragma once

#include <msgpass/auto/options.hpp>
#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/kit/factory_base.hpp>
#include <msgpass/sci/factory.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/udp/factory.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

namespace msgpass::auto_ {

// Registers "auto" (and its section, Options) with the TechnologyRegistry and
// config::SchemaRegistry, and the sci, tcp and udp technologies it is made of. Idempotent.
void register_technology();

// True when the two nodes of the configuration are on the same machine.
[[nodiscard]] bool same_machine(const config::NodeConfig& a, const config::NodeConfig& b);

class AutoNodeFactory final : public kit::FactoryBase {
public:
    // Makes the sci factory always and the tcp or udp factory (auto.inter_host) when
    // a node of the nodes file is on another machine, or when this node takes clients
    // in no nodes file (tcp.max_clients or udp.max_clients above 0); this node then
    // needs a port.
    AutoNodeFactory(const config::Configuration& configuration, NodeId self);
    ~AutoNodeFactory() override;

    [[nodiscard]] std::string_view technology() const noexcept override { return "auto"; }
    BufferPtr create_buffer(std::size_t size) override;

    // The technology that reaches node id ("sci", or auto.inter_host: "tcp" or "udp").
    [[nodiscard]] std::string_view technology_of(NodeId id) const override;
    // The doorbell every group of this factory sleeps on (the sci one; the tcp part
    // rings it on input).
    [[nodiscard]] Doorbell& bell() const noexcept { return sci_->bell(); }
    // Calls poll until it returns a buffer or timeout passes, sleeping on that
    // doorbell as the sci nodes do (sci::SciNodeFactory::wait).
    [[nodiscard]] BufferPtr wait(const std::function<BufferPtr()>& poll, std::chrono::nanoseconds timeout) {
        return sci_->wait(poll, timeout);
    }
    // For AutoGroup: input from tcp node id rings the doorbell from now on (a group
    // names its tcp members before it first sleeps; tcp::TcpNodeFactory::ring_on_input_from),
    // and the call of a thread about to sleep on it (before_bell_sleep).
    void ring_on_input_from(NodeId id) {
        if (tcp_) tcp_->ring_on_input_from(id);
    }
    void before_bell_sleep() {
        if (tcp_) tcp_->before_bell_sleep();
    }
    // For AutoGroup: a group of the part that reaches node id (sci, or the tcp or udp
    // part), whose receive looks only at the members with something (ready marks,
    // the epoll set).
    [[nodiscard]] std::unique_ptr<DynamicGroup> create_part_group(NodeId id);
    // True when node is one this factory made (through its sci, tcp or udp part),
    // a peer found at run time included.
    [[nodiscard]] bool made(const Node& node);

    // Peers found at run time (docs/communicator.md) are those of the part between
    // machines (auto.inter_host: tcp or udp): its clients (tcp.max_clients,
    // udp.max_clients) and the servers looked up by "tcp://host:port" or
    // "udp://host:port". Without that part (no node elsewhere and max_clients 0)
    // there are none: lookup is a UsageError saying why.
    NodePtr lookup(std::string_view address) override;
    [[nodiscard]] std::uint32_t runtime_peers_seen() const noexcept override;
    NodePtr runtime_peer(NodeId id) override;
    void forget_runtime_peer(NodeId id) override;
    [[nodiscard]] std::uint32_t runtime_peers_forgotten() const noexcept override;

private:
    NodePtr make_node(NodeId id) override;
    std::unique_ptr<BasicGroup> make_group(std::string name) override;
    std::unique_ptr<sci::SciNodeFactory> sci_;
    std::unique_ptr<tcp::TcpNodeFactory> tcp_;
    std::unique_ptr<udp::UdpNodeFactory> udp_;
    std::string inter_host_;
    // The tcp or udp part (null: none).
    [[nodiscard]] NodeFactory* between() const noexcept {
        return tcp_ ? static_cast<NodeFactory*>(tcp_.get()) : static_cast<NodeFactory*>(udp_.get());
    }
    // The servers looked up through the tcp part (one entry per server, not per client).
    std::mutex looked_up_mutex_;
    std::set<NodeId> looked_up_;
};

// A group whose members may be sci and tcp nodes. A blocking receive waits as an
// sci group does (it tells the sci partners that it sleeps) on the sci doorbell,
// which the tcp factory rings on input from any of its connections.
class AutoGroup final : public kit::GroupBase {
public:
    // The group refers to its factory: the kit's check refuses every call that would
    // reach it once the factory is gone (kit/lifetime.hpp).
    AutoGroup(std::string name, AutoNodeFactory& factory)
        : GroupBase(std::move(name), &factory.bell()), factory_(factory) {}

    bool remove(NodeId id) override;

protected:
    // Throws UsageError for a node that this group's factory did not make.
    void admit(NodePtr node) override;
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override;
    // From parts_min_between members reached through tcp or udp: the sci members
    // through a group of the sci part, the others through one of the tcp or udp part,
    // the first looked at alternating; each part's group looks only at its members
    // that have something, so a receive does not cost a look at every member (a
    // recv() per tcp member). Below it, every member is looked at in turn (BasicGroup):
    // a few busy tcp members are cheaper to read at each look than to ask an epoll set
    // about (docs/tcp.md, "technology: auto").
    [[nodiscard]] BufferPtr collect() override;

private:
    AutoNodeFactory& factory_;
    static constexpr std::size_t parts_min_between = 32;
    [[nodiscard]] bool by_parts() const noexcept { return between_members_ >= parts_min_between; }
    std::unique_ptr<DynamicGroup> sci_part_;     // made with the first sci member
    std::unique_ptr<DynamicGroup> between_part_; // made with the first tcp or udp member
    std::size_t between_members_ = 0;            // the members of between_part_
    bool between_first_ = false;                 // which part the next receive looks at first
    // tcp members not yet named to the tcp part (ring_on_input_from): named at the
    // first blocking receive after they joined, so that only the tcp nodes of a group
    // that sleeps ring the doorbell.
    std::vector<NodeId> unbelled_;
};

} // namespace msgpass::auto_
