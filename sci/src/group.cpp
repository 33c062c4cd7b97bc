// The sci group (group.hpp).
#include "group.hpp"
#include "node.hpp"

#include <utility>

namespace msgpass::sci {

SciGroup::SciGroup(std::string name, std::shared_ptr<Transport> transport)
    : GroupBase(std::move(name), &transport->bell()), transport_(std::move(transport)) {}

void SciGroup::admit(NodePtr node) {
    if (node == nullptr || dynamic_cast<SciNode*>(node.get()) == nullptr) {
        throw UsageError("an sci group takes only sci nodes");
    }
    BasicGroup::add(std::move(node));
}

BufferPtr SciGroup::wait(std::chrono::nanoseconds timeout) {
    return transport_->wait([this] { return poll(); }, timeout);
}

} // namespace msgpass::sci
