// The send side: envelopes, making a message (eager: envelope and payload in one
// message), handing it to its node, the per-peer backlog (docs/communicator.md, "Sends").
#include "impl.hpp"

#include <cstring>
#include <typeinfo>

namespace msgpass::comm {

namespace detail {

void write_envelope(std::byte* at, Context context, Tag tag, std::size_t size, std::uint8_t kind, std::uint32_t id) {
    const WireEnvelope w{
        wire_magic, wire_version, kind, static_cast<std::uint16_t>(context), tag, id, static_cast<std::uint64_t>(size)};
    std::memcpy(at, &w, sizeof w);
}

} // namespace detail

BufferPtr Communicator::Impl::make_message(Context context, Tag tag, std::span<const std::byte> bytes,
                                           std::uint8_t kind, std::uint32_t id) {
    auto whole = allocate_message(context, tag, bytes.size(), kind, id);
    if (!bytes.empty()) std::memcpy(whole->single()->data() + header_size, bytes.data(), bytes.size());
    return whole;
}

BufferPtr Communicator::Impl::make_message(Context context, Tag tag, const Pieces& pieces, std::uint8_t kind,
                                           std::uint32_t id) {
    auto whole = allocate_message(context, tag, pieces.total, kind, id);
    std::byte* at = whole->single()->data() + header_size;
    for (const auto& piece : pieces.list) {
        if (piece.empty()) continue;
        std::memcpy(at, piece.data(), piece.size());
        at += piece.size();
    }
    return whole;
}

BufferPtr Communicator::Impl::allocate_message(Context context, Tag tag, std::size_t size, std::uint8_t kind,
                                               std::uint32_t id) {
    const std::size_t n = header_size + size;
    BufferPtr whole;
    if (n >= pooled_from) {
        // Reused memory (msgpass/kit/pool.hpp): fresh memory would cost a page fault per
        // page copied into whenever many are in flight. The factory's create_buffer still refuses
        // a size beyond max_message_size at the post, as for smaller messages: asked
        // once per larger size when the communicator does not know the limit (built
        // from a list of peers), else only beyond it.
        if (max_message_size == 0 ? n > sizes_checked.load(std::memory_order_relaxed) : n > max_message_size) {
            (void)factory.create_buffer(n); // memory not touched: no page faults
            std::size_t seen = sizes_checked.load(std::memory_order_relaxed);
            while (seen < n && !sizes_checked.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
            }
        }
        whole = pool->make(n);
    } else {
        whole = factory.create_buffer(n);
    }
    auto* s = whole->single();
    if (s == nullptr) {
        whole = std::make_unique<HeapBuffer>(n);
        s = whole->single();
    }
    write_envelope(s->data(), context, tag, size, kind, id);
    return whole;
}

BufferPtr Communicator::Impl::make_message(Context context, Tag tag, BufferPtr&& payload, std::uint8_t kind,
                                           std::uint32_t id, bool keep_shell) {
    const std::size_t size = payload->size();
    if (typeid(*payload) == typeid(PayloadBuffer)) { // room for the envelope in front: in place
        auto whole = static_cast<PayloadBuffer&>(*payload).release();
        if (!keep_shell) payload.reset();
        write_envelope(whole->single()->data(), context, tag, size, kind, id);
        return whole;
    }
    if (size <= gather_above) { // a copy costs less than a gather list's allocations
        auto whole = factory.create_buffer(header_size + size);
        auto* s = whole->single();
        if (s == nullptr) {
            whole = std::make_unique<HeapBuffer>(header_size + size);
            s = whole->single();
        }
        write_envelope(s->data(), context, tag, size, kind, id);
        payload->copy_to(s->bytes().subspan(header_size));
        payload.reset();
        return whole;
    }
    auto header = std::make_unique<HeapBuffer>(header_size);
    write_envelope(header->data(), context, tag, size, kind, id);
    auto list = std::make_unique<FragmentList>();
    list->append(std::move(header));
    list->append(std::move(payload));
    return list;
}

// Hands a send's pending message to its node; true when the node took it or the
// send failed (then r.done), false while it must wait (the node's queue is full, or
// an announcement beyond the peer's rendezvous window). An announcement that went
// leaves the send pending until the receiver clears it.
bool Communicator::Impl::try_send_locked(Request& r) {
    if (!lost.empty() && lost.count(r.peer) != 0) {
        // The loss reached comm first (a receive took it from the node, which then
        // takes new messages for the peer's next incarnation): a message handed over
        // now would wait there, and a send of the caller's memory would never complete.
        r.pending.reset();
        r.rdv_data.reset();
        r.completion.status = Status::peer_lost;
        r.completion.error = "comm: " + describe(r.peer) + " was lost before this message was handed over";
        r.done = true;
        return true;
    }
    const bool announcing = (r.rdv_data || r.kept) && !r.announced;
    if (announcing && announced_count[r.peer] >= limits.rendezvous_window) return false;
    try {
        Node* node = node_locked(r.peer);
        if (node == nullptr) // a client released between the post's check and here
            throw PeerLost(r.peer, "comm: " + describe(r.peer) + " was dropped or lost, and released");
        node->send(std::move(r.pending));
        r.completion.status = Status::success;
    } catch (const SendQueueFull&) {
        return false; // the buffer stays in r.pending
    } catch (const MessageTooLarge& e) {
        if (!r.announced) throw; // the post reports it
        // The data of a cleared announcement (a Buffer payload beyond the nodes'
        // max_message_size, not known at the post): the send fails, the receiver's
        // request waits until cancelled or the peer is lost.
        r.pending.reset();
        r.completion.status = Status::cancelled;
        r.completion.error = e.what();
        r.done = true;
        return true;
    } catch (const PeerLost& e) {
        r.pending.reset();
        r.rdv_data.reset();
        r.completion.status = Status::peer_lost;
        r.completion.error = e.what();
        if (nodes.count(e.peer()) != 0) lost.insert(e.peer());
        r.done = true;
        return true;
    }
    if (announcing) {
        r.announced = true;
        announced.emplace(RdvKey{r.peer, r.rdv_id}, r.id);
        ++announced_count[r.peer];
        return true;
    }
    if (r.announced) ++counters.rendezvous_sent; // the data of a cleared announcement
    if (r.released) {                            // the caller's memory: the send completes when the node lets it go
        r.releasing = true;
        releasing.push_back(r.id);
        ++counters.zero_copy_sent;
        counters.zero_copy_bytes += r.size;
        return true;
    }
    r.done = true;
    return true;
}

BufferPtr Communicator::Impl::make_view_message(Request& r, std::uint8_t kind) {
    r.released = std::make_shared<std::atomic<bool>>(false);
    auto header = std::make_unique<HeapBuffer>(header_size);
    write_envelope(header->data(), r.context, r.tag, r.kept_bytes.size(), kind, kind == kind_data ? r.rdv_id : 0);
    auto list = std::make_unique<FragmentList>();
    list->append(std::move(header));
    list->append(std::make_unique<ReleasingView>(r.kept_bytes, r.released));
    return list;
}

// Without the mutex: a node's send is thread-safe, and when no send waits in the
// backlog (read after the thread that emptied it handed its messages over), none can
// be overtaken. Concurrent sends of other threads go in either order, as posts do.
bool Communicator::Impl::send_now(NodeId dest, Tag tag, BufferPtr& whole) {
    if (backlogged.load(std::memory_order_acquire)) return false;
    if (!limits.tag_queues.empty() && lane_of(tag) >= 0) return false;
    NodePtr keep; // a peer found at run time: held through the send
    Node* node = node_for_send(dest, keep);
    if (node == nullptr) not_a_peer(dest, "send"); // a client released since the check
    try {
        node->send(std::move(whole));
        return true;
    } catch (const SendQueueFull&) {
        return false; // whole stays ours
    } catch (const PeerLost& e) {
        const std::string reason = e.what();
        std::lock_guard lock(mutex);
        handle_loss_locked(dest, reason);
        throw PeerLost(dest, "comm: send to " + describe(dest) + ": " + reason);
    }
}

bool Communicator::Impl::send_bytes_now(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes) {
    if (bytes.size() > bytes_send_limit || backlogged.load(std::memory_order_acquire)) return false;
    if (!limits.tag_queues.empty() && lane_of(tag) >= 0) return false;
    alignas(WireEnvelope) std::byte whole[header_size + bytes_send_limit];
    write_envelope(whole, context, tag, bytes.size(), kind_eager, 0);
    if (!bytes.empty()) std::memcpy(whole + header_size, bytes.data(), bytes.size());
    try {
        node_of(dest)->send_bytes(std::span<const std::byte>(whole, header_size + bytes.size()));
        return true;
    } catch (const SendQueueFull&) {
        return false;
    } catch (const PeerLost& e) {
        const std::string reason = e.what();
        std::lock_guard lock(mutex);
        handle_loss_locked(dest, reason);
        throw PeerLost(dest, "comm: send to " + describe(dest) + ": " + reason);
    }
}

Node* Communicator::Impl::stalled_node_locked() const {
    for (const auto& [peer, queue] : backlog) {
        if (queue.empty()) continue;
        Node* node = node_locked(peer);
        if (node != nullptr && node->stats().queue_depth > 0) return node;
    }
    return nullptr;
}

void Communicator::Impl::retry_backlog_locked() {
    retry_control_locked();
    for (auto b = backlog.begin(); b != backlog.end();) {
        auto& queue = b->second;
        while (!queue.empty()) {
            auto& r = requests.at(queue.front());
            if (!try_send_locked(r)) break;
            const bool lost_now = r.completion.status == Status::peer_lost;
            queue.pop_front();
            changed.notify_all();
            if (lost_now) {
                const NodeId peer = r.peer;
                const std::string reason = r.completion.error;
                handle_loss_locked(peer, reason); // erases b
                b = backlog.begin();
                goto next;
            }
        }
        b = queue.empty() ? backlog.erase(b) : std::next(b);
    next:;
    }
    sync_backlogged_locked();
}

Posted Communicator::Impl::post_send(Context context, NodeId dest, Tag tag, BufferPtr whole, std::size_t size,
                                     void* user, BufferPtr rdv_data, std::uint32_t rdv_id, bool laned, bool kept,
                                     std::span<const std::byte> kept_bytes,
                                     std::shared_ptr<std::atomic<bool>> released) {
    std::lock_guard lock(mutex);
    const RequestId id = new_id_locked();
    Request r;
    r.is_send = true;
    r.peer = dest;
    r.tag = tag;
    r.context = context;
    r.user = user;
    r.size = size;
    r.pending = std::move(whole);
    r.id = id;
    r.rdv_data = std::move(rdv_data);
    r.rdv_id = rdv_id;
    r.kept = kept;
    r.kept_bytes = kept_bytes;
    r.released = std::move(released);
    r.completion.is_send = true;
    r.completion.context = context;
    r.completion.source = dest;
    r.completion.tag = tag;
    r.completion.size = size;
    r.completion.bytes = size;
    r.completion.user = user;
    if (laned && !r.rdv_data && !r.kept && !limits.tag_queues.empty() && dest != self && (r.lane = lane_of(tag)) >= 0) {
        r.lane_bytes = r.pending->size();
        const LaneKey key{dest, r.lane};
        auto& held = lane_backlog[key];
        if (!held.empty() || !lane_fits_locked(key, r.lane_bytes)) { // its lane is full at the receiver
            held.push_back(id);
            requests.emplace(id, std::move(r));
            return Posted{id, std::nullopt};
        }
        if (held.empty()) lane_backlog.erase(key);
        lane_in_flight[key] += r.lane_bytes;
    }
    auto b = backlog.find(dest);
    if (b == backlog.end() || b->second.empty()) {
        if (try_send_locked(r)) {
            if (!r.done) { // announced: completes when the receiver cleared it and the data went
                requests.emplace(id, std::move(r));
                return Posted{id, std::nullopt};
            }
            if (r.completion.status == Status::peer_lost) handle_loss_locked(dest, r.completion.error);
            Posted p{id, std::move(r.completion)};
            p.done->id = id;
            p.done->immediate = true;
            return p;
        }
    }
    requests.emplace(id, std::move(r));
    backlog[dest].push_back(id);
    backlogged.store(true, std::memory_order_release);
    return Posted{id, std::nullopt};
}

Posted Communicator::Impl::send_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes,
                                         void* user, bool sync) {
    const std::size_t size = bytes.size();
    // To itself, or small: as a send of a copy.
    if (dest == self || (size <= limits.eager_limit && !sync))
        return send_any(context, dest, tag, bytes, size, user, sync);
    bool one_copy = single_copy_on && same_host.count(dest) != 0;
    if (one_copy) {
        std::lock_guard lock(mutex);
        auto p = single_copy_peers.find(dest);
        one_copy = p == single_copy_peers.end() || !p->second.refused;
    }
    // Not writable into the receiver's buffer: the data message holds the caller's
    // memory (no copy), at once when the receive asked for it (the requested queue).
    if (!one_copy && !sync && any_requested.load(std::memory_order_acquire)) {
        bool go = false;
        {
            std::lock_guard lock(mutex);
            go = take_request_locked(dest, context, tag, size);
        }
        if (go) {
            if (max_message_size != 0 && size > max_message_size - header_size) (void)announce(dest, size); // throws
            Request shape;
            shape.context = context;
            shape.tag = tag;
            shape.kept_bytes = bytes;
            auto message = make_view_message(shape, kind_eager);
            return post_send(context, dest, tag, std::move(message), size, user, {}, 0, true, false, bytes,
                             std::move(shape.released));
        }
    }
    // Announced: a clear-to-send naming a buffer to write into is answered by writing
    // there (one copy); any other by the data message holding the caller's memory.
    // (The size check is that data message's.)
    const std::uint32_t id = announce(dest, size);
    auto rts = std::make_unique<HeapBuffer>(header_size);
    write_envelope(rts->data(), context, tag, size, kind_rts, id);
    return post_send(context, dest, tag, std::move(rts), size, user, {}, id, true, true, bytes);
}

