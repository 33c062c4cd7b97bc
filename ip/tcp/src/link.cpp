// The link of one peer (link.hpp): Link's own methods (the epoll mask of the
// connection, a failed write, the tie-break's test, the Hello, the loss raised from
// the latch) and TcpNode's that drive the connection through its life, needing both
// sides (node.hpp): opening it (the first of the two nodes to send opens it; the
// background thread connects and runs the connector's side of the handshake,
// reconnect.hpp says when), the end of a connection and what follows (a new one, or
// the loss of the peer), and the background thread's timers and events. After a
// handshake the window (window.hpp) resends from the peer's next expected message.
#include "node.hpp"
#include <msgpass/log.hpp>

#include <msgpass/ip/socket.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

Link::Link(std::shared_ptr<Shared> shared, const config::NodeConfig& peer)
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name), self_as_seen_(shared_->parameters.self),
      reconnect_(shared_->parameters.backoff_min, shared_->parameters.backoff_max, shared_->parameters.peer_timeout) {
    address_.text = ip::host_port(peer.host, peer.port);
    if (peer.port == 0) return; // receive only: the peer cannot be reached
    address_ = ip::resolve(peer.host, peer.port, SOCK_STREAM, false,
                           peer.where.str() + ": nodes." + std::to_string(peer.id) + ".host");
}

Link::~Link() {
    if (fd_ >= 0) ::close(fd_);
    if (bell_fd_ >= 0) ::close(bell_fd_);
    if (abandoned_fd_ >= 0) ::close(abandoned_fd_);
}

// in_mutex_ (fd_ does not change under it), then bell_mutex_.
void Link::want_bell() {
    if (shared_->bell.load() == nullptr) return;
    std::lock_guard in_lock(in_mutex_);
    std::lock_guard lock(bell_mutex_);
    if (bell_wanted_) return;
    bell_wanted_ = true;
    if (fd_ >= 0) open_bell_locked();
}

// bell_mutex_.
void Link::open_bell_locked() {
    if (bell_fd_ >= 0 || fd_ < 0) return;
    bell_fd_ = ::dup(fd_);
    bell_muted_ = false;
    if (bell_fd_ >= 0) shared_->epoll.add(bell_fd_, EPOLLIN | EPOLLET | EPOLLRDHUP, event_data(Tag::in, id_, 0));
}

void Link::close_bell() {
    std::lock_guard lock(bell_mutex_);
    if (bell_fd_ >= 0) {
        // Out of the set first: the set holds it as long as fd_'s file is open.
        shared_->epoll.remove(bell_fd_);
        ::close(bell_fd_);
    }
    bell_fd_ = -1;
    bell_muted_ = false;
}

// Background thread, after a ring that found nobody asleep: the bell's input events
// go off until a sleeper turns them on again (the end of the connection still rings).
void Link::mute_bell() {
    std::lock_guard lock(bell_mutex_);
    if (bell_fd_ < 0 || bell_muted_) return;
    if (!shared_->epoll.modify(bell_fd_, EPOLLET | EPOLLRDHUP, event_data(Tag::in, id_, 0))) return;
    bell_muted_ = true;
    shared_->bells_muted.store(true); // seq_cst: before the caller looks at the sleepers again
}

// A thread about to sleep on the doorbell (or the background thread that muted the
// bell and then found one asleep). Input already there is an event at once.
void Link::unmute_bell() {
    std::lock_guard lock(bell_mutex_);
    if (bell_fd_ < 0 || !bell_muted_) return;
    if (shared_->epoll.modify(bell_fd_, EPOLLIN | EPOLLET | EPOLLRDHUP, event_data(Tag::in, id_, 0)))
        bell_muted_ = false;
}

void Link::tell_receivers() {
    tells_.fetch_add(1, std::memory_order_acq_rel);
    {
        std::lock_guard lock(marks_mutex_);
        for (const auto& [marks, slot] : marks_)
            marks->set(slot);
    }
    shared_->wake_receivers();
}

// Both locks. Closes the socket (it leaves the epoll set) and forgets what was
// read or written of it: a partial frame is sent again whole on the next one.
void TcpNode::close_fd() {
    close_bell();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    framed_ = false;
    epoll_mask_ = 0;
    armed_write_ = false;
    write_failed_ = false;
    background_read_ = false;
    batch_timed_ = false;
    hs_len_ = 0;
    ctl_len_ = ctl_off_ = 0;
    unanswered_since_ = {};
    peer_ack_pending_.store(false);
    peer_ack_.store(0);
    ++generation_;
    reset_in();
    window_.rewind();
}

