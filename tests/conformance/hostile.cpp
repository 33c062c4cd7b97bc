// The hostile peer of each technology (see hostile.hpp).
#include "hostile.hpp"

#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>
#include <msgpass/tcp/protocol.hpp>
#include <msgpass/udp/factory.hpp>
#include <msgpass/udp/protocol.hpp>

#include "remote_memory.hpp" // sci's RemoteSegment and VirtualDevice (private: a white-box hook)

#include "../support/bounded.hpp"
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
constexpr auto patience = 10s;

// The good message every hostile peer delivers first: 1 KiB, stream 2, message 0 (on
// sci alone in its slot: a smaller one would open the slot to records, and the
// victim would look at no other note, the forged one, until that slot's close).
constexpr std::size_t good_size = sci::hot_min_size;

// drive: what the sender must do meanwhile (sci: a queued message moves when its
// process calls in again).
bool take_good_message(NodeFactory& victim, NodeId from, const std::function<void()>& drive = {}) {
    auto node = victim.create_node(from);
    BufferPtr m;
    for (const auto deadline = Clock::now() + patience; !m && Clock::now() < deadline;) {
        if (drive) drive();
        m = node->receive(1ms);
    }
    EXPECT_NE(m, nullptr) << "the hostile peer's good message never arrived";
    if (!m) return false;
    EXPECT_EQ(m->size(), good_size);
    EXPECT_EQ(check_payload(*m).seq, 0u);
    return true;
}

// ------------------------------------------------------------------------ sci

class SciHostile final : public HostilePeer {
public:
    SciHostile(const config::Configuration& c, NodeId self, NodeId victim, NodeFactory& victim_factory)
        : c_(c), self_(self), victim_(victim) {
        factory_ = NodeFactory::create(c, self);
        auto to_victim = factory_->create_node(victim);
        to_victim->send(make_message(*factory_, good_size, 2, 0));
        ok_ = take_good_message(victim_factory, self, [&] { (void)to_victim->flush(0ns); });
    }

    [[nodiscard]] bool ok() const { return ok_; }
    [[nodiscard]] bool reported_by_receive() const override { return true; }
    [[nodiscard]] std::string named(Break how) const override {
        return how == Break::oversized ? "malformed large-message descriptor" : "size word";
    }

    // One message was taken: the next is message 1, on index 1 % k of round 1 / k,
    // with the signature of that round salted by our epoch (as our real sender would).
    void break_protocol(Break how) override {
        const std::uint32_t seg_id = c_.section<sci::Options>().recv_seg_id;
        sci::VirtualDevice device(c_.partition);
        sci::RemoteSegment theirs; // the victim's segment: our header there, its slots
        ASSERT_TRUE(theirs.connect(device.segment_name(victim_, seg_id)));
        theirs.map();
        const auto& control = *reinterpret_cast<const sci::ControlBlock*>(theirs.address());
        auto* header = reinterpret_cast<sci::Header*>(theirs.address() + control.header_offset +
                                                      position(self_) * sci::header_size);
        const std::uint32_t epoch = std::atomic_ref<std::uint32_t>(header->epoch).load();
        ASSERT_NE(epoch, 0u) << "node " << self_ << " never introduced itself";
        const std::uint32_t k = c_.section<sci::Options>().max_outst_buffers;
        const std::uint32_t index = 1 % k;
        const std::uint32_t sig = sci::signature(1 / k, sci::salt_of(epoch));
        if (how == Break::malformed) {
            std::atomic_ref<std::uint32_t>(header->index[index].note)
                .store(sci::make_note(sig, false, static_cast<std::uint32_t>(control.slot_size) + 1));
            return;
        }
        // A well-formed, correctly checked descriptor of the victim's large region for
        // twice its max_message_size (inside the region's mapping: a receiver that
        // does not check the size hands it out), in the slot the victim granted for the
        // index (its ack word in our segment).
        sci::RemoteSegment ours;
        ASSERT_TRUE(ours.connect(device.segment_name(self_, seg_id)));
        ours.map();
        const auto& our_control = *reinterpret_cast<const sci::ControlBlock*>(ours.address());
        auto* grants = reinterpret_cast<sci::Header*>(ours.address() + our_control.header_offset +
                                                      position(victim_) * sci::header_size);
        std::uint32_t ack = 0;
        ASSERT_TRUE(eventually(
            [&] { return sci::sig_of(ack = std::atomic_ref<std::uint32_t>(grants->index[index].ack).load()) != 0; },
            patience))
            << "node " << victim_ << " never granted index " << index;
        const std::uint32_t slot = ack & sci::ack_slot_mask;
        ASSERT_LT(slot, control.slot_count);
        sci::LargeDescriptor d{};
        d.offset = 0;
        d.size = 2 * c_.max_message_size;
        d.sequence = 0; // no large message came before
        d.region = sci::region_large;
        d.check = sci::large_check_of(d.offset, d.size, d.sequence, d.region);
        std::memcpy(theirs.address() + control.slot_offset + slot * control.slot_size, &d, sizeof d);
        std::atomic_ref<std::uint32_t>(header->index[index].note)
            .store(sci::make_note(sig, true, static_cast<std::uint32_t>(sizeof d)));
    }

private:
    // A node's header is at its position in the nodes file.
    [[nodiscard]] std::size_t position(NodeId id) const {
        for (std::size_t i = 0; i < c_.nodes.size(); ++i)
            if (c_.nodes[i].id == id) return i;
        return c_.nodes.size();
    }

