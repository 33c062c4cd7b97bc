// The engine of msgpass's MPI (docs/mpi.md): one per process, made by MPI_Init. It
// is translation: MPI's matching (communicator context, source, tag, wildcards) is
// comm::Communicator's own, each MPI communicator having two contexts of comm (point
// to point, collectives) carried in the envelope, so that MPI_ANY_TAG never takes a
// collective's message. Receives, probes and sends go straight to comm (a rank's
// messages to itself too); the engine keeps the requests' handles, no queue of
// messages. Progress is made by the calling thread (with MPI_THREAD_MULTIPLE, under
// one lock).
#pragma once

#include <msgpass/comm.hpp>
#include <msgpass/mpi/mpi.h>
#include <msgpass/msgpass.hpp>

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace msgpass::mpi {

// An MPI error class and what went wrong; the C entry points turn it into the code
// (and, with MPI_ERRORS_ARE_FATAL, a message naming the call and the rank, and exit).
class MpiError : public std::runtime_error {
public:
    MpiError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
    [[nodiscard]] int code() const noexcept { return code_; }

private:
    int code_;
};

// Writes a completion's status into the caller's, leaving its MPI_ERROR as the caller
// set it: MPI writes that field only from the completions of several requests that
// return MPI_ERR_IN_STATUS (MPI 4.0 3.2.5), and programs rely on it.
inline void give_status(MPI_Status* to, const MPI_Status& from) {
    if (to == MPI_STATUS_IGNORE) return;
    const int error = to->MPI_ERROR;
    *to = from;
    to->MPI_ERROR = error;
}

// The comm contexts of the predefined communicators; a communicator made at run
// time takes the next free pair (point to point, then collectives), agreed by its
// members. The sentinel context is never sent: a receive per peer is posted in it
// only to learn of the peer's loss.
enum ContextId : int {
    world_p2p = 0,
    world_coll = 1,
    self_p2p = 2,
    self_coll = 3,
    first_free_context = 4,
    sentinel_context = 0xffff,
};

// What a communicator handle stands for.
struct CommInfo {
    int size = 1;
    int rank = 0;
    int p2p = world_p2p;
    int coll = world_coll;
    // The world rank of each rank; null: the identity (MPI_COMM_WORLD).
    std::shared_ptr<const std::vector<int>> world;
    // An intercommunicator: ranks (size, world) are the remote group's, rank is this
    // one's in the local group, local the local group as a communicator of its own
    // (contexts of the intercommunicator's, for what its members agree among them).
    std::shared_ptr<const CommInfo> local;
    [[nodiscard]] int world_rank(int r) const { return world ? (*world)[static_cast<std::size_t>(r)] : r; }
    // The rank of world rank w here, or -1 when it is not a member.
    [[nodiscard]] int rank_of_world(int w) const;
};

// A collective as a schedule of rounds (docs/mpi.md, *How it works*): a
// round's local actions (copies, reductions) run first, then its transfers are
// posted; the next round starts when every transfer of this one completed. Blocking
// and non-blocking collectives alike are built as one and progressed by the engine.
struct LocalOp {
    bool reduce = false;      // false: copy bytes from src to dst
    std::byte* dst = nullptr; // reduce: inout = inout op in
    const std::byte* src = nullptr;
    std::size_t bytes = 0;
    int count = 0;
    MPI_Datatype type = 0;
    MPI_Op op = 0;
    bool in_first = false; // reduce: inout = in op inout (in holds lower ranks' data)
};

struct Transfer {
    bool send = false;
    int peer = 0; // a rank of the communicator, never this rank itself
    std::byte* buf = nullptr;
    std::size_t bytes = 0; // a receive expects exactly this many
    // An intercommunicator's schedule: peer is a rank of the local group (comm.local),
    // not of the remote one; the transfer travels in the local group's context.
    bool local = false;
};

struct Round {
    std::vector<LocalOp> locals;
    std::vector<Transfer> transfers;
};

struct Schedule {
    CommInfo comm;
    const char* name = "collective";
    int tag = 0; // set by the engine: one per collective call of the communicator
    std::vector<Round> rounds;
    std::vector<std::unique_ptr<std::byte[]>> scratch;
    // Run in order when every round completed without error: the unpacking of the
    // results into the application's buffers of non-dense types.
    std::vector<std::function<void()>> finish;
    // Run when the schedule completed, with an error or without (after finish).
    std::vector<std::function<void()>> always;
    // A generalized request (MPI_Grequest_start: a schedule of no rounds, of this rank
    // alone): it completes once gate says so; query then gives its status and returns
    // its error; cancel is its MPI_Cancel (told whether it completed already).
    std::function<bool()> gate;
    std::function<int(MPI_Status&)> query;
    std::function<void(bool)> cancel;
    // Asked when every round completed without error: appends the rounds to run next
    // and returns true, or returns false (the schedule is done). An agreement of
    // contexts (MPI_Comm_idup) repeats its round until the members found a pair.
    std::function<bool(Schedule&)> more;
    // progress
    std::size_t next = 0;
    std::vector<std::pair<MPI_Request, Transfer>> pending;
    int error = MPI_SUCCESS;
    std::string error_text;

    // An intercommunicator's collective (intercollectives.cpp): its transfers name
    // remote ranks, or local ones (Transfer::local). Others refuse an intercommunicator.
    bool inter = false;

    // Memory the schedule owns until it completes.
    std::byte* alloc(std::size_t bytes);
    // Appends part's rounds (after this one's), its memory and its finish steps; with
    // local, part was built on comm.local and its transfers become local ones.
    void splice(std::unique_ptr<Schedule> part, bool local);
    // Starts a round; the calls below add to the last round.
    void next_round() { rounds.emplace_back(); }
    void send(int peer, const void* buf, std::size_t bytes);
    void recv(int peer, void* buf, std::size_t bytes);
    void copy(void* dst, const void* src, std::size_t bytes);
    // inout = inout op in, or (in_first: in is the lower ranks' data) in op inout.
    void reduce(void* inout, const void* in, int count, MPI_Datatype type, MPI_Op op, bool in_first = false);

private:
    Round& last();
};

struct Request {
    bool live = false; // a handle the application holds (or a freed send comm still has)
    bool is_send = false;
    bool sync_to_self = false; // MPI_Ssend to this rank itself: completes when a receive takes it
    bool complete = false;
    bool freed = false; // MPI_Request_free while pending: released when it completes
    int peer = 0;       // receive: the wanted source (or MPI_ANY_SOURCE); send: the destination
    int tag = 0;        // receive: the wanted tag (or MPI_ANY_TAG)
    int size = 1;       // of the communicator (a receive that only this rank could satisfy)
    int rank = 0;
    std::shared_ptr<const std::vector<int>> world; // the communicator's (CommInfo::world)
    comm::RequestId comm_id = 0;                   // comm's request while pending
    MPI_Status status{};
    std::unique_ptr<Schedule> schedule; // a collective's request
    // A non-dense type's message: the packed bytes (send), or where they arrive and
    // how they are unpacked into the application's buffer when they did (receive).
    std::vector<std::byte> staging;
    std::function<void(std::size_t)> unpack;
    // A persistent request: restart posts its operation anew (MPI_Start); while it is
    // active, inner is that operation's request, else MPI_REQUEST_NULL.
    std::function<MPI_Request()> restart;
    MPI_Request inner = MPI_REQUEST_NULL;
    // A matched message (MPI_Mprobe): the receive that took it, into staging, until
    // MPI_Mrecv or MPI_Imrecv says where it goes (received says it did).
    bool matched = false;
    bool received = false;
    std::size_t limit = SIZE_MAX; // a receive's capacity beyond which it is truncated
};

class Engine {
public:
    // The engine of MPI_Init: from the environment msgpass-run (or mpirun, srun) set,
    // or a single rank when none is set.
    explicit Engine(const char* program);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    [[nodiscard]] int world_rank() const noexcept { return rank_; }
    [[nodiscard]] int world_size() const noexcept { return static_cast<int>(nodes_.size()); }
    [[nodiscard]] CommInfo info(MPI_Comm comm) const { // throws MPI_ERR_COMM
        if (comm == MPI_COMM_WORLD) return CommInfo{world_size(), rank_, world_p2p, world_coll, nullptr, nullptr};
        return info_of(comm);
    }
    [[nodiscard]] CommInfo info_of(MPI_Comm comm) const;

    // Communicators made at run time (docs/mpi.md, *Communicators*). Each is
    // collective over comm: every member calls it, in the same order. Their contexts
    // are agreed by the members themselves: a pair free on every member (a bitwise
    // and of their free pairs, communicators.cpp *Contexts*), so no two communicators
    // that share a member ever share a context; MPI_Comm_free gives them back.
    MPI_Comm dup(MPI_Comm comm);
    // MPI_Comm_idup: the handle now, its contexts when the request completes (the
    // members' agreement runs as a non-blocking Allreduce, over both groups of an
    // intercommunicator). Several agreements may be in flight on a rank at once (two
    // idups, an idup and a blocking call), in any order on different ranks.
    MPI_Request idup(MPI_Comm comm, MPI_Comm* newcomm);
    // MPI_COMM_NULL where color is MPI_UNDEFINED; ranks ordered by key, then by rank in comm.
    MPI_Comm split(MPI_Comm comm, int color, int key);
    // world: the world ranks of the new communicator's ranks (a subset of comm's, in
    // the group's order); MPI_COMM_NULL on the ranks not in it.
    MPI_Comm create(MPI_Comm comm, const std::vector<int>& world);
    void free_comm(MPI_Comm comm); // throws MPI_ERR_COMM for the predefined ones
    // Intercommunicators (point to point only): collective over local_comm, whose
    // leader meets the remote group's leader (remote_leader in peer_comm) with tag.
    // MPI_Comm_create_group: called by the group's members only (tag keeps concurrent
    // calls apart).
    MPI_Comm create_group(MPI_Comm comm, const std::vector<int>& world, int tag);
    MPI_Comm intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag);
    // The union of both groups, the group that gave high false first (both alike:
    // the group of the lower world rank leader first).
    MPI_Comm intercomm_merge(MPI_Comm intercomm, bool high);
    // dup, split and create of an intercommunicator c: each group splits alike, and
    // the new intercommunicator joins the local ranks of a colour with the remote ranks
    // of the same colour (both ordered by key, then rank); MPI_COMM_NULL where the
    // colour is MPI_UNDEFINED or the other group has none of it.
    MPI_Comm inter_split(const CommInfo& c, int color, int key);
    // The world ranks of comm's ranks, in rank order.
    [[nodiscard]] std::vector<int> members(MPI_Comm comm) const;
    std::string& name(MPI_Comm comm);

    // Point to point; counts in bytes, ranks of the communicator.
    // in_place: buf is the application's memory, which MPI keeps unchanged (a send)
    // or alive (a receive) until the request completes: a large message between
    // ranks of this host goes with one copy, the sender writing into the receiver's
    // buffer (comm's post_send_in_place and post_recv_in_place, docs/mpi.md).
    MPI_Request isend(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes, bool sync,
                      std::vector<std::byte> staging = {}, bool in_place = false);
    // staging (optional): packed bytes the request keeps until it completes (buf
    // points into them); unpack: run with the bytes received when a receive completes.
    MPI_Request irecv(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity,
                      std::vector<std::byte> staging = {}, std::function<void(std::size_t)> unpack = {},
                      bool in_place = false);
    // MPI_Recv without a request: comm's blocking receive, when this thread's
    // progress is needed for nothing else while it waits (no collective in flight,
    // not MPI_THREAD_MULTIPLE). Fills status; returns the receive's error.
    [[nodiscard]] bool can_recv_now() const noexcept { return lock_ == nullptr && active_.empty(); }
    // Receives of more bytes may take a large message, which a posted receive takes
    // with one copy (in place) where comm's blocking receive copies it out of its
    // buffer: MPI_Recv posts them.
    [[nodiscard]] std::size_t eager_limit() const noexcept { return eager_limit_; }
    // MPI_Send of at most eager_limit() bytes of a dense type, when can_recv_now(): the
    // communicator's blocking send, whose fast path hands the message to the node
    // without a request or the communicator's lock (a posted send and its wait cost
    // about 3 000 instructions more per call, callgrind).
    // in: the comm context (c.p2p; c.coll for a collective's messages, without a copy
    // of c).
    void send_now(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes) {
        send_now(c, dest, tag, buf, bytes, c.p2p);
    }
    void send_now(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes, int in);
    int recv_now(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity, MPI_Status& status) {
        return recv_now(c, source, tag, buf, capacity, status, c.p2p);
    }
    int recv_now(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity, MPI_Status& status, int in);
    // Completes *request (wait) or tells whether it completed (test), fills status,
    // releases the request and sets *request to MPI_REQUEST_NULL. Returns the
    // request's error (MPI_SUCCESS, MPI_ERR_TRUNCATE, MPI_ERR_PROC_FAILED).
    int wait(MPI_Request* request, MPI_Status* status);
    bool test(MPI_Request* request, MPI_Status* status, int* error);
    // The same without releasing the request (MPI_Request_get_status).
    bool peek(MPI_Request request, MPI_Status* status, int* error);
    // Waits until one of the active requests completed; its index, or MPI_UNDEFINED
    // when none is active.
    int wait_any(int count, MPI_Request* requests);
    void free_request(MPI_Request* request);
    // Persistent requests (MPI_Send_init, MPI_Recv_init...): made inactive; start
    // (MPI_Start) posts the operation; wait and test complete it and leave the handle,
    // inactive again; on an inactive one they return at once with an empty status.
    MPI_Request persistent(std::function<MPI_Request()> restart);
    void start_persistent(MPI_Request request);
    // MPI_REQUEST_NULL, or a persistent request that is not active: what the
    // completion calls of many requests skip.
    [[nodiscard]] bool is_inactive(MPI_Request request);
    // A send request that completed already (a buffered send's, whose message was copied).
    MPI_Request completed_send(int dest, int tag, std::size_t bytes);
    // A request complete already, with the status of an operation on MPI_PROC_NULL
    // (MPI_Irecv, MPI_Isend, MPI_Imrecv of MPI_MESSAGE_NO_PROC).
    MPI_Request completed_proc_null();
    bool cancel(MPI_Request request);
    [[nodiscard]] bool is_complete(MPI_Request request);
    void check_request(MPI_Request request) const; // throws MPI_ERR_REQUEST
    // Makes progress once without blocking.
    void poke() { progress(); }
    // MPI_THREAD_MULTIPLE: every entry point holds lock (held once where a call
    // blocks); a blocking wait lets it go while it waits in the communicator, one
    // thread at a time (the leader), the others waiting for the leader's turn to end.
    void set_lock(std::recursive_mutex* lock) { lock_ = lock; }

    // The envelope of the next matching message without taking it.
    bool iprobe(const CommInfo& c, int source, int tag, MPI_Status* status);
    void probe(const CommInfo& c, int source, int tag, MPI_Status* status);
    // Matched probes: the message probed is taken out of matching at once by a
    // receive into memory of the library, whose handle is the MPI_Message; receive
    // then gives it its destination (capacity bytes, unpacked by unpack) and returns it
    // as the request of MPI_Imrecv (complete already if the message arrived).
    bool improbe(const CommInfo& c, int source, int tag, MPI_Request* message, MPI_Status* status);
    void mprobe(const CommInfo& c, int source, int tag, MPI_Request* message, MPI_Status* status);
    MPI_Request receive_matched(MPI_Request message, std::size_t capacity,
                                std::function<void(const std::byte*, std::size_t)> unpack);

    // Blocking transfers of the collectives (context coll, the communicator's ranks).
    void send_bytes(const CommInfo& c, int dest, int tag, const void* buf, std::size_t bytes);
    std::size_t recv_bytes(const CommInfo& c, int source, int tag, void* buf, std::size_t capacity);

    // Collectives as schedules: start posts the first round and returns the request
    // (non-blocking collectives); run waits for it and throws its error (blocking).
    MPI_Request start(std::unique_ptr<Schedule> schedule);
    // A persistent collective (MPI_Bcast_init...) takes its number among c's
    // collectives once, when it is made (next_tag), and every start of it runs with
    // that number (start_tagged): ranks may start their persistent collectives in
    // different orders.
    int next_tag(const CommInfo& c);
    MPI_Request start_tagged(std::unique_ptr<Schedule> schedule, int tag);
    // A schedule of this rank alone (a generalized request): no collective number.
    MPI_Request start_local(std::unique_ptr<Schedule> schedule);
    void run(std::unique_ptr<Schedule> schedule);
    // A blocking collective of an intracommunicator whose messages are all eager, when
    // can_recv_now(): run by this thread through send_now and recv_now, no request or
    // schedule progress (at 2 ranks and 8 bytes the posted requests cost 2 to 5x Open
    // MPI's time per collective, OSU, docs/mpi.md).
    [[nodiscard]] bool can_run_now(const Schedule& s) const;
    void run_now(Schedule& s);

    // MPI_Finalize: a barrier over the world, every message handed to its peer, the
    // nodes closed.
    void finalize();

private:
    Request& request(MPI_Request handle);
    MPI_Request new_request();
    void release(MPI_Request handle);
    [[nodiscard]] NodeId node_of(const CommInfo& c, int rank) const {
        return nodes_[static_cast<std::size_t>(c.world_rank(rank))];
    }
    // Fills r from comm's completion of its request.
    void complete(Request& r, const comm::Completion& c);
    void progress();
    void step_schedules();
    void step(Request& r);
    void post_transfer(Schedule& s, const Transfer& t);
    void handle(comm::Completion&& c);
    // Runs wait (which must not touch the engine) as the thread that waits in comm:
    // with MPI_THREAD_MULTIPLE, without lock_, one thread at a time; false when
    // another thread is that one (then this one waited for its turn to end).
    template <class Wait>
    bool as_leader(Wait&& wait);
    void block_once();
    void lose(int rank, const std::string& reason);
    void check_can_arrive(const Request& r) const;
    template <class Done>
    void wait_until(Done done, const std::vector<const Request*>& waiting);

    std::unique_ptr<NodeFactory> factory_;
    std::unique_ptr<comm::Communicator> comm_;
    // The payload of the last recv_now, given back to the communicator (sci: its
    // receive slot to the sender) after this rank's next send_now, or at its next call
    // into the communicator (let_go): a ping-pong's reply then goes out before the
    // slot's release, which took ~190 of the ~1 600 instructions between the message's
    // arrival and the reply (callgrind). One message at most; every other call into
    // the communicator that may wait (receives, probes, progress) lets it go first.
    // (comm's recv_into lends it: sci's receive slot itself, no Buffer.)
    MessageView held_;
    void let_go() noexcept { held_.release(); }
    std::size_t eager_limit_ = comm::Limits{}.eager_limit;
    std::vector<NodeId> nodes_; // rank -> node id
    std::map<NodeId, int> rank_of_;
    // The world rank of a node id (rank_of_), -1 for none; the last one found is
    // remembered (a ping-pong's every message comes from the same rank).
    int world_rank_of(NodeId node);
    int rank_of_peer_hint_ = 0;
    int rank_ = 0;
    std::shared_ptr<const std::vector<int>> self_world_; // MPI_COMM_SELF's ranks: this one
    std::vector<std::unique_ptr<Request>> table_;
    std::vector<MPI_Request> free_;
    std::unordered_map<comm::RequestId, MPI_Request> inflight_; // comm's pending requests
    std::map<int, std::string> lost_;                           // rank -> reason
    std::map<comm::RequestId, int> sentinels_;
    unsigned progress_calls_ = 0;
    std::vector<MPI_Request> active_; // collectives' requests not complete yet
    bool stepping_ = false;
    std::recursive_mutex* lock_ = nullptr;
    std::condition_variable_any turn_;
    bool leader_ = false;                   // a thread waits in the communicator without lock_
    std::map<int, std::uint32_t> coll_seq_; // per collective context: the next collective's number
    // The communicators: the predefined ones and those made at run time.
    std::map<MPI_Comm, CommInfo> comms_;
    std::map<MPI_Comm, std::string> names_;
    MPI_Comm next_comm_ = MPI_COMM_SELF + 1;
    MPI_Comm add_comm(CommInfo info);
    // Contexts (communicators.cpp, *Contexts*): a bit per pair this rank's
    // communicators hold, the stripes an agreement's round in flight looks at, and
    // per communicator (its collective context) the number of its next agreement.
    struct Agreement;
    std::vector<std::uint32_t> pairs_used_;
    std::vector<bool> stripe_held_;
    std::map<int, std::uint32_t> agreement_seq_;
    void contribute(Agreement& a, std::uint32_t* words);
    bool conclude(Agreement& a, const std::uint32_t* words);
    void abandon(Agreement& a);
    // The key of an agreement over c (the same on every member): its first stripe
    // and its step to the next.
    int agreement_key(const CommInfo& c);
    // A blocking agreement of pairs pairs, from key; and_all combines the members'
    // contributions (a bitwise and of every member's words into its second argument).
    std::vector<int> agree(int key, int pairs,
                           const std::function<void(const std::uint32_t*, std::uint32_t*)>& and_all);
    // The same over every member of c (both groups of an intercommunicator).
    std::vector<int> agree_over(const CommInfo& c, int pairs);
    void release_pair(int p2p);
    // The leaders (local rank 0) of intercommunicator c swap out for in (each side's
    // bytes as the other expects them) over its collective context, then each tells
    // its group: in holds the remote group's bytes on every rank.
    void swap_across(const CommInfo& c, const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes);
};

