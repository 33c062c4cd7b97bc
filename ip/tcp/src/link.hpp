// Link: what one peer's Sender and Receiver share (the room "link" of
// shared/design/ARCHITECTURE.md): who the peer is, the pair's one two-way connection
// (its socket, state and generation, the attempt this node opened and the handshake
// answer it reads), the two locks of the sides, the counters by which the two sides
// tell each other about acknowledgements without taking each other's lock, the
// statistics and the peer's loss. The sides are Sender (sender.hpp) and Receiver
// (receiver.hpp); TcpNode (node.hpp) is both, and drives the connection through its
// life (link.cpp). Transport (transport.hpp) says which thread takes which lock.
#pragma once

#include "transport.hpp"

namespace msgpass::tcp {

class Link {
public:
    Link(std::shared_ptr<Shared> shared, const config::NodeConfig& peer);
    virtual ~Link();
    Link(const Link&) = delete;
    Link& operator=(const Link&) = delete;

    // technology: auto's doorbell (Shared::bell). Input on the connection rings it
    // only once a group that sleeps on it has this node (want_bell; before issue 25's
    // eleventh session every connection of an auto factory rang it, so that every
    // arrival woke the background thread, also where nobody ever slept on the
    // doorbell: a farm worker reading its one tcp node paid two wake-ups per
    // message). After a ring that found nobody asleep the background thread mutes the
    // connection's bell (mute_bell: no input events), and a thread that is about to
    // sleep on the doorbell unmutes every muted one first (Transport::unmute_bells),
    // so that a busy receiver's input does not wake the background thread once per
    // arrival. Any thread; bell_mutex_ is taken after the node's other locks.
    void want_bell();
    void mute_bell();
    void unmute_bell();

protected:
    // connecting, handshaking: this node's own attempt (the connector's side);
    // resuming: a connection the peer opened, its data waits for the peer's resume frame.
    enum class State { idle, waiting, connecting, handshaking, resuming, established };

    void throw_if_lost();
    // out_mutex_
    void update_epoll();
    void fail_write(const std::string& why);
    bool crosses_locked(Clock::time_point now) const;
    bool send_hello(int fd);
    bool leave_reading(std::uint32_t generation);
    [[nodiscard]] std::chrono::nanoseconds answer_check_period() const;
    // Background thread: whether the application sent within ack_delay.
    bool sending(Clock::time_point now);
    // Something changed for this node's receivers (a connection installed, the peer
    // lost, a message the background thread read, a protocol violation): the groups it
    // is a member of find its ready mark set (TcpGroup looks at it at its next
    // receive), and the receivers asleep are woken.
    void tell_receivers();

    std::shared_ptr<Shared> shared_;
    const NodeId id_;
    const std::string name_;
    ip::Address address_; // empty: the peer has no port (receive only)
    // This node's id in the pair's handshakes: the factory's, or, toward a server
    // this client looked up, the run-time id that server gave it (out_mutex_).
    std::uint32_t self_as_seen_ = 0;
    // The peer is a client in no nodes file that reached this node (run-time id): it
    // is never connected to; when its connection ends it has peer_timeout to come back
    // before it is lost, and once lost or gone cleanly it is gone (forgotten).
    bool client_ = false;
    std::atomic<bool> gone_{false};
    // The application forgot the client (forget_runtime_peer): what its inbox holds
    // is never read, and does not keep it.
    std::atomic<bool> forgotten_{false};
    StatsCounters stats_;
    std::atomic<std::size_t> queue_depth_{0};

    // --- the connection (both directions). fd_ changes under both locks; readers
    // use it under in_mutex_, writers under out_mutex_.
    int fd_ = -1;
    bool framed_ = false;              // past the handshake: frames come (changes under both locks)
    bool opened_here_ = false;         // this node opened the connection (the tie-break)
    Clock::time_point connected_at_{}; // when its handshake ended
    // This node's own attempt, dropped for the peer's crossing connection: kept open
    // (outside the epoll set) until the peer refused it, so that the peer reads a
    // whole Hello and not a connection cut short; closed handshake_timeout later.
    int abandoned_fd_ = -1;
    bool abandoned_hello_ = false; // given up before it connected: its Hello goes when it does
    Clock::time_point abandoned_at_{};

    // The receiving side's lock (Receiver's state) and the sending side's (Sender's
    // state and the connection's below); a thread that takes both takes in_mutex_ first.
    std::mutex in_mutex_;
    mutable std::mutex out_mutex_;
    std::condition_variable out_changed_;

