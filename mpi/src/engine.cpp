// The engine of msgpass's MPI: ranks, requests and progress over
// comm::Communicator, which does the matching (engine.hpp, docs/mpi.md).
#include "engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

namespace msgpass::mpi {

namespace {

using namespace std::chrono_literals;

// How long one blocking wait in comm lasts before the engine looks again.
constexpr auto slice = 10ms;
// How long MPI_Finalize waits for the last messages to be handed to their peers.
constexpr auto finalize_flush = 30s;

bool any_launcher_variable() {
    for (const char* name : {"MSGPASS_NODE_ID", "MSGPASS_NODES", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
        const char* value = std::getenv(name);
        if (value != nullptr && *value != '\0') return true;
    }
    return false;
}

comm::Context context(int id) {
    return comm::Context{static_cast<std::uint16_t>(id)};
}

// A world of one process started without a launcher (a singleton): no technology,
// no peer; its communicator carries the messages a rank sends to itself alone.
class NoPeers final : public DynamicGroup {
public:
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    [[nodiscard]] std::vector<NodeId> members() const override { return {}; }
    [[nodiscard]] std::size_t size() const override { return 0; }
    void send(BufferPtr&& buffer) override { buffer.reset(); }
    [[nodiscard]] BufferPtr receive() override { return nullptr; }
    // Nothing ever comes: a short nap, so that a waiting loop does not spin (another
    // thread's message to itself completes the wait when it looks again).
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override {
        std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(timeout, 1ms));
        return nullptr;
    }
    void add(NodePtr) override { throw UsageError("mpi: a singleton has no peers"); }
    bool remove(NodeId) override { return false; }

private:
    std::string name_;
};

class SingletonFactory final : public NodeFactory {
public:
    [[nodiscard]] std::string_view technology() const noexcept override { return "singleton"; }
    [[nodiscard]] NodeId self_id() const noexcept override { return 1; }
    NodePtr create_node(NodeId id) override { throw UsageError("mpi: a singleton has no node " + std::to_string(id)); }
    BufferPtr create_buffer(std::size_t size) override { return std::make_unique<HeapBuffer>(size); }
    std::unique_ptr<DynamicGroup> create_group() override { return std::make_unique<NoPeers>(); }
    std::shared_ptr<Group> create_group(const std::string& name) override {
        throw UsageError("mpi: a singleton has no group " + name);
    }
    bool flush(std::chrono::nanoseconds) override { return true; }
};

} // namespace

int CommInfo::rank_of_world(int w) const {
    if (!world) return w;
    const auto it = std::find(world->begin(), world->end(), w);
    return it == world->end() ? -1 : static_cast<int>(it - world->begin());
}

Engine::Engine(const char* program) {
    if (!any_launcher_variable()) { // a singleton: MPI_COMM_WORLD is this process alone
        factory_ = std::make_unique<SingletonFactory>();
        nodes_.push_back(factory_->self_id());
        rank_of_[factory_->self_id()] = 0;
        comm_ = std::make_unique<comm::Communicator>(*factory_, std::vector<NodeId>{});
        self_world_ = std::make_shared<const std::vector<int>>(1, 0);
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
    self_world_ = std::make_shared<const std::vector<int>>(1, rank_);
    factory_ = NodeFactory::create(options);
    comm::Limits limits;
    limits.single_copy = options.configuration.section<config::CommOptions>().single_copy;
    eager_limit_ = limits.eager_limit;
    comm_ = std::make_unique<comm::Communicator>(*factory_, options.configuration, limits);
    for (NodeId peer : comm_->peers()) {
        auto posted = comm_->post_recv(context(sentinel_context), peer, 0);
        if (posted.done) {
            lose(rank_of_.at(peer), posted.done->error);
            continue;
        }
        sentinels_[posted.id] = rank_of_.at(peer);
    }
}

Engine::~Engine() = default;

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

void Engine::release(MPI_Request handle) {
    auto& r = *table_[static_cast<std::size_t>(handle) - 1];
    r.live = false;
    r.schedule.reset();
    r.world.reset();
    r.staging = {};
    r.unpack = nullptr;
    r.restart = nullptr;
    r.inner = MPI_REQUEST_NULL;
    r.matched = false;
    r.received = false;
    r.limit = SIZE_MAX;
    free_.push_back(handle);
}

// ----------------------------------------------------------------------- sends and receives

MPI_Request Engine::isend(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes, bool sync,
                          std::vector<std::byte> staging, bool in_place) {
    let_go();
    if (auto lost = lost_.find(c.world_rank(dest)); lost != lost_.end())
        throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + lost->second);
    const std::span<const std::byte> data(static_cast<const std::byte*>(buf), bytes);
    const NodeId node = node_of(c, dest);
    const bool kept = in_place && staging.empty();
    const comm::Posted posted = kept ? (sync ? comm_->post_ssend_in_place(context(c.p2p), node, tag, data)
                                             : comm_->post_send_in_place(context(c.p2p), node, tag, data))
                                     : (sync ? comm_->post_ssend(context(c.p2p), node, tag, data)
                                             : comm_->post_send(context(c.p2p), node, tag, data));
    if (posted.done && posted.done->status == comm::Status::peer_lost)
        throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + posted.done->error);
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.is_send = true;
    r.staging = std::move(staging);
    r.sync_to_self = sync && c.world_rank(dest) == rank_;
    r.peer = dest;
    r.tag = tag;
    r.size = c.size;
    r.rank = c.rank;
    r.status.MPI_SOURCE = dest;
    r.status.MPI_TAG = tag;
    r.status.msgpass_bytes = bytes;
    if (posted.done) {
        r.complete = true;
    } else {
        r.comm_id = posted.id;
        inflight_.emplace(posted.id, h);
    }
    return h;
}

