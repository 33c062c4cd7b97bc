// TcpNode (node.hpp), the facade of one peer: its construction from its rooms, the
// application's receive calls, the node's statistics, the loss of the peer, the
// fault injection of a reset and the factory's shutdown of the connection. The send
// side is in sender.cpp, the receive side in receiver.cpp, the connection in
// link.cpp (docs/tcp.md).
#include "node.hpp"
#include <msgpass/log.hpp>

#include <msgpass/ip/socket.hpp>
#include <msgpass/kit/errors.hpp>

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

// TCP_NODELAY (a frame must not wait for the previous one's acknowledgement) and
// keepalive sized to the peer timeout. No TCP_USER_TIMEOUT: Linux also ends a
// connection whose receiver kept its window closed for the user timeout, though its
// kernel answers every window probe (a live receiver that does not read); the
// background thread watches the connection through TCP_INFO instead
// (TcpNode::check_answers).
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
}

TcpNode::TcpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer)
    : Link(std::move(shared), peer), Sender(shared_, peer), Receiver(shared_, peer) {}

TcpNode::~TcpNode() = default;

NodeStats TcpNode::stats() const noexcept {
    return stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
}

// ---------------------------------------------------------------- loss

// The peer incarnation died, or was given up for silence: everything it did not
// acknowledge is counted and dropped. The numbering goes on (window.hpp): a peer
// given up while it lived is told, when it is reached again, which messages it will
// never get (a skip frame, handle_welcome); its next incarnation numbers from 0.
void TcpNode::declare_lost_locked(std::uint64_t incarnation, const std::string& reason, bool may_live) {
    if (loss_.raised_for(incarnation)) return; // already reported
    const std::uint64_t unacknowledged = window_.lose();
    peer_ack_pending_.store(false);
    // Numbers nobody counted yet belong to the incarnation given up: if it answers
    // after all, it learns what it missed.
    if (numbered_for_ == 0) numbered_for_ = incarnation;
    queue_depth_.store(0, std::memory_order_relaxed);
    peer_incarnation_ = 0;
    reconnect_.forget();
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") lost: " + reason +
                             "; " + std::to_string(unacknowledged) + " messages sent to it were not acknowledged";
    loss_.raise(incarnation, text, unacknowledged, may_live);
    if (client_) { // a client lost is forgotten: should it come back, it is refused
        gone_.store(true);
        shared_->client_gone.store(true);
    }
    MSGPASS_LOG(tcp, warn, "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": " + text);
    out_changed_.notify_all();
    tell_receivers();
}

void TcpNode::reset_connections() {
    std::lock_guard in_lock(in_mutex_);
    std::lock_guard lock(out_mutex_);
    if (fd_ < 0) return;
    linger l{1, 0}; // close() now sends RST
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    broken("connection reset (fault injection)");
}

void TcpNode::close() {
    std::lock_guard in_lock(in_mutex_);
    std::lock_guard lock(out_mutex_);
    closed_ = true;
    if (fd_ >= 0 && (state_ == State::established || state_ == State::resuming) && !write_failed_) {
        // The last acknowledgement, then goodbye: the peer forgets us quietly (a
        // frame cut in the middle by a full socket leaves no room for it).
        if (window_.offset() == 0 && write_control()) {
            const FrameHeader bye = goodbye_frame(in_window_.expected());
            ::send(fd_, &bye, sizeof bye, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        ::shutdown(fd_, SHUT_WR);
        // Drain what the peer sent so that close() sends FIN, not RST.
        std::array<std::byte, 4096> sink;
        while (::recv(fd_, sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
        }
    }
    close_fd();
    if (abandoned_fd_ >= 0) ::close(abandoned_fd_);
    abandoned_fd_ = -1;
    state_ = State::idle;
    out_changed_.notify_all();
}

// ---------------------------------------------------------------- receive

// in_mutex_ taken here: when nothing waits in the inbox, reads the socket (what this
// thread parses goes straight to taken_, lent from the read buffer when lend is set),
// then moves what the inbox holds to taken_. Whether taken_ has a message; throws the
// protocol error or the loss when that is why nothing came.
bool TcpNode::fill_taken(bool lend) {
    {
        std::unique_lock lock(in_mutex_);
        read_drained_ = false;
        if (inbox_.empty() && fd_ >= 0 && framed_) {
            last_app_read_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
            drained_tells_ = tells_.load(std::memory_order_acquire);
            Control c;
            {
                struct Off {
                    bool& direct;
                    bool& lend;
                    ~Off() { direct = lend = false; }
                } off{direct_, lend_};
                direct_ = true;
                lend_ = lend;
                c = read_in_side();
            }
            after_read(lock, c);
            read_drained_ = drained_ && !c.closed && !c.bad_ack && fd_ >= 0 && inbox_.empty() && violation_.empty();
        }
        if (take_locked(lock)) return true;
        if (!violation_.empty()) {
            std::string v = std::move(violation_);
            violation_.clear();
            stats_.error();
            throw Error(v);
        }
    }
    throw_if_lost();
    return false;
}

BufferPtr TcpNode::receive() {
    check_factory("receive");
    if (!has_taken() && !fill_taken(false)) return nullptr;
    return take_taken();
}

MessageView TcpNode::receive_view() {
    check_factory("receive");
    if (!has_taken() && !fill_taken(true)) return {};
    return lend_taken();
}

int TcpNode::prepare_to_sleep(bool acknowledge) {
    std::lock_guard lock(in_mutex_);
    if (acknowledge && ack_avail_.load() != ack_sent_.load()) send_ack();
    return framed_ ? fd_ : -1;
}

void TcpNode::acknowledge_held() {
    std::lock_guard lock(in_mutex_);
    if (ack_avail_.load() != ack_sent_.load() && in_window_.largest_since_ack() > SendWindow::small_payload) send_ack();
}

bool TcpNode::watch(const ip::Epoll& set, std::size_t slot, std::int64_t& watched) {
    std::lock_guard lock(in_mutex_);
    if (fd_ < 0 || !framed_) return true;
    if (watched != static_cast<std::int64_t>(generation_)) {
        const std::uint64_t data = (static_cast<std::uint64_t>(slot) << 32) | generation_;
        // ADD, or MODIFY when this socket is in the set already (the number of a closed
        // one is reused only after the kernel dropped the closed one from the set).
        if (set.add(fd_, EPOLLIN | EPOLLRDHUP, data) || set.modify(fd_, EPOLLIN | EPOLLRDHUP, data)) {
            watched = generation_;
        } else {
            return true; // not watched: looked at on every sweep
        }
    }
    return has_taken() || !inbox_.empty() || !violation_.empty();
}

bool TcpNode::drained() const noexcept {
    return read_drained_ && !has_taken() && !loss_.pending() &&
           tells_.load(std::memory_order_acquire) == drained_tells_;
}

void TcpNode::watch_marks(std::shared_ptr<kit::ReadyMarks> marks, std::size_t slot) {
    std::lock_guard lock(marks_mutex_);
    marks_.emplace_back(std::move(marks), slot);
}

void TcpNode::unwatch_marks(const kit::ReadyMarks* marks) {
    std::lock_guard lock(marks_mutex_);
    std::erase_if(marks_, [marks](const auto& m) { return m.first.get() == marks; });
}

bool TcpNode::inbox_waiting() {
    std::unique_lock lock(in_mutex_, std::try_to_lock);
    return lock.owns_lock() && !inbox_.empty();
}

BufferPtr TcpNode::take_ready() {
    if (!has_taken()) { // else without the lock
        std::unique_lock lock(in_mutex_);
        read_drained_ = false;
        if (!take_locked(lock)) return nullptr;
    }
    return take_taken();
}

MessageView TcpNode::lend_ready() {
    if (!has_taken()) {
        std::unique_lock lock(in_mutex_);
        read_drained_ = false;
        if (!take_locked(lock)) return {};
    }
    return lend_taken();
}

// Sleeps in poll() first and reads after: when the message is not there yet (a
// request-response exchange), that is one system call less than trying to read
// first, and a receive costs what a blocking read on a raw socket costs.
// receive_now is receive() or receive_view(), ready take_ready() or lend_ready().
template <class R, class Now, class Ready>
R TcpNode::receive_within(std::chrono::nanoseconds timeout, Now&& receive_now, Ready&& ready) {
    check_factory("receive");
    if (has_taken()) { // a stream: no clock, no system call, no lock
        kit::held::input(true);
        return ready();
    }
    if (timeout <= std::chrono::nanoseconds::zero()) return kit::held::found(receive_now());
    // Busy reads first (receive_spin): a reply that comes within it costs no
    // wake-up. A spin that found nothing (the peer may share this CPU, and spinning
    // only delays it) is not tried again for the next 2, 6, 14, ... waits (at most 64).
    const auto spin = std::min<std::chrono::nanoseconds>(timeout, shared_->parameters.receive_spin);
    const std::uint32_t skip = spin_skip_.load(std::memory_order_relaxed);
    // The first look, as wait_with's: a message already there (read for this node by
    // the background thread, or in the socket) is a backlog, and this thread's sends
    // may stay held (kit/held.hpp); nothing there, and they go before the wait. It is
    // the spin's first read; without the spin only the inbox is looked at (no system
    // call before the sleep).
    if (spin > std::chrono::nanoseconds::zero() && skip == 0) {
        const auto start = Clock::now();
        for (R m = kit::held::found(receive_now());; m = receive_now()) {
            if (m) {
                spin_backoff_.store(0, std::memory_order_relaxed);
                return m;
            }
            if (Clock::now() - start >= spin) break;
        }
        const std::uint32_t backoff =
            std::min<std::uint32_t>(64, 2 * spin_backoff_.load(std::memory_order_relaxed) + 2);
        spin_backoff_.store(backoff, std::memory_order_relaxed);
        spin_skip_.store(backoff, std::memory_order_relaxed);
        timeout -= spin;
    } else {
        if (R m = kit::held::found(inbox_waiting() ? receive_now() : R{})) return m;
        if (skip > 0) spin_skip_.store(skip - 1, std::memory_order_relaxed);
    }
    BasicSocketSleeper<R> sleeper{shared_->recv_wake,
                                  [this](bool idle, std::vector<int>& fds) {
                                      if (const int fd = prepare_to_sleep(idle); fd >= 0) fds.push_back(fd);
                                  },
                                  receive_now};
    if (R m = wait_with(ready, timeout, sleeper, socket_wait)) return m;
    return receive_now(); // the loss or the protocol error, if that is why nothing came
}

BufferPtr TcpNode::receive(std::chrono::nanoseconds timeout) {
    return receive_within<BufferPtr>(
        timeout, [this] { return receive(); }, [this] { return take_ready(); });
}

MessageView TcpNode::receive_view(std::chrono::nanoseconds timeout) {
    return receive_within<MessageView>(
        timeout, [this] { return receive_view(); }, [this] { return lend_ready(); });
}

} // namespace msgpass::tcp
