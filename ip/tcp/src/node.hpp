// TcpNode: one peer of the tcp technology (docs/tcp.md), the Node the application
// holds. Its state lives in the rooms it is made of, each a class of its own file:
// Link (link.hpp: the peer, the pair's connection, the two locks and what the two
// sides tell each other), Sender (sender.hpp: the send window, batches, gathered
// writes) and Receiver (receiver.hpp: the read buffer, the parse, the inbox).
// TcpNode itself is the facade of the Node calls (node.cpp: receive, stats; send and
// flush in sender.cpp) and drives what needs both sides: the connection through its
// life (link.cpp: opening, the connector's handshake, its end, the background
// thread's timers and events), installing a connection the peer opened and applying
// what a read found to the send side (receiver.cpp), the loss of the peer and the
// factory's close (node.cpp). The factory-wide engine is Transport (transport.hpp),
// which holds the threads and locks rules.
#pragma once

#include "receiver.hpp"
#include "sender.hpp"

#include <msgpass/kit/held.hpp>

#include <memory>

namespace msgpass::tcp {

class TcpNode final : public Node,
                      public kit::FactoryBound,
                      public kit::held::Writer,
                      public std::enable_shared_from_this<TcpNode>,
                      private Sender,
                      private Receiver {
public:
    // technology: auto's doorbell (Link: the ring of a sleeping group's members).
    using Link::mute_bell;
    using Link::unmute_bell;
    using Link::want_bell;
    TcpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer);
    ~TcpNode() override;

    [[nodiscard]] NodeId id() const noexcept override { return id_; }
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    void send(BufferPtr&& buffer) override;
    void send_shared(const SharedBuffer& buffer) override;
    void send_bytes(std::span<const std::byte> bytes) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    // Small messages lent from the read buffer (read_chunk.hpp), no buffer per message.
    [[nodiscard]] MessageView receive_view() override;
    [[nodiscard]] MessageView receive_view(std::chrono::nanoseconds timeout) override;
    bool flush(std::chrono::nanoseconds timeout) override;
    [[nodiscard]] NodeStats stats() const noexcept override;
    // Writes what a thread's sends held (kit/held.hpp; sender.cpp).
    void write_held() noexcept override;
    // Sends held so far (a thread's send that left its message queued while the
    // thread had input waiting); for tests.
    [[nodiscard]] std::uint64_t held_sends() const noexcept { return held_sends_.load(std::memory_order_relaxed); }

    // A message already parsed, without a system call; null when none.
    [[nodiscard]] BufferPtr take_ready();
    [[nodiscard]] MessageView lend_ready();
    // The background thread read messages for this node that wait in its inbox (false
    // also when the inbox's lock is busy: the look never waits).
    [[nodiscard]] bool inbox_waiting();
    [[nodiscard]] std::size_t queued() const noexcept { return queue_depth_.load(std::memory_order_relaxed); }

    // For the receive wait: sends the acknowledgement owed when acknowledge is set
    // (the receiver has been idle for ack_delay), and returns the socket to poll (-1
    // when there is none).
    int prepare_to_sleep(bool acknowledge);
    // For a group receive that idled (group.cpp): sends the acknowledgement owed only
    // when the peer holds a buffer of its application for a message it covers (one of
    // more than SendWindow::small_payload bytes; a smaller one is a copy in the peer's
    // staged bytes, which any later acknowledgement frees).
    void acknowledge_held();
    // For a group (group.hpp), under in_mutex_: a connection other than the one of
    // generation watched (-1: none) joins the group's epoll set (level-triggered
    // input, data: slot << 32 | generation) and watched becomes its generation; and
    // whether a receive may find something without reading the socket (a message read
    // already, a protocol violation, no connection: a loss to report). Receiving thread.
    bool watch(const ip::Epoll& set, std::size_t slot, std::int64_t& watched);
    // For a group (group.hpp), after a receive() that gave a message: whether that
    // receive read the socket until the kernel had nothing more (it returned fewer
    // bytes than asked), and nothing it parsed, nothing in the inbox, no protocol
    // violation nor loss is left to hand out, and the node told its receivers of
    // nothing since (tell_receivers): a receive now would find nothing without new
    // input, which makes the socket readable (the group's epoll set, level-triggered)
    // or the node's mark set. Receiving thread.
    [[nodiscard]] bool drained() const noexcept;
    // For the tests: the receiving thread's reads of the socket, and those that found
    // nothing.
    [[nodiscard]] std::uint64_t socket_reads() const noexcept { return socket_reads_.load(std::memory_order_relaxed); }
    [[nodiscard]] std::uint64_t empty_reads() const noexcept { return empty_reads_.load(std::memory_order_relaxed); }
    // For the tests: the sending thread's reads of its acknowledgements (read_own_acks).
    [[nodiscard]] std::uint64_t own_ack_reads() const noexcept {
        return own_ack_reads_.load(std::memory_order_relaxed);
    }
    // A group's ready marks (group.hpp): from now on the node sets its bit, slot, in
    // marks whenever it tells its receivers of something (Link::tell_receivers), until
    // the group leaves them (unwatch_marks).
    void watch_marks(std::shared_ptr<kit::ReadyMarks> marks, std::size_t slot);
    void unwatch_marks(const kit::ReadyMarks* marks);

