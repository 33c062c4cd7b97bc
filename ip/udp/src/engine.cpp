// The udp engine: the socket, the background thread, and every node's datagrams.
#include "engine.hpp"

#include <msgpass/error.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace msgpass::udp {

Parameters Parameters::from(const config::Configuration& configuration, NodeId self) {
    Parameters p;
    p.self = self;
    p.partition = configuration.partition;
    p.partition_hash = udp::partition_hash(configuration.partition);
    p.max_message_size = std::min<std::uint64_t>(configuration.max_message_size, 0xffffffffull);
    p.peer_timeout = configuration.peer_timeout;
    p.send_queue_limit = configuration.send_queue_limit;
    p.options = configuration.section<Options>();
    p.datagram_size = static_cast<std::size_t>(p.options.datagram_size);
    p.payload = p.datagram_size - header_size;
    p.window = p.options.window;
    return p;
}

Shared::Shared(Parameters p) : parameters(std::move(p)), incarnation(ip::new_incarnation()) {}

// ---------------------------------------------------------------- node: application side

UdpNode::UdpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer, ip::Address address)
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name), address_(std::move(address)) {
    staging_.resize(shared_->parameters.datagram_size);
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

template <class B>
void UdpNode::send_impl(B& buffer) {
    if (!buffer) throw UsageError("send: a null buffer");
    const std::uint64_t size = buffer->size();
    const auto& p = shared_->parameters;
    if (size > p.max_message_size) {
        throw MessageTooLarge("a message of " + std::to_string(size) + " bytes exceeds max_message_size (" +
                              std::to_string(p.max_message_size) + " bytes)");
    }
    throw_if_lost();
    std::lock_guard lock(mutex_);
    if (closed_) throw UsageError("send to node " + std::to_string(id_) + " after its factory was destroyed");
    if (untransmitted_ >= p.send_queue_limit) {
        throw SendQueueFull("the send queue to node " + std::to_string(id_) + " holds send_queue_limit (" +
                            std::to_string(p.send_queue_limit) + ") messages");
    }
    OutMessage& m = out_.emplace_back();
    if constexpr (std::is_same_v<B, BufferPtr>) {
        m.owned = std::move(buffer);
    } else {
        m.shared = std::move(buffer);
    }
    m.size = size;
    m.first = next_dseq_;
    m.count = size == 0 ? 1 : (size + p.payload - 1) / p.payload;
    next_dseq_ += m.count;
    ++untransmitted_;
    const auto now = Clock::now();
    if (peer_incarnation_ == 0 && now >= next_hello_) { // first contact: at once, not at the next tick
        send_control(DatagramType::hello, 0, 0);
        next_hello_ = now + hello_backoff_;
    }
    pump(now);
    if (sent_upto_ < next_dseq_) stats_.queued();
    queue_depth_.store(untransmitted_, std::memory_order_relaxed);
}

BufferPtr UdpNode::take_locked() {
    auto next = inbox_.pop();
    if (!next.message && !next.loss) return nullptr;
    const std::uint64_t datagrams = inbox_datagrams_.front();
    inbox_datagrams_.pop_front();
    held_ -= datagrams;
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
    std::lock_guard lock(mutex_);
    if (auto m = take_locked()) return m;
    if (inbox_.empty()) throw_if_lost();
    return nullptr;
}

BufferPtr UdpNode::receive(std::chrono::nanoseconds timeout) {
    return wait_for([this] { return receive(); }, timeout, &shared_->bell);
}

bool UdpNode::flush(std::chrono::nanoseconds timeout) {
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(mutex_);
    // Until the peer acknowledged every message: then each is in its inbox, and a
    // receive there finds it (transmitted alone, it may still be in a socket buffer).
    for (;;) {
        pump(Clock::now());
        if (out_.empty()) return true;
        const auto now = Clock::now();
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

// ---------------------------------------------------------------- node: sending datagrams

bool UdpNode::send_control(DatagramType type, std::uint64_t seq, std::uint64_t length,
                           std::span<const std::byte> payload) {
    const int fd = shared_->fd.load();
    if (address_.empty() || fd < 0 || closed_) return false;
    DatagramHeader h;
    h.magic = magic;
    h.version = protocol_version;
    h.type = static_cast<std::uint16_t>(type);
    h.from = shared_->parameters.self;
    h.to = id_;
    h.partition = shared_->parameters.partition_hash;
    h.incarnation = shared_->incarnation;
    h.peer_incarnation = peer_incarnation_;
    h.seq = seq;
    h.length = length;
    iovec iov[2] = {{&h, header_size}, {const_cast<std::byte*>(payload.data()), payload.size()}};
    msghdr msg{};
    msg.msg_name = const_cast<sockaddr*>(address_.get());
    msg.msg_namelen = address_.length;
    msg.msg_iov = iov;
    msg.msg_iovlen = payload.empty() ? 1 : 2;
    const bool ok = ::sendmsg(fd, &msg, MSG_NOSIGNAL) >= 0;
    if (ok) {
        shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
        last_sent_ = Clock::now();
    }
    return ok;
}

// Sends datagram dseq (transmitted before when resend); false when the socket
// refused it (its buffer is full: the resend timer sends it again).
bool UdpNode::transmit(std::uint64_t dseq, bool resend) {
    const int fd = shared_->fd.load();
    if (address_.empty() || fd < 0 || closed_ || dseq < acked_ || dseq >= next_dseq_) return false;
    auto it = std::upper_bound(out_.begin(), out_.end(), dseq,
                               [](std::uint64_t s, const OutMessage& m) { return s < m.first; });
    if (it == out_.begin()) return false;
    const OutMessage& m = *std::prev(it);
    const auto& p = shared_->parameters;
    const std::uint64_t offset = (dseq - m.first) * p.payload;
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(p.payload, m.size - offset));
    DatagramHeader h;
    h.magic = magic;
    h.version = protocol_version;
    h.type = static_cast<std::uint16_t>(DatagramType::data);
    h.from = p.self;
    h.to = id_;
    h.partition = p.partition_hash;
    h.incarnation = shared_->incarnation;
    h.peer_incarnation = peer_incarnation_;
    h.seq = dseq;
    h.length = m.size;
    h.offset = static_cast<std::uint32_t>(offset);
    h.flags = dseq == m.first ? flag_first : 0;
    // The piece's bytes, gathered from the message's fragments (a FragmentList's
    // pieces may straddle a datagram).
    std::array<iovec, 16> iov{};
    std::size_t n = 0;
    iov[n++] = {&h, header_size};
    bool copied = false;
    std::size_t skip = static_cast<std::size_t>(offset), want = piece;
    const auto fragments = m.buffer().fragments();
    std::size_t pieces = 0;
    for (const auto& f : fragments) {
        if (want == 0) break;
        if (skip >= f.size()) {
            skip -= f.size();
            continue;
        }
        const std::size_t take = std::min(f.size() - skip, want);
        if (n < iov.size()) iov[n++] = {f.data() + skip, take};
        ++pieces;
        want -= take;
        skip = 0;
    }
    if (pieces + 1 > iov.size()) { // many tiny fragments: copy them into one piece
        skip = static_cast<std::size_t>(offset);
        want = piece;
        std::size_t at = 0;
        for (const auto& f : fragments) {
            if (want == 0) break;
            if (skip >= f.size()) {
                skip -= f.size();
                continue;
            }
            const std::size_t take = std::min(f.size() - skip, want);
            std::memcpy(staging_.data() + at, f.data() + skip, take);
            at += take;
            want -= take;
            skip = 0;
        }
        iov[1] = {staging_.data(), piece};
        n = 2;
        copied = true;
    }
    (void)copied;
    msghdr msg{};
    msg.msg_name = const_cast<sockaddr*>(address_.get());
    msg.msg_namelen = address_.length;
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n;
    if (::sendmsg(fd, &msg, MSG_NOSIGNAL) < 0) return false;
    shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
    last_sent_ = Clock::now();
    if (resend) {
        stats_.retried();
        shared_->repairs.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
}

// Transmits the datagrams not sent yet, as far as the peer's window goes; a message
// whose last datagram went out is handed over (counted as sent).
void UdpNode::pump(Clock::time_point now) {
    if (peer_incarnation_ == 0 || closed_) return;
    const std::uint64_t before = sent_upto_;
    while (sent_upto_ < next_dseq_ && sent_upto_ < peer_limit_) {
        if (!transmit(sent_upto_, false)) break;
        ++sent_upto_;
    }
    if (sent_upto_ == before) return;
    if (before == acked_) last_progress_ = now; // the resend timer starts with the first unacknowledged
    // Messages transmitted whole by this pump.
    for (auto it = std::upper_bound(out_.begin(), out_.end(), before,
                                    [](std::uint64_t s, const OutMessage&m) { return s < m.first + m.count; });
         it != out_.end() && it->first + it->count <= sent_upto_; ++it) {
        stats_.sent(it->size);
        --untransmitted_;
    }
    queue_depth_.store(untransmitted_, std::memory_order_relaxed);
    changed_.notify_all();
}

// ---------------------------------------------------------------- node: receiving

std::uint64_t UdpNode::advertised() const noexcept {
    const auto window = shared_->parameters.window;
    return held_ >= window ? 0 : window - held_;
}

void UdpNode::send_status(Clock::time_point /*now*/) {
    const std::uint64_t limit = std::max(status_sent_limit_, expected_ + advertised());
    send_control(DatagramType::status, expected_, limit - expected_);
    status_sent_expected_ = expected_;
    status_sent_limit_ = limit;
    status_owed_ = false;
    since_status_ = 0;
}

void UdpNode::send_nak(Clock::time_point now) {
    std::array<std::uint64_t, 2 * max_nak_ranges> ranges{};
    std::size_t n = 0;
    std::uint64_t at = expected_;
    for (const auto& [seq, bytes] : early_) {
        if (n == max_nak_ranges) break;
        if (seq > at) {
            ranges[2 * n] = at;
            ranges[2 * n + 1] = seq - at;
            ++n;
        }
        at = seq + 1;
    }
    last_nak_ = now;
    if (n == 0) return;
    send_control(DatagramType::nak, expected_, 0, std::as_bytes(std::span(ranges.data(), 2 * n)));
    shared_->naks_sent.fetch_add(1, std::memory_order_relaxed);
}

void UdpNode::send_nak_range(std::uint64_t first, std::uint64_t count) {
    const std::array<std::uint64_t, 2> range{first, count};
    send_control(DatagramType::nak, expected_, 0, std::as_bytes(std::span(range)));
    shared_->naks_sent.fetch_add(1, std::memory_order_relaxed);
}

void UdpNode::reset_send_side() {
    out_.clear();
    next_dseq_ = acked_ = sent_upto_ = peer_limit_ = 0;
    untransmitted_ = 0;
    queue_depth_.store(0, std::memory_order_relaxed);
    changed_.notify_all();
}

void UdpNode::reset_receive_side() {
    expected_ = highest_ = 0;
    early_.clear();
    assembling_.reset();
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    status_sent_expected_ = status_sent_limit_ = since_status_ = 0;
    status_owed_ = false;
}

// The peer's incarnation is lost: what it did not acknowledge is counted and dropped,
// and the loss is reported once (after the messages that arrived before it, when mark).
void UdpNode::lose(const std::string& reason, std::uint64_t unacknowledged, bool mark) {
    const std::uint64_t incarnation = peer_incarnation_;
    reset_send_side();
    reset_receive_side();
    peer_incarnation_ = 0;
    hello_backoff_ = std::chrono::milliseconds(2);
    if (incarnation == 0 || loss_.raised_for(incarnation)) return;
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") lost: " + reason +
                             " (" + std::to_string(unacknowledged) + " messages unacknowledged)";
    loss_.raise(incarnation, text, unacknowledged);
    if (mark) {
        inbox_.mark_loss();
        inbox_datagrams_.push_back(0);
    }
    shared_->bell.ring();
}

void UdpNode::adopt(std::uint64_t incarnation, Clock::time_point now) {
    if (incarnation == peer_incarnation_) return;
    if (peer_incarnation_ != 0) lose("it restarted (a new incarnation)", out_.size(), true);
    peer_incarnation_ = incarnation;
    reset_receive_side();
    last_heard_ = now;
    last_progress_ = now;
    shared_->bell.ring();
}

void UdpNode::acknowledge(std::uint64_t next_expected, std::uint64_t window, Clock::time_point now) {
    if (next_expected > sent_upto_) {
        shared_->count(Drop::beyond_window);
        return;
    }
    peer_limit_ = std::max(peer_limit_, next_expected + std::min<std::uint64_t>(window, 1u << 20));
    if (next_expected > acked_) {
        acked_ = next_expected;
        last_progress_ = now;
        while (!out_.empty() && out_.front().first + out_.front().count <= acked_)
            out_.pop_front();
        changed_.notify_all();
    }
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
    if (type == DatagramType::hello || type == DatagramType::welcome) {
        adopt(h.incarnation, now);
        last_heard_ = now;
        if (type == DatagramType::hello) {
            send_control(DatagramType::welcome, expected_, advertised());
        } else if (h.peer_incarnation == shared_->incarnation) {
            acknowledge(std::min(h.seq, sent_upto_), h.length, now);
        }
        pump(now);
        return;
    }
    // Every other datagram names this process's incarnation: one that names an
    // earlier one (or none) was meant for a process that is gone; its sender learns
    // who we are from a welcome.
    if (h.peer_incarnation != shared_->incarnation) {
        shared_->count(Drop::stale);
        if (h.incarnation != peer_incarnation_) adopt(h.incarnation, now);
        send_control(DatagramType::welcome, expected_, advertised());
        return;
    }
    adopt(h.incarnation, now);
    last_heard_ = now;
    switch (type) {
    case DatagramType::data:
        on_data(d, bytes, now);
        break;
    case DatagramType::status:
    case DatagramType::keepalive:
        acknowledge(h.seq, h.length, now);
        break;
    case DatagramType::nak: {
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
                (void)transmit(s, true);
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
        } else {
            reset_send_side();
            reset_receive_side();
            peer_incarnation_ = 0;
        }
        ended_incarnation_ = incarnation;
        shared_->bell.ring();
        break;
    }
    default:
        break;
    }
}

void UdpNode::on_data(const Decoded& d, std::span<const std::byte> bytes, Clock::time_point now) {
    const DatagramHeader& h = d.header;
    const auto window = shared_->parameters.window;
    if (h.seq < expected_ || early_.contains(h.seq)) {
        shared_->count(Drop::duplicate);
        status_owed_ = true; // our status may have been lost
        return;
    }
    if (h.seq >= expected_ + window) {
        shared_->count(Drop::beyond_window);
        return;
    }
    shared_->datagrams_received.fetch_add(1, std::memory_order_relaxed);
    if (h.seq > expected_) {
        early_.emplace(h.seq, std::vector<std::byte>(bytes.begin(), bytes.end()));
        // Datagrams between the highest seen and this one never came: a new hole.
        const std::uint64_t seen = std::max(highest_, expected_);
        highest_ = std::max(highest_, h.seq + 1);
        if (h.seq > seen) send_nak_range(seen, h.seq - seen);
        return;
    }
    consume(h, d.payload);
    while (!early_.empty() && early_.begin()->first == expected_) {
        auto node = early_.extract(early_.begin());
        const auto& b = node.mapped();
        DatagramHeader eh;
        std::memcpy(&eh, b.data(), header_size);
        consume(eh, std::span<const std::byte>(b).subspan(header_size));
    }
    highest_ = std::max(highest_, expected_);
    status_owed_ = true;
    if (++since_status_ >= status_every) send_status(now);
}

// The in-order datagram: its piece goes into the message being assembled, which is
// delivered when whole.
void UdpNode::consume(const DatagramHeader& h, std::span<const std::byte> piece) {
    ++expected_;
    const bool first = (h.flags & flag_first) != 0;
    if (first) {
        if (assembling_) shared_->count(Drop::bad_fragment); // the previous message never ended
        assembling_ = shared_->pool->make(static_cast<std::size_t>(h.length));
        assembling_data_ = assembling_->single()->data();
        assembling_length_ = h.length;
        assembled_ = 0;
    } else if (!assembling_ || h.length != assembling_length_ || h.offset != assembled_) {
        shared_->count(Drop::bad_fragment);
        return;
    }
    if (!piece.empty()) std::memcpy(assembling_data_ + assembled_, piece.data(), piece.size());
    assembled_ += piece.size();
    if (assembled_ < assembling_length_) return;
    const auto& p = shared_->parameters;
    const std::uint64_t count = assembling_length_ == 0 ? 1 : (assembling_length_ + p.payload - 1) / p.payload;
    assembling_->set_source(id_);
    stats_.received(assembling_length_);
    inbox_.push(std::move(assembling_));
    inbox_datagrams_.push_back(count);
    held_ += count;
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    shared_->bell.ring();
}

void UdpNode::end_of_batch(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (status_owed_ && peer_incarnation_ != 0) send_status(now);
}

Clock::time_point UdpNode::tick(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    const auto& p = shared_->parameters;
    auto next = now + std::chrono::milliseconds(50);
    if (closed_) return next;
    if (peer_incarnation_ == 0) {
        if (!out_.empty() && !address_.empty()) {
            if (now >= next_hello_) {
                send_control(DatagramType::hello, 0, 0);
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
             out_.size(), true);
        return next;
    }
    pump(now);
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
            send_control(DatagramType::hello, 0, 0);
            last_probe_ = now;
        }
        next = std::min(next, last_probe_ + resend_timeout);
    }
    if (!early_.empty()) {
        if (now - last_nak_ >= nak_interval) send_nak(now);
        next = std::min(next, last_nak_ + nak_interval);
    }
    if (status_owed_) send_status(now);
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

// ---------------------------------------------------------------- engine

namespace {
bool knows_peer(const void* context, std::uint32_t id) {
    const auto* nodes = static_cast<const std::map<NodeId, std::shared_ptr<UdpNode>>*>(context);
    return nodes->contains(id);
}

// SO_RCVBUF / SO_SNDBUF as asked (forced when the process may), with one warning
// per process when the kernel gives less. Returns the receive buffer the kernel
// accounts (SO_RCVBUF as read back: twice what was set, overhead included).
std::uint64_t size_buffers(int fd, std::uint64_t want, const std::string& where) {
    const int asked = static_cast<int>(std::min<std::uint64_t>(want, 1u << 30));
    for (auto [force, plain] : {std::pair{SO_RCVBUFFORCE, SO_RCVBUF}, std::pair{SO_SNDBUFFORCE, SO_SNDBUF}}) {
        if (::setsockopt(fd, SOL_SOCKET, force, &asked, sizeof asked) != 0)
            (void)::setsockopt(fd, SOL_SOCKET, plain, &asked, sizeof asked);
    }
    int got = 0;
    socklen_t len = sizeof got;
    if (::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got / 2 < asked) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
            std::fprintf(stderr,
                         "msgpass udp %s: the kernel gave a receive buffer of %d bytes, below udp.socket_buffer (%d "
                         "bytes); raise net.core.rmem_max (sysctl) to get it\n",
                         where.c_str(), got / 2, asked);
        }
    }
    return got > 0 ? static_cast<std::uint64_t>(got) : 0;
}
} // namespace

