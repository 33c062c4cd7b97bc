// Peers found at run time over udp (docs/udp.md, "Clients in no nodes file"): a
// server with udp.max_clients takes a newcomer's hello (from 0) and gives it a node
// under the next run-time id, which its welcome names (`to`); under auth_key_file it
// first answers with a cookie (a welcome to 0 whose seq and length are a MAC of the
// newcomer's address and incarnation, keeping nothing), and makes the node only for a
// second hello that carries that cookie and a proof of the key over its header. A
// client (a factory of no node id) looks a server up by sending those hellos from its
// socket in the caller's thread, and makes the server's node from the welcome that
// gives its id. The clients that left, were lost or were forgotten by the application
// are forgotten here, and their nodes freed with the last reference.
#include "transport.hpp"

#include <msgpass/error.hpp>
#include <msgpass/log.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace msgpass::udp {

namespace {

// The proof of the key a newcomer's second hello carries: a MAC over its header (the
// cookie, its incarnation, the partition) under the partition's key.
ip::Mac newcomer_proof(const ip::AuthKey& key, std::span<const std::byte> header) {
    static constexpr std::string_view label = "msgpass/udp newcomer";
    return ip::mac_over(key, {std::as_bytes(std::span(label)), header});
}

bool same_address(const sockaddr_storage& a, socklen_t length, const ip::Address& b) {
    if (a.ss_family != b.family()) return false;
    if (a.ss_family == AF_INET && length >= sizeof(sockaddr_in)) {
        const auto& x = reinterpret_cast<const sockaddr_in&>(a);
        const auto& y = reinterpret_cast<const sockaddr_in&>(b.storage);
        return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
        const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
        const auto& y = reinterpret_cast<const sockaddr_in6&>(b.storage);
        return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
    }
    return false;
}

} // namespace

bool Transport::knows(const void* transport, std::uint32_t id) {
    const auto* t = static_cast<const Transport*>(transport);
    if (t->nodes_.contains(id)) return true;
    if (!t->has_runtime_.load(std::memory_order_acquire)) return false;
    std::lock_guard lock(t->runtime_mutex_);
    return t->runtime_.contains(id);
}

