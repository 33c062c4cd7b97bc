// The send side of one peer: TcpNode's send(), which numbers the message into
// Sender's window and writes it in the caller's thread when nothing is queued before
// it (a stream's messages join a batch, written in one gathered sendmsg() at
// batch_messages or by the background thread batch_window after it began), and
// flush; Sender's methods (sender.hpp): the gathered writes, the control frames
// (resume, skip, an acknowledgement alone) between data frames, the acknowledgements
// applied to the window, the wait for them before a clean close.
#include "node.hpp"

#include <msgpass/ip/socket.hpp>
#include <msgpass/kit/errors.hpp>

#include <algorithm>
#include <cerrno>
#include <sys/socket.h>

namespace msgpass::tcp {

void TcpNode::send(BufferPtr&& buffer) {
    if (!buffer) kit::throw_null_buffer(*this);
    send_impl(buffer);
}

void TcpNode::send_shared(const SharedBuffer& buffer) {
    if (!buffer) kit::throw_null_buffer(*this);
    SharedBuffer copy = buffer;
    send_impl(copy);
}

// The Buffer-free send: a small message is copied straight into the window's
// staged bytes (no buffer object at all); a larger one goes as a buffer.
void TcpNode::send_bytes(std::span<const std::byte> bytes) {
    if (bytes.size() > SendWindow::small_payload) {
        Node::send_bytes(bytes);
        return;
    }
    enqueue(bytes.size(), [&] { window_.push_copy(bytes); });
}

// A payload up to small_payload bytes is copied into the window's staged bytes at
// its final place (after its header), and the caller's buffer is freed here, in
// its own thread, after the lock; a larger one is kept until acknowledged and goes
// out from where it is.
template <class B>
void TcpNode::send_impl(B& buffer) {
    const std::size_t size = buffer->size();
    if (size <= SendWindow::small_payload) {
        enqueue(size, [&] { window_.push_copy(*buffer); });
        buffer.reset(); // the layer owned it: the message is in the window
    } else {
        enqueue(size, [&] { window_.push(std::move(buffer), size); });
    }
}

template <class Push>
void TcpNode::enqueue(std::size_t size, Push&& push) {
    check_factory("send");
    if (size > shared_->parameters.max_message_size) {
        stats_.error();
        kit::throw_message_too_large(*this, size, shared_->parameters.max_message_size);
    }
    throw_if_lost();
    std::unique_lock lock(out_mutex_);
    if (loss_.pending()) {
        // Raised by the background thread since the look above: taken here, or the
        // message would wait for the peer's next incarnation although this send came
        // before the loss was reported (a send of the caller's memory would never be
        // released). Another thread that took it first reported it; then the message
        // is for the next incarnation.
        lock.unlock();
        throw_if_lost();
        lock.lock();
    }
    if (address_.empty() && !client_)
        throw UsageError("node " + std::to_string(id_) + " has no port in the nodes file");
    // The acknowledgements the background thread read while this thread sends
    // (after_read) are applied here, and those the batch's own read finds below;
    // the buffers they release are freed after the lock, in this thread (the
    // vector keeps its capacity); the writes are the batch's, below.
    thread_local std::vector<Outgoing> acknowledged;
    if (peer_ack_pending_.load(std::memory_order_relaxed)) apply_pending_ack(false);
    // The queue is what was never written; after a broken connection the messages
    // written before and not acknowledged go again without counting (window.hpp).
    if (window_.queued() >= shared_->parameters.send_queue_limit) {
        stats_.error();
        lock.unlock();
        acknowledged.clear();
        kit::throw_send_queue_full(*this, shared_->parameters.send_queue_limit);
    }
    const std::size_t waiting = window_.waiting();
    push();
    sends_.store(sends_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
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
            if (!replied && size < batch_bytes && kit::held::input_waiting() && hold(now)) {
                // Held: this thread is working through input that was waiting; the
                // message goes with the others it sends meanwhile (kit/held.hpp).
            } else if (replied || now - last_write_ >= batch_window || size >= batch_bytes) {
                last_write_ = now;
                takes_at_write_ = takes;
                write_pending();
                if (size >= batch_bytes) read_own_acks(now); // a stream of large messages
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
            read_own_acks(last_write_);
        }
    } else if (state_ == State::idle) {
        reconnect_.attempt_now(Clock::now());
        state_ = State::waiting;
        shared_->wake_io();
    }
    const std::size_t left = window_.queued();
    queue_depth_.store(left, std::memory_order_relaxed);
    if (left > 0) stats_.queued_serialized(); // out_mutex_: one writer
    window_.take_acknowledged(acknowledged);
    lock.unlock(); // before the acknowledged messages are freed
    acknowledged.clear();
}

// out_mutex_, after a batch's write. A sender that does not read the connection
// (a stream's sender) reads the acknowledgements of its messages here, at most every
// own_ack_period, instead of leaving them to the background thread: that thread,
// reading whenever the application has not read for ack_delay, woke per
// acknowledgement on the sending thread's CPU and waited there for the socket's
// lock, held by this thread's sendmsg (docs/tcp.md, "A stream's sender reads its
// acknowledgements"). The read counts as the application's (last_app_read_), so the
// background thread stays away while the sends go on. in_mutex_ is only tried (its
// owner, a receiving thread, reads the acknowledgements itself).
void TcpNode::read_own_acks(Clock::time_point now) {
    if (fd_ < 0 || !framed_ || state_ != State::established || window_.empty()) return;
    const auto last = Clock::time_point(std::chrono::nanoseconds(last_app_read_.load(std::memory_order_relaxed)));
    if (now - last < own_ack_period) return;
    std::unique_lock in_lock(in_mutex_, std::try_to_lock);
    if (!in_lock.owns_lock()) return;
    last_app_read_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    own_ack_reads_.store(own_ack_reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const Control c = read_in_side();
    apply(c); // both locks held
    in_lock.unlock();
    if (c.delivered || c.closed || c.bad_ack) tell_receivers();
}

// out_mutex_. Queues a control frame (resume, skip, an acknowledgement alone) and
// writes it when no data frame is cut in the middle.
void Sender::queue_control(const FrameHeader& h) {
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
bool Sender::write_control() {
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
        ++writes_;
    }
    ctl_len_ = ctl_off_ = 0;
    return true;
}

// Writes as much of the queue as the socket takes, many messages per system call
// (a gather write over the window's staged bytes, one or two pieces for any number
// of small messages, and the payloads it kept, window.hpp). The first frame of each
// write carries this side's acknowledgement of the peer's messages (data_acked).
// At most max(send_queue_limit, background_inbox_limit) messages are written and not
// acknowledged: the peer's acknowledgements come behind its own data, which a node
// that never receives from it reads only so far (background_inbox_limit), so memory
// stays bounded; a receiver that does not read stops the writes sooner (TCP's window).
void Sender::write_pending() {
    if (fd_ < 0 || write_failed_) return;
    if (window_.offset() == 0 && !write_control()) return;
    const std::size_t unacknowledged_limit =
        std::max<std::size_t>(shared_->parameters.send_queue_limit, background_inbox_limit);
    while (state_ == State::established && !window_.all_written() && !write_failed_ &&
           window_.written() < unacknowledged_limit) {
        // The first frame not begun carries this side's acknowledgement; the others
        // go as staged (plain data frames): acknowledgements are cumulative.
        const std::uint64_t ack = ack_avail_.load(std::memory_order_acquire);
        const std::size_t end = std::min(window_.size(), unacknowledged_limit);
        (void)window_.stamp(end, ack);
        window_.gather(gather_, end);
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
        ++writes_;
        const SendWindow::Wrote w = window_.wrote(static_cast<std::size_t>(wrote));
        if (w.stamp_written) ack_sent_.store(ack, std::memory_order_relaxed);
        if (w.resent > 0) stats_.retried(w.resent);                      // resent after a broken connection
        if (w.messages > 0) stats_.sent_serialized(w.bytes, w.messages); // out_mutex_: one writer
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

// out_mutex_. Leaves the message just queued to the calling thread, which has input
// waiting: registered with the thread's held sends, and due at the background
// thread held_bound from now (batch_start_ is set so that the batch's deadline,
// batch_start_ + batch_window, falls then). False when this node cannot be named
// to the thread (not owned by a shared_ptr): the message goes at once.
bool TcpNode::hold(Clock::time_point now) {
    auto self = weak_from_this();
    if (self.expired()) return false;
    kit::held::hold(std::weak_ptr<kit::held::Writer>(std::move(self)));
    batch_start_ = now + held_bound - batch_window;
    held_sends_.store(held_sends_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (!batch_timed_) {
        batch_timed_ = true;
        shared_->wake_io();
    }
    return true;
}

// A thread that held this node's sends finds nothing to receive: what waits goes in
// one gathered write, unless a write is under way (the background thread finishes
// it) or the connection is not up (the queue goes when it is).
void TcpNode::write_held() noexcept {
    thread_local std::vector<Outgoing> acknowledged;
    {
        std::lock_guard lock(out_mutex_);
        if (state_ == State::established && !armed_write_ && !write_failed_ && !window_.all_written()) {
            last_write_ = Clock::now();
            write_pending();
        }
        window_.take_acknowledged(acknowledged);
    }
    acknowledged.clear(); // freed after the lock
}

bool TcpNode::flush(std::chrono::nanoseconds timeout) {
    check_factory("flush");
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(out_mutex_);
    // The buffers the acknowledgements applied here release are freed in this
    // thread, outside the lock, at once: a stream paced by flush() applies every
    // acknowledgement here, and its sender's next buffers reuse their memory.
    thread_local std::vector<Outgoing> acknowledged;
    const auto free_acknowledged = [&] {
        window_.take_acknowledged(acknowledged);
        if (acknowledged.empty()) return;
        lock.unlock();
        acknowledged.clear();
        lock.lock();
    };
    for (;;) {
        apply_pending_ack();
        if (state_ == State::established) {
            write_pending();
            read_own_acks(Clock::now());
        }
        free_acknowledged();
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
bool Sender::wait_acknowledged(Clock::time_point deadline) {
    std::unique_lock lock(out_mutex_);
    while (!window_.empty() && state_ == State::established && Clock::now() < deadline)
        out_changed_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    return window_.empty();
}

// An acknowledgement of every message before next_expected; false when it
// acknowledges messages never sent.
bool Sender::acknowledged(std::uint64_t next_expected) {
    if (!window_.acknowledge(next_expected)) return false;
    acked_base_.store(window_.acknowledged_to(), std::memory_order_relaxed);
    trimmed();
    return true;
}

// out_mutex_. An acknowledgement the reader saw but could not apply; what waits
// is written after it (it may have waited for room among the unacknowledged) unless
// the caller decides that itself (a send: its batch).
void Sender::apply_pending_ack(bool write) {
    if (!peer_ack_pending_.exchange(false)) return;
    const std::uint64_t to = peer_ack_.load();
    if (!acknowledged(to)) {
        fail_write("an acknowledgement of message " + std::to_string(to) + " never sent");
        return;
    }
    if (write && !window_.all_written() && state_ == State::established) write_pending();
}

void Sender::trimmed() {
    queue_depth_.store(window_.queued(), std::memory_order_relaxed);
    if (window_.empty()) out_changed_.notify_all();
}

} // namespace msgpass::tcp
