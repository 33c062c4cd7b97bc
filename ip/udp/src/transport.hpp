// Internals of the udp technology: Transport, the one UDP socket of the factory, bound
// to the node's port, and the background thread that reads it, hands each datagram
// to its UdpNode (node.hpp) and runs the timers.
#pragma once

#include "node.hpp"

#include <msgpass/ip/socket.hpp>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace msgpass::udp {

// Where a datagram came from (a newcomer's answers go there); none for one held back
// by fault injection.
struct Source {
    const sockaddr_storage* address = nullptr;
    socklen_t length = 0;
};

class Transport final : public SocketReader {
public:
    Transport(const config::Configuration& configuration, NodeId self);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    std::shared_ptr<UdpNode> node(NodeId id) const; // null: not a peer

    // Peers found at run time (clients.cpp; docs/udp.md, "Clients in no nodes file").
    // The node of a run-time client of this server, or of a server this client looked
    // up (null: none, or forgotten).
    std::shared_ptr<UdpNode> runtime_node(NodeId id) const;
    // The node of the process listening at host:port (text: the address as the caller
    // wrote it): the newcomer's hello (and, under auth_key_file, the cookie exchange)
    // in the caller's thread, at most peer_timeout. Throws Error naming text and why.
    std::shared_ptr<UdpNode> lookup(const std::string& host, std::uint16_t port, const std::string& text);
    // A client the application is done with: goodbye, then forgotten. No effect for other ids.
    void forget_client(NodeId id);
    [[nodiscard]] std::uint32_t live_clients() const;
    [[nodiscard]] const Shared& shared() const noexcept { return *shared_; }
    [[nodiscard]] Shared& shared() noexcept { return *shared_; }
    [[nodiscard]] const std::shared_ptr<Shared>& shared_ptr() const noexcept { return shared_; }
    [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
    void shutdown(SteadyTime deadline);

    // SocketReader: what the socket holds, at most a batch, then the statuses owed
    // (read_mutex held: the background thread, or the receiver the socket is lent to).
    int read_socket(Clock::time_point& now, int most) override;
    int wait_and_read(std::chrono::nanoseconds timeout, int most) override;

private:
    void run();
    // The node the datagram went to (null: dropped).
    UdpNode* handle(std::span<const std::byte> bytes, Clock::time_point now, Source from);
    struct Batch;
    UdpNode* inject(std::span<const std::byte> bytes, Clock::time_point now, Batch& batch, Source from);
    // --- peers found at run time (clients.cpp) ---
    static bool knows(const void* transport, std::uint32_t id);
    // A newcomer's hello (read_mutex): a node for it (null: refused, or answered with
    // a cookie under auth_key_file).
    UdpNode* on_newcomer(const Decoded& d, std::span<const std::byte> bytes, Source from, Clock::time_point now);
    // A datagram from no known node that answers a lookup in progress (true: taken).
    bool answer_lookup(std::span<const std::byte> bytes, Source from);
    // The cookie a keyed server gives a newcomer at this address and incarnation.
    [[nodiscard]] std::array<std::uint64_t, 2> cookie(Source from, std::uint64_t incarnation) const;
    // Background thread: the clients that left or were lost, and whose messages were
    // read, or that the application forgot, are forgotten (read_mutex taken).
    void forget_gone_clients();
    // Every run-time node, for the timers and the shutdown.
    [[nodiscard]] std::vector<std::shared_ptr<UdpNode>> runtime_nodes() const;
    // Reads at most `most` datagrams of fd into their nodes (a recvmmsg() per 16); the
    // nodes touched go into the batch's list. Returns how many it read; fewer than
    // `most`: the socket had no more.
    int read_from(int fd, Clock::time_point& now, int most = 256);
    // The n datagrams the batch received, each to its node.
    void take(Batch& b, int fd, int n, Clock::time_point now);
    // Returns when a status owed is due (time_point::max(): none).
    Clock::time_point end_of_batch(Batch& b, Clock::time_point now);
    // After a receiver's read: the background thread is woken when its timers are not
    // due before what that read made due.
    void after_receiver_read(Batch& b, Clock::time_point now, bool given = false);
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
    std::vector<std::byte> held_; // a datagram held back (udp.inject_reorder)
    // What one recvmmsg() takes: up to batch datagrams of each bytes (the largest a
    // peer sends, plus one: a longer datagram arrives cut, MSG_TRUNC, and is dropped).
    // With UDP_GRO (gro) each is room for a run of datagrams the kernel kept together
    // (a peer's GSO send on loopback or a veth, or datagrams coalesced on receipt), up
    // to 64 KiB, told apart by the segment size in its control message; a datagram
    // alone there longer than `largest` is dropped as if it arrived cut.
    struct Batch {
        static constexpr std::size_t batch = 16;
        struct Control {
            alignas(cmsghdr) std::array<unsigned char, CMSG_SPACE(sizeof(int))> bytes{};
        };
        std::size_t each = 0, largest = 0;
        bool gro = false;
        std::vector<std::byte> storage;
        std::array<iovec, batch> iov{};
        std::array<sockaddr_storage, batch> from{};
        std::array<mmsghdr, batch> messages{};
        std::array<Control, batch> control{};
        std::vector<UdpNode*> touched; // nodes that got datagrams since the end of the last batch
        void size(std::size_t bytes, bool with_gro = false);
        void prepare(unsigned count); // flags, address and control lengths reset for recvmmsg()
        // The size of the datagrams message i carries (its length when one).
        [[nodiscard]] std::size_t segment(std::size_t i) const noexcept;
    };
    Batch unicast_;        // under read_mutex
    Batch multicast_;      // the background thread's
    long timeout_us_ = -1; // SO_RCVTIMEO as last set (under read_mutex)
    bool injecting_ = false;
    std::atomic<std::int64_t> next_tick_ns_{0}; // when the background thread runs the timers next
    // When a receiver the socket is lent to last read a datagram (steady clock, ns): the
    // timers run every status_delay only while receivers read (run).
    std::atomic<std::int64_t> receiver_read_ns_{0};
    std::thread thread_;

    // Peers found at run time: a server's clients (first_runtime_id up) and the
    // servers a client looked up, under runtime_mutex_ (handle() looks here only
    // when `from` is not in nodes_ and has_runtime_ is set). A client's newcomer
    // hello is known by its address and incarnation (a repeated hello gets the same
    // node). Nodes leave only with read_mutex held too (no batch holds a pointer).
    mutable std::mutex runtime_mutex_;
    std::map<NodeId, std::shared_ptr<UdpNode>> runtime_;
    std::map<std::pair<std::string, std::uint64_t>, NodeId> newcomers_;
    std::atomic<bool> has_runtime_{false};
    std::uint32_t live_clients_ = 0;            // runtime_mutex_
    std::array<std::uint64_t, 4> cookie_key_{}; // the keyed server's secret of its cookies
    // Lookups in progress (client side): the answers of their servers.
    struct Lookup {
        ip::Address address;
        std::vector<std::byte> answer; // the last datagram from there (a welcome)
        bool answered = false;
    };
    std::mutex lookups_mutex_;
    std::condition_variable lookups_changed_;
    std::vector<Lookup*> lookups_;
    std::atomic<int> lookups_pending_{0};
    std::map<std::string, NodeId> looked_up_; // address text -> node (runtime_mutex_)
};

} // namespace msgpass::udp
