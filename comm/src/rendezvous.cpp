// Rendezvous for large messages (BIP's long messages, EPOS's requested queue;
// docs/communicator.md, "Short and long messages"). A payload above
// Limits::eager_limit is announced by its envelope alone (request-to-send, kind 3);
// the receiver matches the announcement like a message and, once a receive took it,
// answers clear-to-send (kind 4) with the sender's id; the sender then sends the data
// (kind 5), which completes that receive, into the caller's span when it gave one.
// An unexpected announcement costs the receiver its 24-byte envelope.
#include "impl.hpp"

#include <cerrno>

namespace msgpass::comm {

void Communicator::Impl::clear_to_send_locked(Request& r, Arrived&& m) {
    r.awaiting_data = true;
    r.completion.context = m.context;
    r.completion.source = m.source;
    r.completion.tag = m.tag;
    r.completion.size = m.size;
    r.completion.user = r.user;
    const RdvKey key{m.source, m.rdv_id};
    awaiting.emplace(key, r.id);
    const bool cleared = m.cleared;
    r.announcement = std::move(m);
    if (!cleared) { // withdrawing the request the receive had sent, which it no longer needs
        if (gives_buffer_locked(r, key.first)) { // the sender writes into it (one copy)
            SingleCopyTarget target = local_process();
            target.address = reinterpret_cast<std::uintptr_t>(r.into.data());
            target.length = r.into.size();
            r.single_copy = true;
            r.offered = OfferedRange(target.address, target.length);
            send_control_locked(key.first, kind_cts_target, key.second, Context{}, 0, r.request_id,
                                std::as_bytes(std::span(&target, 1)));
        } else {
            send_control_locked(key.first, kind_cts, key.second, Context{}, 0, r.request_id);
        }
        r.request_id = 0;
        return;
    }
    auto& ids = returned[key.first]; // its data is on its way: no second clear-to-send
    ids.erase(std::remove(ids.begin(), ids.end(), key.second), ids.end());
    if (ids.empty()) returned.erase(key.first);
}

std::string Communicator::Impl::on_clear_to_send_locked(NodeId source, std::uint32_t id, std::uint64_t withdrawn,
                                                        const SingleCopyTarget* target) {
    if (withdrawn != 0)
        if (auto h = requested.find(source); h != requested.end()) {
            auto& held = h->second;
            held.erase(std::remove_if(held.begin(), held.end(), [&](const Requested& q) { return q.id == withdrawn; }),
                       held.end());
            if (held.empty()) requested.erase(h);
            any_requested.store(!requested.empty(), std::memory_order_release);
        }
    auto it = announced.find(RdvKey{source, id});
    if (it == announced.end())
        return "a clear-to-send for rendezvous " + std::to_string(id) + ", which this node did not announce to it";
    const RequestId rid = it->second;
    announced.erase(it);
    if (auto c = announced_count.find(source); c != announced_count.end() && c->second > 0) --c->second;
    // Its data goes once the messages that came with this one were dispatched.
    Cleared cleared{rid, source, target != nullptr, {}};
    if (target != nullptr) cleared.target = *target;
    cleared_sends.push_back(cleared);
    return {};
}

void Communicator::Impl::send_cleared_locked() {
    if (cleared_sends.empty()) return;
    const Cleared cleared = cleared_sends.front();
    cleared_sends.pop_front();
    const NodeId source = cleared.peer;
    const RequestId rid = cleared.id;
    auto found = requests.find(rid);
    if (found == requests.end() || found->second.done) return; // failed meanwhile (its peer lost)
    auto& r = found->second;
    if (cleared.has_target && write_single_copy_locked(r, source, cleared.target)) {
        if (r.done) { // the receiver's process is gone
            handle_loss_locked(source, r.completion.error);
            changed.notify_all();
            return;
        }
    } else {
        // Through the technology: the receive gave no buffer (a list, not posted in
        // place, single copy off at its end) or it could not be written.
        if (r.kept && single_copy_on && same_host.count(source) != 0) ++counters.single_copy_fallbacks;
        if (r.kept) // the caller's memory, held by the data message (no copy)
            r.pending = make_view_message(r, kind_data);
        else
            r.pending = std::move(r.rdv_data);
    }
    // The data goes before anything waiting for this peer: the receiver waits for it.
    auto& queue = backlog[source];
    if (!queue.empty() || !try_send_locked(r)) {
        queue.push_front(rid);
        backlogged.store(true, std::memory_order_release);
        return;
    }
    if (queue.empty()) backlog.erase(source);
    if (r.completion.status == Status::peer_lost) handle_loss_locked(source, r.completion.error);
    changed.notify_all();
}

void Communicator::Impl::send_all_cleared_locked() {
    if (cleared_sends.empty()) return;
    while (!cleared_sends.empty()) {
        send_cleared_locked();
        if (!pulling) drain_locked(); // the peer's announcements are answered between two writes
    }
    // What went to the backlog behind an announcement the window held (and those the
    // clear-to-sends let go now) goes before this thread waits again.
    if (backlogged.load(std::memory_order_relaxed)) retry_backlog_locked();
}

std::string Communicator::Impl::on_data_locked(NodeId source, const WireEnvelope& w, BufferPtr whole) {
    auto it = awaiting.find(RdvKey{source, w.id});
    if (it == awaiting.end()) {
        // Its receive gave up: the returned announcement becomes the message, in its
        // place in the unexpected queue, for the next receive that matches it.
        auto u = find_returned_locked(source, w.id);
        if (u == unexpected.end())
            return "data for rendezvous " + std::to_string(w.id) + ", which this node did not clear";
        if (w.size != u->size || w.tag != u->tag)
            return "data of " + std::to_string(w.size) + " bytes with tag " + std::to_string(w.tag) +
                   " for rendezvous " + std::to_string(w.id) + ", announced as " + std::to_string(u->size) +
                   " bytes with tag " + std::to_string(u->tag);
        unexpected_bytes += whole->size() - u->whole->size();
        u->whole = std::move(whole);
        u->kind = kind_data;
        u->cleared = false;
        queued_rts.erase(RdvKey{source, w.id});
        auto& ids = returned[source];
        ids.erase(std::remove(ids.begin(), ids.end(), w.id), ids.end());
        if (ids.empty()) returned.erase(source);
        ++counters.rendezvous_received;
        changed.notify_all();
        return {};
    }
    if (it == awaiting.end()) return "data for rendezvous " + std::to_string(w.id) + ", which this node did not clear";
    auto& r = requests.at(it->second);
    if (w.size != r.completion.size || w.tag != r.completion.tag) // the receive keeps waiting (cancel, loss)
        return "data of " + std::to_string(w.size) + " bytes with tag " + std::to_string(w.tag) + " for rendezvous " +
               std::to_string(w.id) + ", announced as " + std::to_string(r.completion.size) + " bytes with tag " +
               std::to_string(r.completion.tag);
    awaiting.erase(it);
    r.awaiting_data = false;
    Arrived m{source, w.tag, static_cast<std::size_t>(w.size), std::move(whole)};
    m.context = r.completion.context;
    fill_receive(r.completion, r, std::move(m));
    r.done = true;
    ++counters.rendezvous_received;
    changed.notify_all();
    return {};
}

std::string Communicator::Impl::on_written_locked(NodeId source, const WireEnvelope& w) {
    auto it = awaiting.find(RdvKey{source, w.id});
    if (it == awaiting.end())
        return "a single-copy completion for rendezvous " + std::to_string(w.id) + ", which this node did not clear";
    auto& r = requests.at(it->second);
    if (!r.single_copy)
        return "a single-copy completion for rendezvous " + std::to_string(w.id) +
               ", whose receive named no buffer to write into";
    if (w.size != r.completion.size || w.tag != r.completion.tag)
        return "a single-copy completion of " + std::to_string(w.size) + " bytes with tag " + std::to_string(w.tag) +
               " for rendezvous " + std::to_string(w.id) + ", announced as " + std::to_string(r.completion.size) +
               " bytes with tag " + std::to_string(r.completion.tag);
    awaiting.erase(it);
    r.awaiting_data = false;
    r.announcement = Arrived{};
    r.offered = OfferedRange{}; // written: the buffer is the application's again
    auto& c = r.completion;
    c.is_send = false;
    c.bytes = std::min<std::size_t>(c.size, r.into.size());
    c.status = c.bytes < c.size ? Status::truncated : Status::success;
    r.done = true;
    ++counters.rendezvous_received;
    ++counters.single_copy_received;
    changed.notify_all();
    return {};
}

bool Communicator::Impl::write_single_copy_locked(Request& r, NodeId dest, const SingleCopyTarget& target) {
    std::span<const std::byte> from;
    if (r.kept) {
        from = r.kept_bytes;
    } else if (r.rdv_data && r.rdv_data->single() != nullptr) { // a copy made at the post: written from it
        from = r.rdv_data->single()->bytes().subspan(header_size);
    } else {
        return false; // a gathered payload: through the technology
    }
    if (!single_copy_on || same_host.count(dest) == 0) return false;
    auto& peer = single_copy_peers[dest];
    if (peer.refused) return false;
    const SingleCopyTarget& self_process = local_process();
    if (target.boot != self_process.boot || target.pid_namespace != self_process.pid_namespace || target.pid == 0 ||
        (peer.pid != 0 && peer.pid != target.pid)) {
        // Another host or pid namespace (the pid would name another process), or a pid
        // other than the one this peer named first: not written into.
        ++counters.single_copy_refused;
        return false;
    }
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(from.size(), target.length));
    const int error = write_into_process(target.pid, target.address, from.first(n));
    if (error == ESRCH) { // in this pid namespace: the receiving process is gone
        r.rdv_data.reset();
        r.completion.status = Status::peer_lost;
        r.completion.error = describe(dest) + "'s process " + std::to_string(target.pid) +
                             " is gone: it ended before the data of a " + std::to_string(r.size) +
                             "-byte message was written into its receive buffer";
        r.done = true;
        return true;
    }
    if (error == EPERM || error == ENOSYS) { // not permitted here: never again to this peer
        peer.refused = true;
        return false;
    }
    if (error != 0) { // a bad address (EFAULT): the target is wrong, the data goes the other way
        ++counters.single_copy_refused;
        return false;
    }
    peer.pid = target.pid;
    r.rdv_data.reset();
    auto written = std::make_unique<HeapBuffer>(header_size);
    write_envelope(written->data(), r.context, r.tag, r.size, kind_written, r.rdv_id);
    r.pending = std::move(written);
    ++counters.single_copy_sent;
    counters.single_copy_bytes += n;
    return true;
}

