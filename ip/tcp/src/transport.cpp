// Transport (transport.hpp): the listening socket, the acceptor's side of the
// handshakes, and the background thread that opens, repairs and drains the
// connections of every TcpNode of one factory.
#include "node.hpp"
#include <msgpass/log.hpp>

#include <fcntl.h>

#include <msgpass/ip/socket.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <sys/epoll.h>
#include <unistd.h>

namespace msgpass::tcp {

namespace {

std::uint64_t event_data(Tag tag, std::uint64_t value) {
    return (static_cast<std::uint64_t>(tag) << 56) | value;
}

} // namespace

Parameters Parameters::from(const config::Configuration& configuration, NodeId self) {
    Parameters p;
    p.self = self;
    p.partition = configuration.partition;
    p.max_message_size = configuration.max_message_size;
    p.peer_timeout = configuration.peer_timeout;
    p.send_queue_limit = configuration.send_queue_limit;
    const auto& options = configuration.section<Options>();
    p.handshake_timeout = options.handshake_timeout.value_or(
        std::min<std::chrono::milliseconds>(configuration.peer_timeout, std::chrono::seconds(2)));
    p.ack_every = options.ack_every;
    p.ack_bytes = options.ack_bytes;
    p.receive_spin = std::chrono::microseconds(options.receive_spin_us);
    p.backoff_max = std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(100), configuration.peer_timeout / 4);
    p.auth_key = configuration.auth_key;
    p.max_clients = options.max_clients;
    p.compact_frames = options.compact_frames;
    return p;
}

Shared::Shared(Parameters p)
    : parameters(std::move(p)), incarnation(ip::new_incarnation()),
      compact_frames(parameters.compact_frames && parameters.max_message_size <= compact_reader_max_message) {}

Transport::Transport(const config::Configuration& configuration, NodeId self)
    : configuration_(configuration), shared_(std::make_shared<Shared>(Parameters::from(configuration, self))) {
    if (configuration_.partition.size() > max_partition_length) {
        throw ConfigError(configuration_.network_file.string() + ": partition: at most " +
                          std::to_string(max_partition_length) + " bytes with the tcp technology, found " +
                          std::to_string(configuration_.partition.size()));
    }
    if (self != no_node) { // a client (NodeFactory::create_client) listens nowhere
        const auto& me = configuration_.node(self);
        const std::string where = configuration_.nodes_file.string() + ": node " + std::to_string(self);
        if (me.port == 0) throw ConfigError(where + ": port: the tcp technology needs a port for every node");
        listen_fd_ = ip::bind_socket(ip::resolve(me.host, me.port, SOCK_STREAM, true, where + ": host"), SOCK_STREAM,
                                     1024, where);
        port_ = me.port;
    }
    // Known: the nodes file's ids, and the run-time clients not forgotten yet.
    acceptor_ = ip::Acceptor{protocol, configuration_.partition, self, [this](std::uint32_t id) {
                                 return configuration_.find_node(id) != nullptr ||
                                        (id >= first_runtime_id && find(id) != nullptr);
                             }};
    acceptor_.authenticated = shared_->parameters.auth_key.has_value();
    acceptor_.newcomers = shared_->parameters.max_clients > 0 && self != no_node;
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (listen_fd_ >= 0) shared_->epoll.add(listen_fd_, EPOLLIN, event_data(Tag::listen, 0));
    shared_->epoll.add(shared_->io_wake.fd(), EPOLLIN, event_data(Tag::io_wake, 0));
    thread_ = std::thread([this] { run(); });
}

Transport::~Transport() {
    shutdown(deadline_after(shared_->parameters.peer_timeout));
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (spare_fd_ >= 0) ::close(spare_fd_);
}

