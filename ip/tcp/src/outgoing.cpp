// The outgoing connection of a TcpNode: the data this process sends to the peer,
// and the acknowledgements that come back. The background thread opens it, runs the
// connector's side of the handshake, reads acknowledgements and goodbyes, and
// repairs the connection when it breaks (ip/reconnect.hpp); after a new Welcome the
// window (ip/window.hpp) resends from the peer's next expected message.
#include "engine.hpp"

#include <msgpass/ip/socket.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

void TcpNode::close_out_fd() {
    if (out_fd_ >= 0) {
        ::close(out_fd_); // also leaves the epoll set
        out_fd_ = -1;
    }
    armed_write_ = false;
    batch_timed_ = false;
    out_rx_len_ = 0;
    unanswered_since_ = {};
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
    tune_socket(fd, shared_->parameters.peer_timeout, false);
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
        declare_lost_locked(known, "no connection for peer_timeout (" + why + ")", true);
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
        if (now >= next_answer_check_) {
            next_answer_check_ = now + answer_check_period();
            if (!check_answers(now)) return now; // broken: the next tick starts again
        }
        if (!window_.all_written() && !armed_write_) { // the tail of a stream's batch
            if (now - batch_start_ < batch_window) return std::min(batch_start_ + batch_window, next_answer_check_);
            last_write_ = now;
            write_pending();
        }
        batch_timed_ = false; // the next batch wakes this thread again
        return std::min(far, next_answer_check_);
    case OutState::idle: // nothing to do before a send
        break;
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

std::chrono::nanoseconds TcpNode::answer_check_period() const {
    const std::chrono::nanoseconds period = shared_->parameters.peer_timeout / 8;
    return std::clamp<std::chrono::nanoseconds>(period, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
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
    if (::getsockopt(out_fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return true;
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
    out_broken("no answer from " + address_.text + " for peer_timeout (" + std::to_string(info.tcpi_unacked) +
               " segments in flight, " + std::to_string(info.tcpi_probes) + " probes unanswered)");
    return false;
}

void TcpNode::on_out_event(std::uint32_t generation, std::uint32_t events) {
    std::unique_lock lock(out_mutex_);
    handle_out_event(generation, events);
    window_.take_acknowledged(acknowledged_scratch_);
    lock.unlock();
    acknowledged_scratch_.clear(); // freed after the lock: senders do not wait for free()
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
        // With a key, the Hello carries a fresh nonce (kind hello_auth) and is kept: the
        // Challenge's MAC and this side's Proof cover it.
        ssize_t wrote = 0;
        std::size_t size = 0;
        if (shared_->parameters.auth_key) {
            auth_hello_ = ip::make_auth_hello(protocol, shared_->parameters.self, id_, shared_->incarnation,
                                              shared_->parameters.partition);
            size = sizeof auth_hello_;
            wrote = ::send(out_fd_, &auth_hello_, size, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else {
            const Hello hello =
                make_hello(shared_->parameters.self, id_, shared_->incarnation, shared_->parameters.partition);
            size = sizeof hello;
            wrote = ::send(out_fd_, &hello, size, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        if (wrote != static_cast<ssize_t>(size)) { // a fresh socket takes 160 bytes at once
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
                if (w.kind == ip::kind_challenge && shared_->parameters.auth_key) {
                    ip::Challenge c;
                    if (out_rx_len_ - at < sizeof c) break;
                    std::memcpy(&c, out_rx_.data() + at, sizeof c);
                    at += sizeof c;
                    handle_challenge(c);
                    if (out_fd_ < 0) return;
                    continue;
                }
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

// The acceptor's proof that it holds the partition's key; answered with this side's
// Proof, after which the Welcome (or a bad_proof refusal) follows. An acceptor that
// cannot prove the key gets nothing that could be replayed elsewhere.
void TcpNode::handle_challenge(const ip::Challenge& c) {
    if (ip::check_answer(c.header, protocol, shared_->parameters.self, id_) != ip::Answer::unexpected ||
        !ip::challenge_proves_key(*shared_->parameters.auth_key, auth_hello_, c)) {
        shared_->count_refusal(Refusal::bad_proof);
        if (!refusal_logged_) {
            std::fprintf(stderr,
                         "msgpass tcp node %u: node %u (%s) did not prove this partition's key (auth_key_file): "
                         "another key, or not a node of this partition\n",
                         shared_->parameters.self, id_, address_.text.c_str());
            refusal_logged_ = true;
        }
        close_out_fd();
        reconnect_.refused_by_peer();
        attempt_failed(false, "no proof of the key", Clock::now());
        return;
    }
    const ip::Proof proof = ip::make_proof(*shared_->parameters.auth_key, auth_hello_, c);
    const ssize_t wrote = ::send(out_fd_, &proof, sizeof proof, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (wrote != static_cast<ssize_t>(sizeof proof)) { // nothing else was written on this socket
        close_out_fd();
        attempt_failed(false, "handshake write failed", Clock::now());
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
    // A new incarnation counts our messages from 0; the one our numbers were for (alive
    // after we gave it up, or after a clean goodbye and a loss) goes on counting them.
    if (numbered_for_ != 0 && w.incarnation != numbered_for_) window_.renumber();
    const auto skipped = window_.resume(w.next_expected);
    if (!skipped) {
        welcome_mismatch(w);
        return;
    }
    if (*skipped > 0) {
        // We gave this peer up while it lived and dropped messages it never got: the
        // skip frame, before any data, makes it report them lost where they belong in
        // its stream and count on from our first kept message.
        const FrameHeader skip = ip::skip_frame(window_.first_unacknowledged());
        if (::send(out_fd_, &skip, sizeof skip, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof skip)) {
            close_out_fd(); // a fresh socket takes 24 bytes at once
            attempt_failed(false, "handshake write failed", Clock::now());
            return;
        }
    }
    numbered_for_ = w.incarnation;
    loss_.revive(w.incarnation); // given up for silence, it lives: its later loss is reported again
    trimmed();
    peer_incarnation_ = w.incarnation;
    known_incarnation_.store(w.incarnation);
    state_ = OutState::established;
    reconnect_.connected();
    refusal_logged_ = false;
    write_pending();
    out_changed_.notify_all();
}

// The peer claims messages we never sent, or lacks some it had acknowledged: the
// numbering of the pair disagrees, and trimming the window to fit would drop messages
// it never got without a word. Loud instead: counted as a protocol error, logged, the
// messages it did not acknowledge reported lost (even when its loss was reported
// before), the numbering started again, and the peer asked again only after the
// longest backoff.
void TcpNode::welcome_mismatch(const Welcome& w) {
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text +
                             ") lost: its welcome expects message " + std::to_string(w.next_expected) +
                             " but this node acknowledged up to " + std::to_string(window_.acknowledged_to()) +
                             " and sent up to " + std::to_string(window_.next_seq()) +
                             " (the numbering of the pair disagrees)";
    shared_->count_refusal(Refusal::protocol_error);
    const std::uint64_t unacknowledged = window_.lose();
    window_.renumber();
    numbered_for_ = 0;
    peer_incarnation_ = 0;
    queue_depth_.store(0, std::memory_order_relaxed);
    reconnect_.forget();
    loss_.raise(w.incarnation, text + "; " + std::to_string(unacknowledged) + " messages sent to it were dropped",
                unacknowledged);
    std::fprintf(stderr, "msgpass tcp node %u: %s\n", shared_->parameters.self, text.c_str());
    close_out_fd();
    reconnect_.refused_by_peer();
    state_ = OutState::idle;
    out_changed_.notify_all();
    shared_->wake_receivers();
}

// An acknowledgement of every message before next_expected; false when it
// acknowledges messages never sent.
bool TcpNode::acknowledged(std::uint64_t next_expected) {
    if (!window_.acknowledge(next_expected)) return false;
    trimmed();
    return true;
}

void TcpNode::trimmed() {
    queue_depth_.store(window_.queued(), std::memory_order_relaxed);
    if (window_.empty()) out_changed_.notify_all();
}

} // namespace msgpass::tcp
