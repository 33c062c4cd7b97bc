// UdpNode: one peer of the udp technology (see node.hpp for the threads and
// docs/udp.md for the protocol): the calls of the application (send, receive,
// flush), the factory's shutdown, the peer's life (contact, incarnations, loss) and
// the timers the background thread runs. Datagrams out: outgoing.cpp; datagrams in
// and reassembly: incoming.cpp.
#include "node.hpp"

#include <msgpass/error.hpp>
#include <msgpass/kit/errors.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace msgpass::udp {

// ---------------------------------------------------------------- node: application side

UdpNode::UdpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer, ip::Address address)
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name), address_(std::move(address)) {
    staging_.resize(shared_->parameters.datagram_size);
    backoff_state_ = shared_->incarnation ^ (std::uint64_t{id_} * 0x9e3779b97f4a7c15ull);
    if (shared_->parameters.auth_key) {
        nonce_ = ip::new_nonce();
        previous_nonce_ = ip::new_nonce();
    }
}

UdpNode::~UdpNode() {
    if (link_fd_ >= 0) ::close(link_fd_);
}

int UdpNode::link_socket() {
    if (link_fd_ != link_unopened) return link_fd_;
    link_fd_ = -1;
    if (address_.empty()) return -1;
    const int s = ip::open_socket(address_.family(), SOCK_DGRAM);
    if (s < 0) return -1;
    ip::Address local = shared_->self_address; // this node's host, any port
    if (local.family() == AF_INET) reinterpret_cast<sockaddr_in*>(&local.storage)->sin_port = 0;
    if (local.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&local.storage)->sin6_port = 0;
    const int buffer =
        static_cast<int>(std::min<std::uint64_t>(shared_->parameters.options.socket_buffer, INT_MAX / 2));
    if (local.family() != address_.family() || ::bind(s, local.get(), local.length) != 0 ||
        ::connect(s, address_.get(), address_.length) != 0) {
        ::close(s);
        return -1;
    }
    if (::setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer) != 0)
        (void)::setsockopt(s, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
    link_fd_ = s;
    return s;
}

NodeStats UdpNode::stats() const noexcept {
    return stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
}

void UdpNode::throw_if_lost() {
    if (!loss_.pending()) return;
    if (auto loss = loss_.take()) {
        stats_.error();
        throw PeerLost(id_, loss->reason, loss->unacknowledged);
    }
}

void UdpNode::send(BufferPtr&& buffer) {
    send_impl(buffer);
}

void UdpNode::send_shared(const SharedBuffer& buffer) {
    SharedBuffer copy = buffer;
    send_impl(copy);
}

void UdpNode::check_size(std::uint64_t size) {
    const auto& p = shared_->parameters;
    if (size > p.max_message_size) {
        stats_.error(); // counted as sci and tcp count it
        kit::throw_message_too_large(*this, size, p.max_message_size);
    }
}

template <class B>
UdpNode::OutMessage& UdpNode::enqueue(B& buffer, bool may_pack) {
    const std::uint64_t size = buffer->size();
    const auto& p = shared_->parameters;
    if (untransmitted_ >= p.send_queue_limit) {
        stats_.error();
        kit::throw_send_queue_full(*this, p.send_queue_limit);
    }
    OutMessage& m = out_.emplace_back();
    m.size = size;
    if (may_pack && frame_bytes(size) <= p.payload) {
        pack(m, *buffer);
        buffer = nullptr; // copied: the caller's buffer goes back now
    } else {
        m.hold(std::move(buffer));
        m.first = next_dseq_;
        m.count = size == 0 ? 1 : (size + p.payload - 1) / p.payload;
        next_dseq_ += m.count;
    }
    ++untransmitted_;
    return m;
}

// group.cpp queues a broadcast's SharedBuffer through it.
template UdpNode::OutMessage& UdpNode::enqueue<SharedBuffer>(SharedBuffer& buffer, bool may_pack);

