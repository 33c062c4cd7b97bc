// The receive side of one peer: Receiver's methods (receiver.hpp), reading and
// parsing frames into the inbox and taking messages out of it, and TcpNode's that
// need the send side too: installing a connection the peer opened (after the
// acceptor's side of the handshake, transport.cpp, and the tie-break of two
// crossing connections), applying what a read found (acknowledgements, the peer's
// resume), and the acknowledgements this side owes (carried by its data frames,
// alone when none go). The application's receive reads; the background thread reads
// when the application does not and an acknowledgement is awaited.
#include "node.hpp"
#include <msgpass/log.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

bool TcpNode::crosses() const {
    std::lock_guard lock(out_mutex_);
    return crosses_locked(Clock::now());
}

bool TcpNode::accept_connection(int fd, std::uint64_t incarnation) {
    std::lock_guard in_lock(in_mutex_);
    std::lock_guard lock(out_mutex_);
    const auto now = Clock::now();
    if (crosses_locked(now)) return false;
    const bool ours_in_flight = state_ == State::connecting || state_ == State::handshaking;
    if (ours_in_flight && fd_ >= 0) { // the higher id gives its attempt up; the peer refuses it
        shared_->epoll.remove(fd_);
        if (abandoned_fd_ >= 0) ::close(abandoned_fd_);
        abandoned_fd_ = fd_;
        abandoned_hello_ = state_ == State::connecting;
        abandoned_at_ = now;
        close_bell();
        fd_ = -1;
    }
    install(fd);
    opened_here_ = false;
    connected_at_ = now;
    framed_ = true;
    state_ = State::resuming; // our messages wait for the peer's resume frame
    attach_in(incarnation);
    Welcome w = ip::make_welcome(protocol, shared_->parameters.self, id_, shared_->incarnation, in_window_.expected());
    if (shared_->compact_frames) w.reserved |= compact_frames_bit;
    (void)::send(fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL); // a fresh socket takes 40 bytes at once
    reconnect_.connected();
    next_answer_check_ = Clock::now() + answer_check_period();
    tell_receivers();
    return true;
}

// in_mutex_. Forgets what was read of the connection: a partial frame is sent again.
void Receiver::reset_in() {
    assembling_.reset();
    low_water_ = 1; // the next connection's socket starts at the default
    rx_.clear();    // a message lent from the read buffer stays as it is (read_chunk.hpp)
}

// in_mutex_. Writes the acknowledgement owed alone, when out_mutex_ is free (else
// the background thread does). A sender that writes data carries it anyway.
void TcpNode::send_ack() {
    if (ack_avail_.load() == ack_sent_.load()) {
        (void)in_window_.acknowledge();
        return;
    }
    std::unique_lock lock(out_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
        ack_wanted_.store(true);
        shared_->wake_io();
        return;
    }
    send_ack_locked();
}

// Both locks.
void TcpNode::send_ack_locked() {
    const std::uint64_t avail = ack_avail_.load();
    if (avail == ack_sent_.load()) {
        (void)in_window_.acknowledge();
        return;
    }
    if (fd_ < 0 || write_failed_ || (state_ != State::established && state_ != State::resuming)) return;
    (void)in_window_.acknowledge();
    if (!window_.all_written() && state_ == State::established) {
        write_pending(); // the data carries it
        if (ack_sent_.load() == avail) return;
    }
    if (window_.offset() != 0) return; // within a frame: the next data frame carries it
    queue_control(ack_frame(avail));
    ack_sent_.store(avail);
    standalone_acks_.fetch_add(1, std::memory_order_relaxed);
}

// in_mutex_. Whether an acknowledgement must go alone now: ack_every messages
// arrived since the peer last learnt of any (from one written alone or from the
// acknowledgement every data frame carries), or ack_bytes since the last one written
// alone. Counting only those written alone wrote one before every 64th reply of a
// request-response exchange, which the reply itself acknowledged a moment later.
bool Receiver::ack_due() const {
    const std::uint64_t avail = ack_avail_.load(std::memory_order_relaxed);
    const std::uint64_t sent = ack_sent_.load(std::memory_order_relaxed);
    return (avail > sent && avail - sent >= shared_->parameters.ack_every) ||
           in_window_.ack_due(std::numeric_limits<std::uint64_t>::max(), shared_->parameters.ack_bytes);
}