    config::Configuration c_;
    NodeId self_, victim_;
    std::unique_ptr<NodeFactory> factory_;
    bool ok_ = false;
};

// ------------------------------------------------------------------- sockets

sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    return a;
}

// Waits until fd is readable (or writable), at most bound; false on timeout.
bool ready(int fd, short events, std::chrono::milliseconds bound) {
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, static_cast<int>(bound.count())) == 1;
}

// ------------------------------------------------------------------------ tcp

class TcpHostile final : public HostilePeer {
public:
    TcpHostile(const config::Configuration& c, NodeId self, NodeId victim, NodeFactory& victim_factory) : c_(c) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const auto to = loopback(c.node(victim).port);
        if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
            ADD_FAILURE() << "cannot connect to node " << victim << ": " << std::strerror(errno);
            return;
        }
        timeval bound{10, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
        const auto hello = tcp::make_hello(self, victim, 0x0badc0de0000ull + self, c.partition);
        tcp::Welcome w{};
        if (!write_all(&hello, sizeof hello) || ::recv(fd_, &w, sizeof w, MSG_WAITALL) != sizeof w ||
            w.kind != static_cast<std::uint16_t>(tcp::Kind::welcome)) {
            ADD_FAILURE() << "node " << victim << " did not welcome a correct Hello of node " << self;
            return;
        }
        std::vector<std::byte> payload(good_size);
        fill_payload(payload, 2, 0);
        const auto frame = tcp::FrameHeader{payload.size(), 0, static_cast<std::uint32_t>(tcp::FrameType::data), 0};
        if (!write_all(&frame, sizeof frame) || !write_all(payload.data(), payload.size())) {
            ADD_FAILURE() << "the good message could not be written";
            return;
        }
        ok_ = take_good_message(victim_factory, self);
    }
    ~TcpHostile() override {
        if (writer_.joinable()) writer_.join();
        if (fd_ >= 0) ::close(fd_);
    }

    [[nodiscard]] bool ok() const { return ok_; }
    [[nodiscard]] bool reported_by_receive() const override { return true; }
    [[nodiscard]] std::string named(Break how) const override {
        return how == Break::oversized ? "above max_message_size" : "unknown type 77";
    }

    void break_protocol(Break how) override {
        if (how == Break::malformed) {
            const auto frame = tcp::FrameHeader{0, 1, 77, 0};
            EXPECT_TRUE(write_all(&frame, sizeof frame));
            return;
        }
        // Message 1 of max_message_size + 1 bytes, whole: a receiver that does not
        // check the length takes it and hands it out. (The receiver closes the
        // connection after the header: what it does not read is not an error here.)
        // The receiver reads in its receiving thread: the payload is written from a
        // thread of its own, which ends when the receiver closed (or after 10 s).
        writer_ = std::thread([this] {
            std::vector<std::byte> payload(c_.max_message_size + 1);
            fill_payload(payload, 2, 1);
            const auto frame = tcp::FrameHeader{payload.size(), 1, static_cast<std::uint32_t>(tcp::FrameType::data), 0};
            if (write_all(&frame, sizeof frame)) (void)write_all(payload.data(), payload.size());
        });
    }

private:
    bool write_all(const void* data, std::size_t n) {
        const auto* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return false;
            p += k;
            n -= static_cast<std::size_t>(k);
        }
        return true;
    }

    config::Configuration c_;
    int fd_ = -1;
    bool ok_ = false;
    std::thread writer_;
};

// ------------------------------------------------------------------------ udp

