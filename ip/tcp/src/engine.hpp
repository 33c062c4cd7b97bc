// Internals of the tcp technology: TcpNode (one peer: the connection this process
// opened to send to it, outgoing.cpp, and the connection it opened to send to us,
// incoming.cpp; the application's calls in node.cpp) and Engine (the listening
// socket, the background thread and the nodes of one factory, engine.cpp). What
// does not depend on TCP (window, incarnations, handshake, frames, reconnection
// policy, reactor) comes from ip/common.
//
// Threads. Senders write to a node's outgoing socket under out_mutex_ when nothing
// is queued before them; the receiver reads the incoming socket under in_mutex_.
// Only the background thread opens and closes outgoing sockets and installs
// incoming ones, so that an event it received always refers to the socket it
// thinks it does (each outgoing connection carries a generation number).
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/node.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/wait.hpp>

#include <msgpass/ip/auth.hpp>
#include <msgpass/ip/gather.hpp>
#include <msgpass/ip/incarnation.hpp>
#include <msgpass/ip/reactor.hpp>
#include <msgpass/ip/reconnect.hpp>
#include <msgpass/ip/socket.hpp>
#include <msgpass/ip/window.hpp>
#include <msgpass/kit/pool.hpp>

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
struct SocketSleeper {
    const ip::WakeFd& wake;
    std::function<void(bool idle, std::vector<int>& fds)> collect;
    std::function<BufferPtr()> after_wake;
    std::vector<int> fds{};

    template <class Poll>
    BufferPtr sleep(Poll& /*poll*/, std::chrono::nanoseconds step, const WaitPhase& at) {
        const bool idle = at.now >= at.start + ack_delay;
        if (!idle) step = std::min<std::chrono::nanoseconds>(step, ack_delay - (at.now - at.start));
        fds.clear();
        collect(idle, fds);
        if (!ip::wait_readable(wake, fds, step)) return nullptr;
        return after_wake ? after_wake() : nullptr;
    }
};
// A send that follows the previous write of its node by less than batch_window is
// part of a stream and joins a batch, written by the sender at batch_messages or by
// the background thread batch_window after the batch began (see TcpNode::send).
// Messages of batch_bytes or more are written at once.
inline constexpr std::chrono::microseconds batch_window{20};
inline constexpr std::size_t batch_messages = 64;
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
    std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>(); // large message buffers
    // Set by technology: auto: input on any incoming connection rings this doorbell
    // (the sci one), so that a group mixing sci and tcp nodes sleeps on one futex.
    std::atomic<Doorbell*> bell{nullptr};
    std::atomic<std::uint64_t> accepted{0};
    std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Refusal::kinds)> refused{};

    explicit Shared(Parameters p);
    Shared(const Shared&) = delete;
    Shared& operator=(const Shared&) = delete;
    void wake_io() const noexcept { io_wake.ring(); }
    void wake_receivers() const noexcept {
        recv_wake.ring();
        if (auto* b = bell.load()) b->ring();
    }
    void count_refusal(Refusal r) noexcept { refused[static_cast<std::size_t>(r)].fetch_add(1); }
};

// Tags of epoll events (top byte of epoll_event.data.u64).
enum class Tag : std::uint8_t { listen = 1, io_wake = 2, pending = 3, out = 4, in = 5 };

// The data of an epoll event of a node's connection: tag, node id, and the low 24
// bits of the outgoing connection's generation (an event of an older one is ignored).
inline std::uint64_t event_data(Tag tag, NodeId id, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(tag) << 56) | (static_cast<std::uint64_t>(id) << 24) | (generation & 0xffffffu);
}

// Keepalive sized to the peer timeout, and TCP_USER_TIMEOUT = peer_timeout when
// user_timeout is set (an incoming connection; node.cpp says why not an outgoing one).
void tune_socket(int fd, std::chrono::nanoseconds peer_timeout, bool user_timeout);

class TcpNode final : public Node, public kit::FactoryBound {
public:
    TcpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer);
    ~TcpNode() override;

    [[nodiscard]] NodeId id() const noexcept override { return id_; }
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    void send(BufferPtr&& buffer) override;
    void send_shared(const SharedBuffer& buffer) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    bool flush(std::chrono::nanoseconds timeout) override;
    [[nodiscard]] NodeStats stats() const noexcept override;

    // A message already parsed, without a system call; null when none.
    [[nodiscard]] BufferPtr take_ready();
    [[nodiscard]] std::size_t queued() const noexcept { return queue_depth_.load(std::memory_order_relaxed); }

    // For the receive wait: sends the acknowledgement owed when acknowledge is set
    // (the receiver has been idle for ack_delay), and returns the incoming socket to
    // poll (-1 when there is none).
    int prepare_to_sleep(bool acknowledge);

    // --- background thread only ---
    // Runs timers (reconnect, connect timeout, loss deadline); returns when it wants
    // to be called again.
    Clock::time_point tick(Clock::time_point now);
    void on_out_event(std::uint32_t generation, std::uint32_t events);
    // Installs an accepted, identified connection from the peer; returns the
    // Welcome's next_expected.
    std::uint64_t attach_incoming(int fd, std::uint64_t incarnation);
    // Aborts both connections with RST (fault injection).
    void reset_connections();
    // Waits until the peer acknowledged every message written (or deadline).
    bool wait_acknowledged(Clock::time_point deadline);
    // Factory shutdown: a last acknowledgement and a goodbye on both connections,
    // then close. The node refuses sends afterwards.
    void close();

