// TcpNode: one peer of the tcp technology and the one two-way connection of the
// pair (docs/tcp.md). Its rooms, each a file: node.cpp the application's calls
// (receive, stats) and the loss of the peer; sender.cpp the send side (the queue, the
// gathered writes, flush); receiver.cpp the receive side (reading and parsing frames
// into the inbox, the acknowledgements owed); link.cpp the connection itself (opening
// it, the connector's handshake, its end, the background thread's timers). The
// factory-wide engine is Transport (transport.hpp), which holds the threads and
// locks rules.
#pragma once

#include "transport.hpp"

namespace msgpass::tcp {

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
    void apply_pending_ack(bool write = true);
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
    std::uint32_t epoll_mask_ = 0;               // the events the background thread watches
    bool armed_write_ = false;                   // the socket was full
    bool write_failed_ = false;                  // a write failed: the background thread ends the connection
    std::string write_failure_;                  // why
    bool background_read_ = false;               // the background thread reads (for acknowledgements or a handshake)
    Clock::time_point last_write_{};             // of the last write by a sender or a batch
    Clock::time_point batch_start_{};            // when the batch now waiting began
    bool batch_timed_ = false;                   // the background thread holds a batch's deadline (tick)
    std::atomic<std::uint64_t> takes_{0};        // messages the application took from this node
    std::uint64_t takes_at_write_ = 0;           // takes_ at the last immediate write
    SendWindow window_;                          // messages not yet acknowledged
    GatherList gather_;                          // the iovecs of one write
    std::vector<Outgoing> acknowledged_scratch_; // freed outside out_mutex_
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

} // namespace msgpass::tcp
