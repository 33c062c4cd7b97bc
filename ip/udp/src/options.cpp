// The udp technology's configuration: the keys of its section and their ranges.
#include <msgpass/udp/options.hpp>

namespace msgpass::udp {

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {"datagram_size",    "socket_buffer",  "window",     "inject_loss",
                                                  "inject_duplicate", "inject_reorder", "inject_seed"};
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
    } else if (key == "inject_loss") {
        fraction(value, inject_loss);
    } else if (key == "inject_duplicate") {
        fraction(value, inject_duplicate);
    } else if (key == "inject_reorder") {
        fraction(value, inject_reorder);
    } else if (key == "inject_seed") {
        if (auto n = value.integer(0, UINT64_MAX)) inject_seed = *n;
    }
}

config::TechnologySchema schema() {
    return config::TechnologySchema("udp").with_section(config::SectionType::of<Options>("a mapping of udp settings"));
}

} // namespace msgpass::udp