void Receiver::deliver(BufferPtr message) {
    message->set_source(id_);
    in_window_.delivered(message->size());
    if (direct_ && inbox_.empty()) { // behind a marker, the inbox keeps the order
        taken_.push_back(std::move(message));
        return;
    }
    ++inbox_count_;
    inbox_.push(std::move(message));
}

// Parses every whole frame in rx_: messages into the inbox, acknowledgements,
// goodbye and resume into c; a data frame too large for what is left of rx_ becomes
// the message being assembled, read straight into its buffer.
void Receiver::parse_in_buffer(Control& c) {
    const auto& p = shared_->parameters;
    std::size_t& rx_begin_ = rx_.begin;
    std::size_t& rx_end_ = rx_.end;
    // Messages lent from the chunk by this parse: its count of references grows by
    // them in one step at the end, before any is handed out.
    std::size_t lent = 0;
    struct Lend {
        ReadBuffer& rx;
        std::size_t& n;
        ~Lend() {
            if (n > 0) rx.chunk()->lend(n);
        }
    } lend{rx_, lent};
    const bool lending = lend_ && direct_ && inbox_.empty();
    const bool compact = shared_->compact_frames;
    while (!assembling_ && rx_end_ - rx_begin_ >= compact_header_size) {
        // A compact data frame (frame.hpp) stands for a data frame of the next
        // expected number; everything else is a full header.
        std::size_t header = sizeof(FrameHeader);
        FrameHeader h;
        std::uint32_t word[2];
        std::memcpy(word, rx_.data() + rx_begin_, sizeof word);
        if (const std::uint32_t tag = compact ? compact_tag(word[0]) : 0; tag != 0) {
            header = compact_header_size;
            h.length = word[0] & compact_max_length;
            h.seq = in_window_.expected();
            h.type = static_cast<std::uint32_t>(tag == compact_data_acked ? FrameType::data_acked : FrameType::data);
            h.flags = word[1];
            if (tag == compact_data && word[1] != 0) { // no acknowledgement where none belongs
                violation_ =
                    "node " + std::to_string(id_) + " sent a compact frame with flags " + std::to_string(word[1]);
                shared_->count_refusal(Refusal::protocol_error);
                c.bad_ack = true;
                return;
            }
        } else {
            if (rx_end_ - rx_begin_ < sizeof(FrameHeader)) break;
            h = decode(rx_.data() + rx_begin_);
        }
        if (header == sizeof(FrameHeader) && h.length == 0 &&
            (h.type == static_cast<std::uint32_t>(FrameType::ack) ||
             h.type == static_cast<std::uint32_t>(FrameType::goodbye) ||
             h.type == static_cast<std::uint32_t>(FrameType::resume))) {
            rx_begin_ += sizeof h;
            if (h.type == static_cast<std::uint32_t>(FrameType::resume)) {
                c.resume = true;
                c.resume_to = h.seq;
                c.resume_compact = (h.flags & compact_frames_bit) != 0;
                continue;
            }
            if (!c.ack || h.seq > c.ack_to) c.ack_to = h.seq;
            c.ack = true;
            if (h.type == static_cast<std::uint32_t>(FrameType::goodbye)) {
                c.goodbye = true;
                in_goodbye_ = true;
                known_incarnation_.store(0); // a clean end: a later refusal is not a loss
            }
            continue;
        }
        if (h.type == static_cast<std::uint32_t>(FrameType::data_acked)) {
            // The peer's acknowledgement in 32 bits, widened from the last one applied:
            // acknowledgements only grow, and fewer than 2^32 messages are ever unacknowledged.
            const std::uint64_t base = acked_base_.load(std::memory_order_relaxed);
            const std::uint64_t to = base + static_cast<std::uint32_t>(h.flags - static_cast<std::uint32_t>(base));
            if (!c.ack || to > c.ack_to) c.ack_to = to;
            c.ack = true;
            h.type = static_cast<std::uint32_t>(FrameType::data);
            h.flags = 0;
        }
        const Frame frame = check_data_side(h, p.max_message_size);
        if (frame == Frame::goodbye) { // a goodbye with a payload
            violation_ = "node " + std::to_string(id_) + " sent a goodbye of " + std::to_string(h.length) + " bytes";
            shared_->count_refusal(Refusal::protocol_error);
            c.bad_ack = true;
            return;
        }
        if (frame == Frame::skip) {
            rx_begin_ += sizeof h;
            if (h.seq < in_window_.expected()) { // a skip back over messages delivered
                violation_ = "node " + std::to_string(id_) + " skipped to message " + std::to_string(h.seq) +
                             " where " + std::to_string(in_window_.expected()) + " was expected";
                shared_->count_refusal(Refusal::protocol_error);
                c.bad_ack = true;
                return;
            }
            const std::uint64_t first = in_window_.expected();
            if (const std::uint64_t skipped = in_window_.skip_to(h.seq); skipped > 0) {
                // The peer gave this node up while it lived and dropped these messages:
                // reported after what arrived before them, before what follows.
                inbox_.mark_gap(ip::Loss{
                    "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") dropped " +
                        std::to_string(skipped) + " messages to this node (numbers " + std::to_string(first) + ".." +
                        std::to_string(h.seq - 1) +
                        ") after declaring this node lost (no connection for peer_timeout); its messages go on "
                        "from number " +
                        std::to_string(h.seq),
                    0});
                MSGPASS_LOG(tcp, warn,
                            "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": peer " +
                                std::to_string(id_) + " dropped " + std::to_string(skipped) +
                                " messages to this node (" + std::to_string(first) + ".." + std::to_string(h.seq - 1) +
                                ")");
                ack_avail_.store(in_window_.expected());
            }
            continue;
        }
        if (frame != Frame::data) {
            violation_ = "node " + std::to_string(id_) + " sent " + describe_fault(h, frame, p.max_message_size);
            shared_->count_refusal(refusal_of(frame));
            c.bad_ack = true;
            return;
        }
        if (in_window_.classify(h.seq) != ReceiveWindow::Arrival::in_order) { // a stream neither repeats nor skips
            violation_ = "node " + std::to_string(id_) + " sent message " + std::to_string(h.seq) + " where " +
                         std::to_string(in_window_.expected()) + " was expected";
            shared_->count_refusal(Refusal::protocol_error);
            c.bad_ack = true;
            return;
        }
        const std::size_t have = rx_end_ - rx_begin_ - header;
        if (have >= h.length) {
            if (lending && inbox_.empty()) { // a marker stops the lending: the inbox keeps the order
                const auto size = static_cast<std::size_t>(h.length);
                taken_.emplace_back(rx_.data() + rx_begin_ + header, size, rx_.chunk());
                ++lent;
                if (size >= large_ack_size) c.large = true;
                in_window_.delivered(size);
                rx_begin_ += header + size;
                c.delivered = true;
                continue;
            }
            auto m = shared_->pool->make(static_cast<std::size_t>(h.length));
            std::memcpy(m->single()->data(), rx_.data() + rx_begin_ + header, static_cast<std::size_t>(h.length));
            rx_begin_ += header + h.length;
            if (h.length >= large_ack_size) c.large = true;
            deliver(std::move(m));
            c.delivered = true;
            continue;
        }
        // The header stays in rx_ until the whole frame is there (its acknowledgement
        // is taken again then, which changes nothing).
        if (rx_begin_ + header + h.length <= rx_.size()) break; // fits: wait for the rest in rx_
        assembling_ = shared_->pool->make(static_cast<std::size_t>(h.length));
        assembling_data_ = assembling_->single()->data();
        std::memcpy(assembling_data_, rx_.data() + rx_begin_ + header, have);
        assembled_ = have;
        rx_begin_ = rx_end_;
        rx_.rewind(lent == 0);
    }
    rx_.rewind(lent == 0);
}