void Engine::send_now(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes, int in) {
    if (auto lost = lost_.find(c.world_rank(dest)); lost != lost_.end())
        throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + lost->second);
    try {
        comm_->send(context(in), node_of(c, dest), tag,
                    std::span<const std::byte>(static_cast<const std::byte*>(buf), bytes));
        let_go(); // after the message went (held_)
    } catch (const PeerLost& e) {
        throw MpiError(MPI_ERR_PROC_FAILED, "rank " + std::to_string(dest) + " was lost: " + e.what());
    }
}

MPI_Request Engine::irecv(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity,
                          std::vector<std::byte> staging, std::function<void(std::size_t)> unpack, bool in_place) {
    let_go();
    const NodeId node = source == MPI_ANY_SOURCE ? comm::any_source : node_of(c, source);
    const std::span<std::byte> into(static_cast<std::byte*>(buf), capacity);
    const comm::Posted posted = in_place && staging.empty() && !unpack
                                    ? comm_->post_recv_in_place(context(c.p2p), node, tag, into)
                                    : comm_->post_recv(context(c.p2p), node, tag, into);
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.peer = source;
    r.tag = tag;
    r.size = c.local ? 0 : c.size; // (an intercommunicator's peers are never this rank)
    r.rank = c.local ? -1 : c.rank;
    r.world = c.world;
    r.staging = std::move(staging);
    r.unpack = std::move(unpack);
    if (posted.done) {
        complete(r, *posted.done);
    } else {
        r.comm_id = posted.id;
        inflight_.emplace(posted.id, h);
    }
    return h;
}

