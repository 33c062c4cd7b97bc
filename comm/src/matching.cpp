// The receive side of the communicator: the expected and unexpected queues, MPI
// matching, a peer's loss (docs/communicator.md, "Matching").
#include "impl.hpp"

#include <cstring>
#include <limits>

namespace msgpass::comm {

void Communicator::Impl::fill_receive(Completion& c, Request& r, Arrived&& m) {
    c.is_send = false;
    c.context = m.context;
    c.source = m.source;
    c.tag = m.tag;
    c.size = m.size;
    c.user = r.user;
    if (r.into_span) {
        const std::byte* from = m.whole->single()->data() + header_size;
        std::size_t n = 0;
        if (r.into_list.empty()) {
            n = std::min(m.size, r.into.size());
            if (n > 0) std::memcpy(r.into.data(), from, n);
        } else { // scattered in order, as far as the message goes
            for (const auto& piece : r.into_list) {
                const std::size_t k = std::min(m.size - n, piece.size());
                if (k > 0) std::memcpy(piece.data(), from + n, k);
                n += k;
            }
        }
        c.bytes = n;
        c.status = n < m.size ? Status::truncated : Status::success;
    } else {
        c.bytes = m.size;
        c.buffer = std::make_unique<PayloadBuffer>(std::move(m.whole), m.size);
        c.status = Status::success;
    }
}

// A message from a node: checked, then given to the first posted receive that
// matches, else queued as unexpected. Returns the reason when it was malformed.
std::string Communicator::Impl::dispatch_locked(BufferPtr whole, const Want* want) {
    const NodeId source = whole->source();
    if (whole->single() == nullptr) {
        auto copy = HeapBuffer::copy_of(*whole);
        copy->set_source(source);
        whole = std::move(copy);
    }
    WireEnvelope w{};
    if (const auto* s = whole->single(); s->size() >= header_size) {
        // The common case first: an eager message with a sound envelope.
        std::memcpy(&w, s->data(), sizeof w);
        if (w.magic == wire_magic && w.version == wire_version && w.kind == kind_eager && w.tag >= 0 &&
            w.size == s->size() - header_size) {
            if (!lost.empty()) lost.erase(source);
            const Context context{w.context};
            if (want != nullptr && limits.tag_queues.empty() &&
                matches(want->context, want->source, want->tag, context, source, w.tag) &&
                (expected.empty() || !expected_match_locked(context, source, w.tag))) {
                *want->out = Message{source, w.tag, std::make_unique<PayloadBuffer>(std::move(whole), w.size), context};
                return {};
            }
            Arrived m{source, w.tag, static_cast<std::size_t>(w.size), std::move(whole)};
            m.context = context;
            lane_arrived_locked(m);
            queue_locked(std::move(m), want);
            return {};
        }
    }
    std::string bad;
    if (whole->size() < header_size) {
        bad = std::to_string(whole->size()) + " bytes, shorter than the " + std::to_string(header_size) +
              "-byte envelope";
    } else {
        std::memcpy(&w, whole->single()->data(), sizeof w);
        if (w.magic != wire_magic)
            bad = "bad magic word";
        else if (w.version != wire_version)
            bad = "envelope version " + std::to_string(w.version) + ", expected " + std::to_string(wire_version);
        else if (w.kind < kind_eager || w.kind > kind_last)
            bad = "unknown message kind " + std::to_string(w.kind);
        else if (w.tag < 0 && !(w.kind == kind_request && w.tag == any_tag))
            bad = "negative tag " + std::to_string(w.tag);
        else if (w.kind == kind_cts_target && whole->size() != header_size + sizeof(SingleCopyTarget))
            bad = "a clear-to-send naming a buffer of " + std::to_string(whole->size()) + " bytes, not " +
                  std::to_string(header_size + sizeof(SingleCopyTarget));
        else if (w.kind >= kind_rts && w.kind != kind_data && w.kind != kind_cts_target && whole->size() != header_size)
            bad = (w.kind == kind_rts       ? "a request-to-send of "
                   : w.kind == kind_cts     ? "a clear-to-send of "
                   : w.kind == kind_request ? "a posted receive's request of "
                   : w.kind == kind_credit  ? "a tag queue's credit of "
                   : w.kind == kind_written ? "a single-copy completion of "
                                            : "a withdrawal of ") +
                  std::to_string(whole->size()) + " bytes, not an envelope alone";
        else if ((w.kind == kind_withdraw || w.kind == kind_withdrawn) && w.size != 0)
            bad = "a withdrawal announcing " + std::to_string(w.size) + " bytes";
        else if (w.kind == kind_credit && static_cast<std::size_t>(w.tag) >= limits.tag_queues.size())
            bad = "a credit for tag queue " + std::to_string(w.tag) + ", of " +
                  std::to_string(limits.tag_queues.size()) + " (comm.tag_queues must be the same at both ends)";
        else if ((w.kind == kind_cts || w.kind == kind_cts_target) &&
                 w.size > std::numeric_limits<std::uint32_t>::max())
            bad = "a clear-to-send withdrawing request " + std::to_string(w.size) + ", not a 32-bit id";
        else if (w.kind == kind_rts && w.size > std::numeric_limits<std::size_t>::max() - header_size)
            bad = "a request-to-send of " + std::to_string(w.size) + " bytes";
        else if ((w.kind < kind_rts || w.kind == kind_data) && w.size != whole->size() - header_size)
            bad = "envelope says " + std::to_string(w.size) + " payload bytes, the message holds " +
                  std::to_string(whole->size() - header_size);
    }
    if (bad.empty() && w.kind == kind_rts) {
        const RdvKey key{source, w.id};
        if (queued_rts.count(key) != 0 || awaiting.count(key) != 0)
            bad = "a request-to-send repeating rendezvous id " + std::to_string(w.id) + ", still under way";
    }
    if (bad.empty() && w.kind == kind_cts) bad = on_clear_to_send_locked(source, w.id, w.size);
    if (bad.empty() && w.kind == kind_cts_target) {
        SingleCopyTarget target{};
        std::memcpy(&target, whole->single()->data() + header_size, sizeof target);
        bad = on_clear_to_send_locked(source, w.id, w.size, &target);
    }
    if (bad.empty() && w.kind == kind_written) bad = on_written_locked(source, w);
    if (bad.empty() && w.kind == kind_withdraw) bad = on_withdraw_locked(source, w.id);
    if (bad.empty() && w.kind == kind_data) {
        bad = on_data_locked(source, w, std::move(whole));
        if (bad.empty()) {
            lost.erase(source);
            return {};
        }
    }
    if (!bad.empty()) {
        ++counters.malformed;
        return "comm: malformed envelope from " + describe(source) + ": " + bad + "; the message was dropped";
    }
    lost.erase(source); // a message after a loss: the peer restarted
    if (w.kind == kind_cts || w.kind == kind_cts_target || w.kind == kind_written || w.kind == kind_withdraw) return {};
    if (w.kind == kind_credit) {
        on_credit_locked(source, w.tag, w.size);
        return {};
    }
    if (w.kind == kind_withdrawn) {
        on_withdrawn_locked(source, w.id);
        return {};
    }
    if (w.kind == kind_request) { // a receive of source's posted for this node: a large send may go at once
        auto& held = requested[source];
        if (held.size() >= limits.rendezvous_window) held.pop_front(); // the oldest are the likeliest stale
        held.push_back(Requested{Context{w.context}, w.tag, w.size, w.id});
        any_requested.store(true, std::memory_order_release);
        return {};
    }
    if (w.kind == kind_rts) { // keep the envelope alone, not the node's receive buffer
        auto copy = std::make_unique<HeapBuffer>(header_size);
        std::memcpy(copy->data(), whole->single()->data(), header_size);
        copy->set_source(source);
        whole = std::move(copy);
    }
    Arrived m{source, w.tag, static_cast<std::size_t>(w.size), std::move(whole), w.kind, w.id};
    m.context = Context{w.context};
    if (w.kind == kind_eager) lane_arrived_locked(m);
    if (w.kind == kind_unexpected) {
        unexpected_bytes += m.whole->size();
        bmi_unexpected.push_back(std::move(m));
        changed.notify_all();
        return {};
    }
    queue_locked(std::move(m), want);
    return {};
}

// A sound message (eager, or an announcement): to the oldest posted receive that
// matches, else to recv's want, else into the unexpected queue.
void Communicator::Impl::queue_locked(Arrived&& m, const Want* want) {
    m.seq = next_seq++;
    for (auto it = expected.begin(); it != expected.end(); ++it) {
        if (!matches(it->context, it->peer, it->tag, m.context, m.source, m.tag)) continue;
        auto& r = requests.at(it->id);
        expected.erase(it);
        if (m.kind == kind_rts) {
            clear_to_send_locked(r, std::move(m));
            return;
        }
        taken_locked(m);
        fill_receive(r.completion, r, std::move(m));
        r.done = true;
        changed.notify_all();
        return;
    }
    if (want != nullptr && m.kind == kind_eager &&
        matches(want->context, want->source, want->tag, m.context, m.source, m.tag)) {
        taken_locked(m);
        *want->out = Message{m.source, m.tag, std::make_unique<PayloadBuffer>(std::move(m.whole), m.size), m.context};
        return;
    }
    unexpected_bytes += m.whole->size();
    if (m.kind == kind_rts) queued_rts.emplace(m.source, m.rdv_id);
    unexpected.push_back(std::move(m));
    changed.notify_all();
}

void Communicator::Impl::handle_loss_locked(NodeId peer, const std::string& reason) {
    lost.insert(peer);
    for (auto it = expected.begin(); it != expected.end();) {
        if (it->peer != peer) {
            ++it;
            continue;
        }
        auto& r = requests.at(it->id);
        r.completion.status = Status::peer_lost;
        r.completion.context = r.context;
        r.completion.source = peer;
        r.completion.tag = r.tag;
        r.completion.user = r.user;
        r.completion.error = reason;
        r.done = true;
        it = expected.erase(it);
    }
    // Sends of the caller's memory the node still holds: not acknowledged, so they
    // complete as lost when the node lets the memory go (it drops them with the loss).
    for (RequestId id : releasing)
        if (auto r = requests.find(id);
            r != requests.end() && r->second.peer == peer && !r->second.released->load(std::memory_order_acquire)) {
            r->second.completion.status = Status::peer_lost;
            r->second.completion.error = reason;
        }
    if (auto b = backlog.find(peer); b != backlog.end()) {
        fail_sends_locked(b->second, reason);
        backlog.erase(b);
        sync_backlogged_locked();
    }
    rendezvous_loss_locked(peer, reason);
    retire_locked(peer);
    changed.notify_all();
}

Posted Communicator::Impl::post_recv(Context context, NodeId source, Tag tag, bool into_span, std::span<std::byte> into,
                                     void* user, std::vector<std::span<std::byte>> into_list, bool in_place) {
    check_peer(source, true, "post_recv", true);
    check_tag(tag, true, "post_recv");
    progress();
    std::lock_guard lock(mutex);
    const RequestId id = new_id_locked();
    Request r;
    r.id = id;
    r.peer = source;
    r.tag = tag;
    r.context = context;
    r.into_span = into_span;
    r.into = into;
    r.into_list = std::move(into_list);
    r.in_place = in_place;
    r.user = user;
    for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
        if (!matches(context, source, tag, it->context, it->source, it->tag)) continue;
        unexpected_bytes -= it->whole->size();
        Arrived m = std::move(*it);
        unexpected.erase(it);
        if (m.kind == kind_rts) queued_rts.erase(RdvKey{m.source, m.rdv_id});
        if (m.kind == kind_rts && !m.dead) { // completes when the data came
            auto& live = requests.emplace(id, std::move(r)).first->second;
            clear_to_send_locked(live, std::move(m));
            return Posted{id, std::nullopt};
        }
        Posted p{id, Completion{}};
        if (m.kind == kind_rts) { // its sender was lost before it was cleared
            p.done->id = id;
            p.done->immediate = true;
            p.done->status = Status::peer_lost;
            p.done->context = m.context;
            p.done->source = m.source;
            p.done->tag = m.tag;
            p.done->size = m.size;
            p.done->user = user;
            p.done->error = describe(m.source) + " announced a " + std::to_string(m.size) +
                            "-byte message and was lost before sending its data";
            return p;
        }
        taken_locked(m);
        fill_receive(*p.done, r, std::move(m));
        p.done->id = id;
        p.done->immediate = true;
        return p;
    }
    if (source != any_source && lost.count(source) != 0) {
        Posted p{id, Completion{}};
        p.done->id = id;
        p.done->immediate = true;
        p.done->status = Status::peer_lost;
        p.done->context = context;
        p.done->source = source;
        p.done->tag = tag;
        p.done->user = user;
        p.done->error = describe(source) + " was lost and nothing of it is left to receive";
        return p;
    }
    requests.emplace(id, std::move(r));
    expected.push_back(Expected{id, context, source, tag});
    request_locked(requests.at(id));
    return Posted{id, std::nullopt};
}