std::shared_ptr<TcpNode> Transport::node(NodeId id) {
    std::lock_guard lock(nodes_mutex_);
    if (auto it = nodes_.find(id); it != nodes_.end()) return it->second;
    if (id == shared_->parameters.self) {
        throw UsageError("node " + std::to_string(id) + " is this process itself: a node cannot send to itself");
    }
    if (id >= first_runtime_id) {
        throw UsageError("node " + std::to_string(id) +
                         " is a run-time client id this node does not know (it never came, or it left or was lost)");
    }
    auto node = std::make_shared<TcpNode>(shared_, configuration_.node(id));
    nodes_.emplace(id, node);
    nodes_changed_.fetch_add(1, std::memory_order_release);
    return node;
}

std::shared_ptr<TcpNode> Transport::find(NodeId id) const {
    std::lock_guard lock(nodes_mutex_);
    auto it = nodes_.find(id);
    return it != nodes_.end() ? it->second : nullptr;
}

std::vector<std::shared_ptr<TcpNode>> Transport::nodes() const {
    std::lock_guard lock(nodes_mutex_);
    std::vector<std::shared_ptr<TcpNode>> all;
    all.reserve(nodes_.size());
    for (const auto& [id, n] : nodes_)
        all.push_back(n);
    return all;
}

void Transport::want_bell(NodeId id) {
    if (auto n = find(id)) n->want_bell();
}

void Transport::unmute_bells() {
    // seq_cst, after the sleeper's announcement: a bell muted after this look is
    // unmuted by the background thread, which looks at the sleepers after its mute.
    if (!shared_->bells_muted.load() || !shared_->bells_muted.exchange(false)) return;
    for (const auto& n : nodes())
        n->unmute_bell();
}

void Transport::shutdown(SteadyTime deadline) {
    if (!thread_.joinable()) return;
    for (const auto& n : nodes())
        (void)n->wait_acknowledged(deadline);
    stop_.store(true);
    shared_->wake_io();
    thread_.join();
    for (const auto& n : nodes())
        n->close();
    for (auto& [fd, p] : pending_)
        ::close(fd);
    pending_.clear();
}

// A wake-up ticks the nodes whose tick is due (what their last tick asked for, at most
// 100 ms on) or due within tick_slack (ticked early: a tick looks at its own clocks, so
// one that comes early only says again when it is due), and a node whose connection
// had an event; every node after the wake-up descriptor rang (someone asked for
// something: a write failed, a batch began, an acknowledgement the receiver could not
// write), after a connection was accepted or a handshake moved, and when the nodes
// changed. Before, every wake-up ticked every node: with hundreds of peers the answer
// checks, each node's every 100 ms at its own phase, woke this thread thousands of
// times a second, each time to take both locks of every node (docs/tcp.md, "Group
// receive"). The slack gathers those checks into fewer wake-ups.
void Transport::run() {
    constexpr auto tick_at_least = std::chrono::milliseconds(100);
    std::array<epoll_event, 64> events{};
    std::vector<std::shared_ptr<TcpNode>> ticking;
    std::uint64_t ticking_changes = ~std::uint64_t{0};
    bool everyone = true;
    const auto follow_nodes = [&] {
        if (const std::uint64_t changes = nodes_changed_.load(std::memory_order_acquire); changes != ticking_changes) {
            ticking_changes = changes;
            ticking = nodes();
            everyone = true;
        }
    };
    while (!stop_.load()) {
        auto now = Clock::now();
        auto next = now + tick_at_least;
        follow_nodes();
        for (const auto& n : ticking) {
            if (everyone || n->tick_due <= now + tick_slack) n->tick_due = std::min(n->tick(now), now + tick_at_least);
            next = std::min(next, n->tick_due);
        }
        everyone = false;
        if (shared_->client_gone.exchange(false)) {
            forget_gone_clients();
            follow_nodes(); // a forgotten client's node is not held while this thread sleeps
        }
        if (listen_paused_) { // out of descriptors without a spare: try again now
            if (spare_fd_ < 0) spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            listen_paused_ = !shared_->epoll.add(listen_fd_, EPOLLIN, event_data(Tag::listen, 0));
        }
        for (auto it = pending_.begin(); it != pending_.end();) {
            auto& p = (it++)->second;
            if (now >= p.deadline) {
                refuse(p, Refusal::handshake_timeout, "", false);
            } else {
                next = std::min(next, p.deadline);
            }
        }
        // Nanosecond timeouts: the tail of a stream's batch is due microseconds ahead.
        const int n = shared_->epoll.wait(events, std::chrono::duration_cast<std::chrono::nanoseconds>(next - now));
        for (int i = 0; i < n; ++i) {
            const std::uint64_t data = events[i].data.u64;
            const auto tag = static_cast<Tag>(data >> 56);
            switch (tag) {
            case Tag::listen:
                accept_all();
                everyone = true;
                break;
            case Tag::io_wake:
                shared_->io_wake.drain();
                everyone = true;
                break;
            case Tag::in:
                if (auto* b = shared_->bell.load()) {
                    b->ring();
                    // Nobody asleep: the application reads this input anyway; the bell
                    // stays quiet until a thread is about to sleep (unmute_bells). A
                    // sleeper that came meanwhile finds the bell muted, or this thread
                    // finds it (both look after their own store).
                    if (b->sleepers.load() == 0) {
                        if (auto node = find(static_cast<NodeId>((data >> 24) & 0xffffffffu))) {
                            node->mute_bell();
                            if (b->sleepers.load() != 0) node->unmute_bell();
                        }
                    }
                }
                break;
            case Tag::pending:
                on_pending(static_cast<int>(data & 0xffffffffu));
                everyone = true;
                break;
            case Tag::conn: {
                const auto id = static_cast<NodeId>((data >> 24) & 0xffffffffu);
                std::shared_ptr<TcpNode> node;
                {
                    std::lock_guard lock(nodes_mutex_);
                    if (auto it = nodes_.find(id); it != nodes_.end()) node = it->second;
                }
                if (node) {
                    node->on_event(static_cast<std::uint32_t>(data & 0xffffffu), events[i].events);
                    node->tick_due = {};
                }
                break;
            }
            }
        }
    }
}

