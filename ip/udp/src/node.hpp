// Internals of the udp technology: UdpNode, one peer (the messages this process
// sends to it, cut into numbered datagrams and kept until acknowledged, and the
// datagrams it sends to us, reassembled in order), and what every node of a factory
// shares (Parameters, Shared). Transport (transport.hpp) owns the socket and the
// background thread. What does not depend on UDP (incarnations, the inbox and its
// loss marker, the buffer pool, sockets) comes from ip/common.
//
// Threads. Every piece of a node's state is under its mutex_, but the pack the last
// pump held open (open_, below): a small message for it is appended under pack_lock_
// alone, so that a stream's sending thread takes the node's lock once a datagram, not
// once a message (it was contended by the background thread's acknowledgements). Senders number and
// transmit datagrams from their own thread (sendmmsg, with UDP GSO, on the shared
// socket); the background thread reads the socket unless it is lent to a blocking
// receive (Shared), so that reassembly, acknowledgements and repairs happen whether
// or not the application receives; receivers take whole messages from the node's
// inbox and sleep on the socket or on the factory's doorbell.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/kit/lifetime.hpp>
#include <msgpass/kit/loss.hpp>
#include <msgpass/kit/queued_buffer.hpp>
#include <msgpass/kit/ready_group.hpp>
#include <msgpass/node.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/options.hpp>
#include <msgpass/udp/protocol.hpp>
#include <msgpass/wait.hpp>

#include <msgpass/ip/auth.hpp>
#include <msgpass/ip/fault.hpp>
#include <msgpass/ip/incarnation.hpp>
#include <msgpass/ip/reactor.hpp>
#include <msgpass/ip/socket.hpp>
#include <msgpass/kit/fast_lock.hpp>
#include <msgpass/kit/pool.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace msgpass::udp {

using Clock = std::chrono::steady_clock;

// When the acknowledgement has not moved for resend_timeout, the sender resends the
// first datagram not acknowledged and the last one sent (a probe: a receiver that
// lost the tail of a stream sees the hole and NAKs it). A receiver NAKs a new hole
// at once (that range only) and every hole still open every nak_interval.
inline constexpr std::chrono::milliseconds resend_timeout{10};
inline constexpr std::chrono::milliseconds nak_interval{20};
// Repeats that go unanswered back off, as TCP's retransmission timer does: the next
// probe of a sender whose acknowledgement still has not moved waits twice as long as
// the last (up to resend_most), and so does the next NAK of a receiver whose next
// expected datagram did not come (up to nak_repeat_most, unicast; nak_interval x 8 in
// a multicast stream). The first repeat after progress waits resend_timeout (or
// nak_repeat) again. Without it a receiver that fell behind (256 senders at once on
// 2 CPUs: its socket overflowed) drew a probe every 10 ms from each sender and sent
// each a NAK every millisecond, each NAK answered by up to nak_burst datagrams, and
// never caught up: its peers found it silent for peer_timeout.
inline constexpr std::chrono::milliseconds resend_most{160};
inline constexpr std::chrono::milliseconds nak_repeat_most{32};
// In a unicast stream the holes still open are NAKed again every nak_repeat instead:
// at 1 % loss a NAK or its repair is lost every 50 holes or so, and the window stalls
// behind that hole until the repeat (at 20 ms the 64 KiB stream then ran at 0.2x its
// loss-free rate; a needless repeat costs a duplicate datagram, dropped).
inline constexpr std::chrono::microseconds nak_repeat{1000};
// Groups over udp.multicast (docs/udp.md, "Repairs by multicast"). A member NAKs a
// new hole in a stream that came by multicast after a random back-off, uniform from 0
// to nak_backoff, and not at all when the hole was filled meanwhile (another member's
// NAK of the same loss brought the repair). The sender answers the first NAK of a
// datagram it sent to the address by sending that datagram there again, and ignores
// the NAKs of it that come within nak_interval of that repair; a later one is answered
// per member (that member lost the repair, or its NAK came late).
inline constexpr std::chrono::microseconds nak_backoff{2000};
// At most this many datagrams resent per NAK.
inline constexpr std::uint64_t nak_burst = 1024;
// A receiver sends a status at least every status_every in-order datagrams, and
// otherwise status_delay (Options::status_delay, 1 ms) after the first datagram it
// owes one for: in a request-response exchange the answer comes sooner, and a status
// per message would wake the peer once more per message. A flushing sender asks for
// it at once (flag_status_now, status_request).
inline constexpr std::uint64_t status_every = 64;
// Packed datagrams (docs/udp.md, "Packed datagrams"): a message small enough for a
// frame goes into the last datagram not transmitted yet when it has room, and that
// datagram waits for more while at least hold_in_flight datagrams are unacknowledged
// and the acknowledgement moved less than hold_fresh ago (the peer is busy with them,
// and says so); otherwise it goes at once. A receiver of small
// messages that took hold_in_flight datagrams since its last status sends one at
// the end of the read that took them, not status_delay later: that status is what
// lets a held datagram go when the sender stops. While it holds, the full packs
// before it wait until more than hold_batch are ready, to leave in one sendmmsg().
inline constexpr std::uint64_t hold_in_flight = 16;
inline constexpr std::chrono::microseconds hold_fresh{2000};
inline constexpr std::uint64_t hold_batch = 15;
// Pack storage kept for reuse per peer (each of datagram_size bytes).
inline constexpr std::size_t spare_packs_kept = 64;