    // Acknowledgement frames this node wrote alone (not carried by a data frame).
    [[nodiscard]] std::uint64_t standalone_acks() const noexcept {
        return standalone_acks_.load(std::memory_order_relaxed);
    }
    // Of those, the ones the background thread wrote for messages the application
    // had taken and then left unacknowledged for ack_delay (it was busy or not running).
    [[nodiscard]] std::uint64_t idle_acks() const noexcept { return idle_acks_.load(std::memory_order_relaxed); }

    // --- background thread only ---
    // Runs timers (reconnect, connect timeout, loss deadline, reading for
    // acknowledgements); returns when it wants to be called again.
    Clock::time_point tick(Clock::time_point now);
    // When Transport::run ticks this node next: what its last tick asked for (at most
    // 100 ms on), sooner after an event of its connection (Clock::time_point{}: at once).
    Clock::time_point tick_due{};
    void on_event(std::uint32_t generation, std::uint32_t events);
    // A connection from the peer passed the acceptor's checks: installs it (the
    // Welcome goes out) and returns true, or returns false when this node's own
    // connection to the peer crossed it and wins the tie-break (the lower node id's
    // connection stays): the caller refuses it as crossed.
    bool accept_connection(int fd, std::uint64_t incarnation);
    // Server side: the peer is a client in no nodes file, at this address ("host:port").
    void make_client(const std::string& from);
    // Whether the client left or was lost, and nothing it sent waits unread in the
    // inbox (a client that sent and left before the application looked at it): the
    // transport forgets it then. Background thread (in_mutex_ only tried).
    [[nodiscard]] bool forgettable();
    [[nodiscard]] bool gone() const noexcept { return gone_.load(); }
    // Server side, the application is done with this client (NodeFactory::
    // forget_runtime_peer): goodbye and close, as at shutdown; then gone and
    // forgettable whatever its inbox holds.
    void forget_client();
    // Client side: the connection fd, whose handshake as a client (Transport::lookup)
    // ended with welcome w (w.to: the id the server gave this process), becomes this
    // node's own, as if this node had opened it. The node is not in the transport yet.
    void adopt_connection(int fd, const Welcome& w);
    // Whether the tie-break refuses a connection from the peer now.
    [[nodiscard]] bool crosses() const;
    // Aborts the connection with RST (fault injection).
    void reset_connections();
    using Sender::wait_acknowledged;
    // Factory shutdown: a last acknowledgement in a goodbye, then close. The node
    // refuses sends afterwards.
    void close();

private:
    bool hold(Clock::time_point now); // out_mutex_ (sender.cpp)
    bool fill_taken(bool lend);
    // Receiving thread (fill_taken, drained): its last fill_taken read the socket
    // drained and left nothing but what it parsed; tells_ before that read.
    bool read_drained_ = false;
    std::uint64_t drained_tells_ = 0;
    template <class R, class Now, class Ready>
    R receive_within(std::chrono::nanoseconds timeout, Now&& receive_now, Ready&& ready);
    template <class B>
    void send_impl(B& buffer);
    // Numbers and queues one message (push() puts it in the window, under
    // out_mutex_) and writes or batches it.
    template <class Push>
    void enqueue(std::size_t size, Push&& push);
    // out_mutex_: a stream's sender reads its acknowledgements (sender.cpp).
    void read_own_acks(Clock::time_point now);
    std::atomic<std::uint64_t> own_ack_reads_{0}; // written under both locks
    // under out_mutex_
    std::optional<Clock::time_point> tick_sending(Clock::time_point now);
    void start_connect(Clock::time_point now);
    void attempt_failed(bool refused, const std::string& why, Clock::time_point now);
    void handle_challenge(const ip::Challenge& c);
    void read_handshake();
    // compact: the peer reads compact frames (its welcome or its resume frame said so).
    bool resume_window(std::uint64_t incarnation, std::uint64_t next_expected, bool compact);
    void declare_lost_locked(std::uint64_t incarnation, const std::string& reason, bool may_live = false);
    void window_mismatch(std::uint64_t incarnation, std::uint64_t next_expected);
    bool check_answers(Clock::time_point now);
    [[nodiscard]] bool answer_check_needed(Clock::time_point now);
    // under both locks (in_mutex_ first)
    void handle_welcome(const Welcome& w);
    void broken(const std::string& why);
    void close_fd();
    void install(int fd);
    void attach_in(std::uint64_t incarnation);
    void apply(const Control& c);
    void read_background();
    // under in_mutex_
    void send_ack();
    void send_ack_locked();
    void after_read(std::unique_lock<std::mutex>& in_lock, const Control& c, bool background = false);
};

} // namespace msgpass::tcp
