// Transport: the factory's one UDP socket, the background thread that reads it and
// hands each datagram that passed decode_datagram to its node, the fault injection
// of udp.inject_*, and the parameters every node shares (see transport.hpp).
#include "transport.hpp"

#include <msgpass/error.hpp>
#include <msgpass/log.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>

namespace msgpass::udp {

Parameters Parameters::from(const config::Configuration& configuration, NodeId self) {
    Parameters p;
    p.self = self;
    p.partition = configuration.partition;
    p.partition_hash = udp::partition_hash(configuration.partition);
    p.max_message_size = std::min<std::uint64_t>(configuration.max_message_size, 0xffffffffull);
    p.peer_timeout = configuration.peer_timeout;
    p.send_queue_limit = configuration.send_queue_limit;
    p.options = configuration.section<Options>();
    p.datagram_size = static_cast<std::size_t>(p.options.datagram_size);
    p.payload = p.datagram_size - header_size;
    // A multicast datagram carries a table of its members: every datagram leaves room
    // for the whole group's (the check of options.cpp keeps it under half a datagram).
    if (p.options.multicasting()) {
        if (auto it = configuration.groups.find(p.options.multicast_group); it != configuration.groups.end())
            p.payload -= std::min(p.payload / 2, group_table_bytes(it->second.size()));
    }
    p.window = p.options.window;
    p.auth_key = configuration.auth_key;
    return p;
}

Shared::Shared(Parameters p) : parameters(std::move(p)), incarnation(ip::new_incarnation()) {}

bool Shared::lend() noexcept {
    if (!receivers_read || closing.load(std::memory_order_seq_cst)) return false;
    if (inside.exchange(true, std::memory_order_seq_cst)) return false; // another receiver (or a reclaim)
    // closing after inside (shutdown stores closing, then waits while inside): one of
    // the two sees the other.
    if (closing.load(std::memory_order_seq_cst) || fd.load() < 0) {
        inside.store(false, std::memory_order_seq_cst);
        return false;
    }
    if (!lent.load(std::memory_order_relaxed)) {
        // The background thread stops waiting on it: out of its epoll set, not only
        // its interest switched off - an entry left there is a waiter on the socket,
        // and every datagram that came and every one of ours freed would wake it
        // (locks taken for nothing, twice per datagram).
        epoll.remove(fd.load());
        lent.store(true, std::memory_order_relaxed);
    }
    return true;
}

void Shared::leave(Clock::time_point began, Clock::time_point now) noexcept {
    if (now - began >= reclaim_after) {
        (void)epoll.add(fd.load(), EPOLLIN, socket_tag); // level-triggered: what came meanwhile wakes it
        lent.store(false, std::memory_order_relaxed);
    }
    left_ns.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    inside.store(false, std::memory_order_seq_cst);
}

void Shared::reclaim_if_idle(Clock::time_point now) noexcept {
    if (!lent.load(std::memory_order_relaxed) ||
        now.time_since_epoch().count() - left_ns.load(std::memory_order_relaxed) <
            std::chrono::nanoseconds(reclaim_after).count())
        return;
    if (inside.exchange(true, std::memory_order_seq_cst)) return; // a receiver is back
    if (lent.load(std::memory_order_relaxed) && fd.load() >= 0) {
        (void)epoll.add(fd.load(), EPOLLIN, socket_tag);
        lent.store(false, std::memory_order_relaxed);
    }
    inside.store(false, std::memory_order_seq_cst);
}

int Shared::sleep_on_socket(std::chrono::nanoseconds timeout, int most) {
    std::lock_guard lock(read_mutex);
    return reader->wait_and_read(timeout, most);
}

void Shared::wake_socket() const noexcept {
    const int socket = fd.load();
    if (socket >= 0)
        (void)::sendto(socket, nullptr, 0, MSG_DONTWAIT | MSG_NOSIGNAL, self_address.get(), self_address.length);
}

bool Shared::poll_socket(Clock::time_point recent) noexcept {
    if (!lend()) return false;
    bool got = false;
    Clock::time_point now = recent; // else read by the reader once something came
    {
        std::unique_lock lock(read_mutex, std::try_to_lock);
        // One datagram a poll (with GRO, one run of a peer's datagrams): a recvmmsg()
        // for more tries the socket again after the first, 0.2 us of a 64 B one-way
        // trip; a receiver that finds no message in it polls again at once.
        if (lock.owns_lock()) got = reader->read_socket(now, 1) > 0;
    }
    // The lend stays. A poll that found nothing reads no clock (a spinning receiver
    // polls every few hundred ns): it leaves as it came, and the time it last left
    // is the last read that found something.
    if (got) {
        leave(now, now);
    } else {
        // A release store, not an exchange: shutdown waits for inside to be false
        // (and a receiver that comes next exchanges it), so what this poll did with
        // the socket happens before either sees it false; a seq_cst store was a
        // locked instruction on every empty poll.
        inside.store(false, std::memory_order_release);
    }
    return got;
}

int Shared::read(int most) {
    std::lock_guard lock(read_mutex);
    auto now = Clock::now();
    return reader->read_socket(now, most);
}

bool Shared::withhold_multicast() noexcept {
    if (!faults || !faults->withhold_at_sender()) return false;
    count(Drop::injected);
    return true;
}

void Shared::log_refusal(const std::string& line) {
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    std::int64_t next = next_log_ns.load(std::memory_order_relaxed);
    if (now < next || !next_log_ns.compare_exchange_strong(next, now + 50'000'000, std::memory_order_relaxed)) return;
    MSGPASS_LOG(udp, warn, "msgpass udp node " + std::to_string(parameters.self) + ": " + line);
}

// ---------------------------------------------------------------- transport

namespace {
// SO_RCVBUF / SO_SNDBUF as asked (forced when the process may), with one warning
// per process when the kernel gives less. Returns the receive buffer the kernel
// accounts (SO_RCVBUF as read back: twice what was set, overhead included).
std::uint64_t size_buffers(int fd, std::uint64_t want, const std::string& where) {
    // The kernel keeps at most INT_MAX / 2 (it stores twice the size in an int): 1 GiB,
    // the most the option takes, is asked as that, or it would be "less" by one byte.
    const int asked = static_cast<int>(std::min<std::uint64_t>(want, INT_MAX / 2));
    for (auto [force, plain] : {std::pair{SO_RCVBUFFORCE, SO_RCVBUF}, std::pair{SO_SNDBUFFORCE, SO_SNDBUF}}) {
        if (::setsockopt(fd, SOL_SOCKET, force, &asked, sizeof asked) != 0)
            (void)::setsockopt(fd, SOL_SOCKET, plain, &asked, sizeof asked);
    }
    int got = 0;
    socklen_t len = sizeof got;
    if (::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got / 2 < asked) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
            MSGPASS_LOG(udp, warn,
                        "msgpass udp " + where + ": the kernel gave a receive buffer of " + std::to_string(got / 2) +
                            " bytes, below udp.socket_buffer (" + std::to_string(asked) +
                            " bytes); raise net.core.rmem_max (sysctl) to get it");
        }
    }
    return got > 0 ? static_cast<std::uint64_t>(got) : 0;
}
} // namespace