struct Parameters {
    NodeId self = 0;
    std::string partition;
    std::uint64_t partition_hash = 0;
    std::uint64_t max_message_size = 64 * config::MiB;
    std::chrono::nanoseconds peer_timeout{std::chrono::seconds(1)};
    std::uint32_t send_queue_limit = 65536;
    std::size_t datagram_size = default_datagram_size;
    std::size_t payload = default_datagram_size - header_size; // message bytes per datagram
    std::uint64_t window = 1024;
    Options options;
    std::optional<ip::AuthKey> auth_key; // auth_key_file: a peer is trusted once its welcome proves it

    static Parameters from(const config::Configuration& configuration, NodeId self);
};

// The MAC of a welcome under auth_key_file: over a label, the welcome's header (its
// wire image: both ids, both incarnations, the partition, the acknowledgement) and the
// nonce of the hello it answers.
inline ip::Mac welcome_mac(const ip::AuthKey& key, std::span<const std::byte> header, const ip::Nonce& nonce) {
    static constexpr std::string_view label = "msgpass/udp welcome";
    return ip::mac_over(key, {std::as_bytes(std::span(label)), header, std::as_bytes(std::span(nonce))});
}

// Reads what the factory's socket holds and hands each datagram to its node (the
// transport: transport.cpp). Called with Shared::read_mutex held. Each returns how many
// datagrams it read, at most `most`; fewer: the socket had no more.
class SocketReader {
public:
    // What is there now (now: time_point{}, read from the clock once something came,
    // and given back; or a recent time given by the caller, which the datagrams are
    // handled with).
    virtual int read_socket(Clock::time_point& now, int most) = 0;
    // Blocks until a datagram comes or timeout passes (0 then).
    virtual int wait_and_read(std::chrono::nanoseconds timeout, int most) = 0;

protected:
    ~SocketReader() = default;
};

// Tags of the background thread's epoll set.
inline constexpr std::uint64_t socket_tag = 0, wake_tag = 1, multicast_tag = 2;

struct Shared {
    Parameters parameters;
    std::uint64_t incarnation = 0;
    std::atomic<int> fd{-1}; // the factory's socket; -1 once the transport closed it
    Doorbell bell;
    std::shared_ptr<kit::BufferPool> pool = std::make_shared<kit::BufferPool>();
    std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(Drop::kinds)> drops{};
    std::atomic<std::uint64_t> datagrams_sent{0}, datagrams_received{0}, naks_sent{0}, repairs{0};
    // The kernel takes UDP GSO sends (UDP_SEGMENT; set before the nodes send), and
    // to the multicast address (false once it refused one there).
    bool gso = false;
    std::atomic<bool> multicast_gso{true};
    // udp.multicast: this process joined the group's address (it says so in its
    // hello, welcome, status and keepalive datagrams), and its group sends may go there
    // (false after a send to the address failed: per member from then on).
    bool joined = false;
    std::atomic<bool> multicast_up{false};
    sockaddr_in multicast_address{};
    std::atomic<std::uint64_t> multicast_sent{0}, multicast_repairs{0}, naks_coalesced{0}, naks_withheld{0};
    std::atomic<std::uint64_t> statuses_asked{0}; // sent at once at a flushing sender's request
    // Status datagrams sent, and statuses carried by data datagrams instead (flag_ack).
    std::atomic<std::uint64_t> statuses_sent{0}, acks_carried{0};
    std::atomic<std::uint64_t> timer_runs{0}; // the background thread ran the nodes' timers (Transport::run)
    std::atomic<std::uint64_t> node_ticks{0}; // the nodes it ticked in those runs (the due and touched ones)
    // Run-time clients (first_runtime_id up): ids given so far, and of those forgotten.
    std::atomic<std::uint32_t> clients_seen{0}, clients_forgotten{0};
    // udp.inject_*: the fault injection (ip/common's interface), made by the transport
    // before any node sends. On receipt it is the background thread's; its
    // withhold_multicast (udp.inject_multicast_loss: a group datagram's first
    // transmission to the address withheld, counted as injected) any thread's.
    std::unique_ptr<ip::FaultInjector> faults;
    bool withhold_multicast() noexcept;

    explicit Shared(Parameters p);
    void count(Drop d) noexcept { drops[static_cast<std::size_t>(d)].fetch_add(1, std::memory_order_relaxed); }
    // A refused peer (auth_key_file) on stderr, at most 20 lines a second per process.
    void log_refusal(const std::string& line);
    std::atomic<std::int64_t> next_log_ns{0};
    // Rings the factory's doorbell, the one technology: auto sleeps on (ring_on_input),
    // and a receiver blocked on the socket (an empty datagram to itself).
    void ring() noexcept {
        bell.ring();
        if (Doorbell* also = also_ring.load(std::memory_order_acquire)) also->ring();
        if (socket_sleeping.load(std::memory_order_seq_cst)) wake_socket();
    }
    void wake_socket() const noexcept;
    std::atomic<Doorbell*> also_ring{nullptr};

