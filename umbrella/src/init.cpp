// The initialisation of the communication layer (the seed's SCIInit): registers
// the built-in technologies, then NodeFactory::create() picks the one named by the
// configuration's `technology` key (default sci).
#include <msgpass/msgpass.hpp>

#include <msgpass/auto/factory.hpp>
#include <msgpass/sci/factory.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/udp/factory.hpp>

namespace msgpass {

void register_builtin_technologies() {
    static const bool once = [] {
        sci::register_technology();
        tcp::register_technology();
        udp::register_technology();
        auto_::register_technology();
        return true;
    }();
    (void)once;
}

namespace {
// Before main, so that a program that loads its configuration with config::load()
// and only then calls NodeFactory::create() has the technologies' names and sections
// at load time: this file is linked into every program that calls create().
[[maybe_unused]] const bool registered_at_start = (register_builtin_technologies(), true);
} // namespace

config::Options options(int argc, const char* const* argv) {
    register_builtin_technologies();
    return config::parse_command_line(argc, argv);
}

std::unique_ptr<NodeFactory> NodeFactory::create(const config::Configuration& configuration, NodeId self) {
    register_builtin_technologies();
    const auto& node = configuration.node(self); // ConfigError naming the nodes file and its ids
    try {
        return TechnologyRegistry::instance().create(configuration.technology, configuration, self);
    } catch (const ResourceError& e) {
        // What a technology could not obtain (a segment, a port) is said for the node
        // that wanted it, so that the operator of a partition need not guess which of
        // its processes failed (a second process with the same node id, say).
        std::string who = "node id " + std::to_string(self);
        if (!node.name.empty()) who += " (" + node.name + ")";
        throw ResourceError(who + " of partition '" + configuration.partition + "': " + e.what());
    }
}

std::unique_ptr<NodeFactory> NodeFactory::create_client(const config::Configuration& configuration) {
    register_builtin_technologies();
    // technology: auto: a client is on no machine of the nodes file, so its sci part
    // would have no peer; it is the client of auto's technology between machines.
    if (configuration.technology == "auto") {
        config::Configuration between = configuration;
        between.technology = configuration.section<auto_::Options>().inter_host;
        return TechnologyRegistry::instance().create(between.technology, between, no_node);
    }
    if (configuration.technology != "tcp" && configuration.technology != "udp") {
        throw UsageError("a client in no nodes file needs the tcp or udp technology (or auto); the configuration "
                         "names '" +
                         configuration.technology + "' (sci has no peers found at run time: docs/communicator.md)");
    }
    return TechnologyRegistry::instance().create(configuration.technology, configuration, no_node);
}

std::unique_ptr<NodeFactory> NodeFactory::create(const config::Options& options) {
    return create(options.configuration, options.self);
}

} // namespace msgpass