// Collectives (collectives.cpp), over Engine::send_bytes/recv_bytes.
void barrier(Engine& e, const CommInfo& c);
// MPI_Barrier and MPI_Allreduce on the calling thread (Engine::can_recv_now(), an
// intracommunicator), without a schedule: the same messages as barrier_schedule and
// allreduce_schedule (dissemination; recursive doubling over a power-of-two number of
// ranks of a vector under allreduce_now_limit bytes of a predefined type) with the
// schedule's tag, so a rank that runs the schedule instead meets them. Building and
// freeing the schedule cost MPI_Allreduce about 5 800 instructions per call at 8
// bytes (callgrind), more than the exchange itself.
void barrier_now(Engine& e, const CommInfo& c, int tag);
// One message each way with peer (MPI_Allgather and MPI_Alltoall at two ranks).
void exchange_now(Engine& e, const CommInfo& c, int tag, int peer, const void* out, void* in, std::size_t bytes);
inline constexpr std::size_t allreduce_now_limit = 2048; // (from there the schedule is Rabenseifner's)
void allreduce_now(Engine& e, const CommInfo& c, int tag, const void* send, void* recv, int count, MPI_Datatype type,
                   MPI_Op op);
// MPI_Reduce_scatter(_block) on the calling thread, without a schedule: recursive
// halving over a power-of-two number of ranks with a commutative operation, as
// reduce_scatter_schedule (the same messages, in the same order, with its tag), each
// rank's block (counts, in elements of a predefined type) left in recv; send is the
// whole vector (recv's own, in place). At most the eager limit in all.
void reduce_scatter_now(Engine& e, const CommInfo& c, int tag, const void* send, void* recv, const int* counts,
                        MPI_Datatype type, MPI_Op op);
