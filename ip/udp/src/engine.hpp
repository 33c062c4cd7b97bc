// Internals of the udp technology: Engine, the one UDP socket of the factory, bound
// to the node's port, and the background thread that reads it, hands each datagram
// to its UdpNode (node.hpp) and runs the timers.
#pragma once

#include "node.hpp"

#include <msgpass/ip/socket.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace msgpass::udp {

class Engine {
public:
    Engine(const config::Configuration& configuration, NodeId self);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    std::shared_ptr<UdpNode> node(NodeId id) const; // null: not a peer
    [[nodiscard]] const Shared& shared() const noexcept { return *shared_; }
    [[nodiscard]] Shared& shared() noexcept { return *shared_; }
    [[nodiscard]] const std::shared_ptr<Shared>& shared_ptr() const noexcept { return shared_; }
    [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
    void shutdown(SteadyTime deadline);

private:
    void run();
    void handle(std::span<const std::byte> bytes, Clock::time_point now);
    void inject(std::span<const std::byte> bytes, Clock::time_point now);
    void open_multicast(const config::NodeConfig& me, const std::string& where);

    config::Configuration configuration_;
    std::shared_ptr<Shared> shared_;
    std::map<NodeId, std::shared_ptr<UdpNode>> nodes_; // every peer of the nodes file, made at start
    Expect expect_;
    std::uint16_t port_ = 0;
    int multicast_fd_ = -1; // joined to udp.multicast (a member of udp.multicast_group); -1: none
    ip::WakeFd wake_{"udp"};
    std::atomic<bool> stop_{false};
    bool stopped_ = false;
    std::mt19937_64 random_;
    std::vector<std::byte> held_; // a datagram held back (udp.inject_reorder)
    std::thread thread_;
};

} // namespace msgpass::udp
