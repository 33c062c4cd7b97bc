// TcpNode: one peer of the tcp technology (see engine.hpp for the threads and
// docs/tcp.md for the protocol): the calls of the application (send, flush,
// receive), the loss of the peer, and the factory's shutdown. The outgoing
// connection is in outgoing.cpp, the incoming one in incoming.cpp; the bookkeeping
// they share with other ip technologies (window, incarnations, handshake, frames)
// is in ip/common.
#include "engine.hpp"

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
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name),
      reconnect_(shared_->parameters.backoff_min, shared_->parameters.backoff_max, shared_->parameters.peer_timeout) {
    address_.text = ip::host_port(peer.host, peer.port);
    if (peer.port == 0) return; // receive only: the peer cannot be reached
    address_ = ip::resolve(peer.host, peer.port, SOCK_STREAM, false,
                           peer.where.str() + ": nodes." + std::to_string(peer.id) + ".host");
}

TcpNode::~TcpNode() {
    if (fd_ >= 0) ::close(fd_);
    if (bell_fd_ >= 0) ::close(bell_fd_);
    if (abandoned_fd_ >= 0) ::close(abandoned_fd_);
}

NodeStats TcpNode::stats() const noexcept {
    return stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
}

// ---------------------------------------------------------------- loss

void TcpNode::throw_if_lost() {
    if (!loss_.pending()) return;
    if (auto loss = loss_.take()) {
        stats_.error();
        throw loss->error(id_);
    }
}

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
    std::fprintf(stderr, "msgpass tcp node %u: %s\n", shared_->parameters.self, text.c_str());
    out_changed_.notify_all();
    shared_->wake_receivers();
}

// ---------------------------------------------------------------- send

void TcpNode::send(BufferPtr&& buffer) {
    if (!buffer) kit::throw_null_buffer(*this);
    send_impl(buffer);
}

void TcpNode::send_shared(const SharedBuffer& buffer) {
    if (!buffer) kit::throw_null_buffer(*this);
    SharedBuffer copy = buffer;
    send_impl(copy);
}

template <class B>
void TcpNode::send_impl(B& buffer) {
    check_factory("send");
    const std::size_t size = buffer->size();
    if (size > shared_->parameters.max_message_size) {
        stats_.error();
        kit::throw_message_too_large(*this, size, shared_->parameters.max_message_size);
    }
    throw_if_lost();
    std::unique_lock lock(out_mutex_);
    if (address_.empty()) throw UsageError("node " + std::to_string(id_) + " has no port in the nodes file");
    // The queue is what was never written; after a broken connection the messages
    // written before and not acknowledged go again without counting (window.hpp).
    if (window_.queued() >= shared_->parameters.send_queue_limit) {
        stats_.error();
        kit::throw_send_queue_full(*this, shared_->parameters.send_queue_limit);
    }
    const std::size_t waiting = window_.waiting();
    window_.push(std::move(buffer), size);
    sends_.store(sends_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Freed after the lock, in this thread; the vector keeps its capacity.
    thread_local std::vector<Outgoing> acknowledged;
    if (peer_ack_pending_.load(std::memory_order_relaxed)) {
        apply_pending_ack();
        window_.take_acknowledged(acknowledged);
    }
    if (state_ == State::established && !armed_write_) {
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
                // One wake-up of the background thread for a stream, not one per
                // batch: once it holds a batch's deadline it follows batch_start_.
                if (!batch_timed_) {
                    batch_timed_ = true;
                    shared_->wake_io();
                }
            }
        } else if (waiting + 1 >= batch_messages || size >= batch_bytes) {
            last_write_ = Clock::now();
            write_pending();
        }
    } else if (state_ == State::idle) {
        reconnect_.attempt_now(Clock::now());
        state_ = State::waiting;
        shared_->wake_io();
    }
    const std::size_t left = window_.queued();
    queue_depth_.store(left, std::memory_order_relaxed);
    if (left > 0) stats_.queued();
    lock.unlock(); // before the acknowledged messages are freed
    acknowledged.clear();
}