void UdpNode::pack(OutMessage& m, const Buffer& buffer) {
    const auto& p = shared_->parameters;
    const std::uint64_t bytes = frame_bytes(m.size);
    std::shared_ptr<Pack> open;
    if (out_.size() >= 2) { // (m is out_.back())
        const OutMessage& last = out_[out_.size() - 2];
        if (last.pack && last.first + 1 == next_dseq_ && sent_upto_ < next_dseq_ &&
            last.pack->bytes.size() + bytes <= p.payload) {
            open = last.pack;
        }
    }
    if (open) {
        m.first = next_dseq_ - 1;
    } else {
        open = std::make_shared<Pack>();
        open->bytes.reserve(static_cast<std::size_t>(p.payload));
        m.first = next_dseq_++;
    }
    m.count = 1;
    const std::size_t at = open->bytes.size();
    open->bytes.resize(at + static_cast<std::size_t>(bytes)); // zeros: the reserved field and the padding
    const FrameHeader f{static_cast<std::uint32_t>(frame_header_size + m.size), 0};
    std::memcpy(open->bytes.data() + at, &f, frame_header_size);
    std::size_t to = at + frame_header_size;
    for (const auto& fragment : buffer.fragments()) {
        if (!fragment.empty()) std::memcpy(open->bytes.data() + to, fragment.data(), fragment.size());
        to += fragment.size();
    }
    ++open->frames;
    m.pack = std::move(open);
}

void UdpNode::dispatch(Clock::time_point now) {
    if (peer_incarnation_ == 0 && now >= next_hello_) { // first contact: at once, not at the next tick
        send_hello();
        next_hello_ = now + hello_backoff_;
    }
    pump(now);
    if (sent_upto_ < next_dseq_) stats_.queued();
    queue_depth_.store(untransmitted_, std::memory_order_relaxed);
    shared_->reclaim_if_idle(now); // the acknowledgements: a receiver that left the socket for long reads it no more
}

template <class B>
void UdpNode::send_impl(B& buffer) {
    check_factory("send");
    if (!buffer) kit::throw_null_buffer(*this);
    check_size(buffer->size());
    throw_if_lost();
    std::lock_guard lock(mutex_);
    (void)enqueue(buffer);
    dispatch(Clock::now());
}

BufferPtr UdpNode::take_locked() {
    auto next = inbox_.pop();
    if (!next.message && !next.loss) return nullptr;
    const std::uint64_t datagrams = inbox_datagrams_.front();
    inbox_datagrams_.pop_front();
    held_ -= datagrams;
    if (next.gap) { // the peer dropped messages to us here
        stats_.error();
        throw next.gap->error(id_);
    }
    if (next.loss) {
        if (auto loss = loss_.take()) {
            stats_.error();
            throw PeerLost(id_, loss->reason, loss->unacknowledged);
        }
        return take_locked();
    }
    // The window reopened by a quarter: tell the sender at once.
    if (peer_incarnation_ != 0 && expected_ + advertised() >= status_sent_limit_ + shared_->parameters.window / 4) {
        send_status(Clock::now());
    }
    return std::move(next.message);
}

BufferPtr UdpNode::receive() {
    check_factory("receive");
    std::lock_guard lock(mutex_);
    if (auto m = take_locked()) return m;
    if (inbox_.empty()) throw_if_lost();
    return nullptr;
}

BufferPtr UdpNode::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    return wait_with(
        [this] {
            if (auto m = receive()) return m;
            return shared_->poll_socket() ? receive() : nullptr;
        },
        timeout, SocketSleeper{*shared_}, socket_wait);
}

bool UdpNode::flush(std::chrono::nanoseconds timeout) {
    check_factory("flush");
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(mutex_);
    // Until the peer acknowledged every message: then each is in its inbox, and a
    // receive there finds it (transmitted alone, it may still be in a socket buffer).
    for (;;) {
        pump(Clock::now(), false);
        if (out_.empty()) return true;
        const auto now = Clock::now();
        shared_->reclaim_if_idle(now); // the acknowledgements waited for come through the socket
        if (now >= deadline) return false;
        changed_.wait_until(lock, std::min<Clock::time_point>(deadline, now + std::chrono::milliseconds(1)));
    }
}

