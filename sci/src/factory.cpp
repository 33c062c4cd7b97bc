// The sci factory (creates the nodes, buffers and groups; owns the transport), and
// the registration of the technology.
#include <msgpass/sci/factory.hpp>
#include <msgpass/sci/naming.hpp>
#include <msgpass/sci/options.hpp>

#include "group.hpp"
#include "node.hpp"
#include "transport.hpp"

#include <cstdio>

namespace msgpass::sci {

void register_technology() {
    config::SchemaRegistry::instance().add(schema());
    TechnologyRegistry::instance().add("sci", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<SciNodeFactory>(configuration, self);
    });
    TechnologyRegistry::instance().add_leftovers("sci", leftovers());
}

SciNodeFactory::SciNodeFactory(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self),
      transport_(std::make_shared<Transport>(TransportParameters::from(configuration, self))) {}

SciNodeFactory::~SciNodeFactory() {
    const auto made = nodes(); // alive until the closing word is written through them
    close(configuration().peer_timeout);
    for (const auto& node : made)
        std::static_pointer_cast<SciNode>(node)->publish_pending();
    // A clean end: partners that find this process gone with nothing outstanding
    // do not report it as lost (written into our header at each of them).
    transport_->set_closing();
}

Doorbell& SciNodeFactory::bell() const noexcept {
    return transport_->bell();
}

BufferPtr SciNodeFactory::wait(const std::function<BufferPtr()>& poll, std::chrono::nanoseconds timeout) {
    return transport_->wait(poll, timeout);
}

NodePtr SciNodeFactory::make_node(NodeId id) {
    return std::make_shared<SciNode>(transport_, NodeParameters::from(configuration(), *transport_, id));
}

BufferPtr SciNodeFactory::create_buffer(std::size_t size) {
    return transport_->allocate_send_buffer(size);
}

std::unique_ptr<BasicGroup> SciNodeFactory::make_group(std::string name) {
    return std::make_unique<SciGroup>(std::move(name), transport_);
}

} // namespace msgpass::sci