// Both locks. A socket, connected or accepted, becomes the node's connection.
void TcpNode::install(int fd) {
    close_fd();
    tune_socket(fd, shared_->parameters.peer_timeout);
    fd_ = fd;
    epoll_mask_ = EPOLLIN | EPOLLRDHUP;
    background_read_ = true;
    if (!shared_->epoll.add(fd, epoll_mask_, event_data(Tag::conn, id_, generation_))) epoll_mask_ = 0;
    if (shared_->bell.load() != nullptr) { // technology: auto: arrivals ring the doorbell (want_bell)
        std::lock_guard bell_lock(bell_mutex_);
        if (bell_wanted_) open_bell_locked();
    }
}

// out_mutex_. The events the background thread watches: input while it reads (a
// handshake, or acknowledgements the application does not read), room to write
// while the socket is full; a close always.
void Link::update_epoll() {
    if (fd_ < 0) return;
    std::uint32_t mask = EPOLLRDHUP;
    if (background_read_) mask |= EPOLLIN;
    if (armed_write_ || state_ == State::connecting) mask |= EPOLLOUT;
    if (mask == epoll_mask_) return;
    if (shared_->epoll.modify(fd_, mask, event_data(Tag::conn, id_, generation_))) epoll_mask_ = mask;
}

// out_mutex_. A write failed: the socket is shut down (a reader sees its end) and
// the background thread ends the connection, holding both locks.
void Link::fail_write(const std::string& why) {
    if (write_failed_) return;
    write_failed_ = true;
    write_failure_ = why;
    ::shutdown(fd_, SHUT_RDWR);
    shared_->wake_io();
}

// Both locks. The connection ended (closed by the peer, reset, a protocol error, no
// answer): after the peer's goodbye it is forgotten, or lost when it left messages
// outstanding; otherwise either side opens a new one (the tie-break settles a
// crossing), this one at once when it has messages to resend, else to ask whether
// the peer lives (a refused connection says it does not).
void TcpNode::broken(const std::string& why) {
    const bool had = fd_ >= 0;
    close_fd();
    if (closed_) {
        state_ = State::idle;
        return;
    }
    const auto now = Clock::now();
    if (peer_said_goodbye_ || in_goodbye_) {
        peer_said_goodbye_ = false;
        if (window_.empty()) { // the peer ended cleanly with everything taken
            state_ = State::idle;
            peer_incarnation_ = 0;
            known_incarnation_.store(0);
            reconnect_.forget();
            if (client_) { // a client that left: its id is not used again
                gone_.store(true);
                shared_->client_gone.store(true);
            }
            out_changed_.notify_all();
            return;
        }
        declare_lost_locked(peer_incarnation_, "it closed with messages outstanding (" + why + ")");
        state_ = State::idle;
        return;
    }
    if (!had && state_ != State::established && state_ != State::resuming) return;
    if (window_.empty()) {
        reconnect_.probe(now);
    } else {
        reconnect_.broke(now);
    }
    state_ = State::waiting;
    out_changed_.notify_all();
    shared_->wake_io();
}

void TcpNode::start_connect(Clock::time_point now) {
    const int fd = ip::open_socket(address_.family(), SOCK_STREAM);
    if (fd < 0) {
        attempt_failed(false, "socket: " + ip::errno_text(errno), now);
        return;
    }
    state_ = State::connecting;
    install(fd);
    opened_here_ = true;
    background_read_ = false;
    update_epoll();
    reconnect_.started(now);
    if (::connect(fd, address_.get(), address_.length) != 0 && errno != EINPROGRESS) {
        const int e = errno;
        close_fd();
        attempt_failed(e == ECONNREFUSED, "connect to " + address_.text + ": " + ip::errno_text(e), now);
    }
}

