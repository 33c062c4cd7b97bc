// The local node: segment set-up and the pools of receive slots, headers and send
// buffers.
#include "transport.hpp"

#include <msgpass/kit/errors.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string_view>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace msgpass::sci {

namespace {
std::uint64_t new_epoch() {
    std::random_device rd;
    std::uint64_t e = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      static_cast<std::uint64_t>(::getpid());
    if (static_cast<std::uint32_t>(e) == 0) e |= 1; // the low 32 bits go into headers, 0 means "none"
    return e;
}
bool sleep_at_once_from_environment() {
    const char* v = std::getenv("MSGPASS_SCI_WAIT");
    return v != nullptr && std::string_view(v) == "sleep";
}
} // namespace

TransportParameters TransportParameters::from(const config::Configuration& configuration, NodeId self) {
    TransportParameters p;
    p.self = self;
    p.node_count = configuration.nodes.size();
    p.self_index = configuration.node_index(self);
    p.sci = configuration.section<Options>(configuration.nodes[p.self_index]);
    const auto partners = partners_of(configuration, configuration.nodes[p.self_index]);
    p.partners = partners.count;
    p.peer_outstanding = partners.outstanding;
    p.max_message_size = configuration.max_message_size;
    p.partition = configuration.partition;
    for (const auto& node : configuration.nodes)
        p.sci_node_ids[node.id] = sci_node_id_of(configuration, node.id);
    return p;
}

struct Transport::Broadcast {
    struct Entry {
        std::uint64_t id;
        std::uint64_t begin;
        std::uint64_t end;
        std::uint32_t refs; // peers that were sent its descriptor and did not release it
        // The message, compared by owner: its control block lives as long as this
        // pointer, so a later message at the same address is never taken for it, and
        // the message itself is not kept alive (it may hold a slot of this node).
        std::weak_ptr<const Buffer> message;
        const Buffer* key;
    };
    std::mutex mutex;
    LocalSegment region;
    std::byte* base = nullptr; // null when the region could not be made
    std::uint64_t capacity = 0;
    std::uint64_t head = 0;
    std::uint64_t next_id = 0;
    std::deque<Entry> live;                                      // oldest first
    std::unordered_map<const Buffer*, std::uint64_t> by_message; // entry of each live message

    Entry* find(const SharedBuffer& buffer) {
        auto it = by_message.find(buffer.get());
        if (it == by_message.end() || live.empty() || it->second < live.front().id) return nullptr;
        Entry& e = live[it->second - live.front().id];
        if (e.message.owner_before(buffer) || buffer.owner_before(e.message)) return nullptr;
        return &e;
    }
    // Frees the oldest entries no peer holds: those whose message is gone (no peer
    // can be sent it any more), or any of them when room is needed (a peer sent the
    // message later gets a copy of its own).
    void reclaim(bool need_room) {
        while (!live.empty() && live.front().refs == 0 && (need_room || live.front().message.expired())) {
            auto it = by_message.find(live.front().key);
            if (it != by_message.end() && it->second == live.front().id) by_message.erase(it);
            live.pop_front();
        }
    }
    // Room for size bytes at the head. Entries are placed in ring order, so only the
    // oldest can be in the way: the head is past it (room up to the end of the ring
    // and beyond), or has wrapped and must stay before it (at it, the ring is full).
    [[nodiscard]] bool room(std::uint64_t size) const {
        return live.empty() || head > live.front().begin ||
               (head < live.front().begin && head + size <= live.front().begin);
    }
};