// in_mutex_. Reads what the socket holds (a few rounds of the read buffer) and
// parses it.
Receiver::Control Receiver::read_in_side() {
    Control c;
    rx_.ensure(shared_->chunks);
    std::size_t& rx_begin_ = rx_.begin;
    std::size_t& rx_end_ = rx_.end;
    drained_ = false;
    for (int round = 0; round < 4 && fd_ >= 0 && framed_; ++round) {
        ssize_t got = 0;
        std::size_t asked = 0;
        if (assembling_) {
            asked = assembling_->size() - assembled_;
            got = ::recv(fd_, assembling_data_ + assembled_, asked, MSG_DONTWAIT);
        } else {
            if (rx_begin_ > 0 && rx_.size() - rx_end_ < sizeof(FrameHeader) + 4096) rx_.compact();
            asked = rx_.size() - rx_end_;
            got = ::recv(fd_, rx_.data() + rx_end_, asked, MSG_DONTWAIT);
        }
        // The kernel gave everything it had (less than asked, or nothing): the socket
        // is drained, and its readiness says when more comes.
        drained_ =
            got > 0 ? static_cast<std::size_t>(got) < asked : got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        if (direct_) {
            socket_reads_.store(socket_reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
            if (got < 0)
                empty_reads_.store(empty_reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        }
        if (got == 0) {
            c.closed = true;
            break;
        }
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) c.closed = true;
            break;
        }
        if (assembling_) {
            assembled_ += static_cast<std::size_t>(got);
            if (assembled_ == assembling_->size()) {
                const bool large = assembled_ >= large_ack_size;
                deliver(std::move(assembling_));
                c.delivered = true;
                assembled_ = 0;
                if (large) { // its acknowledgement goes now (after_read); the rest is read next time
                    c.large = true;
                    break;
                }
            }
            continue;
        }
        rx_end_ += static_cast<std::size_t>(got);
        parse_in_buffer(c);
        if (c.bad_ack) break;
        if ((c.delivered || !inbox_.empty()) && rx_end_ < rx_.size()) break; // the socket is drained for now
    }
    if (c.delivered) ack_avail_.store(in_window_.expected(), std::memory_order_release);
    if (!assembling_) rx_.shelve(shared_->chunks); // an idle connection holds no chunk
    // A large message read in pieces: whoever waits for the socket (the receiving
    // thread's poll, a group's epoll set, the background thread) wakes once the rest
    // of it is there, not at every segment that arrives, each of which was a wake-up
    // and an interrupt on the sending CPU; a message above whole_wait_max wakes it
    // every low_water_step (waiting for more of it closed the receive window on its
    // sender and stopped the stream: 4 MiB at 0.73x raw TCP against 0.90x).
    // The end of the connection or an error still wakes at once; the kernel caps the
    // mark at half its largest receive buffer and grows the socket's buffer to hold it.
    std::size_t mark = 1;
    if (assembling_ && !c.closed) {
        mark = assembling_->size() - assembled_;
        if (assembling_->size() > whole_wait_max) mark = std::min(mark, low_water_step);
    }
    set_low_water(mark);
    return c;
}