bool UdpNode::wait_acknowledged(SteadyTime deadline) {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (out_.empty() || peer_incarnation_ == 0) return out_.empty();
        const auto now = Clock::now();
        if (now >= deadline) return false;
        changed_.wait_until(lock, std::min<Clock::time_point>(deadline, now + std::chrono::milliseconds(1)));
    }
}

void UdpNode::close() {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    // Three times: a goodbye is not acknowledged; losing all three makes the peer
    // report a loss after peer_timeout.
    if (peer_incarnation_ != 0) {
        for (int i = 0; i < 3; ++i)
            send_control(DatagramType::goodbye, next_dseq_, expected_);
    }
    closed_ = true;
}

// ---------------------------------------------------------------- node: peer life

// A clean end (goodbye): the next incarnation numbers from 0.
void UdpNode::reset_send_side() {
    out_.clear();
    next_dseq_ = acked_ = sent_upto_ = peer_limit_ = peer_expected_ = skip_to_ = 0;
    dropped_ends_.clear();
    numbered_for_ = 0;
    untransmitted_ = 0;
    queue_depth_.store(0, std::memory_order_relaxed);
    changed_.notify_all();
}

// The messages the peer did not acknowledge are dropped, but their numbers stay
// spent: if the incarnation lives (it was given up for silence: a one-way outage, a
// stalled process), it goes on counting our datagrams, and learns from a skip that
// the ones before skip_to_ it lacks will never come.
void UdpNode::drop_unacknowledged() {
    for (const auto& m : out_)
        if (m.first + m.count > acked_) dropped_ends_.push_back(m.first + m.count);
    out_.clear();
    acked_ = sent_upto_ = next_dseq_;
    if (!dropped_ends_.empty()) skip_to_ = next_dseq_;
    expected_heard_ = false; // what the peer expects is asked again once it is heard
    untransmitted_ = 0;
    queue_depth_.store(0, std::memory_order_relaxed);
    changed_.notify_all();
}

// Every message queued now was queued after the loss of the previous incarnation,
// and none was transmitted (nothing is while the peer is unknown): numbered from 0
// for the new one.
void UdpNode::renumber() {
    std::uint64_t n = 0;
    const Pack* last = nullptr;
    for (auto& m : out_) {
        if (m.pack && m.pack.get() == last) { // the same datagram as the message before
            m.first = n - 1;
            continue;
        }
        last = m.pack.get();
        m.first = n;
        n += m.count;
        m.multicast.reset(); // (none went to the address: the peer was unknown)
    }
    next_dseq_ = n;
    acked_ = sent_upto_ = peer_limit_ = peer_expected_ = skip_to_ = 0;
    dropped_ends_.clear();
    untransmitted_ = out_.size();
    queue_depth_.store(untransmitted_, std::memory_order_relaxed);
}

void UdpNode::reset_receive_side() {
    expected_ = highest_ = 0;
    early_.clear();
    assembling_.reset();
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    status_sent_expected_ = status_sent_limit_ = since_status_ = 0;
    status_owed_ = small_since_status_ = false;
    group_stream_ = nak_pending_ = false;
}

// The peer's incarnation is lost: what it did not acknowledge is counted and dropped,
// and the loss is reported once (after the messages that arrived before it, when mark).
// The numbering of both directions goes on (an incarnation given up for silence may
// live); a new incarnation starts from 0 (adopt).
void UdpNode::lose(const std::string& reason, std::uint64_t unacknowledged, bool mark, bool may_live) {
    const std::uint64_t incarnation = peer_incarnation_;
    drop_unacknowledged();
    peer_incarnation_ = 0;
    hello_backoff_ = std::chrono::milliseconds(2);
    if (shared_->parameters.auth_key) { // a welcome recorded before the loss proves nothing now
        previous_nonce_ = nonce_;
        nonce_ = ip::new_nonce();
    }
    if (incarnation == 0 || loss_.raised_for(incarnation)) return;
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") lost: " + reason +
                             " (" + std::to_string(unacknowledged) + " messages unacknowledged)";
    loss_.raise(incarnation, text, unacknowledged, may_live);
    if (mark) {
        inbox_.mark_loss();
        inbox_datagrams_.push_back(0);
    }
    shared_->ring();
}

