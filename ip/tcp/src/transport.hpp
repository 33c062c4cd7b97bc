// The factory-wide engine of the tcp technology (the room "transport" of
// shared/design/ARCHITECTURE.md): the listening socket, the acceptor's side of the
// handshakes, the background thread that opens, repairs and drains the connections,
// and the nodes of one factory (transport.cpp); with what the nodes share with it
// (Parameters, Shared) and the constants of the protocol's timing. The node of one
// peer is TcpNode (node.hpp).
//
// Threads and locks. Senders write to the socket under out_mutex_ when nothing is
// queued before them; the receiver reads it under in_mutex_. A thread that holds
// both takes in_mutex_ first. The receiver only tries out_mutex_ (to apply an
// acknowledgement or write one alone); when it cannot, the background thread does
// it, and the background thread never waits for the application's in_mutex_. Only the
// background thread opens, installs and closes sockets, holding both locks (a reader
// or a writer that finds the connection broken hands it over), so that an event
// always refers to the socket it thinks it does (each connection carries a
// generation number).
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/node.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/wait.hpp>

#include "read_chunk.hpp"
#include "reconnect.hpp"
#include "window.hpp"
#include <msgpass/ip/auth.hpp>
#include <msgpass/ip/incarnation.hpp>
#include <msgpass/ip/reactor.hpp>
#include <msgpass/ip/socket.hpp>
#include <msgpass/kit/pool.hpp>
#include <msgpass/kit/ready_group.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <optional>
#include <span>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

namespace msgpass::tcp {

using Clock = std::chrono::steady_clock;
using kit::BufferPool;
using kit::InlineBuffer;

// A receiver acknowledges what it holds once it has waited ack_delay for more: in a
// request-response exchange the peer's next message comes sooner, and an
// acknowledgement written before every wait would wake the peer's background thread
// once per message. (It also acknowledges every ack_every messages.)
inline constexpr std::chrono::microseconds ack_delay{1000};
// A sender that does not read its connection reads the acknowledgements waiting there
// at a batch's write, at most this often (TcpNode::read_own_acks).
inline constexpr std::chrono::microseconds own_ack_period{200};

// The background thread ticks a node up to this much before its tick is due
// (Transport::run), and a tick runs the check of the peer's answers up to this much
// early, so that the checks of many nodes, each due every answer_check_period at its
// own phase, gather into few wake-ups.
inline constexpr std::chrono::milliseconds tick_slack{2};

// How tcp's blocking receives wait (msgpass::wait_with): no spinning, no yielding,
// ppoll() on the incoming sockets of the nodes waited on and on the factory's wake-up
// descriptor, at most 100 ms at a time. (A receive from one node reads its socket
// for receive_spin before, TcpNode::receive.)
inline constexpr WaitPolicy socket_wait{std::chrono::microseconds(0), std::chrono::microseconds(0),
                                        std::chrono::microseconds(100000)};

// The sleeper of those waits. Until the wait has idled for ack_delay its steps end
// then; from then on each node acknowledges what it holds before the wait sleeps
// (collect(idle, fds) gives the sockets, and acknowledges when idle). After a wake-up
// by a socket, after_wake() reads (a poll of the wait only takes what was read).
// R is what the wait returns: a BufferPtr, or a MessageView (TcpNode::receive_view).
template <class R>
struct BasicSocketSleeper {
    const ip::WakeFd& wake;
    std::function<void(bool idle, std::vector<int>& fds)> collect;
    std::function<R()> after_wake;
    std::vector<int> fds{};