// in_mutex_. Lowered as the message fills (a mark above what is still to come would
// never be reached), back to 1 once it is whole.
void Receiver::set_low_water(std::size_t bytes) {
    const int want = static_cast<int>(bytes);
    if (fd_ < 0 || want == low_water_ || (want > low_water_ && low_water_ != 1)) return;
    if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) {
        low_water_ = want;
        return;
    }
    const int one = 1; // refused: the default, which every byte reaches
    if (::setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one) == 0) low_water_ = one;
}

// Both locks. What a read found besides messages.
void TcpNode::apply(const Control& c) {
    if (c.ack && !c.bad_ack) {
        if (!acknowledged(c.ack_to)) { // the connection is made again; the messages are kept and resent
            broken("protocol error from the peer (an acknowledgement of messages never sent)");
            return;
        }
        if (c.goodbye) peer_said_goodbye_ = true;
    }
    if (c.resume && !c.bad_ack) {
        if (state_ != State::resuming) {
            violation_ = "node " + std::to_string(id_) + " sent a resume frame on a connection it did not open";
            shared_->count_refusal(Refusal::protocol_error);
            broken("protocol error from the peer (resume)");
            return;
        }
        if (!resume_window(in_window_.incarnation(), c.resume_to, c.resume_compact)) return;
    }
    if (c.bad_ack || c.closed) {
        broken(c.bad_ack ? "protocol error from the peer" : "connection closed by the peer");
        return;
    }
    if (c.delivered && (c.large || ack_due())) send_ack_locked();
    if (state_ == State::established && !window_.all_written() && !armed_write_) write_pending();
}

