// The `comm:` section of the network file: the bounds of the communicator
// (msgpass::comm, docs/communicator.md). Not a technology: config reads it itself,
// like max_message_size (`technology: comm` stays refused), and stores it among the
// sections: configuration.section<config::CommOptions>() (defaults when not written).
#pragma once

#include <msgpass/config/value.hpp>
#include <msgpass/sizes.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace msgpass::config {

struct CommOptions {
    // Payloads up to this many bytes go at once (eager); larger ones by rendezvous:
    // envelope first, data when the receiver posted a matching receive. 1 byte to 2GiB.
    std::uint64_t eager_limit = 64 * KiB;
    // Bytes of received messages nobody asked for (payload and envelope) a
    // communicator keeps before it stops taking messages (back-pressure). 1 byte to 16GiB.
    std::uint64_t unexpected_limit = 64 * MiB;
    // BIP's per-tag queues: tag ranges whose messages each sending peer may have
    // unread at this node only up to a bound of their own, outside unexpected_limit
    // ("first-last:size" or "tag:size", comma-separated; e.g. "100-199:64KiB,7:4KiB").
    struct TagQueue {
        std::int32_t first = 0;
        std::int32_t last = 0;
        std::uint64_t limit = 0;
    };
    std::vector<TagQueue> tag_queues;
    // Large messages between two processes of this host (sci peers) go with one copy,
    // the sender writing into the receiver's posted buffer (process_vm_writev); false:
    // always through the technology (docs/communicator.md, "One copy").
    bool single_copy = true;

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const Value& value);
};

} // namespace msgpass::config
