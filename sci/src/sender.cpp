// The sender room of sci (sender.hpp): transfers into the peer's slots, large
// messages through the peer's ring, the send queue with its staged batches, send
// and flush.
#include "sender.hpp"
#include "batch.hpp"
#include "receiver.hpp"

#include <msgpass/kit/errors.hpp>
#include <msgpass/kit/progress.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

namespace msgpass::sci {

namespace {
// Whether two messages of size bytes fit one batch of capacity bytes: a message a
// batch may take (staged, coalesced or held).
bool two_fit_a_batch(std::uint64_t size, std::uint64_t capacity) {
    return batch_data_offset(2) + 2 * batch_align_up(size) <= capacity;
}
} // namespace

Sender::Sender(Links& links, Receiver& receiver, const Node& node)
    : node_(node), links_(links), receiver_(receiver), transport_(links.transport.get()), parameters_(links.parameters),
      local_header_(links.local_header), grants_(links.grants.get()), sequence_(links.sequence), stats_(links.stats),
      send_k_(links.send_k), holds_(send_k_ >= 4), records_(transport_->parameters().sci.records),
      self_(transport_->parameters().self) {
    links.watch(sent_, queue_depth_);
}

Sender::~Sender() {
    if (!queue_.empty()) transport_->driver().queued_changed(-1);
    if (records_pending_.load(std::memory_order_relaxed)) transport_->driver().queued_changed(-1);
    forget_large();
}

void Sender::sync_send_side(Link* link) {
    if (link != send_link_ && link != nullptr) {
        send_link_ = link; // a new incarnation: its counters start again
        sent_.store(0, std::memory_order_relaxed);
        forget_large();
        large_sent_ = 0;
        large_freed_ = 0;
        large_head_ = 0;
        hot_used_ = 0;
        hot_next_sig_ = hot_signature(0, salt_of(link->epoch32));
        send_index_ = 0;
        send_round_.fill(0);
        peer_salt255_ = salt_of(link->epoch32) % 255;
        own_salt255_ = salt_of(transport_->epoch32()) % 255;
        last_note_.fill(0);
        open_ = {}; // the previous incarnation's open slot is gone with it (and its staged records)
        records_batched_ = false;
        marks_ = {};
        if (records_pending_.exchange(false, std::memory_order_relaxed)) transport_->driver().queued_changed(-1);
        fast_size_limit_ = fast_size_limit(*link);
    }
    // After send_link_ took the link this call uses, which is therefore kept.
    if (links_.retired()) links_.reclaim(send_link_);
}

void Sender::try_reclaim() {
    std::unique_lock send(send_mutex_, std::try_to_lock);
    if (send.owns_lock()) links_.reclaim(send_link_);
}

// The descriptors not released by the previous incarnation of the peer will never
// be: their broadcast entries are given up. Send lock held (or the node is dying).
void Sender::forget_large() {
    for (const auto& e : large_live_) {
        if (e.broadcast != no_entry) transport_->broadcast_release(e.broadcast);
    }
    large_live_.clear();
}

bool Sender::try_transfer(Link& link, const Buffer& buffer, BufferPtr* owned, const SharedBuffer* shared) {
    if (open_.link != nullptr) close_records();                   // every note comes after the open slot's records
    if (load(local_header_->epoch) != link.epoch32) return false; // the peer has not introduced itself
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = send_index_;
    const std::uint32_t ack = next_grant();
    if (ack == 0) return false; // no free offset yet
    std::uint32_t slot = ack & ack_slot_mask;
    // The hot slot, when the peer granted one, replaces the index's slot (not for
    // a few cache lines, where it gains nothing and checking it costs).
    const std::size_t size = buffer.size();
    bool hot = false;
    if (size >= hot_min_size) {
        const std::uint32_t status = load(local_header_->status);
        hot = hot_sig_of(status) == hot_next_sig_;
        if (hot) slot = hot_slot_of(status);
    }
    if (slot >= link.slot_count) {
        links_.declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                                       ") granted slot " + std::to_string(slot) + " outside its segment");
        return false;
    }
    const std::uint64_t capacity = std::min<std::uint64_t>(link.slot_size, note_size_mask);
    const std::uint32_t sig = signature_mod(send_round_[i], own_salt255_);
    std::uint32_t note = 0;
    // Sends the descriptor of a message in a region and remembers it until the
    // peer releases it.
    auto describe = [&](std::uint64_t offset, std::uint32_t region, std::uint64_t entry) {
        const auto number = static_cast<std::uint32_t>(large_sent_);
        const LargeDescriptor d{offset, size, number, region, large_check_of(offset, size, number, region), 0};
        sequence_.copy(link.slot(slot), &d, sizeof d);
        note = make_note(sig, true, sizeof d, hot);
        ++large_sent_;
        large_live_.push_back({offset, offset + size, entry});
    };
    std::optional<Transport::BroadcastPlace> shared_place;
    if (shared != nullptr && size >= broadcast_min_size) {
        if (!reclaim_large(link)) return false;
        if (large_live_.size() < large_in_flight) shared_place = transport_->broadcast_acquire(*shared, sequence_);
    }
    if (shared_place) {
        describe(shared_place->offset, region_broadcast, shared_place->entry);
    } else if (size <= capacity) {
        sequence_.copy(link.slot(slot), buffer.fragments());
        note = make_note(sig, false, static_cast<std::uint32_t>(size), hot);
        PathCounters::bump(grants_->paths.alone);
    } else {
        if (link.large_base == nullptr) {
            const std::string name =
                transport_->device().segment_name(parameters_.peer, parameters_.peer_segment_id,
                                                  "large." + std::to_string(transport_->parameters().self));
            if (!link.large.connect(name)) return false;
            link.large.map();
            if (link.large.size() <= large_ring_size) {
                links_.declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                                               ") offers a large-message region of " +
                                               std::to_string(link.large.size()) + " bytes, smaller than its ring");
                return false;
            }
            link.large_capacity = link.large.size() - large_ring_size;
            link.large_base = link.large.address();
        }
        if (size > link.large_capacity) {
            kit::throw_message_too_large(node_, size, link.large_capacity, "the receiver's max_message_size");
        }
        if (!reclaim_large(link)) return false;
        const auto offset = place_large(size);
        if (!offset) return false;
        try {
            link.large.reserve(*offset, size); // the peer's region is sparse: a full /dev/shm is an error, not SIGBUS
        } catch (const ResourceError& e) {
            stats_.error();
            throw ResourceError("send to node " + std::to_string(parameters_.peer) + " (" + parameters_.name + ") of " +
                                std::to_string(size) + " bytes: " + e.what());
        }
        // Through the cache or streamed: whichever moves messages faster end to end (copy_choice.hpp).
        const bool streaming = size >= streaming_min_size && copy_choice_.next(Clock::now(), size);
        if (streaming) {
            sequence_.copy_streaming(link.large_base + *offset, buffer.fragments());
        } else {
            sequence_.copy(link.large_base + *offset, buffer.fragments());
        }
        describe(*offset, region_large, no_entry);
        large_head_ = round_up(*offset + size, large_align);
        if (large_head_ >= large_wrap_at(size)) large_head_ = 0;
    }
    // A buffer that was received here frees its slot now, and the peer gets it as
    // its hot slot before it sees this message: a reply goes where the cache is warm.
    // Small messages do not wait for this (their replies gain nothing from it).
    if (size >= hot_min_size) {
        if (owned != nullptr) owned->reset();
        receiver_.offer_hot(link);
    }
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    if (hot) {
        ++hot_used_;
        hot_next_sig_ = hot_next_sig_ == 127 ? 1 : hot_next_sig_ + 1; // hot_signature(hot_used_, salt)
    }
    advance_send(n);
    stats_.sent_serialized(size);
    grants_->notify(link);
    return true;
}