int Engine::recv_now(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity, MPI_Status& status,
                     int in) {
    let_go();
    const NodeId node = source == MPI_ANY_SOURCE ? comm::any_source : node_of(c, source);
    const std::span<std::byte> into(static_cast<std::byte*>(buf), capacity);
    std::optional<comm::Envelope> m;
    try {
        // Only this rank could send it: a look without waiting, then "would wait
        // forever" (a message to itself is never a rendezvous, which a look without
        // waiting could not complete).
        if (!c.local && (c.size == 1 || source == c.rank)) {
            m = comm_->recv_into(context(in), node, tag, into, &held_, std::chrono::nanoseconds::zero());
            if (!m) {
                Request wanted;
                wanted.peer = source;
                wanted.tag = tag;
                wanted.size = c.size;
                wanted.rank = c.rank;
                check_can_arrive(wanted);
            }
        }
        if (!m) m = comm_->recv_into(context(in), node, tag, into, &held_);
    } catch (const PeerLost&) {
        status = MPI_Status{source, tag, MPI_ERR_PROC_FAILED, 0, 0};
        return MPI_ERR_PROC_FAILED;
    }
    status.MPI_SOURCE = m->source == nodes_[static_cast<std::size_t>(rank_of_peer_hint_)]
                            ? c.rank_of_world(rank_of_peer_hint_)
                            : c.rank_of_world(world_rank_of(m->source));
    status.MPI_TAG = m->tag;
    status.MPI_ERROR = m->size > capacity ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
    status.msgpass_cancelled = 0;
    status.msgpass_bytes = std::min(m->size, capacity);
    return status.MPI_ERROR;
}

int Engine::world_rank_of(NodeId node) {
    const auto w = rank_of_.find(node);
    if (w == rank_of_.end()) return -1;
    rank_of_peer_hint_ = w->second;
    return w->second;
}

void Engine::complete(Request& r, const comm::Completion& c) {
    r.complete = true;
    r.comm_id = 0;
    if (r.is_send) {
        if (c.status == comm::Status::peer_lost) r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
        if (c.status == comm::Status::cancelled) r.status.msgpass_cancelled = 1;
        return;
    }
    switch (c.status) {
    case comm::Status::success:
    case comm::Status::truncated: {
        const auto w = rank_of_.find(c.source);
        const int world = w == rank_of_.end() ? -1 : w->second;
        r.status.MPI_SOURCE = r.world ? CommInfo{0, 0, 0, 0, r.world, nullptr}.rank_of_world(world) : world;
        r.status.MPI_TAG = c.tag;
        r.status.msgpass_bytes = c.bytes;
        r.status.MPI_ERROR = c.status == comm::Status::truncated ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
        r.received = true;
        if (c.bytes > r.limit) {
            r.status.MPI_ERROR = MPI_ERR_TRUNCATE;
            r.status.msgpass_bytes = r.limit;
        }
        if (r.unpack) r.unpack(std::min<std::size_t>(r.status.msgpass_bytes, r.staging.size()));
        return;
    }
    case comm::Status::peer_lost:
        r.status.MPI_SOURCE = r.peer;
        r.status.MPI_TAG = r.tag;
        r.status.MPI_ERROR = MPI_ERR_PROC_FAILED;
        return;
    case comm::Status::cancelled:
        r.status.msgpass_cancelled = 1;
        r.status.MPI_SOURCE = MPI_ANY_SOURCE;
        r.status.MPI_TAG = MPI_ANY_TAG;
        r.status.msgpass_bytes = 0;
        return;
    }
}

// ----------------------------------------------------------------------- progress

void Engine::lose(int rank, const std::string& reason) {
    // comm fails the receives naming it and the sends waiting for it; the engine
    // refuses new sends to it.
    lost_[rank] = reason;
}

void Engine::handle(comm::Completion&& c) {
    if (auto s = sentinels_.find(c.id); s != sentinels_.end()) {
        const int rank = s->second;
        sentinels_.erase(s);
        if (c.status == comm::Status::peer_lost) lose(rank, c.error);
        return;
    }
    const auto it = inflight_.find(c.id);
    if (it == inflight_.end()) return;
    const MPI_Request h = it->second;
    inflight_.erase(it);
    Request& r = *table_[static_cast<std::size_t>(h) - 1];
    complete(r, c);
    if (r.freed && !r.schedule) release(h);
}

void Engine::progress() {
    let_go();
    step_schedules();
    if (!comm_ || leader_) return; // the leader takes what comes (block_once)
    try {
        std::vector<comm::RequestId> ids;
        ids.reserve(inflight_.size() + sentinels_.size());
        for (const auto& [id, _] : inflight_)
            ids.push_back(id);
        if (++progress_calls_ % 16 == 0)
            for (const auto& [id, _] : sentinels_)
                ids.push_back(id);
        if (ids.empty())
            comm_->progress();
        else
            for (auto& done : comm_->test_some(ids))
                handle(std::move(done));
    } catch (const PeerLost&) {
        throw;
    } catch (const Error& e) { // a malformed message: comm dropped it, the rest goes on
        std::cerr << "msgpass-mpi: rank " << rank_ << ": " << e.what() << "\n";
    }
    step_schedules();
}

