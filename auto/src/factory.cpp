// technology: auto: one factory over the sci factory and the tcp or udp one (see
// msgpass/auto/factory.hpp).
#include <msgpass/auto/factory.hpp>

#include <msgpass/tcp/options.hpp>
#include <msgpass/udp/options.hpp>
#include <msgpass/wait.hpp>

#include <algorithm>

namespace msgpass::auto_ {

void register_technology() {
    // auto runs the sci and tcp or udp factories and reads their sections; its own
    // says which of tcp and udp is between machines.
    sci::register_technology();
    tcp::register_technology();
    udp::register_technology();
    config::SchemaRegistry::instance().add(config::TechnologySchema("auto").with_section(
        config::SectionType::of<Options>("a mapping of auto settings (inter_host: tcp or udp)")));
    TechnologyRegistry::instance().add("auto", [](const config::Configuration& configuration, NodeId self) {
        return std::make_unique<AutoNodeFactory>(configuration, self);
    });
}

bool same_machine(const config::NodeConfig& a, const config::NodeConfig& b) {
    return config::same_machine(a, b);
}

AutoNodeFactory::AutoNodeFactory(const config::Configuration& configuration, NodeId self)
    : FactoryBase(configuration, self), inter_host_(configuration.section<Options>().inter_host) {
    const auto& me = this->configuration().node(self);
    sci_ = std::make_unique<sci::SciNodeFactory>(this->configuration(), self);
    const auto& nodes = this->configuration().nodes;
    const bool remote = std::any_of(nodes.begin(), nodes.end(),
                                    [&](const config::NodeConfig& n) { return !config::same_machine(me, n); });
    const bool takes_clients = inter_host_ == "udp" ? this->configuration().section<udp::Options>().max_clients > 0
                                                    : this->configuration().section<tcp::Options>().max_clients > 0;
    if ((remote || takes_clients) && inter_host_ == "udp") {
        udp_ = std::make_unique<udp::UdpNodeFactory>(this->configuration(), self);
        udp_->ring_on_input(sci_->bell());
    } else if (remote || takes_clients) {
        tcp_ = std::make_unique<tcp::TcpNodeFactory>(this->configuration(), self);
        tcp_->ring_on_input(sci_->bell());
    }
}

// The parts flush and report their own nodes (the same objects as this factory's).
AutoNodeFactory::~AutoNodeFactory() {
    forget();
    tcp_.reset();
    udp_.reset();
    sci_.reset();
}

std::string_view AutoNodeFactory::technology_of(NodeId id) const {
    // A peer found at run time is in no nodes file: the part between machines has it.
    if (configuration().find_node(id) == nullptr) return inter_host_ == "udp" ? "udp" : "tcp";
    if (config::same_machine(configuration().node(self_id()), configuration().node(id))) return "sci";
    return inter_host_ == "udp" ? "udp" : "tcp";
}

NodePtr AutoNodeFactory::make_node(NodeId id) {
    const auto technology = technology_of(id);
    if (technology == "udp") return udp_->create_node(id);
    return technology == "tcp" ? tcp_->create_node(id) : sci_->create_node(id);
}

std::unique_ptr<DynamicGroup> AutoNodeFactory::create_part_group(NodeId id) {
    const auto technology = technology_of(id);
    if (technology == "sci") return sci_->create_group();
    if (between() == nullptr)
        throw UsageError("node " + std::to_string(id) + " is reached through " + std::string(technology) +
                         ", a part this auto factory does not have");
    return between()->create_group();
}

BufferPtr AutoNodeFactory::create_buffer(std::size_t size) {
    return sci_->create_buffer(size);
}

std::unique_ptr<BasicGroup> AutoNodeFactory::make_group(std::string name) {
    return std::make_unique<AutoGroup>(std::move(name), *this);
}

bool AutoNodeFactory::made(const Node& node) {
    const NodeId id = node.id();
    if (id == self_id()) return false;
    if (configuration().find_node(id) != nullptr) return create_node(id).get() == &node;
    if (between() == nullptr) return false;
    // A client's id (it may have been forgotten by that part since it was handed out).
    if (id >= first_runtime_id) return id - first_runtime_id < between()->runtime_peers_seen();
    std::lock_guard lock(looked_up_mutex_);
    return looked_up_.count(id) != 0;
}

NodePtr AutoNodeFactory::lookup(std::string_view address) {
    if (between() == nullptr) {
        throw UsageError("lookup of '" + std::string(address) + "': this auto factory has no " + inter_host_ +
                         " part (no node of the nodes file is on another machine, and " + inter_host_ +
                         ".max_clients is 0)");
    }
    auto node = between()->lookup(address);
    adopt(*node);
    std::lock_guard lock(looked_up_mutex_);
    looked_up_.insert(node->id());
    return node;
}

std::uint32_t AutoNodeFactory::runtime_peers_seen() const noexcept {
    return between() != nullptr ? between()->runtime_peers_seen() : 0;
}

NodePtr AutoNodeFactory::runtime_peer(NodeId id) {
    if (between() == nullptr) return nullptr;
    auto node = between()->runtime_peer(id);
    if (node) adopt(*node);
    return node;
}

void AutoNodeFactory::forget_runtime_peer(NodeId id) {
    if (between() != nullptr) between()->forget_runtime_peer(id);
}

std::uint32_t AutoNodeFactory::runtime_peers_forgotten() const noexcept {
    return between() != nullptr ? between()->runtime_peers_forgotten() : 0;
}

BufferPtr AutoGroup::wait(std::chrono::nanoseconds timeout) {
    // Members of the part between machines only (an event builder whose sources are
    // all on other hosts): that part's group waits its own way (tcp: on its epoll set,
    // asked once per sleep, not once per poll).
    if (!sci_part_ && by_parts()) return between_part_->receive(timeout);
    for (NodeId id : unbelled_)
        factory_.ring_on_input_from(id);
    unbelled_.clear();
    const Doorbell& bell = factory_.bell();
    return factory_.wait(
        [this, &bell] {
            // The last poll before the sleep (this thread is among the sleepers): the
            // tcp part's bells muted while nobody slept ring again first.
            if (bell.sleepers.load(std::memory_order_relaxed) != 0) factory_.before_bell_sleep();
            return poll();
        },
        timeout);
}

void AutoGroup::admit(NodePtr node) {
    if (!node) throw UsageError("DynamicGroup::add: null node");
    if (!factory_.made(*node)) {
        throw UsageError("node " + std::to_string(node->id()) + " was not made by this auto factory");
    }
    const NodeId id = node->id();
    const auto technology = factory_.technology_of(id);
    const bool sci = technology == "sci";
    auto& part = sci ? sci_part_ : between_part_;
    if (!part) part = factory_.create_part_group(id);
    part->add(node);
    if (!sci && !contains(id)) ++between_members_;
    BasicGroup::add(std::move(node));
    if (technology == "tcp") unbelled_.push_back(id);
}

bool AutoGroup::remove(NodeId id) {
    if (sci_part_) (void)sci_part_->remove(id);
    if (between_part_ && between_part_->remove(id)) --between_members_;
    std::erase(unbelled_, id);
    return BasicGroup::remove(id);
}

BufferPtr AutoGroup::collect() {
    if (!by_parts()) return GroupBase::collect();
    DynamicGroup* const first = between_first_ ? between_part_.get() : sci_part_.get();
    DynamicGroup* const second = between_first_ ? sci_part_.get() : between_part_.get();
    between_first_ = !between_first_;
    if (first != nullptr) {
        if (auto b = first->receive()) return b;
    }
    if (second != nullptr) return second->receive();
    return nullptr;
}

} // namespace msgpass::auto_
