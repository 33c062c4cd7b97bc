// The group room of sci: SCIGroup, a dynamic group whose members are all sci nodes,
// which waits as they do (the kit's GroupBase does the rest).
#pragma once

#include <msgpass/kit/factory_base.hpp>

#include "transport.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace msgpass::sci {

// SCIGroup: a dynamic group whose members are all SCINodes; a blocking receive
// waits as the nodes do (Transport::wait) and sleeps on the local segment's doorbell.
class SciGroup final : public kit::GroupBase {
public:
    SciGroup(std::string name, std::shared_ptr<Transport> transport);

protected:
    // Throws UsageError when the node is not an SCINode.
    void admit(NodePtr node) override;
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override;

private:
    std::shared_ptr<Transport> transport_; // the doorbell lives in its segment
};

} // namespace msgpass::sci