template <class Wait>
bool Engine::as_leader(Wait&& wait) {
    if (lock_ == nullptr) {
        wait();
        return true;
    }
    if (leader_) { // another thread waits in comm: wait for its turn to end
        turn_.wait_for(*lock_, slice);
        return false;
    }
    // The others may post (comm is thread-safe) but take nothing from comm
    // meanwhile (progress), so that no id waited for here is collected by them.
    leader_ = true;
    lock_->unlock();
    try {
        wait();
    } catch (...) {
        lock_->lock();
        leader_ = false;
        turn_.notify_all();
        throw;
    }
    lock_->lock();
    leader_ = false;
    turn_.notify_all();
    return true;
}

void Engine::block_once() {
    let_go();
    // Nothing to wait for in comm (a single rank, or only generalized requests):
    // under MPI_THREAD_MULTIPLE the thread that will complete what is waited for
    // (MPI_Grequest_complete) needs the big lock, so it is let go for a moment.
    auto let_others_in = [this] {
        if (lock_ == nullptr) return;
        lock_->unlock();
        std::this_thread::yield();
        lock_->lock();
    };
    if (!comm_) {
        let_others_in();
        return;
    }
    std::vector<comm::RequestId> ids;
    ids.reserve(inflight_.size() + sentinels_.size());
    for (const auto& [id, _] : inflight_)
        ids.push_back(id);
    for (const auto& [id, _] : sentinels_)
        ids.push_back(id);
    if (ids.empty()) {
        let_others_in();
        return;
    }
    try {
        std::vector<comm::Completion> completions;
        if (!as_leader([&] { completions = comm_->wait_some(ids, slice); })) return;
        for (auto& done : completions)
            handle(std::move(done));
    } catch (const PeerLost&) {
        throw;
    } catch (const Error& e) {
        std::cerr << "msgpass-mpi: rank " << rank_ << ": " << e.what() << "\n";
    }
}

// A request that only this thread could complete (a receive from itself, or on a
// communicator of one; a synchronous send to itself) and did not complete would
// wait forever: an error.
void Engine::check_can_arrive(const Request& r) const {
    if (r.complete || r.schedule || lock_ != nullptr) return; // (another thread may send it)
    if (r.is_send) {
        if (r.sync_to_self)
            throw MpiError(MPI_ERR_OTHER, "a synchronous send to this rank itself with no matching receive "
                                          "posted would never complete");
        return;
    }
    const bool only_self = r.size == 1 || (r.peer == r.rank && r.peer != MPI_ANY_SOURCE);
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
    give_status(status, r.status);
}

} // namespace