void Transport::accept_all() {
    for (;;) {
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) {
                if (refuse_without_descriptors()) continue;
            }
            return; // EAGAIN, or out of descriptors without a spare (listening paused)
        }
        const std::string text = ip::address_text(from);
        if (pending_.size() >= shared_->parameters.max_pending) {
            shared_->count_refusal(Refusal::too_many);
            log_refusal(text, Refusal::too_many, "");
            ::close(fd);
            continue;
        }
        Pending p;
        p.fd = fd;
        p.deadline = Clock::now() + shared_->parameters.handshake_timeout;
        p.from = text;
        if (!shared_->epoll.add(fd, EPOLLIN | EPOLLRDHUP, event_data(Tag::pending, static_cast<std::uint32_t>(fd)))) {
            ::close(fd);
            continue;
        }
        pending_.emplace(fd, std::move(p));
    }
}

// Out of file descriptors with a connection waiting: the spare descriptor makes room
// to accept it and close it at once, counted and logged, so that the peer sees a close
// instead of a hang and the level-triggered listening socket stops reporting it.
// Without a spare (another thread took the descriptor back), listening pauses until
// the next tick. Returns whether to go on accepting.
bool Transport::refuse_without_descriptors() {
    const int error = errno;
    if (spare_fd_ >= 0) {
        ::close(spare_fd_);
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        // Out of descriptors, accept fails with EMFILE whether or not a connection
        // waits; with the spare's room it says which.
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
        if (fd >= 0) {
            shared_->count_refusal(Refusal::no_descriptors);
            log_refusal(ip::address_text(from), Refusal::no_descriptors, ip::errno_text(error) + " (ulimit -n)");
            ::close(fd);
        }
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (spare_fd_ >= 0) return fd >= 0; // go on while connections wait
    }
    log_refusal("(not accepted)", Refusal::no_descriptors,
                ip::errno_text(error) + " (ulimit -n): listening pauses for a tick");
    shared_->epoll.remove(listen_fd_);
    listen_paused_ = true;
    return false;
}

