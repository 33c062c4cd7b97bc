// The sender room of a UdpNode (the outgoing half): messages cut into numbered datagrams and
// transmitted (gathered from the message's fragments) as far as the peer's window
// goes, control datagrams, and the acknowledgements that come back.
#include "node.hpp"

#include <netinet/udp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace msgpass::udp {

// ---------------------------------------------------------------- node: sending datagrams

bool UdpNode::send_control(DatagramType type, std::uint64_t seq, std::uint64_t length,
                           std::span<const std::byte> payload, const ip::Nonce* sign_for, std::uint32_t offset) {
    const int fd = shared_->fd.load();
    if (address_.empty() || fd < 0 || closed_) return false;
    DatagramHeader h = header_of(type, self_, shared_->parameters.partition_hash, shared_->incarnation);
    h.to = id_;
    h.peer_incarnation = peer_incarnation_;
    h.seq = seq;
    h.length = length;
    h.offset = offset;
    if (shared_->joined && (type == DatagramType::hello || type == DatagramType::welcome ||
                            type == DatagramType::status || type == DatagramType::keepalive)) {
        h.flags = flag_joined; // before the MAC, which covers the header
    }
    ip::Mac mac{};
    if (sign_for != nullptr && shared_->parameters.auth_key) {
        mac = welcome_mac(*shared_->parameters.auth_key, std::as_bytes(std::span(&h, 1)), *sign_for);
        payload = std::as_bytes(std::span(mac));
    }
    iovec iov[2] = {{&h, header_size}, {const_cast<std::byte*>(payload.data()), payload.size()}};
    msghdr msg{};
    const int link = link_socket();
    if (link < 0) {
        msg.msg_name = const_cast<sockaddr*>(address_.get());
        msg.msg_namelen = address_.length;
    }
    msg.msg_iov = iov;
    msg.msg_iovlen = payload.empty() ? 1 : 2;
    // (A connected socket reports an ICMP error of an earlier datagram - the peer's
    // port closed - on the next send, which did not go: once more.)
    ssize_t n = ::sendmsg(link >= 0 ? link : fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == ECONNREFUSED) n = ::sendmsg(link >= 0 ? link : fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    const bool ok = n >= 0;
    if (ok) {
        shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
        last_sent_ = Clock::now();
    }
    return ok;
}

namespace {
// Calls take(bytes) for each part of the fragments that holds bytes [offset, offset +
// piece) of the message, in order.
template <class Take>
void for_each_part(std::span<const Buffer::Fragment> fragments, std::uint64_t offset, std::size_t piece, Take&& take) {
    std::size_t skip = static_cast<std::size_t>(offset), want = piece;
    for (const auto& f : fragments) {
        if (want == 0) break;
        if (skip >= f.size()) {
            skip -= f.size();
            continue;
        }
        const std::size_t n = std::min(f.size() - skip, want);
        take(f.subspan(skip, n));
        want -= n;
        skip = 0;
    }
}
} // namespace

// The piece's bytes, gathered from the message's fragments (a FragmentList's pieces
// may straddle a datagram); many tiny fragments are copied into one piece.
std::size_t gather(const Buffer& buffer, std::uint64_t offset, std::size_t piece, std::span<iovec> iov, std::size_t n,
                   std::vector<std::byte>& staging) {
    const std::size_t start = n;
    const auto fragments = buffer.fragments();
    std::size_t parts = 0;
    for_each_part(fragments, offset, piece, [&](Buffer::Fragment part) {
        if (n < iov.size()) iov[n++] = {part.data(), part.size()};
        ++parts;
    });
    if (parts + start <= iov.size()) return n;
    if (staging.size() < piece) staging.resize(piece);
    std::size_t at = 0;
    for_each_part(fragments, offset, piece, [&](Buffer::Fragment part) {
        std::memcpy(staging.data() + at, part.data(), part.size());
        at += part.size();
    });
    iov[start] = {staging.data(), piece};
    return start + 1;
}

DatagramBatch& DatagramBatch::of_this_thread() {
    thread_local DatagramBatch batch;
    return batch;
}

void DatagramBatch::add(std::size_t iovecs, std::size_t bytes, bool in_staging) noexcept {
    datagram[count] = {iovs, iovecs, bytes};
    iovs += iovecs;
    ++count;
    staged = in_staging;
}

namespace {
// What one UDP GSO send may carry (the payload of one IPv4 datagram before the
// kernel cuts it), and the errors of a kernel or route that refuses it: no checksum
// offload (EIO), a segment larger than the route's MTU (EINVAL, EMSGSIZE), not
// supported (ENOPROTOOPT, EOPNOTSUPP).
constexpr std::size_t gso_most_bytes = 65507;
// The segments of one GSO send the kernel takes (UDP_MAX_SEGMENTS: 64 before Linux
// 6.11, 128 since).
constexpr std::size_t gso_most_segments = 64;
bool gso_refused(int error) noexcept {
    return error == EIO || error == EINVAL || error == EMSGSIZE || error == ENOPROTOOPT || error == EOPNOTSUPP;
}
} // namespace

std::size_t DatagramBatch::send(int fd, const sockaddr* to, socklen_t length, bool& gso, int& error) {
    std::size_t sent = 0;
    error = 0;
    bool refused = false;
    while (fd >= 0 && sent < count) {
        std::size_t messages = 0;
        for (std::size_t d = sent; d < count; ++messages) {
            // A run: every datagram but the last of the first one's size, the last no
            // larger (the kernel cuts the send at that size): a large message's full
            // pieces, or the full packs of a stream of small messages of one size.
            const std::size_t segment = datagram[d].bytes;
            std::size_t n = 1, bytes = segment;
            while (gso && d + n < count && n < gso_most_segments && datagram[d + n - 1].bytes == segment &&
                   datagram[d + n].bytes <= segment && bytes + datagram[d + n].bytes <= gso_most_bytes) {
                bytes += datagram[d + n].bytes;
                ++n;
            }
            const Datagram& first = datagram[d];
            const Datagram& last = datagram[d + n - 1];
            mmsghdr& msg = message[messages];
            msg = mmsghdr{};
            msg.msg_hdr.msg_name = const_cast<sockaddr*>(to);
            msg.msg_hdr.msg_namelen = length;
            msg.msg_hdr.msg_iov = iov.data() + first.iov;
            msg.msg_hdr.msg_iovlen = last.iov + last.iovs - first.iov;
            if (n > 1) {
                auto& room = control[messages].bytes;
                msg.msg_hdr.msg_control = room.data();
                msg.msg_hdr.msg_controllen = room.size();
                cmsghdr* c = CMSG_FIRSTHDR(&msg.msg_hdr);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                const auto size = static_cast<std::uint16_t>(segment);
                std::memcpy(CMSG_DATA(c), &size, sizeof size);
            }
            datagrams_of[messages] = n;
            d += n;
        }
        // One message (a lone datagram, or one GSO run) by sendmsg(): sendmmsg() costs
        // a little more for one (its vector, a second copy of the header).
        int n = 0;
        if (messages == 1) {
            n = ::sendmsg(fd, &message[0].msg_hdr, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0 ? 1 : -1;
        } else {
            n = ::sendmmsg(fd, message.data(), static_cast<unsigned>(messages), MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        if (n > 0) {
            for (int i = 0; i < n; ++i)
                sent += datagrams_of[static_cast<std::size_t>(i)];
            continue;
        }
        error = n < 0 ? errno : EAGAIN;
        if (n < 0 && error == ECONNREFUSED && !refused) { // (an earlier datagram's ICMP error: send_control)
            refused = true;
            continue;
        }
        if (n < 0 && datagrams_of[0] > 1 && gso_refused(error)) {
            gso = false;
            continue;
        }
        break;
    }
    if (sent == count) error = 0;
    clear();
    return sent;
}

const UdpNode::OutMessage* UdpNode::message_of(std::uint64_t dseq) const {
    if (dseq < acked_ || dseq >= next_dseq_) return nullptr;
    if (out_.empty()) return nullptr;
    if (dseq >= out_.back().first) return &out_.back(); // (the usual: the datagram just made)
    // Every entry before it one datagram (a stream of packs, or of small messages):
    // found at its place, without the search.
    if (const std::uint64_t at = dseq - out_.front().first; at < out_.size() && out_[at].first == dseq)
        return &out_[at];
    auto it = std::upper_bound(out_.begin(), out_.end(), dseq,
                               [](std::uint64_t s, const OutMessage& m) { return s < m.first; });
    if (it == out_.begin()) return nullptr;
    return &*std::prev(it);
}

// Adds datagram dseq to the batch; false when there is no such datagram.
bool UdpNode::prepare(std::uint64_t dseq, DatagramBatch& out) {
    const OutMessage* found = message_of(dseq);
    if (found == nullptr) return false;
    const OutMessage& m = *found;
    const auto& p = shared_->parameters;
    if (!m.pack.empty()) {
        DatagramHeader& h = out.header[out.count];
        h = header_of(DatagramType::data, self_, p.partition_hash, shared_->incarnation);
        h.to = id_;
        h.peer_incarnation = peer_incarnation_;
        h.seq = dseq;
        const auto iov = out.next_iov();
        iov[0] = {&h, header_size};
        if (m.messages == 1) { // alone: a plain piece, as an unpacked message goes
            h.length = m.size;
            h.flags = flag_first;
            iov[1] = {const_cast<std::byte*>(m.pack.data()) + frame_header_size, static_cast<std::size_t>(m.size)};
            out.add(2, header_size + static_cast<std::size_t>(m.size), false);
        } else {
            h.length = m.pack.size();
            h.offset = static_cast<std::uint32_t>(m.messages);
            h.flags = flag_packed;
            iov[1] = {const_cast<std::byte*>(m.pack.data()), m.pack.size()};
            out.add(2, header_size + m.pack.size(), false);
        }
        return true;
    }
    const std::uint64_t offset = (dseq - m.first) * p.payload;
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(p.payload, m.size - offset));
    DatagramHeader& h = out.header[out.count];
    h = header_of(DatagramType::data, self_, p.partition_hash, shared_->incarnation);
    h.to = id_;
    h.peer_incarnation = peer_incarnation_;
    h.seq = dseq;
    h.length = m.size;
    h.offset = static_cast<std::uint32_t>(offset);
    h.flags = dseq == m.first ? flag_first : 0;
    // The piece's bytes, gathered from the message's fragments (a FragmentList's
    // pieces may straddle a datagram).
    const auto iov = out.next_iov();
    iov[0] = {&h, header_size};
    const std::size_t n = gather(m.buffer(), offset, piece, iov, 1, staging_);
    out.add(n, header_size + piece, n == 2 && iov[1].iov_base == staging_.data());
    return true;
}

// Sends the batch; how many of its datagrams the socket took, in order (its buffer
// full: the others wait for the resend timer, or the next pump). A GSO send the
// kernel refuses is sent again datagram by datagram, and this node sends without GSO
// from then on.
std::size_t UdpNode::send_batch(DatagramBatch& out) {
    bool gso = shared_->gso && gso_;
    int error = 0;
    const int fd = shared_->fd.load();
    const int link = fd >= 0 ? link_socket() : -1;
    const std::size_t sent =
        link >= 0 ? out.send(link, nullptr, 0, gso, error) : out.send(fd, address_.get(), address_.length, gso, error);
    if (!gso) gso_ = false;
    if (sent > 0) {
        shared_->datagrams_sent.fetch_add(sent, std::memory_order_relaxed);
        last_sent_ = Clock::now();
    }
    return sent;
}

// Sends datagram dseq (transmitted before when resend); false when the socket
// refused it (its buffer is full: the resend timer sends it again).
bool UdpNode::transmit(std::uint64_t dseq, bool resend) {
    if (address_.empty() || shared_->fd.load() < 0 || closed_) return false;
    DatagramBatch& out = DatagramBatch::of_this_thread();
    out.clear();
    if (!prepare(dseq, out) || send_batch(out) != 1) return false;
    if (resend) {
        stats_.retried();
        shared_->repairs.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
}

// One loss of a datagram sent to udp.multicast is seen by every member it was for:
// the first NAK of it sends it there again, with the table it had (the members that
// have it drop it as a duplicate), and the NAKs of the others that come within
// nak_interval are ignored (their back-off usually let the repair reach them first:
// they NAK nothing). A NAK after that is this member's own loss (the repair did not
// reach it, or its NAK came late): the datagram goes to it alone. So one datagram is
// sent to the address again at most once, whatever the number of members.
void UdpNode::repair(std::uint64_t dseq, Clock::time_point now) {
    const OutMessage* m = message_of(dseq);
    if (m != nullptr && m->multicast && shared_->multicast_up.load(std::memory_order_relaxed)) {
        const std::uint64_t index = dseq - m->first;
        const MulticastMessage& mm = *m->multicast;
        if (index < mm.sent) {
            auto& repaired = mm.repaired[static_cast<std::size_t>(index)];
            const std::int64_t at =
                std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
            std::int64_t last = repaired.load(std::memory_order_relaxed);
            if (last == 0 && repaired.compare_exchange_strong(last, at, std::memory_order_relaxed)) {
                if (send_multicast_repair(*m, index)) return;
                repaired.store(0, std::memory_order_relaxed); // refused (a full socket buffer): to this member
            } else if (at - last < std::chrono::nanoseconds(nak_interval).count()) {
                shared_->naks_coalesced.fetch_add(1, std::memory_order_relaxed);
                return;
            }
        }
    }
    (void)transmit(dseq, true);
}

// Datagram `index` of a message sent to udp.multicast, sent there again as it went
// (header, the whole table, the piece); false when the socket refused it.
bool UdpNode::send_multicast_repair(const OutMessage& m, std::uint64_t index) {
    const int fd = shared_->fd.load();
    if (fd < 0 || closed_) return false;
    const auto& p = shared_->parameters;
    const MulticastMessage& mm = *m.multicast;
    repair_table_ = mm.table;
    for (auto& e : repair_table_)
        e.seq += index;
    const std::size_t table_bytes = group_table_bytes(repair_table_.size());
    const std::uint64_t offset = index * p.payload;
    const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(p.payload, m.size - offset));
    DatagramBatch& out = DatagramBatch::of_this_thread();
    out.clear();
    DatagramHeader& h = out.header[0];
    h = header_of(DatagramType::group_data, p.self, p.partition_hash, shared_->incarnation);
    h.length = m.size;
    h.offset = static_cast<std::uint32_t>(offset);
    h.flags = index == 0 ? flag_first : 0;
    h.reserved = static_cast<std::uint16_t>(repair_table_.size());
    const auto iov = out.next_iov();
    iov[0] = {&h, header_size};
    iov[1] = {repair_table_.data(), table_bytes};
    const std::size_t n = gather(m.buffer(), offset, piece, iov, 2, staging_);
    out.add(n, header_size + table_bytes + piece, false);
    bool gso = false;
    int error = 0;
    if (out.send(fd, reinterpret_cast<const sockaddr*>(&shared_->multicast_address), sizeof shared_->multicast_address,
                 gso, error) != 1) {
        return false;
    }
    shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
    shared_->multicast_sent.fetch_add(1, std::memory_order_relaxed);
    shared_->multicast_repairs.fetch_add(1, std::memory_order_relaxed);
    shared_->repairs.fetch_add(1, std::memory_order_relaxed);
    stats_.retried();
    return true;
}

// The last datagram made, a pack not transmitted yet, waits for more messages while
// the peer has hold_in_flight datagrams to acknowledge and acknowledges as it goes:
// the status it sends when it took hold_in_flight of them pumps the pack out (and so
// do the timers, a flush, and the next message that does not fit it). A peer that
// waits has acknowledged all but the last few, and one that fell silent (an outage,
// a stall) acknowledges nothing: the pack goes at once.
// While it holds, the datagrams before it wait too until more than hold_batch are
// ready: they leave together in one sendmmsg(), and wake the receiver once rather
// than once each.
bool UdpNode::holds(std::uint64_t dseq, Clock::time_point& now) const noexcept {
    if (out_.empty() || out_.back().pack.empty() || out_.back().first + 1 != next_dseq_ ||
        dseq - acked_ < hold_in_flight) {
        return false;
    }
    if (now == Clock::time_point{}) now = Clock::now();
    if (now - last_ack_ >= hold_fresh) return false;
    return dseq + 1 == next_dseq_ || (dseq == sent_upto_ && std::min(next_dseq_, peer_limit_) - dseq <= hold_batch);
}

// Transmits the datagrams not sent yet, as far as the peer's window goes, up to 16 at
// a time (send_batch); a message whose last datagram went out is handed over (counted
// as sent).
Clock::time_point UdpNode::pump(Clock::time_point now, bool hold) {
    fold_open();
    now = pump_datagrams(now, hold);
    if (holding_) open_held(); // (after transmitted(): the queue's count is whole until it opens)
    return now;
}

Clock::time_point UdpNode::pump_datagrams(Clock::time_point now, bool hold) {
    holding_ = false;
    if (peer_incarnation_ == 0 || closed_) return now;
    if (skip_to_ != 0) {
        if (now == Clock::time_point{}) now = Clock::now();
        if (!send_skip_if_due(now)) return now;
    }
    if (address_.empty() || shared_->fd.load() < 0) return now;
    const std::uint64_t before = sent_upto_;
    DatagramBatch& out = DatagramBatch::of_this_thread();
    out.clear();
    std::uint64_t next = sent_upto_;
    for (;;) {
        bool more = next < next_dseq_ && next < peer_limit_;
        if (more && hold && holds(next, now)) {
            more = false;
            holding_ = true;
        }
        more = more && prepare(next, out);
        if (more) ++next;
        if (out.count == 0) break;
        if (more && !out.full()) continue;
        // A flush: the last datagram this pump transmits asks the peer for its status
        // at once (the flush waits for it), as far as the window goes.
        if (ask_status_ && !(next < next_dseq_ && next < peer_limit_))
            out.header[out.count - 1].flags |= flag_status_now;
        const std::size_t ready = out.count;
        const bool carried = carry_status(out);
        const AckTrailer ack = out.ack;
        const std::size_t sent = send_batch(out);
        sent_upto_ += sent;
        if (carried && sent == ready) status_carried(ack);
        if (sent < ready || !more) break;
    }
    if (sent_upto_ == before) return now;
    if (now == Clock::time_point{}) now = last_sent_; // read by send_batch, after the datagrams left
    transmitted(before, now);
    return now;
}

void UdpNode::transmitted(std::uint64_t before, Clock::time_point now) {
    if (sent_upto_ == before) return;
    if (before == acked_) { // the resend timer starts with the first unacknowledged
        last_progress_ = now;
        resend_wait_ = resend_timeout;
    }
    // Messages transmitted whole since before. When all went, they are the newest:
    // found from the back (the entries before them wait for their acknowledgement, a
    // long queue in a request-response exchange); else from where before falls.
    const auto count = [&](const OutMessage& m) {
        stats_.sent_serialized(m.size, m.messages);
        untransmitted_ -= m.messages;
    };
    if (!out_.empty() && out_.back().first + out_.back().count <= sent_upto_) {
        for (auto it = out_.end(); it != out_.begin() && std::prev(it)->first + std::prev(it)->count > before;)
            count(*--it);
    } else {
        for (auto it = std::upper_bound(out_.begin(), out_.end(), before,
                                        [](std::uint64_t s, const OutMessage&m) { return s < m.first + m.count; });
             it != out_.end() && it->first + it->count <= sent_upto_; ++it) {
            count(*it);
        }
    }
    store_depth();
    changed_.notify_all();
}

void UdpNode::acknowledge(std::uint64_t next_expected, std::uint64_t window, Clock::time_point now) {
    if (next_expected > sent_upto_) { // never trimmed to fit: the numbering would disagree
        shared_->count(Drop::beyond_window);
        return;
    }
    peer_expects(next_expected);
    peer_limit_ = std::max(peer_limit_, next_expected + std::min<std::uint64_t>(window, 1u << 20));
    if (next_expected > acked_) {
        acked_ = next_expected;
        last_progress_ = last_ack_ = now;
        resend_wait_ = resend_timeout;
        while (!out_.empty() && out_.front().first + out_.front().count <= acked_) {
            auto& pack = out_.front().pack;
            if (pack.capacity() != 0 && spare_packs_.size() < spare_packs_kept) {
                pack.clear();
                spare_packs_.push_back(std::move(pack));
            }
            out_.pop_front();
        }
        changed_.notify_all();
    }
    pump(now);
}

// ---------------------------------------------------------------- node: a peer given up while it lived

void UdpNode::peer_expects(std::uint64_t next_expected) {
    peer_expected_ = std::max(peer_expected_, next_expected);
    expected_heard_ = true;
    if (skip_to_ != 0 && peer_expected_ >= skip_to_) { // it skipped, or had every datagram dropped
        skip_to_ = 0;
        dropped_ends_.clear();
        dropped_ends_.shrink_to_fit();
    }
}

// The peer (the incarnation given up, alive) counts on from what it received; the
// datagrams from its next expected up to skip_to_ were dropped here. Until the peer
// said what it expects since the loss, a hello asks it (its welcome says) and no data
// goes out; then the skip names both numbers and how many messages that is, before
// any data, and again every resend_timeout until the peer's next expected reaches
// skip_to_ (a peer that had them all takes it as a late copy; one whose next expected
// moved since takes it as stale and says so in a status, so the next skip counts
// from there). False: hold the data.
bool UdpNode::send_skip_if_due(Clock::time_point now) {
    if (skip_to_ == 0) return true;
    if (now < next_skip_) return expected_heard_;
    next_skip_ = now + resend_timeout;
    if (!expected_heard_) {
        send_hello();
        return false;
    }
    const auto lacking = static_cast<std::uint64_t>(
        dropped_ends_.end() - std::upper_bound(dropped_ends_.begin(), dropped_ends_.end(), peer_expected_));
    if (lacking == 0) { // (cannot be: a message ends beyond every datagram the peer lacks)
        peer_expects(skip_to_);
        return true;
    }
    (void)send_control(DatagramType::skip, skip_to_, peer_expected_, {}, nullptr,
                       static_cast<std::uint32_t>(std::min<std::uint64_t>(lacking, 0xffffffffu)));
    return true;
}

} // namespace msgpass::udp