Transport::Transport(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), shared_(std::make_shared<Shared>(Parameters::from(configuration, self))) {
    // A client (NodeFactory::create_client) has no node of the nodes file: its socket
    // is bound to a port of the system's choosing, and its peers are the servers it
    // looks up (clients.cpp).
    const bool client = self == no_node;
    config::NodeConfig me;
    if (client) {
        me.host = "0.0.0.0";
    } else {
        me = configuration_.node(self);
    }
    const std::string where =
        client ? std::string("udp client") : configuration_.nodes_file.string() + ": node " + std::to_string(self);
    if (me.port == 0 && !client) throw ConfigError(where + ": port: the udp technology needs a port for every node");
    for (const auto& n : configuration_.nodes) {
        if (n.id == self) continue;
        ip::Address address;
        if (n.port != 0) {
            address = ip::resolve(n.host, n.port, SOCK_DGRAM, false,
                                  configuration_.nodes_file.string() + ": node " + std::to_string(n.id) + ": host");
        }
        nodes_.emplace(n.id, std::make_shared<UdpNode>(shared_, n, std::move(address)));
    }
    shared_->self_address = ip::resolve(me.host, me.port, SOCK_DGRAM, true, where + ": host");
    shared_->fd = ip::bind_socket(shared_->self_address, SOCK_DGRAM, 0, where);
    if (client) { // the port bound, on loopback: the empty datagram of a wake-up goes there
        sockaddr_in bound{};
        socklen_t length = sizeof bound;
        (void)::getsockname(shared_->fd, reinterpret_cast<sockaddr*>(&bound), &length);
        shared_->self_address = ip::resolve("127.0.0.1", ntohs(bound.sin_port), SOCK_DGRAM, false, where);
        me.port = ntohs(bound.sin_port);
    }
    // Blocking, so that the receiver the socket is lent to can block in recvmmsg();
    // every other call on it says MSG_DONTWAIT.
    if (const int flags = ::fcntl(shared_->fd, F_GETFL); flags >= 0)
        (void)::fcntl(shared_->fd, F_SETFL, flags & ~O_NONBLOCK);
    // UDP GSO (a message's datagrams in one send: sender.cpp) when the kernel knows it.
    const int no_segment = 0;
    shared_->gso = ::setsockopt(shared_->fd, SOL_UDP, UDP_SEGMENT, &no_segment, sizeof no_segment) == 0;
    port_ = me.port;
    const std::uint64_t buffer = size_buffers(shared_->fd, shared_->parameters.options.socket_buffer, where);
    // The window never holds more datagrams than the socket's buffer: beyond it the
    // kernel drops them, and each drop costs a repair. (Every peer's window shares
    // this buffer.)
    auto& p = shared_->parameters;
    p.window = std::min<std::uint64_t>(p.window, std::max<std::uint64_t>(16, buffer / (p.datagram_size + 512)));
    if (p.options.multicasting() && !client) open_multicast(me, where);
    expect_ = Expect{p.partition_hash, p.self, p.max_message_size, p.datagram_size, &Transport::knows, this};
    expect_.newcomers = p.options.max_clients > 0 && !client;
    // Any process may look a udp server up, which then addresses it by the run-time
    // id it gave: `to` is checked per node (handle), against the id it knows us by.
    expect_.client = true;
    // udp.inject_*: every fault goes through the one interface of ip/common (fault.hpp).
    const ip::FaultRates rates{p.options.inject_loss, p.options.inject_duplicate, p.options.inject_reorder,
                               p.options.inject_multicast_loss, p.options.inject_seed};
    shared_->faults =
        std::make_unique<ip::RandomFaults>(rates, p.options.inject_seed ^ (std::uint64_t{self} * 0x9e3779b97f4a7c15ull),
                                           p.options.inject_seed ^ (std::uint64_t{self} * 0xd1b54a32d192ed03ull));
    injecting_ = shared_->faults->on_receipt_active();
    // The largest datagram a peer sends: a data piece, or a NAK of max_nak_ranges.
    const std::size_t largest = std::max(p.datagram_size, header_size + 16 * max_nak_ranges) + 1;
    // UDP GRO: a peer's GSO send (its packs of small messages, a large message's
    // pieces) arrives as one read instead of one per datagram.
    const int on = 1;
    const bool gro = ::setsockopt(shared_->fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    unicast_.size(largest, gro);
    if (multicast_fd_ >= 0) multicast_.size(largest);
    unicast_.touched.reserve(nodes_.size());
    multicast_.touched.reserve(nodes_.size());
    auto& epoll = shared_->epoll;
    if (!epoll.add(shared_->fd, EPOLLIN, socket_tag) || !epoll.add(wake_.fd(), EPOLLIN, wake_tag) ||
        (multicast_fd_ >= 0 && !epoll.add(multicast_fd_, EPOLLIN, multicast_tag))) {
        const int error = errno;
        ::close(shared_->fd.exchange(-1));
        if (multicast_fd_ >= 0) ::close(std::exchange(multicast_fd_, -1));
        throw ResourceError(where + ": cannot watch the udp socket: " + std::strerror(error));
    }
    shared_->reader = this;
    shared_->receivers_read = !injecting_; // fault injection is the background thread's alone
    thread_ = std::thread([this] { run(); });
}

// udp.multicast: the socket sends to the group's address through the interface
// (udp.multicast_interface, else the node's own host), and a member of the group
// joins the address on a second socket bound to it. What the system refuses is said
// once on stderr, and the group sends per member (docs/udp.md).
void Transport::open_multicast(const config::NodeConfig& me, const std::string& where) {
    auto& o = shared_->parameters.options;
    auto warn = [&](const char* what) {
        const int error = errno; // before the line's strings are made
        MSGPASS_LOG(udp, warn,
                    "msgpass udp " + where + ": udp.multicast " + o.multicast + ": " + what + " (" +
                        std::strerror(error) + "); group '" + o.multicast_group + "' sends per member");
    };
    in_addr interface {};
    if (!o.multicast_interface.empty()) {
        (void)::inet_pton(AF_INET, o.multicast_interface.c_str(), &interface);
    } else {
        const auto own = ip::resolve(me.host, me.port, SOCK_DGRAM, true, where + ": host");
        if (own.family() == AF_INET) interface = reinterpret_cast<const sockaddr_in*>(own.get())->sin_addr;
    }
    auto& a = shared_->multicast_address;
    a.sin_family = AF_INET;
    a.sin_port = htons(o.multicast_port);
    a.sin_addr.s_addr = htonl(o.multicast_address);
    const int fd = shared_->fd;
    const int ttl = static_cast<int>(o.multicast_ttl);
    const int loop = 1;
    if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &interface, sizeof interface) != 0 ||
        ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl) != 0 ||
        ::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop) != 0) {
        warn("the socket cannot send multicast");
    } else {
        shared_->multicast_up = true;
    }
    const auto& members = configuration_.groups.at(o.multicast_group);
    if (std::find(members.begin(), members.end(), shared_->parameters.self) == members.end()) return;
    const int m = ip::open_socket(AF_INET, SOCK_DGRAM);
    const int on = 1;
    ip_mreq join{};
    join.imr_multiaddr = a.sin_addr;
    join.imr_interface = interface;
    if (m < 0 || ::setsockopt(m, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        ::bind(m, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
        ::setsockopt(m, IPPROTO_IP, IP_ADD_MEMBERSHIP, &join, sizeof join) != 0) {
        warn("this member cannot join it");
        if (m >= 0) ::close(m);
        return;
    }
    (void)size_buffers(m, o.socket_buffer, where + " (multicast)");
    multicast_fd_ = m;
    shared_->joined = true;
}

Transport::~Transport() {
    shutdown(Clock::now());
}

std::shared_ptr<UdpNode> Transport::node(NodeId id) const {
    auto it = nodes_.find(id);
    return it == nodes_.end() ? nullptr : it->second;
}

void Transport::shutdown(SteadyTime deadline) {
    if (stopped_) return;
    stopped_ = true;
    const auto runtime = runtime_nodes();
    for (auto& [id, n] : nodes_)
        (void)n->wait_acknowledged(deadline);
    for (const auto& n : runtime)
        (void)n->wait_acknowledged(deadline);
    for (auto& [id, n] : nodes_)
        n->close();
    for (const auto& n : runtime)
        n->close();
    // No receiver may sleep on the socket or read it once it is closed: none is lent
    // it any more, and the one inside is woken and leaves.
    shared_->closing.store(true, std::memory_order_seq_cst);
    while (shared_->inside.load(std::memory_order_seq_cst)) {
        shared_->wake_socket();
        std::this_thread::yield();
    }
    stop_.store(true);
    wake_.ring();
    if (thread_.joinable()) thread_.join();
    ::close(shared_->fd.exchange(-1));
    if (multicast_fd_ >= 0) ::close(std::exchange(multicast_fd_, -1));
}

UdpNode* Transport::handle(std::span<const std::byte> bytes, Clock::time_point now, Source from) {
    const Decoded d = decode_datagram(bytes, expect_);
    if (!d.ok) {
        // (the answer of a server this process is looking up comes from no node yet)
        if ((d.drop == Drop::unknown_sender || d.drop == Drop::wrong_target) && answer_lookup(bytes, from))
            return nullptr;
        shared_->count(d.drop);
        return nullptr;
    }
    if (d.newcomer) [[unlikely]]
        return on_newcomer(d, bytes, from, now);
    UdpNode* n = nullptr;
    if (auto it = nodes_.find(d.header.from); it != nodes_.end()) [[likely]] {
        n = it->second.get();
    } else {
        // A run-time peer: it stays in runtime_ while this batch holds the pointer
        // (it leaves only with read_mutex, or in this background thread).
        n = runtime_node(d.header.from).get();
        if (n == nullptr) { // forgotten since the decode
            shared_->count(Drop::unknown_sender);
            return nullptr;
        }
    }
    if (d.header.to != n->self_as_seen()) [[unlikely]] {
        shared_->count(Drop::wrong_target);
        return nullptr;
    }
    n->on_datagram(d, bytes, now);
    n->touch();
    return n;
}

// udp.inject_* (Shared::faults): a data, status, NAK or skip datagram is dropped, handled twice, or held
// back behind the next datagram.
UdpNode* Transport::inject(std::span<const std::byte> bytes, Clock::time_point now, Batch& batch, Source from) {
    bool subject = false;
    if (bytes.size() >= header_size) {
        DatagramHeader h;
        std::memcpy(&h, bytes.data(), header_size);
        const auto t = static_cast<DatagramType>(h.type);
        subject = t == DatagramType::data || t == DatagramType::group_data || t == DatagramType::status ||
                  t == DatagramType::nak || t == DatagramType::skip;
    }
    const auto action = subject ? shared_->faults->on_receipt(held_.empty()) : ip::FaultInjector::Action::deliver;
    if (action == ip::FaultInjector::Action::drop) {
        shared_->count(Drop::injected);
        return nullptr;
    }
    if (action == ip::FaultInjector::Action::hold) {
        held_.assign(bytes.begin(), bytes.end());
        return nullptr;
    }
    UdpNode* n = handle(bytes, now, from);
    if (action == ip::FaultInjector::Action::duplicate) handle(bytes, now, from);
    if (!held_.empty()) {
        std::vector<std::byte> later;
        later.swap(held_);
        if (UdpNode* m = handle(later, now, Source{}); m != nullptr && m != n) batch.touched.push_back(m);
    }
    return n;
}

void Transport::Batch::size(std::size_t bytes, bool with_gro) {
    largest = bytes;
    gro = with_gro;
    each = gro ? std::size_t{65536} : bytes;
    storage.assign(batch * each, std::byte{0});
    for (std::size_t i = 0; i < batch; ++i) {
        iov[i] = {storage.data() + i * each, each};
        messages[i] = mmsghdr{};
        messages[i].msg_hdr.msg_iov = &iov[i];
        messages[i].msg_hdr.msg_iovlen = 1;
        messages[i].msg_hdr.msg_name = &from[i];
        if (gro) messages[i].msg_hdr.msg_control = control[i].bytes.data();
    }
}

void Transport::Batch::prepare(unsigned count) {
    for (unsigned i = 0; i < count; ++i) {
        messages[i].msg_hdr.msg_flags = 0;
        messages[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        if (gro) messages[i].msg_hdr.msg_controllen = control[i].bytes.size();
    }
}

std::size_t Transport::Batch::segment(std::size_t i) const noexcept {
    const msghdr& h = messages[i].msg_hdr;
    if (gro) {
        for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr;
             c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
            if (c->cmsg_level != SOL_UDP || c->cmsg_type != UDP_GRO) continue;
            int size = 0;
            std::memcpy(&size, CMSG_DATA(c), sizeof size);
            if (size > 0) return static_cast<std::size_t>(size);
        }
    }
    return messages[i].msg_len;
}

// An empty datagram from this socket to itself: the wake-up of a receiver blocked on
// it (Shared::ring), nothing to count.
namespace {
bool own_wake(const mmsghdr& m, const ip::Address& self) {
    if (m.msg_len != 0 || m.msg_hdr.msg_namelen != self.length) return false;
    const auto* a = static_cast<const sockaddr*>(m.msg_hdr.msg_name);
    if (a->sa_family == AF_INET && self.family() == AF_INET)
        return reinterpret_cast<const sockaddr_in*>(a)->sin_port ==
               reinterpret_cast<const sockaddr_in*>(self.get())->sin_port;
    if (a->sa_family == AF_INET6 && self.family() == AF_INET6)
        return reinterpret_cast<const sockaddr_in6*>(a)->sin6_port ==
               reinterpret_cast<const sockaddr_in6*>(self.get())->sin6_port;
    return false;
}
} // namespace

void Transport::take(Batch& b, int fd, int n, Clock::time_point now) {
    for (int i = 0; i < n; ++i) {
        const auto& m = b.messages[static_cast<std::size_t>(i)];
        const std::span<const std::byte> all(b.storage.data() + static_cast<std::size_t>(i) * b.each, m.msg_len);
        if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) { // longer than any datagram a peer sends
            shared_->count(Drop::bad_fragment);
            continue;
        }
        if (fd != multicast_fd_ && own_wake(m, shared_->self_address)) continue;
        // The datagrams the kernel kept together (UDP GRO), one by one.
        const std::size_t segment = b.segment(static_cast<std::size_t>(i));
        if (segment >= b.largest) { // (alone: as if it arrived cut)
            shared_->count(Drop::bad_fragment);
            continue;
        }
        for (std::size_t at = 0; at == 0 || at < all.size(); at += segment) {
            const auto bytes = all.subspan(at, std::min(segment, all.size() - at));
            if (fd == multicast_fd_ && bytes.size() >= header_size) { // our own group sends, looped back
                std::uint32_t from = 0;
                std::memcpy(&from, bytes.data() + offsetof(DatagramHeader, from), sizeof from);
                if (from == shared_->parameters.self) continue;
            }
            const Source from{&b.from[static_cast<std::size_t>(i)], m.msg_hdr.msg_namelen};
            UdpNode* node = injecting_ ? inject(bytes, now, b, from) : handle(bytes, now, from);
            if (node != nullptr && std::find(b.touched.begin(), b.touched.end(), node) == b.touched.end())
                b.touched.push_back(node);
            if (segment == 0) break;
        }
    }
}