// Forgets the descriptors the peer released (in order) since the last call; their
// broadcast entries lose a reference. False when the peer's count is impossible
// (the peer is then declared lost). Send lock held.
bool Sender::reclaim_large(Link& link) {
    const std::uint32_t newly =
        (freed_of(load(local_header_->status)) - static_cast<std::uint32_t>(large_freed_)) & 0x7f;
    if (newly > large_live_.size()) {
        links_.declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                                       ") released large messages it was never sent");
        return false;
    }
    for (std::uint32_t k = 0; k < newly; ++k) {
        if (large_live_.front().broadcast != no_entry) transport_->broadcast_release(large_live_.front().broadcast);
        large_live_.pop_front();
    }
    large_freed_ += newly;
    return true;
}

// Where the next large message of size bytes goes in the peer's region: at the
// ring's head, once the messages the peer has not released yet leave room there.
// nullopt while they do not (or large_in_flight are unreleased). Send lock held.
std::optional<std::uint64_t> Sender::place_large(std::uint64_t size) {
    if (large_live_.size() >= large_in_flight) return std::nullopt;
    const std::uint64_t begin = large_head_;
    const std::uint64_t end = begin + size;
    for (const auto& e : large_live_) {
        if (e.broadcast == no_entry && begin < e.end && e.begin < end) return std::nullopt;
    }
    return begin;
}

// Sends the queued shared messages at the front of the queue (two or more) with one
// note: their descriptors fill one slot. A receiver sharing its CPU with others then
// takes many messages per turn instead of max_outst_buffers. Returns how many went.
std::size_t Sender::try_transfer_batch(Link& link) {
    auto batchable = [](const Queued& q) { return q.shared() && q.shared()->size() >= broadcast_min_size; };
    if (queue_.size() < 2 || !batchable(queue_[0]) || !batchable(queue_[1])) return 0;
    if (open_.link != nullptr) close_records();
    if (load(local_header_->epoch) != link.epoch32) return 0;
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = send_index_;
    const std::uint32_t ack = next_grant();
    if (ack == 0) return 0;
    const std::uint32_t slot = ack & ack_slot_mask;
    if (slot >= link.slot_count || !reclaim_large(link)) return 0; // try_transfer reports a bad slot
    const std::size_t room =
        std::min<std::uint64_t>(std::min<std::uint64_t>(link.slot_size, note_size_mask) / sizeof(LargeDescriptor),
                                large_in_flight - large_live_.size());
    std::size_t count = 0;
    std::array<LargeDescriptor, large_in_flight> d{};
    while (count < room && count < queue_.size() && batchable(queue_[count])) {
        const auto& shared = queue_[count].shared();
        const auto place = transport_->broadcast_acquire(shared, sequence_);
        if (!place) break;
        const auto number = static_cast<std::uint32_t>(large_sent_);
        const std::uint64_t size = shared->size();
        d[count] = LargeDescriptor{place->offset,
                                   size,
                                   number,
                                   region_broadcast,
                                   large_check_of(place->offset, size, number, region_broadcast),
                                   0};
        ++large_sent_;
        large_live_.push_back({place->offset, place->offset + size, place->entry});
        stats_.sent_serialized(size);
        ++count;
    }
    if (count == 0) return 0;
    sequence_.copy(link.slot(slot), d.data(), count * sizeof(LargeDescriptor));
    const std::uint32_t note = make_note(signature_mod(send_round_[i], own_salt255_), true,
                                         static_cast<std::uint32_t>(count * sizeof(LargeDescriptor)));
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    advance_send(n);
    grants_->notify(link);
    return count;
}

