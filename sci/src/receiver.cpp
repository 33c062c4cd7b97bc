// The receiver room of sci (receiver.hpp): introductions to the peer, the grants of
// our receive slots, taking notifications, batches and large messages.
#include "receiver.hpp"
#include "batch.hpp"
#include "sender.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

namespace msgpass::sci {

Receiver::Receiver(Links& links, Sender& sender)
    : links_(links), sender_(sender), transport_(links.transport.get()), parameters_(links.parameters),
      local_header_(links.local_header), grants_(links.grants.get()), stats_(links.stats), loss_(links.loss) {
    grants_->batch_grants.store(true, std::memory_order_relaxed); // until a group asks for marks
    large_release_ = std::make_shared<LargeRelease>();
    large_release_->transport = links.transport;
    large_release_->peer_position = parameters_.peer_index;
    // The region where this peer writes large messages for us: the ring plus room
    // for one message of max_message_size that starts at its end; sparse until touched.
    large_capacity_ = round_up(std::max<std::uint64_t>(parameters_.max_message_size, 64), 4096);
    large_release_->region.create(transport_->device().segment_name(transport_->parameters().self,
                                                                    transport_->parameters().sci.recv_seg_id,
                                                                    "large." + std::to_string(parameters_.peer)),
                                  large_ring_size + large_capacity_, Pages::on_use); // the sender reserves
    large_release_->region.map();
}

Receiver::~Receiver() {
    std::lock_guard lock(recv_mutex_);
    release_grants(grants_->generation + 1, 0);
    abandon_batch();
    if (hot_slot_ != no_slot) transport_->release_recv_slot(hot_slot_);
}

void Receiver::adopt(Link& link) {
    std::lock_guard recv(recv_mutex_);
    if (recv_link_ == nullptr) introduce(link);
}

std::unique_lock<kit::FastLock> Receiver::hold(const Link*& in_use) {
    std::unique_lock lock(recv_mutex_);
    in_use = recv_link_;
    return lock;
}

// Moves the receive side to this incarnation of the peer and writes our header at
// the peer: a granted slot per index, the large-buffer grants, and our epoch last,
// so the peer never mixes incarnations. Our notification words there are left as
// they are: the partner may not have taken the messages of our previous
// incarnation yet, and clears them itself when it introduces itself to us. For the
// same reason we clear the notifications the peer's previous incarnation left in
// our header only now, when every one of them has been taken; the new incarnation
// writes none before it sees the grants below. recv_mutex_ held.
void Receiver::introduce(Link& link) {
    abandon_batch(); // none: take_next empties a batch before the receive side moves on
    grants_->generation = (grants_->generation + 1) & Grants::generation_mask;
    link.generation = grants_->generation;
    release_grants(link.generation, link.k);
    if (hot_slot_ != no_slot) transport_->release_recv_slot(hot_slot_);
    hot_slot_ = no_slot;
    hot_out_.store(false, std::memory_order_relaxed);
    hot_issued_ = 0;
    received_ = 0;
    recv_index_ = 0;
    recv_round_.fill(0);
    recv_salt255_ = salt_of(link.epoch32) % 255;
    grants_->next_note.store(signature_mod(0, recv_salt255_), std::memory_order_relaxed); // index 0, round 0
    large_received_ = 0;
    large_generation_ = large_release_->restart();
    large_published_ = 0;
    store(link.header->epoch, 0);
    for (std::uint32_t i = 0; i < max_outstanding; ++i) {
        store(local_header_->index[i].note, 0);
        store(link.header->index[i].ack, 0);
        resign_[i] = false;
    }
    store_status(link);
    for (std::uint32_t i = 0; i < link.k; ++i)
        grant_from_pool(link, i);
    store(link.header->epoch, transport_->epoch32());
    recv_link_ = &link;
    recv_owner_ = link.shared_from_this();
}

// Starts a new generation of grants: every index of the old one lets go of its
// slot (to the pool), the first k wait for one, the others are unused. Buffers of
// the old generation then return their slots to the pool. recv_mutex_ held.
void Receiver::release_grants(std::uint32_t generation, std::uint32_t k) {
    attention_ = (std::uint32_t{1} << k) - 1;
    grants_->deferred_count.store(0, std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < max_outstanding; ++i) {
        const std::uint64_t old = grants_->index[i].exchange(
            Grants::pack(generation, 0, i < k ? Grants::no_slot : Grants::unused_slot), std::memory_order_acq_rel);
        grants_->deferred[i].store(0, std::memory_order_relaxed); // its slot goes to the pool below
        const std::uint32_t slot = Grants::slot_of(old);
        if (slot != Grants::no_slot && slot != Grants::unused_slot) transport_->release_recv_slot(slot);
    }
}

// The next message of the receive side's incarnation: one of a batch already
// taken, or the next notification. recv_mutex_ held.
BufferPtr Receiver::take_next() {
    if (batch_.link != nullptr) {
        if (!batch_.records) return next_in_batch();
        Record r;
        if (records_ready(r)) return record_buffer(r);
        if (batch_.link != nullptr) { // nothing yet: no other note comes before its close
            if (recv_link_ != nullptr) publish_deferred(*recv_link_);
            return nullptr;
        }
    }
    if (!violation_.empty()) return nullptr; // reported by the caller; nothing after it is taken
    if (!pending_.empty()) {
        auto b = std::move(pending_.front());
        pending_.pop_front();
        stats_.received_serialized(b->size());
        return b;
    }
    if (recv_link_ == nullptr) return nullptr;
    publish_grants(*recv_link_);
    auto b = take_message(*recv_link_);
    if (!b) publish_deferred(*recv_link_); // nothing to hand out: the waiting acks go now
    return b;
}

// The acks the receiving thread's drops left waiting (Grants::publish_deferred),
// and the peer rung if it sleeps. recv_mutex_ held.
void Receiver::publish_deferred(Link& link) {
    if (grants_->publish_deferred(link)) grants_->wake(link);
}

// A slot from the pool for index i, if it still waits for one (a dropped buffer
// may have given it one meanwhile). False when the pool is empty. recv_mutex_ held.
bool Receiver::grant_from_pool(Link& link, std::uint32_t i) {
    if (Grants::slot_of(grants_->index[i].load(std::memory_order_acquire)) != Grants::no_slot) return true;
    const auto slot = transport_->allocate_recv_slot();
    if (!slot) return false;
    if (!grants_->give(link, i, *slot)) transport_->release_recv_slot(*slot);
    return true;
}

// Renews the grants of indices whose slot stayed (a message came through the hot
// slot), grants pending indices from the pool (what no dropped buffer gave back),
// and publishes the large buffers released by the application. rang: the caller
// wrote a grant too, for which the peer is rung here if it sleeps. Receiver.
void Receiver::publish_grants(Link& link, bool rang) {
    // Half the window of acks waits for this thread's receive calls (Grants::offer):
    // they go with whatever is granted below, one wake-up check for all.
    if (grants_->deferred_count.load(std::memory_order_relaxed) >= Grants::defer_limit(link.k) &&
        grants_->deferred_count.load(std::memory_order_relaxed) != 0)
        rang |= grants_->publish_deferred(link);
    // In index order, as far as the pool lasts; indices not in attention_ hold a slot.
    for (std::uint32_t left = attention_; left != 0; left &= left - 1) {
        const auto i = static_cast<std::uint32_t>(std::countr_zero(left));
        if (i >= link.k) break;
        const std::uint64_t w = grants_->index[i].load(std::memory_order_acquire);
        if (resign_[i]) { // the index's slot stays, for the next round
            resign_[i] = false;
            grants_->write_ack(link, i, Grants::round_of(w), Grants::slot_of(w));
            rang = true;
        } else if (Grants::slot_of(w) == Grants::no_slot) {
            if (!grant_from_pool(link, i)) {
                // The pool is empty: a later receive grants it, which a group makes
                // only for a member with a ready mark. Or the slot's pages could not
                // be taken from /dev/shm: the next receive that finds nothing says so.
                transport_->mark_ready(parameters_.peer_index);
                no_pages_ = transport_->slot_pages_error();
                break;
            }
            no_pages_.clear();
            rang = true;
        }
        attention_ &= ~(std::uint32_t{1} << i);
    }
    const auto freed = large_release_->freed_published.load(std::memory_order_acquire);
    if (freed != large_published_) {
        large_published_ = freed;
        store_status(link);
        rang = true;
    }
    if (rang) grants_->wake(link);
}

// The release count, the hot slot and this process's state share one word, written
// under the receiver lock from copies kept here (never read back from the peer's
// segment). A plain store, never a repeated stale value (an old release count would
// look like a count going back). recv_mutex_ held.
void Receiver::store_status(Link& link) {
    const std::uint32_t sig = hot_slot_ == no_slot ? 0 : hot_signature(hot_issued_ - 1, salt_of(transport_->epoch32()));
    store(link.header->status, make_status(large_published_, sig, hot_slot_ == no_slot ? 0 : hot_slot_,
                                           transport_->asleep(), transport_->closing(), marks_));
}

void Receiver::want_marks() {
    {
        std::lock_guard lock(recv_mutex_);
        if (marks_) return;
        marks_ = true;
        // A group looks at this node only for its marks: every drop writes its ack at
        // once again (one waiting now goes with the look our own mark brings below).
        grants_->batch_grants.store(false, std::memory_order_relaxed);
        if (recv_link_ != nullptr) store_status(*recv_link_); // else introduce writes it, before any grant
    }
    // A peer that read our status before this store and wrote a note after it (its
    // fence between the two, or our barrier standing for it) is found by the look
    // that our own mark brings.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (transport_->makes_barriers()) process_barrier();
    transport_->mark_ready(parameters_.peer_index);
}

void Receiver::write_status() {
    std::lock_guard lock(recv_mutex_);
    if (recv_link_ != nullptr) store_status(*recv_link_);
}

// Grants the peer a hot slot when it has none: the slot freed last, still in this
// core's cache, which the peer's next message may use instead of the slot of its
// index. Called by a send to the peer before its note is written, so that a reply
// finds the grant. Never waits for the receiver thread.
void Receiver::offer_hot(Link& link) {
    if (!transport_->hot_slots() || hot_out_.load(std::memory_order_relaxed)) return;
    std::unique_lock lock(recv_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || recv_link_ != &link || hot_slot_ != no_slot) return;
    const auto slot = transport_->allocate_recv_slot();
    if (!slot) return;
    if (*slot >= hot_slot_limit) {
        transport_->release_recv_slot(*slot);
        return;
    }
    hot_slot_ = *slot;
    ++hot_issued_;
    hot_out_.store(true, std::memory_order_relaxed);
    store_status(link);
}

BufferPtr Receiver::take_message(Link& link) {
    const std::uint32_t i = recv_index_;
    const std::uint32_t note = load(local_header_->index[i].note);
    if (sig_of(note) != signature_mod(recv_round_[i], recv_salt255_)) {
        PathCounters::bump(grants_->paths.empty);
        return nullptr;
    }
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
    grants_->next_note.store(recv_index_ << 8 | signature_mod(recv_round_[recv_index_], recv_salt255_),
                             std::memory_order_relaxed);
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
        attention_ |= std::uint32_t{1} << i;
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
        } else if (size == 0) {
            opened = open_records(link, i, slot, number); // opens_records(note)
        } else {
            opened = open_batch(link, i, slot, size, number);
        }
        if (!opened) {
            if (hot) {
                transport_->release_recv_slot(slot);
            } else {
                keep();
            }
            return nullptr;
        }
        grants_->index[i].store(Grants::pack(link.generation, next, Grants::no_slot), std::memory_order_release);
        attention_ |= std::uint32_t{1} << i;
        if (link.k == 1) publish_grants(link);
        if (lend_) return nullptr; // view() lends it from the open batch
        if (batch_.records) {
            Record r;
            return records_ready(r) ? record_buffer(r) : nullptr;
        }
        return next_in_batch();
    }
    if (!large) {
        if (size > transport_->control().slot_size) {
            if (hot) {
                transport_->release_recv_slot(slot);
            } else {
                keep();
            }
            violation_ = "node " + std::to_string(parameters_.peer) + " sent a size word of " + std::to_string(size) +
                         " bytes for a slot of " + std::to_string(transport_->control().slot_size);
            return nullptr;
        }
        // The index waits for a slot: this buffer's when it is dropped, or one from
        // the pool on the next receive.
        if (!hot) {
            grants_->index[i].store(Grants::pack(link.generation, next, Grants::no_slot), std::memory_order_release);
            attention_ |= std::uint32_t{1} << i;
        }
        if (lend_) {
            lend_alone(link, i, slot, size);
            if (link.k == 1) publish_grants(link);
            return nullptr; // view() lends it
        }
        Transport::SlotHold& hold = transport_->slot_hold(slot);
        hold.index = i;
        hold.owner = recv_owner_;
        buffer = std::make_unique<RecvBuffer>(link, slot, transport_->slot_address(slot), size, false);
    } else {
        // One descriptor, or several (a batch of queued broadcast messages); the
        // first is handed out now, the others by the next receive calls.
        const std::size_t count = size / sizeof(LargeDescriptor);
        bool valid = size % sizeof(LargeDescriptor) == 0 && count >= 1 && size <= transport_->control().slot_size &&
                     count <= large_in_flight;
        for (std::size_t k = 0; valid && k < count; ++k) {
            LargeDescriptor d{};
            std::memcpy(&d, transport_->slot_address(slot) + k * sizeof d, sizeof d);
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
                    data = links_.map_broadcast(link, d);
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
            transport_->release_recv_slot(slot);
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
bool Receiver::open_batch(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size, std::uint64_t number) {
    std::string why =
        size > transport_->control().slot_size
            ? "larger than the slot of " + std::to_string(transport_->control().slot_size)
            : check_batch(transport_->slot_address(slot), size, number, parameters_.max_message_size, batch_lengths_);
    if (!why.empty()) {
        violation_ = "node " + std::to_string(parameters_.peer) + " sent a malformed batch of " + std::to_string(size) +
                     " bytes (" + why + ")";
        return false;
    }
    const auto count = static_cast<std::uint32_t>(batch_lengths_.size());
    Transport::SlotHold& hold = transport_->slot_hold(slot);
    hold.refs.store(count, std::memory_order_relaxed);
    hold.index = i;
    hold.owner = recv_owner_;
    batch_ = Batch{&link, slot, 0, count, static_cast<std::uint32_t>(batch_data_offset(count)), false};
    return true;
}

// Opens a message alone in its slot as a batch of one, for view(): lent, the slot
// goes back when the view is released (as a RecvBuffer that is not shared). Receiver.
void Receiver::lend_alone(Link& link, std::uint32_t i, std::uint32_t slot, std::uint32_t size) {
    Transport::SlotHold& hold = transport_->slot_hold(slot);
    hold.index = i;
    hold.owner = recv_owner_;
    batch_lengths_.resize(1);
    batch_lengths_[0] = size;
    batch_ = Batch{&link, slot, 0, 1, 0, true};
}

// Opens slot (announced by note number `number` on index i) to records: the next
// receive calls hand out its records until the close. Receiver.
bool Receiver::open_records(Link& link, std::uint32_t i, std::uint32_t slot, std::uint64_t number) {
    const std::uint64_t slot_size = transport_->control().slot_size;
    if (slot_size % record_header_size != 0 || transport_->control().slot_offset % record_header_size != 0 ||
        slot_size < 2 * record_header_size) {
        violation_ = "node " + std::to_string(parameters_.peer) + " opened a slot of " + std::to_string(slot_size) +
                     " bytes to records, which it cannot take";
        return false;
    }
    Transport::SlotHold& hold = transport_->slot_hold(slot);
    hold.refs.store(open_refs, std::memory_order_relaxed);
    hold.index = i;
    hold.owner = recv_owner_;
    batch_ = Batch{&link,
                   slot,
                   0,
                   0,
                   0,
                   false,
                   true,
                   static_cast<std::uint32_t>(number),
                   transport_->slot_address(slot),
                   slot_size,
                   link.k < max_outstanding ? slot_size / 4 : ~std::uint64_t{0}};
    if (link.k < max_outstanding) report_taken(); // opened: the sender stops staging for a receiver a slot behind
    return true;
}

Receiver::Record Receiver::peek_record() const {
    std::byte* at = batch_.base + batch_.offset;
    const std::uint64_t word =
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at)).load(std::memory_order_acquire);
    const auto length = static_cast<std::uint32_t>(word);
    if (static_cast<std::uint32_t>(word >> 32) !=
        record_check_of(parameters_.peer, batch_.sequence, batch_.next, length))
        return {};
    if (length == record_close) return {Record::closed, nullptr, 0};
    // Room for this record and a close after it, as the sender keeps.
    if (length > parameters_.max_message_size || record_next(batch_.offset, length) + record_header_size > batch_.size)
        return {Record::bad, nullptr, length};
    return {Record::message, at + record_header_size, length};
}