int Engine::wait(MPI_Request* handle, MPI_Status* status) {
    if (is_inactive(*handle)) {
        give_status(status, MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
        return MPI_SUCCESS;
    }
    if (Request& p = request(*handle); p.restart) {
        const int error = wait(&p.inner, status);
        request(*handle).inner = MPI_REQUEST_NULL;
        return error;
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
    if (is_inactive(*handle)) {
        give_status(status, MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
        return true;
    }
    if (Request& p = request(*handle); p.restart) {
        MPI_Request inner = p.inner;
        if (!test(&inner, status, error)) return false;
        request(*handle).inner = MPI_REQUEST_NULL;
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

bool Engine::peek(MPI_Request handle, MPI_Status* status, int* error) {
    *error = MPI_SUCCESS;
    if (is_inactive(handle)) {
        give_status(status, MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
        return true;
    }
    if (const Request& p = request(handle); p.restart) return peek(p.inner, status, error);
    const Request& r = request(handle);
    if (!r.complete) progress();
    if (!r.complete) return false;
    fill(status, r);
    *error = r.status.MPI_ERROR;
    return true;
}

bool Engine::is_complete(MPI_Request handle) {
    if (is_inactive(handle)) return true;
    const Request& r = request(handle);
    return r.restart ? request(r.inner).complete : r.complete;
}

bool Engine::is_inactive(MPI_Request handle) {
    if (handle == MPI_REQUEST_NULL) return true;
    const Request& r = request(handle);
    return r.restart && r.inner == MPI_REQUEST_NULL;
}

MPI_Request Engine::persistent(std::function<MPI_Request()> restart) {
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.restart = std::move(restart);
    r.complete = true;
    return h;
}

void Engine::start_persistent(MPI_Request handle) {
    Request& r = request(handle);
    if (!r.restart) throw MpiError(MPI_ERR_REQUEST, "request " + std::to_string(handle) + " is not persistent");
    if (r.inner != MPI_REQUEST_NULL)
        throw MpiError(MPI_ERR_REQUEST, "request " + std::to_string(handle) + " is active already");
    const MPI_Request inner = r.restart(); // (may grow the table: r is kept by pointer)
    request(handle).inner = inner;
}

MPI_Request Engine::completed_proc_null() {
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.complete = true;
    r.peer = MPI_PROC_NULL;
    r.status = MPI_Status{MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS, 0, 0};
    return h;
}

MPI_Request Engine::completed_send(int dest, int tag, std::size_t bytes) {
    const MPI_Request h = new_request();
    Request& r = request(h);
    r.is_send = true;
    r.complete = true;
    r.peer = dest;
    r.tag = tag;
    r.status.MPI_SOURCE = dest;
    r.status.MPI_TAG = tag;
    r.status.msgpass_bytes = bytes;
    return h;
}

int Engine::wait_any(int count, MPI_Request* requests) {
    std::vector<const Request*> waiting;
    // A persistent request waits as the operation it started.
    auto target = [&](MPI_Request h) -> const Request& {
        const Request& r = request(h);
        return r.restart ? request(r.inner) : r;
    };
    for (int i = 0; i < count; ++i)
        if (!is_inactive(requests[i])) waiting.push_back(&target(requests[i]));
    if (waiting.empty()) return MPI_UNDEFINED;
    int index = MPI_UNDEFINED;
    auto any = [&] {
        for (int i = 0; i < count; ++i) {
            if (!is_inactive(requests[i]) && target(requests[i]).complete) {
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
    if (Request& p = request(*handle); p.restart) { // an active one's operation goes on alone
        if (p.inner != MPI_REQUEST_NULL) free_request(&p.inner);
        release(*handle);
        *handle = MPI_REQUEST_NULL;
        return;
    }
    Request& r = request(*handle);
    if (r.complete) {
        release(*handle);
    } else {
        // Released when it completes: a freed send is still delivered, and a freed
        // posted receive still takes the message it matches (MPI 3.1, 3.7.3).
        r.freed = true;
    }
    *handle = MPI_REQUEST_NULL;
}

bool Engine::cancel(MPI_Request handle) {
    let_go();
    if (const Request& p = request(handle); p.restart) return p.inner != MPI_REQUEST_NULL && cancel(p.inner);
    Request& r = request(handle);
    if (r.schedule && r.schedule->cancel) {
        r.schedule->cancel(r.complete);
        return false;
    }
    if (r.schedule) throw MpiError(MPI_ERR_REQUEST, "a non-blocking collective cannot be cancelled (MPI 3.1, 5.12)");
    if (r.is_send) {
        // A send the communicator still holds (announced, not yet taken: a large or a
        // synchronous one) is withdrawn and completes cancelled, unless a receive took
        // it first; any other completes as sent (MPI_Test_cancelled says which).
        if (r.complete || r.comm_id == 0 || !comm_->cancel(r.comm_id)) return false;
        const comm::RequestId id = r.comm_id;
        if (auto done = comm_->test(id)) this->handle(std::move(*done));
        return true;
    }
    if (r.complete || !comm_->cancel(r.comm_id)) return false; // taken already: it completes with its message
    const comm::RequestId id = r.comm_id;
    if (auto done = comm_->test(id)) this->handle(std::move(*done));
    return true;
}

// ----------------------------------------------------------------------- probe

bool Engine::iprobe(const CommInfo& c, int source, int tag, MPI_Status* status) {
    let_go();
    step_schedules();
    const NodeId node = source == MPI_ANY_SOURCE ? comm::any_source : node_of(c, source);
    const auto found = comm_->iprobe(context(c.p2p), node, tag);
    step_schedules();
    if (!found) return false;
    if (status != MPI_STATUS_IGNORE) {
        const auto w = rank_of_.find(found->source);
        const int rank = c.rank_of_world(w == rank_of_.end() ? -1 : w->second);
        give_status(status, MPI_Status{rank, found->tag, MPI_SUCCESS, 0, found->size});
    }
    return true;
}

bool Engine::improbe(const CommInfo& c, int source, int tag, MPI_Request* message, MPI_Status* status) {
    MPI_Status found{};
    if (!iprobe(c, source, tag, &found)) return false;
    // The earliest message of (its source, its tag) is the one probed: a receive of
    // exactly them takes it (comm matches in order), and nothing else can any more.
    std::vector<std::byte> into(found.msgpass_bytes);
    std::byte* at = into.data();
    const MPI_Request h = irecv(c, found.MPI_SOURCE, found.MPI_TAG, at, found.msgpass_bytes, std::move(into));
    request(h).matched = true;
    *message = h;
    give_status(status, found);
    return true;
}

void Engine::mprobe(const CommInfo& c, int source, int tag, MPI_Request* message, MPI_Status* status) {
    // Probe until it is there; in this thread (under the big lock with
    // MPI_THREAD_MULTIPLE) nothing takes it between the probe and the receive.
    while (true) {
        probe(c, source, tag, MPI_STATUS_IGNORE);
        if (improbe(c, source, tag, message, status)) return;
    }
}

MPI_Request Engine::receive_matched(MPI_Request message, std::size_t capacity,
                                    std::function<void(const std::byte*, std::size_t)> unpack) {
    Request& r = request(message);
    if (!r.matched) throw MpiError(MPI_ERR_REQUEST, "message " + std::to_string(message) + " is not a matched message");
    r.matched = false;
    r.limit = capacity;
    if (!r.received) {
        const std::byte* at = r.staging.data();
        r.unpack = [at, unpack = std::move(unpack)](std::size_t n) { unpack(at, n); };
        return message;
    }
    // It arrived already: as if it arrived now.
    if (r.status.msgpass_bytes > capacity) {
        r.status.MPI_ERROR = MPI_ERR_TRUNCATE;
        r.status.msgpass_bytes = capacity;
    }
    unpack(r.staging.data(), std::min<std::size_t>(r.status.msgpass_bytes, r.staging.size()));
    return message;
}

void Engine::probe(const CommInfo& c, int source, int tag, MPI_Status* status) {
    let_go();
    Request wanted; // not in the table: describes what is waited for
    wanted.peer = source;
    wanted.tag = tag;
    wanted.size = c.local ? 0 : c.size; // (an intercommunicator's peers are never this rank)
    wanted.rank = c.local ? -1 : c.rank;
    const NodeId node = source == MPI_ANY_SOURCE ? comm::any_source : node_of(c, source);
    progress();
    while (!iprobe(c, source, tag, status)) {
        if (source != MPI_ANY_SOURCE && lost_.count(c.world_rank(source)) != 0)
            throw MpiError(MPI_ERR_PROC_FAILED,
                           "rank " + std::to_string(source) + " was lost: " + lost_[c.world_rank(source)]);
        check_can_arrive(wanted);
        // Waits in comm for the message itself (a wait for requests would not wake
        // when it comes); the schedules move when it returns.
        (void)as_leader([&] { (void)comm_->probe(context(c.p2p), node, tag, slice); });
        progress();
    }
}

// ----------------------------------------------------------------------- collectives' transfers

void Engine::send_bytes(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes) {
    if (can_recv_now() && bytes <= eager_limit_) { // no request (as MPI_Send)
        send_now(c, dest, tag, buf, bytes, c.coll);
        return;
    }
    CommInfo coll = c;
    coll.p2p = c.coll;
    MPI_Request h = isend(coll, dest, tag, buf, bytes, false);
    if (const int error = wait(&h, MPI_STATUS_IGNORE); error != MPI_SUCCESS)
        throw MpiError(error, "collective: send to rank " + std::to_string(dest) + " failed");
}

std::size_t Engine::recv_bytes(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity) {
    MPI_Status status{};
    int error = MPI_SUCCESS;
    if (can_recv_now() && capacity <= eager_limit_) { // no request (as MPI_Recv)
        error = recv_now(c, source, tag, buf, capacity, status, c.coll);
    } else {
        CommInfo coll = c;
        coll.p2p = c.coll;
        MPI_Request h = irecv(coll, source, tag, buf, capacity);
        error = wait(&h, &status);
    }
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

void Schedule::splice(std::unique_ptr<Schedule> part, bool local) {
    for (Round& r : part->rounds) {
        if (local)
            for (Transfer& t : r.transfers)
                t.local = true;
        rounds.push_back(std::move(r));
    }
    for (auto& m : part->scratch)
        scratch.push_back(std::move(m));
    for (auto& f : part->finish)
        finish.push_back(std::move(f));
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

void Schedule::reduce(void* inout, const void* in, int count, MPI_Datatype type, MPI_Op op, bool in_first) {
    if (count == 0) return;
    LocalOp l;
    l.reduce = true;
    l.dst = static_cast<std::byte*>(inout);
    l.src = static_cast<const std::byte*>(in);
    l.in_first = in_first;
    l.op = op;
    // A user operation sees the datatype of the call where the data is laid out as
    // it (a dense type), else the predefined type the data was packed from.
    if (is_user_op(op) && typemap_of(type)->dense) {
        l.count = count;
        l.type = type;
        last().locals.push_back(l);
        return;
    }
    // A derived type as its predefined one, fixed now: the application may free it
    // before the operation completes (the standard allows it).
    const auto [base, n] = predefined_of(type);
    if (static_cast<std::size_t>(count) * n > static_cast<std::size_t>(INT_MAX))
        throw MpiError(MPI_ERR_COUNT, "reduction beyond INT_MAX elements");
    l.count = static_cast<int>(static_cast<std::size_t>(count) * n);
    l.type = base;
    last().locals.push_back(l);
}

int Engine::next_tag(const CommInfo& c) {
    // Every rank numbers the collectives of a communicator alike (MPI: all call them
    // in the same order), so concurrent ones never take each other's messages. Tags
    // from 2^27 up: the blocking collectives of collectives.cpp use small ones.
    std::uint32_t& seq = coll_seq_[c.coll];
    return (1 << 27) | static_cast<int>(seq++ & ((1U << 27) - 1));
}

MPI_Request Engine::start(std::unique_ptr<Schedule> schedule) {
    const int tag = schedule->comm.local && !schedule->inter ? 0 : next_tag(schedule->comm);
    return start_tagged(std::move(schedule), tag);
}

MPI_Request Engine::start_tagged(std::unique_ptr<Schedule> schedule, int tag) {
    if (schedule->comm.local && !schedule->inter)
        throw MpiError(MPI_ERR_COMM, std::string(schedule->name) + " on an intercommunicator is not provided "
                                                                   "(only point to point; MPI_Intercomm_merge)");
    schedule->tag = tag;
    return start_local(std::move(schedule));
}

MPI_Request Engine::start_local(std::unique_ptr<Schedule> schedule) {
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
    if (can_run_now(*schedule)) {
        run_now(*schedule);
        return;
    }
    MPI_Request h = start(std::move(schedule));
    Request& r = request(h);
    wait_until([&] { return r.complete; }, {&r});
    const int error = r.status.MPI_ERROR;
    std::string text = r.schedule ? r.schedule->error_text : std::string();
    release(h);
    if (error != MPI_SUCCESS) throw MpiError(error, text);
}

bool Engine::can_run_now(const Schedule& s) const {
    if (!can_recv_now() || s.comm.local || s.inter || s.more || s.gate || s.query) return false;
    for (const Round& round : s.rounds)
        for (const Transfer& t : round.transfers)
            if (t.local || t.bytes > eager_limit_) return false;
    return true;
}

// The rounds in order, each one's sends first (eager: they never wait for their
// receive, as a posted send does not), then its receives, one at a time. What a
// schedule's requests would report, the same errors; the tag is the one start gives.
void Engine::run_now(Schedule& s) {
    s.tag = next_tag(s.comm);
    const CommInfo& coll = s.comm;
    for (const Round& round : s.rounds) {
        for (const LocalOp& l : round.locals) {
            if (l.reduce)
                combine(l.type, l.op, l.dst, l.src, l.count, l.in_first);
            else
                std::memmove(l.dst, l.src, l.bytes);
        }
        try {
            for (const Transfer& t : round.transfers)
                if (t.send) send_now(coll, t.peer, s.tag, t.buf, t.bytes, coll.coll);
        } catch (const MpiError& e) {
            s.error = e.code();
            s.error_text = e.what();
            break;
        }
        for (const Transfer& t : round.transfers) {
            if (t.send) continue;
            MPI_Status st{};
            const int error = recv_now(coll, t.peer, s.tag, t.buf, t.bytes, st, coll.coll);
            if (error != MPI_SUCCESS) {
                s.error = error;
                s.error_text = "receive from rank " + std::to_string(t.peer) +
                               (error == MPI_ERR_TRUNCATE ? " brought more than " + std::to_string(t.bytes) +
                                                                " bytes (the ranks' counts or types differ)"
                                                          : " failed");
            } else if (st.msgpass_bytes != t.bytes) {
                s.error = MPI_ERR_TRUNCATE;
                s.error_text = "rank " + std::to_string(t.peer) + " sent " + std::to_string(st.msgpass_bytes) +
                               " bytes where " + std::to_string(t.bytes) +
                               " were expected (the ranks' counts or types differ)";
            }
            if (s.error != MPI_SUCCESS) break;
        }
        if (s.error != MPI_SUCCESS) break;
    }
    if (s.error == MPI_SUCCESS)
        for (const auto& f : s.finish)
            f();
    for (const auto& f : s.always)
        f();
    if (s.error != MPI_SUCCESS) throw MpiError(s.error, s.error_text);
}

void Engine::post_transfer(Schedule& s, const Transfer& t) {
    CommInfo coll = t.local ? *s.comm.local : s.comm; // (t.local: an intercommunicator's local group)
    coll.p2p = coll.coll;
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
        if (s.error == MPI_SUCCESS && s.next == s.rounds.size() && s.more) {
            bool again = false;
            try {
                again = s.more(s);
            } catch (const MpiError& e) {
                s.error = e.code();
                s.error_text = e.what();
            }
            if (again) continue;
        }
        if (s.error != MPI_SUCCESS || s.next == s.rounds.size()) {
            if (s.gate && !s.gate()) return;
            if (s.error == MPI_SUCCESS)
                for (const auto& f : s.finish)
                    f();
            if (s.query) {
                const int error = s.query(r.status);
                if (s.error == MPI_SUCCESS) s.error = error;
            }
            for (const auto& f : s.always)
                f();
            r.status.MPI_ERROR = s.error;
            r.complete = true;
            return;
        }
        const Round& round = s.rounds[s.next++];
        for (const LocalOp& l : round.locals) {
            if (l.reduce)
                combine(l.type, l.op, l.dst, l.src, l.count, l.in_first);
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
    let_go();
    if (!comm_) return;
    barrier(*this, info(MPI_COMM_WORLD));
    for (const auto& [id, _] : sentinels_)
        if (comm_->cancel(id)) (void)comm_->test(id);
    sentinels_.clear();
    const bool flushed = comm_->flush(finalize_flush);
    if (!flushed)
        std::cerr << "msgpass-mpi: rank " << rank_ << ": MPI_Finalize: messages were still not handed to their "
                  << "peers after 30 s\n";
    comm_.reset();
    factory_.reset();
}

} // namespace msgpass::mpi