void bcast(Engine& e, const CommInfo& c, void* buf, std::size_t bytes, int root);
void reduce(Engine& e, const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
            int root);
void gather(Engine& e, const CommInfo& c, const void* send, std::size_t block, void* recv, int root);
void scatter(Engine& e, const CommInfo& c, const void* send, std::size_t block, void* recv, int root);
// inout[i] = inout[i] op in[i] for count elements of a predefined type (basic or pair),
// or in[i] op inout[i] (in_first; it matters to an operation that does not commute).
void combine(MPI_Datatype type, MPI_Op op, std::byte* inout, const std::byte* in, int count, bool in_first = false);
// The operations of MPI_Op_create (ops.cpp).
bool is_user_op(MPI_Op op);
bool is_commutative(MPI_Op op); // throws MPI_ERR_OP for a freed one
void check_user_op(MPI_Op op);
MPI_Op op_create(MPI_User_function* fn, bool commutative);
void op_free(MPI_Op op);
void combine_user(MPI_Op op, MPI_Datatype type, std::byte* inout, const std::byte* in, int count, bool in_first);

// Datatypes (types.cpp). A type's typemap: its blocks of predefined elements (in
// the order a message carries them), its bounds, and its sizes.
struct TypeBlock {
    std::ptrdiff_t disp = 0; // bytes from the start of the element
    MPI_Datatype base = 0;   // a predefined type
    std::size_t count = 0;   // of base, one after another
};
struct TypeMap {
    std::vector<TypeBlock> blocks;
    std::ptrdiff_t lb = 0, ub = 0;           // the extent is ub - lb
    std::ptrdiff_t true_lb = 0, true_ub = 0; // the bytes the blocks touch
    std::size_t packed = 0;                  // bytes of one element in a message
    std::size_t data = 0;                    // MPI_Type_size (no pair padding)
    std::size_t align = 1;                   // the strictest alignment of its predefined types
    bool explicit_bounds = false;            // MPI_Type_create_resized set them (no struct padding)
    bool dense = true;                       // one block at 0 filling the extent: the buffer is the message
    [[nodiscard]] std::ptrdiff_t extent() const noexcept { return ub - lb; }
};
using TypeMapPtr = std::shared_ptr<const TypeMap>;
// mpi.h's predefined handles are 0x4c00IISS: II an index, SS the size in bytes.
inline constexpr std::uint32_t predefined_family = 0x4c0000;
inline constexpr std::size_t predefined_indices = 0x28;
inline constexpr std::array<MPI_Datatype, predefined_indices> predefined_by_index = [] {
    std::array<MPI_Datatype, predefined_indices> t{};
    for (const MPI_Datatype type : {MPI_CHAR,
                                    MPI_SIGNED_CHAR,
                                    MPI_UNSIGNED_CHAR,
                                    MPI_BYTE,
                                    MPI_PACKED,
                                    MPI_SHORT,
                                    MPI_UNSIGNED_SHORT,
                                    MPI_INT,
                                    MPI_UNSIGNED,
                                    MPI_LONG,
                                    MPI_UNSIGNED_LONG,
                                    MPI_LONG_LONG,
                                    MPI_UNSIGNED_LONG_LONG,
                                    MPI_FLOAT,
                                    MPI_DOUBLE,
                                    MPI_2INT,
                                    MPI_FLOAT_INT,
                                    MPI_DOUBLE_INT,
                                    MPI_LONG_INT,
                                    MPI_SHORT_INT,
                                    MPI_LONG_DOUBLE_INT,
                                    MPI_LONG_DOUBLE,
                                    MPI_INT8_T,
                                    MPI_INT16_T,
                                    MPI_INT32_T,
                                    MPI_INT64_T,
                                    MPI_UINT8_T,
                                    MPI_UINT16_T,
                                    MPI_UINT32_T,
                                    MPI_UINT64_T,
                                    MPI_C_BOOL,
                                    MPI_WCHAR,
                                    MPI_AINT,
                                    MPI_OFFSET,
                                    MPI_COUNT,
                                    MPI_C_FLOAT_COMPLEX,
                                    MPI_C_DOUBLE_COMPLEX,
                                    MPI_C_LONG_DOUBLE_COMPLEX}) {
        const std::uint32_t i = (static_cast<std::uint32_t>(type) >> 8) ^ predefined_family;
        if (i >= t.size() || t[i] != 0) throw "mpi.h: a predefined type's index out of range or taken twice";
        t[i] = type;
    }
    return t;
}();
// The size of a predefined type from its handle, 0 for any other handle (inline:
// every point-to-point call's argument check, no call, no lookup).
[[nodiscard]] inline std::size_t predefined_bytes(MPI_Datatype type) noexcept {
    const std::uint32_t i = (static_cast<std::uint32_t>(type) >> 8) ^ predefined_family;
    return i < predefined_indices && predefined_by_index[i] == type ? static_cast<std::size_t>(type & 0xff) : 0;
}
// The bytes one element occupies in a message (its packed size; for a dense type
// also its extent in a buffer). A predefined type's from its handle, inline; any
// other's looked up (element_bytes_lookup, MPI_ERR_TYPE when it is no type).
std::size_t element_bytes_lookup(MPI_Datatype type);
[[nodiscard]] inline std::size_t element_bytes(MPI_Datatype type) {
    const std::size_t n = predefined_bytes(type);
    return n != 0 ? n : element_bytes_lookup(type);
}
// The bytes of data in one element, as MPI_Type_size reports it (no padding).
std::size_t data_bytes(MPI_Datatype type);
// The pair types of MPI_MAXLOC and MPI_MINLOC.
bool is_pair_type(MPI_Datatype type);
// A handle of a derived type (made by a constructor, freed or not).
bool is_derived(MPI_Datatype type);
// mpi.h's name of a predefined type, else its number.
std::string type_name(MPI_Datatype type);
// The predefined type a type is made of and how many of it one element holds
// ({type, 1} for a predefined one); a derived type must be committed, and made of
// one predefined type (MPI_ERR_TYPE otherwise: what reductions need).
std::pair<MPI_Datatype, std::size_t> predefined_of(MPI_Datatype type);
// The typemap of a committed type (kept alive by the pointer after MPI_Type_free).
TypeMapPtr typemap_of(MPI_Datatype type);
// A committed type whose buffer is its message (every predefined type: no lookup).
bool is_dense(MPI_Datatype type);
// The buffer of count elements is the message as it is (a predefined type, without
// a call; a dense derived one): the eager paths of MPI_Send and MPI_Recv.
[[nodiscard]] inline bool buffer_is_message(MPI_Datatype type) {
    return predefined_bytes(type) != 0 || !is_derived(type) || is_dense(type);
}
// The typemap of any type, committed or not (the queries of mpi.h).
const TypeMap& type_info(MPI_Datatype type);
// The derived datatypes' calls (types.cpp). type_create: copy i is counts[i]
// elements of types[i] at disps[i] bytes; a struct's extent is padded to its alignment.
MPI_Datatype type_create(const std::vector<std::ptrdiff_t>& disps, const std::vector<int>& counts,
                         const std::vector<MPI_Datatype>& types, bool is_struct);
