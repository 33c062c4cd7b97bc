// The sci node: its making and end, its counters, and peer loss and restart. The
// protocol with the peer is in node_link.cpp (link, introduction, slot grants),
// node_send.cpp (send side, large messages, the send queue, send and flush) and
// node_receive.cpp (taking notifications and large messages, receive).
#include "node_parts.hpp"

#include <msgpass/wait.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <utility>

namespace msgpass::sci {

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
    local_->driver().add(this);
    current_link();
}

SciNode::~SciNode() {
    local_->driver().remove(this);
    if (!queue_.empty()) local_->driver().queued_changed(-1);
    // Slots granted to the peer go back to the pool; received buffers keep the local
    // node alive on their own, and give their slots to the pool (a new generation).
    std::lock_guard lock(recv_mutex_);
    release_grants(grants_->generation + 1, 0);
    abandon_batch();
    if (hot_slot_ != no_slot) local_->release_recv_slot(hot_slot_);
    forget_large();
    local_->release_local_header(parameters_.peer_index);
}

// ------------------------------------------------------------------------ loss

bool SciNode::check_due() {
    const std::int64_t now = coarse_now_ns();
    if (now < next_check_ns_.load(std::memory_order_relaxed)) return false;
    next_check_ns_.store(now + parameters_.peer_timeout.count() / 4, std::memory_order_relaxed);
    return true;
}

void SciNode::check_peer(Link* link) {
    if (link != nullptr && check_due()) check_link(*link);
}

void SciNode::check_peer() {
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

void SciNode::reclaim_links() {
    std::lock_guard link_lock(link_mutex_);
    std::lock_guard recv_lock(recv_mutex_);
    const Link* current = link_.load(std::memory_order_acquire);
    std::erase_if(links_, [&](const std::shared_ptr<Link>& l) {
        return l.get() != current && l.get() != send_link_ && l.get() != recv_link_;
    });
    retired_.store(links_.size() > 1, std::memory_order_relaxed);
}

void SciNode::check_link(Link& link_ref) {
    Link* link = &link_ref;
    const std::uint32_t header_epoch = load(local_header_->epoch);
    const bool restarted = header_epoch != 0 && header_epoch != link->epoch32 &&
                           header_epoch != dead_epoch_.load(std::memory_order_relaxed);
    if (restarted && !ended_cleanly(*link)) {
        declare_lost(link, "node " + std::to_string(parameters_.peer) + " (" + parameters_.name +
                               ") restarted; messages to its earlier incarnation are lost");
    } else if (restarted || !link->segment.owner_alive()) {
        // A new process's introduction clears the closing bit of the header; the old
        // segment's own word still tells how that process ended.
        const bool closed = restarted || closing_of(load(local_header_->status)) || ended_cleanly(*link);
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

bool SciNode::ended_cleanly(const Link& link) const {
    // Read only after the owner is gone: not a read on the data path.
    return !link.segment.owner_alive() &&
           std::atomic_ref<std::uint32_t>(link.control->closed).load(std::memory_order_acquire) != 0;
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
    stats_.error();
    // Pending before the link goes: whoever sees a later link sees the loss too (the
    // receive side moves to it only once the loss is reported). The link itself
    // guards against raising one loss twice (above), so no incarnation is named.
    const std::uint64_t count = unacknowledged(*link);
    loss_.raise(0, reason + " (" + std::to_string(count) + " messages unacknowledged)", count);
    dead_epoch_.store(link->epoch32, std::memory_order_relaxed);
    link_.store(nullptr, std::memory_order_release);
    next_connect_ = {};
}

void SciNode::throw_if_deferred() {
    if (!deferred_pending_.load(std::memory_order_acquire)) return;
    std::exception_ptr error;
    {
        std::lock_guard deferred(deferred_mutex_);
        error = std::exchange(deferred_error_, nullptr);
        deferred_pending_.store(false, std::memory_order_relaxed);
    }
    if (error) std::rethrow_exception(error);
}

void SciNode::throw_if_lost() {
    if (!loss_.pending()) return;
    if (auto loss = loss_.take()) throw loss->error(parameters_.peer);
}

NodeStats SciNode::stats() const noexcept {
    auto s = stats_.snapshot(queue_depth_.load(std::memory_order_relaxed));
    s.retries = sequence_.retries();
    return s;
}

} // namespace msgpass::sci