Engine::Engine(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), shared_(std::make_shared<Shared>(Parameters::from(configuration, self))) {
    const auto& me = configuration_.node(self);
    const std::string where = configuration_.nodes_file.string() + ": node " + std::to_string(self);
    if (me.port == 0) throw ConfigError(where + ": port: the udp technology needs a port for every node");
    for (const auto& n : configuration_.nodes) {
        if (n.id == self) continue;
        ip::Address address;
        if (n.port != 0) {
            address = ip::resolve(n.host, n.port, SOCK_DGRAM, false,
                                  configuration_.nodes_file.string() + ": node " + std::to_string(n.id) + ": host");
        }
        nodes_.emplace(n.id, std::make_shared<UdpNode>(shared_, n, std::move(address)));
    }
    shared_->fd =
        ip::bind_socket(ip::resolve(me.host, me.port, SOCK_DGRAM, true, where + ": host"), SOCK_DGRAM, 0, where);
    port_ = me.port;
    const std::uint64_t buffer = size_buffers(shared_->fd, shared_->parameters.options.socket_buffer, where);
    // The window never holds more datagrams than the socket's buffer: beyond it the
    // kernel drops them, and each drop costs a repair. (Every peer's window shares
    // this buffer.)
    auto& p = shared_->parameters;
    p.window = std::min<std::uint64_t>(p.window, std::max<std::uint64_t>(16, buffer / (p.datagram_size + 512)));
    expect_ = Expect{p.partition_hash, p.self, p.max_message_size, p.datagram_size, knows_peer, &nodes_};
    random_.seed(p.options.inject_seed ^ (std::uint64_t{self} * 0x9e3779b97f4a7c15ull));
    thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
    shutdown(Clock::now());
}

