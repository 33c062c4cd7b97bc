// Engine: the factory's one UDP socket, the background thread that reads it and
// hands each datagram that passed decode_datagram to its node, the fault injection
// of udp.inject_*, and the parameters every node shares (see engine.hpp).
#include "engine.hpp"

#include <msgpass/error.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

void Shared::log_refusal(const std::string& line) {
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    std::int64_t next = next_log_ns.load(std::memory_order_relaxed);
    if (now < next || !next_log_ns.compare_exchange_strong(next, now + 50'000'000, std::memory_order_relaxed)) return;
    std::fprintf(stderr, "msgpass udp node %u: %s\n", parameters.self, line.c_str());
}

// ---------------------------------------------------------------- engine

namespace {
bool knows_peer(const void* context, std::uint32_t id) {
    const auto* nodes = static_cast<const std::map<NodeId, std::shared_ptr<UdpNode>>*>(context);
    return nodes->contains(id);
}

// SO_RCVBUF / SO_SNDBUF as asked (forced when the process may), with one warning
// per process when the kernel gives less. Returns the receive buffer the kernel
// accounts (SO_RCVBUF as read back: twice what was set, overhead included).
std::uint64_t size_buffers(int fd, std::uint64_t want, const std::string& where) {
    const int asked = static_cast<int>(std::min<std::uint64_t>(want, 1u << 30));
    for (auto [force, plain] : {std::pair{SO_RCVBUFFORCE, SO_RCVBUF}, std::pair{SO_SNDBUFFORCE, SO_SNDBUF}}) {
        if (::setsockopt(fd, SOL_SOCKET, force, &asked, sizeof asked) != 0)
            (void)::setsockopt(fd, SOL_SOCKET, plain, &asked, sizeof asked);
    }
    int got = 0;
    socklen_t len = sizeof got;
    if (::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 && got / 2 < asked) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true)) {
            std::fprintf(stderr,
                         "msgpass udp %s: the kernel gave a receive buffer of %d bytes, below udp.socket_buffer (%d "
                         "bytes); raise net.core.rmem_max (sysctl) to get it\n",
                         where.c_str(), got / 2, asked);
        }
    }
    return got > 0 ? static_cast<std::uint64_t>(got) : 0;
}
} // namespace

Engine::Engine(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), shared_(std::make_shared<Shared>(Parameters::from(configuration, self))) {
    const auto& me = configuration_.node(self);
    const std::string where = configuration_.nodes_file.string() + ": node " + std::to_string(self);
    if (me.port == 0) throw ConfigError(where + ": port: the udp technology needs a port for every node");
    for (const auto& n : configuration_.nodes) {
        if (n.id == self) continue;
        ip::Address address;
        if (n.port != 0) {
            address = ip::resolve(n.host, n.port, SOCK_DGRAM, false,
                                  configuration_.nodes_file.string() + ": node " + std::to_string(n.id) + ": host");
        }
        nodes_.emplace(n.id, std::make_shared<UdpNode>(shared_, n, std::move(address)));
    }
    shared_->fd =
        ip::bind_socket(ip::resolve(me.host, me.port, SOCK_DGRAM, true, where + ": host"), SOCK_DGRAM, 0, where);
    port_ = me.port;
    const std::uint64_t buffer = size_buffers(shared_->fd, shared_->parameters.options.socket_buffer, where);
    // The window never holds more datagrams than the socket's buffer: beyond it the
    // kernel drops them, and each drop costs a repair. (Every peer's window shares
    // this buffer.)
    auto& p = shared_->parameters;
    p.window = std::min<std::uint64_t>(p.window, std::max<std::uint64_t>(16, buffer / (p.datagram_size + 512)));
    if (p.options.multicasting()) open_multicast(me, where);
    expect_ = Expect{p.partition_hash, p.self, p.max_message_size, p.datagram_size, knows_peer, &nodes_};
    random_.seed(p.options.inject_seed ^ (std::uint64_t{self} * 0x9e3779b97f4a7c15ull));
    thread_ = std::thread([this] { run(); });
}