// Small messages that must wait behind others in the send queue, copied at once into
// one entry of the queue, laid out as the messages of a batch lie in a slot (each on
// an 8-byte boundary) with their lengths beside. The caller's buffer is dropped at
// once (a pool buffer is free again, a received one gives its slot back), and the
// batch later goes into a granted slot with two copies (its table, then all its
// messages) instead of an object, a queue entry, virtual calls and a copy per
// message: a stream whose receiver is behind moves most of its messages this way.
class Sender::Staged final : public SingleBuffer {
public:
    // Larger slots stage no more than this per entry (the slot takes several entries).
    static constexpr std::uint64_t max_capacity = 64 * 1024;
    // Takes the memory of the batch that went last when it is of this capacity
    // (spare), so that a stream allocates nothing per batch.
    Staged(std::uint64_t capacity, StagedMemory& spare) : capacity_(std::min(capacity, max_capacity)), spare_(spare) {
        if (spare_.bytes && spare_.capacity == capacity_) {
            bytes_ = std::move(spare_.bytes);
            lengths.swap(spare_.lengths);
            lengths.clear();
        } else {
            bytes_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(capacity_));
            lengths.reserve(64);
        }
        // The entry's size is its capacity: two never fit one slot, so it never joins
        // another batch as one message (coalescible also asks staged_of).
        reset(bytes_.get(), static_cast<std::size_t>(capacity_), static_cast<std::size_t>(capacity_));
    }
    Staged(const Staged&) = delete;
    Staged& operator=(const Staged&) = delete;
    ~Staged() override {
        spare_.capacity = capacity_;
        spare_.bytes = std::move(bytes_);
        spare_.lengths.swap(lengths);
    }
    // Copies the message in when it fits (only while nothing of the entry went).
    bool add(std::span<const std::byte> bytes) {
        const std::uint64_t size = bytes.size();
        const auto count = static_cast<std::uint32_t>(lengths.size());
        if (first != 0 || count >= batch_max_count || batch_data_offset(count + 1) + used_ + size > capacity_)
            return false;
        if (size != 0) std::memcpy(bytes_.get() + used_, bytes.data(), size);
        lengths.push_back(static_cast<std::uint32_t>(size));
        used_ = batch_align_up(used_ + size);
        return true;
    }
    bool add(const Buffer& buffer) {
        const std::uint64_t size = buffer.size();
        const auto count = static_cast<std::uint32_t>(lengths.size());
        if (first != 0 || count >= batch_max_count || batch_data_offset(count + 1) + used_ + size > capacity_)
            return false;
        std::byte* at = bytes_.get() + used_;
        if (const SingleBuffer* single = buffer.single()) {
            if (size != 0) std::memcpy(at, single->data(), size);
        } else {
            for (const auto& f : buffer.fragments()) {
                if (f.empty()) continue;
                std::memcpy(at, f.data(), f.size());
                at += f.size();
            }
        }
        lengths.push_back(static_cast<std::uint32_t>(size));
        used_ = batch_align_up(used_ + size);
        return true;
    }
    [[nodiscard]] std::uint32_t left() const noexcept { return static_cast<std::uint32_t>(lengths.size()) - first; }
    [[nodiscard]] std::uint32_t length(std::uint32_t k) const noexcept { return lengths[first + k]; }
    // The messages from `first` on, as they lie after the table.
    [[nodiscard]] const std::byte* data() const noexcept { return bytes_.get() + start_; }
    // The next `count` messages, of `bytes` from data() (the last one unpadded), went.
    void consumed(std::uint32_t count, std::uint64_t bytes) noexcept {
        first += count;
        start_ = batch_align_up(start_ + bytes);
    }

    std::vector<std::uint32_t> lengths;
    std::uint32_t first = 0; // the messages before it went

private:
    std::uint64_t capacity_;
    StagedMemory& spare_; // the sender's, which outlives its queue
    std::unique_ptr<std::byte[]> bytes_;
    std::uint64_t used_ = 0;  // where the next message goes
    std::uint64_t start_ = 0; // where message `first` lies
};