Transport::Transport(TransportParameters parameters)
    : parameters_(std::move(parameters)), device_(parameters_.partition, parameters_.sci_node_ids),
      partition_fills_cpus_(parameters_.node_count > std::max(1u, std::thread::hardware_concurrency())),
      sleep_at_once_(sleep_at_once_from_environment()) {
    const auto& sci = parameters_.sci;
    const std::string where = "node " + std::to_string(parameters_.self) + ": sci.";
    if (sci.max_outst_buffers < 1 || sci.max_outst_buffers > max_outstanding) {
        throw ConfigError(where + "max_outst_buffers: expected 1.." + std::to_string(max_outstanding) + ", found " +
                          std::to_string(sci.max_outst_buffers));
    }
    if (parameters_.node_count > max_nodes) {
        throw ConfigError("node " + std::to_string(parameters_.self) + ": the nodes file: expected at most " +
                          std::to_string(max_nodes) +
                          " nodes in an sci partition (one ready mark each in the control block), found " +
                          std::to_string(parameters_.node_count));
    }
    if (sci.header_area_size % header_size != 0 || sci.header_area_size / header_size < parameters_.node_count) {
        throw ConfigError(where + "header_area_size: expected a multiple of " + std::to_string(header_size) +
                          " bytes with one header per node (" + std::to_string(parameters_.node_count * header_size) +
                          " bytes or more), found " + std::to_string(sci.header_area_size));
    }
    if (sci.recv_buffer_size < 64 || sci.recv_buffer_size % 64 != 0) {
        throw ConfigError(where + "recv_buffer_size: expected a multiple of 64 bytes, found " +
                          std::to_string(sci.recv_buffer_size));
    }
    if (sci.recv_buffer_no > ack_slot_mask) {
        throw ConfigError(where + "recv_buffer_no: expected at most " + std::to_string(ack_slot_mask) + ", found " +
                          std::to_string(sci.recv_buffer_no));
    }
    const std::uint64_t peers = parameters_.partners;
    if (sci.recv_buffer_no < parameters_.peer_outstanding) {
        throw ConfigError(where + "recv_buffer_no: expected at least the sum of the other nodes' max_outst_buffers = " +
                          std::to_string(parameters_.peer_outstanding) + " slots, found " +
                          std::to_string(sci.recv_buffer_no));
    }
    const std::uint64_t needed = sci.header_area_size + std::uint64_t{sci.recv_buffer_no} * sci.recv_buffer_size;
    if (sci.recv_seg_size < needed) {
        throw ConfigError(where +
                          "recv_seg_size: expected at least header_area_size + recv_buffer_no x "
                          "recv_buffer_size = " +
                          std::to_string(needed) + " bytes, found " + std::to_string(sci.recv_seg_size));
    }

    try {
        // The control block and the headers now (every node of the file may write
        // its header); the slots' pages when they are first handed out.
        segment_.create(device_.segment_name(parameters_.self, sci.recv_seg_id), control_block_size + sci.recv_seg_size,
                        Pages::on_use);
        try {
            segment_.reserve(0, control_block_size + sci.header_area_size);
        } catch (const ResourceError&) {
            segment_.destroy();
            throw;
        }
    } catch (const SegmentInUse& e) {
        // Name what the operator must look for: which node id, which partition, which process.
        throw SciException("create", e.segment(),
                           "node id " + std::to_string(parameters_.self) + " of partition '" + parameters_.partition +
                               "' is already running on this host" +
                               (e.holder() > 0 ? " as process " + std::to_string(e.holder()) : std::string()) +
                               " (it holds the shared memory segment '" + e.segment() +
                               "'): is another process running with the same node id in this partition?");
    }
    segment_.map();
    base_ = segment_.address();
    control_ = new (base_) ControlBlock{};
    control_->magic = segment_magic;
    control_->version = protocol_version;
    control_->node_id = parameters_.self;
    control_->header_offset = control_block_size;
    control_->header_area_size = sci.header_area_size;
    control_->slot_offset = control_block_size + sci.header_area_size;
    control_->slot_size = sci.recv_buffer_size;
    control_->slot_count = sci.recv_buffer_no;
    control_->max_outst_buffers = sci.max_outst_buffers;
    control_->max_message_size = parameters_.max_message_size;
    barrier_ = process_barrier_registered();
    control_->flags = barrier_ ? control_barrier : 0;
    std::atomic_ref<std::uint64_t>(control_->epoch).store(new_epoch(), std::memory_order_release);

    hot_slots_ = sci.recv_buffer_no >= parameters_.peer_outstanding + peers;
    // Slot 0 on top, each slot followed by the next (the order the pool always had).
    next_free_ = std::make_unique<std::atomic<std::uint32_t>[]>(sci.recv_buffer_no);
    for (std::uint32_t s = 0; s < sci.recv_buffer_no; ++s)
        next_free_[s].store(s + 1 < sci.recv_buffer_no ? s + 1 : no_free, std::memory_order_relaxed);
    free_head_.store(sci.recv_buffer_no > 0 ? 0 : no_free, std::memory_order_release);
    holds_ = std::make_unique<SlotHold[]>(sci.recv_buffer_no);
    headers_taken_.assign(sci.header_area_size / header_size, false);

    // The broadcast region exists from the start (sparse until used), so that
    // partners map it when they connect and still read what was sent through it
    // after this process is gone.
    broadcast_ = std::make_unique<Broadcast>();
    broadcast_->capacity = (std::max<std::uint64_t>(parameters_.max_message_size, 64) + 4095) / 4096 * 4096;
    try {
        broadcast_->region.create(device_.segment_name(parameters_.self, sci.recv_seg_id, "bcast"),
                                  large_ring_size + broadcast_->capacity, Pages::on_use);
        broadcast_->region.map();
        broadcast_->base = broadcast_->region.address();
    } catch (const Error&) {
        if (broadcast_->region.is_created()) broadcast_->region.destroy(); // none: every peer gets its own copy
    }
    if (sci.use_send_pool) send_pool_ = SendPool::create(sci.send_buffer_no, sci.send_buffer_size);
}

