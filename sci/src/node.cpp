// The sci protocol between this process and one peer: connection (link) to the
// peer's segment, introduction, slot grants, signed notifications, large messages
// through a ring in a region per sender, the send queue, and peer loss and restart.
#include "node.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

namespace msgpass::sci {

namespace {
using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::uint32_t load(const std::uint32_t& word) {
    return std::atomic_ref<std::uint32_t>(const_cast<std::uint32_t&>(word)).load(std::memory_order_acquire);
}

void store(std::uint32_t& word, std::uint32_t value) {
    std::atomic_ref<std::uint32_t>(word).store(value, std::memory_order_release);
}

std::size_t round_up(std::size_t n, std::size_t to) {
    return (n + to - 1) / to * to;
}
} // namespace

// A mapping of the peer's segment (and, lazily, of its large region for us).
struct SciNode::Link {
    RemoteSegment segment;
    ControlBlock* control = nullptr;
    Header* header = nullptr; // our header in the peer's segment
    std::byte* base = nullptr;
    std::uint32_t epoch32 = 0;
    std::uint32_t k = 1;           // outstanding messages the peer may have towards us: its max_outst_buffers
    std::uint32_t generation = 0;  // of the receive side's introduction to this link (Grants)
    std::uint64_t slot_offset = 0; // the geometry is read once, when connecting
    std::uint64_t slot_size = 0;
    std::uint32_t slot_count = 0;
    std::uint64_t max_message_size = 0;
    RemoteSegment large;
    std::byte* large_base = nullptr;
    std::uint64_t large_capacity = 0; // the largest message its large region takes
    // The peer's broadcast region (receiver side), shared with the buffers that
    // point into it so that they outlive the link.
    std::shared_ptr<RemoteSegment> broadcast;
    [[nodiscard]] std::byte* slot(std::uint32_t s) const {
        return base + slot_offset + static_cast<std::size_t>(s) * slot_size;
    }
};

// Counts the large buffers the application released, in the order the peer sent
// them, so that the receiver thread can tell the sender which part of the ring is
// free again. Buffers may be dropped in any order and by any thread; one dropped
// before an older one is remembered until the older one goes too.
struct SciNode::LargeRelease {
    std::shared_ptr<LocalNode> local;
    LocalSegment region; // where the peer writes large messages to us; lives as long as its buffers
    std::mutex mutex;
    std::uint64_t generation = 0;                  // one per introduction: buffers of an earlier one count for nothing
    std::uint64_t freed = 0;                       // messages released in order since the introduction
    std::array<bool, large_in_flight> early{};     // released ahead of an older one, by sequence mod large_in_flight
    std::atomic<std::uint64_t> freed_published{0}; // freed, for the receiver thread

    void release(std::uint64_t of_generation, std::uint64_t sequence) {
        std::lock_guard lock(mutex);
        if (of_generation != generation || sequence < freed || sequence - freed >= large_in_flight) return;
        early[sequence % large_in_flight] = true;
        while (early[freed % large_in_flight]) {
            early[freed % large_in_flight] = false;
            ++freed;
        }
        freed_published.store(freed, std::memory_order_release);
    }
    // A new introduction: numbering starts again at 0. Returns the new generation.
    std::uint64_t restart() {
        std::lock_guard lock(mutex);
        early.fill(false);
        freed = 0;
        freed_published.store(0, std::memory_order_release);
        return ++generation;
    }
};

// The grants of our receive slots to the peer (the ack words of our header at the
// peer), shared with the buffers received from it: a buffer that is dropped gives
// its slot back to the peer at once, from the dropping thread, when an index of its
// incarnation waits for one (seed, receive step 3), so that a sender waiting for an
// offset goes on while the receiver still works on earlier messages. The receiver
// thread grants from the pool on its next receive what no buffer gave back.
//
// Each index has one atomic word: generation:24 | round:8 | slot:32. generation
// names the receive side's introduction (a buffer of an earlier one never grants),
// round is that of the index's next grant (mod 255: the signature depends on no
// more), slot is the slot granted for it, no_slot while the index waits for one, or
// unused_slot beyond the peer's max_outst_buffers. The word goes from a slot to
// no_slot only in the receiver thread (a message taken), and from no_slot to a
// slot by a compare-exchange, so exactly one thread writes each grant.
struct SciNode::Grants {
    static constexpr std::uint32_t no_slot = 0xffffffffu;
    static constexpr std::uint32_t unused_slot = 0xfffffffeu;
    static constexpr std::uint32_t generation_mask = (1u << 24) - 1;

