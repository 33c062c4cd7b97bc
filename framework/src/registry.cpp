// The registry of technologies by name, behind NodeFactory::create().
#include <msgpass/node_factory.hpp>

#include <map>
#include <mutex>

namespace msgpass {

struct TechnologyRegistry::Impl {
    mutable std::mutex mutex;
    std::map<std::string, Maker> makers;
    std::map<std::string, Leftovers> leftovers;
};

TechnologyRegistry::TechnologyRegistry() : impl_(std::make_shared<Impl>()) {}

TechnologyRegistry& TechnologyRegistry::instance() {
    static TechnologyRegistry registry;
    return registry;
}

bool TechnologyRegistry::add(const std::string& name, Maker maker) {
    std::lock_guard lock(impl_->mutex);
    return impl_->makers.insert_or_assign(name, std::move(maker)).second;
}

bool TechnologyRegistry::contains(const std::string& name) const {
    std::lock_guard lock(impl_->mutex);
    return impl_->makers.contains(name);
}

std::vector<std::string> TechnologyRegistry::names() const {
    std::lock_guard lock(impl_->mutex);
    std::vector<std::string> out;
    for (const auto& [name, maker] : impl_->makers)
        out.push_back(name);
    return out;
}

std::unique_ptr<NodeFactory> TechnologyRegistry::create(const std::string& name,
                                                        const config::Configuration& configuration, NodeId self) const {
    Maker maker;
    {
        std::lock_guard lock(impl_->mutex);
        if (auto it = impl_->makers.find(name); it != impl_->makers.end()) maker = it->second;
    }
    if (!maker) {
        std::string known;
        for (const auto& n : names())
            known += (known.empty() ? "" : ", ") + n;
        throw UnknownTechnology("unknown technology '" + name + "' (known: " + (known.empty() ? "none" : known) + ")");
    }
    return maker(configuration, self);
}

void TechnologyRegistry::add_leftovers(const std::string& name, Leftovers leftovers) {
    std::lock_guard lock(impl_->mutex);
    impl_->leftovers.insert_or_assign(name, std::move(leftovers));
}

std::vector<std::pair<std::string, Leftovers>> TechnologyRegistry::leftovers() const {
    std::lock_guard lock(impl_->mutex);
    return {impl_->leftovers.begin(), impl_->leftovers.end()};
}

} // namespace msgpass

namespace msgpass {

NodePtr NodeFactory::lookup(std::string_view address) {
    throw UsageError(
        "lookup of '" + std::string(address) + "': the " + std::string(technology()) +
        " technology has no peers found at run time (tcp, udp and auto have: docs/communicator.md, \"Peers found "
        "at run time\")");
}

} // namespace msgpass