// The staged batches are the entries staged_ names, in queue order, so the first of
// them is the only one a look from the front of the queue can meet first.
Sender::Staged* Sender::staged_of(const Queued& q) const {
    if (staged_.empty() || &q.buffer() != staged_.front()) return nullptr;
    return staged_.front();
}

// Copies a message that has to queue behind others into the staged batch at the
// back of the queue (a new one when there is none or it is full). False when the
// message is no small one (it is queued as it is). Send lock held, queue not empty.
bool Sender::stage(const Link& link, const Buffer& buffer) {
    const std::uint64_t capacity = std::min<std::uint64_t>(link.slot_size, note_size_mask);
    const std::uint64_t size = buffer.size();
    if (!two_fit_a_batch(size, std::min(capacity, Staged::max_capacity))) return false;
    if (staged_back_ != nullptr && staged_back_->add(buffer)) return true;
    auto staged = std::make_unique<Staged>(capacity, staged_spare_);
    Staged* raw = staged.get();
    // The message that queued alone before this one (as it was: the queue was empty)
    // joins the new batch when it may, so that both leave in the next slot.
    Queued& back = queue_.back();
    const bool back_staged = !staged_.empty() && staged_.back() == &back.buffer();
    const std::uint64_t back_size = back.buffer().size();
    if (staged_back_ == nullptr && !back_staged && (!back.shared() || back_size < broadcast_min_size) &&
        two_fit_a_batch(back_size, std::min(capacity, Staged::max_capacity))) {
        raw->add(back.buffer());
        raw->add(buffer); // two such messages fit an empty batch
        back.hold(BufferPtr(std::move(staged)));
    } else {
        raw->add(buffer); // fits an empty batch (checked above)
        queue_.emplace_back(BufferPtr(std::move(staged)));
    }
    staged_.push_back(raw);
    staged_back_ = raw;
    return true;
}

// Sends the messages of the staged batch at the front of the queue that fit a slot
// (normally all) with one note. Returns how many went. Send lock held.
std::size_t Sender::try_transfer_staged(Link& link, Staged& staged) {
    if (open_.link != nullptr) close_records();
    if (load(local_header_->epoch) != link.epoch32) return 0;
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = send_index_;
    const std::uint32_t ack = next_grant();
    if (ack == 0) return 0;
    const std::uint32_t slot = ack & ack_slot_mask;
    const std::uint64_t capacity = std::min<std::uint64_t>(link.slot_size, note_size_mask);
    auto size_of = [&](std::uint32_t k) -> std::uint64_t { return staged.length(k); };
    const BatchPlan plan = plan_batch(staged.left(), capacity, size_of);
    if (plan.count == 0 || slot >= link.slot_count) {
        // A peer that came back with smaller slots than the batch was made for: the
        // message goes alone (through its large region if need be). try_transfer
        // also reports a slot outside the segment.
        class View final : public SingleBuffer {
        public:
            View(const std::byte* data, std::size_t size) : SingleBuffer(const_cast<std::byte*>(data), size, size) {}
        };
        const View view(staged.data(), staged.length(0));
        if (!try_transfer(link, view)) return 0;
        staged.consumed(1, staged.length(0));
        return 1;
    }
    std::byte* content = link.slot(slot);
    const std::uint64_t table = batch_data_offset(plan.count);
    sequence_.copy(content + table, staged.data(), plan.size - table);
    write_batch_table(batch_table_, n, plan, size_of);
    sequence_.copy(content, batch_table_.data(), batch_table_.size() * sizeof(std::uint32_t));
    for (std::uint32_t k = 0; k < plan.count; ++k)
        stats_.sent_serialized(staged.length(k));
    PathCounters::bump(grants_->paths.batches);
    PathCounters::bump(grants_->paths.batched, plan.count);
    const std::uint32_t note = make_note(signature_mod(send_round_[i], own_salt255_), false,
                                         static_cast<std::uint32_t>(plan.size), false, true);
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    advance_send(n);
    staged.consumed(plan.count, plan.size - table);
    grants_->notify(link);
    return plan.count;
}

// Whether a queued message may travel in a batch of small messages: not one for the
// broadcast region, and small enough that at least two share a slot.
bool Sender::coalescible(const Queued& q, std::uint64_t capacity) const {
    if (staged_of(q) != nullptr) return false;
    const std::size_t size = q.buffer().size();
    if (q.shared() && size >= broadcast_min_size) return false;
    return two_fit_a_batch(size, capacity);
}