Message Communicator::Impl::take_locked(std::deque<Arrived>::iterator it) {
    unexpected_bytes -= it->whole->size();
    taken_locked(*it);
    Message m{it->source, it->tag, std::make_unique<PayloadBuffer>(std::move(it->whole), it->size), it->context};
    unexpected.erase(it);
    return m;
}

// The fast path of a blocking receive: no request, the message taken from the
// unexpected queue or straight from the node. The same order as a posted receive:
// the oldest unexpected message matching first, then what arrives, of which posted
// receives (older than this one) get what they match first.
std::optional<Message> Communicator::Impl::recv(Context context, NodeId source, Tag tag,
                                                std::chrono::nanoseconds timeout) {
    std::optional<Message> out;
    const Want want{context, source, tag, &out};
    std::optional<SteadyTime> deadline; // set when the receive first waits
    std::unique_lock lock(mutex);
    // Whether the next look at the nodes may wait; one after a message came does not.
    // The first one does when the receives before found nothing there (requests and
    // answers: the node's own wait polls at once, then waits for the message on its
    // way from the earliest moment), except every 16th, which looks first without
    // waiting as when they found their message there (a stream: taken without
    // letting the mutex go), to learn which of the two it is.
    bool block = timeout > std::chrono::nanoseconds::zero() && recv_waits && (++recv_count & 15) != 0;
    bool first_look = !block;
    for (;;) {
        if (backlogged.load(std::memory_order_relaxed) || !control_backlog.empty()) retry_backlog_locked();
        // A cleared send's data, one per look at the nodes (its receiver may be what
        // this receive waits for).
        if (!cleared_sends.empty()) send_cleared_locked();
        if (!unexpected.empty()) {
            if (auto it = find_unexpected_locked(context, source, tag); it != unexpected.end()) {
                if (it->kind == kind_rts) break; // a rendezvous: a posted receive clears it
                return take_locked(it);
            }
        }
        if (source != any_source && !lost.empty() && lost.count(source) != 0)
            throw PeerLost(source, "comm: recv from " + describe(source) + ": " + describe(source) +
                                       " was lost and nothing of it is left to receive");
        std::chrono::nanoseconds left{0};
        if (block) {
            if (deadline) {
                left = time_left(*deadline);
                if (left <= std::chrono::nanoseconds::zero()) return std::nullopt;
            } else {
                deadline = deadline_after(timeout);
                left = timeout;
            }
        }
        const bool room = room_locked();
        if (!room && !pulling) ++counters.backpressure_stops;
        if (room && !pulling) {
            auto b = block && cleared_sends.empty() ? blocking_pull_locked(lock, std::min(left, slice)) : pull_locked();
            if (first_look) recv_waits = !b;
            first_look = false;
            if (!b && !cleared_sends.empty()) continue; // the next cleared send's data goes
            if (!b) {
                if (!block && timeout <= std::chrono::nanoseconds::zero()) return std::nullopt;
                block = true;
                continue;
            }
            const std::string bad = dispatch_locked(std::move(b), &want);
            if (out) return out;
            if (!bad.empty()) throw Error(bad);
            block = false; // something came: look again without waiting
            continue;
        }
        if (!block) {
            if (timeout <= std::chrono::nanoseconds::zero()) return std::nullopt;
            block = true;
            continue;
        }
        // Another thread waits in the nodes (or the queue is full): sleep until it
        // queued something, or left the nodes.
        sleep_locked(lock, std::min(left, slice), !room);
    }
    lock.unlock();
    return recv_posted(context, source, tag, deadline ? *deadline : deadline_after(timeout));
}