    Grants(std::shared_ptr<LocalNode> l, Header* h, double rate, std::uint64_t seed)
        : local(std::move(l)), local_header(h), injector(rate, seed),
          sequence(injector.enabled() ? &injector : nullptr) {}

    std::shared_ptr<LocalNode> local;
    Header* local_header; // where the peer writes to us (its status: whether it sleeps)
    ErrorInjector injector;
    Sequence sequence;
    // Every link made, kept mapped as long as a buffer may write a grant through it.
    std::vector<std::unique_ptr<Link>> links;
    std::array<std::atomic<std::uint64_t>, max_outstanding> index{};
    std::uint32_t generation = 0; // of the last introduction; receiver thread

    static std::uint64_t pack(std::uint32_t gen, std::uint32_t round, std::uint32_t slot) {
        return (std::uint64_t{gen & generation_mask} << 40) | (std::uint64_t{round} << 32) | slot;
    }
    static std::uint32_t generation_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 40); }
    static std::uint32_t round_of(std::uint64_t w) { return static_cast<std::uint32_t>(w >> 32) & 0xff; }
    static std::uint32_t slot_of(std::uint64_t w) { return static_cast<std::uint32_t>(w); }
    static std::uint32_t next_round(std::uint32_t round) { return (round + 1) % 255; }

    // Writes the ack of index i. An injected error writes the word of the previous
    // round first (a repeated grant), which the sender does not take.
    void write_ack(Link& link, std::uint32_t i, std::uint32_t round, std::uint32_t slot) {
        const std::uint32_t salt = salt_of(local->epoch32());
        sequence.write_word(&link.header->index[i].ack, make_ack(signature(round, salt), slot),
                            make_ack(signature(round + 254, salt), slot));
    }
    // Grants slot to index i if it waits for one in this generation.
    bool give(Link& link, std::uint32_t i, std::uint32_t slot) {
        std::uint64_t w = index[i].load(std::memory_order_acquire);
        if (generation_of(w) != link.generation || slot_of(w) != no_slot) return false;
        if (!index[i].compare_exchange_strong(w, pack(link.generation, round_of(w), slot), std::memory_order_acq_rel,
                                              std::memory_order_acquire))
            return false;
        write_ack(link, i, round_of(w), slot);
        return true;
    }
    // After a note or a grant was written to the peer: rings its doorbell if it said
    // it sleeps. That word is in our own segment (the peer wrote it there), so no
    // remote memory is read; the fence pairs with the one of the peer's
    // announcement (LocalNode::announce_sleep), so that either the peer's last poll
    // sees what we wrote or we see that it sleeps.
    void wake(Link& link) const {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (asleep_of(load(local_header->status))) link.control->bell.wake();
    }
    // Grants slot to the first index that waits for one, from index `first` on.
    // False when none does (the slot then goes back to the pool). Any thread.
    bool offer(Link& link, std::uint32_t first, std::uint32_t slot) {
        for (std::uint32_t k = 0; k < link.k; ++k) {
            if (give(link, (first + k) % link.k, slot)) {
                wake(link);
                return true;
            }
        }
        return false;
    }
};

