// The communicator: tagged messages with MPI matching, posted requests with user
// pointers (BMI), an unexpected queue and probe (BIP, EPOS), over the framework
// contracts Node and NodeFactory only, so that it runs unchanged on every
// technology. docs/communicator.md describes the API, the matching rules, the bounds
// and the progress rule.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/config.hpp>
#include <msgpass/config/comm_options.hpp>
#include <msgpass/error.hpp>
#include <msgpass/message_view.hpp>
#include <msgpass/node_factory.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace msgpass::comm {

using Tag = std::int32_t;
using RequestId = std::uint64_t;

// The context of a message (MPI's communicator context): carried in its envelope
// and matched exactly, never by a wildcard, so that messages of one context are
// never taken by a receive of another. The calls without one use Context{0}. A
// distinct type, so that it is never mistaken for a node id or a tag.
enum class Context : std::uint16_t {};

// Wildcards of a receive or probe. A message's tag is never negative.
inline constexpr NodeId any_source = std::numeric_limits<NodeId>::max();
inline constexpr Tag any_tag = -1;

// The envelope of a message: its context, who sent it, with which tag, how many
// payload bytes.
struct Envelope {
    NodeId source = 0;
    Tag tag = 0;
    std::size_t size = 0;
    Context context{};
};

// A received message: its envelope and its payload (a view into the layer's
// receive buffer, no copy; dropping it returns the memory to the layer).
struct Message {
    NodeId source = 0;
    Tag tag = 0;
    BufferPtr buffer;
    Context context{};
};