    // Who reads the socket. The background thread waits on it in its epoll set unless
    // it is lent to blocking receives: a receiver then blocks in recvmmsg() on the
    // socket itself and reads what comes (one wake-up and one system call per message,
    // as a blocking read on a raw socket, instead of the background thread's wake-up
    // and then the receiver's; whoever must wake it sends the socket an empty datagram
    // of its own: ring()). One thread
    // reads at a time (read_mutex); one receiver at a time uses the lend (inside), the
    // others sleep on the doorbell. The lend outlives a short receive (so that a
    // request-response exchange changes nothing in the epoll set per message): a
    // receive that waited reclaim_after or longer gives it back, and so do the
    // background thread, a send and a flush once no receiver came back for
    // reclaim_after. Not with fault injection (the background thread's alone).
    ip::Epoll epoll{"udp"};                   // the background thread's: the socket, its wake-up, the multicast socket
    ip::Address self_address;                 // the socket's own: the empty datagram of ring() goes there
    std::mutex read_mutex;                    // held by the receiver while it blocks on the socket
    std::atomic<bool> lent{false};            // the background thread does not wait on the socket
    std::atomic<bool> inside{false};          // a receiver uses the lend (also held by who gives it back)
    std::atomic<std::int64_t> left_ns{0};     // when the last receiver left it (steady clock)
    std::atomic<bool> socket_sleeping{false}; // that receiver blocks in recvmmsg()
    std::atomic<bool> closing{false};         // the transport shuts down: nothing is lent any more
    bool receivers_read = false;              // set before the background thread starts
    SocketReader* reader = nullptr;           // the transport; valid while a receiver is inside
    // The calling receiver uses the lend (lent now if it was not); false when another
    // receiver is inside (or closing, or fault injection).
    bool lend() noexcept;
    // The receiver leaves; after a wait that began at `began` reclaim_after ago or more,
    // it gives the socket back (the background thread wakes at once for what came).
    void leave(Clock::time_point began, Clock::time_point now = Clock::now()) noexcept;
    // Gives the socket back when it is lent and no receiver came back for reclaim_after
    // (the background thread, a send, a flush).
    void reclaim_if_idle(Clock::time_point now) noexcept;
    // The lent receiver's sleep: blocks on the socket until a datagram comes (read, at
    // most `most`, and handed to its nodes) or timeout; how many it read.
    int sleep_on_socket(std::chrono::nanoseconds timeout, int most);
    // Reads at most `most` datagrams from the socket (the lent receiver); how many.
    int read(int most);
    // The spin of a blocking receive: reads what the socket holds now, without
    // blocking, when the lend is free (it stays lent: a request-response exchange
    // polls it again at once). True when it read a datagram: only then may the
    // caller's inbox hold more than before (a message another thread delivered
    // meanwhile is found by the spin's next look at the inbox). recent: a time the
    // caller read while it waited (at most some tens of microseconds ago, or {}: the
    // clock is read once something came); what came is handled with it, so that no
    // clock read stands between a datagram and its receiver (the timers it feeds are
    // of milliseconds).
    bool poll_socket(Clock::time_point recent = {}) noexcept;
};

// The sleeper of udp's blocking receives (msgpass::wait_with): on the socket itself
// when it can have it lent, else on the doorbell.
struct SocketSleeper {
    Shared& shared;

    template <class Poll>
    auto sleep(Poll& poll, std::chrono::nanoseconds step, const WaitPhase& phase) -> decltype(poll()) {
        if (!shared.lend()) return DoorbellSleeper{&shared.bell}.sleep(poll, step, phase);
        struct Inside {
            Shared& s;
            Clock::time_point began;
            ~Inside() {
                s.socket_sleeping.store(false, std::memory_order_seq_cst);
                s.leave(began);
            }
        } inside{shared, phase.start};
        // Announced before the last poll: a message delivered by another thread after it
        // wakes the socket (Shared::ring), one delivered before is found here.
        shared.socket_sleeping.store(true, std::memory_order_seq_cst);
        if (auto found = poll()) return found;
        // Up to 16 datagrams a recvmmsg() (in a request-response exchange one, and no
        // read that finds nothing), until this receive has what it waits for or the
        // socket is empty.
        for (int got = shared.sleep_on_socket(step, 16);; got = shared.read(16)) {
            if (auto found = poll()) return found;
            if (got < 16) return {};
        }
    }
};

// A lend unused for this long is given back (Shared).
inline constexpr std::chrono::microseconds reclaim_after{1000};
// While a receiver the socket is lent to read a datagram within this long, the
// background thread runs the timers at least every status_delay (Transport::run);
// otherwise when the nodes' timers ask.
inline constexpr std::chrono::milliseconds receivers_reading{10};

// How udp's blocking receives wait: polling the socket itself (poll_socket: a
// recvmmsg() that does not block) for up to 50 us, as the raw floor does - a wake-up
// from a sleep in recvmmsg() costs 8 to 10 us each way on a virtual machine, which
// was most of a 64 B round trip - then sleeping on the socket at most 100 ms at a
// time. No yielding: on a machine with few CPUs it keeps the thread that would
// deliver from running.
inline constexpr WaitPolicy socket_wait{std::chrono::microseconds(50), std::chrono::microseconds(0),
                                        std::chrono::microseconds(100000)};