// A connection attempt failed. A refused connection after the peer was known means
// its process is gone (its listening socket closed): the peer is lost at once.
// Otherwise keep trying with backoff, until peer_timeout after the break.
void TcpNode::attempt_failed(bool refused, const std::string& why, Clock::time_point now) {
    const std::uint64_t known = peer_incarnation_ != 0 ? peer_incarnation_ : known_incarnation_.load();
    switch (reconnect_.failed(refused, known != 0, now)) {
    case Reconnect::Outcome::retry:
        state_ = State::waiting;
        return;
    case Reconnect::Outcome::lost_refused:
        declare_lost_locked(known, "its port refuses connections (" + why + ")");
        break;
    case Reconnect::Outcome::lost_silent:
        declare_lost_locked(known, "no connection for peer_timeout (" + why + ")", true);
        break;
    }
    state_ = window_.empty() ? State::idle : State::waiting;
}

Clock::time_point TcpNode::tick(Clock::time_point now) {
    const auto far = now + std::chrono::seconds(1);
    // Called for every node at each wake-up of the background thread, which never
    // waits for the application: a node whose application is receiving (it holds
    // in_mutex_) gets its sending side's timers only; one whose sender holds
    // out_mutex_ is looked at again ack_delay later.
    std::unique_lock in_lock(in_mutex_, std::try_to_lock);
    if (!in_lock.owns_lock()) {
        if (const auto next = tick_sending(now)) return *next;
        in_lock.lock(); // the check of the peer's answers is due: it may end the connection
    }
    std::unique_lock lock(out_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return now + ack_delay;
    if (closed_) return far;
    if (write_failed_) {
        const std::string why = write_failure_;
        broken(why);
    }
    auto next = far;
    if (peer_ack_pending_.load(std::memory_order_relaxed)) {
        if (sending(now)) {
            next = now + ack_delay; // the sender applies it; if it stops, this thread does
        } else {
            apply_pending_ack();
        }
    }
    if (ack_wanted_.exchange(false)) send_ack_locked();
    if (abandoned_fd_ >= 0 && abandoned_hello_) {
        // Given up while it connected: its Hello still goes, so that the peer refuses
        // it as crossed instead of counting a connection that never spoke.
        pollfd p{abandoned_fd_, POLLOUT, 0};
        int error = 0;
        socklen_t len = sizeof error;
        if (::poll(&p, 1, 0) == 1 && ::getsockopt(abandoned_fd_, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
            error == 0 && (p.revents & POLLOUT) != 0) {
            (void)send_hello(abandoned_fd_);
            abandoned_hello_ = false;
        } else if ((p.revents & (POLLERR | POLLHUP)) != 0) {
            abandoned_hello_ = false;
        } else {
            next = std::min(next, now + std::chrono::milliseconds(1));
        }
    }
    if (abandoned_fd_ >= 0) {
        if (now - abandoned_at_ >= shared_->parameters.handshake_timeout) {
            ::close(abandoned_fd_);
            abandoned_fd_ = -1;
        } else {
            next = std::min(next, abandoned_at_ + shared_->parameters.handshake_timeout);
        }
    }
    switch (state_) {
    case State::established:
    case State::resuming: {
        if (now + tick_slack >= next_answer_check_) { // early by the slack: one wake-up checks many nodes
            next_answer_check_ = now + answer_check_period();
            if (answer_check_needed(now) && !check_answers(now)) return now; // broken: the next tick starts again
        }
        next = std::min(next, next_answer_check_);
        if (state_ == State::established && !window_.all_written() && !armed_write_) { // the tail of a batch
            if (now - batch_start_ < batch_window) {
                next = std::min(next, batch_start_ + batch_window);
            } else {
                last_write_ = now;
                write_pending();
            }
        }
        // Messages that arrived and stayed unacknowledged from one tick to a later one
        // at least ack_delay after (the application took them and read no more: it went
        // elsewhere): acknowledged here, so that their sender lets them go (comm's send
        // of the caller's memory completes then). No wake-up is added for it: an
        // established connection's ticks come at least every answer_check_period.
        if (const auto avail = ack_avail_.load(std::memory_order_relaxed);
            avail != ack_sent_.load(std::memory_order_relaxed)) {
            if (avail != ack_watch_) {
                ack_watch_ = avail;
                ack_watch_since_ = now;
            } else if (now - ack_watch_since_ >= ack_delay) {
                const std::uint64_t alone = standalone_acks_.load(std::memory_order_relaxed);
                send_ack_locked();
                if (standalone_acks_.load(std::memory_order_relaxed) != alone)
                    idle_acks_.fetch_add(1, std::memory_order_relaxed);
            }
        }
        batch_timed_ = false; // the next batch wakes this thread again
        // Acknowledgements come on the connection, behind the peer's data: while
        // messages wait for one and the application has not read for ack_delay,
        // this thread reads (up to background_inbox_limit messages in the inbox).
        // (Looking again at a reading application after a pause doubling to 32 ms
        // instead of every ack_delay made the unpinned 64 B ping-pong's p50 14 us
        // instead of 8 more often, and did not change the pinned p999: docs/tcp.md.)
        bool read = state_ == State::resuming;
        if (!read && !window_.empty() && inbox_count_ < background_inbox_limit) {
            const auto last = Clock::time_point(std::chrono::nanoseconds(last_app_read_.load()));
            if (now - last >= ack_delay) {
                read = true;
            } else {
                next = std::min(next, last + ack_delay);
            }
        }
        background_read_ = read;
        update_epoll();
        break;
    }
    case State::idle:
        break;
    case State::waiting:
        if (client_) { // never connected to: it comes back within peer_timeout, or is lost
            if (!reconnect_.broken_since()) reconnect_.probe(now);
            const auto since = *reconnect_.broken_since();
            if (now - since >= shared_->parameters.peer_timeout) {
                declare_lost_locked(peer_incarnation_ != 0 ? peer_incarnation_ : known_incarnation_.load(),
                                    "the client did not connect again within peer_timeout");
                state_ = State::idle;
            } else {
                next = std::min(next, since + shared_->parameters.peer_timeout);
            }
            break;
        }
        if (address_.empty()) {
            state_ = State::idle;
            break;
        }
        if (reconnect_.due(now)) {
            start_connect(now);
            next = state_ == State::waiting ? reconnect_.next_attempt() : reconnect_.attempt_deadline();
        } else {
            next = reconnect_.next_attempt();
        }
        break;
    case State::connecting:
    case State::handshaking:
        if (now >= reconnect_.attempt_deadline()) {
            close_fd();
            attempt_failed(false, "no answer from " + address_.text + " in time", now);
            next = reconnect_.next_attempt();
        } else {
            next = reconnect_.attempt_deadline();
        }
        break;
    }
    window_.take_acknowledged(acknowledged_scratch_);
    lock.unlock();
    in_lock.unlock();
    acknowledged_scratch_.clear();
    return next;
}

// The timers of tick that need only out_mutex_ (tried), while the application holds
// in_mutex_: it reads, so this thread need not; the tail of a batch goes when due.
// Nothing when the check of the peer's answers is due (tick then waits for in_mutex_).
std::optional<Clock::time_point> TcpNode::tick_sending(Clock::time_point now) {
    std::unique_lock lock(out_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || closed_ || state_ != State::established) return now + ack_delay;
    if (now >= next_answer_check_) return std::nullopt;
    auto next = std::min(now + ack_delay, next_answer_check_);
    if (peer_ack_pending_.load(std::memory_order_relaxed)) {
        if (sending(now)) {
            next = std::min(next, now + ack_delay);
        } else {
            apply_pending_ack();
        }
    }
    if (!window_.all_written() && !armed_write_ && !write_failed_) { // the tail of a batch
        if (now - batch_start_ < batch_window) {
            next = std::min(next, batch_start_ + batch_window);
        } else {
            last_write_ = now;
            write_pending();
        }
    }
    batch_timed_ = false;
    window_.take_acknowledged(acknowledged_scratch_);
    lock.unlock();
    acknowledged_scratch_.clear();
    return next;
}

std::chrono::nanoseconds Link::answer_check_period() const {
    const std::chrono::nanoseconds period = shared_->parameters.peer_timeout / 8;
    return std::clamp<std::chrono::nanoseconds>(period, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
}

// The kernel can wait for an answer of the peer only for what this side wrote (data
// in flight, or waiting for a closed window: window probes) or, on a connection idle
// for the keepalive time (peer_timeout / 3, at least 1 s; tune_socket), for its
// keepalive probes. So the check asks the kernel (a getsockopt) only when this side
// wrote since the last one, has data not written, or the last one saw a question
// open, and otherwise every min(peer_timeout / 4, 1 s) at least: a receiver of many
// peers that each send to it (fan-in) asked it for each of them every 100 ms, about
// one system call per message at 256 peers of 10 messages a second.
bool TcpNode::answer_check_needed(Clock::time_point now) {
    const auto idle_period = std::clamp<std::chrono::nanoseconds>(shared_->parameters.peer_timeout / 4,
                                                                  answer_check_period(), std::chrono::seconds(1));
    if (writes_ == writes_checked_ && unanswered_since_ == Clock::time_point{} && window_.all_written() &&
        !armed_write_ && now - answers_checked_at_ + tick_slack < idle_period)
        return false;
    writes_checked_ = writes_;
    answers_checked_at_ = now;
    return true;
}

// Whether the peer's host still answers on the outgoing connection, from the kernel
// (TCP_INFO; the socket has no TCP_USER_TIMEOUT, tune_socket). The kernel waits for
// an answer while data is in flight (tcpi_unacked), or while window probes (toward a
// closed window) or keepalives go unanswered (tcpi_probes); tcpi_last_ack_recv says
// when the peer's kernel last answered anything. A live receiver answers data at
// once, but not every probe: it answers a segment outside its window at most every
// 500 ms (net.ipv4.tcp_invalid_ratelimit), so one probe sent sooner stays unanswered
// until the next, twice as far apart (seen: 0.8 s). A live host never leaves two
// probes in a row unanswered (they are 200 ms or more apart and back off by
// doubling), nor one for rate_limited_silence: that probe came less than 500 ms after
// the last answer and the next comes at most 1 s after it. A connection that waited
// that way for peer_timeout without any answer
// is broken (a host that vanished, a link that stays down: the reconnection decides
// whether the peer is lost). One whose receiver keeps its window closed but answers
// the probes lives (a receiver that does not read): the sender keeps its messages,
// and its queue fills up to send_queue_limit. False when it broke the connection.
bool TcpNode::check_answers(Clock::time_point now) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return true;
    constexpr std::chrono::milliseconds rate_limited_silence{2000};
    const auto silence = std::chrono::milliseconds(info.tcpi_last_ack_recv);
    const bool asked =
        info.tcpi_unacked > 0 || info.tcpi_probes >= 2 || (info.tcpi_probes == 1 && silence >= rate_limited_silence);
    if (!asked) { // nothing asked that a live host leaves open
        unanswered_since_ = {};
        return true;
    }
    // Watched from the first check that saw a question, again after each answer.
    const auto answered = now - silence;
    if (unanswered_since_ == Clock::time_point{} || answered > unanswered_since_) {
        unanswered_since_ = now;
        return true;
    }
    if (now - unanswered_since_ < shared_->parameters.peer_timeout) return true;
    broken("no answer from " + address_.text + " for peer_timeout (" + std::to_string(info.tcpi_unacked) +
           " segments in flight, " + std::to_string(info.tcpi_probes) + " probes unanswered)");
    return false;
}

// Background thread: stops reading an established connection for acknowledgements,
// because the application reads it (tick starts again when it stops).
// False when the connection is not established (this thread reads a handshake or
// the peer's resume frame).
bool Link::leave_reading(std::uint32_t generation) {
    std::lock_guard lock(out_mutex_);
    if (fd_ < 0 || (generation_ & 0xffffffu) != generation) return true; // an event of a closed connection
    if (state_ != State::established) return false;
    background_read_ = false;
    update_epoll();
    return true;
}

void TcpNode::on_event(std::uint32_t generation, std::uint32_t events) {
    const bool input_only = (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) == 0;
    const bool data_only = events == EPOLLIN; // not the end of the connection (EPOLLRDHUP stays watched)
    std::unique_lock in_lock(in_mutex_, std::defer_lock);
    // Input while the application holds in_mutex_: it is receiving, and reads the
    // frames itself. Waiting for its lock here made it wait for this thread in turn,
    // once per message (a convoy; on a loaded CPU a reply late by a scheduler slice).
    if (!data_only) {
        in_lock.lock();
    } else if (!in_lock.try_lock()) {
        if (leave_reading(generation)) return;
        in_lock.lock(); // a connection in its handshake or resuming is this thread's to read
    }
    if (fd_ < 0 || (generation_ & 0xffffffu) != generation) return; // an event of a closed connection
    if (framed_ && input_only) {
        const auto read_at = Clock::time_point(std::chrono::nanoseconds(last_app_read_.load()));
        if (data_only && Clock::now() - read_at < ack_delay) {
            in_lock.unlock();
            if (leave_reading(generation)) return;
            in_lock.lock();
            if (fd_ < 0 || (generation_ & 0xffffffu) != generation) return;
        }
        // Input on an established connection (acknowledgements the application does
        // not read): read without the sending side's lock, which a sender in a
        // stream holds most of the time; it applies the acknowledgement at its next
        // send when this thread cannot (after_read).
        const Control c = read_in_side();
        after_read(in_lock, c, true);
        if (c.delivered || c.closed || c.bad_ack) tell_receivers();
        return;
    }
    std::unique_lock lock(out_mutex_);
    if (state_ == State::connecting) {
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
            close_fd();
            attempt_failed(error == ECONNREFUSED, "connect to " + address_.text + ": " + ip::errno_text(error),
                           Clock::now());
            return;
        }
        if ((events & EPOLLOUT) == 0) return;
        if (!send_hello(fd_)) {
            close_fd();
            attempt_failed(false, "handshake write failed", Clock::now());
            return;
        }
        state_ = State::handshaking;
        background_read_ = true;
        update_epoll();
        return;
    }
    if (state_ == State::handshaking) {
        if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) read_handshake();
    } else if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        lock.unlock();
        read_background();
        lock.lock();
        if (fd_ < 0 || (generation_ & 0xffffffu) != generation) return;
    }
    if ((events & EPOLLOUT) != 0 && fd_ >= 0 && !write_failed_) {
        armed_write_ = false;
        write_pending();
    }
    update_epoll();
    window_.take_acknowledged(acknowledged_scratch_);
    lock.unlock();
    in_lock.unlock();
    acknowledged_scratch_.clear(); // freed after the locks: senders do not wait for free()
}

