// The sci node's link to the peer: mapping the peer's segment, introduction, and the
// grants of our receive slots (see node.cpp for the whole).
#include "node_parts.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

namespace msgpass::sci {

// ----------------------------------------------------------------------- links

SciNode::Link* SciNode::current_link() {
    if (Link* link = link_.load(std::memory_order_acquire)) return link;
    return establish_link();
}

SciNode::Link* SciNode::establish_link() {
    std::lock_guard lock(link_mutex_);
    if (Link* link = link_.load(std::memory_order_acquire)) return link;
    const auto now = Clock::now();
    if (now < next_connect_) return nullptr;
    next_connect_ = now + std::chrono::milliseconds(2);

    auto link = std::make_shared<Link>(grants_);
    const std::string name = local_->device().segment_name(parameters_.peer, parameters_.peer_segment_id);
    if (!link->segment.connect(name)) return nullptr;
    link->segment.map();
    if (link->segment.size() < control_block_size) return nullptr;
    link->base = link->segment.address();
    link->control = reinterpret_cast<ControlBlock*>(link->base);
    const auto epoch = std::atomic_ref<std::uint64_t>(link->control->epoch).load(std::memory_order_acquire);
    if (epoch == 0) return nullptr; // the owner is still setting it up
    const ControlBlock& cb = *link->control;
    const std::uint64_t seg_size = link->segment.size();
    if (cb.magic != segment_magic || cb.version != protocol_version || cb.node_id != parameters_.peer ||
        cb.max_outst_buffers < 1 || cb.max_outst_buffers > max_outstanding || cb.slot_size == 0 ||
        cb.header_offset + (local_->parameters().self_index + 1) * header_size > seg_size ||
        cb.slot_offset + std::uint64_t{cb.slot_count} * cb.slot_size > seg_size) {
        return nullptr; // not a segment of this protocol version (or corrupt): never use it
    }
    if (static_cast<std::uint32_t>(epoch) == dead_epoch_.load(std::memory_order_relaxed))
        return nullptr; // the lost incarnation
    link->epoch32 = static_cast<std::uint32_t>(epoch);
    link->k = cb.max_outst_buffers;
    link->slot_offset = cb.slot_offset;
    link->slot_size = cb.slot_size;
    link->slot_count = cb.slot_count;
    link->max_message_size = cb.max_message_size;
    link->barrier = (cb.flags & control_barrier) != 0 && process_barrier_registered();
    link->header =
        reinterpret_cast<Header*>(link->base + cb.header_offset + local_->parameters().self_index * header_size);
    map_broadcast(*link, LargeDescriptor{}); // best effort; retried on the first broadcast descriptor
    {
        // The first incarnation is introduced at once; a later one only when the
        // receive side has taken every message of the previous one (receive()).
        std::lock_guard recv(recv_mutex_);
        if (recv_link_ == nullptr) introduce(*link);
    }
    Link* raw = link.get();
    links_.push_back(std::move(link));
    if (links_.size() > 1) retired_.store(true, std::memory_order_relaxed);
    link_.store(raw, std::memory_order_release);
    // A peer that sleeps before we ever connected could not tell us so: its bell's
    // sleeper count is read here, once per connection (not on the data path).
    raw->control->bell.ring();
    return raw;
}

// Moves the receive side to this incarnation of the peer and writes our header at
// the peer: a granted slot per index, the large-buffer grants, and our epoch last,
// so the peer never mixes incarnations. Our notification words there are left as
// they are: the partner may not have taken the messages of our previous
// incarnation yet, and clears them itself when it introduces itself to us. For the
// same reason we clear the notifications the peer's previous incarnation left in
// our header only now, when every one of them has been taken; the new incarnation
// writes none before it sees the grants below. recv_mutex_ held.
void SciNode::introduce(Link& link) {
    abandon_batch(); // none: take_next empties a batch before the receive side moves on
    grants_->generation = (grants_->generation + 1) & Grants::generation_mask;
    link.generation = grants_->generation;
    release_grants(link.generation, link.k);
    if (hot_slot_ != no_slot) local_->release_recv_slot(hot_slot_);
    hot_slot_ = no_slot;
    hot_out_.store(false, std::memory_order_relaxed);
    hot_issued_ = 0;
    received_ = 0;
    recv_index_ = 0;
    recv_round_.fill(0);
    recv_salt255_ = salt_of(link.epoch32) % 255;
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
    store(link.header->epoch, local_->epoch32());
    recv_link_ = &link;
    recv_owner_ = link.shared_from_this();
}

// Starts a new generation of grants: every index of the old one lets go of its
// slot (to the pool), the first k wait for one, the others are unused. Buffers of
// the old generation then return their slots to the pool. recv_mutex_ held.
void SciNode::release_grants(std::uint32_t generation, std::uint32_t k) {
    for (std::uint32_t i = 0; i < max_outstanding; ++i) {
        const std::uint64_t old = grants_->index[i].exchange(
            Grants::pack(generation, 0, i < k ? Grants::no_slot : Grants::unused_slot), std::memory_order_acq_rel);
        const std::uint32_t slot = Grants::slot_of(old);
        if (slot != Grants::no_slot && slot != Grants::unused_slot) local_->release_recv_slot(slot);
    }
}

// The next message of the receive side's incarnation: one of a batch already
// taken, or the next notification. recv_mutex_ held.
BufferPtr SciNode::take_next() {
    if (batch_.link != nullptr) return next_in_batch();
    if (!pending_.empty()) {
        auto b = std::move(pending_.front());
        pending_.pop_front();
        stats_.received_serialized(b->size());
        return b;
    }
    if (recv_link_ == nullptr) return nullptr;
    publish_grants(*recv_link_);
    return take_message(*recv_link_);
}

// A slot from the pool for index i, if it still waits for one (a dropped buffer
// may have given it one meanwhile). False when the pool is empty. recv_mutex_ held.
bool SciNode::grant_from_pool(Link& link, std::uint32_t i) {
    if (Grants::slot_of(grants_->index[i].load(std::memory_order_acquire)) != Grants::no_slot) return true;
    const auto slot = local_->allocate_recv_slot();
    if (!slot) return false;
    if (!grants_->give(link, i, *slot)) local_->release_recv_slot(*slot);
    return true;
}

// Renews the grants of indices whose slot stayed (a message came through the hot
// slot), grants pending indices from the pool (what no dropped buffer gave back),
// and publishes the large buffers released by the application. rang: the caller
// wrote a grant too, for which the peer is rung here if it sleeps. Receiver.
void SciNode::publish_grants(Link& link, bool rang) {
    for (std::uint32_t i = 0; i < link.k; ++i) {
        const std::uint64_t w = grants_->index[i].load(std::memory_order_acquire);
        if (resign_[i]) { // the index's slot stays, for the next round
            resign_[i] = false;
            grants_->write_ack(link, i, Grants::round_of(w), Grants::slot_of(w));
            rang = true;
        } else if (Grants::slot_of(w) == Grants::no_slot) {
            if (!grant_from_pool(link, i)) break;
            rang = true;
        }
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
void SciNode::store_status(Link& link) {
    const std::uint32_t sig = hot_slot_ == no_slot ? 0 : hot_signature(hot_issued_ - 1, salt_of(local_->epoch32()));
    store(link.header->status, make_status(large_published_, sig, hot_slot_ == no_slot ? 0 : hot_slot_,
                                           local_->asleep(), local_->closing()));
}

void SciNode::state_changed() {
    std::lock_guard lock(recv_mutex_);
    if (recv_link_ != nullptr) store_status(*recv_link_);
}

// Grants the peer a hot slot when it has none: the slot freed last, still in this
// core's cache, which the peer's next message may use instead of the slot of its
// index. Called by a send to the peer before its note is written, so that a reply
// finds the grant. Never waits for the receiver thread.
void SciNode::offer_hot(Link& link) {
    if (!local_->hot_slots() || hot_out_.load(std::memory_order_relaxed)) return;
    std::unique_lock lock(recv_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || recv_link_ != &link || hot_slot_ != no_slot) return;
    const auto slot = local_->allocate_recv_slot();
    if (!slot) return;
    if (*slot >= hot_slot_limit) {
        local_->release_recv_slot(*slot);
        return;
    }
    hot_slot_ = *slot;
    ++hot_issued_;
    hot_out_.store(true, std::memory_order_relaxed);
    store_status(link);
}

} // namespace msgpass::sci
