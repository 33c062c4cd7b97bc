// SCINodeFactory (seed section 3): creates the nodes, buffers and groups of the
// sci technology and owns the local node (the local segment of this process).
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/kit/factory_base.hpp>

#include <functional>
#include <memory>

namespace msgpass::sci {

class Transport; // the engine of this process: its local segment (src/transport.hpp)
class SciNode;   // one peer (src/node.hpp)

// Registers "sci" with the TechnologyRegistry and its configuration (options.hpp)
// with config::SchemaRegistry. Idempotent.
void register_technology();

class SciNodeFactory final : public kit::FactoryBase {
public:
    // Creates the local node (segment). Throws ConfigError, ResourceError.
    SciNodeFactory(const config::Configuration& configuration, NodeId self);
    // Flushes every send queue for at most peer_timeout; messages that could not be
    // transferred are reported on stderr (never dropped silently).
    ~SciNodeFactory() override;

    [[nodiscard]] std::string_view technology() const noexcept override { return "sci"; }
    BufferPtr create_buffer(std::size_t size) override;

    [[nodiscard]] Transport& transport() const noexcept { return *transport_; }
    // The doorbell of the local segment, which every sender to this process rings.
    [[nodiscard]] Doorbell& bell() const noexcept;
    // Calls poll until it returns a buffer or timeout passes, waiting as the sci
    // nodes and groups do: spin, yield, then sleep on bell() after telling every
    // partner so (a partner rings only a process that said it sleeps). For a group
    // of another technology that sleeps on this doorbell (technology: auto).
    [[nodiscard]] BufferPtr wait(const std::function<BufferPtr()>& poll, std::chrono::nanoseconds timeout);

private:
    NodePtr make_node(NodeId id) override;
    std::unique_ptr<BasicGroup> make_group(std::string name) override;
    std::shared_ptr<Transport> transport_;
};

} // namespace msgpass::sci
