// TcpNode: one peer of the tcp technology (see engine.hpp for the threads and
// docs/tcp.md for the protocol). The outgoing side keeps every message until the
// peer acknowledges it, so that a broken connection is repaired by resending from
// the peer's next expected sequence number; the incoming side parses frames into an
// inbox and acknowledges what it holds.
#include "engine.hpp"

#include <msgpass/ip/socket.hpp>

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

namespace msgpass::tcp {

namespace {

constexpr std::size_t rx_capacity = 256 * 1024;

std::uint64_t event_data(Tag tag, NodeId id, std::uint32_t generation) {
    return (static_cast<std::uint64_t>(tag) << 56) | (static_cast<std::uint64_t>(id) << 24) | (generation & 0xffffffu);
}

// Keepalive and user timeout sized to the peer timeout: a connection to a host that
// vanished (no FIN, no RST) fails within about one peer timeout.
void tune_socket(int fd, std::chrono::nanoseconds peer_timeout) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(peer_timeout).count();
    int idle = static_cast<int>(std::max<long long>(1, ms / 3000));
    int interval = 1;
    int count = 3;
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    unsigned user_timeout = static_cast<unsigned>(std::max<long long>(ms, 100));
    ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

} // namespace

TcpNode::TcpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer)
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name),
      reconnect_(shared_->parameters.backoff_min, shared_->parameters.backoff_max, shared_->parameters.peer_timeout) {
    address_.text = ip::host_port(peer.host, peer.port);
    if (peer.port == 0) return; // receive only: the peer cannot be reached
    address_ = ip::resolve(peer.host, peer.port, SOCK_STREAM, false,
                           peer.where.str() + ": nodes." + std::to_string(peer.id) + ".host");
}

TcpNode::~TcpNode() {
    if (out_fd_ >= 0) ::close(out_fd_);
    if (in_fd_ >= 0) ::close(in_fd_);
}

NodeStats TcpNode::stats() const noexcept {
    return stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
}

// ---------------------------------------------------------------- loss

void TcpNode::throw_if_lost() {
    if (!loss_.pending()) return;
    if (auto loss = loss_.take()) {
        stats_.error();
        throw PeerLost(id_, loss->reason, loss->unacknowledged);
    }
}

// The peer incarnation died: everything it did not acknowledge is counted and
// dropped, the pair starts again from sequence 0 with its next incarnation.
void TcpNode::declare_lost_locked(std::uint64_t incarnation, const std::string& reason) {
    if (loss_.raised_for(incarnation)) return; // already reported
    const std::uint64_t unacknowledged = window_.lose();
    queue_depth_.store(0, std::memory_order_relaxed);
    peer_incarnation_ = 0;
    reconnect_.forget();
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") lost: " + reason +
                             "; " + std::to_string(unacknowledged) + " messages sent to it were not acknowledged";
    loss_.raise(incarnation, text, unacknowledged);
    std::fprintf(stderr, "msgpass tcp node %u: %s\n", shared_->parameters.self, text.c_str());
    out_changed_.notify_all();
    shared_->wake_receivers();
}

// ---------------------------------------------------------------- send

void TcpNode::send(BufferPtr&& buffer) {
    if (!buffer) throw UsageError("Node::send: null buffer");
    send_impl(buffer);
}

void TcpNode::send_shared(const SharedBuffer& buffer) {
    if (!buffer) throw UsageError("Node::send_shared: null buffer");
    SharedBuffer copy = buffer;
    send_impl(copy);
}