void Communicator::Impl::on_credit_locked(NodeId source, int lane, std::uint64_t bytes) {
    ++counters.lane_credits_received;
    const LaneKey key{source, lane};
    if (auto it = lane_in_flight.find(key); it != lane_in_flight.end()) {
        it->second -= static_cast<std::size_t>(std::min<std::uint64_t>(bytes, it->second));
        if (it->second == 0) lane_in_flight.erase(it);
    }
    auto held = lane_backlog.find(key);
    if (held == lane_backlog.end()) return;
    bool moved = false;
    while (!held->second.empty()) { // in their order, into the peer's backlog (behind what waits there)
        auto& r = requests.at(held->second.front());
        if (!lane_fits_locked(key, r.lane_bytes)) break;
        lane_in_flight[key] += r.lane_bytes;
        backlog[source].push_back(r.id);
        held->second.pop_front();
        moved = true;
    }
    if (held->second.empty()) lane_backlog.erase(held);
    if (moved) {
        backlogged.store(true, std::memory_order_release);
        retry_backlog_locked();
    }
}

void Communicator::Impl::lane_taken_locked(NodeId source, int lane, std::size_t bytes) {
    const LaneKey key{source, lane};
    if (auto it = lane_unread.find(key); it != lane_unread.end()) {
        const std::size_t n = std::min(bytes, it->second);
        it->second -= n;
        lanes_held -= std::min(n, lanes_held);
        if (it->second == 0) lane_unread.erase(it);
    }
    auto& freed = lane_freed[key];
    freed += bytes;
    const std::size_t step = std::max<std::size_t>(limits.tag_queues[static_cast<std::size_t>(lane)].limit / 4, 1);
    if (freed < step) return;
    send_control_locked(source, kind_credit, 0, Context{}, lane, freed);
    ++counters.lane_credits_sent;
    lane_freed.erase(key);
}

void Communicator::Impl::lane_loss_locked(NodeId peer, const std::string& reason) {
    for (auto it = lane_backlog.begin(); it != lane_backlog.end();) {
        if (it->first.first != peer) {
            ++it;
            continue;
        }
        fail_sends_locked(it->second, reason);
        it = lane_backlog.erase(it);
    }
    auto forget = [peer](auto& map) {
        for (auto it = map.begin(); it != map.end();)
            it = it->first.first == peer ? map.erase(it) : std::next(it);
    };
    forget(lane_in_flight); // a restarted peer starts with its lanes empty
    forget(lane_freed);
    // lane_unread stays: its messages stay receivable in the unexpected queue.
}

} // namespace msgpass::comm