int Transport::read_from(int fd, Clock::time_point& now, int most) {
    Batch& b = fd == multicast_fd_ ? multicast_ : unicast_;
    int got = 0;
    while (got < most) {
        const auto want = static_cast<unsigned>(std::min<int>(most - got, Batch::batch));
        b.prepare(want);
        int n = 0;
        if (want == 1) { // (a poll: recvmsg() costs a little less than recvmmsg() of one)
            const ssize_t bytes = ::recvmsg(fd, &b.messages[0].msg_hdr, MSG_DONTWAIT);
            n = bytes >= 0 ? 1 : -1;
            if (bytes >= 0) b.messages[0].msg_len = static_cast<unsigned>(bytes);
        } else {
            n = ::recvmmsg(fd, b.messages.data(), want, MSG_DONTWAIT, nullptr);
        }
        if (n <= 0) break;
        got += n;
        if (now == Clock::time_point{}) now = Clock::now(); // (a poll: read once something came)
        take(b, fd, n, now);
        if (static_cast<unsigned>(n) < want) break; // the socket had no more
    }
    return got;
}

// The statuses owed after a batch, by the nodes that got datagrams in it.
Clock::time_point Transport::end_of_batch(Batch& b, Clock::time_point now) {
    auto due = Clock::time_point::max();
    for (UdpNode* n : b.touched)
        due = std::min(due, n->end_of_batch(now));
    b.touched.clear();
    return due;
}