// The iovecs of a piece of a message: `piece` bytes from `offset`, gathered from its
// fragments into iov[n...]; a piece spread over more fragments than iov has room for
// is copied into staging (resized when short). Returns the iovecs used in all.
std::size_t gather(const Buffer& buffer, std::uint64_t offset, std::size_t piece, std::span<iovec> iov, std::size_t n,
                   std::vector<std::byte>& staging);

// Datagrams ready to go out together (sender.cpp): a message's datagrams leave in
// one system call, and the receiver, woken by the first, finds the others there.
// With UDP GSO a run of datagrams of which all but the last are full goes as one
// send with UDP_SEGMENT, which the kernel cuts into those same datagrams after one
// pass through its stack (on loopback, at the receiving socket: they are queued
// together and wake the receiver once); the sends of a batch go in one sendmmsg().
// One per thread (filled and sent under the locks of the nodes it is for).
struct DatagramBatch {
    static constexpr std::size_t most = 16;     // datagrams
    static constexpr std::size_t iovs_per = 16; // iovecs of a datagram, its header's included
    struct Datagram {
        std::size_t iov = 0, iovs = 0, bytes = 0; // its iovecs in iov[], and its size
    };
    struct Control {
        alignas(cmsghdr) std::array<unsigned char, CMSG_SPACE(sizeof(std::uint16_t))> bytes{};
    };
    std::array<DatagramHeader, most> header{}; // header[count]: the next datagram's
    std::array<iovec, most * iovs_per> iov{};
    std::array<Datagram, most> datagram{};
    std::array<mmsghdr, most> message{};
    std::array<std::size_t, most> datagrams_of{}; // datagrams in each message
    std::array<Control, most> control{};
    std::size_t count = 0, iovs = 0;
    bool staged = false; // the last one's piece is in a staging buffer: send before the next
    AckTrailer ack{};    // the status the last datagram carries (flag_ack: UdpNode::carry_status)

    static DatagramBatch& of_this_thread();
    void clear() noexcept {
        count = 0;
        iovs = 0;
        staged = false;
    }
    // No room for another datagram (or the last one must go before the next is gathered).
    [[nodiscard]] bool full() const noexcept { return count == most || staged; }
    // The iovecs of the next datagram (its header's first).
    [[nodiscard]] std::span<iovec> next_iov() noexcept { return {iov.data() + iovs, iovs_per}; }
    // The next datagram is ready: its first `iovecs` iovecs, `bytes` in all.
    void add(std::size_t iovecs, std::size_t bytes, bool in_staging) noexcept;
    // Sends the batch to `to` (when gso, each run of datagrams of one size - the last
    // no larger - as one GSO send; a GSO send the kernel refuses sets gso false and goes
    // again datagram by datagram), then clears it. Returns how many datagrams the
    // socket took, in order; error is the errno of the call that took none of the rest
    // (0 when all went).
    std::size_t send(int fd, const sockaddr* to, socklen_t length, bool& gso, int& error);
};

// A message a group send sent to udp.multicast (group.cpp), held by each member's
// queue entry until that member acknowledged it, so that a NAK of one of its datagrams
// can send the same datagram there again (UdpNode::repair): the member table as it
// went (each entry's seq the member's number of the message's first datagram), how
// many of its datagrams went there (the rest went per member), and when each was last
// sent there again (steady clock, ns; 0: never). Its members' NAKs come in on one
// thread or another, each under its member's lock: the times are atomic.
struct MulticastMessage {
    std::vector<GroupEntry> table;
    std::uint64_t sent = 0;
    std::unique_ptr<std::atomic<std::int64_t>[]> repaired;
};

// The ready marks of a group (group.cpp): a bit per member, set by the member when
// its inbox has an entry or its peer was lost, taken by the group's receive.
using ReadyMarks = kit::ReadyMarks;

class UdpNode;
// The group of a factory (group.cpp): per member, or over udp.multicast when it is
// udp.multicast_group. It sleeps on the factory's doorbell and keeps it alive.
std::unique_ptr<BasicGroup> make_udp_group(std::string name, std::shared_ptr<Shared> shared);

class UdpNode final : public Node, public kit::FactoryBound {
public:
    UdpNode(std::shared_ptr<Shared> shared, const config::NodeConfig& peer, ip::Address address);
    ~UdpNode() override;
    UdpNode(const UdpNode&) = delete;
    UdpNode& operator=(const UdpNode&) = delete;

    [[nodiscard]] NodeId id() const noexcept override { return id_; }
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    void send(BufferPtr&& buffer) override;
    void send_shared(const SharedBuffer& buffer) override;
    // The Buffer-free send: a message that fits a frame is copied from the caller's
    // bytes straight into the pack (no buffer object); a larger one goes as a buffer.
    void send_bytes(std::span<const std::byte> bytes) override;
    [[nodiscard]] BufferPtr receive() override;
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override;
    bool flush(std::chrono::nanoseconds timeout) override;
    [[nodiscard]] NodeStats stats() const noexcept override;
    // The factory hands the node out (create_node, under its HealthScope): its loss
    // latch, made with the transport before that, now tells the statistics page too.
    void observe_health_scopes() { loss_.observe_current_scopes(); }

    // A group's ready marks (group.cpp): from now on the node sets its bit, slot, in
    // marks whenever its inbox has an entry or its peer is lost, and sets it now; until
    // the group leaves them (unwatch).
    void watch(std::shared_ptr<ReadyMarks> marks, std::size_t slot);
    void unwatch(const ReadyMarks* marks);