    template <class Poll>
    R sleep(Poll& /*poll*/, std::chrono::nanoseconds step, const WaitPhase& at) {
        const bool idle = at.now >= at.start + ack_delay;
        if (!idle) step = std::min<std::chrono::nanoseconds>(step, ack_delay - (at.now - at.start));
        fds.clear();
        collect(idle, fds);
        if (!ip::wait_readable(wake, fds, step)) return R{};
        return after_wake ? after_wake() : R{};
    }
};
using SocketSleeper = BasicSocketSleeper<BufferPtr>;
// A send that follows the previous write of its node by less than batch_window is
// part of a stream and joins a batch, written by the sender at batch_messages or by
// the background thread batch_window after the batch began (see TcpNode::send).
// Messages of batch_bytes or more are written at once.
inline constexpr std::chrono::microseconds batch_window{20};
// A send held while its thread had input waiting (kit/held.hpp) goes when the thread
// next finds nothing to receive, or, if it does not come back, by the background
// thread held_bound after the send.
inline constexpr std::chrono::microseconds held_bound{500};
inline constexpr std::size_t batch_messages = 512;
inline constexpr std::size_t batch_bytes = 16 * 1024;

struct Parameters {
    NodeId self = 0;
    std::string partition;
    std::uint64_t max_message_size = 64 * config::MiB;
    std::chrono::nanoseconds peer_timeout{std::chrono::seconds(1)};
    std::uint32_t send_queue_limit = 65536;
    std::chrono::nanoseconds handshake_timeout{std::chrono::seconds(2)}; // tcp.handshake_timeout
    std::size_t max_pending = 1024;                                      // connections waiting for their Hello
    std::uint64_t ack_every = 64;              // acknowledge at least every this many messages (tcp.ack_every)
    std::uint64_t ack_bytes = 2 * config::MiB; // ... or this many bytes (tcp.ack_bytes)
    std::chrono::nanoseconds receive_spin{std::chrono::microseconds(50)}; // tcp.receive_spin_us
    std::chrono::nanoseconds backoff_min{std::chrono::milliseconds(1)};
    std::chrono::nanoseconds backoff_max{std::chrono::milliseconds(100)};
    std::optional<ip::AuthKey> auth_key; // auth_key_file: handshakes prove it (ip/auth.hpp)
    std::uint32_t max_clients = 0;       // tcp.max_clients: run-time clients at once
    bool compact_frames = true;          // tcp.compact_frames

    static Parameters from(const config::Configuration& configuration, NodeId self);
};

// What the nodes need from their factory, kept alive by the nodes themselves so that
// a node the application still holds after its factory is gone stays safe to call.
struct Shared {
    Parameters parameters;
    ip::Epoll epoll{"tcp"};      // the background thread's epoll set
    ip::WakeFd io_wake{"tcp"};   // something for the background thread to do
    ip::WakeFd recv_wake{"tcp"}; // wakes receivers sleeping in poll()
    std::uint64_t incarnation = 0;
    // This side reads compact frames and says so in its handshake (frame.hpp).
    bool compact_frames = false;
    std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>(); // large message buffers
    ChunkShelf chunks{read_chunk_capacity};                            // the idle read chunks (read_chunk.hpp)
    // Set by technology: auto: input on any incoming connection rings this doorbell
    // (the sci one), so that a group mixing sci and tcp nodes sleeps on one futex.
    std::atomic<Doorbell*> bell{nullptr};
    // Some connection's bell is muted (Link::mute_bell): a thread about to sleep on
    // the doorbell unmutes them (Transport::unmute_bells).
    std::atomic<bool> bells_muted{false};
    std::atomic<std::uint64_t> accepted{0};
    std::atomic<std::uint64_t> crossed{0};
    std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Refusal::kinds)> refused{};
    // Run-time clients (first_runtime_id up): how many ids were given so far, and
    // whether one of them is gone (it left, or was lost) for the background thread
    // to forget.
    std::atomic<std::uint32_t> clients_seen{0};
    std::atomic<std::uint32_t> clients_forgotten{0}; // of those, forgotten (forget_gone_clients)
    std::atomic<bool> client_gone{false};

    explicit Shared(Parameters p);
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;
    void wake_io() const noexcept { io_wake.ring(); }
    // A node's receivers (Link::tell_receivers, which marks its groups first).
    void wake_receivers() const noexcept {
        recv_wake.ring();
        if (auto* b = bell.load()) b->ring();
    }
    void count_refusal(Refusal r) noexcept { refused[static_cast<std::size_t>(r)].fetch_add(1); }
};

// Tags of epoll events (top byte of epoll_event.data.u64).
enum class Tag : std::uint8_t { listen = 1, io_wake = 2, pending = 3, conn = 4, in = 5 };

// The data of an epoll event of a node's connection: tag, node id, and the low 24
// bits of the connection's generation (an event of an older one is ignored).
inline std::uint64_t event_data(Tag tag, NodeId id, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(tag) << 56) | (static_cast<std::uint64_t>(id) << 24) | (generation & 0xffffffu);
}

// TCP_NODELAY and keepalive sized to the peer timeout (node.cpp says why no
// TCP_USER_TIMEOUT).
void tune_socket(int fd, std::chrono::nanoseconds peer_timeout);

// A reader that is not the application (the background thread) stops taking a
// peer's messages into the inbox beyond this many; they wait in the kernel then.
inline constexpr std::size_t background_inbox_limit = 65536;

