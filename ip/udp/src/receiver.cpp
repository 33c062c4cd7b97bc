// The receiver room of a UdpNode (the incoming half): data datagrams taken in order (those that come
// early kept until their turn), reassembled into whole messages for the inbox, and
// the status and NAK datagrams this side owes the sender.
#include "node.hpp"
#include <msgpass/log.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

namespace msgpass::udp {

// ---------------------------------------------------------------- node: receiving

std::uint64_t UdpNode::advertised() const noexcept {
    const auto window = shared_->parameters.window;
    return held_ >= window ? 0 : window - held_;
}

void UdpNode::send_status(Clock::time_point /*now*/) {
    const std::uint64_t limit = std::max(status_sent_limit_, expected_ + advertised());
    // (counted before it leaves: a sender that had it reads the count after)
    if (status_asked_) shared_->statuses_asked.fetch_add(1, std::memory_order_relaxed);
    shared_->statuses_sent.fetch_add(1, std::memory_order_relaxed);
    send_control(DatagramType::status, expected_, limit - expected_);
    status_sent_expected_ = expected_;
    status_sent_limit_ = limit;
    status_owed_ = false;
    small_since_status_ = false;
    status_asked_ = false;
    since_status_ = 0;
}

// A request-response exchange owes a status for every message and sends data back
// for every message: the status rides on that data (flag_ack), and the status
// datagram every hold_in_flight messages (end_of_batch), the timers' after
// status_delay and the window's reopening (take_locked) find nothing owed. Only the
// last datagram of a batch carries it: the others may be a GSO run of one size.
bool UdpNode::carry_status(DatagramBatch& out) {
    if ((!status_owed_ && !status_asked_) || out.count == 0) return false;
    auto& last = out.datagram[out.count - 1];
    if (last.iovs >= DatagramBatch::iovs_per || last.bytes + ack_trailer_size > shared_->parameters.datagram_size)
        return false;
    const std::uint64_t limit = std::max(status_sent_limit_, expected_ + advertised());
    out.ack = AckTrailer{expected_, limit - expected_};
    out.header[out.count - 1].flags |= flag_ack;
    out.iov[last.iov + last.iovs] = {&out.ack, ack_trailer_size};
    ++last.iovs;
    ++out.iovs;
    last.bytes += ack_trailer_size;
    // (counted before it leaves, as send_status counts: a sender that had it reads the count after)
    if (status_asked_) shared_->statuses_asked.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void UdpNode::status_carried(const AckTrailer& ack) {
    shared_->acks_carried.fetch_add(1, std::memory_order_relaxed);
    status_sent_expected_ = ack.next_expected;
    status_sent_limit_ = ack.next_expected + ack.window;
    status_owed_ = false;
    small_since_status_ = false;
    status_asked_ = false;
    since_status_ = 0;
}

void UdpNode::owe_status(Clock::time_point now) {
    if (!status_owed_) status_owed_since_ = now;
    status_owed_ = true;
}

bool UdpNode::nak_holes(std::uint64_t from, std::uint64_t to) {
    std::array<std::uint64_t, 2 * max_nak_ranges> ranges{};
    std::size_t n = 0;
    std::uint64_t at = std::max(from, expected_);
    for (auto it = early_.lower_bound(at); it != early_.end() && it->first < to && n < max_nak_ranges; ++it) {
        if (it->first > at) {
            ranges[2 * n] = at;
            ranges[2 * n + 1] = it->first - at;
            ++n;
        }
        at = it->first + 1;
    }
    if (n == 0) return false;
    send_control(DatagramType::nak, expected_, 0, std::as_bytes(std::span(ranges.data(), 2 * n)));
    shared_->naks_sent.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void UdpNode::send_nak(Clock::time_point now) {
    last_nak_ = now;
    nak_expected_ = expected_;
    (void)nak_holes(expected_, nak_pending_ ? nak_from_ : highest_);
}

void UdpNode::nak_if_due(Clock::time_point now) {
    if (!nak_pending_ || now < nak_due_) return;
    nak_pending_ = false;
    if (!nak_holes(nak_from_, highest_)) shared_->naks_withheld.fetch_add(1, std::memory_order_relaxed);
}

void UdpNode::send_nak_range(std::uint64_t first, std::uint64_t count) {
    const std::array<std::uint64_t, 2> range{first, count};
    send_control(DatagramType::nak, expected_, 0, std::as_bytes(std::span(range)));
    shared_->naks_sent.fetch_add(1, std::memory_order_relaxed);
}

void UdpNode::on_data(const Decoded& d, Clock::time_point now) {
    const DatagramHeader& h = d.header;
    const auto window = shared_->parameters.window;
    if (d.group) group_stream_ = true;
    if (h.seq < expected_ || early_.contains(h.seq)) {
        shared_->count(Drop::duplicate);
        owe_status(now); // our status may have been lost
        if ((h.flags & flag_status_now) != 0) status_asked_ = true;
        return;
    }
    if (h.seq >= expected_ + window) {
        shared_->count(Drop::beyond_window);
        return;
    }
    shared_->datagrams_received.fetch_add(1, std::memory_order_relaxed);
    if (h.seq > expected_) {
        // Kept as its header (a group_data datagram's as this member's data) and piece.
        std::vector<std::byte> kept(header_size + d.payload.size());
        std::memcpy(kept.data(), &h, header_size);
        if (!d.payload.empty()) std::memcpy(kept.data() + header_size, d.payload.data(), d.payload.size());
        early_.emplace(h.seq, std::move(kept));
        // Datagrams between the highest seen and this one never came: a new hole. In a
        // stream that comes by multicast, every member may have seen the same loss: NAKed
        // after a random back-off, unless filled by then (the repair another member's NAK
        // brought); holes that open meanwhile go with it.
        const std::uint64_t seen = std::max(highest_, expected_);
        highest_ = std::max(highest_, h.seq + 1);
        if (h.seq > seen) {
            if (!group_stream_) {
                send_nak_range(seen, h.seq - seen);
            } else if (!nak_pending_) {
                // splitmix64: uniform from 0 to nak_backoff
                std::uint64_t z = (backoff_state_ += 0x9e3779b97f4a7c15ull);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                z ^= z >> 31;
                const auto span = static_cast<std::uint64_t>(std::chrono::nanoseconds(nak_backoff).count()) + 1;
                nak_pending_ = true;
                nak_from_ = seen;
                nak_due_ = now + std::chrono::nanoseconds(z % span);
            }
        }
        return;
    }
    consume(h, d.payload);
    take_early();
    owe_status(now);
    if (++since_status_ >= status_every) send_status(now);
}

void UdpNode::take_early() {
    while (!early_.empty() && early_.begin()->first == expected_) {
        auto node = early_.extract(early_.begin());
        const auto& b = node.mapped();
        DatagramHeader eh;
        std::memcpy(&eh, b.data(), header_size);
        consume(eh, std::span<const std::byte>(b).subspan(header_size));
    }
    highest_ = std::max(highest_, expected_);
}

// The peer gave this node up for silence while both lived, dropped the messages it
// had not seen acknowledged, and numbers on from h.seq: the messages of the datagrams
// from expected_ up to h.seq will never come. Reported once, as a PeerLost after the
// messages before them and before the first after (a gap marker in the inbox); a
// message half assembled is dropped with them. A skip at or below expected_ is a late
// copy (or the peer had feared a loss that did not happen); one that names a next
// expected beyond ours does not hold; one that names an older one than ours (datagrams
// in flight at the loss arrived since, e.g. from this node's socket buffer after a
// stall) would miscount: stale, answered by our status, and the peer's next skip
// names our next expected, so that the PeerLost counts exactly the messages lost.
void UdpNode::on_skip(const DatagramHeader& h, Clock::time_point now) {
    if (h.seq <= expected_) {
        shared_->count(Drop::duplicate);
        owe_status(now); // our status saying so may have been lost
        return;
    }
    if (h.length > expected_) {
        shared_->count(Drop::bad_skip);
        return;
    }
    if (h.length < expected_) {
        shared_->count(Drop::stale);
        send_status(now);
        return;
    }
    const std::uint64_t from = expected_;
    early_.erase(early_.begin(), early_.lower_bound(h.seq));
    assembling_.reset();
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    expected_ = h.seq;
    const std::string text = "peer " + std::to_string(id_) + " (" + name_ + ", " + address_.text + ") dropped " +
                             std::to_string(h.offset) + " messages to this node (its datagrams " +
                             std::to_string(from) + ".." + std::to_string(h.seq - 1) +
                             ") after declaring this node lost (silent for peer_timeout); its messages go on from "
                             "datagram " +
                             std::to_string(h.seq);
    inbox_.mark_gap(ip::Loss{text, 0});
    inbox_datagrams_.push_back(0);
    published();
    MSGPASS_LOG(udp, warn, "msgpass udp node " + std::to_string(shared_->parameters.self) + ": " + text);
    take_early();
    send_status(now);
    shared_->ring();
}

// The in-order datagram: its piece goes into the message being assembled, which is
// delivered when whole.
void UdpNode::consume(const DatagramHeader& h, std::span<const std::byte> piece) {
    ++expected_;
    // The last datagram of a flush (kept early, it asks when its turn comes).
    if ((h.flags & flag_status_now) != 0) status_asked_ = true;
    if ((h.flags & flag_packed) != 0) {
        consume_packed(piece);
        return;
    }
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
    if (first) small_since_status_ = true; // whole in one datagram
    assembling_->set_source(id_);
    stats_.received_serialized(assembling_length_);
    inbox_.push(std::move(assembling_));
    inbox_datagrams_.push_back(count);
    published();
    held_ += count;
    assembling_data_ = nullptr;
    assembling_length_ = assembled_ = 0;
    shared_->ring();
}

} // namespace msgpass::udp

namespace msgpass::udp {

// A packed datagram, in order: each frame's message into the inbox. decode_datagram
// checked the frames (packed_frames_hold); the walk stays within the payload anyway.
// The datagram counts against the window with its last message.
void UdpNode::consume_packed(std::span<const std::byte> frames) {
    if (assembling_) { // the previous message never ended
        shared_->count(Drop::bad_fragment);
        assembling_.reset();
        assembling_data_ = nullptr;
        assembling_length_ = assembled_ = 0;
    }
    std::size_t at = 0;
    bool any = false;
    while (frames.size() - at >= frame_header_size) {
        FrameHeader f;
        std::memcpy(&f, frames.data() + at, frame_header_size);
        const std::size_t size = f.length - frame_header_size;
        if (f.length < frame_header_size || size > frames.size() - at - frame_header_size) break;
        BufferPtr message = shared_->pool->make(size);
        if (size != 0) std::memcpy(message->single()->data(), frames.data() + at + frame_header_size, size);
        message->set_source(id_);
        stats_.received_serialized(size);
        inbox_.push(std::move(message));
        inbox_datagrams_.push_back(0);
        any = true;
        at += static_cast<std::size_t>(std::min<std::uint64_t>(frame_bytes(size), frames.size() - at));
    }
    if (!any) return;
    small_since_status_ = true;
    inbox_datagrams_.back() = 1;
    published();
    ++held_;
    shared_->ring();
}

} // namespace msgpass::udp