void UdpNode::adopt(std::uint64_t incarnation, Clock::time_point now) {
    if (incarnation == peer_incarnation_) return;
    if (peer_incarnation_ != 0) lose("it restarted (a new incarnation)", out_.size(), true);
    peer_incarnation_ = incarnation;
    if (incarnation != numbered_for_) { // a new incarnation counts both directions from 0
        renumber();
        reset_receive_side();
        numbered_for_ = incarnation;
    } else {
        loss_.revive(incarnation); // given up for silence, it lives: a later loss is reported again
    }
    last_heard_ = now;
    last_progress_ = now;
    shared_->ring();
}

void UdpNode::send_hello() {
    if (shared_->parameters.auth_key) {
        (void)send_control(DatagramType::hello, 0, 0, std::as_bytes(std::span(nonce_)));
    } else {
        (void)send_control(DatagramType::hello, 0, 0);
    }
}

void UdpNode::send_welcome(const ip::Nonce* hello_nonce) {
    if (hello_nonce != nullptr && shared_->parameters.auth_key) {
        (void)send_control(DatagramType::welcome, expected_, advertised(), {}, hello_nonce);
    } else {
        (void)send_control(DatagramType::welcome, expected_, advertised());
    }
}

void UdpNode::refuse_unproven(Clock::time_point now) {
    if (now < next_challenge_) return;
    next_challenge_ = now + resend_timeout;
    send_hello();
}

// With auth_key_file a peer's incarnation is trusted (adopted) only once its welcome
// carries the MAC, under the partition's key, of that welcome's header and the nonce
// of our hello: a peer without the key cannot make it, and a recorded welcome answers
// a nonce we no longer use. A hello is answered with such a welcome (that proves us
// to the peer, whichever incarnation it is); if the peer is not proven yet, our own
// hello asks it to prove itself. Until then its datagrams are dropped as
// unauthenticated (the peer resends them once it trusts us and we trust it).
void UdpNode::on_contact_authenticated(const Decoded& d, std::span<const std::byte> bytes, Clock::time_point now) {
    const DatagramHeader& h = d.header;
    const auto& key = *shared_->parameters.auth_key;
    const std::string who =
        "node " + std::to_string(id_) + " (" + name_ + ") incarnation " + std::to_string(h.incarnation);
    if (d.payload.size() != auth_payload_size) {
        shared_->count(Drop::unauthenticated);
        shared_->log_refusal("refused " + who + ": its " +
                             (h.type == static_cast<std::uint16_t>(DatagramType::hello) ? "hello carries no nonce"
                                                                                        : "welcome carries no MAC") +
                             " (auth_key_file is set here: does it have the key?)");
        return;
    }
    if (h.type == static_cast<std::uint16_t>(DatagramType::hello)) {
        ip::Nonce theirs{};
        std::memcpy(theirs.data(), d.payload.data(), theirs.size());
        send_welcome(&theirs);
        if (h.incarnation == peer_incarnation_) {
            last_heard_ = now;
            pump(now);
        } else {
            refuse_unproven(now);
        }
        return;
    }
    ip::Mac got{};
    std::memcpy(got.data(), d.payload.data(), got.size());
    const auto header = bytes.first(header_size);
    if (!ip::same_mac(got, welcome_mac(key, header, nonce_))) {
        if (ip::same_mac(got, welcome_mac(key, header, previous_nonce_))) {
            shared_->count(Drop::stale); // a late answer to a hello before the last change
        } else {
            shared_->count(Drop::bad_proof);
            shared_->log_refusal("refused " + who +
                                 ": its welcome does not prove the partition's key for our hello "
                                 "(another key, or a recorded welcome replayed)");
        }
        return;
    }
    if (h.incarnation != peer_incarnation_) {
        adopt(h.incarnation, now);
        previous_nonce_ = nonce_; // a welcome recorded now cannot be replayed to a later hello
        nonce_ = ip::new_nonce();
    }
    last_heard_ = now;
    multicast_ok_ = (h.flags & flag_joined) != 0;
    if (h.peer_incarnation == shared_->incarnation) acknowledge(h.seq, h.length, now);
    pump(now);
}