template <class B>
void TcpNode::send_impl(B& buffer) {
    const std::size_t size = buffer->size();
    if (size > shared_->parameters.max_message_size) {
        stats_.error();
        throw MessageTooLarge("message of " + std::to_string(size) + " bytes to node " + std::to_string(id_) +
                              " exceeds max_message_size (" + std::to_string(shared_->parameters.max_message_size) +
                              " bytes)");
    }
    throw_if_lost();
    std::unique_lock lock(out_mutex_);
    if (closed_) throw UsageError("node " + std::to_string(id_) + ": its tcp factory was destroyed");
    if (address_.empty()) throw UsageError("node " + std::to_string(id_) + " has no port in the nodes file");
    const std::size_t waiting = window_.waiting();
    if (waiting >= shared_->parameters.send_queue_limit) {
        stats_.error();
        throw SendQueueFull("send queue to node " + std::to_string(id_) + " holds send_queue_limit (" +
                            std::to_string(shared_->parameters.send_queue_limit) + ") messages");
    }
    window_.push(std::move(buffer), size);
    if (state_ == OutState::established && !armed_write_) {
        // A message after a pause goes out now. One that follows a write by less
        // than batch_window is part of a stream: it joins a batch that this thread
        // writes once it holds batch_messages (or a large message), or that the
        // background thread writes batch_window after the batch began.
        if (waiting == 0) {
            const auto now = Clock::now();
            // A message received since the last write makes this a reply, not a stream.
            const std::uint64_t takes = takes_.load(std::memory_order_relaxed);
            const bool replied = takes != takes_at_write_;
            if (replied || now - last_write_ >= batch_window || size >= batch_bytes) {
                last_write_ = now;
                takes_at_write_ = takes;
                write_pending();
            } else {
                batch_start_ = now;
                shared_->wake_io();
            }
        } else if (waiting + 1 >= batch_messages || size >= batch_bytes) {
            last_write_ = Clock::now();
            write_pending();
        }
    } else if (state_ == OutState::idle) {
        reconnect_.attempt_now(Clock::now());
        state_ = OutState::waiting;
        shared_->wake_io();
    }
    const std::size_t left = window_.waiting();
    queue_depth_.store(left, std::memory_order_relaxed);
    if (left > 0) stats_.queued();
}

// Writes as much of the queue as the socket takes, many messages per system call
// (a gather write over headers and fragments, ip/gather.hpp).
void TcpNode::write_pending() {
    while (state_ == OutState::established && !window_.all_written()) {
        gather_.start(window_.offset());
        for (std::size_t i = window_.written(); i < window_.size(); ++i)
            if (!gather_.add_frame(window_[i].header, window_[i].buffer())) break;
        msghdr msg = gather_.message();
        const ssize_t wrote = ::sendmsg(out_fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (wrote < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                arm_out(true);
                return;
            }
            out_broken("write failed: " + ip::errno_text(errno));
            return;
        }
        window_.wrote(static_cast<std::size_t>(wrote), [this](const ip::Outgoing& e, bool resent) {
            if (resent) {
                stats_.retried(); // resent after a broken connection
            } else {
                stats_.sent(e.header.length);
            }
        });
    }
    if (window_.all_written()) {
        arm_out(false);
        out_changed_.notify_all();
    }
    queue_depth_.store(window_.waiting(), std::memory_order_relaxed);
}

void TcpNode::arm_out(bool want_write) {
    if (out_fd_ < 0 || armed_write_ == want_write) return;
    shared_->epoll.modify(out_fd_, EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0u),
                          event_data(Tag::out, id_, generation_));
    armed_write_ = want_write;
}