class UdpHostile final : public HostilePeer {
public:
    UdpHostile(const config::Configuration& c, NodeId self, NodeId victim, NodeFactory& victim_factory)
        : c_(c), self_(self), victim_(victim), victim_factory_(dynamic_cast<udp::UdpNodeFactory&>(victim_factory)) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        const auto me = loopback(c.node(self).port);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<const sockaddr*>(&me), sizeof me) != 0) {
            ADD_FAILURE() << "cannot bind node " << self << "'s port: " << std::strerror(errno);
            return;
        }
        to_ = loopback(c.node(victim).port);
        // Hello until the welcome names the victim's incarnation.
        for (const auto deadline = Clock::now() + patience; peer_incarnation_ == 0 && Clock::now() < deadline;) {
            send(header(udp::DatagramType::hello, 0, 0, 0, 0), {});
            std::array<std::byte, 2048> in{};
            while (ready(fd_, POLLIN, 20ms)) {
                const ssize_t n = ::recv(fd_, in.data(), in.size(), 0);
                udp::DatagramHeader h{};
                if (n < static_cast<ssize_t>(udp::header_size)) continue;
                std::memcpy(&h, in.data(), sizeof h);
                if (h.type == static_cast<std::uint16_t>(udp::DatagramType::welcome) && h.from == victim)
                    peer_incarnation_ = h.incarnation;
            }
        }
        if (peer_incarnation_ == 0) {
            ADD_FAILURE() << "node " << victim << " never answered the hello of node " << self;
            return;
        }
        std::vector<std::byte> payload(good_size);
        fill_payload(payload, 2, 0);
        send(header(udp::DatagramType::data, next_seq_++, payload.size(), 0, udp::flag_first), payload);
        ok_ = take_good_message(victim_factory, self);
        refused_before_ = refused_now();
    }
    ~UdpHostile() override {
        if (fd_ >= 0) ::close(fd_);
    }

    [[nodiscard]] bool ok() const { return ok_; }
    [[nodiscard]] bool reported_by_receive() const override { return false; }
    [[nodiscard]] std::string named(Break) const override { return ""; }
    [[nodiscard]] std::uint64_t refused() const override { return refused_now() - refused_before_; }

    void break_protocol(Break how) override {
        if (how == Break::malformed) {
            send(header(static_cast<udp::DatagramType>(99), next_seq_, 0, 0, 0), {});
            return;
        }
        // Every piece of a message of max_message_size + 1 bytes, numbered in order:
        // a receiver that does not check the length reassembles it and hands it out.
        const std::size_t piece = udp::default_datagram_size - udp::header_size;
        std::vector<std::byte> message(c_.max_message_size + 1);
        fill_payload(message, 2, 1);
        for (std::size_t offset = 0; offset < message.size(); offset += piece) {
            const std::size_t n = std::min(piece, message.size() - offset);
            send(header(udp::DatagramType::data, next_seq_++, message.size(), static_cast<std::uint32_t>(offset),
                        offset == 0 ? udp::flag_first : std::uint16_t{0}),
                 std::span<const std::byte>(message).subspan(offset, n));
            if (offset % (64 * piece) == 0) (void)ready(fd_, POLLOUT, 10ms);
        }
    }

private:
    [[nodiscard]] std::uint64_t refused_now() const {
        const auto s = victim_factory_.datagram_stats();
        return s.count(udp::Drop::bad_type) + s.count(udp::Drop::bad_fragment);
    }
    [[nodiscard]] udp::DatagramHeader header(udp::DatagramType type, std::uint64_t seq, std::uint64_t length,
                                             std::uint32_t offset, std::uint16_t flags) const {
        udp::DatagramHeader h{};
        h.magic = udp::magic;
        h.version = udp::protocol_version;
        h.type = static_cast<std::uint16_t>(type);
        h.from = self_;
        h.to = victim_;
        h.partition = udp::partition_hash(c_.partition);
        h.incarnation = 0x0badc0de0000ull + self_;
        h.peer_incarnation = peer_incarnation_;
        h.seq = seq;
        h.length = length;
        h.offset = offset;
        h.flags = flags;
        return h;
    }
    void send(const udp::DatagramHeader& h, std::span<const std::byte> payload) {
        std::vector<std::byte> d(sizeof h + payload.size());
        std::memcpy(d.data(), &h, sizeof h);
        if (!payload.empty()) std::memcpy(d.data() + sizeof h, payload.data(), payload.size());
        (void)::sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to_), sizeof to_);
    }

    config::Configuration c_;
    NodeId self_, victim_;
    udp::UdpNodeFactory& victim_factory_;
    int fd_ = -1;
    sockaddr_in to_{};
    std::uint64_t peer_incarnation_ = 0;
    std::uint64_t next_seq_ = 0;
    std::uint64_t refused_before_ = 0;
    bool ok_ = false;
};

template <class T>
std::unique_ptr<HostilePeer> made(std::unique_ptr<T> p) {
    if (!p->ok()) return nullptr;
    return p;
}

} // namespace

std::unique_ptr<HostilePeer> make_hostile_peer(const config::Configuration& c, NodeId self, NodeId victim,
                                               NodeFactory& victim_factory) {
    // auto: the two nodes are on different machines (the suite alternates them), so
    // they speak tcp.
    if (c.technology == "sci") return made(std::make_unique<SciHostile>(c, self, victim, victim_factory));
    if (c.technology == "tcp" || c.technology == "auto")
        return made(std::make_unique<TcpHostile>(c, self, victim, victim_factory));
    if (c.technology == "udp") return made(std::make_unique<UdpHostile>(c, self, victim, victim_factory));
    ADD_FAILURE() << "no hostile peer for technology " << c.technology << " (tests/conformance/hostile.cpp)";
    return nullptr;
}

} // namespace msgpass::test
