// The lifetime contract of the implementer kit (msgpass/kit/lifetime.hpp).
#include <msgpass/kit/errors.hpp>
#include <msgpass/kit/lifetime.hpp>

#include <string>

namespace msgpass::kit {

void FactoryBound::refuse(const char* call) const {
    std::string what = "this object";
    if (const auto* node = dynamic_cast<const Node*>(this)) {
        what = describe(*node);
    } else if (const auto* group = dynamic_cast<const Group*>(this)) {
        what = describe(*group);
    }
    throw UsageError(std::string(call) + " on " + what +
                     " after its factory was destroyed: a node or group may be dropped after its factory, not used");
}

void GroupBase::send(BufferPtr&& buffer) {
    check_factory("send");
    distribute(std::move(buffer));
}

BufferPtr GroupBase::receive() {
    check_factory("receive");
    return collect();
}

BufferPtr GroupBase::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    return wait(timeout);
}

void GroupBase::add(NodePtr node) {
    check_factory("add");
    admit(std::move(node));
}

} // namespace msgpass::kit