// out_mutex_. Writes this node's Hello on a connected socket. With a key, the Hello
// carries a fresh nonce (kind hello_auth) and is kept: the Challenge's MAC and this
// side's Proof cover it. A fresh socket takes its 160 bytes at once.
bool Link::send_hello(int fd) {
    ssize_t wrote = 0;
    std::size_t size = 0;
    if (shared_->parameters.auth_key) {
        auth_hello_ =
            ip::make_auth_hello(protocol, self_as_seen_, id_, shared_->incarnation, shared_->parameters.partition);
        size = sizeof auth_hello_;
        wrote = ::send(fd, &auth_hello_, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
        const Hello hello = make_hello(self_as_seen_, id_, shared_->incarnation, shared_->parameters.partition);
        size = sizeof hello;
        wrote = ::send(fd, &hello, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return wrote == static_cast<ssize_t>(size);
}

// Both locks. Reads the answer to this node's Hello: a Challenge (with a key), then
// the Welcome or a refusal. Exactly their sizes are read: what follows the Welcome
// is the peer's frames, read by the receiving side.
void TcpNode::read_handshake() {
    for (;;) {
        std::size_t want = sizeof(Welcome);
        if (hs_len_ >= sizeof(Welcome)) {
            Welcome w;
            std::memcpy(&w, hs_rx_.data(), sizeof w);
            if (w.kind == ip::kind_challenge && shared_->parameters.auth_key) want = sizeof(ip::Challenge);
        }
        if (hs_len_ < want) {
            const ssize_t got = ::recv(fd_, hs_rx_.data() + hs_len_, want - hs_len_, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                const std::string why =
                    got == 0 ? "connection closed by the peer" : "read failed: " + ip::errno_text(errno);
                close_fd();
                attempt_failed(false, why, Clock::now());
                return;
            }
            if (got < 0) return;
            hs_len_ += static_cast<std::size_t>(got);
            continue;
        }
        hs_len_ = 0;
        if (want == sizeof(ip::Challenge)) {
            ip::Challenge c;
            std::memcpy(&c, hs_rx_.data(), sizeof c);
            handle_challenge(c);
            if (fd_ < 0) return;
            continue;
        }
        Welcome w;
        std::memcpy(&w, hs_rx_.data(), sizeof w);
        handle_welcome(w);
        return;
    }
}

// The acceptor's proof that it holds the partition's key; answered with this side's
// Proof, after which the Welcome (or a bad_proof refusal) follows. An acceptor that
// cannot prove the key gets nothing that could be replayed elsewhere.
void TcpNode::handle_challenge(const ip::Challenge& c) {
    if (ip::check_answer(c.header, protocol, self_as_seen_, id_) != ip::Answer::unexpected ||
        !ip::challenge_proves_key(*shared_->parameters.auth_key, auth_hello_, c)) {
        shared_->count_refusal(Refusal::bad_proof);
        if (!refusal_logged_) {
            MSGPASS_LOG(tcp, warn,
                        "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": node " +
                            std::to_string(id_) + " (" + address_.text +
                            ") did not prove this partition's key (auth_key_file): another key, or not a node of this "
                            "partition");
            refusal_logged_ = true;
        }
        close_fd();
        reconnect_.refused_by_peer();
        attempt_failed(false, "no proof of the key", Clock::now());
        return;
    }
    const ip::Proof proof = ip::make_proof(*shared_->parameters.auth_key, auth_hello_, c);
    const ssize_t wrote = ::send(fd_, &proof, sizeof proof, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (wrote != static_cast<ssize_t>(sizeof proof)) { // nothing else was written on this socket
        close_fd();
        attempt_failed(false, "handshake write failed", Clock::now());
    }
}

// Both locks. The answer to this node's Hello. A welcome makes the connection the
// pair's: this side says first where it stands in the peer's messages (a resume
// frame), then resends its own from the peer's next_expected.
void TcpNode::handle_welcome(const Welcome& w) {
    switch (ip::check_answer(w, protocol, self_as_seen_, id_)) {
    case ip::Answer::welcome:
        break;
    case ip::Answer::foreign:
        close_fd();
        attempt_failed(false, "the answer from " + address_.text + " is not a msgpass welcome for this pair",
                       Clock::now());
        return;
    case ip::Answer::refusal:
        close_fd();
        if (ip::refusal_reason(w) == Refusal::crossed) { // the peer's own connection is the pair's
            attempt_failed(false, "crossed with the peer's connection", Clock::now());
            return;
        }
        if (!refusal_logged_) {
            MSGPASS_LOG(tcp, warn,
                        "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": node " +
                            std::to_string(id_) + " (" + address_.text +
                            ") refused the connection: " + std::string(describe(ip::refusal_reason(w))));
            refusal_logged_ = true;
        }
        reconnect_.refused_by_peer();
        attempt_failed(false, "refused", Clock::now());
        return;
    case ip::Answer::unexpected:
        close_fd();
        attempt_failed(false, "unexpected handshake answer", Clock::now());
        return;
    }
    framed_ = true;
    connected_at_ = Clock::now();
    attach_in(w.incarnation);
    tell_receivers(); // a receiver sleeping on its nodes' sockets sleeps on this one too
    FrameHeader resume = resume_frame(in_window_.expected());
    if (shared_->compact_frames) resume.flags |= compact_frames_bit;
    queue_control(resume);
    if (!resume_window(w.incarnation, w.next_expected, (w.reserved & compact_frames_bit) != 0)) return;
    refusal_logged_ = false;
}

void TcpNode::adopt_connection(int fd, const Welcome& w) {
    std::lock_guard in_lock(in_mutex_);
    std::lock_guard lock(out_mutex_);
    self_as_seen_ = w.to;
    state_ = State::handshaking;
    install(fd);
    opened_here_ = true;
    reconnect_.started(Clock::now());
    handle_welcome(w);
}

bool TcpNode::forgettable() {
    if (!gone_.load()) return false;
    if (forgotten_.load()) return true;
    std::unique_lock lock(in_mutex_, std::try_to_lock);
    return lock.owns_lock() && inbox_count_ == 0;
}

void TcpNode::forget_client() {
    close();
    forgotten_.store(true);
    gone_.store(true);
    shared_->client_gone.store(true);
}

void TcpNode::make_client(const std::string& from) {
    std::lock_guard lock(out_mutex_);
    client_ = true;
    address_.text = from;
}

// Both locks. The receiving side of a connection from the peer's incarnation: a
// restarted peer's old messages stay in the inbox before a marker of its loss; a
// new incarnation counts from 0, the same one goes on.
void TcpNode::attach_in(std::uint64_t incarnation) {
    const std::uint64_t old = in_window_.incarnation();
    // A peer that said goodbye and comes back started cleanly: nothing was lost.
    if (ip::restarted(old, incarnation) && !in_goodbye_) {
        declare_lost_locked(old, "it restarted");
        inbox_.mark_loss();
    }
    in_window_.attach(incarnation);
    in_goodbye_ = false;
    known_incarnation_.store(incarnation);
    ack_avail_.store(in_window_.expected());
    ack_sent_.store(in_window_.expected());
    loss_.revive(incarnation); // if it was given up for silence, it lives: its later loss is reported again
}

// out_mutex_. The peer's incarnation counts next_expected of our messages (its
// welcome, or its resume frame on a connection it opened): the window resends from
// there, after a skip frame when we dropped messages it never got. False when the
// connection ended.
bool TcpNode::resume_window(std::uint64_t incarnation, std::uint64_t next_expected, bool compact) {
    if (ip::restarted(peer_incarnation_, incarnation)) declare_lost_locked(peer_incarnation_, "it restarted");
    // A new incarnation counts our messages from 0; the one our numbers were for (alive
    // after we gave it up, or after a clean goodbye and a loss) goes on counting them.
    if (numbered_for_ != 0 && incarnation != numbered_for_) window_.renumber();
    const auto skipped = window_.resume(next_expected);
    if (!skipped) {
        window_mismatch(incarnation, next_expected);
        return false;
    }
    window_.set_compact(compact); // nothing is written on this connection yet
    acked_base_.store(window_.acknowledged_to());
    // We gave this peer up while it lived and dropped messages it never got: the
    // skip frame, before any data, makes it report them lost where they belong in
    // its stream and count on from our first kept message.
    if (*skipped > 0) queue_control(skip_frame(window_.first_unacknowledged()));
    numbered_for_ = incarnation;
    loss_.revive(incarnation);
    trimmed();
    peer_incarnation_ = incarnation;
    known_incarnation_.store(incarnation);
    state_ = State::established;
    reconnect_.connected();
    next_answer_check_ = Clock::now() + answer_check_period();
    write_pending();
    shared_->wake_io(); // the background thread decides who reads
    out_changed_.notify_all();
    return true;
}

// The peer claims messages we never sent, or lacks some it had acknowledged: the
// numbering of the pair disagrees, and trimming the window to fit would drop messages
// it never got without a word. Loud instead: counted as a protocol error, logged, the
// messages it did not acknowledge reported lost (even when its loss was reported
// before), the numbering started again, and the peer asked again only after the
// longest backoff.
void TcpNode::window_mismatch(std::uint64_t incarnation, std::uint64_t next_expected) {
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text +
                             ") lost: its welcome expects message " + std::to_string(next_expected) +
                             " but this node acknowledged up to " + std::to_string(window_.acknowledged_to()) +
                             " and sent up to " + std::to_string(window_.next_seq()) +
                             " (the numbering of the pair disagrees)";
    shared_->count_refusal(Refusal::protocol_error);
    const std::uint64_t unacknowledged = window_.lose();
    window_.renumber();
    acked_base_.store(0);
    numbered_for_ = 0;
    peer_incarnation_ = 0;
    queue_depth_.store(0, std::memory_order_relaxed);
    reconnect_.forget();
    loss_.raise(incarnation, text + "; " + std::to_string(unacknowledged) + " messages sent to it were dropped",
                unacknowledged);
    MSGPASS_LOG(tcp, warn, "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": " + text);
    ::shutdown(fd_, SHUT_RDWR);
    write_failed_ = true; // the background thread closes it
    write_failure_ = "the numbering of the pair disagrees";
    reconnect_.refused_by_peer();
    state_ = State::idle;
    out_changed_.notify_all();
    tell_receivers();
    shared_->wake_io();
}

void Link::throw_if_lost() {
    if (!loss_.pending()) return;
    if (auto loss = loss_.take()) {
        stats_.error();
        throw loss->error(id_);
    }
}

// out_mutex_. Both nodes connected at once: the connection of the lower node id
// stays. The higher one drops its own attempt (it never carried a frame) and
// takes the lower one's.
bool Link::crosses_locked(Clock::time_point now) const {
    const bool ours_in_flight = state_ == State::connecting || state_ == State::handshaking;
    return shared_->parameters.self < id_ &&
           (ours_in_flight || (opened_here_ && fd_ >= 0 && now - connected_at_ < crossing_window));
}

// Background thread: whether the application sent within ack_delay, as far as this
// thread saw (it then applies the acknowledgements itself, at its next send).
bool Link::sending(Clock::time_point now) {
    const std::uint64_t sends = sends_.load(std::memory_order_relaxed);
    if (sends != sends_seen_) {
        sends_seen_ = sends;
        sends_seen_at_ = now;
        return true;
    }
    return now - sends_seen_at_ < ack_delay;
}

} // namespace msgpass::tcp
