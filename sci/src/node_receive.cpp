// The sci node's receive side: taking notifications and large messages from the
// peer, and receive() (see node.cpp for the whole).
#include "batch.hpp"
#include "node_parts.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

namespace msgpass::sci {

// --------------------------------------------------------------------- receive

BufferPtr SciNode::take_message(Link& link) {
    const std::uint32_t i = recv_index_;
    const std::uint32_t note = load(local_header_->index[i].note);
    if (sig_of(note) != signature_mod(recv_round_[i], recv_salt255_)) return nullptr;
    const std::uint64_t w = grants_->index[i].load(std::memory_order_acquire);
    const std::uint32_t granted = Grants::slot_of(w);
    if (granted == Grants::no_slot || granted == Grants::unused_slot)
        return nullptr; // a note on an index we did not grant: ignore it
    const std::uint32_t size = note & note_size_mask;
    const bool large = (note & note_large_flag) != 0;
    const bool hot = (note & note_hot_flag) != 0;
    const bool batch = (note & note_batch_flag) != 0;
    const std::uint64_t number = received_++;
    recv_round_[i] = static_cast<std::uint8_t>(next_round255(recv_round_[i]));
    if (++recv_index_ == link.k) recv_index_ = 0;
    const std::uint32_t next = Grants::next_round(Grants::round_of(w));
    // The index keeps its slot for the next round: granted again at once. A grant
    // written here must ring a sender that sleeps as every other grant does (below):
    // one waiting for it (its flush, behind a large message) would otherwise wait for
    // its 100 ms re-poll.
    bool kept = false;
    auto keep = [&] {
        grants_->index[i].store(Grants::pack(link.generation, next, granted), std::memory_order_release);
        grants_->write_ack(link, i, next, granted);
        kept = true;
    };
    if (hot && hot_slot_ == no_slot) {
        keep();
        violation_ = "node " + std::to_string(parameters_.peer) + " used a hot slot it was not granted";
        return nullptr;
    }
    // A message in the hot slot leaves the index's slot granted for the next round
    // (publish_grants renews its signature).
    const std::uint32_t slot = hot ? hot_slot_ : granted;
    if (hot) {
        hot_slot_ = no_slot;
        hot_out_.store(false, std::memory_order_relaxed);
        resign_[i] = true;
        grants_->index[i].store(Grants::pack(link.generation, next, granted), std::memory_order_release);
    }
    BufferPtr buffer;
    if (batch) {
        // Several small messages in one slot: all are checked before the first is
        // handed out; the slot goes back when the last of them is dropped.
        bool opened = false;
        if (large || hot) {
            violation_ = "node " + std::to_string(parameters_.peer) + " sent a malformed batch (flagged " +
                         (large ? "large" : "hot") + " too)";
        } else {
            opened = open_batch(link, i, slot, size, number);
        }
        if (!opened) {
            if (hot) {
                local_->release_recv_slot(slot);
            } else {
                keep();
            }
            return nullptr;
        }
        grants_->index[i].store(Grants::pack(link.generation, next, Grants::no_slot), std::memory_order_release);
        if (link.k == 1) publish_grants(link);
        return next_in_batch();
    }
    if (!large) {
        if (size > local_->control().slot_size) {
            if (hot) {
                local_->release_recv_slot(slot);
            } else {
                keep();
            }
            violation_ = "node " + std::to_string(parameters_.peer) + " sent a size word of " + std::to_string(size) +
                         " bytes for a slot of " + std::to_string(local_->control().slot_size);
            return nullptr;
        }
        // The index waits for a slot: this buffer's when it is dropped, or one from
        // the pool on the next receive.
        if (!hot)
            grants_->index[i].store(Grants::pack(link.generation, next, Grants::no_slot), std::memory_order_release);
        LocalNode::SlotHold& hold = local_->slot_hold(slot);
        hold.index = i;
        hold.owner = recv_owner_;
        buffer = std::make_unique<RecvBuffer>(link, slot, local_->slot_address(slot), size, false);
    } else {
        // One descriptor, or several (a batch of queued broadcast messages); the
        // first is handed out now, the others by the next receive calls.
        const std::size_t count = size / sizeof(LargeDescriptor);
        bool valid = size % sizeof(LargeDescriptor) == 0 && count >= 1 && size <= local_->control().slot_size &&
                     count <= large_in_flight;
        for (std::size_t k = 0; valid && k < count; ++k) {
            LargeDescriptor d{};
            std::memcpy(&d, local_->slot_address(slot) + k * sizeof d, sizeof d);
            std::byte* data = nullptr;
            // Never a message above this node's max_message_size, whichever region it
            // is in (the broadcast region and the large one's page-rounded capacity
            // are larger; found by the sci_note fuzz target).
            if (d.sequence == static_cast<std::uint32_t>(large_received_) && d.reserved == 0 &&
                d.check == large_check_of(d.offset, d.size, d.sequence, d.region) &&
                d.size <= parameters_.max_message_size) {
                if (d.region == region_large && d.offset < large_ring_size && d.size <= large_capacity_) {
                    data = large_release_->region.address() + d.offset;
                } else if (d.region == region_broadcast) {
                    data = map_broadcast(link, d);
                }
            }
            if (data == nullptr) {
                valid = false;
                break;
            }
            auto b = std::make_unique<LargeRecvBuffer>(large_release_, large_generation_, large_received_, data,
                                                       static_cast<std::size_t>(d.size),
                                                       d.region == region_broadcast ? link.broadcast : nullptr);
            b->set_source(parameters_.peer);
            ++large_received_;
            if (buffer) {
                pending_.push_back(std::move(b));
            } else {
                buffer = std::move(b);
            }
        }
        // The descriptors are read: the slot is free again.
        if (hot) {
            local_->release_recv_slot(slot);
        } else {
            keep();
        }
        if (!valid) {
            pending_.clear();
            violation_ = "node " + std::to_string(parameters_.peer) + " sent a malformed large-message descriptor";
            return nullptr;
        }
    }
    // With several outstanding messages the peer needs this index again only after
    // the others, so its grant waits for the next receive call (off the latency
    // path); with one, it is written before the message is handed out. A slot kept
    // for the next round (a large message's descriptor) was granted above: its
    // sender is rung now, once, with whatever publish_grants writes.
    if (link.k == 1) {
        publish_grants(link, kept);
    } else if (kept) {
        grants_->wake(link);
    }
    buffer->set_source(parameters_.peer);
    stats_.received_serialized(buffer->size());
    return buffer;
}

// Checks the batch in slot (announced by note number `number` on index i, size
// bytes; check_batch) and makes it the one the next receive calls hand out, or
// leaves the reason in violation_. Receiver.
bool SciNode::open_batch(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size, std::uint64_t number) {
    std::string why =
        size > local_->control().slot_size
            ? "larger than the slot of " + std::to_string(local_->control().slot_size)
            : check_batch(local_->slot_address(slot), size, number, parameters_.max_message_size, batch_lengths_);
    if (!why.empty()) {
        violation_ = "node " + std::to_string(parameters_.peer) + " sent a malformed batch of " + std::to_string(size) +
                     " bytes (" + why + ")";
        return false;
    }
    const auto count = static_cast<std::uint32_t>(batch_lengths_.size());
    LocalNode::SlotHold& hold = local_->slot_hold(slot);
    hold.refs.store(count, std::memory_order_relaxed);
    hold.index = i;
    hold.owner = recv_owner_;
    batch_ = Batch{&link, slot, 0, count, static_cast<std::uint32_t>(batch_data_offset(count))};
    return true;
}

// The next message of the open batch, a view into its slot. Receiver.
BufferPtr SciNode::next_in_batch() {
    const std::uint32_t length = batch_lengths_[batch_.next];
    auto b = std::make_unique<RecvBuffer>(*batch_.link, batch_.slot, local_->slot_address(batch_.slot) + batch_.offset,
                                          length, true);
    batch_.offset = static_cast<std::uint32_t>(batch_align_up(batch_.offset + length));
    if (++batch_.next == batch_.count) batch_.link = nullptr;
    b->set_source(parameters_.peer);
    stats_.received_serialized(length);
    return b;
}

// The next message of the open batch, lent: no object, the slot's hold counts it
// as it counts a RecvBuffer. Receiver.
MessageView SciNode::view_in_batch() {
    static SlotLender lender;
    const std::uint32_t length = batch_lengths_[batch_.next];
    const std::byte* data = local_->slot_address(batch_.slot) + batch_.offset;
    Link* link = batch_.link;
    const std::uint32_t slot = batch_.slot;
    batch_.offset = static_cast<std::uint32_t>(batch_align_up(batch_.offset + length));
    if (++batch_.next == batch_.count) batch_.link = nullptr;
    stats_.received_serialized(length);
    return MessageView({data, length}, parameters_.peer, &lender, link, slot);
}

// The messages of the open batch that were never handed out let go of its slot (the
// node ends). Receiver lock held.
void SciNode::abandon_batch() {
    if (batch_.link == nullptr) return;
    const std::uint32_t left = batch_.count - batch_.next;
    Link& link = *batch_.link;
    batch_.link = nullptr;
    if (local_->slot_hold(batch_.slot).refs.fetch_sub(left, std::memory_order_acq_rel) == left)
        link.grants->give_back(link, batch_.slot);
}

// The peer's broadcast region, mapped when first needed (normally when the link is
// made); null when it cannot be mapped or the descriptor points outside it.
// Receiver thread, or the link's maker before the link is published.
std::byte* SciNode::map_broadcast(Link& link, const LargeDescriptor& d) {
    if (!link.broadcast) {
        auto segment = std::make_shared<RemoteSegment>();
        try {
            if (!segment->connect(
                    local_->device().segment_name(parameters_.peer, parameters_.peer_segment_id, "bcast")))
                return nullptr;
            segment->map();
        } catch (const Error&) {
            return nullptr;
        }
        if (segment->size() <= large_ring_size) return nullptr;
        link.broadcast = std::move(segment);
    }
    if (d.offset >= large_ring_size || d.size > link.broadcast->size() - d.offset) return nullptr;
    return link.broadcast->address() + d.offset;
}

void SciNode::publish_pending() {
    std::lock_guard lock(recv_mutex_);
    if (recv_link_ != nullptr) publish_grants(*recv_link_);
}

// The order a restarted peer's messages come in: every message of the old
// incarnation, then its loss (once, unless a send raised it already), then the
// messages of the new one. The receive side stays with the old incarnation until it
// has nothing more and the loss is reported; only then does it introduce itself to
// the new one, which cannot send before that.
BufferPtr SciNode::receive() {
    check_factory("receive");
    local_->driver().progress();
    return receive_polled();
}

BufferPtr SciNode::receive_polled() {
    Link* link = current_link(); // compared, not read: declare_lost reads only the current link
    std::string violation;
    {
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
        violation.swap(violation_);
    }
    if (!violation.empty() && link != nullptr) declare_lost(link, violation + "; the connection is dropped");
    check_peer();
    if (loss_.pending()) {
        // The loss was found after the poll above: a message the peer wrote before it
        // went is visible now, and comes before the loss.
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
    }
    throw_if_lost();
    if (link_.load(std::memory_order_acquire) != nullptr) {
        {
            // Read under the receive lock, which reclaim_links also takes: the link
            // stays while it is introduced.
            std::lock_guard lock(recv_mutex_);
            Link* now = link_.load(std::memory_order_acquire);
            if (now == nullptr || recv_link_ == now || loss_.pending()) return nullptr;
            if (auto b = take_next()) return b;
            introduce(*now);
        }
        // The receive side left the previous incarnation: its mapping may go now,
        // unless a sender holds the send lock (the next send then lets it go).
        std::unique_lock send(send_mutex_, std::try_to_lock);
        if (send.owns_lock()) reclaim_links();
    }
    return nullptr;
}

BufferPtr SciNode::receive(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    if (auto b = receive()) return b; // a stream's usual case, without setting up a wait (~40 instructions)
    return local_->wait([this] { return receive(); }, timeout);
}

// A message of an open batch is lent as a view; any other (the first of a batch, a
// message alone in its slot, a large one) is received as a buffer that the view holds.
MessageView SciNode::receive_view() {
    check_factory("receive");
    local_->driver().progress();
    {
        std::lock_guard lock(recv_mutex_);
        if (batch_.link != nullptr) return view_in_batch();
    }
    return MessageView(receive_polled());
}

MessageView SciNode::receive_view(std::chrono::nanoseconds timeout) {
    check_factory("receive");
    if (auto v = receive_view()) return v;
    return local_->wait([this] { return receive_view(); }, timeout);
}

} // namespace msgpass::sci
