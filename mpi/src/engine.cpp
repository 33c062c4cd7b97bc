// The engine of msgpass's MPI: ranks, requests, matching and progress over
// comm::Communicator (engine.hpp, docs/mpi.md).
#include "engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace msgpass::mpi {

namespace {

using namespace std::chrono_literals;

// How long one blocking wait in comm lasts before the engine looks again.
constexpr auto slice = 10ms;
// Messages kept as views of comm's receive buffers; beyond, they are copied, so that
// messages nobody receives yet do not hold a technology's receive buffers.
constexpr std::size_t max_views = 64;
// How long MPI_Finalize waits for the last messages to be handed to their peers.
constexpr auto finalize_flush = 30s;

bool any_launcher_variable() {
    for (const char* name : {"MSGPASS_NODE_ID", "MSGPASS_NODES", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        const char* value = std::getenv(name);
        if (value != nullptr && *value != '\0') return true;
    }
    return false;
}

comm::Tag wire_tag(int ctx, int tag) {
    return static_cast<comm::Tag>((ctx << tag_bits) | (tag & tag_mask));
}

bool matches(const Request& r, int ctx, int source, int tag) {
    return r.ctx == ctx && (r.peer == MPI_ANY_SOURCE || r.peer == source) && (r.tag == MPI_ANY_TAG || r.tag == tag);
}

} // namespace

std::size_t Incoming::size() const {
    return buffer ? buffer->size() - offset : copy.size();
}

const std::byte* Incoming::data() const {
    if (!buffer) return copy.data();
    const auto* s = buffer->single();
    return s != nullptr ? s->data() + offset : nullptr;
}

Engine::Engine(const char* program) {
    if (!any_launcher_variable()) { // a singleton: MPI_COMM_WORLD is this process alone
        nodes_.push_back(0);
        return;
    }
    const char* argv[] = {program != nullptr ? program : "mpi", nullptr};
    const auto options = msgpass::options(1, argv);
    if (options.self == 0)
        throw MpiError(MPI_ERR_OTHER, "no rank in the environment: start the program with msgpass-run -n N");
    for (const auto& node : options.configuration.nodes) {
        rank_of_[node.id] = static_cast<int>(nodes_.size());
        nodes_.push_back(node.id);
    }
    rank_ = rank_of_.at(options.self);
    factory_ = NodeFactory::create(options);
    comm::Limits limits;
    comm_ = std::make_unique<comm::Communicator>(*factory_, options.configuration, limits);
    for (NodeId peer : comm_->peers()) {
        auto posted = comm_->post_recv(peer, wire_tag(sentinel, 0));
        if (posted.done) {
            lose(rank_of_.at(peer), posted.done->error);
            continue;
        }
        sentinels_[posted.id] = rank_of_.at(peer);
    }
    post_pump();
}

Engine::~Engine() = default;

CommInfo Engine::info(MPI_Comm comm) const {
    if (comm == MPI_COMM_WORLD) return CommInfo{world_size(), rank_, world_p2p, world_coll};
    if (comm == MPI_COMM_SELF) return CommInfo{1, 0, self_p2p, self_coll};
    throw MpiError(MPI_ERR_COMM,
                   "invalid communicator " + std::to_string(comm) + " (MPI_COMM_WORLD and MPI_COMM_SELF are provided)");
}

// ----------------------------------------------------------------------- requests

MPI_Request Engine::new_request() {
    if (!free_.empty()) {
        const MPI_Request h = free_.back();
        free_.pop_back();
        *table_[static_cast<std::size_t>(h - 1)] = Request{};
        table_[static_cast<std::size_t>(h - 1)]->live = true;
        return h;
    }
    if (table_.size() >= static_cast<std::size_t>(std::numeric_limits<int>::max() - 1))
        throw MpiError(MPI_ERR_OTHER, "too many live requests");
    table_.push_back(std::make_unique<Request>());
    table_.back()->live = true;
    return static_cast<MPI_Request>(table_.size());
}

void Engine::check_request(MPI_Request handle) const {
    const auto index = static_cast<std::size_t>(handle) - 1;
    if (handle <= 0 || index >= table_.size() || !table_[index]->live)
        throw MpiError(MPI_ERR_REQUEST, "invalid request " + std::to_string(handle));
}

Request& Engine::request(MPI_Request handle) {
    check_request(handle);
    return *table_[static_cast<std::size_t>(handle) - 1];
}

MPI_Request Engine::handle_of(const Request& r) const {
    for (std::size_t i = 0; i < table_.size(); ++i)
        if (table_[i].get() == &r) return static_cast<MPI_Request>(i + 1);
    throw MpiError(MPI_ERR_INTERN, "a request that is not in the table");
}

void Engine::release(MPI_Request handle) {
    table_[static_cast<std::size_t>(handle) - 1]->live = false;
    table_[static_cast<std::size_t>(handle) - 1]->schedule.reset();
    free_.push_back(handle);
}

// ----------------------------------------------------------------------- sends

MPI_Request Engine::isend(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes, bool sync) {
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.is_send = true;
    r.ctx = c.p2p;
    r.peer = dest;
    r.tag = tag;
    r.status.MPI_SOURCE = dest;
    r.status.MPI_TAG = tag;
    r.status.msgpass_bytes = bytes;
    const auto* data = static_cast<const std::byte*>(buf);
    if (c.p2p == self_p2p || dest == rank_) { // to itself: straight to the matching
        Incoming m;
        m.ctx = c.p2p;
        m.source = c.rank;
        m.tag = tag;
        m.copy.assign(data, data + bytes);
        if (sync) {
            const bool taken = std::any_of(posted_.begin(), posted_.end(),
                                           [&](const Request* p) { return matches(*p, m.ctx, m.source, tag); });
            if (!taken) {
                release(h);
                throw MpiError(MPI_ERR_OTHER, "a synchronous send to this rank itself with no matching receive "
                                              "posted would never complete");
            }
        }
        deliver(std::move(m));
        r.complete = true;
        return h;
    }
    if (auto lost = lost_.find(dest); lost != lost_.end()) {
        release(h);
        throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + lost->second);
    }
    comm::Posted posted;
    const NodeId node = nodes_[static_cast<std::size_t>(dest)];
    if (sync) {
        r.wants_ack = true;
        r.ack_seq = next_seq_++ & static_cast<std::uint32_t>(tag_mask);
        std::vector<std::byte> framed(sizeof r.ack_seq + bytes);
        std::memcpy(framed.data(), &r.ack_seq, sizeof r.ack_seq);
        if (bytes > 0) std::memcpy(framed.data() + sizeof r.ack_seq, data, bytes);
        posted = comm_->post_send(node, wire_tag(world_sync, tag), framed);
    } else {
        posted = comm_->post_send(node, wire_tag(c.p2p, tag), std::span<const std::byte>(data, bytes));
    }
    if (posted.done) {
        if (posted.done->status == comm::Status::peer_lost) {
            release(h);
            throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + posted.done->error);
        }
        r.complete = !r.wants_ack;
    } else {
        r.comm_id = posted.id;
        r.comm_pending = true;
        sending_.push_back(h);
    }
    return h;
}

