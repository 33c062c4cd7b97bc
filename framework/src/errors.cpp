// One wording per error (msgpass/kit/errors.hpp).
#include <msgpass/kit/errors.hpp>

namespace msgpass::kit {

std::string describe(const Node& node) {
    std::string s = "node " + std::to_string(node.id());
    if (!node.name().empty()) s += " (" + node.name() + ")";
    return s;
}

std::string describe(const Group& group) {
    return group.name().empty() ? std::string("a dynamic group") : "group '" + group.name() + "'";
}

void throw_null_buffer(const Node& node) {
    throw UsageError("send on " + describe(node) + ": the buffer is null");
}

void throw_null_buffer(const Group& group) {
    throw UsageError("send on " + describe(group) + ": the buffer is null");
}

void throw_message_too_large(const Node& node, std::uint64_t size, std::uint64_t max, const char* limit) {
    throw MessageTooLarge("send on " + describe(node) + ": a message of " + std::to_string(size) + " bytes exceeds " +
                          limit + " (" + std::to_string(max) + " bytes)");
}

void throw_buffer_too_large(std::uint64_t size, std::uint64_t max) {
    throw MessageTooLarge("create_buffer: a buffer of " + std::to_string(size) + " bytes exceeds max_message_size (" +
                          std::to_string(max) + " bytes)");
}

void throw_send_queue_full(const Node& node, std::uint64_t limit) {
    throw SendQueueFull("send on " + describe(node) + ": its send queue holds send_queue_limit (" +
                        std::to_string(limit) + ") messages");
}

} // namespace msgpass::kit
