// The implementer kit: one wording per error. What every technology throws for the
// same cause is worded here once, so that an application reads the same message on
// sci, tcp, udp and auto (the conformance suite compares them word for word). Each
// message starts with the call and the object, as the lifetime check's does:
// "send on node 2 (node-2): ...".
#pragma once

#include <msgpass/error.hpp>
#include <msgpass/group.hpp>
#include <msgpass/node.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace msgpass::kit {

// "node 2 (node-2)" (or "node 2" without a name).
[[nodiscard]] std::string describe(const Node& node);
// "group 'all'", or "a dynamic group" for one made at run time.
[[nodiscard]] std::string describe(const Group& group);

// UsageError "send on node 2 (node-2): the buffer is null" (send and send_shared).
[[noreturn]] void throw_null_buffer(const Node& node);
// UsageError "send on group 'all': the buffer is null".
[[noreturn]] void throw_null_buffer(const Group& group);

// MessageTooLarge "send on node 2 (node-2): a message of 2000 bytes exceeds
// max_message_size (1024 bytes)". limit names another bound where the technology
// has one ("the receiver's max_message_size": sci, whose peer may be configured
// smaller).
[[noreturn]] void throw_message_too_large(const Node& node, std::uint64_t size, std::uint64_t max,
                                          const char* limit = "max_message_size");

// MessageTooLarge "create_buffer: a buffer of 2000 bytes exceeds max_message_size
// (1024 bytes)".
[[noreturn]] void throw_buffer_too_large(std::uint64_t size, std::uint64_t max);

// SendQueueFull "send on node 2 (node-2): its send queue holds send_queue_limit (64)
// messages".
[[noreturn]] void throw_send_queue_full(const Node& node, std::uint64_t limit);

} // namespace msgpass::kit