bool TcpNode::flush(std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(out_mutex_);
    for (;;) {
        if (state_ == OutState::established) write_pending();
        if (window_.all_written()) return true;
        if (closed_ || Clock::now() >= deadline) return window_.all_written();
        if (state_ == OutState::idle) {
            state_ = OutState::waiting;
            reconnect_.attempt_now(Clock::now());
            shared_->wake_io();
        }
        // The background thread writes when the socket has room and notifies.
        out_changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
}

// ---------------------------------------------------------------- outgoing connection (background thread)

void TcpNode::close_out_fd() {
    if (out_fd_ >= 0) {
        ::close(out_fd_); // also leaves the epoll set
        out_fd_ = -1;
    }
    armed_write_ = false;
    out_rx_len_ = 0;
    ++generation_;
}

void TcpNode::out_broken(const std::string& why) {
    close_out_fd();
    window_.rewind(); // resend from what the peer says it has
    const auto now = Clock::now();
    if (peer_said_goodbye_) {
        peer_said_goodbye_ = false;
        if (window_.empty()) { // the peer ended cleanly with everything taken
            state_ = OutState::idle;
            peer_incarnation_ = 0;
            known_incarnation_.store(0);
            reconnect_.forget();
            out_changed_.notify_all();
            return;
        }
        declare_lost_locked(peer_incarnation_, "it closed with messages outstanding (" + why + ")");
        state_ = OutState::idle;
        return;
    }
    reconnect_.broke(now);
    state_ = OutState::waiting;
    out_changed_.notify_all();
    shared_->wake_io();
}

void TcpNode::start_connect(Clock::time_point now) {
    const int fd = ip::open_socket(address_.family(), SOCK_STREAM);
    if (fd < 0) {
        attempt_failed(false, "socket: " + ip::errno_text(errno), now);
        return;
    }
    tune_socket(fd, shared_->parameters.peer_timeout);
    ++generation_;
    out_fd_ = fd;
    armed_write_ = true;
    if (!shared_->epoll.add(fd, EPOLLOUT | EPOLLIN | EPOLLRDHUP, event_data(Tag::out, id_, generation_))) {
        close_out_fd();
        attempt_failed(false, "epoll: " + ip::errno_text(errno), now);
        return;
    }
    state_ = OutState::connecting;
    reconnect_.started(now);
    if (::connect(fd, address_.get(), address_.length) != 0 && errno != EINPROGRESS) {
        const int e = errno;
        close_out_fd();
        attempt_failed(e == ECONNREFUSED, "connect to " + address_.text + ": " + ip::errno_text(e), now);
    }
}

// A connection attempt failed. A refused connection after the peer was known means
// its process is gone (its listening socket closed): the peer is lost at once.
// Otherwise keep trying with backoff, until peer_timeout after the break.
void TcpNode::attempt_failed(bool refused, const std::string& why, Clock::time_point now) {
    const std::uint64_t known = peer_incarnation_ != 0 ? peer_incarnation_ : known_incarnation_.load();
    switch (reconnect_.failed(refused, known != 0, now)) {
    case ip::Reconnect::Outcome::retry:
        state_ = OutState::waiting;
        return;
    case ip::Reconnect::Outcome::lost_refused:
        declare_lost_locked(known, "its port refuses connections (" + why + ")");
        break;
    case ip::Reconnect::Outcome::lost_silent:
        declare_lost_locked(known, "no connection for peer_timeout (" + why + ")");
        break;
    }
    state_ = window_.empty() ? OutState::idle : OutState::waiting;
}

Clock::time_point TcpNode::tick(Clock::time_point now) {
    const auto far = now + std::chrono::seconds(1);
    std::lock_guard lock(out_mutex_);
    if (closed_ || address_.empty()) return far;
    if (probe_wanted_.exchange(false) && state_ == OutState::idle) {
        reconnect_.probe(now);
        state_ = OutState::waiting;
    }
    switch (state_) {
    case OutState::established:
        if (!window_.all_written() && !armed_write_) { // the tail of a stream's batch
            if (now - batch_start_ < batch_window) return batch_start_ + batch_window;
            last_write_ = now;
            write_pending();
        }
        return far;
    case OutState::idle:
        return far;
    case OutState::waiting:
        if (reconnect_.due(now)) {
            start_connect(now);
            return state_ == OutState::waiting ? reconnect_.next_attempt() : reconnect_.attempt_deadline();
        }
        return reconnect_.next_attempt();
    case OutState::connecting:
    case OutState::handshaking:
        if (now >= reconnect_.attempt_deadline()) {
            close_out_fd();
            attempt_failed(false, "no answer from " + address_.text + " in time", now);
            return reconnect_.next_attempt();
        }
        return reconnect_.attempt_deadline();
    }
    return far;
}

void TcpNode::on_out_event(std::uint32_t generation, std::uint32_t events) {
    std::deque<ip::Outgoing> acknowledged; // freed after the lock: senders do not wait for free()
    std::unique_lock lock(out_mutex_);
    handle_out_event(generation, events);
    window_.take_acknowledged(acknowledged);
    lock.unlock();
}

void TcpNode::handle_out_event(std::uint32_t generation, std::uint32_t events) {
    if (out_fd_ < 0 || (generation_ & 0xffffffu) != generation) return; // an event of a closed connection
    if (state_ == OutState::connecting) {
        int error = 0;
        socklen_t len = sizeof error;
        ::getsockopt(out_fd_, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
            close_out_fd();
            attempt_failed(error == ECONNREFUSED, "connect to " + address_.text + ": " + ip::errno_text(error),
                           Clock::now());
            return;
        }
        if ((events & EPOLLOUT) == 0) return;
        const Hello hello =
            make_hello(shared_->parameters.self, id_, shared_->incarnation, shared_->parameters.partition);
        const ssize_t wrote = ::send(out_fd_, &hello, sizeof hello, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (wrote != static_cast<ssize_t>(sizeof hello)) { // a fresh socket takes 128 bytes at once
            close_out_fd();
            attempt_failed(false, "handshake write failed", Clock::now());
            return;
        }
        state_ = OutState::handshaking;
        arm_out(false);
        return;
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        read_out_side();
        if (out_fd_ < 0) return;
    }
    if ((events & EPOLLOUT) != 0 && state_ == OutState::established) write_pending();
}

// Reads the Welcome, then acknowledgements and goodbyes, from the peer.
void TcpNode::read_out_side() {
    for (;;) {
        const ssize_t got = ::recv(out_fd_, out_rx_.data() + out_rx_len_, out_rx_.size() - out_rx_len_, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            const std::string why =
                got == 0 ? "connection closed by the peer" : "read failed: " + ip::errno_text(errno);
            if (state_ == OutState::handshaking) {
                close_out_fd();
                attempt_failed(false, why, Clock::now());
            } else {
                out_broken(why);
            }
            return;
        }
        if (got < 0) return;
        out_rx_len_ += static_cast<std::size_t>(got);
        std::size_t at = 0;
        for (;;) {
            if (state_ == OutState::handshaking) {
                if (out_rx_len_ - at < sizeof(Welcome)) break;
                Welcome w;
                std::memcpy(&w, out_rx_.data() + at, sizeof w);
                at += sizeof w;
                handle_welcome(w);
                if (out_fd_ < 0) return;
                continue;
            }
            if (out_rx_len_ - at < sizeof(FrameHeader)) break;
            const FrameHeader h = ip::decode(out_rx_.data() + at);
            at += sizeof h;
            const ip::Frame frame = ip::check_ack_side(h);
            const bool taken = (frame == ip::Frame::ack || frame == ip::Frame::goodbye) && acknowledged(h.seq);
            if (!taken) { // not an acknowledgement, or one of messages never sent
                out_broken("protocol error from the peer (frame type " + std::to_string(h.type) + ")");
                return;
            }
            if (frame == ip::Frame::goodbye) peer_said_goodbye_ = true; // with its last acknowledgement
        }
        std::memmove(out_rx_.data(), out_rx_.data() + at, out_rx_len_ - at);
        out_rx_len_ -= at;
    }
}

void TcpNode::handle_welcome(const Welcome& w) {
    switch (ip::check_answer(w, protocol, shared_->parameters.self, id_)) {
    case ip::Answer::welcome:
        break;
    case ip::Answer::foreign:
        close_out_fd();
        attempt_failed(false, "the answer from " + address_.text + " is not a msgpass welcome for this pair",
                       Clock::now());
        return;
    case ip::Answer::refusal:
        if (!refusal_logged_) {
            std::fprintf(stderr, "msgpass tcp node %u: node %u (%s) refused the connection: %s\n",
                         shared_->parameters.self, id_, address_.text.c_str(),
                         std::string(describe(ip::refusal_reason(w))).c_str());
            refusal_logged_ = true;
        }
        close_out_fd();
        reconnect_.refused_by_peer();
        attempt_failed(false, "refused", Clock::now());
        return;
    case ip::Answer::unexpected:
        close_out_fd();
        attempt_failed(false, "unexpected handshake answer", Clock::now());
        return;
    }
    if (ip::restarted(peer_incarnation_, w.incarnation)) {
        declare_lost_locked(peer_incarnation_, "it restarted");
    }
    const std::uint64_t first = window_.first_unacknowledged();
    const std::uint64_t next = window_.next_seq();
    if (!window_.resume(w.next_expected)) {
        // The peer claims messages we never sent, or lost some it had acknowledged.
        declare_lost_locked(w.incarnation, "its welcome expects message " + std::to_string(w.next_expected) +
                                               " but this node holds " + std::to_string(first) + ".." +
                                               std::to_string(next));
        close_out_fd();
        state_ = OutState::idle;
        return;
    }
    trimmed();
    peer_incarnation_ = w.incarnation;
    known_incarnation_.store(w.incarnation);
    state_ = OutState::established;
    reconnect_.connected();
    refusal_logged_ = false;
    write_pending();
    out_changed_.notify_all();
}

// An acknowledgement of every message before next_expected; false when it
// acknowledges messages never sent.
bool TcpNode::acknowledged(std::uint64_t next_expected) {
    if (!window_.acknowledge(next_expected)) return false;
    trimmed();
    return true;
}

void TcpNode::trimmed() {
    queue_depth_.store(window_.waiting(), std::memory_order_relaxed);
    if (window_.empty()) out_changed_.notify_all();
}

// Before a clean close: a socket closed while acknowledgements still arrive is reset
// by the kernel, which drops what it had not sent yet, so the factory waits until
// the peer acknowledged everything.
bool TcpNode::wait_acknowledged(Clock::time_point deadline) {
    std::unique_lock lock(out_mutex_);
    while (!window_.empty() && state_ == OutState::established && Clock::now() < deadline)
        out_changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    return window_.empty();
}

void TcpNode::reset_connections() {
    {
        std::lock_guard lock(out_mutex_);
        if (out_fd_ >= 0) {
            linger l{1, 0}; // close() now sends RST
            ::setsockopt(out_fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
            out_broken("connection reset (fault injection)");
        }
    }
    std::lock_guard lock(in_mutex_);
    if (in_fd_ >= 0) {
        linger l{1, 0};
        ::setsockopt(in_fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        ::close(in_fd_);
        in_fd_ = -1;
        assembling_.reset();
        rx_begin_ = rx_end_ = 0;
    }
}

void TcpNode::close() {
    {
        std::lock_guard lock(in_mutex_);
        if (in_fd_ >= 0) {
            // The last acknowledgement, then goodbye: the peer forgets us quietly.
            const FrameHeader bye = ip::goodbye_frame(in_window_.expected());
            ::send(in_fd_, &bye, sizeof bye, MSG_DONTWAIT | MSG_NOSIGNAL);
            ::shutdown(in_fd_, SHUT_WR);
        }
    }
    std::lock_guard lock(out_mutex_);
    closed_ = true;
    if (out_fd_ >= 0 && state_ == OutState::established && window_.all_written()) {
        const FrameHeader bye = ip::goodbye_frame(0);
        ::send(out_fd_, &bye, sizeof bye, MSG_DONTWAIT | MSG_NOSIGNAL);
        ::shutdown(out_fd_, SHUT_WR);
        // Drain acknowledgements so that close() sends FIN, not RST.
        std::array<std::byte, 4096> sink;
        while (::recv(out_fd_, sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
        }
    }
    close_out_fd();
    state_ = OutState::idle;
    out_changed_.notify_all();
}

// ---------------------------------------------------------------- incoming connection

std::uint64_t TcpNode::attach_incoming(int fd, std::uint64_t incarnation) {
    std::uint64_t old_incarnation = 0;
    bool restarted = false;
    {
        std::lock_guard lock(in_mutex_);
        old_incarnation = in_window_.incarnation();
        // A peer that said goodbye and comes back started cleanly: nothing was lost.
        restarted = ip::restarted(old_incarnation, incarnation) && !in_goodbye_;
    }
    // The loss of the old incarnation is declared before a message of the new one
    // can be taken, and a marker in the inbox raises it between the two streams.
    if (restarted) {
        std::lock_guard lock(out_mutex_);
        declare_lost_locked(old_incarnation, "it restarted");
    }
    std::uint64_t next_expected = 0;
    {
        std::lock_guard lock(in_mutex_);
        if (in_fd_ >= 0) ::close(in_fd_);
        tune_socket(fd, shared_->parameters.peer_timeout);
        in_fd_ = fd;
        // A partial frame of the old connection is dropped: the peer resends it whole.
        assembling_.reset();
        rx_begin_ = rx_end_ = 0;
        ack_tx_len_ = ack_tx_off_ = 0;
        if (restarted && in_window_.incarnation() != incarnation) inbox_.mark_loss();
        in_window_.attach(incarnation); // a new incarnation counts from 0
        in_goodbye_ = false;
        known_incarnation_.store(incarnation);
        next_expected = in_window_.expected();
        // The Welcome goes out before any acknowledgement can (same lock); a fresh
        // socket takes its 40 bytes at once.
        const Welcome w =
            ip::make_welcome(protocol, shared_->parameters.self, id_, shared_->incarnation, next_expected);
        (void)::send(fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (shared_->bell.load() != nullptr) { // technology: auto: every arrival rings the doorbell
            shared_->epoll.add(fd, EPOLLIN | EPOLLET | EPOLLRDHUP, event_data(Tag::in, id_, 0));
        }
    }
    shared_->wake_receivers();
    return next_expected;
}

void TcpNode::in_broken() {
    if (in_fd_ >= 0) ::close(in_fd_);
    in_fd_ = -1;
    assembling_.reset();
    rx_begin_ = rx_end_ = 0;
    if (in_goodbye_) return;
    // Either the connection broke (the peer reconnects) or the peer died: ask it.
    probe_wanted_.store(true);
    shared_->wake_io();
}

void TcpNode::send_ack() {
    if (in_fd_ < 0) return;
    if (ack_tx_off_ == ack_tx_len_) {
        if (!in_window_.ack_owed()) return;
        ip::encode(ip::ack_frame(in_window_.acknowledge()), ack_tx_.data());
        ack_tx_len_ = ip::frame_header_size;
        ack_tx_off_ = 0;
    }
    const ssize_t wrote =
        ::send(in_fd_, ack_tx_.data() + ack_tx_off_, ack_tx_len_ - ack_tx_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (wrote > 0) ack_tx_off_ += static_cast<std::size_t>(wrote);
}

void TcpNode::deliver(BufferPtr message) {
    message->set_source(id_);
    in_window_.delivered(message->size());
    inbox_.push(std::move(message));
}

// Parses every whole frame in rx_ into the inbox; a data frame too large for what is
// left of rx_ becomes the message being assembled, read straight into its buffer.
void TcpNode::parse_in_buffer() {
    const auto& p = shared_->parameters;
    while (!assembling_ && rx_end_ - rx_begin_ >= sizeof(FrameHeader)) {
        const FrameHeader h = ip::decode(rx_.data() + rx_begin_);
        const ip::Frame frame = ip::check_data_side(h, p.max_message_size);
        if (frame == ip::Frame::goodbye) {
            rx_begin_ += sizeof h;
            in_goodbye_ = true;
            known_incarnation_.store(0); // a clean end: a later refusal is not a loss
            continue;
        }
        if (frame != ip::Frame::data) {
            violation_ = "node " + std::to_string(id_) + " sent " + ip::describe_fault(h, frame, p.max_message_size);
            shared_->count_refusal(ip::refusal_of(frame));
            in_broken();
            return;
        }
        if (in_window_.classify(h.seq) != ip::ReceiveWindow::Arrival::in_order) { // a stream neither repeats nor skips
            violation_ = "node " + std::to_string(id_) + " sent message " + std::to_string(h.seq) + " where " +
                         std::to_string(in_window_.expected()) + " was expected";
            shared_->count_refusal(Refusal::protocol_error);
            in_broken();
            return;
        }
        const std::size_t have = rx_end_ - rx_begin_ - sizeof h;
        if (have >= h.length) {
            auto m = shared_->pool->make(static_cast<std::size_t>(h.length));
            std::memcpy(m->single()->data(), rx_.data() + rx_begin_ + sizeof h, static_cast<std::size_t>(h.length));
            rx_begin_ += sizeof h + h.length;
            deliver(std::move(m));
            continue;
        }
        if (rx_begin_ + sizeof h + h.length <= rx_.size()) break; // fits: wait for the rest in rx_
        assembling_ = shared_->pool->make(static_cast<std::size_t>(h.length));
        assembling_data_ = assembling_->single()->data();
        std::memcpy(assembling_data_, rx_.data() + rx_begin_ + sizeof h, have);
        assembled_ = have;
        assembling_seq_ = h.seq;
        rx_begin_ = rx_end_ = 0;
    }
    if (rx_begin_ == rx_end_) rx_begin_ = rx_end_ = 0;
}

void TcpNode::read_in_side() {
    if (rx_.empty()) rx_.resize(rx_capacity);
    for (int round = 0; round < 4 && in_fd_ >= 0; ++round) {
        ssize_t got = 0;
        if (assembling_) {
            got = ::recv(in_fd_, assembling_data_ + assembled_, assembling_->size() - assembled_, MSG_DONTWAIT);
        } else {
            if (rx_begin_ > 0 && rx_.size() - rx_end_ < sizeof(FrameHeader) + 4096) {
                std::memmove(rx_.data(), rx_.data() + rx_begin_, rx_end_ - rx_begin_);
                rx_end_ -= rx_begin_;
                rx_begin_ = 0;
            }
            got = ::recv(in_fd_, rx_.data() + rx_end_, rx_.size() - rx_end_, MSG_DONTWAIT);
        }
        if (got == 0) {
            in_broken();
            return;
        }
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) in_broken();
            return;
        }
        if (assembling_) {
            assembled_ += static_cast<std::size_t>(got);
            if (assembled_ == assembling_->size()) {
                deliver(std::move(assembling_));
                assembled_ = 0;
            }
            continue;
        }
        rx_end_ += static_cast<std::size_t>(got);
        parse_in_buffer();
        if (!inbox_.empty() && rx_end_ < rx_.size()) break; // the socket is drained for now
    }
    if (in_window_.ack_due(shared_->parameters.ack_every, shared_->parameters.ack_bytes) ||
        ack_tx_off_ != ack_tx_len_) {
        send_ack();
    }
}

// The next message of the inbox; at the marker of a restarted peer, the loss of its
// old incarnation is raised (unless a send raised it already).
BufferPtr TcpNode::take_locked(std::unique_lock<std::mutex>& lock) {
    while (!inbox_.empty()) {
        auto next = inbox_.pop();
        if (!next.loss) {
            stats_.received(next.message->size());
            takes_.fetch_add(1, std::memory_order_relaxed);
            return std::move(next.message);
        }
        lock.unlock();
        throw_if_lost(); // the lock is not held while the exception leaves
        lock.lock();
    }
    return nullptr;
}

BufferPtr TcpNode::receive() {
    {
        std::unique_lock lock(in_mutex_);
        if (inbox_.empty() && in_fd_ >= 0) read_in_side();
        if (auto m = take_locked(lock)) return m;
        if (!violation_.empty()) {
            std::string v = std::move(violation_);
            violation_.clear();
            stats_.error();
            throw Error(v);
        }
    }
    throw_if_lost();
    return nullptr;
}

int TcpNode::prepare_to_sleep(bool acknowledge) {
    std::lock_guard lock(in_mutex_);
    if (acknowledge) send_ack();
    return in_fd_;
}

BufferPtr TcpNode::take_ready() {
    std::unique_lock lock(in_mutex_);
    return take_locked(lock);
}

// Sleeps in poll() first and reads after: when the message is not there yet (a
// request-response exchange), that is one system call less than trying to read
// first, and a receive costs what a blocking read on a raw socket costs.
BufferPtr TcpNode::receive(std::chrono::nanoseconds timeout) {
    if (auto m = take_ready()) return m; // a stream: no clock, no system call
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout, start);
    for (;;) {
        if (auto m = take_ready()) return m;
        const auto now = Clock::now();
        if (now >= deadline) return receive();
        const bool idle = now >= start + ack_delay;
        const int fd = prepare_to_sleep(idle);
        const auto step = std::min<std::chrono::nanoseconds>(
            deadline - now,
            idle ? std::chrono::nanoseconds(std::chrono::milliseconds(100)) : ack_delay - (now - start));
        if (ip::wait_readable(shared_->recv_wake, std::span<const int>(&fd, fd >= 0 ? 1 : 0), step)) {
            if (auto m = receive()) return m;
        }
    }
}

} // namespace msgpass::tcp