std::shared_ptr<UdpNode> Engine::node(NodeId id) const {
    auto it = nodes_.find(id);
    return it == nodes_.end() ? nullptr : it->second;
}

void Engine::shutdown(SteadyTime deadline) {
    if (stopped_) return;
    stopped_ = true;
    for (auto& [id, n] : nodes_)
        (void)n->wait_acknowledged(deadline);
    for (auto& [id, n] : nodes_)
        n->close();
    stop_.store(true);
    wake_.ring();
    if (thread_.joinable()) thread_.join();
    ::close(shared_->fd.exchange(-1));
}

void Engine::handle(std::span<const std::byte> bytes, Clock::time_point now) {
    const Decoded d = decode_datagram(bytes, expect_);
    if (!d.ok) {
        shared_->count(d.drop);
        return;
    }
    node(d.header.from)->on_datagram(d, bytes, now);
}

// udp.inject_*: a data, status or NAK datagram is dropped, handled twice, or held
// back behind the next datagram.
void Engine::inject(std::span<const std::byte> bytes, Clock::time_point now) {
    const auto& o = shared_->parameters.options;
    bool subject = false;
    if (bytes.size() >= header_size) {
        DatagramHeader h;
        std::memcpy(&h, bytes.data(), header_size);
        const auto t = static_cast<DatagramType>(h.type);
        subject = t == DatagramType::data || t == DatagramType::status || t == DatagramType::nak;
    }
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (subject && o.inject_loss > 0 && u(random_) < o.inject_loss) {
        shared_->count(Drop::injected);
        return;
    }
    if (subject && o.inject_reorder > 0 && held_.empty() && u(random_) < o.inject_reorder) {
        held_.assign(bytes.begin(), bytes.end());
        return;
    }
    handle(bytes, now);
    if (subject && o.inject_duplicate > 0 && u(random_) < o.inject_duplicate) handle(bytes, now);
    if (!held_.empty()) {
        std::vector<std::byte> later;
        later.swap(held_);
        handle(later, now);
    }
}