Transport::~Transport() {
    if (send_pool_ != nullptr) send_pool_->close(); // it ends when its last buffer comes back
}

std::optional<Transport::BroadcastPlace> Transport::broadcast_acquire(const SharedBuffer& buffer, Sequence& sequence) {
    auto& b = *broadcast_;
    std::lock_guard lock(b.mutex);
    if (b.base == nullptr) return std::nullopt;
    if (auto* e = b.find(buffer)) {
        ++e->refs;
        return BroadcastPlace{e->id, e->begin};
    }
    const std::uint64_t size = buffer->size();
    if (size > b.capacity) return std::nullopt;
    b.reclaim(false);
    if (!b.room(size)) {
        b.reclaim(true);
        if (!b.room(size)) return std::nullopt;
    }
    const std::uint64_t begin = b.head;
    const std::uint64_t end = begin + size;
    try {
        b.region.reserve(begin, size); // the region is sparse: its pages are taken on first use
    } catch (const ResourceError&) {
        return std::nullopt; // no room in /dev/shm: each peer gets its own copy, or the send reports it
    }
    sequence.copy(b.base + begin, buffer->fragments());
    b.live.push_back({b.next_id++, begin, end, 1, buffer, buffer.get()});
    b.by_message[buffer.get()] = b.live.back().id;
    b.head = (end + large_align - 1) / large_align * large_align;
    if (b.head >= large_wrap_at(size)) b.head = 0;
    return BroadcastPlace{b.live.back().id, begin};
}

void Transport::broadcast_release(std::uint64_t entry) noexcept {
    auto& b = *broadcast_;
    std::lock_guard lock(b.mutex);
    if (b.live.empty() || entry < b.live.front().id) return;
    const std::uint64_t at = entry - b.live.front().id;
    if (at >= b.live.size() || b.live[at].refs == 0) return;
    --b.live[at].refs;
    b.reclaim(false);
}

Header* Transport::allocate_local_header(std::size_t index) {
    std::lock_guard lock(headers_mutex_);
    if (index >= headers_taken_.size() || headers_taken_[index]) {
        throw UsageError("local header " + std::to_string(index) + " is out of range or already in use");
    }
    headers_taken_[index] = true;
    return reinterpret_cast<Header*>(base_ + control_->header_offset + index * header_size);
}

void Transport::release_local_header(std::size_t index) noexcept {
    std::lock_guard lock(headers_mutex_);
    if (index < headers_taken_.size()) headers_taken_[index] = false;
}

namespace {
// The head word of the free-slot stack: slot, and the count of changes above it.
constexpr std::uint64_t next_head(std::uint64_t head, std::uint32_t slot) noexcept {
    return ((head >> 32) + 1) << 32 | slot;
}
} // namespace

// The successor read below may be stale (another thread took the top slot and gave
// it back with another successor meanwhile): the change count in the head then
// differs and the exchange fails.
std::optional<std::uint32_t> Transport::allocate_recv_slot() noexcept {
    std::uint64_t head = free_head_.load(std::memory_order_acquire);
    for (;;) {
        const auto top = static_cast<std::uint32_t>(head);
        if (top == no_free) return std::nullopt;
        const std::uint32_t next = next_free_[top].load(std::memory_order_relaxed);
        if (free_head_.compare_exchange_weak(head, next_head(head, next), std::memory_order_acquire,
                                             std::memory_order_acquire)) {
            if (top < slots_with_pages_.load(std::memory_order_acquire) || reserve_slot_pages(top)) return top;
            release_recv_slot(top);
            return std::nullopt;
        }
    }
}

// Reserves the pages of the slots up to this one (and a little beyond: one system
// call per 64 KiB of slots, not per slot).
bool Transport::reserve_slot_pages(std::uint32_t slot) noexcept {
    std::lock_guard lock(slot_pages_mutex_);
    const std::uint32_t have = slots_with_pages_.load(std::memory_order_relaxed);
    if (slot < have) return true;
    const std::uint64_t size = control_->slot_size;
    const std::uint64_t per_step = std::max<std::uint64_t>(1, 65536 / size);
    const auto upto =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(control_->slot_count, (slot / per_step + 1) * per_step));
    try {
        segment_.reserve(control_->slot_offset + have * size, (upto - have) * size);
    } catch (const std::exception& e) {
        slot_pages_error_ =
            "receive slot " + std::to_string(slot) + " of " + std::to_string(control_->slot_count) + ": " + e.what();
        return false;
    }
    slot_pages_error_.clear();
    slots_with_pages_.store(upto, std::memory_order_release);
    return true;
}