// The bounds of a communicator. eager_limit and unexpected_limit are the keys of the
// configuration's `comm:` section (Limits::from); the others are constructor
// arguments only (docs/communicator.md).
struct Limits {
    // Received messages nobody asked for are kept up to this many bytes (payload and
    // envelope; an announced large message costs its 24-byte envelope); at or above
    // it the communicator stops taking messages from the nodes (back-pressure on the
    // senders) until the application receives some. At least 24 bytes per peer times
    // rendezvous_window (the constructor throws UsageError otherwise).
    std::size_t unexpected_limit = 64 * config::MiB;
    // Requests (posted receives and sends, completed ones not yet collected) at once;
    // one more post throws UsageError.
    std::size_t max_requests = 1 << 20;
    // How long a blocking send() waits while the node's send queue is full before it
    // throws SendQueueFull.
    std::chrono::milliseconds send_timeout{10'000};
    // The largest payload of post_send_unexpected (BMI's unexpected size limit); a
    // larger one is refused with MessageTooLarge. Received ones count against
    // unexpected_limit like any unrequested message.
    std::size_t max_unexpected_size = 64 * config::KiB;
    // Payloads up to this many bytes are sent at once (eager); larger ones by
    // rendezvous: the envelope goes first (request-to-send), the receiver answers
    // clear-to-send once a matching receive is posted, then the data goes into it.
    std::size_t eager_limit = 64 * config::KiB;
    // Announced large messages towards one peer not yet cleared by it; further sends
    // to that peer wait in the backlog behind them (bounds the receiver's envelopes).
    std::size_t rendezvous_window = 64;
    // BIP's per-tag queues (comm.tag_queues): eager messages of a tag in one of these
    // ranges travel in a lane of their own. Each sending peer may have at most `limit`
    // bytes of a lane unread at the receiver (the sender holds the rest back until the
    // receiver's application took some), and they do not count against
    // unexpected_limit, so a lane that fills never holds back the other tags. Both ends
    // must have the same list (one network file). Messages of different lanes may
    // overtake each other; within a lane the order holds.
    struct TagQueue {
        Tag first = 0;
        Tag last = 0;
        std::size_t limit = 0;
    };
    std::vector<TagQueue> tag_queues;
    // One copy for large messages between processes of this host (comm.single_copy):
    // a receive posted in place (post_recv_in_place) gives its buffer to a sender
    // reached through sci, which writes the data into it (process_vm_writev) instead
    // of sending it through the technology. Falls back per message when it cannot
    // (docs/communicator.md, "One copy"). MSGPASS_SINGLE_COPY=0 turns it off too.
    bool single_copy = true;

    // The defaults with eager_limit and unexpected_limit of configuration's `comm:`
    // section (config::CommOptions).
    [[nodiscard]] static Limits from(const config::Configuration& configuration);
};

enum class Status {
    success,   // sent (handed to the node) or received whole
    truncated, // received into a buffer smaller than the message: bytes holds what fitted
    cancelled, // cancel() took it back before it completed
    peer_lost, // the named peer died (its node raised PeerLost); nothing was received
};
[[nodiscard]] const char* to_string(Status status) noexcept;

// What a completed request reports.
struct Completion {
    RequestId id = 0;
    Status status = Status::success;
    bool immediate = false; // completed by the post itself
    bool is_send = false;
    NodeId source = 0;     // receive: the sender; send: the destination
    Tag tag = 0;           // the message's tag
    std::size_t size = 0;  // the message's payload size
    std::size_t bytes = 0; // receive into a span: bytes copied (< size when truncated)
    void* user = nullptr;  // the pointer given to the post
    BufferPtr buffer;      // receive without a span: the payload (zero-copy view)
    std::string error;     // peer_lost: the node's reason
    Context context{};     // the message's context
};

// A post: the request's id, and its completion when the post completed at once (then
// the id is already retired and nothing needs to be tested).
struct Posted {
    RequestId id = 0;
    std::optional<Completion> done;
};

struct CommStats {
    std::uint64_t unexpected_messages = 0;  // waiting now
    std::uint64_t unexpected_bytes = 0;     // waiting now
    std::uint64_t posted_receives = 0;      // waiting now (the expected queue)
    std::uint64_t backpressure_stops = 0;   // progress calls that did not pull: queue full
    std::uint64_t malformed = 0;            // messages dropped: bad envelope
    std::uint64_t rendezvous_sent = 0;      // large messages whose data went after a clear-to-send
    std::uint64_t rendezvous_received = 0;  // large messages received by rendezvous
    std::uint64_t rendezvous_announced = 0; // now: own announcements not yet cleared by their receiver
    std::uint64_t rendezvous_awaiting = 0;  // now: receives that cleared an announcement, waiting for its data
    // now: cleared announcements back in the unexpected queue, their data not come yet
    // (the receive that cleared one was cancelled or its recv timed out)
    std::uint64_t rendezvous_returned = 0;
    // Sends of bytes whose message (envelope and payload) is of 4 KiB or more are
    // copied into memory the communicator reuses: how many found a kept block, and
    // the bytes of freed blocks kept now (at most 32 MiB).
    std::uint64_t large_buffers_reused = 0;
    std::uint64_t large_buffers_kept_bytes = 0;
    // The requested queue: receives of more than eager_limit bytes from one peer posted
    // before their message came, told to that peer; large sends that went at once on
    // such a request of their receiver (no request-to-send round trip); and the
    // requests of peers held now.
    std::uint64_t requests_sent = 0;
    std::uint64_t requested_sends = 0;
    std::uint64_t requests_held = 0;
    // Messages discarded by drop(): the dropped peer's, queued at the time.
    std::uint64_t dropped_messages = 0;
    // Run-time clients released (dropped, or lost, and nothing of them left to read):
    // their nodes gone from the communicator and forgotten by the technology.
    std::uint64_t runtime_peers_released = 0;
    // Announced sends withdrawn by cancel() and confirmed by their receiver.
    std::uint64_t rendezvous_withdrawn = 0;
    // Per-tag queues: sends held back now because their lane's bound at the receiver
    // was reached; credits sent back (receiver) and received (sender).
    std::uint64_t lane_held_sends = 0;
    std::uint64_t lane_credits_sent = 0;
    std::uint64_t lane_credits_received = 0;
    // One copy (Limits::single_copy). Sender: large messages written straight into
    // their receiver's buffer, and their bytes; large sends to a peer of this host
    // whose data went through the technology instead (the receive gave no buffer, or
    // writing to that process is not permitted); buffers a receiver named that were
    // not written into (another host or pid namespace, another pid than its first,
    // a bad address). Receiver: receives completed by such a write.
    std::uint64_t single_copy_sent = 0;
    std::uint64_t single_copy_bytes = 0;
    std::uint64_t single_copy_fallbacks = 0;
    std::uint64_t single_copy_refused = 0;
    std::uint64_t single_copy_received = 0;
    // Sends in place (post_send_in_place) whose data went through the technology from
    // the caller's memory, without a copy, and their bytes.
    std::uint64_t zero_copy_sent = 0;
    std::uint64_t zero_copy_bytes = 0;
};

class Communicator {
public:
    // Over every node of configuration's nodes file but self (made here, a node per
    // peer; the factory must be the one made from this configuration), with
    // Limits::from(configuration) or the given limits. As its nodes, the communicator
    // may be held and dropped after the factory is destroyed, not used: every call
    // but self_id, peers and stats then throws UsageError "comm: <call> on the
    // communicator of node N after its factory was destroyed ..." at once.
    Communicator(NodeFactory& factory, const config::Configuration& configuration);
    Communicator(NodeFactory& factory, const config::Configuration& configuration, Limits limits);
    // Over the given peers only.
    Communicator(NodeFactory& factory, const std::vector<NodeId>& peers, Limits limits = {});
    ~Communicator();
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;