MPI_Datatype type_contiguous(int count, MPI_Datatype old);
MPI_Datatype type_resized(MPI_Datatype old, std::ptrdiff_t lb, std::ptrdiff_t extent);
MPI_Datatype type_dup(MPI_Datatype old);
void type_commit(MPI_Datatype type);
void type_free(MPI_Datatype type);
// The extent of an element of a type that need not be committed.
std::size_t extent_bytes(MPI_Datatype type);
// count elements of the buffer into count * m.packed bytes at out, and back (bytes
// may end inside an element: what a short message brought).
// A buffer of MPI_BOTTOM (NULL) is allowed with a type whose displacements are absolute
// addresses (MPI_Get_address's): one that is not dense and touches nothing below the
// lowest address a process can map (Linux's vm.mmap_min_addr is at least 4 KiB).
constexpr std::ptrdiff_t lowest_absolute_address = 4096;
bool absolute_addresses(const TypeMap& m);
void pack(const TypeMap& m, const void* buf, std::size_t count, std::byte* out);
void unpack(const TypeMap& m, const std::byte* in, std::size_t bytes, void* buf);
// The basic elements in bytes of a message of the type (MPI_Get_elements), or
// SIZE_MAX when bytes end inside one.
std::size_t basic_elements(const TypeMap& m, std::size_t bytes);