void UdpNode::on_datagram(const Decoded& d, std::span<const std::byte> bytes, Clock::time_point now) {
    const DatagramHeader& h = d.header;
    const auto type = static_cast<DatagramType>(h.type);
    std::lock_guard lock(mutex_);
    if (h.incarnation == ended_incarnation_) {
        shared_->count(Drop::stale);
        return;
    }
    if ((type == DatagramType::hello || type == DatagramType::welcome) && shared_->parameters.auth_key) {
        on_contact_authenticated(d, bytes, now);
        return;
    }
    if (type == DatagramType::hello || type == DatagramType::welcome) {
        adopt(h.incarnation, now);
        last_heard_ = now;
        multicast_ok_ = (h.flags & flag_joined) != 0;
        if (type == DatagramType::hello) {
            send_welcome(nullptr);
        } else if (h.peer_incarnation == shared_->incarnation) {
            acknowledge(h.seq, h.length, now);
        }
        pump(now);
        return;
    }
    // Every other datagram names this process's incarnation: one that names an
    // earlier one (or none) was meant for a process that is gone; its sender learns
    // who we are from a welcome.
    if (h.peer_incarnation != shared_->incarnation) {
        shared_->count(Drop::stale);
        if (shared_->parameters.auth_key) {
            // It learns who we are from our welcome to its hello, which it sends until
            // it trusts us; an incarnation we do not trust yet is asked to prove itself.
            if (h.incarnation != peer_incarnation_) refuse_unproven(now);
            return;
        }
        if (h.incarnation != peer_incarnation_) adopt(h.incarnation, now);
        send_welcome(nullptr);
        return;
    }
    if (shared_->parameters.auth_key && h.incarnation != peer_incarnation_) {
        shared_->count(Drop::unauthenticated);
        refuse_unproven(now);
        return;
    }
    adopt(h.incarnation, now);
    last_heard_ = now;
    switch (type) {
    case DatagramType::data:
        on_data(d, now);
        break;
    case DatagramType::status:
    case DatagramType::keepalive:
        multicast_ok_ = (h.flags & flag_joined) != 0;
        acknowledge(h.seq, h.length, now);
        break;
    case DatagramType::skip:
        on_skip(h, now);
        break;
    case DatagramType::nak: {
        peer_expects(h.seq); // a NAK names the peer's next expected datagram too
        std::uint64_t budget = nak_burst;
        for (std::size_t i = 0; i + 16 <= d.payload.size() && budget > 0; i += 16) {
            std::uint64_t first = 0, count = 0;
            std::memcpy(&first, d.payload.data() + i, 8);
            std::memcpy(&count, d.payload.data() + i + 8, 8);
            if (first >= sent_upto_ || count > sent_upto_ - first) {
                shared_->count(Drop::beyond_window);
                return;
            }
            for (std::uint64_t s = std::max(first, acked_); s < first + count && budget > 0; ++s, --budget)
                repair(s, now);
        }
        break;
    }
    case DatagramType::goodbye: {
        // seq: datagrams it sent us; length: the next it expected of ours.
        const std::uint64_t incarnation = peer_incarnation_;
        std::uint64_t unacknowledged = 0;
        for (const auto& m : out_)
            if (m.first + m.count > h.length) ++unacknowledged;
        if (unacknowledged > 0 || h.seq > expected_) {
            lose(h.seq > expected_ ? "it closed before its last messages arrived"
                                   : "it closed without taking every message",
                 unacknowledged, true);
        }
        reset_send_side(); // it ended: its next incarnation numbers from 0
        reset_receive_side();
        peer_incarnation_ = 0;
        ended_incarnation_ = incarnation;
        shared_->ring();
        break;
    }
    default:
        break;
    }
}

