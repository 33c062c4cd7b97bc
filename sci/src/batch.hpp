// Batches of small messages in one slot (protocol.hpp, BatchHeader): how a sender
// plans and lays out a batch, and how a receiver checks one before it hands out any
// of its messages. Pure functions over bytes, shared by the node, the tests and the
// micro-benchmarks.
#pragma once

#include <msgpass/sci/protocol.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace msgpass::sci {

struct BatchPlan {
    std::uint32_t count = 0; // messages that fit
    std::uint64_t size = 0;  // bytes of the batch: where the last of them ends
};

// How many of the messages whose sizes size_of(0), size_of(1), ... gives (at most
// available of them, at most batch_max_count, up to the first one larger than
// capacity) fit in capacity bytes, in order:
// the table grows by a length per message, the data by each one (on 8-byte
// boundaries but the last).
template <class SizeOf>
BatchPlan plan_batch(std::size_t available, std::uint64_t capacity, SizeOf&& size_of) {
    BatchPlan plan;
    std::uint64_t data = 0; // the messages before the last counted, aligned
    while (plan.count < available && plan.count < batch_max_count) {
        const std::uint64_t size = size_of(plan.count);
        if (size > capacity) break; // also a message that may not join (size_of says ~0)
        const std::uint64_t end = batch_data_offset(plan.count + 1) + data + size;
        if (end > capacity) break;
        plan.size = end;
        data += batch_align_up(size);
        ++plan.count;
    }
    return plan;
}

// The header and the lengths of a planned batch announced by note `number`, as
// 32-bit words (batch_data_offset(count) bytes, zero padded): what goes at the
// start of the slot. The messages go at batch_data_offset(count) and on.
template <class SizeOf>
void write_batch_table(std::vector<std::uint32_t>& table, std::uint64_t number, const BatchPlan& plan,
                       SizeOf&& size_of) {
    table.assign(batch_data_offset(plan.count) / sizeof(std::uint32_t), 0);
    const auto sequence = static_cast<std::uint32_t>(number);
    const auto size = static_cast<std::uint32_t>(plan.size);
    const BatchHeader header{sequence, plan.count, batch_check_of(sequence, plan.count, size), 0};
    std::memcpy(table.data(), &header, sizeof header);
    for (std::uint32_t k = 0; k < plan.count; ++k)
        table[sizeof(BatchHeader) / sizeof(std::uint32_t) + k] = static_cast<std::uint32_t>(size_of(k));
}

// Checks the batch of size bytes at content, announced by note `number`, whose
// messages may be at most max_message bytes. Returns "" when it is well-formed, with
// its lengths in `lengths` (copied out of content first: a peer that rewrites them
// afterwards changes nothing); else what is wrong. The messages then lie at
// batch_data_offset(count) and on, each on the next 8-byte boundary, the last
// ending at size.
inline std::string check_batch(const std::byte* content, std::uint64_t size, std::uint64_t number,
                               std::uint64_t max_message, std::vector<std::uint32_t>& lengths) {
    if (size < sizeof(BatchHeader)) return "shorter than its header";
    BatchHeader h{};
    std::memcpy(&h, content, sizeof h);
    if (h.sequence != static_cast<std::uint32_t>(number) || h.reserved != 0 ||
        h.check != batch_check_of(h.sequence, h.count, static_cast<std::uint32_t>(size)))
        return "its header is not that of note " + std::to_string(number) + ": stale or damaged";
    if (h.count == 0 || h.count > batch_max_count || batch_data_offset(h.count) > size)
        return "a count of " + std::to_string(h.count) + " messages";
    lengths.resize(h.count);
    std::memcpy(lengths.data(), content + sizeof h, sizeof(std::uint32_t) * h.count);
    std::uint64_t at = batch_data_offset(h.count);
    for (std::uint32_t k = 0; k < h.count; ++k) {
        const std::uint64_t length = lengths[k];
        if (length > max_message)
            return "message " + std::to_string(k) + " of " + std::to_string(length) + " bytes, beyond max_message_size";
        if (at > size || length > size - at)
            return "message " + std::to_string(k) + " of " + std::to_string(length) + " bytes at offset " +
                   std::to_string(at) + " runs past it";
        const std::uint64_t end = at + length;
        if (k + 1 < h.count) {
            at = batch_align_up(end);
        } else if (end != size) {
            return "its last message ends at " + std::to_string(end);
        }
    }
    return {};
}

} // namespace msgpass::sci