void Receiver::advance_record(const Record& r) noexcept {
    batch_.offset = static_cast<std::uint32_t>(record_next(batch_.offset, r.length));
    ++batch_.next;
    if (batch_.offset >= batch_.report_at) report_taken();
}

void Receiver::report_taken() noexcept {
    store(batch_.link->header->index[taken_index].ack, make_taken(taken_check_of(batch_.sequence), batch_.next));
    const std::uint64_t quarter = batch_.size / 4;
    batch_.report_at = (batch_.offset / quarter + 1) * quarter;
}

void Receiver::close_records() {
    Link& link = *batch_.link;
    const std::uint32_t slot = batch_.slot;
    const std::uint32_t unused = open_refs - batch_.next; // the hold beyond the records handed out
    batch_.link = nullptr;
    batch_.records = false;
    if (transport_->slot_hold(slot).refs.fetch_sub(unused, std::memory_order_acq_rel) == unused)
        link.grants->give_back(link, slot);
}

bool Receiver::records_ready(Record& r) {
    r = peek_record();
    switch (r.kind) {
    case Record::message:
        return true;
    case Record::none:
        return false;
    case Record::closed:
        close_records();
        return false;
    case Record::bad:
        violation_ = "node " + std::to_string(parameters_.peer) + " sent a malformed record of " +
                     std::to_string(r.length) + " bytes at offset " + std::to_string(batch_.offset) +
                     " of its open slot";
        close_records();
        return false;
    }
    return false;
}