// Schedules of the collectives (schedules.cpp). Counts and displacements in bytes;
// sizes[i], displs[i] per rank of the communicator. recv nullptr where the rank
// receives nothing; the builders copy what must be copied at the call (MPI_IN_PLACE).
std::unique_ptr<Schedule> barrier_schedule(const CommInfo& c);
std::unique_ptr<Schedule> bcast_schedule(const CommInfo& c, void* buf, std::size_t bytes, int root);
std::unique_ptr<Schedule> reduce_schedule(const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type,
                                          MPI_Op op, int root);
std::unique_ptr<Schedule> allreduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                             MPI_Datatype type, MPI_Op op);
// gatherv: own is this rank's block (nullptr at an MPI_IN_PLACE root); recv, sizes,
// displs matter at the root only.
std::unique_ptr<Schedule> gatherv_schedule(const CommInfo& c, const void* own, std::size_t own_bytes, void* recv,
                                           const std::vector<std::size_t>& sizes,
                                           const std::vector<std::size_t>& displs, int root);
// scatterv: own receives this rank's block (nullptr at an MPI_IN_PLACE root).
std::unique_ptr<Schedule> scatterv_schedule(const CommInfo& c, const void* send, const std::vector<std::size_t>& sizes,
                                            const std::vector<std::size_t>& displs, void* own, std::size_t own_bytes,
                                            int root);