void Communicator::Impl::return_locked(Request& r) {
    Arrived m = std::move(r.announcement);
    const RdvKey key{m.source, m.rdv_id};
    auto& ids = returned[key.first];
    if (ids.size() >= limits.rendezvous_window) { // the peer broke the protocol: its oldest goes
        const std::uint32_t oldest = ids.front();
        ids.pop_front();
        if (auto u = find_returned_locked(key.first, oldest); u != unexpected.end()) {
            unexpected_bytes -= u->whole->size();
            unexpected.erase(u);
        }
        queued_rts.erase(RdvKey{key.first, oldest});
        ++counters.malformed;
        if (auto c = control_backlog.find(key.first); c != control_backlog.end()) {
            auto& queue = c->second;
            queue.erase(std::remove_if(queue.begin(), queue.end(),
                                       [oldest](const BufferPtr& b) {
                                           WireEnvelope w{};
                                           std::memcpy(&w, b->single()->data(), sizeof w);
                                           return w.kind == kind_cts && w.id == oldest;
                                       }),
                        queue.end());
            if (queue.empty()) control_backlog.erase(c);
        }
    }
    ids.push_back(key.second);
    m.cleared = true;
    queued_rts.insert(key);
    unexpected_bytes += m.whole->size();
    auto at = std::find_if(unexpected.begin(), unexpected.end(), [&](const Arrived& u) { return u.seq > m.seq; });
    unexpected.insert(at, std::move(m));
    changed.notify_all();
}