// A receiver the socket is lent to reads. The timers stay the background thread's;
// when they are not due within status_delay of a status now owed (or soon, when no
// peer was known: a datagram read here, a hello, the first data, may make them due),
// it is woken to see. While the socket is lent the thread's timers run at least every
// status_delay (run), so a status waits at most twice that, and a request-response
// exchange wakes the thread from no receive: each such wake-up was an eventfd write
// on the receiver's way to its message and, on a process pinned to one CPU, a switch
// to the background thread before the reply (one every 16 messages or so, when the
// status the 16th message sends had made the thread's next tick a late one).
// A time given by the caller (given) may be some microseconds old: before the thread
// is woken for it, the clock says whether it must be.
void Transport::after_receiver_read(Batch& b, Clock::time_point now, bool given) {
    receiver_read_ns_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    const auto owed = end_of_batch(b, now);
    const auto status_delay = shared_->parameters.options.status_delay;
    auto due = std::min(owed, now + resend_timeout) + status_delay;
    if (next_tick_ns_.load(std::memory_order_relaxed) <= due.time_since_epoch().count()) return;
    if (given) {
        const auto fresh = Clock::now();
        due = std::min(owed, fresh + resend_timeout) + status_delay;
        if (next_tick_ns_.load(std::memory_order_relaxed) <= due.time_since_epoch().count()) return;
    }
    wake_.ring();
}