void Engine::send_ack(int source, std::uint32_t seq) {
    // Nothing waits for the answer's own completion: a backlogged one is moved by
    // comm's progress and by MPI_Finalize's flush.
    (void)comm_->post_send(nodes_[static_cast<std::size_t>(source)], wire_tag(ssend_ack, static_cast<int>(seq)),
                           std::span<const std::byte>{});
}

// ----------------------------------------------------------------------- receives

Incoming* Engine::find_unexpected(int ctx, int source, int tag) {
    for (auto& m : unexpected_) {
        if (m.ctx == ctx && (source == MPI_ANY_SOURCE || source == m.source) && (tag == MPI_ANY_TAG || tag == m.tag))
            return &m;
    }
    return nullptr;
}

void Engine::complete_recv(Request& r, Incoming& m) {
    const std::size_t size = m.size();
    const std::size_t n = std::min(size, r.capacity);
    if (n > 0) std::memcpy(r.buf, m.data(), n);
    r.status.MPI_SOURCE = m.source;
    r.status.MPI_TAG = m.tag;
    r.status.msgpass_bytes = n;
    r.status.MPI_ERROR = size > r.capacity ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
    r.complete = true;
    if (m.sync) send_ack(m.source, m.seq);
}

MPI_Request Engine::irecv(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity) {
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.ctx = c.p2p;
    r.peer = source;
    r.tag = tag;
    r.buf = static_cast<std::byte*>(buf);
    r.capacity = capacity;
    if (comm_) progress();
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
        if (matches(r, it->ctx, it->source, it->tag)) {
            complete_recv(r, *it);
            unexpected_.erase(it);
            return h;
        }
    }
    if (source != MPI_ANY_SOURCE && (c.p2p == world_p2p || c.p2p == world_coll)) {
        if (auto lost = lost_.find(source); lost != lost_.end()) {
            r.status.MPI_SOURCE = source;
            r.status.MPI_TAG = tag;
            r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
            r.complete = true;
            return h;
        }
    }
    posted_.push_back(&r);
    return h;
}