std::deque<Communicator::Impl::Arrived>::iterator Communicator::Impl::find_returned_locked(NodeId source,
                                                                                           std::uint32_t id) {
    return std::find_if(unexpected.begin(), unexpected.end(), [&](const Arrived& u) {
        return u.cleared && u.kind == kind_rts && u.source == source && u.rdv_id == id;
    });
}

void Communicator::Impl::request_locked(Request& r) {
    if (!r.into_span || r.peer == any_source || r.peer == self) return;
    const std::size_t capacity = r.capacity();
    if (capacity <= limits.eager_limit) return;
    if (node_of(r.peer) == nullptr) return;
    r.request_id = static_cast<std::uint32_t>(r.id) == 0 ? 1 : static_cast<std::uint32_t>(r.id);
    send_control_locked(r.peer, kind_request, r.request_id, r.context, r.tag, capacity);
    ++counters.requests_sent;
}

bool Communicator::Impl::take_request_locked(NodeId dest, Context context, Tag tag, std::size_t size) {
    auto it = requested.find(dest);
    if (it == requested.end()) return false;
    auto& held = it->second;
    for (auto r = held.begin(); r != held.end(); ++r) {
        if (r->context != context || (r->tag != any_tag && r->tag != tag) || r->capacity < size) continue;
        held.erase(r);
        if (held.empty()) requested.erase(it);
        any_requested.store(!requested.empty(), std::memory_order_release);
        ++counters.requested_sends;
        return true;
    }
    return false;
}

void Communicator::Impl::withdraw_locked(Request& r) {
    if (r.withdrawing) return;
    r.withdrawing = true;
    send_control_locked(r.peer, kind_withdraw, r.rdv_id);
}

std::string Communicator::Impl::on_withdraw_locked(NodeId source, std::uint32_t id) {
    const RdvKey key{source, id};
    auto it = std::find_if(unexpected.begin(), unexpected.end(), [&](const Arrived& u) {
        return u.kind == kind_rts && u.source == source && u.rdv_id == id;
    });
    // Cleared by a receive (its data is the answer), or already received: nothing to do.
    if (it == unexpected.end() || it->cleared) return {};
    unexpected_bytes -= it->whole->size();
    unexpected.erase(it);
    queued_rts.erase(key);
    send_control_locked(source, kind_withdrawn, id);
    return {};
}

