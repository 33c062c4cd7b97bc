// The tcp technology's configuration: the keys of its section and their ranges.
#include <msgpass/tcp/options.hpp>

namespace msgpass::tcp {

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {"handshake_timeout", "ack_every",   "ack_bytes",
                                                  "receive_spin_us",   "max_clients", "compact_frames"};
    return list;
}

void Options::set(const std::string& key, const config::Value& value) {
    if (key == "handshake_timeout") {
        if (auto d = value.duration(std::chrono::milliseconds(1), std::chrono::minutes(1))) handshake_timeout = *d;
    } else if (key == "ack_every") {
        if (auto n = value.integer(1, 65536)) ack_every = *n;
    } else if (key == "ack_bytes") {
        if (auto n = value.size(config::GiB)) ack_bytes = *n;
    } else if (key == "receive_spin_us") {
        if (auto n = value.integer(0, 10000)) receive_spin_us = *n;
    } else if (key == "compact_frames") {
        if (auto b = value.boolean()) compact_frames = *b;
    } else if (key == "max_clients") {
        if (auto n = value.integer(0, 65536)) max_clients = static_cast<std::uint32_t>(*n);
    }
}

config::TechnologySchema schema() {
    return config::TechnologySchema("tcp").with_section(config::SectionType::of<Options>("a mapping of tcp settings"));
}

} // namespace msgpass::tcp
