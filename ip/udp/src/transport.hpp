// Internals of the udp technology: Transport, the one UDP socket of the factory, bound
// to the node's port, and the background thread that reads it, hands each datagram
// to its UdpNode (node.hpp) and runs the timers.
#pragma once

#include "node.hpp"

#include <msgpass/ip/socket.hpp>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace msgpass::udp {

class Transport final : public SocketReader {
public:
    Transport(const config::Configuration& configuration, NodeId self);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    std::shared_ptr<UdpNode> node(NodeId id) const; // null: not a peer
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
    UdpNode* handle(std::span<const std::byte> bytes, Clock::time_point now);
    struct Batch;
    UdpNode* inject(std::span<const std::byte> bytes, Clock::time_point now, Batch& batch);
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
    void after_receiver_read(Batch& b, Clock::time_point now);
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
    std::thread thread_;
};

} // namespace msgpass::udp