void Engine::deliver(Incoming&& m) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
        if (matches(**it, m.ctx, m.source, m.tag)) {
            Request& r = **it;
            posted_.erase(it);
            complete_recv(r, m);
            if (r.freed) release(handle_of(r));
            return;
        }
    }
    if (m.buffer && unexpected_.size() >= max_views) { // copy, returning comm's buffer
        m.copy.assign(m.data(), m.data() + m.size());
        m.buffer.reset();
        m.offset = 0;
    }
    unexpected_.push_back(std::move(m));
}

// ----------------------------------------------------------------------- progress

void Engine::post_pump() {
    while (true) {
        auto posted = comm_->post_recv(comm::any_source, comm::any_tag);
        if (!posted.done) {
            pump_ = posted.id;
            pump_posted_ = true;
            return;
        }
        handle(std::move(*posted.done));
    }
}

void Engine::lose(int rank, const std::string& reason) {
    lost_[rank] = reason;
    for (auto it = posted_.begin(); it != posted_.end();) {
        Request& r = **it;
        if ((r.ctx == world_p2p || r.ctx == world_coll) && r.peer == rank) {
            r.status.MPI_SOURCE = rank;
            r.status.MPI_TAG = r.tag;
            r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
            r.complete = true;
            it = posted_.erase(it);
            if (r.freed) release(handle_of(r));
        } else {
            ++it;
        }
    }
    for (auto& slot : table_) { // synchronous sends waiting for its answer
        Request& r = *slot;
        if (r.live && r.is_send && !r.complete && r.wants_ack && r.peer == rank && !r.comm_pending) {
            r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
            r.complete = true;
        }
    }
}

void Engine::handle(comm::Completion&& c) {
    if (auto s = sentinels_.find(c.id); s != sentinels_.end()) {
        const int rank = s->second;
        sentinels_.erase(s);
        if (c.status == comm::Status::peer_lost) lose(rank, c.error);
        return;
    }
    if (c.status != comm::Status::success) return;
    const auto rank = rank_of_.find(c.source);
    if (rank == rank_of_.end()) return;
    const int ctx = (c.tag >> tag_bits) & 7;
    const int tag = c.tag & tag_mask;
    if (ctx == ssend_ack) {
        acks_.emplace(rank->second, static_cast<std::uint32_t>(tag));
        for (auto& slot : table_) {
            Request& r = *slot;
            if (r.live && r.is_send && r.wants_ack && !r.complete && !r.comm_pending && r.peer == rank->second &&
                r.ack_seq == static_cast<std::uint32_t>(tag)) {
                r.complete = true;
                acks_.erase({rank->second, r.ack_seq});
                break;
            }
        }
        return;
    }
    Incoming m;
    m.ctx = ctx;
    m.source = rank->second;
    m.tag = tag;
    m.buffer = std::move(c.buffer);
    if (ctx == world_sync) {
        if (!m.buffer || m.buffer->size() < sizeof m.seq || m.buffer->single() == nullptr) {
            std::cerr << "msgpass-mpi: rank " << rank_ << ": dropped a synchronous message from rank " << m.source
                      << " without its sequence\n";
            return;
        }
        std::memcpy(&m.seq, m.buffer->single()->data(), sizeof m.seq);
        m.offset = sizeof m.seq;
        m.sync = true;
        m.ctx = world_p2p;
    } else if (ctx != world_p2p && ctx != world_coll) {
        std::cerr << "msgpass-mpi: rank " << rank_ << ": dropped a message from rank " << m.source
                  << " with unknown context " << ctx << "\n";
        return;
    }
    if (m.buffer && m.buffer->single() == nullptr) { // not contiguous: copy it
        m.copy.resize(m.buffer->size());
        m.buffer->copy_to(m.copy);
        m.copy.erase(m.copy.begin(), m.copy.begin() + static_cast<std::ptrdiff_t>(m.offset));
        m.buffer.reset();
        m.offset = 0;
    }
    deliver(std::move(m));
}