void Transport::on_pending(int fd) {
    auto it = pending_.find(fd);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    // What is read now: the Hello; with its kind hello_auth, the nonce after it; once
    // the Challenge went out, the Proof. The connector sends nothing more before it
    // has the answer, so reading up to the end of the expected message takes no
    // byte of the next one.
    std::byte* bytes = p.proving ? reinterpret_cast<std::byte*>(&p.proof) : reinterpret_cast<std::byte*>(&p.hello);
    std::size_t want = sizeof(Hello);
    if (p.proving) {
        want = sizeof(ip::Proof);
    } else if (p.got >= sizeof(Hello) && p.hello.hello.kind == ip::kind_hello_auth) {
        want = sizeof(ip::AuthHello);
    }
    const ssize_t got = ::recv(fd, bytes + p.got, want - p.got, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (got <= 0 && p.proving) { // a connector that cannot prove the key closes on the challenge
        refuse(p, Refusal::bad_proof, "closed after the challenge, without a proof", false);
        return;
    }
    if (got <= 0) { // closed or failed before a whole Hello: a handshake cut short
        refuse(p, Refusal::handshake_timeout, "closed before a whole hello", false);
        return;
    }
    p.got += static_cast<std::size_t>(got);
    if (!p.proving && p.got >= sizeof(std::uint32_t) && p.hello.hello.magic != magic) {
        refuse(p, Refusal::bad_magic, "", false);
        return;
    }
    if (p.got < want) return;
    if (p.proving) {
        finish_handshake(p);
    } else if (want == sizeof(Hello) && p.hello.hello.kind == ip::kind_hello_auth) {
        on_pending(fd); // the nonce may have come with the Hello
    } else {
        finish_hello(p);
    }
}

void Transport::finish_hello(Pending& p) {
    if (const ip::Verdict verdict = ip::check_hello(p.hello.hello, acceptor_); !verdict.accepted()) {
        refuse(p, verdict.refusal, verdict.detail, true);
        return;
    }
    if (!shared_->parameters.auth_key) {
        finish_handshake(p);
        return;
    }
    // The tie-break needs no proof: a crossing Hello is refused before the
    // challenge (a connector that gave its attempt up does not answer one). A
    // newcomer has no node yet, and never crosses (nothing connects to it).
    if (p.hello.hello.from != no_node) {
        std::shared_ptr<TcpNode> peer;
        try {
            peer = node(p.hello.hello.from);
        } catch (const Error& e) {
            refuse(p, Refusal::unknown_node, e.what(), true);
            return;
        }
        if (peer->crosses()) {
            refuse_crossed(p);
            return;
        }
    }
    // The challenge comes from the id the Hello named: this node's, or 0 from a
    // newcomer that does not know it (the proof must name the same pair).
    p.challenge =
        ip::make_challenge(*shared_->parameters.auth_key, p.hello, protocol, p.hello.hello.to, shared_->incarnation);
    const ssize_t wrote = ::send(p.fd, &p.challenge, sizeof p.challenge, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (wrote != static_cast<ssize_t>(sizeof p.challenge)) { // a fresh socket takes 104 bytes at once
        refuse(p, Refusal::handshake_timeout, "the challenge could not be written", false);
        return;
    }
    p.proving = true;
    p.got = 0;
}

void Transport::finish_handshake(Pending& p) {
    const Hello& h = p.hello.hello;
    if (p.proving && !ip::proof_proves_key(*shared_->parameters.auth_key, p.hello, p.challenge, p.proof)) {
        refuse(p, Refusal::bad_proof, "from node " + std::to_string(h.from), true);
        return;
    }
    std::shared_ptr<TcpNode> peer;
    if (h.from == no_node) {
        peer = new_client(p);
        if (!peer) {
            refuse(p, Refusal::too_many,
                   "tcp.max_clients (" + std::to_string(shared_->parameters.max_clients) +
                       ") clients in no nodes file are here already",
                   true);
            return;
        }
    } else {
        try {
            peer = node(h.from);
        } catch (const Error& e) {
            refuse(p, Refusal::unknown_node, e.what(), true);
            return;
        }
    }
    const int fd = p.fd;
    const std::uint64_t incarnation = h.incarnation;
    shared_->epoll.remove(fd);
    if (!peer->accept_connection(fd, incarnation)) {
        refuse_crossed(p);
        return;
    }
    pending_.erase(fd); // p is gone from here on
    shared_->accepted.fetch_add(1);
}

std::shared_ptr<TcpNode> Transport::new_client(const Pending& p) {
    std::lock_guard lock(nodes_mutex_);
    const std::uint32_t seen = shared_->clients_seen.load();
    if (live_clients_ >= shared_->parameters.max_clients || seen >= ~first_runtime_id) return nullptr;
    config::NodeConfig c;
    c.id = first_runtime_id + seen;
    c.name = "client-" + std::to_string(seen);
    auto node = std::make_shared<TcpNode>(shared_, c);
    node->make_client(p.from);
    nodes_.emplace(c.id, node);
    nodes_changed_.fetch_add(1, std::memory_order_release);
    ++live_clients_;
    shared_->clients_seen.store(seen + 1); // after the node is found by id (runtime_peer)
    MSGPASS_LOG(tcp, debug,
                "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": client " + p.from +
                    " (no nodes file) is node " + std::to_string(c.id));
    return node;
}

void Transport::forget_client(NodeId id) {
    if (id < first_runtime_id) return;
    auto node = find(id);
    if (!node) return;
    node->forget_client();
    shared_->wake_io();
}

std::uint32_t Transport::live_clients() const {
    std::lock_guard lock(nodes_mutex_);
    return live_clients_;
}

void Transport::forget_gone_clients() {
    std::lock_guard lock(nodes_mutex_);
    for (auto it = nodes_.lower_bound(first_runtime_id); it != nodes_.end();) {
        if (it->second->forgettable()) {
            it = nodes_.erase(it);
            nodes_changed_.fetch_add(1, std::memory_order_release);
            --live_clients_;
            shared_->clients_forgotten.fetch_add(1, std::memory_order_release);
            continue;
        }
        if (it->second->gone()) shared_->client_gone.store(true); // its messages are read first: later
        ++it;
    }
}

// This node's own connection to the peer crossed this one and stays (the lower node
// id's): not a fault, neither counted nor logged.
void Transport::refuse_crossed(Pending& p) {
    shared_->crossed.fetch_add(1);
    const Welcome w = ip::make_refusal(protocol, shared_->parameters.self, p.hello.hello.from, shared_->incarnation,
                                       Refusal::crossed);
    (void)::send(p.fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
    shared_->epoll.remove(p.fd);
    drop_pending(p.fd);
}

void Transport::refuse(Pending& p, Refusal reason, const std::string& detail, bool answer) {
    shared_->count_refusal(reason);
    log_refusal(p.from, reason, detail);
    if (answer) {
        const Welcome w =
            ip::make_refusal(protocol, shared_->parameters.self, p.hello.hello.from, shared_->incarnation, reason);
        (void)::send(p.fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    drop_pending(p.fd);
}

void Transport::drop_pending(int fd) {
    ::close(fd);
    pending_.erase(fd);
}

// One line per refused connection, at most 20 a second (a port scan or a flood
// must not flood the log as well); the counters keep the full account.
void Transport::log_refusal(const std::string& from, Refusal reason, const std::string& detail) {
    const auto now = Clock::now();
    if (now - log_window_ >= std::chrono::seconds(1)) {
        log_window_ = now;
        logged_in_window_ = 0;
    }
    if (++logged_in_window_ > 20) return;
    MSGPASS_LOG(tcp, warn,
                "msgpass tcp node " + std::to_string(shared_->parameters.self) + ": refused a connection from " + from +
                    ": " + std::string(describe(reason)) + (detail.empty() ? "" : ": ") + detail);
}

} // namespace msgpass::tcp