// SCIRecvBuffer: a received message in a receive slot of the local segment. When
// the buffer is dropped, its slot is granted to the sender again (or returns to the
// pool).
class SciNode::RecvBuffer final : public SingleBuffer {
public:
    RecvBuffer(std::shared_ptr<Grants> grants, Link& link, std::uint32_t index, std::uint32_t slot, std::size_t size)
        : SingleBuffer(grants->local->slot_address(slot), size, size), grants_(std::move(grants)), link_(link),
          index_(index), slot_(slot) {}
    ~RecvBuffer() override {
        if (!grants_->offer(link_, index_, slot_)) grants_->local->release_recv_slot(slot_);
    }

private:
    std::shared_ptr<Grants> grants_;
    Link& link_; // owned by grants_
    std::uint32_t index_;
    std::uint32_t slot_;
};

// A received large message in the local large region of one sender.
class SciNode::LargeRecvBuffer final : public SingleBuffer {
public:
    LargeRecvBuffer(std::shared_ptr<LargeRelease> release, std::uint64_t generation, std::uint64_t sequence,
                    std::byte* data, std::size_t size, std::shared_ptr<RemoteSegment> mapping)
        : SingleBuffer(data, size, size), release_(std::move(release)), generation_(generation), sequence_(sequence),
          mapping_(std::move(mapping)) {}
    ~LargeRecvBuffer() override {
        release_->release(generation_, sequence_);
        release_->local->bell().ring(); // the receiver thread publishes the release
    }

private:
    std::shared_ptr<LargeRelease> release_;
    std::uint64_t generation_;
    std::uint64_t sequence_;
    std::shared_ptr<RemoteSegment> mapping_; // the sender's broadcast region, or null
};

NodeParameters NodeParameters::from(const config::Configuration& configuration, const LocalNode& local, NodeId peer) {
    if (peer == local.parameters().self) throw UsageError("create_node: a node cannot send to itself");
    NodeParameters p;
    p.peer = peer;
    p.peer_index = configuration.node_index(peer);
    const auto& node = configuration.nodes[p.peer_index];
    p.name = node.name;
    p.peer_segment_id = configuration.section<Options>(node).recv_seg_id;
    p.max_message_size = configuration.max_message_size;
    p.peer_timeout = configuration.peer_timeout;
    p.send_queue_limit = configuration.send_queue_limit;
    p.inject_error_rate = local.parameters().sci.inject_error_rate;
    p.inject_error_seed =
        local.parameters().sci.inject_error_seed ^ (std::uint64_t{peer} << 32) ^ local.parameters().self;
    return p;
}

SciNode::SciNode(std::shared_ptr<LocalNode> local, NodeParameters parameters)
    : local_(std::move(local)), parameters_(std::move(parameters)),
      local_header_(local_->allocate_local_header(parameters_.peer_index)),
      send_k_(local_->control().max_outst_buffers),
      grants_(std::make_shared<Grants>(local_, local_header_, parameters_.inject_error_rate,
                                       parameters_.inject_error_seed)),
      sequence_(grants_->sequence) {
    for (auto& w : grants_->index)
        w.store(Grants::pack(0, 0, Grants::unused_slot), std::memory_order_relaxed);
    large_release_ = std::make_shared<LargeRelease>();
    large_release_->local = local_;
    // The region where this peer writes large messages for us: the ring plus room
    // for one message of max_message_size that starts at its end; sparse until touched.
    large_capacity_ = round_up(std::max<std::uint64_t>(parameters_.max_message_size, 64), 4096);
    large_release_->region.create(local_->device().segment_name(local_->parameters().self,
                                                                local_->parameters().sci.recv_seg_id,
                                                                "large." + std::to_string(parameters_.peer)),
                                  large_ring_size + large_capacity_, Pages::on_use); // the sender reserves
    large_release_->region.map();
    local_->register_partner(this);
    current_link();
}

