// The link room of sci (link.hpp): connecting to the peer's segment, and its loss
// and restart.
#include "link.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace msgpass::sci {

NodeParameters NodeParameters::from(const config::Configuration& configuration, const Transport& local, NodeId peer) {
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

Links::Links(std::shared_ptr<Transport> transport_of_factory, NodeParameters parameters_of_peer)
    : transport(std::move(transport_of_factory)), parameters(std::move(parameters_of_peer)),
      local_header(transport->allocate_local_header(parameters.peer_index)),
      send_k(transport->control().max_outst_buffers),
      grants(std::make_shared<Grants>(transport, local_header, parameters.inject_error_rate,
                                      parameters.inject_error_seed)),
      sequence(grants->sequence) {
    for (auto& w : grants->index)
        w.store(Grants::pack(0, 0, Grants::unused_slot), std::memory_order_relaxed);
}

Links::~Links() {
    transport->release_local_header(parameters.peer_index);
}

Link* Links::establish() {
    std::lock_guard lock(link_mutex_);
    if (Link* link = link_.load(std::memory_order_acquire)) return link;
    const auto now = Clock::now();
    if (now < next_connect_) return nullptr;
    next_connect_ = now + std::chrono::milliseconds(2);

    auto link = std::make_shared<Link>(grants);
    const std::string name = transport->device().segment_name(parameters.peer, parameters.peer_segment_id);
    if (!link->segment.connect(name)) return nullptr;
    link->segment.map();
    if (link->segment.size() < control_block_size) return nullptr;
    link->base = link->segment.address();
    link->control = reinterpret_cast<ControlBlock*>(link->base);
    const auto epoch = std::atomic_ref<std::uint64_t>(link->control->epoch).load(std::memory_order_acquire);
    if (epoch == 0) return nullptr; // the owner is still setting it up
    const ControlBlock& cb = *link->control;
    const std::uint64_t seg_size = link->segment.size();
    if (cb.magic != segment_magic || cb.version != protocol_version || cb.node_id != parameters.peer ||
        cb.max_outst_buffers < 1 || cb.max_outst_buffers > max_outstanding || cb.slot_size == 0 ||
        cb.header_offset + (transport->parameters().self_index + 1) * header_size > seg_size ||
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
        reinterpret_cast<Header*>(link->base + cb.header_offset + transport->parameters().self_index * header_size);
    map_broadcast(*link, LargeDescriptor{}); // best effort; retried on the first broadcast descriptor
    receive_side_->adopt(*link);             // the first incarnation is introduced at once
    Link* raw = link.get();
    links_.push_back(std::move(link));
    if (links_.size() > 1) retired_.store(true, std::memory_order_relaxed);
    link_.store(raw, std::memory_order_release);
    // A peer that sleeps before we ever connected could not tell us so: its bell's
    // sleeper count is read here, once per connection (not on the data path). Our
    // ready mark there makes a group of the peer look at us (and connect to us).
    std::atomic_ref<std::uint64_t>(raw->control->ready[transport->parameters().self_index / 64])
        .fetch_or(std::uint64_t{1} << (transport->parameters().self_index % 64), std::memory_order_seq_cst);
    raw->control->bell.ring();
    return raw;
}

bool Links::check_due() {
    const std::int64_t now = coarse_now_ns();
    if (now < next_check_ns_.load(std::memory_order_relaxed)) return false;
    next_check_ns_.store(now + parameters.peer_timeout.count() / 4, std::memory_order_relaxed);
    return true;
}

void Links::check_peer(Link* link) {
    if (link != nullptr && check_due()) check_link(*link);
}

void Links::check_peer() {
    if (!check_due()) return;
    std::shared_ptr<Link> pin; // the current link, kept while it is checked
    {
        std::lock_guard lock(link_mutex_);
        Link* current = link_.load(std::memory_order_acquire);
        for (const auto& l : links_) {
            if (l.get() == current) pin = l;
        }
    }
    if (pin) check_link(*pin);
}

void Links::reclaim(const Link* send_side) {
    std::lock_guard link_lock(link_mutex_);
    const Link* recv_side = nullptr;
    const auto recv_lock = receive_side_->hold(recv_side);
    const Link* current = link_.load(std::memory_order_acquire);
    std::erase_if(links_, [&](const std::shared_ptr<Link>& l) {
        return l.get() != current && l.get() != send_side && l.get() != recv_side;
    });
    retired_.store(links_.size() > 1, std::memory_order_relaxed);
}

void Links::check_link(Link& link_ref) {
    Link* link = &link_ref;
    const std::uint32_t header_epoch = load(local_header->epoch);
    const bool restarted = header_epoch != 0 && header_epoch != link->epoch32 &&
                           header_epoch != dead_epoch_.load(std::memory_order_relaxed);
    if (restarted && !ended_cleanly(*link)) {
        declare_lost(link, "node " + std::to_string(parameters.peer) + " (" + parameters.name +
                               ") restarted; messages to its earlier incarnation are lost");
    } else if (restarted || !link->segment.owner_alive()) {
        // A new process's introduction clears the closing bit of the header; the old
        // segment's own word still tells how that process ended.
        const bool closed = restarted || closing_of(load(local_header->status)) || ended_cleanly(*link);
        if (closed && unacknowledged(*link) == 0 && queue_depth_->load(std::memory_order_relaxed) == 0) {
            // The peer ended cleanly and took everything: forget the link without an error.
            std::lock_guard lock(link_mutex_);
            if (link_.load(std::memory_order_acquire) == link) {
                dead_epoch_.store(link->epoch32, std::memory_order_relaxed);
                link_.store(nullptr, std::memory_order_release);
                next_connect_ = {};
            }
            return;
        }
        declare_lost(link, "node " + std::to_string(parameters.peer) + " (" + parameters.name +
                               ") lost: its process is gone");
    }
}

bool Links::ended_cleanly(const Link& link) const {
    // Read only after the owner is gone: not a read on the data path.
    return !link.segment.owner_alive() &&
           std::atomic_ref<std::uint32_t>(link.control->closed).load(std::memory_order_acquire) != 0;
}

std::uint64_t Links::unacknowledged(const Link& link) const {
    // A message on index i is unacknowledged while the peer has not granted that
    // index again. the sender's count is read without its lock: a count for the report.
    std::uint64_t count = 0;
    const std::uint64_t sent = sent_->load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < send_k && i < sent; ++i) {
        const std::uint64_t rounds = (sent - i + send_k - 1) / send_k;
        if (sig_of(load(local_header->index[i].ack)) != signature(rounds, salt_of(link.epoch32))) ++count;
    }
    return count;
}

void Links::declare_lost(Link* link, const std::string& reason) {
    std::lock_guard lock(link_mutex_);
    if (link_.load(std::memory_order_acquire) != link) return; // already handled
    stats.error();
    // Pending before the link goes: whoever sees a later link sees the loss too (the
    // receive side moves to it only once the loss is reported). The link itself
    // guards against raising one loss twice (above), so no incarnation is named.
    const std::uint64_t count = unacknowledged(*link);
    loss.raise(0, reason + " (" + std::to_string(count) + " messages unacknowledged)", count);
    dead_epoch_.store(link->epoch32, std::memory_order_relaxed);
    link_.store(nullptr, std::memory_order_release);
    next_connect_ = {};
}

void Links::throw_if_lost() {
    if (!loss.pending()) return;
    if (auto taken = loss.take()) throw taken->error(parameters.peer);
}

// The peer's broadcast region, mapped when first needed (normally when the link is
// made); null when it cannot be mapped or the descriptor points outside it.
// Receiver thread, or the link's maker before the link is published.
std::byte* Links::map_broadcast(Link& link, const LargeDescriptor& d) {
    if (!link.broadcast) {
        auto segment = std::make_shared<RemoteSegment>();
        try {
            if (!segment->connect(
                    transport->device().segment_name(parameters.peer, parameters.peer_segment_id, "bcast")))
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

} // namespace msgpass::sci