BufferPtr Receiver::record_buffer(const Record& r) {
    auto b = std::make_unique<RecvBuffer>(*batch_.link, batch_.slot, r.data, r.length, true);
    advance_record(r);
    b->set_source(parameters_.peer);
    stats_.received_serialized(r.length);
    return b;
}

namespace {
SlotLender slot_lender;
}

MessageView Receiver::record_view(const Record& r) {
    Link* link = batch_.link;
    const std::uint64_t token = batch_.slot;
    advance_record(r);
    stats_.received_serialized(r.length);
    return MessageView({r.data, r.length}, parameters_.peer, &slot_lender, link, token);
}

// The next message of the open batch, a view into its slot. Receiver.
BufferPtr Receiver::next_in_batch() {
    const std::uint32_t length = batch_lengths_[batch_.next];
    auto b = std::make_unique<RecvBuffer>(*batch_.link, batch_.slot,
                                          transport_->slot_address(batch_.slot) + batch_.offset, length, !batch_.alone);
    batch_.offset = static_cast<std::uint32_t>(batch_align_up(batch_.offset + length));
    if (++batch_.next == batch_.count) batch_.link = nullptr;
    b->set_source(parameters_.peer);
    stats_.received_serialized(length);
    return b;
}

// The next message of the open batch, lent: no object, the slot's hold counts it
// as it counts a RecvBuffer. Receiver.
MessageView Receiver::view_in_batch() {
    const std::uint32_t length = batch_lengths_[batch_.next];
    const std::byte* data = transport_->slot_address(batch_.slot) + batch_.offset;
    Link* link = batch_.link;
    const std::uint64_t token = batch_.slot | (batch_.alone ? SlotLender::alone_flag : 0);
    batch_.offset = static_cast<std::uint32_t>(batch_align_up(batch_.offset + length));
    if (++batch_.next == batch_.count) batch_.link = nullptr;
    stats_.received_serialized(length);
    return MessageView({data, length}, parameters_.peer, &slot_lender, link, token);
}