private:
    enum class OutState { idle, waiting, connecting, handshaking, established };

    template <class B>
    void send_impl(B& buffer);
    void throw_if_lost();
    // out side, under out_mutex_
    void write_pending();
    void arm_out(bool want_write);
    void out_broken(const std::string& why);
    void start_connect(Clock::time_point now);
    void attempt_failed(bool refused, const std::string& why, Clock::time_point now);
    void handle_welcome(const Welcome& w);
    void handle_challenge(const ip::Challenge& c);
    void read_out_side();
    void handle_out_event(std::uint32_t generation, std::uint32_t events);
    bool acknowledged(std::uint64_t next_expected);
    void trimmed();
    // may_live: given up for silence (no connection for peer_timeout), the peer may
    // show up again with the same incarnation.
    void declare_lost_locked(std::uint64_t incarnation, const std::string& reason, bool may_live = false);
    void welcome_mismatch(const Welcome& w);
    void close_out_fd();
    bool check_answers(Clock::time_point now);
    [[nodiscard]] std::chrono::nanoseconds answer_check_period() const;
    // in side, under in_mutex_
    void read_in_side();
    void parse_in_buffer();
    void in_broken(); // the incoming connection closed or failed
    void send_ack();
    void deliver(BufferPtr message);
    BufferPtr take_locked(std::unique_lock<std::mutex>& lock);

    std::shared_ptr<Shared> shared_;
    const NodeId id_;
    const std::string name_;
    ip::Address address_; // empty: the peer has no port (receive only)
    StatsCounters stats_;
    std::atomic<std::size_t> queue_depth_{0};

    // --- outgoing connection (data to the peer, acknowledgements back) ---
    mutable std::mutex out_mutex_;
    std::condition_variable out_changed_;
    OutState state_ = OutState::idle;
    int out_fd_ = -1;
    std::uint32_t generation_ = 0;
    bool armed_write_ = false;
    Clock::time_point last_write_{};                 // of the last write by a sender or a batch
    Clock::time_point batch_start_{};                // when the batch now waiting began
    bool batch_timed_ = false;                       // the background thread holds a batch's deadline (tick)
    std::atomic<std::uint64_t> takes_{0};            // messages the application took from this node
    std::uint64_t takes_at_write_ = 0;               // takes_ at the last immediate write
    ip::SendWindow window_;                          // messages not yet acknowledged
    ip::GatherList gather_;                          // the iovecs of one write
    std::vector<ip::Outgoing> acknowledged_scratch_; // background thread only: freed outside out_mutex_
    std::uint64_t peer_incarnation_ = 0;             // of the last Welcome; 0 = none
    // The peer incarnation whose count of our messages window_'s numbers follow (0:
    // none yet); a welcome from another one renumbers them from 0. Kept through a
    // loss: a peer given up for silence may still count them.
    std::uint64_t numbered_for_ = 0;
    bool peer_said_goodbye_ = false;
    bool closed_ = false;
    bool refusal_logged_ = false;
    ip::Reconnect reconnect_;               // when to try again, when to give the peer up
    Clock::time_point next_answer_check_{}; // of the established connection (check_answers)
    Clock::time_point unanswered_since_{};  // the kernel has waited for the peer since; {} when not
    ip::AuthHello auth_hello_{};            // the Hello of this attempt, with a key (its MACs cover it)
    std::array<std::byte, 128> out_rx_{};   // Challenge, Welcome, acks and goodbyes from the peer
    std::size_t out_rx_len_ = 0;

    // --- incoming connection (data from the peer, acknowledgements back) ---
    std::mutex in_mutex_;
    int in_fd_ = -1;
    ip::ReceiveWindow in_window_; // the peer incarnation's next expected message, acknowledgements owed
    std::vector<std::byte> rx_;   // read buffer
    std::size_t rx_begin_ = 0, rx_end_ = 0;
    BufferPtr assembling_; // a message larger than what rx_ holds (a SingleBuffer)
    std::byte* assembling_data_ = nullptr;
    std::size_t assembled_ = 0;
    std::uint64_t assembling_seq_ = 0;
    ip::Inbox inbox_; // with a marker where a restarted peer's old incarnation was lost
    bool in_goodbye_ = false;
    std::array<std::byte, sizeof(FrameHeader)> ack_tx_{}; // an acknowledgement cut short by a full socket
    std::size_t ack_tx_len_ = 0, ack_tx_off_ = 0;
    std::string violation_;                           // reported once by receive()
    std::atomic<bool> probe_wanted_{false};           // the incoming connection broke: ask the peer who it is
    std::atomic<std::uint64_t> known_incarnation_{0}; // the peer's incarnation seen on either connection
    std::atomic<std::uint32_t> spin_skip_{0};         // blocking receives left that do not spin (receive)
    std::atomic<std::uint32_t> spin_backoff_{0};      // how many to skip after the next spin that finds nothing

    // --- loss of the peer ---
    kit::LossLatch loss_;
};

class Engine {
public:
    Engine(const config::Configuration& configuration, NodeId self);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // The node for a peer id, made on first use. Throws ConfigError / UsageError.
    std::shared_ptr<TcpNode> node(NodeId id);
    [[nodiscard]] std::vector<std::shared_ptr<TcpNode>> nodes() const;
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
    void drop_pending(int fd);
    void log_refusal(const std::string& from, Refusal reason, const std::string& detail);

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
    std::map<int, Pending> pending_; // background thread only
    std::atomic<bool> stop_{false};
    std::thread thread_;
    Clock::time_point log_window_{};
    int logged_in_window_ = 0;
};

} // namespace msgpass::tcp
