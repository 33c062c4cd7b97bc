// The link room of UdpNode: what one peer's sender and receiver share - its life
// (contact, incarnations, authentication, loss, restart, goodbye), the dispatch of
// each datagram from it to the sender or the receiver, and the timers the
// background thread runs (hello, resend, NAK repeat, keepalive, peer timeout).
#include "node.hpp"

#include <msgpass/error.hpp>

#include <algorithm>
#include <cstring>

namespace msgpass::udp {

// ---------------------------------------------------------------- link: peer life

// A clean end (goodbye): the next incarnation numbers from 0.
void UdpNode::reset_send_side() {
    fold_open();
    out_.clear();
    holding_ = false;
    next_dseq_ = acked_ = sent_upto_ = peer_limit_ = peer_expected_ = skip_to_ = asked_upto_ = 0;
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
    fold_open();
    for (const auto& m : out_)
        if (m.first + m.count > acked_) dropped_ends_.insert(dropped_ends_.end(), m.messages, m.first + m.count);
    out_.clear();
    holding_ = false;
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
    fold_open();
    std::uint64_t n = 0;
    std::uint64_t messages = 0;
    for (auto& m : out_) {
        messages += m.messages;
        m.first = n;
        n += m.count;
        m.multicast.reset(); // (none went to the address: the peer was unknown)
    }
    next_dseq_ = n;
    acked_ = sent_upto_ = peer_limit_ = peer_expected_ = skip_to_ = asked_upto_ = 0;
    dropped_ends_.clear();
    untransmitted_ = messages;
    holding_ = false;
    queue_depth_.store(untransmitted_, std::memory_order_relaxed);
}

void UdpNode::reset_receive_side() {
    expected_ = highest_ = 0;
    early_.clear();
    assembling_.reset();
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    status_sent_expected_ = status_sent_limit_ = since_status_ = 0;
    status_owed_ = small_since_status_ = status_asked_ = false;
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
    mark_ready(); // a group's next receive looks here and reports it
    if (mark) {
        inbox_.mark_loss();
        inbox_datagrams_.push_back(0);
        published();
    }
    shared_->ring();
}

void UdpNode::adopt(std::uint64_t incarnation, Clock::time_point now) {
    if (incarnation == peer_incarnation_) return;
    if (peer_incarnation_ != 0) lose("it restarted (a new incarnation)", messages_queued(), true);
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
    resend_wait_ = resend_timeout;
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
        // The status it carries (flag_ack) after its data, so that the pump that
        // acknowledgement makes may carry this node's status with this datagram counted.
        if (d.ack && d.acked.next_expected > sent_upto_) { // never trimmed to fit: the numbering would disagree
            shared_->count(Drop::beyond_window);
            break;
        }
        on_data(d, now);
        if (d.ack) acknowledge(d.acked.next_expected, d.acked.window, now);
        break;
    case DatagramType::status:
    case DatagramType::keepalive:
        multicast_ok_ = (h.flags & flag_joined) != 0;
        acknowledge(h.seq, h.length, now);
        break;
    case DatagramType::skip:
        on_skip(h, now);
        break;
    case DatagramType::status_request: // answered at the end of this read (end_of_batch)
        owe_status(now);
        status_asked_ = true;
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
        fold_open();
        for (const auto& m : out_)
            if (m.first + m.count > h.length) unacknowledged += m.messages;
        if (unacknowledged > 0 || h.seq > expected_) {
            lose(h.seq > expected_ ? "it closed before its last messages arrived"
                                   : "it closed without taking every message",
                 unacknowledged, true);
        }
        reset_send_side(); // it ended: its next incarnation numbers from 0
        reset_receive_side();
        peer_incarnation_ = 0;
        ended_incarnation_ = incarnation;
        if (client_) gone_ = true; // a client that left: its id is not used again
        shared_->ring();
        break;
    }
    default:
        break;
    }
}

// ---------------------------------------------------------------- link: timers

Clock::time_point UdpNode::end_of_batch(Clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (peer_incarnation_ == 0) return Clock::time_point::max();
    // A NAK backing off is sent by the background thread (tick), once it read the
    // multicast socket (the hole may be a datagram still there, behind one that came
    // on the other socket): when due, it is woken.
    const auto due = nak_pending_ ? nak_due_ : Clock::time_point::max();
    if (status_asked_) { // a flushing sender waits for it
        send_status(now);
        return due;
    }
    if (!status_owed_) return due;
    const auto status_delay = shared_->parameters.options.status_delay;
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
             messages_queued(), true, true);
        if (client_) gone_ = true; // a client lost is forgotten: should it come back, it is unknown
        return next;
    }
    pump(now, false); // with the skip first, when the peer may lack datagrams dropped at its loss
    next = std::min(next, now + resend_timeout); // a send may start a stream between ticks
    if (acked_ < sent_upto_) {
        if (now - last_progress_ >= resend_wait_) {
            (void)transmit(acked_, true);
            if (sent_upto_ - 1 != acked_) (void)transmit(sent_upto_ - 1, true);
            last_progress_ = now;
            resend_wait_ = std::min<Clock::duration>(2 * resend_wait_, resend_most);
        }
        next = std::min(next, last_progress_ + resend_wait_);
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
        const auto most = group_stream_ ? std::chrono::duration_cast<Clock::duration>(8 * nak_interval)
                                        : std::chrono::duration_cast<Clock::duration>(nak_repeat_most);
        if (nak_expected_ != expected_ || nak_wait_ < repeat) nak_wait_ = repeat; // progress since the last NAK
        if (now - last_nak_ >= nak_wait_) {
            send_nak(now);
            nak_wait_ = std::min(2 * nak_wait_, most);
        }
        next = std::min(next, last_nak_ + nak_wait_);
    }
    if (status_asked_) send_status(now); // (asked by a datagram injection held back: no read ended after it)
    if (status_owed_) {
        const auto status_delay = p.options.status_delay;
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