// allgatherv: own nullptr when this rank's block is in place in recv.
std::unique_ptr<Schedule> allgatherv_schedule(const CommInfo& c, const void* own, void* recv,
                                              const std::vector<std::size_t>& sizes,
                                              const std::vector<std::size_t>& displs);
// alltoallw (and alltoall, alltoallv): send nullptr for MPI_IN_PLACE (the blocks to
// send are those of recv).
std::unique_ptr<Schedule> alltoallw_schedule(const CommInfo& c, const void* send,
                                             const std::vector<std::size_t>& send_sizes,
                                             const std::vector<std::size_t>& send_displs, void* recv,
                                             const std::vector<std::size_t>& recv_sizes,
                                             const std::vector<std::size_t>& recv_displs);
// reduce_scatter: counts[i] elements to rank i; send holds their sum of elements
// (send nullptr: MPI_IN_PLACE, in recv).
std::unique_ptr<Schedule> reduce_scatter_schedule(const CommInfo& c, const void* send, void* recv,
                                                  const std::vector<int>& counts, MPI_Datatype type, MPI_Op op);
// scan (exclusive: exscan, where rank 0's recv is left as it is).
std::unique_ptr<Schedule> scan_schedule(const CommInfo& c, const void* send, void* recv, int count, MPI_Datatype type,
                                        MPI_Op op, bool exclusive);

