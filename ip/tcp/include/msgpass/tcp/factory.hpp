// The tcp technology: the same Node, Group and NodeFactory contract over TCP, for
// partitions that span hosts (docs/tcp.md). Connectionless for the user, as in BMI:
// each node listens on the host and port of the nodes file; a node opens a
// connection to a peer the first time it sends to it and keeps it, re-establishing
// it with backoff when it breaks. Messages are numbered per pair and acknowledged,
// so that a broken connection between two live processes loses and duplicates
// nothing; a peer process that dies is reported as PeerLost with the number of
// messages it had not acknowledged.
//
// The data path runs in the caller's thread (a send writes to the socket when
// nothing is queued before it; a receive reads the socket), so that a message costs
// what a raw socket costs. One background thread per factory accepts connections,
// runs the handshakes, reconnects, reads acknowledgements and writes what the
// sockets could not take at once.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/kit/factory_base.hpp>
#include <msgpass/tcp/protocol.hpp>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace msgpass::tcp {

// Registers "tcp" with the TechnologyRegistry and its configuration (options.hpp)
// with config::SchemaRegistry. Idempotent.
void register_technology();

class Transport; // the sockets, the background thread, the nodes (src/transport.hpp)
class TcpNode;   // one peer (src/node.hpp)
class TcpGroup;  // a group of tcp nodes (src/group.hpp)

// Counters of the listening side: connections refused or closed, per reason.
struct ListenerStats {
    std::uint64_t accepted = 0; // handshakes that succeeded
    std::uint64_t crossed = 0;  // Hellos refused by the tie-break of two crossing connections (not faults)
    std::uint32_t clients = 0;  // run-time clients held now: came, not forgotten yet (left, lost or forgotten)
    std::array<std::uint64_t, static_cast<std::size_t>(Refusal::kinds)> refused{};
    [[nodiscard]] std::uint64_t refused_total() const noexcept {
        std::uint64_t n = 0;
        for (auto v : refused)
            n += v;
        return n;
    }
    [[nodiscard]] std::uint64_t count(Refusal r) const noexcept { return refused[static_cast<std::size_t>(r)]; }
};

class TcpNodeFactory final : public kit::FactoryBase {
public:
    // Listens on this node's host and port. Throws ConfigError (no port, partition
    // name too long), ResourceError (the port cannot be bound). A client (self
    // no_node, NodeFactory::create_client) listens nowhere.
    TcpNodeFactory(const config::Configuration& configuration, NodeId self);
    // Flushes every node for at most peer_timeout, says goodbye to every peer,
    // then closes. What could not be handed over is reported on stderr.
    ~TcpNodeFactory() override;

    [[nodiscard]] std::string_view technology() const noexcept override { return "tcp"; }
    BufferPtr create_buffer(std::size_t size) override;
    // Peers found at run time (docs/tcp.md, "Clients in no nodes file"): a client
    // (self no_node) looks a server up by "tcp://host:port"; a server with
    // tcp.max_clients takes such clients, each under a run-time id.
    NodePtr lookup(std::string_view address) override;
    [[nodiscard]] std::uint32_t runtime_peers_seen() const noexcept override;
    NodePtr runtime_peer(NodeId id) override;
    void forget_runtime_peer(NodeId id) override;
    [[nodiscard]] std::uint32_t runtime_peers_forgotten() const noexcept override;

    // The port this factory listens on (the nodes file's port).
    [[nodiscard]] std::uint16_t port() const noexcept;
    [[nodiscard]] ListenerStats listener_stats() const noexcept;
    // Fault injection for tests and drills: aborts both connections with this peer
    // (RST), as a network failure would; both processes live on and reconnect.
    void reset_connections(NodeId peer);

    // For technology: auto: from now on, a connection installed or a peer lost rings
    // bell, and so does input from the nodes named to ring_on_input_from, so that a
    // group mixing sci and tcp nodes sleeps on the sci doorbell alone. The bell must
    // outlive the factory.
    void ring_on_input(Doorbell& bell);
    // Input from node id (made by this factory) rings the bell of ring_on_input from
    // now on: a group that sleeps on that bell names its tcp members before it sleeps.
    // Input that comes while nobody sleeps on the bell turns that node's ring off
    // until a sleeper calls before_bell_sleep (so that a receiver that never sleeps
    // is not paid a wake-up of the background thread per arrival).
    void ring_on_input_from(NodeId id);
    // Called by a thread that sleeps on the bell, after it announced itself
    // (Doorbell::sleepers) and before its last poll: the rings turned off come back.
    void before_bell_sleep();

    [[nodiscard]] Transport& transport() const noexcept { return *transport_; }

private:
    NodePtr make_node(NodeId id) override;
    std::unique_ptr<BasicGroup> make_group(std::string name) override;
    std::shared_ptr<Transport> transport_;
};

} // namespace msgpass::tcp