std::string Transport::slot_pages_error() const {
    std::lock_guard lock(slot_pages_mutex_);
    return slot_pages_error_;
}

void Transport::release_recv_slot(std::uint32_t slot) noexcept {
    std::uint64_t head = free_head_.load(std::memory_order_relaxed);
    do {
        next_free_[slot].store(static_cast<std::uint32_t>(head), std::memory_order_relaxed);
    } while (!free_head_.compare_exchange_weak(head, next_head(head, slot), std::memory_order_release,
                                               std::memory_order_relaxed));
    // A receiver that found the pool empty may sleep until a slot comes back: the
    // push onto the empty pool rings (its fence against the sleeper's announcement
    // before its last look at the pool); a push onto a pool that had slots follows
    // one that did (no look found the pool empty since then without a push after it).
    if (static_cast<std::uint32_t>(head) == no_free) bell().ring();
}

std::uint32_t Transport::free_slots() const noexcept {
    std::uint32_t count = 0;
    for (auto s = static_cast<std::uint32_t>(free_head_.load(std::memory_order_acquire));
         s != no_free && count < control_->slot_count; s = next_free_[s].load(std::memory_order_relaxed))
        ++count;
    return count;
}

// Racy updates from several waiting threads only blur the average.
void Transport::learn_shared_spin(std::chrono::nanoseconds took) noexcept {
    const std::int64_t ns = took.count();
    if (ns > 2 * max_shared_spin.count()) return; // the partner was not running: no spin would have caught it
    std::int64_t average = shared_took_ns_.load(std::memory_order_relaxed);
    average += (ns - average) / 8;
    shared_took_ns_.store(average, std::memory_order_relaxed);
    shared_spin_ns_.store(std::clamp(2 * average, min_shared_spin.count(), max_shared_spin.count()),
                          std::memory_order_relaxed);
}

// Any involuntary context switch of the process since the last change means that
// another task took one of its CPUs; none for free_after means they are free.
void Transport::probe_shared() noexcept {
    std::unique_lock lock(probe_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    rusage usage{};
    if (::getrusage(RUSAGE_SELF, &usage) != 0) return;
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const std::int64_t now = static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    const std::int64_t switches = usage.ru_nivcsw;
    if (switches != probe_switches_) {
        probe_switches_ = switches;
        probe_since_ns_ = now;
    } else if (now - probe_since_ns_ >= std::chrono::nanoseconds(free_after).count()) {
        yields_.clear();
        probe_switches_ = -1;
    }
}

// The flag first, then each partner's header under its receiver lock: an
// introduction made meanwhile (under the same lock) writes the flag it reads.
void Transport::announce_sleep() {
    std::lock_guard lock(sleep_mutex_);
    if (sleepers_++ != 0) return;
    asleep_.store(true, std::memory_order_seq_cst);
    driver_.announce();
    // The announcement before the sleeper's next poll (a partner's note before its
    // look at the announcement: one of the two sees the other). A partner told that
    // we make barriers wrote its note without a fence: the barrier puts one between
    // its note and its look, wherever that partner stands.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (barrier_ && !process_barrier()) barrier_failed_.store(true, std::memory_order_relaxed);
}

void Transport::withdraw_sleep() {
    std::lock_guard lock(sleep_mutex_);
    if (--sleepers_ != 0) return;
    asleep_.store(false, std::memory_order_seq_cst);
    driver_.announce();
}

void Transport::set_closing() {
    std::lock_guard lock(sleep_mutex_);
    closing_.store(true, std::memory_order_release);
    std::atomic_ref<std::uint32_t>(control_->closed).store(1, std::memory_order_release);
    driver_.announce();
}

BufferPtr Transport::allocate_send_buffer(std::size_t size) {
    if (size > parameters_.max_message_size) {
        kit::throw_buffer_too_large(size, parameters_.max_message_size);
    }
    if (send_pool_ != nullptr && size <= send_pool_->buffer_size()) {
        if (auto b = send_pool_->get(size)) return b;
    }
    if (auto b = small_heap_buffer(size)) return b;
    return large_pool_->make(size);
}

} // namespace msgpass::sci