void Engine::send_completed(comm::Completion& done) {
    for (auto it = sending_.begin(); it != sending_.end(); ++it) {
        if (request(*it).comm_id != done.id) continue;
        Request& r = request(*it);
        r.comm_pending = false;
        if (done.status == comm::Status::peer_lost) {
            r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
            r.complete = true;
        } else if (!r.wants_ack || acks_.erase({r.peer, r.ack_seq}) != 0) { // (an answer may come before)
            r.complete = true;
        }
        if (r.complete && r.freed) release(*it);
        sending_.erase(it);
        return;
    }
}

void Engine::progress() {
    step_schedules();
    if (!comm_ || leader_) return; // the leader takes what comes (block_once)
    try {
        if (!sending_.empty()) {
            std::vector<comm::RequestId> ids;
            for (MPI_Request h : sending_)
                ids.push_back(request(h).comm_id);
            for (auto& done : comm_->test_some(ids))
                send_completed(done);
        }
        for (int i = 0; i < 256 && pump_posted_; ++i) {
            auto done = comm_->test(pump_);
            if (!done) break;
            pump_posted_ = false;
            handle(std::move(*done));
            post_pump();
        }
        if (++progress_calls_ % 16 == 0 && !sentinels_.empty()) {
            std::vector<comm::RequestId> ids;
            for (const auto& [id, _] : sentinels_)
                ids.push_back(id);
            for (auto& done : comm_->test_some(ids))
                handle(std::move(done));
        }
    } catch (const PeerLost&) {
        throw;
    } catch (const Error& e) { // a malformed message: comm dropped it, the rest goes on
        std::cerr << "msgpass-mpi: rank " << rank_ << ": " << e.what() << "\n";
    }
    step_schedules();
}

void Engine::block_once() {
    if (!comm_) return;
    if (lock_ != nullptr && leader_) { // another thread waits in comm: wait for its turn to end
        turn_.wait_for(*lock_, slice);
        return;
    }
    std::vector<comm::RequestId> ids;
    if (pump_posted_) ids.push_back(pump_);
    for (const auto& [id, _] : sentinels_)
        ids.push_back(id);
    // A collective's send that completes may let its next round start: it wakes the
    // wait too (a send a program waits for is in sending_ as well).
    for (MPI_Request h : sending_)
        ids.push_back(request(h).comm_id);
    if (ids.empty()) return;
    try {
        std::vector<comm::Completion> completions;
        if (lock_ != nullptr) {
            // The others may post (comm is thread-safe) but take nothing from comm
            // meanwhile (progress), so that no id waited for here is collected by them.
            leader_ = true;
            lock_->unlock();
            try {
                completions = comm_->wait_some(ids, slice);
            } catch (...) {
                lock_->lock();
                leader_ = false;
                turn_.notify_all();
                throw;
            }
            lock_->lock();
            leader_ = false;
            turn_.notify_all();
        } else {
            completions = comm_->wait_some(ids, slice);
        }
        for (auto& done : completions) {
            if (pump_posted_ && done.id == pump_) {
                pump_posted_ = false;
                handle(std::move(done));
                post_pump();
            } else if (sentinels_.count(done.id) != 0) {
                handle(std::move(done));
            } else {
                send_completed(done);
            }
        }
    } catch (const PeerLost&) {
        throw;
    } catch (const Error& e) {
        std::cerr << "msgpass-mpi: rank " << rank_ << ": " << e.what() << "\n";
    }
}