    // --- peers found at run time (clients.cpp) ---
    // Before any datagram: the node is a run-time client of this server (client) or a
    // server this client looked up, which calls this process self_as_seen. Its
    // datagrams leave by the factory's socket (the peer answers to the address it
    // heard from).
    void make_runtime(NodeId self_as_seen, bool client);
    [[nodiscard]] NodeId self_as_seen() const noexcept { return self_; }
    // Client side: the welcome that answered the lookup (proven already, under
    // auth_key_file) makes the server's incarnation this node's peer.
    void adopt_welcome(const DatagramHeader& h, Clock::time_point now);
    // Server side: the client said goodbye, or was lost, and nothing it sent waits
    // unread; or the application forgot it (forget_client: goodbye sent, then closed).
    [[nodiscard]] bool forgettable();
    void forget_client();

    // --- background thread ---
    // A datagram from this peer that passed decode_datagram.
    void on_datagram(const Decoded& d, std::span<const std::byte> bytes, Clock::time_point now);
    // After a batch of reads: the status owed, when due. Returns when the next one is
    // due (time_point::max(): none owed).
    Clock::time_point end_of_batch(Clock::time_point now);
    // Timers: hello, resend, NAK repeat, keepalive, peer timeout. Returns when it
    // wants to be called again.
    Clock::time_point tick(Clock::time_point now);
    // When the background thread runs its timers it ticks only the nodes that are due:
    // those whose last tick asked for now or sooner, and those that something happened
    // to since (a datagram from the peer, read by any thread; a send while the peer is
    // not known yet: touched, due at once). A run that ticked every node of the file
    // at each wake-up cost the receiver of 256 udp senders at 100 msgs/s each a tick
    // of 256 nodes per datagram: more than its CPU, and its peers found it silent.
    [[nodiscard]] std::int64_t tick_due_ns() const noexcept { return tick_due_ns_.load(std::memory_order_relaxed); }
    // tick() with its due time kept: a touch while it runs leaves the node due at once.
    Clock::time_point tick_and_keep(Clock::time_point now) {
        tick_due_ns_.store(ticking, std::memory_order_relaxed);
        const auto next = tick(now);
        auto expected = ticking;
        tick_due_ns_.compare_exchange_strong(expected, next.time_since_epoch().count(), std::memory_order_relaxed);
        return next;
    }
    void touch() noexcept { tick_due_ns_.store(0, std::memory_order_relaxed); }
    // Shutdown: waits until every message was acknowledged (or the peer is unknown,
    // or the deadline passed), then says goodbye; the node refuses sends afterwards.
    bool wait_acknowledged(SteadyTime deadline);
    void close();

    // A group send over udp.multicast (group.cpp): queues the message for every
    // member as send_shared does, sends each datagram once to the multicast address
    // for the members whose stream and window take it at once (each finds its own
    // datagram number in the datagram's table; acknowledgements and NAKs then go per
    // member as for a unicast message, and each member's entry keeps the record a NAK
    // repairs it by: repair), and transmits to the others per member.
    // The errors of members are collected as BasicGroup::send does; throws after
    // every member had the message.
    static void broadcast(const std::string& group, std::vector<std::shared_ptr<UdpNode>> members,
                          const SharedBuffer& buffer);

private:
    // A queue entry: a message, or a packed datagram of several. A pack's frames are
    // copied in as its messages are sent and fixed once it is transmitted (a repair
    // resends it as it went); one frame goes as a plain piece. One entry a datagram,
    // not a message: the queue, its numbering and its acknowledgement cost per
    // datagram, and the 19 messages of a 64 B pack are one entry.
    struct OutMessage : kit::QueuedBuffer {
        std::uint64_t size = 0;      // bytes: the message's; a pack's, its messages' (no framing)
        std::uint64_t first = 0;     // its first datagram's number
        std::uint64_t count = 1;     // datagrams
        std::uint64_t messages = 1;  // a pack: its frames
        std::vector<std::byte> pack; // not empty: the entry is a pack and holds no buffer
        // Sent to udp.multicast (group.cpp): shared by the members it went to.
        std::shared_ptr<MulticastMessage> multicast;
    };
    // The messages of the queue (each pack counts its frames); folds the open pack first.
    [[nodiscard]] std::uint64_t messages_queued();
    // --- the open pack (docs/udp.md, "Packed datagrams") ---
    // The last pump held the last datagram, a pack not transmitted yet (holding_): the
    // pack is open, and a small message a send finds room for goes into it under
    // pack_lock_ alone (append_open), without the node's lock. Everything that reads
    // or changes the queue under mutex_ folds it first (fold_open: pump, enqueue, the
    // losses and resets, close), so that under mutex_ with open_ null the queue is as
    // if every message had been appended under mutex_. open_ is written under both
    // locks; the open pack's pack, size and messages, and open_added_ and open_room_,
    // are pack_lock_'s while open_ is set.
    // (a cache line of their own: the lock's exchange, once a message, missed the
    // cache when it shared the line with state the background thread writes)
    alignas(64) kit::FastLock pack_lock_; // (held for the copy of one small message)
    OutMessage* open_ = nullptr;
    std::uint64_t open_added_ = 0; // messages appended under pack_lock_ alone, not in untransmitted_ yet
    std::uint64_t open_room_ = 0;  // how many more the send queue takes (send_queue_limit)
    // Any thread, before the node's lock: appends the message when the pack is open
    // and has room for it (true), else false (the caller takes the node's lock).
    bool append_open(std::uint64_t size, const auto& copy);
    alignas(64) std::byte open_end_{}; // (the end of their line)
    // under mutex_: the open pack is closed, its messages counted in untransmitted_.
    void fold_open() noexcept;
    // under mutex_, after a pump held the last pack (holding_): opened.
    void open_held() noexcept;
    // under mutex_: queue_depth_ stored (under pack_lock_: a send appending to the open
    // pack counts it there meanwhile).
    void store_depth() noexcept;