// ---------------------------------------------------------------- node: timers

Clock::time_point UdpNode::end_of_batch(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (peer_incarnation_ == 0) return Clock::time_point::max();
    // A NAK backing off is sent by the background thread (tick), once it read the
    // multicast socket (the hole may be a datagram still there, behind one that came
    // on the other socket): when due, it is woken.
    const auto due = nak_pending_ ? nak_due_ : Clock::time_point::max();
    if (!status_owed_) return due;
    // (small messages: the sender may hold a packed datagram until it hears)
    if (now >= status_owed_since_ + status_delay || (small_since_status_ && since_status_ >= hold_in_flight)) {
        send_status(now);
        return due;
    }
    return std::min(due, status_owed_since_ + status_delay);
}

Clock::time_point UdpNode::tick(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    const auto& p = shared_->parameters;
    auto next = now + std::chrono::milliseconds(50);
    if (closed_) return next;
    if (peer_incarnation_ == 0) {
        if (!out_.empty() && !address_.empty()) {
            if (now >= next_hello_) {
                send_hello();
                hello_backoff_ = std::min<std::chrono::nanoseconds>(hello_backoff_ * 2, std::chrono::milliseconds(100));
                next_hello_ = now + hello_backoff_;
            }
            next = std::min(next, next_hello_);
        }
        return next;
    }
    if (now - last_heard_ > p.peer_timeout) {
        lose("silent for peer_timeout (" +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(p.peer_timeout).count()) + " ms)",
             out_.size(), true, true);
        return next;
    }
    pump(now, false); // with the skip first, when the peer may lack datagrams dropped at its loss
    next = std::min(next, now + resend_timeout); // a send may start a stream between ticks
    if (acked_ < sent_upto_) {
        if (now - last_progress_ >= resend_timeout) {
            (void)transmit(acked_, true);
            if (sent_upto_ - 1 != acked_) (void)transmit(sent_upto_ - 1, true);
            last_progress_ = now;
        }
        next = std::min(next, last_progress_ + resend_timeout);
    }
    // Messages wait for the peer's window while everything sent was acknowledged:
    // the window was never told (we adopted the peer from its hello, whose welcome
    // went the other way), or the status that opened it was lost. Probe with a hello,
    // which the peer answers with a welcome naming its window (as TCP's persist timer
    // does), every resend_timeout until it opens. (With datagrams unacknowledged, the
    // resends above are the probe; a peer that refuses them falls silent and is lost.)
    if (acked_ == sent_upto_ && sent_upto_ < next_dseq_ && sent_upto_ >= peer_limit_) {
        if (now - last_probe_ >= resend_timeout) {
            send_hello();
            last_probe_ = now;
        }
        next = std::min(next, last_probe_ + resend_timeout);
    }
    if (nak_pending_) {
        nak_if_due(now);
        if (nak_pending_) next = std::min(next, nak_due_);
    }
    if (!early_.empty()) {
        const auto repeat = group_stream_ ? std::chrono::duration_cast<Clock::duration>(nak_interval)
                                          : std::chrono::duration_cast<Clock::duration>(nak_repeat);
        if (now - last_nak_ >= repeat) send_nak(now);
        next = std::min(next, last_nak_ + repeat);
    }
    if (status_owed_) {
        if (now >= status_owed_since_ + status_delay) {
            send_status(now);
        } else {
            next = std::min(next, status_owed_since_ + status_delay);
        }
    }
    const auto keepalive = std::chrono::duration_cast<Clock::duration>(p.peer_timeout / 4);
    if (now - last_sent_ >= keepalive) {
        const std::uint64_t limit = std::max(status_sent_limit_, expected_ + advertised());
        send_control(DatagramType::keepalive, expected_, limit - expected_);
        status_sent_limit_ = limit;
    }
    next = std::min(next, last_sent_ + keepalive);
    next = std::min(next, last_heard_ + std::chrono::duration_cast<Clock::duration>(p.peer_timeout) +
                              std::chrono::milliseconds(1));
    return next;
}

} // namespace msgpass::udp