// out_mutex_. Queues a control frame (resume, skip, an acknowledgement alone) and
// writes it when no data frame is cut in the middle.
void TcpNode::queue_control(const FrameHeader& h) {
    if (ctl_off_ == ctl_len_) ctl_len_ = ctl_off_ = 0;
    if (ctl_len_ + sizeof h > ctl_tx_.size()) { // full of acknowledgements: the newest replaces the last
        if (h.type != static_cast<std::uint32_t>(FrameType::ack) || ctl_off_ > ctl_len_ - sizeof h) return;
        ctl_len_ -= sizeof h;
    }
    encode(h, ctl_tx_.data() + ctl_len_);
    ctl_len_ += sizeof h;
    write_control();
}

// out_mutex_. Writes what is left of the control frames; false while some is left.
bool TcpNode::write_control() {
    while (ctl_off_ < ctl_len_) {
        if (fd_ < 0 || write_failed_ || window_.offset() != 0) return false;
        const ssize_t wrote = ::send(fd_, ctl_tx_.data() + ctl_off_, ctl_len_ - ctl_off_, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (wrote < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                armed_write_ = true;
                update_epoll();
                return false;
            }
            fail_write("write failed: " + ip::errno_text(errno));
            return false;
        }
        ctl_off_ += static_cast<std::size_t>(wrote);
    }
    ctl_len_ = ctl_off_ = 0;
    return true;
}

// Writes as much of the queue as the socket takes, many messages per system call
// (a gather write over headers and fragments, ip/gather.hpp: pieces up to
// small_piece bytes are staged, larger ones written from where they are). Each data
// frame carries this side's acknowledgement of the peer's messages (data_acked).
// At most max(send_queue_limit, background_inbox_limit) messages are written and not
// acknowledged: the peer's acknowledgements come behind its own data, which a node
// that never receives from it reads only so far (background_inbox_limit), so memory
// stays bounded; a receiver that does not read stops the writes sooner (TCP's window).
void TcpNode::write_pending() {
    if (fd_ < 0 || write_failed_) return;
    if (window_.offset() == 0 && !write_control()) return;
    const std::size_t unacknowledged_limit =
        std::max<std::size_t>(shared_->parameters.send_queue_limit, background_inbox_limit);
    while (state_ == State::established && !window_.all_written() && !write_failed_ &&
           window_.written() < unacknowledged_limit) {
        const std::uint64_t ack = ack_avail_.load(std::memory_order_acquire);
        bool carried = false;
        gather_.start(window_.offset());
        const std::size_t end = std::min(window_.size(), unacknowledged_limit);
        for (std::size_t i = window_.written(); i < end; ++i) {
            if (i != window_.written() || window_.offset() == 0) { // not begun: it carries the acknowledgement
                FrameHeader& h = window_.header(i);
                h.type = static_cast<std::uint32_t>(FrameType::data_acked);
                h.flags = static_cast<std::uint32_t>(ack);
                carried = true;
            }
            if (!gather_.add_frame(window_[i].header, window_[i].buffer())) break;
        }
        msghdr msg = gather_.message();
        const ssize_t wrote = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (wrote < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                armed_write_ = true;
                update_epoll();
                return;
            }
            fail_write("write failed: " + ip::errno_text(errno));
            return;
        }
        if (carried && wrote > 0) ack_sent_.store(ack, std::memory_order_relaxed);
        window_.wrote(static_cast<std::size_t>(wrote), [this](const Outgoing& e, bool resent) {
            if (resent) {
                stats_.retried(); // resent after a broken connection
            } else {
                stats_.sent(e.header.length);
            }
        });
        if (window_.offset() == 0 && ctl_len_ > 0 && !write_control()) return;
    }
    if (window_.all_written()) {
        if (armed_write_) {
            armed_write_ = false;
            update_epoll();
        }
        out_changed_.notify_all();
    }
    queue_depth_.store(window_.queued(), std::memory_order_relaxed);
}