    // --- the connection's state, under out_mutex_ ---
    State state_ = State::idle;
    std::uint32_t generation_ = 0;
    std::uint32_t epoll_mask_ = 0;       // the events the background thread watches
    bool armed_write_ = false;           // the socket was full
    bool write_failed_ = false;          // a write failed: the background thread ends the connection
    std::string write_failure_;          // why
    bool background_read_ = false;       // the background thread reads (for acknowledgements or a handshake)
    std::uint64_t peer_incarnation_ = 0; // of the connection's handshake; 0 = none
    bool peer_said_goodbye_ = false;
    bool closed_ = false;
    bool refusal_logged_ = false;
    Reconnect reconnect_;                                  // when to try again, when to give the peer up
    Clock::time_point next_answer_check_{};                // of the established connection (check_answers)
    Clock::time_point unanswered_since_{};                 // the kernel has waited for the peer since; {} when not
    std::uint64_t writes_ = 0;                             // writes that put bytes on the connection
    std::uint64_t writes_checked_ = 0;                     // writes_ at the last check of the peer's answers
    Clock::time_point answers_checked_at_{};               // when that check ran
    ip::AuthHello auth_hello_{};                           // the Hello of this attempt, with a key (its MACs cover it)
    std::array<std::byte, sizeof(ip::Challenge)> hs_rx_{}; // the answer to our Hello
    std::size_t hs_len_ = 0;

    // --- between the two sides, without each other's lock ---
    // The reader publishes how many messages arrived (ack_avail_), every data frame
    // written carries it, and ack_sent_ is the last value written. peer_ack_ is the
    // newest acknowledgement the reader saw that is not applied to the send window
    // yet (it only tries out_mutex_); acked_base_ mirrors the window's
    // acknowledged_to() for the reader, which widens the 32 bits a data frame
    // carries from it.
    std::atomic<std::uint64_t> ack_avail_{0};
    std::atomic<std::uint64_t> ack_sent_{0};
    std::atomic<std::uint64_t> peer_ack_{0};
    std::atomic<bool> peer_ack_pending_{false};
    std::atomic<bool> ack_wanted_{false}; // a standalone acknowledgement the receiver could not write
    std::atomic<std::uint64_t> acked_base_{0};
    std::atomic<std::uint64_t> standalone_acks_{0};
    std::atomic<std::uint64_t> idle_acks_{0};         // of those, the background thread's for messages left unread
    std::atomic<std::uint64_t> sends_{0};             // messages handed to send (written under out_mutex_)
    std::uint64_t sends_seen_ = 0;                    // background thread: sends_ when it last looked (sending())
    std::uint64_t ack_watch_ = 0;                     // background thread: ack_avail_ left unacknowledged at a tick
    Clock::time_point ack_watch_since_{};             // ... since when (tick)
    Clock::time_point sends_seen_at_{};               // ... and when it last saw it change
    std::atomic<std::int64_t> last_app_read_{0};      // steady-clock ns of the receiving thread's last read
    std::atomic<std::uint64_t> takes_{0};             // messages the application took (written under in_mutex_)
    std::atomic<std::uint64_t> known_incarnation_{0}; // the peer's incarnation seen on the connection

    // --- loss of the peer ---
    kit::LossLatch loss_;

    // --- technology: auto's doorbell, under bell_mutex_ (want_bell above) ---
    // Both locks. Opens the bell of a new connection (install), closes it (close_fd).
    void open_bell_locked();
    void close_bell();
    std::mutex bell_mutex_;
    int bell_fd_ = -1;         // a duplicate of fd_ in the background thread's set, edge-triggered
    bool bell_wanted_ = false; // a group that sleeps on the doorbell has this node
    bool bell_muted_ = false;  // its input events are off: nobody slept on the doorbell at its last ring

    // --- the groups this node is a member of (TcpGroup): their marks and its slot in
    // each, under marks_mutex_ (taken last: any thread, holding any other lock) ---
    std::mutex marks_mutex_;
    std::vector<std::pair<std::shared_ptr<kit::ReadyMarks>, std::size_t>> marks_;
    // How many times the node told its receivers of something (tell_receivers): a read
    // that drained the socket says nothing is left only while this stays as it was
    // before the read (TcpNode::drained).
    std::atomic<std::uint64_t> tells_{0};
};

} // namespace msgpass::tcp