// A receive that only this thread could satisfy (from itself, or on MPI_COMM_SELF, or
// in a world of one) and did not find its message would wait forever: an error.
void Engine::check_can_arrive(const Request& r) const {
    if (r.complete || r.is_send || r.schedule || lock_ != nullptr) return; // (another thread may send it)
    const bool only_self =
        r.ctx == self_p2p || r.ctx == self_coll || world_size() == 1 || (r.peer == rank_ && r.peer != MPI_ANY_SOURCE);
    if (only_self)
        throw MpiError(MPI_ERR_OTHER, "a receive from this rank itself (source " + std::to_string(r.peer) + ", tag " +
                                          std::to_string(r.tag) + ") with no matching message would wait forever");
}

template <class Done>
void Engine::wait_until(Done done, const std::vector<const Request*>& waiting) {
    progress();
    while (!done()) {
        for (const Request* r : waiting)
            check_can_arrive(*r);
        block_once();
        progress();
    }
}

// ----------------------------------------------------------------------- completion

namespace {

void fill(MPI_Status* status, const Request& r) {
    if (status != MPI_STATUS_IGNORE) *status = r.status;
}

} // namespace

int Engine::wait(MPI_Request* handle, MPI_Status* status) {
    if (*handle == MPI_REQUEST_NULL) {
        if (status != MPI_STATUS_IGNORE) *status = MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0};
        return MPI_SUCCESS;
    }
    Request& r = request(*handle);
    wait_until([&] { return r.complete; }, {&r});
    fill(status, r);
    const int error = r.status.MPI_ERROR;
    release(*handle);
    *handle = MPI_REQUEST_NULL;
    return error;
}

bool Engine::test(MPI_Request* handle, MPI_Status* status, int* error) {
    *error = MPI_SUCCESS;
    if (*handle == MPI_REQUEST_NULL) {
        if (status != MPI_STATUS_IGNORE) *status = MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0};
        return true;
    }
    Request& r = request(*handle);
    if (!r.complete) progress();
    if (!r.complete) return false;
    fill(status, r);
    *error = r.status.MPI_ERROR;
    release(*handle);
    *handle = MPI_REQUEST_NULL;
    return true;
}

bool Engine::is_complete(MPI_Request handle) {
    return handle == MPI_REQUEST_NULL || request(handle).complete;
}

int Engine::wait_any(int count, MPI_Request* requests) {
    std::vector<const Request*> waiting;
    for (int i = 0; i < count; ++i)
        if (requests[i] != MPI_REQUEST_NULL) waiting.push_back(&request(requests[i]));
    if (waiting.empty()) return MPI_UNDEFINED;
    int index = MPI_UNDEFINED;
    auto any = [&] {
        for (int i = 0; i < count; ++i) {
            if (requests[i] != MPI_REQUEST_NULL && request(requests[i]).complete) {
                index = i;
                return true;
            }
        }
        return false;
    };
    // Waiting for any: only when every one could not arrive is it an error.
    progress();
    while (!any()) {
        bool some_can_arrive = false;
        for (const Request* r : waiting) {
            try {
                check_can_arrive(*r);
                some_can_arrive = true;
            } catch (const MpiError&) {
            }
        }
        if (!some_can_arrive) check_can_arrive(*waiting.front());
        block_once();
        progress();
    }
    return index;
}

void Engine::free_request(MPI_Request* handle) {
    Request& r = request(*handle);
    if (r.schedule && !r.complete) {
        r.freed = true; // released when its schedule completes
    } else if (r.complete) {
        release(*handle);
    } else {
        // A pending send is released by progress when comm accepted it; a posted
        // receive stays posted and still takes the message it matches (MPI 3.1, 3.7.3),
        // released then.
        r.freed = true;
    }
    *handle = MPI_REQUEST_NULL;
}

bool Engine::cancel(MPI_Request handle) {
    Request& r = request(handle);
    if (r.schedule) throw MpiError(MPI_ERR_REQUEST, "a non-blocking collective cannot be cancelled (MPI 3.1, 5.12)");
    if (r.is_send) {
        if (r.complete) return false;
        throw MpiError(MPI_ERR_UNSUPPORTED_OPERATION,
                       "cancelling a send is not provided (its message may already be with the receiver)");
    }
    if (r.complete) return false;
    posted_.remove(&r);
    r.status.msgpass_cancelled = 1;
    r.status.MPI_SOURCE = MPI_ANY_SOURCE;
    r.status.MPI_TAG = MPI_ANY_TAG;
    r.status.msgpass_bytes = 0;
    r.complete = true;
    return true;
}

