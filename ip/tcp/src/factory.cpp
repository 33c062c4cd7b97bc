// The tcp factory and the registration of the technology (the group: group.cpp).
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>

#include "group.hpp"
#include "node.hpp"

#include <msgpass/address.hpp>

#include <msgpass/kit/errors.hpp>

#include <poll.h>
#include <unistd.h>

namespace msgpass::tcp {

void register_technology() {
    config::SchemaRegistry::instance().add(schema());
    TechnologyRegistry::instance().add("tcp", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<TcpNodeFactory>(configuration, self);
    });
}

TcpNodeFactory::TcpNodeFactory(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self), transport_(std::make_shared<Transport>(configuration, self)) {}

NodePtr TcpNodeFactory::lookup(std::string_view address) {
    const PeerAddress a = parse_address(address);
    if (a.technology != "tcp") {
        throw UsageError("lookup of '" + std::string(address) + "': this factory's technology is tcp; a " +
                         a.technology + " address has no run-time peers");
    }
    auto node = transport_->lookup(a.host, a.port, std::string(address));
    adopt(*node);
    return node;
}

std::uint32_t TcpNodeFactory::runtime_peers_seen() const noexcept {
    return transport_->shared().clients_seen.load(std::memory_order_acquire);
}

NodePtr TcpNodeFactory::runtime_peer(NodeId id) {
    if (id < first_runtime_id) return nullptr;
    auto node = transport_->find(id);
    if (node) adopt(*node);
    return node;
}

void TcpNodeFactory::forget_runtime_peer(NodeId id) {
    transport_->forget_client(id);
}

std::uint32_t TcpNodeFactory::runtime_peers_forgotten() const noexcept {
    return transport_->shared().clients_forgotten.load(std::memory_order_acquire);
}

TcpNodeFactory::~TcpNodeFactory() {
    const auto deadline = deadline_after(configuration().peer_timeout);
    close(time_left(deadline));
    transport_->shutdown(deadline);
}

NodePtr TcpNodeFactory::make_node(NodeId id) {
    return transport_->node(id);
}

BufferPtr TcpNodeFactory::create_buffer(std::size_t size) {
    const auto max = transport_->shared().parameters.max_message_size;
    if (size > max) kit::throw_buffer_too_large(size, max);
    return transport_->shared().pool->make(size);
}

std::unique_ptr<BasicGroup> TcpNodeFactory::make_group(std::string name) {
    return std::make_unique<TcpGroup>(std::move(name), transport_);
}

std::uint16_t TcpNodeFactory::port() const noexcept {
    return transport_->port();
}

ListenerStats TcpNodeFactory::listener_stats() const noexcept {
    ListenerStats s;
    const auto& shared = transport_->shared();
    s.accepted = shared.accepted.load();
    s.crossed = shared.crossed.load();
    s.clients = transport_->live_clients();
    for (std::size_t i = 0; i < s.refused.size(); ++i)
        s.refused[i] = shared.refused[i].load();
    return s;
}

void TcpNodeFactory::ring_on_input(Doorbell& bell) {
    transport_->shared_ptr()->bell.store(&bell);
}

void TcpNodeFactory::ring_on_input_from(NodeId id) {
    transport_->want_bell(id);
}

void TcpNodeFactory::before_bell_sleep() {
    transport_->unmute_bells();
}

void TcpNodeFactory::reset_connections(NodeId peer) {
    transport_->node(peer)->reset_connections();
}

} // namespace msgpass::tcp
