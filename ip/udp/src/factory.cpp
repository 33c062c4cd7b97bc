// The udp factory and the registration of the technology.
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>

#include "transport.hpp"

#include <msgpass/address.hpp>
#include <msgpass/kit/errors.hpp>

namespace msgpass::udp {

void register_technology() {
    config::SchemaRegistry::instance().add(schema());
    TechnologyRegistry::instance().add("udp", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<UdpNodeFactory>(configuration, self);
    });
}

UdpNodeFactory::UdpNodeFactory(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self), transport_(std::make_shared<Transport>(configuration, self)) {}

void UdpNodeFactory::ring_on_input(Doorbell& bell) {
    transport_->shared().also_ring.store(&bell, std::memory_order_release);
}

UdpNodeFactory::~UdpNodeFactory() {
    const auto deadline = deadline_after(configuration().peer_timeout);
    close(time_left(deadline));
    transport_->shutdown(deadline);
}

NodePtr UdpNodeFactory::make_node(NodeId id) {
    auto node = transport_->node(id);
    // Made with the transport, before create_node's HealthScope: its losses reach the
    // statistics page from now on.
    if (node) node->observe_health_scopes();
    return node;
}

std::unique_ptr<BasicGroup> UdpNodeFactory::make_group(std::string name) {
    return make_udp_group(std::move(name), transport_->shared_ptr());
}

NodePtr UdpNodeFactory::lookup(std::string_view address) {
    const PeerAddress a = parse_address(address);
    if (a.technology != "udp") {
        throw UsageError("lookup of '" + std::string(address) + "': this factory's technology is udp; a " +
                         a.technology + " address is not one of its peers");
    }
    auto node = transport_->lookup(a.host, a.port, std::string(address));
    adopt(*node);
    return node;
}

std::uint32_t UdpNodeFactory::runtime_peers_seen() const noexcept {
    return transport_->shared().clients_seen.load(std::memory_order_acquire);
}

NodePtr UdpNodeFactory::runtime_peer(NodeId id) {
    if (id < first_runtime_id) return nullptr;
    auto node = transport_->runtime_node(id);
    if (node) adopt(*node);
    return node;
}

void UdpNodeFactory::forget_runtime_peer(NodeId id) {
    transport_->forget_client(id);
}

std::uint32_t UdpNodeFactory::runtime_peers_forgotten() const noexcept {
    return transport_->shared().clients_forgotten.load(std::memory_order_acquire);
}

std::uint32_t UdpNodeFactory::clients() const {
    return transport_->live_clients();
}

BufferPtr UdpNodeFactory::create_buffer(std::size_t size) {
    const auto max = transport_->shared().parameters.max_message_size;
    if (size > max) kit::throw_buffer_too_large(size, max);
    return transport_->shared().pool->make(size);
}

std::uint16_t UdpNodeFactory::port() const noexcept {
    return transport_->port();
}

DatagramStats UdpNodeFactory::datagram_stats() const noexcept {
    const auto& s = transport_->shared();
    DatagramStats d;
    d.sent = s.datagrams_sent.load();
    d.received = s.datagrams_received.load();
    d.naks_sent = s.naks_sent.load();
    d.repairs = s.repairs.load();
    d.multicast_sent = s.multicast_sent.load();
    d.multicast_repairs = s.multicast_repairs.load();
    d.naks_coalesced = s.naks_coalesced.load();
    d.naks_withheld = s.naks_withheld.load();
    d.statuses_asked = s.statuses_asked.load();
    d.statuses_sent = s.statuses_sent.load();
    d.acks_carried = s.acks_carried.load();
    d.timer_runs = s.timer_runs.load();
    d.node_ticks = s.node_ticks.load();
    for (std::size_t i = 0; i < d.dropped.size(); ++i)
        d.dropped[i] = s.drops[i].load();
    return d;
}

} // namespace msgpass::udp