void Communicator::Impl::on_withdrawn_locked(NodeId source, std::uint32_t id) {
    auto it = announced.find(RdvKey{source, id});
    if (it == announced.end()) return; // not this node's (a confused peer): nothing to complete
    auto& r = requests.at(it->second);
    announced.erase(it);
    if (auto c = announced_count.find(source); c != announced_count.end() && c->second > 0) --c->second;
    r.rdv_data.reset();
    r.completion.status = Status::cancelled;
    r.done = true;
    ++counters.rendezvous_withdrawn;
    changed.notify_all();
}

void Communicator::Impl::send_control_locked(NodeId peer, std::uint8_t kind, std::uint32_t id, Context context, Tag tag,
                                             std::uint64_t size, std::span<const std::byte> body) {
    auto message = std::make_unique<HeapBuffer>(header_size + body.size());
    write_envelope(message->data(), context, tag, static_cast<std::size_t>(size), kind, id);
    if (!body.empty()) std::memcpy(message->data() + header_size, body.data(), body.size());
    BufferPtr whole = std::move(message);
    Node* node = node_locked(peer);
    if (node == nullptr) return; // a client released: nothing more goes to it
    auto& queue = control_backlog[peer];
    if (queue.empty()) {
        try {
            node->send(std::move(whole)); // a refused buffer stays with us
        } catch (const SendQueueFull&) {
        } catch (const PeerLost& e) {
            control_backlog.erase(peer);
            handle_loss_locked(peer, e.what());
            return;
        }
    }
    if (whole)
        queue.push_back(std::move(whole));
    else if (queue.empty())
        control_backlog.erase(peer);
}

void Communicator::Impl::retry_control_locked() {
    std::vector<std::pair<NodeId, std::string>> lost_now;
    for (auto c = control_backlog.begin(); c != control_backlog.end();) {
        auto& queue = c->second;
        try {
            Node* node = node_locked(c->first);
            if (node == nullptr) queue.clear(); // a client released
            while (!queue.empty()) {
                node->send(std::move(queue.front()));
                queue.pop_front();
            }
        } catch (const SendQueueFull&) {
        } catch (const PeerLost& e) {
            lost_now.emplace_back(c->first, e.what());
            queue.clear();
        }
        c = queue.empty() ? control_backlog.erase(c) : std::next(c);
    }
    for (const auto& [peer, reason] : lost_now)
        handle_loss_locked(peer, reason);
}

void Communicator::Impl::rendezvous_loss_locked(NodeId peer, const std::string& reason) {
    // Own announcements to it: their sends fail.
    for (auto it = announced.begin(); it != announced.end();) {
        if (it->first.first != peer) {
            ++it;
            continue;
        }
        auto& r = requests.at(it->second);
        r.rdv_data.reset();
        r.completion.status = Status::peer_lost;
        r.completion.error = reason;
        r.done = true;
        it = announced.erase(it);
    }
    announced_count.erase(peer);
    // Cleared by it, the data not gone yet: never goes.
    for (auto it = cleared_sends.begin(); it != cleared_sends.end();) {
        if (it->peer != peer) {
            ++it;
            continue;
        }
        if (auto r = requests.find(it->id); r != requests.end() && !r->second.done) {
            r->second.rdv_data.reset();
            r->second.completion.status = Status::peer_lost;
            r->second.completion.error = reason;
            r->second.done = true;
        }
        it = cleared_sends.erase(it);
    }
    returned.erase(peer);
    single_copy_peers.erase(peer); // a restarted peer is another process
    requested.erase(peer);         // a restarted peer tells its receives anew
    lane_loss_locked(peer, reason);
    any_requested.store(!requested.empty(), std::memory_order_release);
    // Receives that cleared its announcements: their data never comes.
    for (auto it = awaiting.begin(); it != awaiting.end();) {
        if (it->first.first != peer) {
            ++it;
            continue;
        }
        auto& r = requests.at(it->second);
        r.awaiting_data = false;
        r.completion.status = Status::peer_lost;
        r.completion.error = describe(peer) + " was lost during the rendezvous of a " +
                             std::to_string(r.completion.size) + "-byte message, before its data came: " + reason;
        r.done = true;
        it = awaiting.erase(it);
    }
    // Its unexpected announcements stay (in order, for probe); a receive that takes
    // one completes with peer_lost.
    for (auto& m : unexpected)
        if (m.source == peer && m.kind == kind_rts) {
            m.dead = true;
            m.cleared = false;
            queued_rts.erase(RdvKey{peer, m.rdv_id}); // a restarted peer numbers its rendezvous anew
        }
    control_backlog.erase(peer);
}

} // namespace msgpass::comm
