// UdpNode, the node room: the calls of the application (send, receive, flush) and
// the factory's shutdown, for one peer of the udp technology (see node.hpp for the
// threads and docs/udp.md for the protocol). The peer's life and timers: link.cpp;
// datagrams out: sender.cpp; datagrams in and reassembly: receiver.cpp.
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
    : shared_(std::move(shared)), id_(peer.id), name_(peer.name), self_(shared_->parameters.self),
      address_(std::move(address)) {
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

void UdpNode::watch(std::shared_ptr<ReadyMarks> marks, std::size_t slot) {
    std::lock_guard lock(mutex_);
    marks->set(slot); // its first look comes with the group's next receive
    watchers_.emplace_back(std::move(marks), slot);
}

void UdpNode::unwatch(const ReadyMarks* marks) {
    std::lock_guard lock(mutex_);
    std::erase_if(watchers_, [marks](const auto& w) { return w.first.get() == marks; });
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

// A message that fits a frame is copied from the caller's bytes into the pack under
// the lock, as send() copies a small buffer's: no buffer object is made (the default
// send_bytes made a HeapBuffer per message, and the benchmark's stream a pool buffer).
void UdpNode::send_bytes(std::span<const std::byte> bytes) {
    const std::uint64_t size = bytes.size();
    if (frame_bytes(size) > shared_->parameters.payload) {
        Node::send_bytes(bytes);
        return;
    }
    check_send(size);
    const auto copy = [bytes](std::byte* to) {
        if (!bytes.empty()) std::memcpy(to, bytes.data(), bytes.size());
    };
    if (append_open(size, copy)) return;
    auto lock = lock_to_send();
    const std::uint64_t made = next_dseq_;
    (void)enqueue_small(size, copy);
    after_enqueue(made);
}

void UdpNode::check_size(std::uint64_t size) {
    const auto& p = shared_->parameters;
    if (size > p.max_message_size) {
        stats_.error(); // counted as sci and tcp count it
        kit::throw_message_too_large(*this, size, p.max_message_size);
    }
}

// The node's lock for an enqueue, after the loss check: a loss raised since
// check_send's look is reported now, not queued for the next incarnation.
std::unique_lock<std::mutex> UdpNode::lock_to_send() {
    std::unique_lock lock(mutex_);
    if (loss_.pending()) {
        lock.unlock();
        throw_if_lost();
        lock.lock();
    }
    return lock;
}

void UdpNode::check_send(std::uint64_t size) {
    check_factory("send");
    check_size(size);
    throw_if_lost();
}

namespace {
// Writes a buffer's bytes at to (one copy of its one fragment, the usual case).
void copy_out(const Buffer& buffer, std::byte* to) {
    if (const auto* one = buffer.single()) {
        const auto bytes = one->bytes();
        if (!bytes.empty()) std::memcpy(to, bytes.data(), bytes.size());
        return;
    }
    for (const auto& fragment : buffer.fragments()) {
        if (!fragment.empty()) std::memcpy(to, fragment.data(), fragment.size());
        to += fragment.size();
    }
}
} // namespace

template <class B>
UdpNode::OutMessage& UdpNode::enqueue(B& buffer, bool may_pack) {
    const std::uint64_t size = buffer->size();
    const auto& p = shared_->parameters;
    fold_open();
    if (may_pack && frame_bytes(size) <= p.payload) {
        OutMessage& m = enqueue_small(size, [&buffer](std::byte* to) { copy_out(*buffer, to); });
        buffer = nullptr; // copied: the caller's buffer goes back now
        return m;
    }
    if (untransmitted_ >= p.send_queue_limit) {
        stats_.error();
        kit::throw_send_queue_full(*this, p.send_queue_limit);
    }
    ++untransmitted_;
    OutMessage& m = out_.emplace_back();
    m.size = size;
    m.first = next_dseq_;
    m.hold(std::move(buffer));
    m.count = size == 0 ? 1 : (size + p.payload - 1) / p.payload;
    next_dseq_ += m.count;
    return m;
}

// group.cpp queues a broadcast's SharedBuffer through it.
template UdpNode::OutMessage& UdpNode::enqueue<SharedBuffer>(SharedBuffer& buffer, bool may_pack);

UdpNode::OutMessage& UdpNode::enqueue_small(std::uint64_t size, const auto& copy) {
    const auto& p = shared_->parameters;
    fold_open();
    if (untransmitted_ >= p.send_queue_limit) {
        stats_.error();
        kit::throw_send_queue_full(*this, p.send_queue_limit);
    }
    ++untransmitted_;
    if (append_to_pack(size, copy)) return out_.back();
    OutMessage& m = out_.emplace_back();
    m.size = size;
    m.first = next_dseq_;
    if (!spare_packs_.empty()) {
        m.pack = std::move(spare_packs_.back());
        spare_packs_.pop_back();
    } else {
        m.pack.reserve(static_cast<std::size_t>(p.payload));
    }
    add_frame(m, size, copy);
    ++next_dseq_;
    return m;
}

bool UdpNode::append_to_pack(std::uint64_t size, const auto& copy) {
    if (out_.empty()) return false;
    OutMessage& last = out_.back();
    if (last.pack.empty() || last.first + 1 != next_dseq_ || sent_upto_ >= next_dseq_ ||
        last.pack.size() + frame_bytes(size) > shared_->parameters.payload) {
        return false;
    }
    add_frame(last, size, copy);
    last.size += size;
    ++last.messages;
    return true;
}

void UdpNode::add_frame(OutMessage& m, std::uint64_t size, const auto& copy) {
    const std::size_t at = m.pack.size();
    m.pack.resize(at + static_cast<std::size_t>(frame_bytes(size))); // zeros: the reserved field and the padding
    const FrameHeader f{static_cast<std::uint32_t>(frame_header_size + size), 0};
    std::memcpy(m.pack.data() + at, &f, frame_header_size);
    copy(m.pack.data() + at + frame_header_size);
}

bool UdpNode::append_open(std::uint64_t size, const auto& copy) {
    std::lock_guard pack(pack_lock_);
    OutMessage* m = open_;
    if (m == nullptr || open_room_ == 0 || m->pack.size() + frame_bytes(size) > shared_->parameters.payload)
        return false;
    add_frame(*m, size, copy);
    m->size += size;
    ++m->messages;
    ++open_added_;
    --open_room_;
    // (every store of queue_depth_ while a pack is open is under pack_lock_: store_depth)
    queue_depth_.store(queue_depth_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return true;
}

void UdpNode::fold_open() noexcept {
    if (open_ == nullptr) return;
    std::lock_guard pack(pack_lock_);
    untransmitted_ += open_added_;
    stats_.queued_serialized(open_added_); // each waited in the held pack, as after_enqueue counts it
    open_added_ = 0;
    open_room_ = 0;
    open_ = nullptr;
}

void UdpNode::open_held() noexcept {
    const std::uint64_t limit = shared_->parameters.send_queue_limit;
    std::lock_guard pack(pack_lock_);
    open_ = &out_.back();
    open_added_ = 0;
    open_room_ = untransmitted_ < limit ? limit - untransmitted_ : 0;
}

void UdpNode::store_depth() noexcept {
    std::lock_guard pack(pack_lock_);
    queue_depth_.store(untransmitted_ + open_added_, std::memory_order_relaxed);
}

std::uint64_t UdpNode::messages_queued() {
    fold_open();
    std::uint64_t n = 0;
    for (const auto& m : out_)
        n += m.messages;
    return n;
}

void UdpNode::dispatch(Clock::time_point now) {
    if (peer_incarnation_ == 0) {
        if (now == Clock::time_point{}) now = Clock::now();
        if (now >= next_hello_) { // first contact: at once, not at the next tick
            send_hello();
            next_hello_ = now + hello_backoff_;
        }
        touch(); // the hellos that follow are the timers'
    }
    now = pump(now);
    if (sent_upto_ < next_dseq_) stats_.queued_serialized();
    store_depth();
    // The acknowledgements: a receiver that left the socket for long reads it no more.
    if (shared_->lent.load(std::memory_order_relaxed))
        shared_->reclaim_if_idle(now != Clock::time_point{} ? now : Clock::now());
}

template <class B>
void UdpNode::send_impl(B& buffer) {
    if (!buffer) {
        check_factory("send");
        kit::throw_null_buffer(*this);
    }
    const std::uint64_t size = buffer->size();
    check_send(size);
    if (frame_bytes(size) <= shared_->parameters.payload &&
        append_open(size, [&buffer](std::byte* to) { copy_out(*buffer, to); })) {
        buffer = nullptr; // copied: the caller's buffer goes back now
        return;
    }
    auto lock = lock_to_send();
    const std::uint64_t made = next_dseq_;
    (void)enqueue(buffer);
    after_enqueue(made);
}

// Into the pack the last pump held (the peer busy with what went before): it stays
// held, and so do the full datagrams before it that wait for hold_batch, as the
// acknowledgement, the timers or the next message that does not fit would find them;
// no pump, no clock read (one per message before: the datagrams before the pack were
// held, so each message appended to it pumped again).
void UdpNode::after_enqueue(std::uint64_t made) {
    if (holding_ && next_dseq_ == made && peer_incarnation_ != 0) {
        stats_.queued_serialized();
        open_held(); // (enqueue folded it: open again for the sends that follow)
        store_depth();
        return;
    }
    dispatch(Clock::time_point{}); // the clock read when needed, else after the datagram left
}

BufferPtr UdpNode::take_locked() {
    auto next = inbox_.pop();
    if (!next.message && !next.loss) return nullptr;
    const std::uint64_t datagrams = inbox_datagrams_.front();
    inbox_datagrams_.pop_front();
    published();
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
    status_if_reopened();
    return std::move(next.message);
}

void UdpNode::status_if_reopened() {
    // The window reopened by a quarter: tell the sender at once.
    if (peer_incarnation_ != 0 && expected_ + advertised() >= status_sent_limit_ + shared_->parameters.window / 4) {
        send_status(Clock::now());
    }
}

std::size_t UdpNode::take_batch_locked() {
    batch_.clear();
    batch_at_ = 0;
    const std::size_t n = inbox_.pop_messages(batch_, batch_most);
    if (n == 0) return 0;
    std::uint64_t datagrams = 0;
    for (std::size_t i = 0; i < n; ++i) {
        datagrams += inbox_datagrams_.front();
        inbox_datagrams_.pop_front();
    }
    held_ -= datagrams;
    batch_left_.store(n, std::memory_order_relaxed);
    published();
    status_if_reopened();
    return n;
}

BufferPtr UdpNode::next_of_batch() noexcept {
    BufferPtr m = std::move(batch_[batch_at_++]);
    batch_left_.store(batch_.size() - batch_at_, std::memory_order_relaxed);
    return m;
}

BufferPtr UdpNode::receive() {
    check_factory("receive");
    // What an earlier receive took out of the inbox comes first, without the lock.
    if (batch_at_ < batch_.size()) return next_of_batch();
    // Nothing there: no lock (the spin of a blocking receive looks here between polls
    // of the socket).
    if (inbox_entries_.load(std::memory_order_seq_cst) == 0) {
        throw_if_lost();
        return nullptr;
    }
    std::lock_guard lock(mutex_);
    if (take_batch_locked() != 0) return next_of_batch();
    if (auto m = take_locked()) return m;
    if (inbox_.empty()) throw_if_lost();
    return nullptr;
}

namespace {

// SocketSleeper for UdpNode::receive: the poll after a sleep reads the clock again.
struct CountingSleeper : SocketSleeper {
    std::uint32_t& polls;

    template <class Poll>
    auto sleep(Poll& poll, std::chrono::nanoseconds step, const WaitPhase& phase) -> decltype(poll()) {
        polls = 0;
        return SocketSleeper::sleep(poll, step, phase);
    }
};

} // namespace

// The spin polls the socket with a time read every 16 polls (a poll takes about a
// microsecond), so that a datagram it finds is handled without a clock read first
// (poll_socket); after a sleep the next poll reads the clock again.
BufferPtr UdpNode::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    Clock::time_point recent{};
    std::uint32_t polls = 0;
    return wait_with(
        [&] {
            if (auto m = receive()) return m;
            if ((polls++ & 15) == 0) recent = Clock::now();
            return shared_->poll_socket(recent) ? receive() : nullptr;
        },
        timeout, CountingSleeper{{*shared_}, polls}, socket_wait);
}

bool UdpNode::flush(std::chrono::nanoseconds timeout) {
    check_factory("flush");
    const auto deadline = deadline_after(timeout);
    std::unique_lock lock(mutex_);
    // Until the peer acknowledged every message: then each is in its inbox, and a
    // receive there finds it (transmitted alone, it may still be in a socket buffer).
    // The peer is asked for its status at once (pump_and_ask): the flush waits a round
    // trip, not status_delay, for the last datagrams.
    for (;;) {
        pump_and_ask(Clock::now());
        if (out_.empty()) return true;
        const auto now = Clock::now();
        shared_->reclaim_if_idle(now); // the acknowledgements waited for come through the socket
        if (now >= deadline) return false;
        changed_.wait_until(lock, std::min<Clock::time_point>(deadline, now + std::chrono::milliseconds(1)));
    }
}

// The last datagram this pump transmits carries flag_status_now (pump); when every
// datagram had left already, a status_request asks instead - once for the datagrams
// sent so far (a lost request or answer: the resend timer's probe brings a status).
// While the window holds messages back the peer's status comes when it opens.
void UdpNode::pump_and_ask(Clock::time_point now) {
    const std::uint64_t before = sent_upto_;
    ask_status_ = true;
    pump(now, false);
    ask_status_ = false;
    if (out_.empty() || peer_incarnation_ == 0) return;
    if (sent_upto_ != before) {
        if (sent_upto_ >= std::min(next_dseq_, peer_limit_)) asked_upto_ = sent_upto_; // the flagged one left
        return;
    }
    if (sent_upto_ == next_dseq_ && acked_ < sent_upto_ && asked_upto_ != sent_upto_ &&
        send_control(DatagramType::status_request, 0, 0)) {
        asked_upto_ = sent_upto_;
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
    fold_open();
    if (closed_) return;
    // Three times: a goodbye is not acknowledged; losing all three makes the peer
    // report a loss after peer_timeout.
    if (peer_incarnation_ != 0) {
        for (int i = 0; i < 3; ++i)
            send_control(DatagramType::goodbye, next_dseq_, expected_);
    }
    closed_ = true;
}

} // namespace msgpass::udp