std::shared_ptr<UdpNode> Transport::runtime_node(NodeId id) const {
    if (!has_runtime_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(runtime_mutex_);
    auto it = runtime_.find(id);
    return it == runtime_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<UdpNode>> Transport::runtime_nodes() const {
    std::vector<std::shared_ptr<UdpNode>> all;
    if (!has_runtime_.load(std::memory_order_acquire)) return all;
    std::lock_guard lock(runtime_mutex_);
    all.reserve(runtime_.size());
    for (const auto& [id, n] : runtime_)
        all.push_back(n);
    return all;
}

std::uint32_t Transport::live_clients() const {
    std::lock_guard lock(runtime_mutex_);
    return live_clients_;
}

std::array<std::uint64_t, 2> Transport::cookie(Source from, std::uint64_t incarnation) const {
    static constexpr std::string_view label = "msgpass/udp cookie";
    const auto& p = shared_->parameters;
    const ip::Mac m = ip::mac_over(
        *p.auth_key, {std::as_bytes(std::span(label)),
                      std::as_bytes(std::span(reinterpret_cast<const std::byte*>(from.address),
                                              static_cast<std::size_t>(from.length))),
                      std::as_bytes(std::span(&incarnation, 1)), std::as_bytes(std::span(&shared_->incarnation, 1))});
    std::array<std::uint64_t, 2> c{};
    std::memcpy(c.data(), m.data(), sizeof c);
    if (c[0] == 0 && c[1] == 0) c[0] = 1; // (0, 0) is a hello without a cookie
    return c;
}

UdpNode* Transport::on_newcomer(const Decoded& d, std::span<const std::byte> bytes, Source from,
                                Clock::time_point now) {
    const auto& p = shared_->parameters;
    const DatagramHeader& h = d.header;
    if (from.address == nullptr || from.length == 0) { // (a held-back datagram of fault injection)
        shared_->count(Drop::unknown_sender);
        return nullptr;
    }
    const std::string where = ip::address_text(*from.address);
    if (p.auth_key) {
        if (d.payload.size() != auth_payload_size) {
            shared_->count(Drop::unauthenticated);
            shared_->log_refusal("refused a client at " + where +
                                 ": its hello carries no nonce (auth_key_file is set here: does it have the key?)");
            return nullptr;
        }
        const auto c = cookie(from, h.incarnation);
        if (h.seq == 0 && h.length == 0) {
            // The first hello: the cookie, in a welcome that proves this server to the
            // newcomer (MAC over it and the hello's nonce). Nothing is kept.
            DatagramHeader w = header_of(DatagramType::welcome, p.self, p.partition_hash, shared_->incarnation);
            w.peer_incarnation = h.incarnation;
            w.seq = c[0];
            w.length = c[1];
            ip::Nonce theirs{};
            std::memcpy(theirs.data(), d.payload.data(), theirs.size());
            const ip::Mac mac = welcome_mac(*p.auth_key, std::as_bytes(std::span(&w, 1)), theirs);
            std::array<std::byte, header_size + auth_payload_size> out{};
            std::memcpy(out.data(), &w, header_size);
            std::memcpy(out.data() + header_size, mac.data(), mac.size());
            if (::sendto(shared_->fd.load(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                         reinterpret_cast<const sockaddr*>(from.address), from.length) > 0)
                shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
            return nullptr;
        }
        ip::Mac got{};
        std::memcpy(got.data(), d.payload.data(), got.size());
        if (h.seq != c[0] || h.length != c[1] ||
            !ip::same_mac(got, newcomer_proof(*p.auth_key, bytes.first(header_size)))) {
            shared_->count(Drop::bad_proof);
            shared_->log_refusal("refused a client at " + where +
                                 ": its hello does not prove the partition's key for the cookie this node gave it "
                                 "(another key, or a hello replayed)");
            return nullptr;
        }
    }
    std::shared_ptr<UdpNode> node;
    {
        std::lock_guard lock(runtime_mutex_);
        const auto key = std::make_pair(where, h.incarnation);
        if (auto known = newcomers_.find(key); known != newcomers_.end()) { // its hello again
            if (auto n = runtime_.find(known->second); n != runtime_.end()) node = n->second;
        }
        if (!node) {
            const std::uint32_t seen = shared_->clients_seen.load();
            if (live_clients_ >= p.options.max_clients || seen >= ~first_runtime_id) {
                shared_->count(Drop::too_many);
                shared_->log_refusal("refused a client at " + where + ": udp.max_clients (" +
                                     std::to_string(p.options.max_clients) + ") clients are here already");
                return nullptr;
            }
            config::NodeConfig c;
            c.id = first_runtime_id + seen;
            c.name = "client-" + std::to_string(seen);
            ip::Address address;
            std::memcpy(&address.storage, from.address, static_cast<std::size_t>(from.length));
            address.length = from.length;
            address.text = where;
            node = std::make_shared<UdpNode>(shared_, c, std::move(address));
            node->make_runtime(p.self, true);
            runtime_.emplace(c.id, node);
            newcomers_.emplace(key, c.id);
            ++live_clients_;
            has_runtime_.store(true, std::memory_order_release);
            shared_->clients_seen.store(seen + 1, std::memory_order_release); // after runtime_node finds it
            MSGPASS_LOG(udp, info,
                        "msgpass udp node " + std::to_string(p.self) + ": client " + where +
                            " (no nodes file) is node " + std::to_string(c.id));
        }
    }
    Decoded as = d; // the hello of that node from now on
    as.header.from = node->id();
    as.newcomer = false;
    node->on_datagram(as, bytes, now);
    return node.get();
}

bool Transport::answer_lookup(std::span<const std::byte> bytes, Source from) {
    if (lookups_pending_.load(std::memory_order_acquire) == 0 || from.address == nullptr || bytes.size() < header_size)
        return false;
    std::uint16_t type = 0;
    std::memcpy(&type, bytes.data() + offsetof(DatagramHeader, type), sizeof type);
    if (type != static_cast<std::uint16_t>(DatagramType::welcome)) return false;
    std::lock_guard lock(lookups_mutex_);
    for (Lookup* l : lookups_) {
        if (!same_address(*from.address, from.length, l->address)) continue;
        l->answer.assign(bytes.begin(), bytes.end());
        l->answered = true;
        lookups_changed_.notify_all();
        return true;
    }
    return false;
}

std::shared_ptr<UdpNode> Transport::lookup(const std::string& host, std::uint16_t port, const std::string& text) {
    {
        std::lock_guard lock(runtime_mutex_);
        if (auto it = looked_up_.find(text); it != looked_up_.end()) {
            if (auto n = runtime_.find(it->second); n != runtime_.end()) return n->second;
        }
    }
    const auto& p = shared_->parameters;
    const std::string what = "udp: lookup of " + text;
    auto fail = [&](const std::string& why) -> std::shared_ptr<UdpNode> { throw Error(what + ": " + why); };
    Lookup l;
    l.address = ip::resolve(host, port, SOCK_DGRAM, false, what);
    if (l.address.family() != shared_->self_address.family())
        return fail("its address family is not this process's socket's (a udp client reaches IPv4 servers)");
    struct Registered {
        Transport& t;
        Lookup& l;
        Registered(Transport& transport, Lookup& lookup) : t(transport), l(lookup) {
            std::lock_guard lock(t.lookups_mutex_);
            t.lookups_.push_back(&l);
            t.lookups_pending_.fetch_add(1, std::memory_order_release);
        }
        ~Registered() {
            std::lock_guard lock(t.lookups_mutex_);
            std::erase(t.lookups_, &l);
            t.lookups_pending_.fetch_sub(1, std::memory_order_release);
        }
    } registered(*this, l);

    DatagramHeader hello = header_of(DatagramType::hello, no_node, p.partition_hash, shared_->incarnation);
    ip::Nonce nonce{}; // what the welcome's MAC is over: our nonce, then our proof
    if (p.auth_key) nonce = ip::new_nonce();
    const ip::Nonce first_nonce = nonce; // (a late cookie answers a repeat of the first hello)
    bool proving = false;
    const auto deadline = Clock::now() + p.peer_timeout;
    auto backoff = std::chrono::milliseconds(2);
    bool send_now = true;
    for (;;) {
        if (send_now) {
            std::array<std::byte, header_size + auth_payload_size> out{};
            std::memcpy(out.data(), &hello, header_size);
            std::memcpy(out.data() + header_size, nonce.data(), nonce.size());
            const std::size_t size = p.auth_key ? out.size() : header_size;
            if (::sendto(shared_->fd.load(), out.data(), size, MSG_DONTWAIT | MSG_NOSIGNAL, l.address.get(),
                         l.address.length) > 0)
                shared_->datagrams_sent.fetch_add(1, std::memory_order_relaxed);
        }
        std::vector<std::byte> answer;
        {
            std::unique_lock lock(lookups_mutex_);
            const auto until = std::min(deadline, Clock::now() + backoff);
            lookups_changed_.wait_until(lock, until, [&] { return l.answered; });
            if (l.answered) {
                answer.swap(l.answer);
                l.answered = false;
            }
        }
        if (answer.empty()) {
            if (Clock::now() >= deadline) {
                return fail(std::string("no welcome within peer_timeout: nothing listens there, or the server takes "
                                        "no clients (udp.max_clients 0 there) or has udp.max_clients already, or "
                                        "it has an auth_key_file and this process ") +
                            (p.auth_key ? "holds another key" : "has none (it needs the partition's key)"));
            }
            backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
            send_now = true;
            continue;
        }
        send_now = false;
        DatagramHeader w;
        std::memcpy(&w, answer.data(), header_size);
        const auto payload = std::span<const std::byte>(answer).subspan(header_size);
        // (Under auth_key_file the MAC over our nonce binds the answer to our hello: the
        // server's node does not trust our incarnation yet, and names none.)
        if (w.magic != magic || w.version != protocol_version || w.partition != p.partition_hash ||
            (w.peer_incarnation != shared_->incarnation && !p.auth_key) || w.incarnation == 0 ||
            (!payload.empty() && payload.size() != auth_payload_size))
            continue; // not an answer to our hello (a stale one, another partition's)
        ip::Mac got{};
        if (!payload.empty()) std::memcpy(got.data(), payload.data(), got.size());
        const auto header = std::span<const std::byte>(answer).first(header_size);
        // Once our proof is sent, a cookie may still come for a repeat of the first hello
        // (sent again before the first cookie came, or duplicated on the way): that one
        // is over our first nonce, and is no answer to the proof.
        if (p.auth_key && proving && !payload.empty() && w.to == no_node &&
            ip::same_mac(got, welcome_mac(*p.auth_key, header, first_nonce)))
            continue;
        if (p.auth_key && (payload.empty() || !ip::same_mac(got, welcome_mac(*p.auth_key, header, nonce)))) {
            shared_->count(Drop::bad_proof);
            return fail(payload.empty() ? "the server has no auth_key_file, this process has: they would not trust "
                                          "each other"
                                        : "the server did not prove this partition's key (auth_key_file): another "
                                          "key, or not a node of this partition");
        }
        if (!p.auth_key && !payload.empty())
            return fail("the server has an auth_key_file: this process needs the partition's key");
        if (w.to == no_node) { // a keyed server's cookie: the second hello proves our key with it
            if (!p.auth_key || (w.seq == 0 && w.length == 0)) continue;
            hello.seq = w.seq;
            hello.length = w.length;
            const ip::Mac proof = newcomer_proof(*p.auth_key, std::as_bytes(std::span(&hello, 1)));
            std::memcpy(nonce.data(), proof.data(), nonce.size());
            proving = true;
            send_now = true;
            continue;
        }
        if (w.to < first_runtime_id || w.from == no_node || w.from >= first_runtime_id)
            return fail("the answer is not a welcome giving this process a run-time id");
        std::shared_ptr<UdpNode> node;
        {
            std::lock_guard lock(runtime_mutex_);
            if (nodes_.count(w.from) != 0 || runtime_.count(w.from) != 0) {
                return fail("it is node " + std::to_string(w.from) +
                            ", a node this process has already (of its nodes file, or looked up by another "
                            "address): use that node");
            }
            config::NodeConfig c;
            c.id = w.from;
            c.name = text;
            c.host = host;
            c.port = port;
            node = std::make_shared<UdpNode>(shared_, c, l.address);
            node->make_runtime(w.to, false);
            node->adopt_welcome(w, Clock::now());
            runtime_.emplace(w.from, node);
            looked_up_[text] = w.from;
            has_runtime_.store(true, std::memory_order_release);
        }
        MSGPASS_LOG(udp, debug,
                    "msgpass udp client: " + text + " is node " + std::to_string(w.from) +
                        ", which calls this process " + std::to_string(w.to));
        return node;
    }
}

void Transport::forget_client(NodeId id) {
    if (id < first_runtime_id) return;
    if (auto node = runtime_node(id)) node->forget_client();
}

void Transport::forget_gone_clients() {
    if (!has_runtime_.load(std::memory_order_acquire)) return;
    // No batch of a receiver holds a node's pointer meanwhile.
    std::unique_lock read(shared_->read_mutex, std::try_to_lock);
    if (!read.owns_lock()) return; // a receiver sleeps on the socket: at a later tick
    std::lock_guard lock(runtime_mutex_);
    for (auto it = runtime_.lower_bound(first_runtime_id); it != runtime_.end();) {
        if (!it->second->forgettable()) {
            ++it;
            continue;
        }
        const NodeId id = it->first;
        std::erase_if(newcomers_, [id](const auto& entry) { return entry.second == id; });
        it = runtime_.erase(it);
        --live_clients_;
        shared_->clients_forgotten.fetch_add(1, std::memory_order_release);
    }
}

// ---------------------------------------------------------------- the node's side

void UdpNode::make_runtime(NodeId self_as_seen, bool client) {
    std::lock_guard lock(mutex_);
    self_ = self_as_seen;
    client_ = client;
    link_fd_ = -1; // the factory's socket: the peer answers to the address it heard from
}

void UdpNode::adopt_welcome(const DatagramHeader& h, Clock::time_point now) {
    std::lock_guard lock(mutex_);
    adopt(h.incarnation, now);
    if (shared_->parameters.auth_key) { // proven by the lookup: the next hello has a new nonce
        previous_nonce_ = nonce_;
        nonce_ = ip::new_nonce();
    }
    last_heard_ = now;
    if (h.peer_incarnation == shared_->incarnation) acknowledge(h.seq, h.length, now);
    pump(now);
}

bool UdpNode::forgettable() {
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (forgotten_.load()) return true;
    // No message unread (held_ counts their datagrams, batch_left_ those taken out of
    // the inbox and not handed out yet; a loss marker is none: a communicator that
    // took the client in holds the node and still reads it).
    return client_ && gone_ && held_ == 0 && batch_left_.load(std::memory_order_relaxed) == 0;
}

void UdpNode::forget_client() {
    close(); // goodbye, as at shutdown
    forgotten_.store(true);
}

} // namespace msgpass::udp