bool TcpNode::flush(std::chrono::nanoseconds timeout) {
    check_factory("flush");
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(out_mutex_);
    for (;;) {
        apply_pending_ack();
        if (state_ == State::established) write_pending();
        if (window_.all_written()) return true;
        if (closed_ || Clock::now() >= deadline) return window_.all_written();
        if (state_ == State::idle && !address_.empty()) {
            state_ = State::waiting;
            reconnect_.attempt_now(Clock::now());
            shared_->wake_io();
        }
        // The background thread writes when the socket has room and notifies.
        out_changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
}

// Before a clean close: a socket closed while acknowledgements still arrive is reset
// by the kernel, which drops what it had not sent yet, so the factory waits until
// the peer acknowledged everything.
bool TcpNode::wait_acknowledged(Clock::time_point deadline) {
    std::unique_lock lock(out_mutex_);
    while (!window_.empty() && state_ == State::established && Clock::now() < deadline)
        out_changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    return window_.empty();
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

// The next message of the inbox; at the marker of a restarted peer, the loss of its
// old incarnation is raised (unless a send raised it already).
BufferPtr TcpNode::take_locked(std::unique_lock<std::mutex>& lock) {
    while (!inbox_.empty()) {
        auto next = inbox_.pop();
        if (!next.loss) {
            --inbox_count_;
            stats_.received(next.message->size());
            takes_.fetch_add(1, std::memory_order_relaxed);
            return std::move(next.message);
        }
        if (next.gap) { // the peer dropped messages to us here
            stats_.error();
            lock.unlock();
            throw PeerLost(id_, next.gap->reason, next.gap->unacknowledged);
        }
        lock.unlock();
        throw_if_lost(); // the lock is not held while the exception leaves
        lock.lock();
    }
    return nullptr;
}

BufferPtr TcpNode::receive() {
    check_factory("receive");
    {
        std::unique_lock lock(in_mutex_);
        if (inbox_.empty() && fd_ >= 0 && framed_) {
            last_app_read_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
            const Control c = read_in_side();
            after_read(lock, c);
        }
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
    if (acknowledge && ack_avail_.load() != ack_sent_.load()) send_ack();
    return framed_ ? fd_ : -1;
}

BufferPtr TcpNode::take_ready() {
    std::unique_lock lock(in_mutex_);
    return take_locked(lock);
}

// Sleeps in poll() first and reads after: when the message is not there yet (a
// request-response exchange), that is one system call less than trying to read
// first, and a receive costs what a blocking read on a raw socket costs.
BufferPtr TcpNode::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    if (auto m = take_ready()) return m; // a stream: no clock, no system call
    if (timeout <= std::chrono::nanoseconds::zero()) return receive();
    // Busy reads first (receive_spin): a reply that comes within it costs no
    // wake-up. A spin that found nothing (the peer may share this CPU, and spinning
    // only delays it) is not tried again for the next 2, 6, 14, ... waits (at most 64).
    if (const auto spin = std::min<std::chrono::nanoseconds>(timeout, shared_->parameters.receive_spin);
        spin > std::chrono::nanoseconds::zero()) {
        const std::uint32_t skip = spin_skip_.load(std::memory_order_relaxed);
        if (skip > 0) {
            spin_skip_.store(skip - 1, std::memory_order_relaxed);
        } else {
            const auto start = Clock::now();
            do {
                if (auto m = receive()) {
                    spin_backoff_.store(0, std::memory_order_relaxed);
                    return m;
                }
            } while (Clock::now() - start < spin);
            const std::uint32_t backoff =
                std::min<std::uint32_t>(64, 2 * spin_backoff_.load(std::memory_order_relaxed) + 2);
            spin_backoff_.store(backoff, std::memory_order_relaxed);
            spin_skip_.store(backoff, std::memory_order_relaxed);
            timeout -= spin;
        }
    }
    SocketSleeper sleeper{shared_->recv_wake,
                          [this](bool idle, std::vector<int>& fds) {
                              if (const int fd = prepare_to_sleep(idle); fd >= 0) fds.push_back(fd);
                          },
                          [this] { return receive(); }};
    if (auto m = wait_with([this] { return take_ready(); }, timeout, sleeper, socket_wait)) return m;
    return receive(); // the loss or the protocol error, if that is why nothing came
}

} // namespace msgpass::tcp