int Transport::read_socket(Clock::time_point& now, int most) {
    const int fd = shared_->fd.load();
    if (fd < 0) return 0;
    const bool given = now != Clock::time_point{};
    const int got = read_from(fd, now, most);
    if (got > 0) after_receiver_read(unicast_, now, given);
    return got;
}

int Transport::wait_and_read(std::chrono::nanoseconds timeout, int most) {
    const int fd = shared_->fd.load();
    if (fd < 0) return 0;
    // SO_RCVTIMEO bounds the blocking read (the background thread's reads do not block);
    // set only when it changes: a wait of the longest step (100 ms) sets it once.
    const long us = std::max<long>(1, static_cast<long>((timeout.count() + 999) / 1000));
    if (us != timeout_us_) {
        const timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
        if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0) timeout_us_ = us;
    }
    Batch& b = unicast_;
    const auto want = static_cast<unsigned>(std::clamp<int>(most, 1, Batch::batch));
    b.prepare(want);
    const int n = ::recvmmsg(fd, b.messages.data(), want, MSG_WAITFORONE, nullptr);
    // Awake: what this thread delivers now needs no wake-up (Shared::ring).
    shared_->socket_sleeping.store(false, std::memory_order_seq_cst);
    if (n <= 0) return 0; // the timeout (EAGAIN), or a signal
    auto now = Clock::now();
    take(b, fd, n, now);
    int got = n;
    if (static_cast<unsigned>(n) == want && got < most) got += read_from(fd, now, most - got);
    after_receiver_read(b, now);
    return got;
}