// The collectives of an intercommunicator (intercollectives.cpp, MPI 3.1 5.2.2): c is
// one (c.local set); root is MPI_ROOT at the root, MPI_PROC_NULL at the other ranks of
// its group, and the root's rank in the remote group at the ranks of the other group.
// Data flows between the groups: what a rank receives comes from the remote group.
// Counts are in bytes, block sizes per rank of the group that sends them.
std::unique_ptr<Schedule> inter_barrier_schedule(const CommInfo& c);
std::unique_ptr<Schedule> inter_bcast_schedule(const CommInfo& c, void* buf, std::size_t bytes, int root);
std::unique_ptr<Schedule> inter_reduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                                MPI_Datatype type, MPI_Op op, int root);
std::unique_ptr<Schedule> inter_allreduce_schedule(const CommInfo& c, const void* send, void* recv, int count,
                                                   MPI_Datatype type, MPI_Op op);
// gather: the root receives c.size blocks of block bytes; scatter: it sends them.
std::unique_ptr<Schedule> inter_gather_schedule(const CommInfo& c, const void* send, void* recv, std::size_t block,
                                                int root);
std::unique_ptr<Schedule> inter_scatter_schedule(const CommInfo& c, const void* send, void* recv, std::size_t block,
                                                 int root);
// allgather: recv receives the remote group's c.size blocks of recv_block bytes.
std::unique_ptr<Schedule> inter_allgather_schedule(const CommInfo& c, const void* send, std::size_t send_block,
                                                   void* recv, std::size_t recv_block);