SciNode::~SciNode() {
    local_->unregister_partner(this);
    local_->queued_changed(-static_cast<std::ptrdiff_t>(queue_.size()));
    // Slots granted to the peer go back to the pool; received buffers keep the local
    // node alive on their own, and give their slots to the pool (a new generation).
    std::lock_guard lock(recv_mutex_);
    release_grants(grants_->generation + 1, 0);
    if (hot_slot_ != no_slot) local_->release_recv_slot(hot_slot_);
    forget_large();
    local_->release_local_header(parameters_.peer_index);
}

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

    auto link = std::make_unique<Link>();
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
    grants_->links.push_back(std::move(link));
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
    grants_->generation = (grants_->generation + 1) & Grants::generation_mask;
    link.generation = grants_->generation;
    release_grants(link.generation, link.k);
    if (hot_slot_ != no_slot) local_->release_recv_slot(hot_slot_);
    hot_slot_ = no_slot;
    hot_out_.store(false, std::memory_order_relaxed);
    hot_issued_ = 0;
    received_ = 0;
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
    if (!pending_.empty()) {
        auto b = std::move(pending_.front());
        pending_.pop_front();
        stats_.received(b->size());
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
// and publishes the large buffers released by the application. Receiver.
void SciNode::publish_grants(Link& link) {
    bool rang = false;
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

void SciNode::write_status() {
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

// ------------------------------------------------------------------------ loss

void SciNode::check_peer(Link* link) {
    const std::int64_t now = now_ns();
    if (now < next_check_ns_.load(std::memory_order_relaxed)) return;
    next_check_ns_.store(now + parameters_.peer_timeout.count() / 4, std::memory_order_relaxed);
    if (link == nullptr) return;
    const std::uint32_t header_epoch = load(local_header_->epoch);
    if (header_epoch != 0 && header_epoch != link->epoch32 &&
        header_epoch != dead_epoch_.load(std::memory_order_relaxed)) {
        declare_lost(link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                               ") restarted; messages to its earlier incarnation are lost");
    } else if (!link->segment.owner_alive()) {
        const bool closed = closing_of(load(local_header_->status));
        if (closed && unacknowledged(*link) == 0 && queue_depth_.load(std::memory_order_relaxed) == 0) {
            // The peer ended cleanly and took everything: forget the link without an error.
            std::lock_guard lock(link_mutex_);
            if (link_.load(std::memory_order_acquire) == link) {
                dead_epoch_.store(link->epoch32, std::memory_order_relaxed);
                link_.store(nullptr, std::memory_order_release);
                next_connect_ = {};
            }
            return;
        }
        declare_lost(link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                               ") lost: its process is gone");
    }
}

std::uint64_t SciNode::unacknowledged(const Link& link) const {
    // A message on index i is unacknowledged while the peer has not granted that
    // index again. sent_ is read without the send lock: a count for the report.
    std::uint64_t count = 0;
    const std::uint64_t sent = sent_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < send_k_ && i < sent; ++i) {
        const std::uint64_t rounds = (sent - i + send_k_ - 1) / send_k_;
        if (sig_of(load(local_header_->index[i].ack)) != signature(rounds, salt_of(link.epoch32))) ++count;
    }
    return count;
}

void SciNode::declare_lost(Link* link, const std::string& reason) {
    std::lock_guard lock(link_mutex_);
    if (link_.load(std::memory_order_acquire) != link) return; // already handled
    {
        std::lock_guard lost(lost_mutex_);
        lost_reason_ = reason;
        lost_unacknowledged_ = unacknowledged(*link);
    }
    stats_.error();
    // Pending before the link goes: whoever sees a later link sees the loss too (the
    // receive side moves to it only once the loss is reported).
    lost_pending_.store(true, std::memory_order_release);
    dead_epoch_.store(link->epoch32, std::memory_order_relaxed);
    link_.store(nullptr, std::memory_order_release);
    next_connect_ = {};
}

void SciNode::throw_if_deferred() {
    if (!deferred_pending_.load(std::memory_order_acquire)) return;
    std::exception_ptr error;
    {
        std::lock_guard deferred(lost_mutex_);
        error = std::exchange(deferred_error_, nullptr);
        deferred_pending_.store(false, std::memory_order_relaxed);
    }
    if (error) std::rethrow_exception(error);
}

void SciNode::throw_if_lost() {
    if (!lost_pending_.load(std::memory_order_acquire)) return;
    if (!lost_pending_.exchange(false, std::memory_order_acq_rel)) return;
    std::lock_guard lost(lost_mutex_);
    throw PeerLost(parameters_.peer,
                   lost_reason_ + " (" + std::to_string(lost_unacknowledged_) + " messages unacknowledged)",
                   lost_unacknowledged_);
}

// ------------------------------------------------------------------------ send

void SciNode::sync_send_side(Link* link) {
    if (link == send_link_ || link == nullptr) return;
    send_link_ = link; // a new incarnation: its counters start again
    sent_.store(0, std::memory_order_relaxed);
    forget_large();
    large_sent_ = 0;
    large_freed_ = 0;
    large_head_ = 0;
    hot_used_ = 0;
    last_note_.fill(0);
}

// The descriptors not released by the previous incarnation of the peer will never
// be: their broadcast entries are given up. Send lock held (or the node is dying).
void SciNode::forget_large() {
    for (const auto& e : large_live_) {
        if (e.broadcast != no_entry) local_->broadcast_release(e.broadcast);
    }
    large_live_.clear();
}

bool SciNode::try_transfer(Link& link, const Buffer& buffer, BufferPtr* owned, const SharedBuffer* shared) {
    if (load(local_header_->epoch) != link.epoch32) return false; // the peer has not introduced itself
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = static_cast<std::uint32_t>(n % send_k_);
    const std::uint64_t round = n / send_k_;
    const std::uint32_t ack = load(local_header_->index[i].ack);
    if (sig_of(ack) != signature(round, salt_of(link.epoch32))) return false; // no free offset yet
    std::uint32_t slot = ack & ack_slot_mask;
    // The hot slot, when the peer granted one, replaces the index's slot (not for
    // a few cache lines, where it gains nothing and checking it costs).
    const std::size_t size = buffer.size();
    bool hot = false;
    if (size >= hot_min_size) {
        const std::uint32_t status = load(local_header_->status);
        hot = hot_sig_of(status) == hot_signature(hot_used_, salt_of(link.epoch32));
        if (hot) slot = hot_slot_of(status);
    }
    if (slot >= link.slot_count) {
        declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name + ") granted slot " +
                                std::to_string(slot) + " outside its segment");
        return false;
    }
    const std::uint64_t capacity = std::min<std::uint64_t>(link.slot_size, note_size_mask);
    const std::uint32_t sig = signature(round, salt_of(local_->epoch32()));
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
    std::optional<LocalNode::BroadcastPlace> shared_place;
    if (shared != nullptr && size >= broadcast_min_size) {
        if (!reclaim_large(link)) return false;
        if (large_live_.size() < large_in_flight) shared_place = local_->broadcast_acquire(*shared, sequence_);
    }
    if (shared_place) {
        describe(shared_place->offset, region_broadcast, shared_place->entry);
    } else if (size <= capacity) {
        sequence_.copy(link.slot(slot), buffer.fragments());
        note = make_note(sig, false, static_cast<std::uint32_t>(size), hot);
    } else {
        if (link.large_base == nullptr) {
            const std::string name = local_->device().segment_name(
                parameters_.peer, parameters_.peer_segment_id, "large." + std::to_string(local_->parameters().self));
            if (!link.large.connect(name)) return false;
            link.large.map();
            if (link.large.size() <= large_ring_size) {
                declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                                        ") offers a large-message region of " + std::to_string(link.large.size()) +
                                        " bytes, smaller than its ring");
                return false;
            }
            link.large_capacity = link.large.size() - large_ring_size;
            link.large_base = link.large.address();
        }
        if (size > link.large_capacity) {
            throw MessageTooLarge("send to node " + std::to_string(parameters_.peer) + ": " + std::to_string(size) +
                                  " bytes exceed its max_message_size of " + std::to_string(link.large_capacity) +
                                  " bytes");
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
        const bool streaming = size >= streaming_min_size && choose_streaming();
        const auto copy_start = Clock::now();
        if (streaming) {
            sequence_.copy_streaming(link.large_base + *offset, buffer.fragments());
        } else {
            sequence_.copy(link.large_base + *offset, buffer.fragments());
        }
        record_copy(streaming, Clock::now() - copy_start, size);
        describe(*offset, region_large, no_entry);
        large_head_ = round_up(*offset + size, large_align);
        if (large_head_ >= large_wrap_at(size)) large_head_ = 0;
    }
    // A buffer that was received here frees its slot now, and the peer gets it as
    // its hot slot before it sees this message: a reply goes where the cache is warm.
    // Small messages do not wait for this (their replies gain nothing from it).
    if (size >= hot_min_size) {
        if (owned != nullptr) owned->reset();
        offer_hot(link);
    }
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    if (hot) ++hot_used_;
    sent_.store(n + 1, std::memory_order_relaxed);
    stats_.sent(size);
    grants_->wake(link);
    return true;
}

// Large messages are copied with cached or with non-temporal (streaming) stores,
// whichever costs less per byte lately. On the VM the answer flips with the phase:
// when its two CPUs sit far apart, writing lines the reader's core holds ran at
// 2.5-3 GB/s and streamed stores at 12-25 GB/s; when they sit close, cached stores
// at 25-30 GB/s and streamed ones at 17-20. The other way is tried every 256th
// copy (a few percent of cost when it is the slow one). Below 256 KiB the copy is
// always cached: there the sender's time misleads (streamed stores made its copy
// faster but the reader slower, from memory instead of the L3: 64 KiB streams fell
// from 1.05x to 0.8x of the hand-written ring). Send lock held.
bool SciNode::choose_streaming() {
    ++large_copies_;
    if (copy_cost_[0] <= 0) return false;
    if (copy_cost_[1] <= 0) return true;
    const bool better = copy_cost_[1] < copy_cost_[0];
    return (large_copies_ % 256 == 0) ? !better : better;
}

void SciNode::record_copy(bool streaming, std::chrono::nanoseconds took, std::uint64_t size) {
    const double cost = static_cast<double>(took.count()) / static_cast<double>(std::max<std::uint64_t>(size, 1));
    double& c = copy_cost_[streaming ? 1 : 0];
    c = c <= 0 ? cost : 0.75 * c + 0.25 * cost;
}

// Forgets the descriptors the peer released (in order) since the last call; their
// broadcast entries lose a reference. False when the peer's count is impossible
// (the peer is then declared lost). Send lock held.
bool SciNode::reclaim_large(Link& link) {
    const std::uint32_t newly =
        (freed_of(load(local_header_->status)) - static_cast<std::uint32_t>(large_freed_)) & 0x7f;
    if (newly > large_live_.size()) {
        declare_lost(&link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                                ") released large messages it was never sent");
        return false;
    }
    for (std::uint32_t k = 0; k < newly; ++k) {
        if (large_live_.front().broadcast != no_entry) local_->broadcast_release(large_live_.front().broadcast);
        large_live_.pop_front();
    }
    large_freed_ += newly;
    return true;
}

// Where the next large message of size bytes goes in the peer's region: at the
// ring's head, once the messages the peer has not released yet leave room there.
// nullopt while they do not (or large_in_flight are unreleased). Send lock held.
std::optional<std::uint64_t> SciNode::place_large(std::uint64_t size) {
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
std::size_t SciNode::try_transfer_batch(Link& link) {
    auto batchable = [](const Queued& q) { return q.shared && q.shared->size() >= broadcast_min_size; };
    if (queue_.size() < 2 || !batchable(queue_[0]) || !batchable(queue_[1])) return 0;
    if (load(local_header_->epoch) != link.epoch32) return 0;
    const std::uint64_t n = sent_.load(std::memory_order_relaxed);
    const std::uint32_t i = static_cast<std::uint32_t>(n % send_k_);
    const std::uint64_t round = n / send_k_;
    const std::uint32_t ack = load(local_header_->index[i].ack);
    if (sig_of(ack) != signature(round, salt_of(link.epoch32))) return 0;
    const std::uint32_t slot = ack & ack_slot_mask;
    if (slot >= link.slot_count || !reclaim_large(link)) return 0; // try_transfer reports a bad slot
    const std::size_t room =
        std::min<std::uint64_t>(std::min<std::uint64_t>(link.slot_size, note_size_mask) / sizeof(LargeDescriptor),
                                large_in_flight - large_live_.size());
    std::size_t count = 0;
    std::array<LargeDescriptor, large_in_flight> d{};
    while (count < room && count < queue_.size() && batchable(queue_[count])) {
        const auto& shared = queue_[count].shared;
        const auto place = local_->broadcast_acquire(shared, sequence_);
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
        stats_.sent(size);
        ++count;
    }
    if (count == 0) return 0;
    sequence_.copy(link.slot(slot), d.data(), count * sizeof(LargeDescriptor));
    const std::uint32_t note = make_note(signature(round, salt_of(local_->epoch32())), true,
                                         static_cast<std::uint32_t>(count * sizeof(LargeDescriptor)));
    sequence_.write_word(&link.header->index[i].note, note, last_note_[i]);
    last_note_[i] = note;
    sent_.store(n + 1, std::memory_order_relaxed);
    grants_->wake(link);
    return count;
}

void SciNode::flush_locked(Link* link) {
    while (!queue_.empty() && link != nullptr) {
        std::size_t sent = try_transfer_batch(*link);
        if (sent == 0) {
            if (!try_transfer(*link, queue_.front().buffer(), nullptr,
                              queue_.front().shared ? &queue_.front().shared : nullptr))
                break;
            sent = 1;
        }
        queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(sent));
        queue_depth_.store(queue_.size(), std::memory_order_relaxed);
        local_->queued_changed(-static_cast<std::ptrdiff_t>(sent));
    }
}

bool SciNode::try_flush() {
    if (queue_depth_.load(std::memory_order_relaxed) == 0) return true;
    std::unique_lock lock(send_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    Link* link = current_link();
    sync_send_side(link);
    try {
        flush_locked(link);
    } catch (const ResourceError&) {
        // Called by any send, receive or flush of the process: the message stays
        // queued, and the next send to this node reports why it does not go.
        std::lock_guard deferred(lost_mutex_);
        deferred_error_ = std::current_exception();
        deferred_pending_.store(true, std::memory_order_release);
    }
    return queue_.empty();
}

template <class B>
void SciNode::send_impl(B& buffer) {
    if (!buffer) throw UsageError("send to node " + std::to_string(parameters_.peer) + ": null buffer");
    const std::size_t size = buffer->size();
    if (size > parameters_.max_message_size) {
        stats_.error();
        throw MessageTooLarge("send to node " + std::to_string(parameters_.peer) + ": " + std::to_string(size) +
                              " bytes exceed max_message_size of " + std::to_string(parameters_.max_message_size) +
                              " bytes");
    }
    local_->progress(); // queues towards other peers move too
    std::lock_guard lock(send_mutex_);
    throw_if_lost();
    throw_if_deferred();
    Link* link = current_link();
    if (link != nullptr && size > link->max_message_size) {
        stats_.error();
        throw MessageTooLarge("send to node " + std::to_string(parameters_.peer) + ": " + std::to_string(size) +
                              " bytes exceed its max_message_size of " + std::to_string(link->max_message_size) +
                              " bytes");
    }
    sync_send_side(link);
    if (!queue_.empty()) flush_locked(link);
    BufferPtr* owned = nullptr;
    const SharedBuffer* shared = nullptr;
    if constexpr (std::is_same_v<B, BufferPtr>) {
        owned = &buffer;
    } else {
        shared = &buffer;
    }
    if (queue_.empty() && link != nullptr && try_transfer(*link, *buffer, owned, shared)) {
        buffer = nullptr;
        return;
    }
    if (queue_.size() >= parameters_.send_queue_limit) {
        stats_.error();
        throw SendQueueFull("send to node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                            "): " + std::to_string(queue_.size()) + " messages already queued (send_queue_limit)");
    }
    if constexpr (std::is_same_v<B, BufferPtr>) {
        queue_.push_back(Queued{std::move(buffer), nullptr});
    } else {
        queue_.push_back(Queued{nullptr, buffer});
    }
    queue_depth_.store(queue_.size(), std::memory_order_relaxed);
    local_->queued_changed(1);
    stats_.queued();
    check_peer(link);
}

void SciNode::send(BufferPtr&& buffer) {
    send_impl(buffer);
}

void SciNode::send_shared(const SharedBuffer& buffer) {
    SharedBuffer copy = buffer;
    send_impl(copy);
}

bool SciNode::flush(std::chrono::nanoseconds timeout) {
    return local_->wait(
        [this]() -> bool {
            if (try_flush()) return true;
            check_peer(link_.load(std::memory_order_acquire));
            return false;
        },
        timeout);
}

// --------------------------------------------------------------------- receive

BufferPtr SciNode::take_message(Link& link) {
    const std::uint32_t i = static_cast<std::uint32_t>(received_ % link.k);
    const std::uint64_t round = received_ / link.k;
    const std::uint32_t note = load(local_header_->index[i].note);
    if (sig_of(note) != signature(round, salt_of(link.epoch32))) return nullptr;
    const std::uint64_t w = grants_->index[i].load(std::memory_order_acquire);
    const std::uint32_t granted = Grants::slot_of(w);
    if (granted == Grants::no_slot || granted == Grants::unused_slot)
        return nullptr; // a note on an index we did not grant: ignore it
    const std::uint32_t size = note & note_size_mask;
    const bool large = (note & note_large_flag) != 0;
    const bool hot = (note & note_hot_flag) != 0;
    ++received_;
    const std::uint32_t next = Grants::next_round(Grants::round_of(w));
    // The index keeps its slot for the next round: granted again at once.
    auto keep = [&] {
        grants_->index[i].store(Grants::pack(link.generation, next, granted), std::memory_order_release);
        grants_->write_ack(link, i, next, granted);
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
        buffer = std::make_unique<RecvBuffer>(grants_, link, i, slot, size);
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
            if (d.sequence == static_cast<std::uint32_t>(large_received_) && d.reserved == 0 &&
                d.check == large_check_of(d.offset, d.size, d.sequence, d.region)) {
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
    // path); with one, it is written before the message is handed out.
    if (link.k == 1) publish_grants(link);
    buffer->set_source(parameters_.peer);
    stats_.received(buffer->size());
    return buffer;
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
    local_->progress();
    Link* link = current_link();
    std::string violation;
    {
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
        violation.swap(violation_);
    }
    if (!violation.empty() && link != nullptr) declare_lost(link, violation + "; the connection is dropped");
    check_peer(link);
    if (lost_pending_.load(std::memory_order_acquire)) {
        // The loss was found after the poll above: a message the peer wrote before it
        // went is visible now, and comes before the loss.
        std::lock_guard lock(recv_mutex_);
        if (auto b = take_next()) return b;
    }
    throw_if_lost();
    if (Link* now = link_.load(std::memory_order_acquire); now != nullptr) {
        std::lock_guard lock(recv_mutex_);
        if (recv_link_ != now && !lost_pending_.load(std::memory_order_acquire)) {
            if (auto b = take_next()) return b;
            introduce(*now);
        }
    }
    return nullptr;
}

BufferPtr SciNode::receive(std::chrono::nanoseconds timeout) {
    return local_->wait([this] { return receive(); }, timeout);
}

NodeStats SciNode::stats() const noexcept {
    auto s = stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
    s.retries = sequence_.retries();
    return s;
}

} // namespace msgpass::sci