// The messages of the open batch that were never handed out let go of its slot (the
// node ends). Receiver lock held.
void Receiver::abandon_batch() {
    if (batch_.link == nullptr) return;
    if (batch_.records) return close_records();
    const std::uint32_t left = batch_.count - batch_.next;
    Link& link = *batch_.link;
    batch_.link = nullptr;
    if (batch_.alone || transport_->slot_hold(batch_.slot).refs.fetch_sub(left, std::memory_order_acq_rel) == left)
        link.grants->give_back(link, batch_.slot);
}

void Receiver::publish_pending() {
    std::lock_guard lock(recv_mutex_);
    if (recv_link_ == nullptr) return;
    publish_grants(*recv_link_);
    publish_deferred(*recv_link_);
}

// This thread receives: its own drops may leave their acks for its next call
// (Grants::offer). One load per call.
void Receiver::note_receiving_thread() noexcept {
    const void* tag = Grants::thread_tag();
    if (grants_->receiving_thread.load(std::memory_order_relaxed) != tag)
        grants_->receiving_thread.store(tag, std::memory_order_relaxed);
}

BufferPtr Receiver::poll() {
    note_receiving_thread();
    if (batch_.link != nullptr) { // as in view(): no lock for an open batch
        if (!batch_.records) return next_in_batch();
        const Record r = peek_record();
        if (r.kind == Record::message) return record_buffer(r);
    }
    Link* link = links_.current(); // compared, not read: declare_lost reads only the current link
    std::string violation, no_pages;
    {
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
        violation.swap(violation_);
        no_pages = no_pages_;
    }
    return after_nothing(link, violation, no_pages);
}