// The tie-break of two nodes that connect to each other at once: the lower node id
// refuses (crossed) the higher one's Hello while its own attempt is under way or
// its own connection is younger than this (the two Hellos crossed); later, a Hello
// of the higher node means that node lost the connection, and it replaces it.
inline constexpr std::chrono::milliseconds crossing_window{250};

class TcpNode;

class Transport {
public:
    Transport(const config::Configuration& configuration, NodeId self);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // The node for a peer id, made on first use. Throws ConfigError / UsageError.
    std::shared_ptr<TcpNode> node(NodeId id);
    // The node of a run-time client or of a looked-up peer, or null.
    std::shared_ptr<TcpNode> find(NodeId id) const;
    // A run-time client the application is done with: closed now, forgotten by the
    // background thread (its id is never used again). No effect for other ids.
    void forget_client(NodeId id);
    // The run-time clients held now (not forgotten yet).
    [[nodiscard]] std::uint32_t live_clients() const;
    // The node of the process listening at address (text: as the caller wrote it):
    // connects and runs the handshake as a client now (in the caller's thread, at
    // most peer_timeout), then the node keeps the connection as its own. Throws
    // Error naming text and why the server refused, or could not be reached.
    std::shared_ptr<TcpNode> lookup(const std::string& host, std::uint16_t port, const std::string& text);
    [[nodiscard]] std::vector<std::shared_ptr<TcpNode>> nodes() const;
    // technology: auto: input from peer id rings the doorbell from now on (Link::want_bell).
    void want_bell(NodeId id);
    // technology: auto, a thread about to sleep on the doorbell: the bells muted while
    // nobody slept ring again (Link::mute_bell).
    void unmute_bells();
    [[nodiscard]] const Shared& shared() const noexcept { return *shared_; }
    [[nodiscard]] const std::shared_ptr<Shared>& shared_ptr() const noexcept { return shared_; }
    [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
    [[nodiscard]] const config::Configuration& configuration() const noexcept { return configuration_; }
    // Waits until deadline for the acknowledgement of what was handed over (the
    // factory flushed before), says goodbye, stops the background thread. Idempotent.
    void shutdown(SteadyTime deadline);

private:
    // A connection in its handshake: reading the Hello (with the connector's nonce
    // when authenticated), then, with a key, reading the Proof of the Challenge sent.
    struct Pending {
        int fd = -1;
        Clock::time_point deadline;
        ip::AuthHello hello; // a plain Hello fills only hello.hello
        ip::Challenge challenge;
        ip::Proof proof;
        bool proving = false; // the Challenge went out; reading the Proof
        std::size_t got = 0;
        std::string from;
    };
    void run();
    void accept_all();
    void on_pending(int fd);
    bool refuse_without_descriptors();
    void finish_hello(Pending& p);
    void finish_handshake(Pending& p);
    void refuse(Pending& p, Refusal reason, const std::string& detail, bool answer);
    void refuse_crossed(Pending& p);
    void drop_pending(int fd);
    void log_refusal(const std::string& from, Refusal reason, const std::string& detail);
    // A node for a client in no nodes file that proved itself (a newcomer), with the
    // next run-time id; null when max_clients are here already.
    std::shared_ptr<TcpNode> new_client(const Pending& p);
    // The clients that left or were lost are forgotten (their ids are never reused).
    void forget_gone_clients();

    config::Configuration configuration_;
    std::shared_ptr<Shared> shared_;
    int listen_fd_ = -1;
    // Held open so that, out of descriptors, a pending connection can still be
    // accepted (closing this one) and closed at once, instead of staying ready on
    // the listening socket and spinning the background thread (see accept_all).
    int spare_fd_ = -1;
    bool listen_paused_ = false; // out of descriptors and no spare: listening resumes at the next tick
    ip::Acceptor acceptor_;      // what a Hello must say
    std::uint16_t port_ = 0;
    mutable std::mutex nodes_mutex_;
    std::map<NodeId, std::shared_ptr<TcpNode>> nodes_;
    std::atomic<std::uint64_t> nodes_changed_{0}; // counts the changes of nodes_ (made under nodes_mutex_)
    std::uint32_t live_clients_ = 0;              // run-time clients in nodes_ (nodes_mutex_)
    std::map<std::string, NodeId> looked_up_;     // address text -> node (nodes_mutex_)
    std::map<int, Pending> pending_;              // background thread only
    std::atomic<bool> stop_{false};
    std::thread thread_;
    Clock::time_point log_window_{};
    int logged_in_window_ = 0;
};

} // namespace msgpass::tcp
