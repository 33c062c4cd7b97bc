// How a technology makes itself known to the configuration. A technology registers
// a TechnologySchema under its name; load() then accepts `technology: <name>` and
// hands the technology's sections of the files to the technology's own options struct:
//
//   network.yaml   <name>: {key: value, ...}        the section, for every node
//   nodes.yaml     nodes: [{id: 1, <name>: {...}}]  a node's own keys (node_scope)
//                  machines: {m: {<name>: {...}}}   a machine's section
//   --set <name>.<key>=value
//
// config itself knows no technology: a name nobody registered is refused where it is
// written, listing the registered ones. The umbrella library (msgpass::msgpass)
// registers the built-in technologies (msgpass::register_builtin_technologies()).
#pragma once

#include <msgpass/config/value.hpp>

#include <any>
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

namespace msgpass::config {

struct Configuration;

// The options struct of a section: one member per key, holding its default, and
//   static const std::vector<std::string>& keys();   the section's keys
//   void set(const std::string& key, const Value& value);
//       reads one of keys(); a wrong value is reported by value and changes nothing
//   void check(const Value& section) const;           (optional)
//       the rules that tie several keys together, run when the section was written
template <typename T>
concept SectionOptions = std::default_initializable<T> && std::copy_constructible<T> &&
    requires(T& options, const std::string& key, const Value& value) {
    { T::keys() } -> std::same_as<const std::vector<std::string>&>;
    options.set(key, value);
};

// An options type as the loader handles it without knowing it.
class SectionType {
public:
    // what: the expected text when the section is not a mapping ("a mapping of SCI parameters").
    template <SectionOptions T>
    static SectionType of(std::string what) {
        SectionType t;
        t.type_ = &typeid(T);
        t.keys_ = &T::keys();
        t.what_ = std::move(what);
        t.make_ = [] { return std::any(T{}); };
        t.set_ = [](std::any& options, const std::string& key, const Value& value) {
            std::any_cast<T&>(options).set(key, value);
        };
        t.check_ = [](const std::any& options, [[maybe_unused]] const Value& section) {
            if constexpr (requires(const T& o, const Value& v) { o.check(v); }) {
                std::any_cast<const T&>(options).check(section);
            } else {
                (void)options;
            }
        };
        return t;
    }

    [[nodiscard]] const std::type_info& type() const noexcept { return *type_; }
    [[nodiscard]] const std::vector<std::string>& keys() const noexcept { return *keys_; }
    [[nodiscard]] const std::string& what() const noexcept { return what_; }
    [[nodiscard]] std::any make() const { return make_(); }
    void set(std::any& options, const std::string& key, const Value& value) const { set_(options, key, value); }
    void check(const std::any& options, const Value& section) const { check_(options, section); }

private:
    SectionType() = default;
    const std::type_info* type_ = nullptr;
    const std::vector<std::string>* keys_ = nullptr;
    std::string what_;
    std::any (*make_)() = nullptr;
    void (*set_)(std::any&, const std::string&, const Value&) = nullptr;
    void (*check_)(const std::any&, const Value&) = nullptr;
};

// What a technology adds to the configuration:
//   TechnologySchema("sci").with_section(SectionType::of<Options>("...")).with_node_scope()
//       .with_machine_section(SectionType::of<MachineOptions>("..."))
struct TechnologySchema {
    explicit TechnologySchema(std::string technology) : name(std::move(technology)) {}

    TechnologySchema& with_section(SectionType type) {
        section = std::move(type);
        return *this;
    }
    TechnologySchema& with_node_scope() {
        node_scope = true;
        return *this;
    }
    TechnologySchema& with_machine_section(SectionType type) {
        machine = std::move(type);
        return *this;
    }
    TechnologySchema& with_check(std::function<void(const Configuration&, const Reporter&)> rule) {
        check = std::move(rule);
        return *this;
    }
    TechnologySchema& with_resolve(std::function<void(Configuration&)> rule) {
        resolve = std::move(rule);
        return *this;
    }

    std::string name;                   // the value of `technology:` that selects it, lower case
    std::optional<SectionType> section; // `<name>:` at the top of the network file, and --set <name>.<key>
    bool node_scope = false;            // a node's own `<name>:` overrides single keys of section
    std::optional<SectionType> machine; // `<name>:` in a machine of the nodes file
    // Rules over the whole loaded configuration (several nodes or machines), run once
    // both files and the overrides are in, whatever the configured technology.
    std::function<void(const Configuration&, const Reporter&)> check;
    // Fills in what depends on the whole partition (a default that follows the node
    // count), run once both files and the overrides are in, before every check.
    std::function<void(Configuration&)> resolve;
};

// The technologies the configuration knows, by name. Thread-safe; load() takes a
// snapshot when it starts.
class SchemaRegistry {
public:
    static SchemaRegistry& instance();

    // Registers (or replaces) a technology; true if the name was new. Throws
    // UsageError for a name that is not 1 to 64 characters [a-z0-9_-], or that is a
    // key of the files already (partition, groups, port, ...).
    bool add(TechnologySchema schema);
    // Forgets a technology (tests, plug-ins that unload); true if it was registered.
    bool remove(const std::string& name);
    [[nodiscard]] bool contains(const std::string& name) const;
    // Names in alphabetical order.
    [[nodiscard]] std::vector<std::string> names() const;
    // The schemas in alphabetical order of their names.
    [[nodiscard]] std::vector<std::shared_ptr<const TechnologySchema>> schemas() const;

private:
    struct Impl;
    SchemaRegistry();
    std::shared_ptr<Impl> impl_;
};

// The sections of the technologies, by options type, copied with their owner (a
// Configuration, a node, a machine).
class Sections {
public:
    // The section of type T, or nullptr when there is none.
    template <typename T>
    [[nodiscard]] const T* find() const noexcept {
        const auto* options = find(typeid(T));
        return options == nullptr ? nullptr : std::any_cast<T>(options);
    }
    [[nodiscard]] const std::any* find(const std::type_info& type) const noexcept {
        const auto it = map_.find(std::type_index(type));
        return it == map_.end() ? nullptr : &it->second;
    }
    // The section of type T to change, made with T's defaults when there is none.
    template <typename T>
    T& edit() {
        auto& options = map_[std::type_index(typeid(T))];
        if (!options.has_value()) options = T{};
        return std::any_cast<T&>(options);
    }
    // Stores options (of any type) in place of the section of their type.
    void put(std::any options) {
        if (options.has_value()) map_.insert_or_assign(std::type_index(options.type()), std::move(options));
    }
    [[nodiscard]] bool empty() const noexcept { return map_.empty(); }

private:
    std::map<std::type_index, std::any> map_;
};

} // namespace msgpass::config