    [[nodiscard]] NodeId self_id() const noexcept;
    // The peers: the nodes file's (or the constructor's list), then those found at
    // run time: clients that reached this process's factory (a server's, with
    // tcp.max_clients or udp.max_clients), taken in when a call finds nothing to
    // receive (their ids are first_runtime_id and up), and the servers lookup()
    // reached. A client dropped, lost or gone is released (no longer listed) once
    // nothing of it is left to read (docs/communicator.md, "Peers found at run time").
    [[nodiscard]] std::vector<NodeId> peers() const;
    // BMI_addr_lookup: the peer listening at address ("tcp://host:port",
    // "udp://host:port", msgpass/address.hpp), which need not be in any nodes file, becomes a peer of
    // this communicator; returns its node id. A client (a factory of
    // NodeFactory::create_client, no nodes file of its own) reaches its servers so.
    // Throws what NodeFactory::lookup throws (the server's refusal, named).
    NodeId lookup(std::string_view address);

    // Blocking send: returns when the node accepted the message (transferred, or
    // queued by the node, which moves it with any later call of this process on the
    // factory: a recv, test, wait, probe, progress or flush of the communicator), so
    // the caller may reuse its bytes (MPI's local completion); while the node's send
    // queue is full it waits, making progress, up to Limits::send_timeout, then
    // throws SendQueueFull (the message is not sent). A message above
    // Limits::eager_limit goes by rendezvous: send returns when its data was handed
    // to the node, that is once dest posted a matching receive (MPI_Send's large
    // message rule; no timeout). Throws PeerLost when dest died, UsageError for a
    // negative tag or a dest that is not a peer, MessageTooLarge.
    void send(NodeId dest, Tag tag, std::span<const std::byte> bytes);
    void send(NodeId dest, Tag tag, BufferPtr&& payload);
    // The same in a context (the calls above use Context{0}). Every call below that
    // takes a Context matches in it alone. dest may be this node itself (self_id()):
    // the message goes straight into its own matching, by a copy, whatever its size.
    void send(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes);

    // A buffer for size payload bytes with room for the envelope in front (BMI's
    // memalloc): a send of it (send/post_send of the BufferPtr) writes its envelope in
    // place and hands the whole to the node, with no copy and no gather list. A
    // received Message::buffer has that room too, so it can be sent on as it is.
    // Throws MessageTooLarge beyond the factory's largest buffer.
    [[nodiscard]] BufferPtr create_buffer(std::size_t size);