void Transport::run() {
    auto next_tick = Clock::now();
    std::array<epoll_event, 4> events{};
    while (!stop_.load()) {
        auto now = Clock::now();
        const auto wait = std::max<Clock::duration>(next_tick - now, Clock::duration::zero());
        const int n = shared_->epoll.wait(events, wait);
        bool socket = false, multicast = false, woken = false;
        for (int i = 0; i < n; ++i) {
            if (events[static_cast<std::size_t>(i)].data.u64 == wake_tag) {
                wake_.drain();
                woken = true; // (a receiver that read the socket: the timers may be due sooner)
            }
            socket = socket || events[static_cast<std::size_t>(i)].data.u64 == socket_tag;
            multicast = multicast || events[static_cast<std::size_t>(i)].data.u64 == multicast_tag;
        }
        now = Clock::now();
        shared_->reclaim_if_idle(now); // (a receiver that left it for long: read it again)
        bool got = false;
        if (socket) {
            // A receiver that has it lent by now (and may block in it holding the
            // mutex) reads it: nothing to do here.
            std::unique_lock lock(shared_->read_mutex, std::try_to_lock);
            if (lock.owns_lock()) {
                got = read_from(shared_->fd.load(), now) > 0;
                (void)end_of_batch(unicast_, now);
            }
        }
        if (multicast && multicast_fd_ >= 0) { // the background thread's alone
            // All of it (a bounded number of batches), before the timers send the NAKs
            // that backed off: a hole may be a datagram still there.
            for (int i = 0, n = 256; i < 16 && n == 256; ++i) {
                n = read_from(multicast_fd_, now);
                got = n > 0 || got;
            }
            (void)end_of_batch(multicast_, now);
        }
        if (got || woken || now >= next_tick) {
            if (multicast_fd_ >= 0 && !socket && shared_->lent.load(std::memory_order_relaxed)) {
                // A member of the multicast group, its socket lent to receivers, none
                // reading it now: what came there first, before the timers send the NAKs
                // that backed off (a hole in a multicast stream may be a datagram sent to
                // the member alone, still in this socket).
                std::unique_lock lock(shared_->read_mutex, std::try_to_lock);
                if (lock.owns_lock() && !shared_->inside.load(std::memory_order_seq_cst)) {
                    (void)read_from(shared_->fd.load(), now);
                    (void)end_of_batch(unicast_, now);
                }
            }
            if (!held_.empty()) {
                std::vector<std::byte> later;
                later.swap(held_);
                handle(later, now, Source{});
            }
            shared_->timer_runs.fetch_add(1, std::memory_order_relaxed);
            next_tick = now + std::chrono::milliseconds(50);
            const std::int64_t now_ns = now.time_since_epoch().count();
            std::uint64_t ticked = 0;
            for (auto& [id, node] : nodes_) {
                if (const std::int64_t due = node->tick_due_ns(); due > now_ns) {
                    next_tick = std::min(next_tick, Clock::time_point(Clock::duration(due)));
                } else {
                    next_tick = std::min(next_tick, node->tick_and_keep(now));
                    ++ticked;
                }
            }
            shared_->node_ticks.fetch_add(ticked, std::memory_order_relaxed);
            if (has_runtime_.load(std::memory_order_acquire)) { // peers found at run time (clients.cpp)
                for (const auto& node : runtime_nodes())
                    next_tick = std::min(next_tick, node->tick(now));
                forget_gone_clients();
            }
            // Receivers read the socket: the statuses they come to owe are sent from here
            // without waking this thread (after_receiver_read) - while they read. A
            // receiver that waits and reads nothing leaves the timers to the nodes
            // (docs/udp.md, "Timers while a receiver waits"): a run of the timers looks at
            // every node of the nodes file, and 128 processes of 129 nodes each waiting
            // so (a fan-in's senders waiting for their command) ran them 1000 times a
            // second each, more than the machine's 2 CPUs, and the receiver's background
            // thread, preempted, fell silent for peer_timeout. The first read after
            // such a wait wakes this thread when its timers are late for it.
            if (shared_->lent.load(std::memory_order_relaxed) &&
                now.time_since_epoch().count() - receiver_read_ns_.load(std::memory_order_relaxed) <
                    std::chrono::nanoseconds(receivers_reading).count())
                next_tick = std::min(next_tick, now + shared_->parameters.options.status_delay);
            next_tick = std::max(next_tick, now + std::chrono::microseconds(500));
            next_tick_ns_.store(next_tick.time_since_epoch().count(), std::memory_order_relaxed);
        }
    }
}

} // namespace msgpass::udp
