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

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const Value& value);
};

} // namespace msgpass::config
