// The configuration of technology: auto: its section `auto:` at the top of the network
// file (and --set auto.<key>=value), read by auto_::Options and registered under the
// name "auto" by register_technology(). docs/configuration.md.
#pragma once

#include <msgpass/config.hpp>

#include <string>
#include <vector>

namespace msgpass::auto_ {

struct Options {
    // The technology between machines: "tcp" (the default) or "udp". Within a
    // machine it is always sci.
    std::string inter_host = "tcp";

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
};

} // namespace msgpass::auto_