// Sends the small messages at the front of the queue (two or more) with one note:
// they fill one slot behind a batch header that names each one's length (see
// BatchHeader). A stream of small messages then costs one note, one grant and one
// wake-up check per slot instead of per message. Returns how many went. Send lock held.
std::size_t Sender::try_transfer_coalesced(Link& link) {
    if (queue_.size() < 2 || load(local_header_->epoch) != link.epoch32) return 0;
    if (open_.link != nullptr) close_records();
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = send_index_;
    const std::uint32_t ack = next_grant();
    if (ack == 0) return 0;
    const std::uint64_t capacity = std::min<std::uint64_t>(link.slot_size, note_size_mask);
    if (!coalescible(queue_[0], capacity) || !coalescible(queue_[1], capacity)) return 0;
    const std::uint32_t slot = ack & ack_slot_mask;
    if (slot >= link.slot_count) return 0; // try_transfer reports it
    // Each size is asked once (a virtual call); a message that may not join ends
    // the batch.
    batch_sizes_.clear();
    auto size_of = [&](std::uint32_t k) -> std::uint64_t {
        if (k == batch_sizes_.size())
            batch_sizes_.push_back(coalescible(queue_[k], capacity) ? queue_[k].buffer().size() : ~std::uint64_t{0});
        return batch_sizes_[k];
    };
    const BatchPlan plan = plan_batch(queue_.size(), capacity, size_of);
    if (plan.count < 2) return 0;
    std::byte* content = link.slot(slot);
    std::uint64_t at = batch_data_offset(plan.count);
    for (std::uint32_t k = 0; k < plan.count; ++k) {
        sequence_.copy(content + at, queue_[k].buffer().fragments());
        at += batch_align_up(batch_sizes_[k]);
        stats_.sent_serialized(batch_sizes_[k]);
    }
    write_batch_table(batch_table_, n, plan, size_of);
    sequence_.copy(content, batch_table_.data(), batch_table_.size() * sizeof(std::uint32_t));
    PathCounters::bump(grants_->paths.batches);
    PathCounters::bump(grants_->paths.batched, plan.count);
    const auto size = static_cast<std::uint32_t>(plan.size);
    const std::uint32_t note = make_note(signature_mod(send_round_[i], own_salt255_), false, size, false, true);
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    advance_send(n);
    grants_->notify(link);
    return plan.count;
}

// Whether the peer granted the slot of our next message: every transfer needs it,
// so a flush that finds none stops at one look (a send that queues flushes twice).
bool Sender::slot_granted(const Link& link) const {
    return load(local_header_->epoch) == link.epoch32 && next_grant() != 0;
}

std::uint32_t Sender::next_grant() const {
    const std::uint32_t ack = load(local_header_->index[send_index_].ack);
    return sig_of(ack) == signature_mod(send_round_[send_index_], peer_salt255_) ? ack : 0;
}

// Message n went: the next one takes the next index, and this index its next round.
void Sender::advance_send(std::uint64_t n) {
    sent_.store(n + 1, std::memory_order_relaxed);
    send_round_[send_index_] = static_cast<std::uint8_t>(next_round255(send_round_[send_index_]));
    if (++send_index_ == send_k_) send_index_ = 0;
}

bool Sender::granted_ahead(std::uint32_t ahead) const {
    std::uint32_t j = send_index_ + ahead;
    if (j >= send_k_) j -= send_k_;
    // send_round_[j] is the round of the next message on index j, whichever it is.
    return sig_of(load(local_header_->index[j].ack)) == signature_mod(send_round_[j], peer_salt255_);
}

bool Sender::hold_small() {
    if (!holds_) return false;
    if (holding_) {
        if (!granted_ahead(send_k_ - 1)) return true;
        // The receiver took everything: what waits goes now. A stream, whose batch
        // the flush sends now, goes on holding (its next message finds that batch
        // outstanding); a sender with no more than one message waiting stops.
        if (queued_messages_ < 2) holding_ = false;
        return false;
    }
    // Holding starts with the message that finds no slot granted (it queues anyway):
    // a message that could go now is never held by a sender that was not behind.
    if (granted_ahead(0)) return false;
    holding_ = true;
    return true;
}

bool Sender::holds_back(const Link& link) {
    if (!holds_ || queue_.size() != 1) return false;
    const Queued& q = queue_.front();
    if (staged_back_ == nullptr || &q.buffer() != staged_back_) {
        if (staged_of(q) != nullptr || !coalescible(q, std::min<std::uint64_t>(link.slot_size, note_size_mask)))
            return false;
    }
    return hold_small();
}

void Sender::flush_locked(Link* link, bool holding) {
    while (!queue_.empty() && link != nullptr && slot_granted(*link)) {
        if (holding && holds_back(*link)) break;
        std::size_t entries = 0;
        std::size_t messages = 0;
        if (Staged* staged = staged_of(queue_.front())) {
            messages = try_transfer_staged(*link, *staged);
            if (messages == 0) break;
            if (staged == staged_back_) staged_back_ = nullptr; // what is left of it takes no more
            entries = 0;
            if (staged->left() == 0) {
                staged_.pop_front();
                entries = 1;
            }
        } else {
            messages = try_transfer_batch(*link);
            if (messages == 0) messages = try_transfer_coalesced(*link);
            if (messages == 0) {
                const Queued& front = queue_.front();
                if (!try_transfer(*link, front.buffer(), nullptr, front.shared() ? &front.shared() : nullptr)) break;
                messages = 1;
            }
            entries = messages;
        }
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(entries));
        queued_messages_ -= messages;
        queue_depth_.store(queued_messages_, std::memory_order_relaxed);
        if (queue_.empty()) transport_->driver().queued_changed(-1);
    }
}

