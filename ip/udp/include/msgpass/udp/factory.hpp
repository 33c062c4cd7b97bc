// The udp technology: the Node, Group and NodeFactory contract over UDP unicast
// (docs/udp.md). Each process binds one UDP socket to its node's host and port;
// a message is cut into numbered datagrams of at most udp.datagram_size bytes,
// acknowledged cumulatively by the receiver's status datagrams, repaired on its
// NAKs or after a timeout, and never sent beyond the window the receiver
// advertises. Messages between a pair arrive once and in order; a peer silent for
// peer_timeout, or restarted (a new incarnation), is reported as PeerLost.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/kit/factory_base.hpp>
#include <msgpass/udp/protocol.hpp>

#include <array>
#include <cstdint>
#include <memory>

namespace msgpass::udp {

// Registers "udp" with the TechnologyRegistry and its configuration (options.hpp)
// with config::SchemaRegistry. Idempotent.
void register_technology();

class Transport; // the socket, the background thread, the nodes (src/transport.hpp)

// Datagram counters of a factory: sent and received, NAKs, repairs, the datagrams
// dropped per reason, and how often its background thread ran the timers.
struct DatagramStats {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
    std::uint64_t naks_sent = 0;
    std::uint64_t repairs = 0;        // datagrams sent again (after a NAK or a timeout)
    std::uint64_t multicast_sent = 0; // of sent: group datagrams sent to udp.multicast (repairs included)
    // Of repairs and multicast_sent: group datagrams sent again to udp.multicast, once
    // for the members a NAK's loss may have hit alike (docs/udp.md, "Repairs by multicast").
    std::uint64_t multicast_repairs = 0;
    // Datagrams a NAK asked for that were not sent again: a multicast repair of them
    // went out less than nak_interval before (another member's NAK of the same loss).
    std::uint64_t naks_coalesced = 0;
    // NAKs a member did not send: the holes of a multicast stream were filled during
    // its random back-off (another member's NAK brought the repair).
    std::uint64_t naks_withheld = 0;
    // Statuses this side sent at once because the sender asked (a flush: a data
    // datagram with flag_status_now, or a status_request), not status_delay later.
    std::uint64_t statuses_asked = 0;
    // Statuses (acknowledgement and window) this side sent: as datagrams of their own
    // (status), and carried by a data datagram going back to the peer (flag_ack: a
    // request-response exchange sends no status datagram; docs/udp.md,
    // "Acknowledgements carried by data").
    std::uint64_t statuses_sent = 0;
    std::uint64_t acks_carried = 0;
    // Runs of the nodes' timers by the background thread: every status_delay while a
    // receiver reads the socket lent to it, else when a node's timer is due (docs/udp.md,
    // "Timers while a receiver waits").
    std::uint64_t timer_runs = 0;
    // Nodes ticked in those runs: the ones due or touched since their last tick (a
    // datagram from the peer), not every node of the nodes file per run.
    std::uint64_t node_ticks = 0;
    std::array<std::uint64_t, static_cast<std::size_t>(Drop::kinds)> dropped{};
    [[nodiscard]] std::uint64_t count(Drop d) const noexcept { return dropped[static_cast<std::size_t>(d)]; }
};

class UdpNodeFactory final : public kit::FactoryBase {
public:
    // Binds this node's host and port. Throws ConfigError (no port, partition name
    // too long), ResourceError (the port cannot be bound). A client (self no_node,
    // NodeFactory::create_client) binds a port of the system's choosing.
    UdpNodeFactory(const config::Configuration& configuration, NodeId self);
    // Flushes every node, waits at most peer_timeout for the acknowledgements, says
    // goodbye to every peer, then closes; what could not be handed over is reported
    // on stderr.
    ~UdpNodeFactory() override;

    [[nodiscard]] std::string_view technology() const noexcept override { return "udp"; }
    BufferPtr create_buffer(std::size_t size) override;
    // Peers found at run time (docs/udp.md, "Clients in no nodes file"): a client
    // (self no_node) looks a server up by "udp://host:port"; a server with
    // udp.max_clients takes such clients, each under a run-time id.
    NodePtr lookup(std::string_view address) override;
    [[nodiscard]] std::uint32_t runtime_peers_seen() const noexcept override;
    NodePtr runtime_peer(NodeId id) override;
    void forget_runtime_peer(NodeId id) override;
    [[nodiscard]] std::uint32_t runtime_peers_forgotten() const noexcept override;
    // The run-time clients held now (came, not forgotten yet).
    [[nodiscard]] std::uint32_t clients() const;
    [[nodiscard]] std::uint16_t port() const noexcept;
    [[nodiscard]] DatagramStats datagram_stats() const noexcept;
    // For technology: auto: from now on, a message delivered (or a peer lost) also
    // rings bell, so that a group mixing sci and udp nodes sleeps on the sci doorbell
    // alone. The bell must outlive the factory.
    void ring_on_input(Doorbell& bell);

private:
    NodePtr make_node(NodeId id) override;
    std::unique_ptr<BasicGroup> make_group(std::string name) override;
    std::shared_ptr<Transport> transport_;
};

} // namespace msgpass::udp