// poll() after its look found nothing to take: the violation it found reported, the
// peer checked, a loss or a new incarnation of the peer looked at, a grant that
// found no room in /dev/shm reported (nothing was taken: nothing is lost).
BufferPtr Receiver::after_nothing(Link* link, const std::string& violation, const std::string& no_pages) {
    if (!violation.empty() && link != nullptr) links_.declare_lost(link, violation + "; the connection is dropped");
    if (!no_pages.empty()) {
        stats_.error();
        throw ResourceError("receive from node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                            "): no receive slot can be granted to it: " + no_pages);
    }
    links_.check_peer();
    if (loss_.pending()) {
        // The loss was found after the poll above: a message the peer wrote before it
        // went is visible now, and comes before the loss.
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
    }
    links_.throw_if_lost();
    if (links_.current_if_any() != nullptr) {
        {
            // Read under the receive lock, which Links::reclaim also takes: the link
            // stays while it is introduced.
            std::lock_guard lock(recv_mutex_);
            Link* now = links_.current_if_any();
            if (now == nullptr || recv_link_ == now || loss_.pending()) return nullptr;
            if (auto b = take_next()) return b;
            introduce(*now);
        }
        // The receive side left the previous incarnation: its mapping may go now,
        // unless a sender holds the send lock (the next send then lets it go).
        sender_.try_reclaim();
    }
    return nullptr;
}

