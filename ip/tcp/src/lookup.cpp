// The client's side of peers found at run time (docs/tcp.md, "Clients in no nodes
// file"): Transport::lookup connects to an address, runs the handshake as a newcomer
// (node id 0, to 0: it knows neither its own id nor the server's) in the caller's
// thread, so that a refusal is the lookup's error, and hands the connection to a new
// node, which from then on keeps it as a connection it opened itself: a reconnection
// says the id the server gave (Link::self_as_seen_).
#include "node.hpp"
#include <msgpass/log.hpp>

#include <msgpass/ip/socket.hpp>

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <unistd.h>

namespace msgpass::tcp {

namespace {

// The descriptor, closed unless released.
struct FdGuard {
    int fd = -1;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
    int release() { return std::exchange(fd, -1); }
};

// Waits until fd is ready for events or deadline; false on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return true; // the read or write that follows says what failed
    }
}

} // namespace

std::shared_ptr<TcpNode> Transport::lookup(const std::string& host, std::uint16_t port, const std::string& text) {
    {
        std::lock_guard lock(nodes_mutex_);
        if (auto it = looked_up_.find(text); it != looked_up_.end()) {
            if (auto n = nodes_.find(it->second); n != nodes_.end()) return n->second;
        }
    }
    const auto& params = shared_->parameters;
    const std::string what = "tcp: lookup of " + text;
    auto fail = [&](const std::string& why) -> std::shared_ptr<TcpNode> { throw Error(what + ": " + why); };
    const ip::Address address = ip::resolve(host, port, SOCK_STREAM, false, what);
    const auto deadline = Clock::now() + params.peer_timeout;
    FdGuard fd{ip::open_socket(address.family(), SOCK_STREAM)};
    if (fd.fd < 0) return fail("socket: " + ip::errno_text(errno));
    if (::connect(fd.fd, address.get(), address.length) != 0 && errno != EINPROGRESS)
        return fail("connect: " + ip::errno_text(errno));
    if (!wait_for(fd.fd, POLLOUT, deadline)) return fail("no connection within peer_timeout");
    int error = 0;
    socklen_t len = sizeof error;
    ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) return fail("connect: " + ip::errno_text(error));

    // Writes or reads exactly n bytes by the deadline.
    auto write_all = [&](const void* data, std::size_t n) {
        if (::send(fd.fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(n))
            fail("the handshake could not be written: " + ip::errno_text(errno)); // a fresh socket takes it
    };
    auto read_all = [&](void* data, std::size_t n) {
        auto* at = static_cast<std::byte*>(data);
        std::size_t got = 0;
        while (got < n) {
            if (!wait_for(fd.fd, POLLIN, deadline)) fail("no answer to the handshake within peer_timeout");
            const ssize_t r = ::recv(fd.fd, at + got, n - got, MSG_DONTWAIT);
            if (r == 0) {
                fail("the server closed the connection during the handshake (not a msgpass tcp node of partition '" +
                     params.partition + "'?)");
            }
            if (r < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                fail("read: " + ip::errno_text(errno));
            }
            got += static_cast<std::size_t>(r);
        }
    };

    ip::AuthHello auth_hello{};
    if (params.auth_key) {
        auth_hello = ip::make_auth_hello(protocol, no_node, 0, shared_->incarnation, params.partition);
        write_all(&auth_hello, sizeof auth_hello);
    } else {
        const Hello hello = make_hello(no_node, 0, shared_->incarnation, params.partition);
        write_all(&hello, sizeof hello);
    }
    Welcome w{};
    read_all(&w, sizeof w);
    if (w.magic != magic || w.version != protocol_version) return fail("the answer is not a msgpass tcp welcome");
    if (w.kind == ip::kind_challenge) {
        if (!params.auth_key) return fail("the server asks for a key this process has no auth_key_file for");
        ip::Challenge c{};
        std::memcpy(&c.header, &w, sizeof w);
        read_all(reinterpret_cast<std::byte*>(&c) + sizeof w, sizeof c - sizeof w);
        if (c.header.to != no_node || !ip::challenge_proves_key(*params.auth_key, auth_hello, c)) {
            shared_->count_refusal(Refusal::bad_proof);
            return fail("the server did not prove this partition's key (auth_key_file): another key, or not a node "
                        "of this partition");
        }
        const ip::Proof proof = ip::make_proof(*params.auth_key, auth_hello, c);
        write_all(&proof, sizeof proof);
        read_all(&w, sizeof w);
        if (w.magic != magic || w.version != protocol_version) return fail("the answer is not a msgpass tcp welcome");
    }
    if (w.kind == static_cast<std::uint16_t>(ip::Kind::refusal)) {
        const Refusal reason = ip::refusal_reason(w);
        std::string hint;
        if (reason == Refusal::unauthenticated)
            hint = params.auth_key ? " (this process has an auth_key_file, the server none)"
                                   : " (the server has an auth_key_file: this process needs the partition's key)";
        if (reason == Refusal::bad_proof) hint = " (this process's auth_key_file holds another key)";
        if (reason == Refusal::unknown_node) hint = " (the server takes no clients: tcp.max_clients is 0 there)";
        if (reason == Refusal::too_many) hint = " (tcp.max_clients clients are there already)";
        return fail("refused by node " + std::to_string(w.from) + ": " + std::string(describe(reason)) + hint);
    }
    if (w.kind != static_cast<std::uint16_t>(ip::Kind::welcome) || w.to < first_runtime_id || w.from == no_node ||
        w.from >= first_runtime_id) {
        return fail("the answer is not a welcome giving this process a run-time id");
    }
    std::shared_ptr<TcpNode> node;
    {
        std::lock_guard lock(nodes_mutex_);
        if (nodes_.count(w.from) != 0)
            return fail("it is node " + std::to_string(w.from) +
                        ", a node this process has already (of its nodes file, or looked up by another address): "
                        "use that node");
        config::NodeConfig c;
        c.id = w.from;
        c.name = text;
        c.host = host;
        c.port = port;
        node = std::make_shared<TcpNode>(shared_, c);
        node->adopt_connection(fd.release(), w);
        nodes_.emplace(w.from, node);
        nodes_changed_.fetch_add(1, std::memory_order_release);
        looked_up_[text] = w.from;
    }
    shared_->wake_io();
    MSGPASS_LOG(tcp, debug,
                "msgpass tcp client: " + text + " is node " + std::to_string(w.from) + ", which calls this process " +
                    std::to_string(w.to));
    return node;
}

} // namespace msgpass::tcp