// udp.multicast: the socket sends to the group's address through the interface
// (udp.multicast_interface, else the node's own host), and a member of the group
// joins the address on a second socket bound to it. What the system refuses is said
// once on stderr, and the group sends per member (docs/udp.md).
void Engine::open_multicast(const config::NodeConfig& me, const std::string& where) {
    auto& o = shared_->parameters.options;
    auto warn = [&](const char* what) {
        std::fprintf(stderr, "msgpass udp %s: udp.multicast %s: %s (%s); group '%s' sends per member\n", where.c_str(),
                     o.multicast.c_str(), what, std::strerror(errno), o.multicast_group.c_str());
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

Engine::~Engine() {
    shutdown(Clock::now());
}

std::shared_ptr<UdpNode> Engine::node(NodeId id) const {
    auto it = nodes_.find(id);
    return it == nodes_.end() ? nullptr : it->second;
}

void Engine::shutdown(SteadyTime deadline) {
    if (stopped_) return;
    stopped_ = true;
    for (auto& [id, n] : nodes_)
        (void)n->wait_acknowledged(deadline);
    for (auto& [id, n] : nodes_)
        n->close();
    stop_.store(true);
    wake_.ring();
    if (thread_.joinable()) thread_.join();
    ::close(shared_->fd.exchange(-1));
    if (multicast_fd_ >= 0) ::close(std::exchange(multicast_fd_, -1));
}

void Engine::handle(std::span<const std::byte> bytes, Clock::time_point now) {
    const Decoded d = decode_datagram(bytes, expect_);
    if (!d.ok) {
        shared_->count(d.drop);
        return;
    }
    node(d.header.from)->on_datagram(d, bytes, now);
}

// udp.inject_*: a data, status, NAK or skip datagram is dropped, handled twice, or held
// back behind the next datagram.
void Engine::inject(std::span<const std::byte> bytes, Clock::time_point now) {
    const auto& o = shared_->parameters.options;
    bool subject = false;
    if (bytes.size() >= header_size) {
        DatagramHeader h;
        std::memcpy(&h, bytes.data(), header_size);
        const auto t = static_cast<DatagramType>(h.type);
        subject = t == DatagramType::data || t == DatagramType::group_data || t == DatagramType::status ||
                  t == DatagramType::nak || t == DatagramType::skip;
    }
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (subject && o.inject_loss > 0 && u(random_) < o.inject_loss) {
        shared_->count(Drop::injected);
        return;
    }
    if (subject && o.inject_reorder > 0 && held_.empty() && u(random_) < o.inject_reorder) {
        held_.assign(bytes.begin(), bytes.end());
        return;
    }
    handle(bytes, now);
    if (subject && o.inject_duplicate > 0 && u(random_) < o.inject_duplicate) handle(bytes, now);
    if (!held_.empty()) {
        std::vector<std::byte> later;
        later.swap(held_);
        handle(later, now);
    }
}

void Engine::run() {
    std::vector<std::byte> buffer(65536);
    const auto& o = shared_->parameters.options;
    const bool injecting = o.inject_loss > 0 || o.inject_duplicate > 0 || o.inject_reorder > 0;
    auto next_tick = Clock::now();
    while (!stop_.load()) {
        auto now = Clock::now();
        const auto wait = std::max<Clock::duration>(next_tick - now, Clock::duration::zero());
        pollfd fds[3] = {{shared_->fd.load(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}, {multicast_fd_, POLLIN, 0}};
        const timespec ts{static_cast<time_t>(std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
                          static_cast<long>((wait % std::chrono::seconds(1)).count())};
        (void)::ppoll(fds, multicast_fd_ >= 0 ? 3 : 2, &ts, nullptr);
        if (fds[1].revents != 0) wake_.drain();
        now = Clock::now();
        bool got = false;
        for (const int fd : {shared_->fd.load(), multicast_fd_}) {
            if (fd < 0) continue;
            for (int i = 0; i < 256; ++i) {
                const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
                if (n < 0) break;
                got = true;
                const std::span<const std::byte> bytes(buffer.data(), static_cast<std::size_t>(n));
                if (fd == multicast_fd_ && bytes.size() >= header_size) { // our own group sends, looped back
                    std::uint32_t from = 0;
                    std::memcpy(&from, bytes.data() + offsetof(DatagramHeader, from), sizeof from);
                    if (from == shared_->parameters.self) continue;
                }
                if (injecting) {
                    inject(bytes, now);
                } else {
                    handle(bytes, now);
                }
            }
        }
        if (got) {
            for (auto& [id, n] : nodes_)
                n->end_of_batch(now);
        }
        if (got || now >= next_tick) {
            if (!held_.empty()) {
                std::vector<std::byte> later;
                later.swap(held_);
                handle(later, now);
            }
            next_tick = now + std::chrono::milliseconds(50);
            for (auto& [id, n] : nodes_)
                next_tick = std::min(next_tick, n->tick(now));
            next_tick = std::max(next_tick, now + std::chrono::microseconds(500));
        }
    }
}

} // namespace msgpass::udp