bool Sender::try_flush(bool pause) {
    const bool idle =
        queue_depth_.load(std::memory_order_relaxed) == 0 && !records_pending_.load(std::memory_order_relaxed);
    if (idle && !pause) return true;
    std::unique_lock lock(send_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return idle;
    Link* link = links_.current();
    sync_send_side(link);
    if (records_pending_.load(std::memory_order_relaxed) && open_.link != nullptr) {
        publish_records();
        grants_->notify(*open_.link);
    }
    flush_deferring(link);
    if (pause && queue_.empty()) {
        // The application paused: what it sends next is not held or staged on what
        // the sender learnt before (docs/sci-protocol.md, "A flush starts afresh").
        holding_ = false;
        records_batched_ = false;
    }
    return queue_.empty();
}

// A flush whose failure is not the caller's to report (a call that sent nothing, or
// a send whose buffer is queued already): the message stays queued, and the next
// send to this node reports why it does not go. Send lock held.
void Sender::flush_deferring(Link* link, bool holding) {
    try {
        flush_locked(link, holding);
    } catch (const ResourceError&) {
        std::lock_guard deferred(deferred_mutex_);
        deferred_error_ = std::current_exception();
        deferred_pending_.store(true, std::memory_order_release);
    }
}

void Sender::throw_if_deferred() {
    if (!deferred_pending_.load(std::memory_order_acquire)) return;
    std::exception_ptr error;
    {
        std::lock_guard deferred(deferred_mutex_);
        error = std::exchange(deferred_error_, nullptr);
        deferred_pending_.store(false, std::memory_order_relaxed);
    }
    if (error) std::rethrow_exception(error);
}

bool Sender::record_fits_slot(const Link& link, std::size_t size) const noexcept {
    return records_ && link.slot_size % record_header_size == 0 && link.slot_offset % record_header_size == 0 &&
           record_next(0, size) + record_header_size <= link.slot_size;
}

void Sender::write_record(std::span<const std::byte> bytes) {
    if (open_.published != open_.used) publish_records(); // the staged ones come first
    std::byte* at = open_.base + open_.used;
    // The receiver spins on the cache line of this record's word: the bytes that
    // share that line go last, next to the word, so that the line leaves its cache
    // once per record instead of once for them and again for the word after the
    // other lines' stores (a 256 B record: 5 lines).
    constexpr std::uintptr_t line = 64;
    const std::size_t head = std::min<std::size_t>(
        bytes.size(), line - (reinterpret_cast<std::uintptr_t>(at + record_header_size) & (line - 1)));
    sequence_.copy(at + record_header_size + head, bytes.data() + head, bytes.size() - head);
    sequence_.copy(at + record_header_size, bytes.data(), head);
    const auto length = static_cast<std::uint32_t>(bytes.size());
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at))
        .store(make_record(self_, open_.sequence, open_.count, length), std::memory_order_release);
    open_.used = record_next(open_.used, length);
    open_.published = open_.used;
    ++open_.count;
}

bool Sender::receiver_behind() noexcept {
    // The receiver wrote 0 when it opened a slot and the count each time its next
    // record passed a quarter: it is behind when it has not reached the quarter
    // before the one that ends here (or not opened this slot when the first ends).
    // While staging, one quarter more: the staged records of the last quarter went
    // in only as it ended. A word of our own segment, checked for the slot's opening
    // note; a word of this slot when the mark is of the slot before is past it.
    const std::uint32_t word = load(local_header_->index[taken_index].ack);
    const std::uint32_t check = taken_check_of(open_.sequence);
    const QuarterMark& need = marks_[records_batched_ ? 1 : 0];
    const bool behind = !taken_reached(word, need.check, need.count) && !(need.check != check && (word >> 24) == check);
    const std::uint64_t quarter = open_.capacity / 4;
    open_.quarter_at = (open_.used / quarter + 1) * quarter;
    mark_quarter(check, open_.count);
    return behind;
}

void Sender::stage_record(std::span<const std::byte> bytes) {
    if (records_stage_size_ < open_.capacity) {
        records_stage_ =
            std::make_unique<std::byte[]>(static_cast<std::size_t>(open_.capacity)); // zeros: no stale padding
        records_stage_size_ = open_.capacity;
    }
    std::byte* at = records_stage_.get() + open_.used;
    const auto length = static_cast<std::uint32_t>(bytes.size());
    const std::uint64_t word = make_record(self_, open_.sequence, open_.count, length);
    std::memcpy(at, &word, sizeof word);
    if (length != 0) std::memcpy(at + record_header_size, bytes.data(), length);
    if (!records_pending_.load(std::memory_order_relaxed)) {
        records_pending_.store(true, std::memory_order_relaxed);
        transport_->driver().queued_changed(1);
    }
    open_.used = record_next(open_.used, length);
    ++open_.count;
    if (open_.used - open_.published >= open_.capacity / 4) publish_records();
}

void Sender::publish_records() {
    const std::uint64_t from = open_.published;
    const std::uint64_t to = open_.used;
    if (from == to) return;
    const std::byte* stage = records_stage_.get();
    // Everything but the first word (the padding between records too: one copy),
    // then the first word, which the receiver polls, with a release store: the
    // records after it were written before it, as one record's bytes before its word.
    if (to - from > record_header_size)
        sequence_.copy(open_.base + from + record_header_size, stage + from + record_header_size,
                       to - from - record_header_size);
    std::uint64_t word = 0;
    std::memcpy(&word, stage + from, sizeof word);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(open_.base + from))
        .store(word, std::memory_order_release);
    open_.published = to;
    records_pending_.store(false, std::memory_order_relaxed);
    transport_->driver().queued_changed(-1);
}

