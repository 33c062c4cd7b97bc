// Internals of the tcp technology: TcpNode (one peer and the one two-way connection
// of the pair: opening it, its handshake and writes in outgoing.cpp, reading and
// installing it in incoming.cpp, the application's calls in node.cpp) and Engine
// (the listening socket, the background thread and the nodes of one factory,
// engine.cpp). What does not depend on TCP (window, incarnations, handshake, frames,
// reconnection policy, reactor) comes from ip/common.
//
// Threads and locks. Senders write to the socket under out_mutex_ when nothing is
// queued before them; the receiver reads it under in_mutex_. A thread that holds
// both takes in_mutex_ first. The receiver only tries out_mutex_ (to apply an
// acknowledgement or write one alone); when it cannot, the background thread does
// it. Only the background thread opens, installs and closes sockets, holding both
// locks (a reader or a writer that finds the connection broken hands it over), so
// that an event always refers to the socket it thinks it does (each connection
// carries a generation number).
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/node.hpp>
#include <msgpass/tcp/factory.hpp>
#include <msgpass/tcp/options.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/wait.hpp>

#include "gather.hpp"
#include "reconnect.hpp"
#include "window.hpp"
#include <msgpass/ip/auth.hpp>
#include <msgpass/ip/incarnation.hpp>
#include <msgpass/ip/reactor.hpp>
#include <msgpass/ip/socket.hpp>
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
// The longest pause of the background thread before it looks again whether an
// application that was reading still does (TcpNode::tick).
inline constexpr std::chrono::milliseconds read_check_max{32};

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
    std::atomic<std::uint64_t> crossed{0};
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
    // (the receiver has been idle for ack_delay), and returns the socket to poll (-1
    // when there is none).
    int prepare_to_sleep(bool acknowledge);

    // Acknowledgement frames this node wrote alone (not carried by a data frame).
    [[nodiscard]] std::uint64_t standalone_acks() const noexcept {
        return standalone_acks_.load(std::memory_order_relaxed);
    }

    // --- background thread only ---
    // Runs timers (reconnect, connect timeout, loss deadline, reading for
    // acknowledgements); returns when it wants to be called again.
    Clock::time_point tick(Clock::time_point now);
    // How many times the background thread read this node's connection for
    // acknowledgements (tests: a reading application leaves it to them).
    [[nodiscard]] std::uint64_t background_reads() const noexcept {
        return background_reads_.load(std::memory_order_relaxed);
    }
    void on_event(std::uint32_t generation, std::uint32_t events);
    // A connection from the peer passed the acceptor's checks: installs it (the
    // Welcome goes out) and returns true, or returns false when this node's own
    // connection to the peer crossed it and wins the tie-break (the lower node id's
    // connection stays): the caller refuses it as crossed.
    bool accept_connection(int fd, std::uint64_t incarnation);
    // Whether the tie-break refuses a connection from the peer now.
    [[nodiscard]] bool crosses() const;
    // Aborts the connection with RST (fault injection).
    void reset_connections();
    // Waits until the peer acknowledged every message written (or deadline).
    bool wait_acknowledged(Clock::time_point deadline);
    // Factory shutdown: a last acknowledgement in a goodbye, then close. The node
    // refuses sends afterwards.
    void close();