    template <class B>
    void send_impl(B& buffer);
    void check_size(std::uint64_t size);
    // under mutex_: queue a message (throws UsageError after close, SendQueueFull);
    // one that fits a frame is copied into a pack when may_pack (a group's multicast
    // message is not: its datagrams are the same for every member).
    template <class B>
    OutMessage& enqueue(B& buffer, bool may_pack = true);
    // under mutex_: a message small enough for a frame goes into the last datagram if
    // that is a pack not transmitted yet with room for it (true: appended), else
    // false.
    bool append_to_pack(std::uint64_t size, const auto& copy);
    // under mutex_: a message that fits a frame, into the last pack (append_to_pack) or
    // a new one; copy(to) writes its bytes at to.
    OutMessage& enqueue_small(std::uint64_t size, const auto& copy);
    // The frame of a message of `size` bytes at the end of m.pack (copy writes them).
    static void add_frame(OutMessage& m, std::uint64_t size, const auto& copy);
    // under mutex_, after a message was queued (next_dseq_ was made before): pumps
    // unless it went into the pack the last pump held.
    void after_enqueue(std::uint64_t made);
    // Before the lock: the factory alive, the size allowed, no loss to report.
    void check_send(std::uint64_t size);
    std::unique_lock<std::mutex> lock_to_send();
    // Pack storage given back by acknowledged packs (their capacity kept), bounded.
    std::vector<std::vector<std::byte>> spare_packs_;
    // The last pump stopped at a hold: the last datagram (a pack with room) waits, and
    // so may the full ones before it (fewer than hold_batch ready). A message appended
    // to that pack changes neither (no datagram made, no acknowledgement): it needs no
    // pump, nor the clock read of holds(), until something else moves (a datagram
    // made, an acknowledgement, the timers, a flush).
    bool holding_ = false;
    // A flush pumps: the last datagram it transmits carries flag_status_now. asked_upto_:
    // sent_upto_ when a status was last asked for (that flag, or a status_request),
    // so that a flush asks once for what it waits for, however often it is called.
    bool ask_status_ = false;
    std::uint64_t asked_upto_ = 0;
    // flush: under mutex_, the pump that asks for the peer's status (see above).
    void pump_and_ask(Clock::time_point now);
    // now: time_point{} when not read yet (a send): read only when needed before the
    // datagrams leave, else after (a clock read costs 60-100 ns on the virtual machines
    // measured here, on the one-way path of a request-response exchange otherwise).
    void dispatch(Clock::time_point now);
    // under mutex_: datagrams from before were transmitted first (pump, or a multicast).
    void transmitted(std::uint64_t before, Clock::time_point now);
    void throw_if_lost();
    BufferPtr take_locked();
    // under mutex_: the messages before the inbox's next marker, at most batch_most,
    // moved into batch_ (receive hands them out one by one without the lock); how many.
    std::size_t take_batch_locked();
    // The next message of batch_ (there is one).
    BufferPtr next_of_batch() noexcept;
    // under mutex_, after the application took messages: the window reopened by a
    // quarter since the last status tells the sender at once.
    void status_if_reopened();
    // under mutex_. With hold, the last datagram, a pack with room, waits while
    // hold_in_flight datagrams are unacknowledged (the acknowledgement pumps it).
    // now as dispatch's: time_point{} is read when first needed, at the latest after the
    // datagrams left; returns the time it used (time_point{} when it needed none).
    Clock::time_point pump(Clock::time_point now, bool hold = true);
    Clock::time_point pump_datagrams(Clock::time_point now, bool hold);
    // now as pump's, read here when the answer depends on it.
    [[nodiscard]] bool holds(std::uint64_t dseq, Clock::time_point& now) const noexcept;
    bool transmit(std::uint64_t dseq, bool resend);
    // A datagram a NAK asked for: sent again to udp.multicast when it went there and
    // this is the first NAK of it, ignored within nak_interval of that repair, else sent
    // again to this peer (transmit).
    void repair(std::uint64_t dseq, Clock::time_point now);
    bool send_multicast_repair(const OutMessage& m, std::uint64_t index);
    // The message datagram dseq belongs to (null: acknowledged, or not made yet).
    const OutMessage* message_of(std::uint64_t dseq) const;
    // Adds datagram dseq to the batch (false: there is no such datagram), and sends
    // the batch to the peer (how many datagrams went: send_batch).
    bool prepare(std::uint64_t dseq, DatagramBatch& out);
    std::size_t send_batch(DatagramBatch& out);
    // With sign_for, the payload is the welcome MAC over the header and that nonce.
    bool send_control(DatagramType type, std::uint64_t seq, std::uint64_t length,
                      std::span<const std::byte> payload = {}, const ip::Nonce* sign_for = nullptr,
                      std::uint32_t offset = 0);
    void send_status(Clock::time_point now);
    // under mutex_, before the batch leaves: when a status is owed, the batch's last
    // datagram carries it (flag_ack and the trailer) if it has room. True: it does, and
    // status_carried() is called once that datagram left.
    bool carry_status(DatagramBatch& out);
    void status_carried(const AckTrailer& ack);
    // A status is owed (from now, unless it was already).
    void owe_status(Clock::time_point now);
    // Every hole still open (the periodic repeat), but those waiting for their back-off.
    void send_nak(Clock::time_point now);
    void send_nak_range(std::uint64_t first, std::uint64_t count);
    // NAKs the holes between from and to; false when there was none.
    bool nak_holes(std::uint64_t from, std::uint64_t to);
    // A multicast stream's new holes, when their back-off ended.
    void nak_if_due(Clock::time_point now);
    void adopt(std::uint64_t incarnation, Clock::time_point now);
    // With auth_key_file: a hello or welcome, each judged by its nonce or MAC.
    void on_contact_authenticated(const Decoded& d, std::span<const std::byte> bytes, Clock::time_point now);
    // A datagram of an incarnation not proven yet: dropped, and our hello asks it to prove itself.
    void refuse_unproven(Clock::time_point now);
    void send_hello();
    // The welcome, with the MAC over its header and the hello's nonce under auth_key_file.
    void send_welcome(const ip::Nonce* hello_nonce);
    // may_live: given up for silence, the incarnation may answer again (the numbering
    // goes on, it is told what was dropped, and a later loss of it is reported again).
    void lose(const std::string& reason, std::uint64_t unacknowledged, bool mark, bool may_live = false);
    // The messages not acknowledged are dropped; the numbering goes on (skip_to_).
    void drop_unacknowledged();
    // A new incarnation of the peer: the messages queued for it are numbered from 0.
    void renumber();
    void reset_send_side();
    void reset_receive_side();
    // The peer's next expected datagram (from its status, keepalive, welcome or NAK):
    // once it reached skip_to_, nothing is left to skip.
    void peer_expects(std::uint64_t next_expected);
    // A skip, when the peer may still lack datagrams dropped at its loss (at most
    // every resend_timeout), before any data datagram (pump); false while the peer's
    // next expected since the loss is not known (a hello asks it): no data yet.
    bool send_skip_if_due(Clock::time_point now);
    void on_skip(const DatagramHeader& h, Clock::time_point now);
    // The datagrams kept early that are now due, in order.
    void take_early();
    void acknowledge(std::uint64_t next_expected, std::uint64_t window, Clock::time_point now);
    void on_data(const Decoded& d, Clock::time_point now);
    void consume(const DatagramHeader& h, std::span<const std::byte> piece);
    void consume_packed(std::span<const std::byte> frames);
    [[nodiscard]] std::uint64_t advertised() const noexcept;

