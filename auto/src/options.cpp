// technology: auto's configuration: the keys of its section.
#include <msgpass/auto/options.hpp>

namespace msgpass::auto_ {

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {"inter_host"};
    return list;
}

void Options::set(const std::string& key, const config::Value& value) {
    if (key == "inter_host") {
        const std::string expected = "tcp or udp";
        if (auto t = value.text(expected)) {
            if (*t == "tcp" || *t == "udp") {
                inter_host = *t;
            } else {
                value.report(expected);
            }
        }
    }
}

} // namespace msgpass::auto_