std::optional<Envelope> Communicator::Impl::recv_view_step(Node* one, Context context, NodeId source, Tag tag,
                                                           std::span<std::byte> into, MessageView* held) {
    std::unique_lock lock(mutex);
    // What the loop of recv looks after first: none of it may be pending here.
    if (pulling.load() || !unexpected.empty() || backlogged.load(std::memory_order_relaxed) ||
        !control_backlog.empty() || !cleared_sends.empty() || !lost.empty() || !room_locked())
        return std::nullopt;
    admit_runtime_locked();
    if (!releasing.empty()) complete_released_locked();
    if (single.load(std::memory_order_relaxed) != one) return std::nullopt; // a peer joined meanwhile
    // A receive posted before this one that could take what this one matches: what
    // comes is matched under the mutex. Else a message this receive matches is its
    // own, and is taken without the mutex: a receive posted by another thread while
    // this one waits is younger than it.
    const bool posted_first = !expected.empty() && expected_overlap_locked(context, source, tag);
    try {
        Pull pull(*this, lock);
        MessageView v = one->receive_view(slice);
        if (!v) return std::nullopt; // (the pull's end takes the mutex back, the lock lets it go)
        WireEnvelope w;
        bool mine = false; // an eager message this receive matches
        if (v.size() >= header_size) {
            std::memcpy(&w, v.data(), sizeof w);
            mine = w.magic == wire_magic && w.version == wire_version && w.kind == kind_eager && w.tag >= 0 &&
                   w.size == v.size() - header_size &&
                   matches(context, source, tag, Context{w.context}, v.source(), w.tag);
        }
        // Copied into the span, the view handed to held (or let go on return).
        const auto take = [&] {
            const std::size_t n = std::min<std::size_t>(w.size, into.size());
            if (n > 0) std::memcpy(into.data(), v.data() + header_size, n);
            const Envelope e{v.source(), w.tag, static_cast<std::size_t>(w.size), Context{w.context}};
            if (held != nullptr) *held = std::move(v);
            return e;
        };
        if (mine && !posted_first) {
            pull.end_unlocked(); // without the mutex: the receive took it once, above
            return take();
        }
        pull.end_locked();
        if (mine && !expected_match_locked(Context{w.context}, v.source(), w.tag)) {
            lock.unlock();
            return take();
        }
        // Anything else as a pull's message: into the matching (a posted receive, the
        // unexpected queue), where recv finds it.
        auto whole = std::make_unique<HeapBuffer>(v.bytes());
        whole->set_source(v.source());
        v.release();
        const std::string bad = dispatch_locked(std::move(whole));
        if (!bad.empty()) throw Error(bad);
        return std::nullopt;
    } catch (const PeerLost& e) { // the node's (the mutex held again: the pull ended)
        handle_loss_locked(e.peer(), e.what());
        return std::nullopt;
    }
}

