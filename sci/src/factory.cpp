// The sci factory and group, and the registration of the technology.
#include <msgpass/sci/factory.hpp>
#include <msgpass/sci/naming.hpp>
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
    TechnologyRegistry::instance().add_leftovers("sci", leftovers());
}

SciGroup::SciGroup(std::string name, std::shared_ptr<LocalNode> local)
    : GroupBase(std::move(name), &local->bell()), local_(std::move(local)) {}

void SciGroup::admit(NodePtr node) {
    if (node == nullptr || dynamic_cast<SciNode*>(node.get()) == nullptr) {
        throw UsageError("an sci group takes only sci nodes");
    }
    BasicGroup::add(std::move(node));
}

BufferPtr SciGroup::wait(std::chrono::nanoseconds timeout) {
    return local_->wait([this] { return poll(); }, timeout);
}

SciNodeFactory::SciNodeFactory(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self),
      local_(std::make_shared<LocalNode>(LocalNodeParameters::from(configuration, self))) {}

SciNodeFactory::~SciNodeFactory() {
    const auto made = nodes(); // alive until the closing word is written through them
    close(configuration().peer_timeout);
    for (const auto& node : made)
        std::static_pointer_cast<SciNode>(node)->publish_pending();
    // A clean end: partners that find this process gone with nothing outstanding
    // do not report it as lost (written into our header at each of them).
    local_->set_closing();
}

Doorbell& SciNodeFactory::bell() const noexcept {
    return local_->bell();
}

BufferPtr SciNodeFactory::wait(const std::function<BufferPtr()>& poll, std::chrono::nanoseconds timeout) {
    return local_->wait(poll, timeout);
}

NodePtr SciNodeFactory::make_node(NodeId id) {
    return std::make_shared<SciNode>(local_, NodeParameters::from(configuration(), *local_, id));
}

BufferPtr SciNodeFactory::create_buffer(std::size_t size) {
    return local_->allocate_send_buffer(size);
}

std::unique_ptr<BasicGroup> SciNodeFactory::make_group(std::string name) {
    return std::make_unique<SciGroup>(std::move(name), local_);
}

} // namespace msgpass::sci
