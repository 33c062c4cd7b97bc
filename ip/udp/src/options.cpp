// The udp technology's configuration: the keys of its section and their ranges.
#include <msgpass/udp/options.hpp>
#include <msgpass/udp/protocol.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <optional>

namespace msgpass::udp {

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {
        "datagram_size",  "socket_buffer",         "window",      "inject_loss",     "inject_duplicate",
        "inject_reorder", "inject_multicast_loss", "inject_seed", "multicast_group", "multicast",
        "multicast_ttl",  "multicast_interface",   "max_clients"};
    return list;
}

namespace {
void fraction(const config::Value& value, double& into) {
    const std::string expected = "a fraction from 0 to 0.5";
    if (auto x = value.number(expected)) {
        if (*x < 0 || *x > 0.5) {
            value.report(expected);
        } else {
            into = *x;
        }
    }
}
// "a.b.c.d" as an IPv4 address in host order.
std::optional<std::uint32_t> ipv4(const std::string& text) {
    in_addr a{};
    if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
    return ntohl(a.s_addr);
}
} // namespace

void Options::set(const std::string& key, const config::Value& value) {
    if (key == "datagram_size") {
        if (auto n = value.integer(512, 65507)) datagram_size = *n;
    } else if (key == "socket_buffer") {
        if (auto n = value.size(config::GiB)) {
            if (*n < 64 * config::KiB) {
                value.report("a size from 64KiB to 1GiB");
            } else {
                socket_buffer = *n;
            }
        }
    } else if (key == "window") {
        if (auto n = value.integer(16, 65536)) window = *n;
    } else if (key == "max_clients") {
        if (auto n = value.integer(0, 65536)) max_clients = static_cast<std::uint32_t>(*n);
    } else if (key == "inject_loss") {
        fraction(value, inject_loss);
    } else if (key == "inject_duplicate") {
        fraction(value, inject_duplicate);
    } else if (key == "inject_reorder") {
        fraction(value, inject_reorder);
    } else if (key == "inject_multicast_loss") {
        fraction(value, inject_multicast_loss);
    } else if (key == "inject_seed") {
        if (auto n = value.integer(0, UINT64_MAX)) inject_seed = *n;
    } else if (key == "multicast_group") {
        if (auto t = value.text("the name of a static group")) {
            multicast_group = *t;
            multicast_group_at = value.location();
        }
    } else if (key == "multicast") {
        const std::string expected =
            "an IPv4 multicast address and port (224.0.0.0 to 239.255.255.255, e.g. 239.1.2.3:4000)";
        if (auto t = value.text(expected)) {
            const auto colon = t->rfind(':');
            const auto address = colon == std::string::npos ? std::nullopt : ipv4(t->substr(0, colon));
            unsigned long port = 0;
            bool port_ok = false;
            if (colon != std::string::npos && colon + 1 < t->size() && colon + 6 >= t->size()) {
                const std::string digits = t->substr(colon + 1);
                port_ok = digits.find_first_not_of("0123456789") == std::string::npos;
                if (port_ok) port = std::stoul(digits);
            }
            if (!address || (*address >> 28) != 0xe || !port_ok || port == 0 || port > 65535) {
                value.report(expected);
            } else {
                multicast = *t;
                multicast_address = *address;
                multicast_port = static_cast<std::uint16_t>(port);
            }
        }
    } else if (key == "multicast_ttl") {
        if (auto n = value.integer(0, 255)) multicast_ttl = *n;
    } else if (key == "multicast_interface") {
        if (auto t = value.text("the IPv4 address of an interface")) {
            if (!ipv4(*t)) {
                value.report("the IPv4 address of an interface");
            } else {
                multicast_interface = *t;
            }
        }
    }
}

void Options::check(const config::Value& section) const {
    if (multicast_group.empty() != multicast.empty()) {
        section.report_key(multicast_group.empty() ? "multicast_group" : "multicast",
                           "multicast_group and multicast together (the group and its address)",
                           multicast_group.empty() ? "multicast alone" : "multicast_group alone");
    }
}

namespace {
// multicast_group names a static group, and its table of members (24 bytes each)
// leaves half a datagram for the message.
void multicast_group_exists(const config::Configuration& c, const config::Reporter& reporter) {
    const auto& o = c.section<Options>();
    if (o.multicast_group.empty()) return;
    const auto it = c.groups.find(o.multicast_group);
    if (it == c.groups.end()) {
        std::string known;
        for (const auto& [name, ids] : c.groups)
            known += (known.empty() ? "" : ", ") + name;
        reporter.report(o.multicast_group_at, "udp.multicast_group",
                        "the name of a static group of groups (" + (known.empty() ? std::string("none") : known) + ")",
                        "'" + o.multicast_group + "'");
    } else if (group_table_bytes(it->second.size()) > o.datagram_size / 2) {
        reporter.report(o.multicast_group_at, "udp.multicast_group",
                        "a group of at most " + std::to_string((o.datagram_size / 2) / group_entry_size) +
                            " members with udp.datagram_size " + std::to_string(o.datagram_size),
                        "'" + o.multicast_group + "' of " + std::to_string(it->second.size()) + " members");
    }
}
} // namespace

config::TechnologySchema schema() {
    return config::TechnologySchema("udp")
        .with_section(config::SectionType::of<Options>("a mapping of udp settings"))
        .with_check(multicast_group_exists);
}

} // namespace msgpass::udp