    // Blocking receive of the next message matching (source, tag), wildcards
    // allowed; nullopt on timeout. Throws PeerLost when source (not any_source) died
    // and nothing of it is left to receive.
    [[nodiscard]] std::optional<Message> recv(NodeId source, Tag tag,
                                              std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
    [[nodiscard]] std::optional<Message> recv(Context context, NodeId source, Tag tag,
                                              std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
    // Blocking receive into the caller's memory (MPI_Recv's): the next message matching
    // (context, source, tag), as recv takes it, of which min(its size, into.size())
    // bytes are copied into into; its envelope (size: the message's, larger than
    // into.size() when it was cut), nullopt on timeout. held, when given, is handed the
    // memory the message arrived in (sci: its receive slot), which goes back to the
    // technology when the caller releases it (a reply sent first, then the slot given
    // back: MPI_Recv then MPI_Send); without held it goes back before the call returns.
    // Waiting forever with one peer, an eager message is matched and copied straight
    // from the technology's memory (Node::receive_view: no Buffer, no queueing). Throws
    // as recv.
    [[nodiscard]] std::optional<Envelope> recv_into(Context context, NodeId source, Tag tag, std::span<std::byte> into,
                                                    MessageView* held = nullptr,
                                                    std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());

    // Non-blocking posts. post_send copies bytes (or owns payload) at once.
    Posted post_send(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user = nullptr);
    Posted post_send(NodeId dest, Tag tag, BufferPtr&& payload, void* user = nullptr);
    Posted post_send(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user = nullptr);
    Posted post_send(Context context, NodeId dest, Tag tag, BufferPtr&& payload, void* user = nullptr);
    // A synchronous send (MPI_Issend): it completes only once a receive at dest
    // matched the message, whatever its size: it always goes by rendezvous (the data
    // goes when the receiver cleared it), or, to this node itself, completes when a
    // receive took it from the matching.
    Posted post_ssend(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user = nullptr);
    // Sends of the caller's memory without a copy (BMI's user memory; MPI_Isend's
    // rule): bytes must stay alive and unchanged until the request completed (the
    // caller may not reuse them before). A large message (above eager_limit, or any
    // synchronous one) is read only when its receiver cleared it (or asked for it,
    // posting first): written straight into the receiver's buffer when it was posted
    // in place on this host (one copy), else handed to the technology from bytes
    // itself, without a copy (tcp writes the socket from there); the request then
    // completes only when the technology let bytes go (tcp, udp: the receiver
    // acknowledged the message). A small one is copied at once as post_send does. A
    // server sends straight from a read() buffer so.
    Posted post_send_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes,
                              void* user = nullptr);
    Posted post_ssend_in_place(Context context, NodeId dest, Tag tag, std::span<const std::byte> bytes,
                               void* user = nullptr);
    // BMI's unexpected message: for a receiver that does not know who will talk to
    // it. It is never matched by post_recv/recv/probe; the receiver takes it with
    // test_unexpected/wait_unexpected. Completes like post_send. Throws
    // MessageTooLarge beyond Limits::max_unexpected_size.
    Posted post_send_unexpected(NodeId dest, Tag tag, std::span<const std::byte> bytes, void* user = nullptr);
    // BMI's list I/O: a send gathered from several spans (copied at once, in order, as
    // post_send copies one) and a receive scattered into several (filled in order; a
    // message longer than their total is truncated, Completion::bytes says how much was
    // written). Either end may be a list or one span: the message is the same bytes.
    Posted post_send_list(Context context, NodeId dest, Tag tag, std::span<const std::span<const std::byte>> pieces,
                          void* user = nullptr);
    Posted post_recv_list(Context context, NodeId source, Tag tag, std::span<const std::span<std::byte>> into,
                          void* user = nullptr);
    Posted post_send_unexpected_list(NodeId dest, Tag tag, std::span<const std::span<const std::byte>> pieces,
                                     void* user = nullptr);
    // Up to max unexpected messages (BMI's), oldest first, with their source and tag;
    // test_unexpected makes progress once, wait_unexpected waits up to timeout for
    // at least one.
    std::vector<Message> test_unexpected(std::size_t max);
    std::vector<Message> wait_unexpected(std::size_t max, std::chrono::nanoseconds timeout);

    // A receive into the caller's memory (kept alive until the request completed or
    // was cancelled and collected), or into the layer's buffer (Completion::buffer).
    Posted post_recv(NodeId source, Tag tag, std::span<std::byte> into, void* user = nullptr);
    Posted post_recv(NodeId source, Tag tag, void* user = nullptr);
    Posted post_recv(Context context, NodeId source, Tag tag, std::span<std::byte> into, void* user = nullptr);
    Posted post_recv(Context context, NodeId source, Tag tag, void* user = nullptr);
    // A receive into the caller's memory that a sender of this host may write into
    // itself (one copy, Limits::single_copy): as post_recv into a span, except that
    // once a large message matched it and its buffer went to the sender, cancel()
    // returns false: it completes with that message (or peer_lost, or truncated when
    // into is shorter), as a matched receive does in MPI. into stays the sender's to
    // write until then, even after drop(source) or the communicator's destruction.
    Posted post_recv_in_place(Context context, NodeId source, Tag tag, std::span<std::byte> into, void* user = nullptr);

    // The completion of a finished request, which retires it; nullopt while pending.
    // test makes progress once without blocking; wait blocks up to timeout. Throws
    // UsageError for an id that is not a live request.
    std::optional<Completion> test(RequestId id);
    std::vector<Completion> test_some(std::span<const RequestId> ids);
    std::optional<Completion> wait(RequestId id, std::chrono::nanoseconds timeout);
    // The first of ids to complete (nullopt on timeout).
    std::optional<Completion> wait_any(std::span<const RequestId> ids, std::chrono::nanoseconds timeout);
    // Waits until at least one of ids completed and returns every completed one
    // (empty on timeout).
    std::vector<Completion> wait_some(std::span<const RequestId> ids, std::chrono::nanoseconds timeout);
    // Waits until every one of ids completed or timeout; returns the completed ones
    // (all of them unless the timeout passed; the others stay pending).
    std::vector<Completion> wait_all(std::span<const RequestId> ids, std::chrono::nanoseconds timeout);

    // Takes back a pending request: it completes with Status::cancelled, to be
    // collected by test/wait. False when it had completed already. A receive that
    // cleared an announcement is cancelled and the announcement goes back into the
    // unexpected queue in its place (its data completes the next receive that matches
    // it). A send whose announcement (rendezvous) went is withdrawn: true, and it
    // completes cancelled once the receiver confirmed it took the announcement out of
    // its queue (nothing of it is delivered), or successfully when a receive had
    // cleared it first (the data goes; MPI_Test_cancelled's rule), or peer_lost.
    bool cancel(RequestId id);

    // BMI's completion contexts: a set of requests whose completions one loop collects
    // (BMI_testcontext). add_to puts a live request into a context (UsageError
    // otherwise; a request is in one context at most); test_context returns up to max
    // of its completed requests, retiring them, after one progress; wait_context waits
    // up to timeout until at least one completed. Closing a context leaves its requests
    // live, to be collected by test/wait.
    using CompletionContext = std::uint32_t;
    [[nodiscard]] CompletionContext open_completion_context();
    void close_completion_context(CompletionContext context);
    void add_to(CompletionContext context, RequestId id);
    std::vector<Completion> test_context(CompletionContext context, std::size_t max);
    std::vector<Completion> wait_context(CompletionContext context, std::size_t max, std::chrono::nanoseconds timeout);

    // BMI_set_info(BMI_DROP_ADDR): forgets what is pending with peer: its receives and
    // sends complete peer_lost ("dropped by the application"), its queued messages are
    // discarded (stats().dropped_messages), and a receive from it completes peer_lost
    // until it sends again (then it is a peer like a restarted one). A client found at
    // run time is released instead: its node freed, its technology told to forget it,
    // and every later call naming it throws PeerLost.
    void drop(NodeId peer);
    // BMI_get_info(BMI_CHECK_INIT): whether the communicator may be used (its factory
    // still lives).
    [[nodiscard]] bool usable() const noexcept;

    // The envelope of the next message matching (source, tag) without taking it:
    // iprobe makes progress once, probe waits up to timeout.
    std::optional<Envelope> iprobe(NodeId source, Tag tag);
    std::optional<Envelope> probe(NodeId source, Tag tag, std::chrono::nanoseconds timeout);
    std::optional<Envelope> iprobe(Context context, NodeId source, Tag tag);
    std::optional<Envelope> probe(Context context, NodeId source, Tag tag, std::chrono::nanoseconds timeout);

    // Makes progress once without blocking (tests and waits do it too).
    void progress();

    // Waits at most timeout until every message sent through this communicator was
    // handed over to its peer (the communicator's own backlog and the nodes' queues),
    // taking what arrives meanwhile; true when all was. A process that sends and then
    // exits calls it first.
    bool flush(std::chrono::nanoseconds timeout);

    [[nodiscard]] CommStats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace msgpass::comm