namespace {
// PayloadBuffer's cache: a few freed objects per thread, for the next messages.
struct PayloadCache {
    static constexpr int capacity = 64;
    void* items[capacity];
    int count = 0;
    PayloadCache() = default;
    PayloadCache(const PayloadCache&) = delete;
    PayloadCache& operator=(const PayloadCache&) = delete;
    ~PayloadCache() {
        while (count > 0)
            ::operator delete(items[--count]);
    }
};
thread_local PayloadCache payload_cache;
} // namespace

void* PayloadBuffer::operator new(std::size_t n) {
    auto& cache = payload_cache;
    if (n == sizeof(PayloadBuffer) && cache.count > 0) return cache.items[--cache.count];
    return ::operator new(n);
}

void PayloadBuffer::operator delete(void* p, std::size_t n) noexcept {
    auto& cache = payload_cache;
    if (n == sizeof(PayloadBuffer) && cache.count < PayloadCache::capacity) {
        cache.items[cache.count++] = p;
        return;
    }
    ::operator delete(p);
}

// A send to this node itself: straight into its own matching, as a message that
// arrived from itself (no node, no rendezvous: the bytes were copied once already).
Posted Communicator::Impl::self_send(Context context, Tag tag, BufferPtr whole, std::size_t size, void* user,
                                     bool sync) {
    if (whole->single() == nullptr) whole = HeapBuffer::copy_of(*whole);
    whole->set_source(self);
    std::lock_guard lock(mutex);
    const RequestId id = new_id_locked();
    Completion c;
    c.id = id;
    c.is_send = true;
    c.context = context;
    c.source = self;
    c.tag = tag;
    c.size = size;
    c.bytes = size;
    c.user = user;
    Arrived m{self, tag, size, std::move(whole)};
    m.context = context;
    if (sync) { // completes when a receive takes it (taken_locked)
        Request r;
        r.id = id;
        r.is_send = true;
        r.peer = self;
        r.tag = tag;
        r.context = context;
        r.user = user;
        r.completion = std::move(c);
        requests.emplace(id, std::move(r));
        m.sync_sender = id;
        queue_locked(std::move(m), nullptr);
        auto it = requests.find(id);
        if (it != requests.end() && it->second.done) {
            Posted p{id, std::move(it->second.completion)};
            p.done->immediate = true;
            requests.erase(it);
            return p;
        }
        return Posted{id, std::nullopt};
    }
    queue_locked(std::move(m), nullptr);
    c.immediate = true;
    return Posted{id, std::move(c)};
}

void Communicator::Impl::complete_self_send_locked(RequestId id) {
    auto it = requests.find(id);
    if (it == requests.end() || it->second.done) return; // cancelled meanwhile
    it->second.done = true;
    changed.notify_all();
}

std::vector<Message> Communicator::Impl::take_unexpected_locked(std::size_t max) {
    std::vector<Message> out;
    while (out.size() < max && !bmi_unexpected.empty()) {
        Arrived m = std::move(bmi_unexpected.front());
        bmi_unexpected.pop_front();
        unexpected_bytes -= m.whole->size();
        out.push_back(Message{m.source, m.tag, std::make_unique<PayloadBuffer>(std::move(m.whole), m.size)});
    }
    return out;
}

} // namespace msgpass::comm