    std::shared_ptr<Shared> shared_;
    const NodeId id_;
    const std::string name_;
    // The id in the `from` of our datagrams: this factory's, or the run-time id a
    // server looked up gave this client (make_runtime, before any datagram).
    NodeId self_ = 0;
    bool client_ = false;                // a run-time client of this server
    bool gone_ = false;                  // such a client said goodbye or was lost (mutex_)
    std::atomic<bool> forgotten_{false}; // forget_client
    const ip::Address address_;          // empty: the peer has no port (receive only)
    StatsCounters stats_;
    std::atomic<std::uint64_t> queue_depth_{0};

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    bool closed_ = false;
    std::uint64_t peer_incarnation_ = 0; // 0: not known (no datagram from it yet, or lost)
    // The peer incarnation the datagrams of both directions are numbered for (0: none
    // yet). It stays through a loss: a peer given up for silence that lives goes on
    // counting, and only another incarnation numbers from 0 again.
    std::uint64_t numbered_for_ = 0;
    std::uint64_t ended_incarnation_ = 0; // one that said goodbye: its late datagrams are stale
    Clock::time_point last_heard_{};
    Clock::time_point last_sent_{};
    Clock::time_point next_hello_{};
    std::chrono::nanoseconds hello_backoff_{std::chrono::milliseconds(2)};
    // auth_key_file: the nonce our hellos carry (new for each incarnation we trust, and
    // after a loss), the one before it (a late welcome to it is stale, not a bad proof),
    // and when an unproven incarnation may be asked again.
    ip::Nonce nonce_{};
    ip::Nonce previous_nonce_{};
    Clock::time_point next_challenge_{};