void Sender::close_records() {
    Link& link = *open_.link;
    close_quietly();
    // A receiver asleep on the open slot (or a group receive that looks only at the
    // members with a mark) goes on to give it back.
    grants_->notify(link);
}

void Sender::close_quietly() {
    if (open_.published != open_.used) publish_records();
    std::byte* at = open_.base + open_.used;
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at))
        .store(make_record(self_, open_.sequence, open_.count, record_close), std::memory_order_release);
    open_ = {};
}

// What fast_bytes may take of a link, worked out once per link: at most both nodes'
// max_message_size, and a small message (two of its size fit a slot, as for a
// batch: batch_data_offset(2) + 2 x batch_align_up(size) within the slot, the
// note's size field and a staged batch). The bound is exclusive; 0 takes nothing.
std::uint64_t Sender::fast_size_limit(const Link& link) const noexcept {
    const std::uint64_t room = std::min({link.slot_size, std::uint64_t{note_size_mask}, Staged::max_capacity});
    const std::uint64_t batched =
        room < batch_data_offset(2) ? 0 : (room - batch_data_offset(2)) / 2 / batch_align * batch_align + 1;
    return std::min({std::uint64_t{parameters_.max_message_size} + 1, link.max_message_size + 1, batched});
}

// The usual cases of send_bytes, each as the generic path would do it but without
// its layers: nothing to report (no loss, no deferred error), the link the send
// side uses, a message that fits a slot with others. Then either the queue is empty
// and the next index's slot is granted (the message goes alone, at once; one below
// hot_min_size, so no hot slot), or the queue is not empty, no slot is granted (a
// flush would move nothing) and the staged batch at its back takes the message.
// False when the generic path is to decide. Send lock held.
bool Sender::fast_bytes(std::span<const std::byte> bytes) {
    Link* const link = send_link_;
    const std::size_t size = bytes.size();
    if (link == nullptr || links_.loss.pending() || deferred_pending_.load(std::memory_order_relaxed) ||
        links_.current_if_any() != link || links_.retired() || size >= fast_size_limit_)
        return false; // (a small message: two of its size fit a slot, as for a batch)
    if (queue_.empty()) {
        if (size >= hot_min_size || load(local_header_->epoch) != link->epoch32) return false;
        bool appended = false;
        if (open_.link == link) {
            if (record_next(open_.used, size) + record_header_size > open_.capacity) {
                close_records(); // full: the message opens the next slot
            } else {
                // At each quarter of the slot: is the receiver more than a quarter
                // behind? Then the next ones are staged and go a block at a time
                // (publish_records).
                if (open_.used >= open_.quarter_at) records_batched_ = receiver_behind();
                if (records_batched_) {
                    stage_record(bytes);
                } else {
                    write_record(bytes); // no note of its own
                }
                PathCounters::bump(grants_->paths.records);
                appended = true;
            }
        }
        if (!appended) {
            if (size <= hold_max_size && hold_small()) return false; // held: the generic path queues it
            const std::uint32_t ack = next_grant();
            const std::uint32_t slot = ack & ack_slot_mask;
            if (ack == 0 || slot >= link->slot_count) return false; // queued, or reported, by the generic path
            const std::uint32_t i = send_index_;
            const std::uint64_t n = sent_.load(std::memory_order_relaxed);
            std::uint32_t note = 0;
            if (records_ && record_fits_slot(*link, size)) {
                // The message opens the slot to records: the next small ones follow it
                // there without a note.
                open_ = OpenSlot{link,
                                 link->slot(slot),
                                 0,
                                 link->slot_size,
                                 static_cast<std::uint32_t>(n),
                                 0,
                                 0,
                                 send_k_ < max_outstanding ? link->slot_size / 4 : ~std::uint64_t{0}};
                mark_quarter(taken_check_of(open_.sequence), 0);
                write_record(bytes);
                PathCounters::bump(grants_->paths.records);
                note = make_note(signature_mod(send_round_[i], own_salt255_), false, 0, false, true);
            } else {
                sequence_.copy(link->slot(slot), bytes.data(), size);
                note = make_note(signature_mod(send_round_[i], own_salt255_), false, static_cast<std::uint32_t>(size));
                PathCounters::bump(grants_->paths.alone);
            }
            sequence_.write_word(&link->header->index[i].note, note, last_note_[i]);
            last_note_[i] = note;
            advance_send(n);
        }
        stats_.sent_serialized(size);
        // A receiver that sleeps is rung once per message until it wakes (each a
        // system call): the open slot closes now, so that the next messages take
        // slots of their own and then queue without ringing, as before open slots,
        // instead of ringing once per record of the slot (a look at a word of our own
        // segment, not the wake-up's check: closing a slot is always allowed).
        if (open_.link != nullptr && asleep_of(load(local_header_->status))) close_quietly();
        grants_->notify(*link);
        return true;
    }
    if (staged_back_ == nullptr || queued_messages_ >= parameters_.send_queue_limit ||
        (slot_granted(*link) && (size > hold_max_size || !holds_back(*link))) || !staged_back_->add(bytes))
        return false;
    ++queued_messages_;
    queue_depth_.store(queued_messages_, std::memory_order_relaxed);
    stats_.queued_serialized();
    if ((queued_messages_ & 63) == 0) links_.check_peer(link); // a queue that grows looks at the peer now and then
    return true;
}

