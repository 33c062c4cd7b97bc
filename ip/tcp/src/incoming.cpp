// The incoming connection of a TcpNode: the data the peer sends to this process, and
// the acknowledgements this side owes. The background thread installs it after the
// acceptor's side of the handshake (engine.cpp); the receiving thread reads it,
// parses frames into the inbox, and acknowledges what it holds.
#include "engine.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

namespace {

constexpr std::size_t rx_capacity = 256 * 1024;

} // namespace

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
        tune_socket(fd, shared_->parameters.peer_timeout, true); // only acknowledgements go out on it
        in_fd_ = fd;
        // A partial frame of the old connection is dropped: the peer resends it whole.
        assembling_.reset();
        rx_begin_ = rx_end_ = 0;
        ack_tx_len_ = ack_tx_off_ = 0;
        if (restarted && in_window_.incarnation() != incarnation) inbox_.mark_loss();
        in_window_.attach(incarnation); // a new incarnation counts from 0; the same one goes on
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
    loss_.revive(incarnation); // if it was given up for silence, it lives: its later loss is reported again
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
        if (frame == ip::Frame::skip) {
            rx_begin_ += sizeof h;
            if (h.seq < in_window_.expected()) { // a skip back over messages delivered
                violation_ = "node " + std::to_string(id_) + " skipped to message " + std::to_string(h.seq) +
                             " where " + std::to_string(in_window_.expected()) + " was expected";
                shared_->count_refusal(Refusal::protocol_error);
                in_broken();
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
                std::fprintf(stderr, "msgpass tcp node %u: peer %u dropped %llu messages to this node (%llu..%llu)\n",
                             shared_->parameters.self, id_, static_cast<unsigned long long>(skipped),
                             static_cast<unsigned long long>(first), static_cast<unsigned long long>(h.seq - 1));
            }
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

} // namespace msgpass::tcp
