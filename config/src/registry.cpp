// The registry of technology schemas, the snapshot one load works with, and the
// reading of a technology's section into its options through its SectionType.
#include "schemas.hpp"

#include <algorithm>
#include <mutex>

namespace msgpass::config {

struct SchemaRegistry::Impl {
    mutable std::mutex mutex;
    std::map<std::string, std::shared_ptr<const TechnologySchema>> schemas;
};

SchemaRegistry::SchemaRegistry() : impl_(std::make_shared<Impl>()) {}

SchemaRegistry& SchemaRegistry::instance() {
    static SchemaRegistry registry;
    return registry;
}

bool SchemaRegistry::add(TechnologySchema schema) {
    const auto& name = schema.name;
    const bool well_formed =
        !name.empty() && name.size() <= detail::max_name_length && std::all_of(name.begin(), name.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        });
    if (!well_formed) {
        throw UsageError("SchemaRegistry::add: a technology name is 1 to 64 characters [a-z0-9_-], found " +
                         detail::quote(name));
    }
    // The name becomes a key of both files: it must not be one of theirs already.
    if (detail::contains(detail::network_keys(), name) || detail::contains(detail::node_keys(), name)) {
        throw UsageError("SchemaRegistry::add: the technology name " + detail::quote(name) +
                         " is a key of the network or nodes file already");
    }
    if (schema.node_scope && !schema.section) {
        throw UsageError("SchemaRegistry::add: technology " + detail::quote(name) +
                         " has a node scope but no section for it to override");
    }
    std::lock_guard lock(impl_->mutex);
    auto shared = std::make_shared<const TechnologySchema>(std::move(schema));
    return impl_->schemas.insert_or_assign(shared->name, shared).second;
}

bool SchemaRegistry::remove(const std::string& name) {
    std::lock_guard lock(impl_->mutex);
    return impl_->schemas.erase(name) != 0;
}

bool SchemaRegistry::contains(const std::string& name) const {
    std::lock_guard lock(impl_->mutex);
    return impl_->schemas.contains(name);
}

std::vector<std::string> SchemaRegistry::names() const {
    std::lock_guard lock(impl_->mutex);
    std::vector<std::string> out;
    for (const auto& [name, schema] : impl_->schemas)
        out.push_back(name);
    return out;
}

std::vector<std::shared_ptr<const TechnologySchema>> SchemaRegistry::schemas() const {
    std::lock_guard lock(impl_->mutex);
    std::vector<std::shared_ptr<const TechnologySchema>> out;
    for (const auto& [name, schema] : impl_->schemas)
        out.push_back(schema);
    return out;
}

namespace detail {

const TechnologySchema* Schemas::find(const std::string& name) const {
    for (const auto& s : list_)
        if (s->name == name) return s.get();
    return nullptr;
}

const TechnologySchema* Schemas::section(const std::string& name) const {
    const auto* s = find(name);
    return s != nullptr && s->section ? s : nullptr;
}

std::vector<std::string> Schemas::names() const {
    std::vector<std::string> out;
    for (const auto& s : list_)
        out.push_back(s->name);
    return out;
}

std::vector<std::string> Schemas::network_keys() const {
    std::vector<std::string> out = detail::network_keys();
    for (const auto& s : list_)
        if (s->section) out.push_back(s->name);
    return out;
}

std::vector<std::string> Schemas::node_keys() const {
    std::vector<std::string> out = detail::node_keys();
    for (const auto& s : list_)
        if (s->node_scope) out.push_back(s->name);
    return out;
}

std::vector<std::string> Schemas::machine_keys() const {
    std::vector<std::string> out;
    for (const auto& s : list_)
        if (s->machine) out.push_back(s->name);
    return out;
}

std::string Schemas::place_of(const std::string& key) const {
    for (const auto& s : list_)
        if (s->section && contains(s->section->keys(), key)) return s->name + "." + key;
    return {};
}

void collect_section(Problems& problems, const Item& v, const SectionType& type, SectionLayers& layers) {
    if (v.node.IsDefined() && !v.node.IsNull() && !v.node.IsMap()) {
        report(problems, v, type.what());
        return;
    }
    layers.context = v;
    for_each_key(problems, v, type.keys(), type.what(),
                 [&](const std::string& key, const Item& value) { layers.keys.insert_or_assign(key, value); });
}

void resolve_section(Problems& problems, const SectionType& type, const SectionLayers& layers, const std::string& path,
                     std::any& options) {
    for (const auto& [key, item] : layers.keys)
        type.set(options, key, Value(item, problems));
    const Item* at = layers.context ? &*layers.context : nullptr;
    if (at == nullptr && !layers.keys.empty()) at = &layers.keys.begin()->second;
    if (at == nullptr) return;
    const Item section{at->node, at->key_mark, at->source, path};
    type.check(options, Value(section, problems));
}

} // namespace detail

} // namespace msgpass::config