// fast_bytes for a buffer of one piece (a send-pool buffer, or a received one sent
// on): its bytes are copied as send_bytes copies them and it is dropped at once, as
// the generic path drops a buffer it transferred or staged. Send lock held.
bool Sender::fast_buffer(BufferPtr& buffer) {
    const SingleBuffer* single = buffer->single();
    if (single == nullptr || !fast_bytes({single->data(), single->size()})) return false;
    buffer = nullptr;
    return true;
}

template <class B>
void Sender::send(B& buffer, const kit::Progressing* self) {
    constexpr bool bytes = std::is_same_v<B, CallerBytes>;
    if (!buffer) kit::throw_null_buffer(node_);
    const std::size_t size = buffer->size();
    if (size > parameters_.max_message_size) {
        stats_.error();
        kit::throw_message_too_large(node_, size, parameters_.max_message_size);
    }
    // Queues towards other peers move too (this one's below, under the lock).
    // (This node's staged records count as its queue: they never coexist with one,
    // a message that queues closes the open slot first.)
    transport_->driver().progress(self, queue_depth_.load(std::memory_order_relaxed) != 0 ||
                                            records_pending_.load(std::memory_order_relaxed));
    std::lock_guard lock(send_mutex_);
    // The usual cases first (fast_bytes), under the same lock: a message that takes
    // the general path below pays for one lock, not two.
    if constexpr (std::is_same_v<B, BufferPtr>) {
        if (fast_buffer(buffer)) return;
    } else if constexpr (bytes) {
        if (fast_bytes({buffer->single()->data(), size})) return;
    }
    links_.throw_if_lost();
    throw_if_deferred();
    Link* link = links_.current();
    if (link != nullptr && size > link->max_message_size) {
        stats_.error();
        kit::throw_message_too_large(node_, size, link->max_message_size, "the receiver's max_message_size");
    }
    sync_send_side(link);
    auto enqueue = [&] {
        if (queued_messages_ >= parameters_.send_queue_limit) {
            stats_.error();
            kit::throw_send_queue_full(node_, parameters_.send_queue_limit);
        }
        auto hold = [&] {
            if constexpr (bytes) {
                BufferPtr copy = transport_->allocate_send_buffer(size);
                if (size != 0) std::memcpy(copy->single()->data(), buffer->single()->data(), size);
                queue_.emplace_back(std::move(copy));
            } else {
                queue_.emplace_back(std::move(buffer));
            }
        };
        if (queue_.empty()) {
            transport_->driver().queued_changed(1);
            PathCounters::bump(grants_->paths.waits);
            hold(); // alone: it goes as it is, without a copy (send_bytes: one copy)
        } else if (link != nullptr && (!std::is_same_v<B, SharedBuffer> || size < broadcast_min_size) &&
                   stage(*link, *buffer)) {
            if constexpr (!bytes) buffer = nullptr; // copied: the caller's buffer is free now
        } else {
            hold();
            staged_back_ = nullptr; // later messages come after this one
        }
        ++queued_messages_;
        queue_depth_.store(queued_messages_, std::memory_order_relaxed);
    };
    if (!queue_.empty()) {
        // (A send of a message of up to hold_max_size holds the queue back while the
        // receiver is behind.)
        flush_locked(
            link,
            size <= hold_max_size); // throws the error of a message queued before (this buffer stays with the caller)
        if (!queue_.empty()) {
            // Still behind others: the message joins the queue, which moves again,
            // so that it may leave in the same batch of small messages as they do.
            enqueue();
            flush_deferring(link, size <= hold_max_size);
            if (!queue_.empty()) { // the last in line is still waiting, this one
                stats_.queued_serialized();
                if ((queued_messages_ & 63) == 0)
                    links_.check_peer(link); // a queue that grows looks at the peer now and then
            }
            return;
        }
    }
    BufferPtr* owned = nullptr;
    const SharedBuffer* shared = nullptr;
    if constexpr (std::is_same_v<B, BufferPtr>) {
        owned = &buffer;
    } else if constexpr (std::is_same_v<B, SharedBuffer>) {
        shared = &buffer;
    }
    // A small message while the sender holds (its receiver fell a window behind) waits
    // in the queue (holds_back), where the next ones join it in a staged batch.
    const bool held =
        link != nullptr && holds_ && size <= hold_max_size &&
        two_fit_a_batch(size, std::min({link->slot_size, std::uint64_t{note_size_mask}, Staged::max_capacity})) &&
        hold_small();
    if (link != nullptr && !held && try_transfer(*link, *buffer, owned, shared)) {
        if constexpr (!bytes) buffer = nullptr;
        return;
    }
    enqueue();
    stats_.queued_serialized();
    links_.check_peer(link);
}

template void Sender::send(BufferPtr&, const kit::Progressing*);
template void Sender::send(SharedBuffer&, const kit::Progressing*);
template void Sender::send(CallerBytes&, const kit::Progressing*);

} // namespace msgpass::sci