void Engine::run() {
    std::vector<std::byte> buffer(65536);
    const auto& o = shared_->parameters.options;
    const bool injecting = o.inject_loss > 0 || o.inject_duplicate > 0 || o.inject_reorder > 0;
    auto next_tick = Clock::now();
    while (!stop_.load()) {
        auto now = Clock::now();
        const auto wait = std::max<Clock::duration>(next_tick - now, Clock::duration::zero());
        pollfd fds[2] = {{shared_->fd.load(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
        const timespec ts{static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
                          static_cast<long>((wait % std::chrono::seconds(1)).count())};
        (void)::ppoll(fds, 2, &ts, nullptr);
        if (fds[1].revents != 0) wake_.drain();
        now = Clock::now();
        bool got = false;
        for (int i = 0; i < 256; ++i) {
            const ssize_t n = ::recv(shared_->fd.load(), buffer.data(), buffer.size(), MSG_DONTWAIT);
            if (n < 0) break;
            got = true;
            const std::span<const std::byte> bytes(buffer.data(), static_cast<std::size_t>(n));
            if (injecting) {
                inject(bytes, now);
            } else {
                handle(bytes, now);
            }
        }
        if (got) {
            for (auto& [id, n] : nodes_)
                n->end_of_batch(now);
        }
        if (got || now >= next_tick) {
            if (!held_.empty()) {
                std::vector<std::byte> later;
                later.swap(held_);
                handle(later, now);
            }
            next_tick = now + std::chrono::milliseconds(50);
            for (auto& [id, n] : nodes_)
                next_tick = std::min(next_tick, n->tick(now));
            next_tick = std::max(next_tick, now + std::chrono::microseconds(500));
        }
    }
}

} // namespace msgpass::udp