// ----------------------------------------------------------------------- probe

bool Engine::iprobe(const CommInfo& c, int source, int tag, MPI_Status* status) {
    progress();
    const Incoming* m = find_unexpected(c.p2p, source, tag);
    if (m == nullptr) return false;
    if (status != MPI_STATUS_IGNORE) *status = MPI_Status{m->source, m->tag, MPI_SUCCESS, 0, m->size()};
    return true;
}

void Engine::probe(const CommInfo& c, int source, int tag, MPI_Status* status) {
    Request wanted; // not in the table: describes what is waited for
    wanted.ctx = c.p2p;
    wanted.peer = source;
    wanted.tag = tag;
    progress();
    while (find_unexpected(c.p2p, source, tag) == nullptr) {
        if (source != MPI_ANY_SOURCE && c.p2p == world_p2p && lost_.count(source) != 0)
            throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(source) + " was lost: " + lost_[source]);
        check_can_arrive(wanted);
        block_once();
        progress();
    }
    (void)iprobe(c, source, tag, status);
}

// ----------------------------------------------------------------------- collectives' transfers

void Engine::send_bytes(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes) {
    CommInfo coll = c;
    coll.p2p = c.coll;
    MPI_Request h = isend(coll, dest, tag, buf, bytes, false);
    if (const int error = wait(&h, MPI_STATUS_IGNORE); error != MPI_SUCCESS)
        throw MpiError(error, "collective: send to rank " + std::to_string(dest) + " failed");
}

std::size_t Engine::recv_bytes(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity) {
    CommInfo coll = c;
    coll.p2p = c.coll;
    MPI_Request h = irecv(coll, source, tag, buf, capacity);
    MPI_Status status{};
    const int error = wait(&h, &status);
    if (error == MPI_ERR_TRUNCATE)
        throw MpiError(error, "collective: rank " + std::to_string(source) +
                                  " sent more than this rank expects (the ranks' counts or types differ)");
    if (error != MPI_SUCCESS)
        throw MpiError(error, "collective: receive from rank " + std::to_string(source) + " failed");
    return status.msgpass_bytes;
}

// ----------------------------------------------------------------------- schedules

std::byte* Schedule::alloc(std::size_t bytes) {
    scratch.push_back(std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(bytes, 1)));
    return scratch.back().get();
}

Round& Schedule::last() {
    if (rounds.empty()) next_round();
    return rounds.back();
}

void Schedule::send(int peer, const void* buf, std::size_t bytes) {
    last().transfers.push_back(Transfer{true, peer, static_cast<std::byte*>(const_cast<void*>(buf)), bytes});
}

void Schedule::recv(int peer, void* buf, std::size_t bytes) {
    last().transfers.push_back(Transfer{false, peer, static_cast<std::byte*>(buf), bytes});
}

void Schedule::copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes == 0 || dst == src) return;
    LocalOp op;
    op.dst = static_cast<std::byte*>(dst);
    op.src = static_cast<const std::byte*>(src);
    op.bytes = bytes;
    last().locals.push_back(op);
}

void Schedule::reduce(void* inout, const void* in, int count, MPI_Datatype type, MPI_Op op) {
    if (count == 0) return;
    LocalOp l;
    l.reduce = true;
    l.dst = static_cast<std::byte*>(inout);
    l.src = static_cast<const std::byte*>(in);
    l.count = count;
    l.type = type;
    l.op = op;
    last().locals.push_back(l);
}

MPI_Request Engine::start(std::unique_ptr<Schedule> schedule) {
    // Every rank numbers the collectives of a communicator alike (MPI: all call them
    // in the same order), so concurrent ones never take each other's messages. Tags
    // from 2^27 up: the blocking collectives of collectives.cpp use small ones.
    std::uint32_t& seq = schedule->comm.coll == self_coll ? self_coll_seq_ : world_coll_seq_;
    schedule->tag = (1 << 27) | static_cast<int>(seq++ & ((1U << 27) - 1));
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.schedule = std::move(schedule);
    r.status.MPI_SOURCE = MPI_ANY_SOURCE;
    r.status.MPI_TAG = MPI_ANY_TAG;
    active_.push_back(h);
    step_schedules();
    return h;
}