private:
    // connecting, handshaking: this node's own attempt (the connector's side);
    // resuming: a connection the peer opened, its data waits for the peer's resume frame.
    enum class State { idle, waiting, connecting, handshaking, resuming, established };

    // What one parse found beside messages, applied under out_mutex_ after it.
    struct Control {
        bool ack = false;
        std::uint64_t ack_to = 0;
        bool goodbye = false;
        bool resume = false;
        std::uint64_t resume_to = 0;
        bool bad_ack = false; // a frame broke the protocol (violation_ says how)
        bool closed = false;  // the connection ended (after the frames parsed)
        bool delivered = false;
    };

    template <class B>
    void send_impl(B& buffer);
    void throw_if_lost();
    // under out_mutex_
    void write_pending();
    bool write_control();
    void update_epoll();
    std::optional<Clock::time_point> tick_sending(Clock::time_point now);
    bool leave_reading(std::uint32_t generation);
    bool crosses_locked(Clock::time_point now) const;
    bool send_hello(int fd);
    void fail_write(const std::string& why);
    void start_connect(Clock::time_point now);
    void attempt_failed(bool refused, const std::string& why, Clock::time_point now);
    void handle_challenge(const ip::Challenge& c);
    void read_handshake();
    bool acknowledged(std::uint64_t next_expected);
    void apply_pending_ack();
    void trimmed();
    bool resume_window(std::uint64_t incarnation, std::uint64_t next_expected);
    void declare_lost_locked(std::uint64_t incarnation, const std::string& reason, bool may_live = false);
    void window_mismatch(std::uint64_t incarnation, std::uint64_t next_expected);
    bool check_answers(Clock::time_point now);
    [[nodiscard]] std::chrono::nanoseconds answer_check_period() const;
    void queue_control(const FrameHeader& h);
    // under both locks (in_mutex_ first)
    void handle_welcome(const Welcome& w);
    void broken(const std::string& why);
    void close_fd();
    void install(int fd);
    void attach_in(std::uint64_t incarnation);
    void apply(const Control& c);
    void read_background();
    // under in_mutex_
    Control read_in_side();
    void parse_in_buffer(Control& c);
    void reset_in();
    void send_ack();
    void send_ack_locked();
    [[nodiscard]] bool ack_due() const;
    void deliver(BufferPtr message);
    void after_read(std::unique_lock<std::mutex>& in_lock, const Control& c, bool background = false);
    bool sending(Clock::time_point now);
    BufferPtr take_locked(std::unique_lock<std::mutex>& lock);

    std::shared_ptr<Shared> shared_;
    const NodeId id_;
    const std::string name_;
    ip::Address address_; // empty: the peer has no port (receive only)
    StatsCounters stats_;
    std::atomic<std::size_t> queue_depth_{0};

    // --- the connection (both directions). fd_ changes under both locks; readers
    // use it under in_mutex_, writers under out_mutex_.
    int fd_ = -1;
    int bell_fd_ = -1;                 // technology: auto: a duplicate, edge-triggered, that rings the doorbell
    bool framed_ = false;              // past the handshake: frames come (changes under both locks)
    bool opened_here_ = false;         // this node opened the connection (the tie-break)
    Clock::time_point connected_at_{}; // when its handshake ended
    // This node's own attempt, dropped for the peer's crossing connection: kept open
    // (outside the epoll set) until the peer refused it, so that the peer reads a
    // whole Hello and not a connection cut short; closed handshake_timeout later.
    int abandoned_fd_ = -1;
    bool abandoned_hello_ = false; // given up before it connected: its Hello goes when it does
    Clock::time_point abandoned_at_{};

    // --- sending side, under out_mutex_ ---
    mutable std::mutex out_mutex_;
    std::condition_variable out_changed_;
    State state_ = State::idle;
    std::uint32_t generation_ = 0;
    std::uint32_t epoll_mask_ = 0;    // the events the background thread watches
    bool armed_write_ = false;        // the socket was full
    bool write_failed_ = false;       // a write failed: the background thread ends the connection
    std::string write_failure_;       // why
    bool background_read_ = false;    // the background thread reads (for acknowledgements or a handshake)
    Clock::time_point last_write_{};  // of the last write by a sender or a batch
    Clock::time_point batch_start_{}; // when the batch now waiting began
    std::chrono::nanoseconds read_check_{ack_delay}; // background thread: when to look at a reading application again
    bool batch_timed_ = false;                       // the background thread holds a batch's deadline (tick)
    std::atomic<std::uint64_t> takes_{0};            // messages the application took from this node
    std::uint64_t takes_at_write_ = 0;               // takes_ at the last immediate write
    SendWindow window_;                              // messages not yet acknowledged
    GatherList gather_;                              // the iovecs of one write
    std::vector<Outgoing> acknowledged_scratch_;     // freed outside out_mutex_
    std::array<std::byte, 4 * sizeof(FrameHeader)> ctl_tx_{}; // control frames (resume, skip, ack) not yet written
    std::size_t ctl_len_ = 0, ctl_off_ = 0;
    std::uint64_t peer_incarnation_ = 0; // of the connection's handshake; 0 = none
    // The peer incarnation whose count of our messages window_'s numbers follow (0:
    // none yet); a handshake with another one renumbers them from 0. Kept through a
    // loss: a peer given up for silence may still count them.
    std::uint64_t numbered_for_ = 0;
    bool peer_said_goodbye_ = false;
    bool closed_ = false;
    bool refusal_logged_ = false;
    Reconnect reconnect_;                                  // when to try again, when to give the peer up
    Clock::time_point next_answer_check_{};                // of the established connection (check_answers)
    Clock::time_point unanswered_since_{};                 // the kernel has waited for the peer since; {} when not
    ip::AuthHello auth_hello_{};                           // the Hello of this attempt, with a key (its MACs cover it)
    std::array<std::byte, sizeof(ip::Challenge)> hs_rx_{}; // the answer to our Hello
    std::size_t hs_len_ = 0;
    // Acknowledgements between the two sides: the reader publishes how many
    // messages arrived (ack_avail_), every data frame written carries it, and
    // ack_sent_ is the last value written. peer_ack_ is the newest acknowledgement
    // the reader saw that is not applied to window_ yet (it only tries out_mutex_);
    // acked_base_ mirrors window_.acknowledged_to() for the reader, which widens the
    // 32 bits a data frame carries from it.
    std::atomic<std::uint64_t> ack_avail_{0};
    std::atomic<std::uint64_t> ack_sent_{0};
    std::atomic<std::uint64_t> peer_ack_{0};
    std::atomic<bool> peer_ack_pending_{false};
    std::atomic<bool> ack_wanted_{false}; // a standalone acknowledgement the receiver could not write
    std::atomic<std::uint64_t> acked_base_{0};
    std::atomic<std::uint64_t> standalone_acks_{0};
    std::atomic<std::uint64_t> background_reads_{0};
    std::atomic<std::uint64_t> sends_{0};        // messages handed to send (written under out_mutex_)
    std::uint64_t sends_seen_ = 0;               // background thread: sends_ when it last looked (sending())
    Clock::time_point sends_seen_at_{};          // ... and when it last saw it change
    std::atomic<std::int64_t> last_app_read_{0}; // steady-clock ns of the receiving thread's last read

    // --- receiving side, under in_mutex_ ---
    std::mutex in_mutex_;
    ReceiveWindow in_window_;   // the peer incarnation's next expected message, acknowledgements owed
    std::vector<std::byte> rx_; // read buffer
    std::size_t rx_begin_ = 0, rx_end_ = 0;
    BufferPtr assembling_; // a message larger than what rx_ holds (a SingleBuffer)
    std::byte* assembling_data_ = nullptr;
    std::size_t assembled_ = 0;
    ip::Inbox inbox_; // with a marker where a restarted peer's old incarnation was lost
    std::size_t inbox_count_ = 0;
    std::vector<Outgoing> rx_acknowledged_; // acknowledged by what the receiver read: freed outside out_mutex_
    bool in_goodbye_ = false;
    std::string violation_;                           // reported once by receive()
    std::atomic<std::uint64_t> known_incarnation_{0}; // the peer's incarnation seen on the connection
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
    void refuse_crossed(Pending& p);
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