// alltoall: block i of send goes to remote rank i, block i of recv comes from it.
std::unique_ptr<Schedule> inter_alltoall_schedule(const CommInfo& c, const void* send, std::size_t send_block,
                                                  void* recv, std::size_t recv_block);
// The v and w forms, linear: sizes[i] and displs[i] (bytes) per remote rank i.
std::unique_ptr<Schedule> inter_gatherv_schedule(const CommInfo& c, const void* send, std::size_t send_bytes,
                                                 void* recv, const std::vector<std::size_t>& sizes,
                                                 const std::vector<std::size_t>& displs, int root);
std::unique_ptr<Schedule> inter_scatterv_schedule(const CommInfo& c, const void* send,
                                                  const std::vector<std::size_t>& sizes,
                                                  const std::vector<std::size_t>& displs, void* recv,
                                                  std::size_t recv_bytes, int root);
std::unique_ptr<Schedule> inter_allgatherv_schedule(const CommInfo& c, const void* send, std::size_t send_bytes,
                                                    void* recv, const std::vector<std::size_t>& sizes,
                                                    const std::vector<std::size_t>& displs);
std::unique_ptr<Schedule> inter_alltoallw_schedule(const CommInfo& c, const void* send,
                                                   const std::vector<std::size_t>& send_sizes,
                                                   const std::vector<std::size_t>& send_displs, void* recv,
                                                   const std::vector<std::size_t>& recv_sizes,
                                                   const std::vector<std::size_t>& recv_displs);

} // namespace msgpass::mpi