void Engine::run(std::unique_ptr<Schedule> schedule) {
    MPI_Request h = start(std::move(schedule));
    Request& r = request(h);
    wait_until([&] { return r.complete; }, {&r});
    const int error = r.status.MPI_ERROR;
    std::string text = r.schedule ? r.schedule->error_text : std::string();
    release(h);
    if (error != MPI_SUCCESS) throw MpiError(error, text);
}

void Engine::post_transfer(Schedule& s, const Transfer& t) {
    CommInfo coll = s.comm;
    coll.p2p = s.comm.coll;
    try {
        const MPI_Request h =
            t.send ? isend(coll, t.peer, s.tag, t.buf, t.bytes, false) : irecv(coll, t.peer, s.tag, t.buf, t.bytes);
        s.pending.emplace_back(h, t);
    } catch (const MpiError& e) {
        if (s.error == MPI_SUCCESS) {
            s.error = e.code();
            s.error_text = e.what();
        }
    }
}

// Runs the rounds of r's schedule as far as their transfers allow.
void Engine::step(Request& r) {
    Schedule& s = *r.schedule;
    while (!r.complete) {
        for (const auto& [h, t] : s.pending)
            if (!request(h).complete) return;
        for (const auto& [h, t] : s.pending) {
            const MPI_Status& st = request(h).status;
            if (s.error == MPI_SUCCESS && st.MPI_ERROR != MPI_SUCCESS) {
                s.error = st.MPI_ERROR;
                s.error_text = (t.send ? "send to rank " : "receive from rank ") + std::to_string(t.peer) +
                               (st.MPI_ERROR == MPI_ERR_TRUNCATE ? " brought more than " + std::to_string(t.bytes) +
                                                                       " bytes (the ranks' counts or types differ)"
                                                                 : " failed");
            } else if (s.error == MPI_SUCCESS && !t.send && st.msgpass_bytes != t.bytes) {
                s.error = MPI_ERR_TRUNCATE;
                s.error_text = "rank " + std::to_string(t.peer) + " sent " + std::to_string(st.msgpass_bytes) +
                               " bytes where " + std::to_string(t.bytes) +
                               " were expected (the ranks' counts or types differ)";
            }
            release(h);
        }
        s.pending.clear();
        if (s.error != MPI_SUCCESS || s.next == s.rounds.size()) {
            r.status.MPI_ERROR = s.error;
            r.complete = true;
            return;
        }
        const Round& round = s.rounds[s.next++];
        for (const LocalOp& l : round.locals) {
            if (l.reduce)
                combine(l.type, l.op, l.dst, l.src, l.count);
            else
                std::memmove(l.dst, l.src, l.bytes);
        }
        for (const Transfer& t : round.transfers)
            post_transfer(s, t);
    }
}

void Engine::step_schedules() {
    if (stepping_ || active_.empty()) return;
    stepping_ = true;
    struct Reset {
        bool& flag;
        ~Reset() { flag = false; }
    } reset{stepping_};
    for (std::size_t i = 0; i < active_.size();) {
        const MPI_Request h = active_[i];
        Request& r = request(h);
        step(r);
        if (r.complete) {
            active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
            if (r.freed) release(h);
        } else {
            ++i;
        }
    }
}

// ----------------------------------------------------------------------- finalize

void Engine::finalize() {
    if (!comm_) return;
    barrier(*this, info(MPI_COMM_WORLD));
    for (const auto& [id, _] : sentinels_)
        if (comm_->cancel(id)) (void)comm_->test(id);
    sentinels_.clear();
    if (pump_posted_) {
        (void)comm_->cancel(pump_);
        (void)comm_->test(pump_); // cancelled, or a message nobody will receive
    }
    pump_posted_ = false;
    const bool flushed = comm_->flush(finalize_flush);
    if (!flushed)
        std::cerr << "msgpass-mpi: rank " << rank_ << ": MPI_Finalize: messages were still not handed to their "
                  << "peers after 30 s\n";
    comm_.reset();
    factory_.reset();
}

} // namespace msgpass::mpi