    // --- sending: messages not acknowledged, in order ---
    std::deque<OutMessage> out_;
    std::uint64_t next_dseq_ = 0;   // the number of the next datagram made
    std::uint64_t acked_ = 0;       // every datagram before this arrived
    std::uint64_t sent_upto_ = 0;   // every datagram before this was transmitted once
    std::uint64_t peer_limit_ = 0;  // the peer takes datagrams before this
    std::size_t untransmitted_ = 0; // messages not transmitted whole yet (the send queue)
    Clock::time_point last_progress_{};
    // The wait of the next probe while the acknowledgement does not move (resend_most).
    Clock::duration resend_wait_ = resend_timeout;
    Clock::time_point last_ack_{};   // when the acknowledgement last moved
    Clock::time_point last_probe_{}; // of the last window probe (tick)
    bool multicast_ok_ = false;      // the peer joined udp.multicast (its last hello, welcome, status)
    // After a loss of a peer that may live: the first datagram kept (0: nothing to
    // skip), the end (first + count) of every message dropped, in order (how many the
    // peer lacks), the highest next expected the peer stated (and whether it stated
    // one since the loss), and when a skip (or the hello asking) may go out again.
    std::uint64_t skip_to_ = 0;
    std::vector<std::uint64_t> dropped_ends_;
    std::uint64_t peer_expected_ = 0;
    bool expected_heard_ = false;
    Clock::time_point next_skip_{};
    std::vector<std::byte> staging_;
    bool gso_ = true; // false once the kernel refused a GSO send to this peer
    // Our datagrams to this peer leave by a socket of its own, connected to it (made at
    // the first send: link_socket; -1: none, they leave by the factory's socket with
    // the address). A connected UDP socket keeps its route and needs no address per
    // send: 0.3-0.4 us of a 64 B one-way trip of 2.3 us on loopback. It is bound to
    // this node's host with a port of the system's choosing, and never read: the peer
    // answers to the nodes file's port, and tells who sent a datagram by its header.
    static constexpr int link_unopened = -2;
    int link_fd_ = link_unopened;
    int link_socket();

    // --- receiving: datagrams from the peer's incarnation ---
    std::uint64_t expected_ = 0;                            // the next datagram due
    std::uint64_t highest_ = 0;                             // one beyond the highest seen
    std::map<std::uint64_t, std::vector<std::byte>> early_; // arrived before their turn
    BufferPtr assembling_;
    std::byte* assembling_data_ = nullptr;
    std::uint64_t assembling_length_ = 0, assembled_ = 0;
    ip::Inbox inbox_;
    std::deque<std::uint64_t> inbox_datagrams_; // datagrams of each inbox entry
    // The inbox's entries (messages and markers), for a receive that looks without the
    // lock. Stored after each change under mutex_ and read sequentially consistent, as
    // the sleepers' flags are (Shared::ring): a receiver that announced its sleep and
    // then found 0 is woken by the delivery that follows.
    std::atomic<std::size_t> inbox_entries_{0};
    void published() noexcept {
        inbox_entries_.store(inbox_datagrams_.size(), std::memory_order_seq_cst);
        if (!inbox_datagrams_.empty()) mark_ready();
    }
    // under mutex_: the groups this node is a member of look at it (ReadyMarks).
    std::vector<std::pair<std::shared_ptr<ReadyMarks>, std::size_t>> watchers_;
    void mark_ready() noexcept {
        for (const auto& [marks, slot] : watchers_)
            marks->set(slot);
    }
    std::uint64_t held_ = 0; // their sum
    // The receiving thread's (one at a time: Node::receive): messages taken out of the
    // inbox together, under one lock for up to batch_most of them (take_batch_locked),
    // and handed out one by one without it, before anything after them (a loss or gap
    // marker stays in the inbox). A lock per message was 15-20 % of the receiver of a
    // 64 B stream. They no longer count in held_: the window opens by them a little
    // before the application has them. batch_left_: how many are not handed out yet
    // (stored by the receiver, read under mutex_ by forgettable).
    static constexpr std::size_t batch_most = 64;
    std::vector<BufferPtr> batch_;
    std::size_t batch_at_ = 0;
    std::atomic<std::size_t> batch_left_{0};
    std::uint64_t status_sent_expected_ = 0, status_sent_limit_ = 0, since_status_ = 0;
    bool status_owed_ = false;
    bool small_since_status_ = false; // a message of one datagram (packed or not) came since the last status
    // The sender flushes and asked for a status (flag_status_now, status_request): sent
    // at the end of this read (end_of_batch).
    bool status_asked_ = false;
    Clock::time_point status_owed_since_{};
    Clock::time_point last_nak_{};
    // The wait of the next repeated NAK, and the next expected datagram when the last
    // NAK went: unchanged since, the wait doubles (nak_repeat_most).
    Clock::duration nak_wait_{};
    std::uint64_t nak_expected_ = 0;
    // The peer's stream came by udp.multicast (group data arrived): a new hole is NAKed
    // after a random back-off (nak_backoff), from nak_due_, for the holes from nak_from_
    // on (opened since the first of them); the generator is seeded per node by this
    // process's incarnation and the peer's id, so that members draw apart.
    bool group_stream_ = false;
    bool nak_pending_ = false;
    std::uint64_t nak_from_ = 0;
    Clock::time_point nak_due_{};
    std::uint64_t backoff_state_ = 0;
    std::vector<GroupEntry> repair_table_; // the table of a multicast repair being sent

    kit::LossLatch loss_;
    // tick_and_keep: the time of the next tick (steady clock, ns; 0: at once).
    static constexpr std::int64_t ticking = std::numeric_limits<std::int64_t>::max();
    std::atomic<std::int64_t> tick_due_ns_{0};
};

} // namespace msgpass::udp