// in_mutex_, after the application's read: the acknowledgement and the rest are
// applied when out_mutex_ is free; else the background thread applies them. The
// end of a connection or a resume always waits for the lock.
void TcpNode::after_read(std::unique_lock<std::mutex>& in_lock, const Control& c, bool background) {
    (void)in_lock;
    if (c.bad_ack || c.closed || c.resume || c.goodbye) {
        {
            std::lock_guard lock(out_mutex_);
            apply(c);
            window_.take_acknowledged(rx_acknowledged_);
        }
        rx_acknowledged_.clear(); // freed outside out_mutex_: senders do not wait for free()
        return;
    }
    if (c.ack) {
        std::uint64_t seen = peer_ack_.load();
        while (c.ack_to > seen && !peer_ack_.compare_exchange_weak(seen, c.ack_to)) {
        }
        peer_ack_pending_.store(true);
        // While the application sends, its next send applies the acknowledgement and
        // frees the buffers in the thread that made them (the per-thread block cache
        // then hands them back without a trip through the shared depot); the
        // background thread's tick applies it when the sends stop.
        if (!background || !sending(Clock::now())) {
            std::unique_lock lock(out_mutex_, std::try_to_lock);
            if (lock.owns_lock()) {
                apply_pending_ack();
                window_.take_acknowledged(rx_acknowledged_);
                lock.unlock();
                rx_acknowledged_.clear();
            } else {
                shared_->wake_io();
            }
        }
    }
    if (c.delivered && (c.large || ack_due())) send_ack();
}

// Background thread: reads the connection for the acknowledgements the application
// does not read (or the peer's resume frame, or the end of the connection). Both
// locks are taken here (in_mutex_ first).
void TcpNode::read_background() {
    // The caller holds in_mutex_ (on_event); out_mutex_ is taken for apply.
    if (fd_ < 0 || !framed_) return;
    const Control c = read_in_side();
    {
        std::lock_guard lock(out_mutex_);
        apply(c);
    }
    if (c.delivered || c.bad_ack || c.closed) tell_receivers();
}

// in_mutex_. Moves the next messages of the inbox, up to the next marker (at most
// take_batch), to the receiving thread's own list, which take_taken() and
// lend_taken() empty without the lock; at the marker of a restarted peer, the loss of
// its old incarnation is raised (unless a send raised it already). Whether the list
// has a message.
bool Receiver::take_locked(std::unique_lock<std::mutex>& lock) {
    if (has_taken()) return true; // taken before this lock: they come first
    while (!inbox_.empty()) {
        if (const std::size_t moved = inbox_.pop_messages(taken_, take_batch); moved > 0) {
            inbox_count_ -= moved;
            // The application reads this connection (what the background thread read
            // for it first): the background thread leaves the socket to it (tick,
            // on_event). Before, only the application's own reads of the socket
            // counted, so that once the background thread had read for
            // acknowledgements while the application was away for ack_delay, it went on
            // reading every message of a busy stream into the inbox (a buffer and a
            // copy each, in its own thread, and a wake-up per arrival) for as long as
            // the application took them from there: the DAQ's event builder.
            last_app_read_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
            return true;
        }
        auto next = inbox_.pop();
        if (next.gap) { // the peer dropped messages to us here
            stats_.error();
            lock.unlock();
            throw PeerLost(id_, next.gap->reason, next.gap->unacknowledged);
        }
        lock.unlock();
        throw_if_lost(); // the lock is not held while the exception leaves
        lock.lock();
    }
    return false;
}

// A message lent and then taken by receive(): copied into a buffer, as before views.
BufferPtr Held::copy_out(BufferPool& pool, NodeId source) {
    auto m = pool.make(size_);
    if (size_ > 0) std::memcpy(m->single()->data(), data_, size_);
    m->set_source(source);
    chunk_->release();
    return m;
}

// The receiving thread (one at a time, node.hpp): the next message moved out of the
// inbox by take_locked, or parsed by its own read. The statistics are counted as each
// message is handed out, by loads and stores (one writer), not locked
// read-modify-writes.
BufferPtr Receiver::take_taken() {
    if (taken_at_ == taken_.size()) return nullptr;
    BufferPtr m = taken_[taken_at_++].to_buffer(*shared_->pool, id_);
    if (taken_at_ == taken_.size()) {
        taken_.clear();
        taken_at_ = 0;
    }
    stats_.received_serialized(m->size());
    takes_.store(takes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return m;
}

// As take_taken, lent: no buffer for a message lent from the read buffer.
MessageView Receiver::lend_taken() {
    if (taken_at_ == taken_.size()) return {};
    MessageView v = taken_[taken_at_++].to_view(id_);
    if (taken_at_ == taken_.size()) {
        taken_.clear();
        taken_at_ = 0;
    }
    stats_.received_serialized(v.size());
    takes_.store(takes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return v;
}

} // namespace msgpass::tcp