MessageView Receiver::next_view() {
    bool nothing = false;
    MessageView v = view(&nothing);
    if (v) return v;
    if (!nothing) return MessageView(poll());
    (void)links_.current(); // as poll(): connects to the peer when there is no link
    std::string no_pages;
    {
        std::lock_guard lock(recv_mutex_);
        no_pages = no_pages_;
    }
    return MessageView(after_nothing(nullptr, {}, no_pages));
}

MessageView Receiver::view(bool* nothing) {
    note_receiving_thread();
    if (batch_.link != nullptr) { // a stream's usual case: no lock
        if (!batch_.records) return view_in_batch();
        const Record r = peek_record();
        if (r.kind == Record::message) return record_view(r);
    }
    std::lock_guard lock(recv_mutex_);
    Record r;
    if (batch_.link != nullptr) {
        if (!batch_.records) return view_in_batch();
        if (records_ready(r)) return record_view(r);
        if (batch_.link != nullptr) { // nothing yet
            if (nothing != nullptr) *nothing = true;
            if (recv_link_ != nullptr) publish_deferred(*recv_link_);
            return {};
        }
    }
    if (!pending_.empty() || recv_link_ == nullptr || !violation_.empty()) return {};
    publish_grants(*recv_link_);
    lend_ = true;
    BufferPtr b = take_message(*recv_link_);
    lend_ = false;
    if (b) return MessageView(std::move(b)); // a large message
    if (batch_.link != nullptr) {
        if (!batch_.records) return view_in_batch();
        if (records_ready(r)) return record_view(r);
    }
    if (nothing != nullptr) *nothing = violation_.empty() && pending_.empty();
    publish_deferred(*recv_link_); // nothing to lend: the waiting acks go now
    return {};
}

} // namespace msgpass::sci
