// Tests of the tcp technology beyond the conformance suite: hostile input on the
// listening port, each refusal closed and counted while good traffic flows, and
// frames that break the protocol after a good handshake reported once as an Error.
#include "tcp_test_support.hpp"

#include <fcntl.h>
#include <sys/resource.h>

#include <future>

namespace msgpass::test {
namespace {

// ------------------------------------------------------------ good traffic

// Two nodes in this process exchanging numbered, checksummed messages both ways
// in two threads (one per node, each its node's only sender and receiver), with
// at most `window` messages in flight each way. stop() drains both ways and
// reports anything lost, duplicated, reordered or corrupted.
class GoodTraffic {
public:
    struct Side {
        NodeFactory* factory = nullptr;
        NodePtr peer;
        NodePtr watched; // a node that must never deliver anything, or null
        std::uint32_t stream = 0;
        std::atomic<std::uint64_t> sent{0};
        std::atomic<std::uint64_t> received{0};
        std::atomic<bool> done_sending{false};
        std::atomic<std::uint64_t> watched_messages{0};
        std::atomic<std::uint64_t> watched_losses{0};
        std::atomic<std::uint64_t> watched_errors{0};
        std::mutex watched_mutex;
        std::string watched_error; // what the errors said
    };

    GoodTraffic(Side& a, Side& b) : a_(a), b_(b) {
        ta_ = std::thread([this] { run(a_, b_); });
        tb_ = std::thread([this] { run(b_, a_); });
    }
    GoodTraffic(const GoodTraffic&) = delete;
    GoodTraffic& operator=(const GoodTraffic&) = delete;
    ~GoodTraffic() { stop(); }

    // True when both ways delivered n more messages within bound.
    bool flows(std::uint64_t n, std::chrono::milliseconds bound = patience) {
        const auto a0 = a_.received.load(), b0 = b_.received.load();
        return eventually([&] { return failed() || (a_.received >= a0 + n && b_.received >= b0 + n); }, bound) &&
               !failed();
    }
    // Stops sending, drains both ways; returns the first error ("" if none).
    std::string stop() {
        stop_ = true;
        if (ta_.joinable()) ta_.join();
        if (tb_.joinable()) tb_.join();
        return error();
    }
    [[nodiscard]] std::string error() const {
        std::lock_guard lock(mutex_);
        return error_;
    }
    [[nodiscard]] bool failed() const { return failed_; }

private:
    void fail(const std::string& what) {
        std::lock_guard lock(mutex_);
        if (error_.empty()) error_ = what;
        failed_ = true;
    }

    // Takes one message if any arrives within wait; false on an error.
    bool take(Side& me, Side& other, std::chrono::nanoseconds wait) {
        if (me.watched) {
            try {
                if (auto m = me.watched->receive()) {
                    ++me.watched_messages;
                    fail("node " + std::to_string(me.watched->id()) + " delivered a message");
                    return false;
                }
            } catch (const PeerLost&) {
                ++me.watched_losses; // a node that never ran may be reported lost
            } catch (const Error& e) {
                ++me.watched_errors; // the protocol violation of the hostile connection, reported once
                std::lock_guard lock(me.watched_mutex);
                me.watched_error += (me.watched_error.empty() ? "" : "; ") + std::string(e.what());
            }
        }
        BufferPtr m;
        try {
            m = wait.count() == 0 ? me.peer->receive() : me.peer->receive(wait);
        } catch (const Error& e) {
            fail("receive from node " + std::to_string(me.peer->id()) + ": " + e.what());
            return false;
        }
        if (!m) return true;
        try {
            const auto h = check_payload(*m);
            const auto expected = me.received.load();
            if (h.stream != other.stream || h.seq != expected) {
                fail("node " + std::to_string(me.peer->id()) + ": expected message " + std::to_string(expected) +
                     " of stream " + std::to_string(other.stream) + ", got " + std::to_string(h.seq) + " of stream " +
                     std::to_string(h.stream));
                return false;
            }
        } catch (const std::string& e) {
            fail(e);
            return false;
        }
        ++me.received;
        return true;
    }

    void run(Side& me, Side& other) {
        constexpr std::uint64_t window = 256;
        while (!stop_ && !failed_) {
            bool window_full = me.sent - other.received >= window;
            if (!window_full) {
                auto b = make_message(*me.factory, mixed_size(me.sent) % (200 * 1024), me.stream, me.sent);
                try {
                    me.peer->send(std::move(b));
                    ++me.sent;
                } catch (const SendQueueFull&) {
                    window_full = true;
                } catch (const Error& e) {
                    fail("send to node " + std::to_string(me.peer->id()) + ": " + e.what());
                    break;
                }
            }
            if (!take(me, other, window_full ? std::chrono::nanoseconds(2ms) : std::chrono::nanoseconds(0))) break;
        }
        me.done_sending = true;
        if (!me.peer->flush(patience)) fail("could not flush to node " + std::to_string(me.peer->id()));
        const auto deadline = Clock::now() + patience;
        while (!failed_ && (!other.done_sending || me.received < other.sent)) {
            if (Clock::now() > deadline) {
                fail("node " + std::to_string(me.peer->id()) + " sent " + std::to_string(other.sent) + ", " +
                     std::to_string(me.received) + " arrived");
                return;
            }
            if (!take(me, other, 10ms)) return;
        }
        if (failed_) return;
        try {
            if (me.peer->receive(200ms)) fail("a message from node " + std::to_string(me.peer->id()) + " came twice");
        } catch (const Error& e) {
            fail(std::string("after the stream: ") + e.what());
        }
    }

    Side& a_;
    Side& b_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> failed_{false};
    mutable std::mutex mutex_;
    std::string error_;
    std::thread ta_, tb_;
};

// ------------------------------------------------------------ hostile input

// Nodes 1 and 2 exchange good traffic; node 3 is in the nodes file but never
// runs, so that a hostile connection can claim it. The hostile side connects to
// node 2's port. Every refusal a test provokes is declared with expect_refused();
// TearDown checks that each declared refusal was counted and nothing else was,
// and that the good traffic lost and duplicated nothing.
class TcpHostileInput : public ::testing::Test {
protected:
    static constexpr auto peer_timeout = 1000ms;

    void SetUp() override {
        text_ = local_partition(partition_for_test(), 3, peer_timeout);
        ASSERT_EQ(text_.nodes.size(), 3u) << "no free ports";
        // The good traffic goes in compact frames (the default).
        c_ = text_.load();
        c_.auth_key = key_; // set by an authenticated fixture
        f1_ = NodeFactory::create(c_, 1);
        f2_ = NodeFactory::create(c_, 2);
        one_.factory = f1_.get();
        one_.peer = f1_->create_node(2);
        one_.stream = 1;
        two_.factory = f2_.get();
        two_.peer = f2_->create_node(1);
        two_.watched = f2_->create_node(3);
        two_.stream = 2;
        before_ = tcp2().listener_stats();
        traffic_ = std::make_unique<GoodTraffic>(one_, two_);
        ASSERT_TRUE(traffic_->flows(100)) << "good traffic does not flow: " << traffic_->error();
    }

    void TearDown() override {
        if (!traffic_) return;
        EXPECT_TRUE(traffic_->flows(100)) << "good traffic stopped after the hostile input: " << traffic_->error();
        EXPECT_EQ(traffic_->stop(), "");
        EXPECT_GT(one_.received, 0u);
        EXPECT_GT(two_.received, 0u);
        EXPECT_EQ(two_.watched_messages, 0u) << "the node the hostile side claimed to be delivered a message";
        // "Error, once, when the peer broke the protocol": exactly the declared number
        // of errors from the claimed node, none for a refused handshake. (A loss of
        // that node, which never ran, may be reported as well.)
        EXPECT_EQ(two_.watched_errors, expected_errors_) << "errors from node 3: " << two_.watched_error;
        if (expected_errors_ != 0) {
            EXPECT_NE(two_.watched_error.find(expected_error_text_), std::string::npos)
                << "the error does not say what was wrong: " << two_.watched_error;
        }
        EXPECT_EQ(f2_->create_node(3)->stats().errors, two_.watched_errors + two_.watched_losses);
        const auto now = tcp2().listener_stats();
        std::set<Refusal> declared;
        for (const auto& [kinds, n] : expected_) {
            std::uint64_t delta = 0;
            for (auto k : kinds) {
                delta += now.count(k) - before_.count(k);
                declared.insert(k);
            }
            EXPECT_EQ(delta, n) << "refusals of " << tcp::describe(kinds.front()) << " (and alternatives); "
                                << describe(now);
        }
        for (std::size_t k = 1; k < static_cast<std::size_t>(Refusal::kinds); ++k) {
            const auto r = static_cast<Refusal>(k);
            if (declared.count(r) == 0) {
                EXPECT_EQ(now.count(r), before_.count(r)) << "unexpected refusals: " << tcp::describe(r);
            }
        }
    }

    tcp::TcpNodeFactory& tcp1() { return tcp_of(*f1_); }
    tcp::TcpNodeFactory& tcp2() { return tcp_of(*f2_); }
    std::uint16_t port() const { return text_.nodes[1].port; }

    // Declares n refusals, counted under one of kinds; waits until they are counted.
    void expect_refused(std::vector<Refusal> kinds, std::uint64_t n = 1) {
        std::uint64_t before = 0;
        for (auto k : kinds)
            before += before_.count(k);
        for (const auto& [ks, m] : expected_)
            for (auto k : ks)
                if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) before += m;
        const auto counted = [&] {
            const auto s = tcp2().listener_stats();
            std::uint64_t sum = 0;
            for (auto k : kinds)
                sum += s.count(k);
            return sum;
        };
        EXPECT_TRUE(eventually([&] { return counted() >= before + n; }, 10s))
            << "not counted as " << tcp::describe(kinds.front()) << ": " << describe(tcp2().listener_stats());
        expected_.emplace_back(std::move(kinds), n);
    }

    // Declares that node 3's receive reports one Error saying `text` (the protocol
    // violation of the hostile connection), and waits until it did.
    void expect_error(const std::string& text) {
        expected_errors_ = 1;
        expected_error_text_ = text;
        EXPECT_TRUE(eventually([&] { return two_.watched_errors >= 1; }, 10s))
            << "no Error from the node that broke the protocol";
    }

    // Connects as node 3, completes the handshake and checks the Welcome.
    RawSocket handshake_as_node_3() {
        auto s = RawSocket::connect_to(port());
        EXPECT_TRUE(s.valid());
        EXPECT_TRUE(s.send_struct(hello_from(3)));
        tcp::Welcome w{};
        EXPECT_EQ(s.read_exact(&w, sizeof w), sizeof w) << "a good Hello got no Welcome";
        EXPECT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::welcome)) << "refused for " << w.reason;
        EXPECT_EQ(w.from, 2u);
        EXPECT_EQ(w.to, 3u);
        EXPECT_EQ(w.next_expected, 0u);
        EXPECT_TRUE(eventually([&] { return tcp2().listener_stats().accepted > before_.accepted; }, 10s));
        return s;
    }

    tcp::Hello hello_from(NodeId from) const {
        return tcp::make_hello(from, 2, 0x1234'5678'9abc'def0ULL + from, text_.partition);
    }

    // Reads the acceptor's answer if one comes: a refusal must name reason.
    void expect_refusal_or_close(RawSocket& s, Refusal reason) {
        tcp::Welcome w{};
        const auto got = s.read_exact(&w, sizeof w, 10s);
        if (got == sizeof w) {
            EXPECT_EQ(w.magic, tcp::magic);
            EXPECT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::refusal)) << "the acceptor did not refuse";
            EXPECT_EQ(w.reason, static_cast<std::uint32_t>(reason)) << "refused for " << w.reason;
        } else {
            EXPECT_EQ(got, 0u) << "a partial answer of " << got << " bytes";
        }
        EXPECT_TRUE(s.wait_closed()) << "the acceptor kept the connection open";
    }

    std::optional<config::AuthKey> key_; // the partition's key, for TcpAuthenticated
    PartitionText text_;
    config::Configuration c_;
    std::unique_ptr<NodeFactory> f1_, f2_;
    GoodTraffic::Side one_, two_;
    tcp::ListenerStats before_;
    std::unique_ptr<GoodTraffic> traffic_;
    std::vector<std::pair<std::vector<Refusal>, std::uint64_t>> expected_;
    std::uint64_t expected_errors_ = 0;
    std::string expected_error_text_;
};

TEST_F(TcpHostileInput, GarbageBytesAreClosedAndCountedAsBadMagic) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    std::vector<std::uint8_t> garbage(4096);
    std::mt19937 rng(11);
    for (auto& byte : garbage)
        byte = static_cast<std::uint8_t>(rng());
    garbage[0] = 'G';                           // never the magic
    s.send_all(garbage.data(), garbage.size()); // may fail once the acceptor closed
    EXPECT_TRUE(s.wait_closed()) << "the acceptor kept a garbage connection open";
    expect_refused({Refusal::bad_magic});
}

TEST_F(TcpHostileInput, AHelloWithTheWrongMagicIsClosedAndCountedAsBadMagic) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    auto h = hello_from(3);
    h.magic = 0x4d505443; // the magic byte-swapped, as a big-endian host would write it
    ASSERT_TRUE(s.send_struct(h));
    EXPECT_TRUE(s.wait_closed());
    expect_refused({Refusal::bad_magic});
}

TEST_F(TcpHostileInput, AnotherProtocolVersionGetsARefusalNamingBadVersionBeforeTheClose) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    auto h = hello_from(3);
    h.version = tcp::protocol_version + 1;
    ASSERT_TRUE(s.send_struct(h));
    tcp::Welcome w{};
    ASSERT_EQ(s.read_exact(&w, sizeof w), sizeof w) << "no refusal came before the close";
    EXPECT_EQ(w.magic, tcp::magic);
    EXPECT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::refusal));
    EXPECT_EQ(w.reason, static_cast<std::uint32_t>(Refusal::bad_version));
    EXPECT_EQ(w.from, 2u);
    EXPECT_TRUE(s.wait_closed());
    expect_refused({Refusal::bad_version});
}

TEST_F(TcpHostileInput, AHelloOfAnotherPartitionIsRefusedAndCounted) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    ASSERT_TRUE(s.send_struct(tcp::make_hello(3, 2, 77, "another-partition")));
    expect_refusal_or_close(s, Refusal::wrong_partition);
    expect_refused({Refusal::wrong_partition});
}

TEST_F(TcpHostileInput, AHelloFromANodeIdAbsentFromTheNodesFileIsRefusedAndCounted) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    ASSERT_TRUE(s.send_struct(hello_from(999)));
    expect_refusal_or_close(s, Refusal::unknown_node);
    expect_refused({Refusal::unknown_node});
}

TEST_F(TcpHostileInput, AHelloAddressedToAnotherNodeIsRefusedAndCounted) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    auto h = hello_from(3);
    h.to = 1;
    ASSERT_TRUE(s.send_struct(h));
    expect_refusal_or_close(s, Refusal::wrong_target);
    expect_refused({Refusal::wrong_target});
}

TEST_F(TcpHostileInput, AHelloCutShortByTheConnectorsCloseIsClosedAndCounted) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    const auto h = hello_from(3);
    ASSERT_TRUE(s.send_all(&h, 60));
    s.shutdown_write();
    EXPECT_TRUE(s.wait_closed()) << "the acceptor kept a half-closed connection";
    expect_refused({Refusal::handshake_timeout});
}

TEST_F(TcpHostileInput, AHelloWithAHugePartitionLengthIsRefusedAndCountedAsBadLength) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    auto h = hello_from(3);
    h.partition_length = 1ULL << 63;
    ASSERT_TRUE(s.send_struct(h));
    expect_refusal_or_close(s, Refusal::bad_length);
    expect_refused({Refusal::bad_length});
}

TEST_F(TcpHostileInput, AFrameLengthOfTwoToTheSixtyThirdAfterAGoodHelloClosesTheConnectionAndDeliversNothing) {
    auto s = handshake_as_node_3();
    ASSERT_TRUE(s.valid());
    tcp::FrameHeader frame;
    frame.length = 1ULL << 63;
    frame.seq = 0;
    frame.type = static_cast<std::uint32_t>(tcp::FrameType::data);
    ASSERT_TRUE(s.send_struct(frame));
    EXPECT_TRUE(s.wait_closed()) << "a frame of 2^63 bytes did not close the connection";
    expect_refused({Refusal::bad_length});
    expect_error("above max_message_size");
}

// "a sequence number out of order": the first data frame of a fresh incarnation must
// be message 0; message 5, with a whole, well-formed payload, is refused.
TEST_F(TcpHostileInput, ADataFrameWithTheWrongSequenceNumberIsOneErrorAndDeliversNothing) {
    auto s = handshake_as_node_3();
    ASSERT_TRUE(s.valid());
    std::vector<std::byte> payload(100);
    fill_payload(payload, 3, 5);
    tcp::FrameHeader frame;
    frame.length = payload.size();
    frame.seq = 5;
    frame.type = static_cast<std::uint32_t>(tcp::FrameType::data);
    ASSERT_TRUE(s.send_struct(frame));
    ASSERT_TRUE(s.send_all(payload.data(), payload.size()));
    EXPECT_TRUE(s.wait_closed()) << "a frame out of order did not close the connection";
    expect_refused({Refusal::protocol_error});
    expect_error("sent message 5 where 0 was expected");
}

// The compact form of a small data frame (frame.hpp) has room for an acknowledgement
// only in its acked form; the plain form with one is refused, and the acceptor's
// welcome says that it reads compact frames at all.
TEST_F(TcpHostileInput, APlainCompactFrameWithAnAcknowledgementIsOneErrorAndDeliversNothing) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    ASSERT_TRUE(s.send_struct(hello_from(3)));
    tcp::Welcome w{};
    ASSERT_EQ(s.read_exact(&w, sizeof w), sizeof w) << "a good Hello got no Welcome";
    EXPECT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::welcome)) << "refused for " << w.reason;
    EXPECT_NE(w.reserved & tcp::compact_frames_bit, 0u) << "the welcome does not say the acceptor reads compact frames";
    std::vector<std::byte> payload(64);
    fill_payload(payload, 3, 0);
    const std::uint32_t frame[2] = {tcp::compact_word(payload.size(), false), 7};
    ASSERT_TRUE(s.send_struct(frame));
    ASSERT_TRUE(s.send_all(payload.data(), payload.size()));
    EXPECT_TRUE(s.wait_closed()) << "a compact frame with flags did not close the connection";
    expect_refused({Refusal::protocol_error});
    expect_error("sent a compact frame with flags 7");
}

TEST_F(TcpHostileInput, AFrameOfAnUnknownTypeAfterAGoodHelloIsOneErrorAndDeliversNothing) {
    auto s = handshake_as_node_3();
    ASSERT_TRUE(s.valid());
    tcp::FrameHeader frame;
    frame.length = 0;
    frame.seq = 0;
    frame.type = 77;
    ASSERT_TRUE(s.send_struct(frame));
    EXPECT_TRUE(s.wait_closed()) << "a frame of an unknown type did not close the connection";
    expect_refused({Refusal::protocol_error});
    expect_error("unknown type 77");
}

TEST_F(TcpHostileInput, AConnectionThatNeverSpeaksIsClosedAfterTheHandshakeTimeoutAndCounted) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    const auto opened = Clock::now();
    EXPECT_TRUE(s.wait_closed(peer_timeout + 10s)) << "a silent connection was never closed";
    const auto waited = Clock::now() - opened;
    EXPECT_LT(waited, peer_timeout + 5s);
    expect_refused({Refusal::handshake_timeout});
}

TEST_F(TcpHostileInput, TwoHundredSilentConnectionsAtOnceDoNotStopGoodTrafficAndAreAllClosedAndCounted) {
    std::vector<RawSocket> flood;
    for (int i = 0; i < 200; ++i) {
        flood.push_back(RawSocket::connect_to(port()));
        ASSERT_TRUE(flood.back().valid()) << "connection " << i << " could not be opened";
    }
    // A fresh handshake of the good nodes has to get through the flood too.
    tcp1().reset_connections(2);
    EXPECT_TRUE(traffic_->flows(200)) << "good traffic stopped while 200 connections waited: " << traffic_->error();
    for (auto& s : flood)
        EXPECT_TRUE(s.wait_closed(peer_timeout + 20s)) << "a silent connection of the flood was never closed";
    expect_refused({Refusal::handshake_timeout, Refusal::too_many}, 200);
}

// Holds every free file descriptor of this process (below a lowered soft limit)
// until destroyed, which gives them back and restores the limit.
class DescriptorsExhausted {
public:
    DescriptorsExhausted() {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit lowered = saved_;
        lowered.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, 1024);
        ::setrlimit(RLIMIT_NOFILE, &lowered);
        for (;;) {
            const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0) {
                exhausted_ = errno == EMFILE;
                break;
            }
            held_.push_back(fd);
        }
    }
    DescriptorsExhausted(const DescriptorsExhausted&) = delete;
    DescriptorsExhausted& operator=(const DescriptorsExhausted&) = delete;
    ~DescriptorsExhausted() {
        for (int fd : held_)
            ::close(fd);
        ::setrlimit(RLIMIT_NOFILE, &saved_);
    }
    [[nodiscard]] bool exhausted() const { return exhausted_; }

private:
    rlimit saved_{};
    std::vector<int> held_;
    bool exhausted_ = false;
};

// Out of descriptors, a connection is accepted and closed at once (the listener's
// spare descriptor), counted and logged, instead of waiting in the backlog while the
// background thread spins on a listening socket that stays ready; with descriptors
// back, the listener serves as before (a new handshake of the good nodes).
TEST_F(TcpHostileInput, OutOfDescriptorsAConnectionIsClosedAtOnceAndCountedAndTheListenerServesAfterwards) {
    constexpr int knocks = 3;
    std::vector<RawSocket> clients; // made before the descriptors run out: connecting needs none
    for (int i = 0; i < knocks; ++i) {
        clients.emplace_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        ASSERT_TRUE(clients.back().valid());
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    {
        DescriptorsExhausted exhausted;
        ASSERT_TRUE(exhausted.exhausted()) << "could not use up the descriptors";
        for (auto& c : clients) {
            ASSERT_EQ(::connect(c.fd(), reinterpret_cast<const sockaddr*>(&to), sizeof to), 0) << std::strerror(errno);
            EXPECT_TRUE(c.wait_closed()) << "a connection waited while the acceptor had no descriptor";
        }
        expect_refused({Refusal::no_descriptors}, knocks);
    }
    tcp1().reset_connections(2);
    EXPECT_TRUE(traffic_->flows(200)) << "the listener did not serve again: " << traffic_->error();
}

// ------------------------------------------------------------ waiting connections

// One node whose connections may wait 30 s for their Hello.
PartitionText patient_listener(const std::string& partition) {
    auto text = local_partition(partition, 2, 1000ms);
    text.tcp_section = "{handshake_timeout: 30s}";
    return text;
}

// Whether the other side has closed s by now (no wait).
bool closed_now(RawSocket& s) {
    return s.wait_closed(0ms);
}

// docs/tcp.md: "fewer than 1024 connections waiting for their Hello | too_many |
// closed at once". 1024 silent connections wait; each one more is closed at once and
// counted; once they go (closed before a whole Hello), a good node gets through.
TEST(TcpListener, BeyondTheWaitingConnectionsItHoldsEachNewOneIsClosedAtOnceAndCountedAsTooMany) {
    const auto text = patient_listener(partition_for_test());
    ASSERT_EQ(text.nodes.size(), 2u) << "no free ports";
    auto f1 = NodeFactory::create(text.load(), 1);
    auto& listener = tcp_of(*f1);
    const std::size_t held = tcp::Parameters{}.max_pending;
    constexpr std::size_t beyond = 8;
    std::vector<RawSocket> waiting;
    for (std::size_t i = 0; i < held + beyond; ++i) {
        waiting.push_back(RawSocket::connect_to(text.nodes[0].port));
        ASSERT_TRUE(waiting.back().valid()) << "connection " << i << " could not be opened";
    }
    // Accepted in the order they connected: the last ones found the listener full.
    for (std::size_t i = held; i < held + beyond; ++i)
        EXPECT_TRUE(waiting[i].wait_closed()) << "connection " << i << " waited beyond the listener's " << held;
    EXPECT_EQ(listener.listener_stats().count(Refusal::too_many), beyond) << describe(listener.listener_stats());
    std::size_t closed = 0;
    for (std::size_t i = 0; i < held; ++i)
        closed += closed_now(waiting[i]) ? 1 : 0;
    EXPECT_EQ(closed, 0u) << "connections within the listener's " << held << " were closed before their time";
    waiting.clear();
    EXPECT_TRUE(
        eventually([&] { return listener.listener_stats().count(Refusal::handshake_timeout) == held; }, patience))
        << "the waiting connections that closed were not all counted: " << describe(listener.listener_stats());
    auto f2 = NodeFactory::create(text.load(), 2);
    f2->create_node(1)->send(make_message(*f2, 64, 2, 0));
    const auto m = f1->create_node(2)->receive(patience);
    ASSERT_TRUE(m) << "a good node did not get through after the flood";
    EXPECT_EQ(check_payload(*m).stream, 2u);
    EXPECT_EQ(listener.listener_stats().count(Refusal::too_many), beyond);
}

// A connection still waiting for its Hello when the factory ends is closed with it,
// not left to the peer's timeout.
TEST(TcpListener, AConnectionStillInItsHandshakeIsClosedWhenTheFactoryEnds) {
    const auto text = patient_listener(partition_for_test());
    ASSERT_EQ(text.nodes.size(), 2u) << "no free ports";
    auto f1 = NodeFactory::create(text.load(), 1);
    auto& listener = tcp_of(*f1);
    auto silent = RawSocket::connect_to(text.nodes[0].port);
    ASSERT_TRUE(silent.valid());
    // A connection after it, refused for its magic, shows that the silent one was
    // accepted (in the order they connected) and now waits for its Hello.
    auto marker = RawSocket::connect_to(text.nodes[0].port);
    ASSERT_TRUE(marker.valid());
    const std::uint32_t not_the_magic = 0x47455420; // "GET "
    ASSERT_TRUE(marker.send_struct(not_the_magic));
    ASSERT_TRUE(eventually([&] { return listener.listener_stats().count(Refusal::bad_magic) == 1; }, patience))
        << describe(listener.listener_stats());
    EXPECT_FALSE(closed_now(silent)) << "the silent connection was closed before the factory ended";
    f1.reset();
    EXPECT_TRUE(silent.wait_closed()) << "a connection waiting for its Hello outlived its factory";
}

// ------------------------------------------------------------ authenticated partition

// The hostile-input fixture with auth_key_file set (docs/security.md): nodes 1 and 2
// hold the key and their traffic flows while the hostile side knocks as node 3.
class TcpAuthenticated : public TcpHostileInput {
protected:
    TcpAuthenticated() { key_ = test_auth_key(1); }

    ip::AuthHello auth_hello_from(NodeId from) const {
        return ip::make_auth_hello(tcp::protocol, from, 2, 0x1234'5678'9abc'def0ULL + from, text_.partition);
    }
    // Reads the Challenge to hello; checks it proves the partition's key.
    ip::Challenge read_challenge(RawSocket& s, const ip::AuthHello& hello) {
        ip::Challenge c{};
        EXPECT_EQ(s.read_exact(&c, sizeof c), sizeof c) << "an AuthHello got no Challenge";
        EXPECT_EQ(c.header.kind, ip::kind_challenge);
        EXPECT_EQ(c.header.from, 2u);
        EXPECT_TRUE(ip::challenge_proves_key(*key_, hello, c)) << "the acceptor's challenge does not prove the key";
        return c;
    }
};

TEST_F(TcpAuthenticated, AConnectorWithTheKeyIsWelcomedAfterItsProof) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    const auto hello = auth_hello_from(3);
    ASSERT_TRUE(s.send_struct(hello));
    const auto challenge = read_challenge(s, hello);
    ASSERT_TRUE(s.send_struct(ip::make_proof(*key_, hello, challenge)));
    tcp::Welcome w{};
    ASSERT_EQ(s.read_exact(&w, sizeof w), sizeof w) << "a good proof got no Welcome";
    EXPECT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::welcome)) << "refused for " << w.reason;
    EXPECT_TRUE(eventually([&] { return tcp2().listener_stats().accepted > before_.accepted; }, 10s));
}

TEST_F(TcpAuthenticated, AConnectorWithoutAKeyIsRefusedAsUnauthenticated) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    ASSERT_TRUE(s.send_struct(hello_from(3)));
    expect_refusal_or_close(s, Refusal::unauthenticated);
    expect_refused({Refusal::unauthenticated});
}

TEST_F(TcpAuthenticated, AProofMadeWithAnotherKeyIsRefusedAsBadProof) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    const auto hello = auth_hello_from(3);
    ASSERT_TRUE(s.send_struct(hello));
    ip::Challenge c{};
    ASSERT_EQ(s.read_exact(&c, sizeof c), sizeof c);
    EXPECT_FALSE(ip::challenge_proves_key(test_auth_key(2), hello, c))
        << "another key checked the acceptor's challenge";
    ASSERT_TRUE(s.send_struct(ip::make_proof(test_auth_key(2), hello, c)));
    expect_refusal_or_close(s, Refusal::bad_proof);
    expect_refused({Refusal::bad_proof});
}

TEST_F(TcpAuthenticated, AConnectorThatCannotProveTheKeyAndClosesIsCountedAsBadProof) {
    auto s = RawSocket::connect_to(port());
    ASSERT_TRUE(s.valid());
    ASSERT_TRUE(s.send_struct(auth_hello_from(3)));
    ip::Challenge c{};
    ASSERT_EQ(s.read_exact(&c, sizeof c), sizeof c);
    s = RawSocket{}; // closes, as a connector with another key does
    expect_refused({Refusal::bad_proof});
}

// A recorded handshake sent again: the acceptor's fresh nonce makes the recorded
// proof answer nothing.
TEST_F(TcpAuthenticated, AReplayedHandshakeIsRefusedAsBadProof) {
    const auto hello = auth_hello_from(3);
    ip::Proof recorded{};
    {
        auto s = RawSocket::connect_to(port());
        ASSERT_TRUE(s.valid());
        ASSERT_TRUE(s.send_struct(hello));
        recorded = ip::make_proof(*key_, hello, read_challenge(s, hello));
        ASSERT_TRUE(s.send_struct(recorded));
        tcp::Welcome w{};
        ASSERT_EQ(s.read_exact(&w, sizeof w), sizeof w);
        ASSERT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::welcome));
    }
    // Node 3's connection closed without a goodbye: node 2 asks whether node 3 lives
    // (it connects to node 3's port), and while that attempt is under way the
    // tie-break refuses node 3's Hello as crossed (node 2 has the lower id); a
    // connector tries again, as node 3 would.
    RawSocket replay;
    ip::Challenge fresh{};
    const auto deadline = Clock::now() + patience;
    for (;;) {
        ASSERT_LT(Clock::now(), deadline) << "node 2 kept refusing node 3's Hello as crossed";
        replay = RawSocket::connect_to(port());
        ASSERT_TRUE(replay.valid());
        ASSERT_TRUE(replay.send_struct(hello));
        ASSERT_EQ(replay.read_exact(&fresh.header, sizeof fresh.header), sizeof fresh.header);
        if (fresh.header.kind == static_cast<std::uint16_t>(tcp::Kind::refusal) &&
            fresh.header.reason == static_cast<std::uint32_t>(Refusal::crossed)) {
            continue;
        }
        break;
    }
    ASSERT_EQ(fresh.header.kind, ip::kind_challenge);
    auto* rest = reinterpret_cast<std::byte*>(&fresh) + sizeof fresh.header;
    ASSERT_EQ(replay.read_exact(rest, sizeof fresh - sizeof fresh.header), sizeof fresh - sizeof fresh.header);
    ASSERT_TRUE(replay.send_struct(recorded));
    expect_refusal_or_close(replay, Refusal::bad_proof);
    expect_refused({Refusal::bad_proof});
}

// Whole factories: one with another key and one without any never reach node 2,
// each knock is counted on both sides, and nodes 1 and 2 (the fixture's traffic,
// checked in TearDown) keep theirs.
TEST(TcpAuthentication, FactoriesWithAnotherKeyOrNoneAreRefusedWhileTheKeyHoldersTalk) {
    auto text = local_partition(partition_for_test(), 4, 1000ms);
    ASSERT_EQ(text.nodes.size(), 4u) << "no free ports";
    auto with_key = text.load();
    with_key.auth_key = test_auth_key(1);
    auto other_key = with_key;
    other_key.auth_key = test_auth_key(2);
    auto no_key = with_key;
    no_key.auth_key.reset();
    auto f1 = NodeFactory::create(with_key, 1);
    auto f2 = NodeFactory::create(with_key, 2);
    auto f3 = NodeFactory::create(other_key, 3);
    auto f4 = NodeFactory::create(no_key, 4);
    auto& listener = tcp_of(*f2);
    f3->create_node(2)->send(make_message(*f3, 64, 3, 0));
    f4->create_node(2)->send(make_message(*f4, 64, 4, 0));
    f1->create_node(2)->send(make_message(*f1, 64, 1, 0));
    const auto from1 = f2->create_node(1)->receive(patience);
    ASSERT_TRUE(from1) << "the key holders did not talk";
    EXPECT_EQ(check_payload(*from1).stream, 1u);
    EXPECT_TRUE(eventually(
        [&] {
            const auto s = listener.listener_stats();
            return s.count(Refusal::bad_proof) >= 1 && s.count(Refusal::unauthenticated) >= 1;
        },
        10s))
        << describe(listener.listener_stats());
    EXPECT_TRUE(eventually([&] { return tcp_of(*f3).listener_stats().count(Refusal::bad_proof) >= 1; }, 10s))
        << "the connector with another key did not count the acceptor's failed challenge";
    // (counted just after the connection is installed, so possibly after the delivery)
    EXPECT_TRUE(eventually([&] { return listener.listener_stats().accepted >= 1; }, 10s));
    EXPECT_EQ(listener.listener_stats().accepted, 1u) << "only node 1's connection may be accepted";
    for (const NodeId id : {3u, 4u}) {
        try {
            EXPECT_FALSE(f2->create_node(id)->receive(200ms)) << "node " << id << " delivered a message";
        } catch (const PeerLost&) {
        }
    }
}

// ------------------------------------------------------------ a slow writer

// A peer that writes a large message in pieces, as a slow or far sender does. While
// the message is assembled its receiver's socket wakes whoever waits on it only once
// the rest is there (SO_RCVLOWAT set to the bytes still missing; above 1 MiB, every
// 128 KiB), so the pieces cost no wake-up each; the message arrives whole, the mark
// goes back to 1 byte once it is, and a peer that closes mid-message wakes the
// receiver whatever the mark (lost: its port refuses). docs/tcp.md, "A large
// message wakes its reader once".
class TcpSlowWriter : public ::testing::Test {
protected:
    static constexpr auto peer_timeout = 1000ms;
    static constexpr std::size_t step = 128 * 1024; // the mark's bound above 1 MiB

    void SetUp() override {
        text_ = local_partition(partition_for_test(), 3, peer_timeout);
        ASSERT_EQ(text_.nodes.size(), 3u) << "no free ports";
        f2_ = NodeFactory::create(text_.load(), 2);
        node3_ = f2_->create_node(3);
        raw_ = RawSocket::connect_to(text_.nodes[1].port);
        ASSERT_TRUE(raw_.valid());
        ASSERT_TRUE(raw_.send_struct(tcp::make_hello(3, 2, 0x5107'3000ULL, text_.partition)));
        tcp::Welcome w{};
        ASSERT_EQ(raw_.read_exact(&w, sizeof w), sizeof w) << "a good Hello got no Welcome";
        ASSERT_EQ(w.kind, static_cast<std::uint16_t>(tcp::Kind::welcome)) << "refused for " << w.reason;
        ASSERT_TRUE(eventually([&] { return (accepted_ = accepted_socket()) >= 0; }, patience))
            << "the acceptor's socket of the connection is not found";
    }

    // The acceptor's socket of the raw connection: the descriptor of this process
    // whose peer is the raw socket's local address.
    int accepted_socket() const {
        sockaddr_in mine{};
        socklen_t length = sizeof mine;
        if (::getsockname(raw_.fd(), reinterpret_cast<sockaddr*>(&mine), &length) != 0) return -1;
        for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
            int fd = -1;
            try {
                fd = std::stoi(entry.path().filename().string());
            } catch (const std::exception&) {
                continue;
            }
            sockaddr_in peer{};
            length = sizeof peer;
            if (fd == raw_.fd() || ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0 ||
                length != sizeof peer || peer.sin_family != AF_INET)
                continue;
            if (peer.sin_port == mine.sin_port && peer.sin_addr.s_addr == mine.sin_addr.s_addr) return fd;
        }
        return -1;
    }
    int low_water() const {
        int mark = -1;
        socklen_t length = sizeof mark;
        (void)::getsockopt(accepted_, SOL_SOCKET, SO_RCVLOWAT, &mark, &length);
        return mark;
    }
    // Message seq of size bytes: its frame header and first bytes, the rest, the whole.
    std::vector<std::byte> message(std::uint64_t seq, std::size_t size) const {
        std::vector<std::byte> bytes(tcp::frame_header_size + size);
        const auto h = tcp::data_frame(seq, size);
        std::memcpy(bytes.data(), &h, sizeof h);
        fill_payload(std::span(bytes).subspan(tcp::frame_header_size), 3, seq);
        return bytes;
    }
    // Receives in another thread while the test writes; the message or nothing.
    std::future<BufferPtr> receive_later() {
        return std::async(std::launch::async, [this] { return node3_->receive(patience); });
    }

    PartitionText text_;
    std::unique_ptr<NodeFactory> f2_;
    NodePtr node3_;
    RawSocket raw_;
    int accepted_ = -1;
};

TEST_F(TcpSlowWriter, ALargeMessageWrittenInPiecesWakesItsReaderOnceTheRestIsThereAndArrivesWhole) {
    constexpr std::size_t size = 1024 * 1024;
    constexpr std::size_t first = 100 * 1024;
    const auto bytes = message(0, size);
    auto received = receive_later();
    ASSERT_TRUE(raw_.send_all(bytes.data(), tcp::frame_header_size + first));
    // Read (in one or more reads) and waiting now for what is missing: no wake-up
    // before the whole rest is there.
    ASSERT_TRUE(eventually([&] { return low_water() > 1; }, patience))
        << "the receiver's socket wakes at every byte while a large message is assembled";
    EXPECT_GE(low_water(), static_cast<int>(size - first));
    EXPECT_LT(low_water(), static_cast<int>(size));
    // The rest, in pieces of 16 KiB.
    for (std::size_t at = tcp::frame_header_size + first; at < bytes.size(); at += 16 * 1024)
        ASSERT_TRUE(raw_.send_all(bytes.data() + at, std::min<std::size_t>(16 * 1024, bytes.size() - at)));
    const auto m = received.get();
    ASSERT_TRUE(m) << "the message did not arrive";
    ASSERT_EQ(m->size(), size);
    EXPECT_EQ(check_payload(*m).seq, 0u);
    EXPECT_EQ(low_water(), 1) << "a whole message leaves the mark where the next message's first byte wakes";

    // Above 1 MiB the mark is at most 128 KiB (waiting for more closed the sender's
    // window), and the message arrives whole too.
    constexpr std::size_t big = 3 * 1024 * 1024;
    const auto more = message(1, big);
    received = receive_later();
    ASSERT_TRUE(raw_.send_all(more.data(), tcp::frame_header_size + first));
    ASSERT_TRUE(eventually([&] { return low_water() > 1; }, patience));
    EXPECT_EQ(low_water(), static_cast<int>(step));
    ASSERT_TRUE(
        raw_.send_all(more.data() + tcp::frame_header_size + first, more.size() - tcp::frame_header_size - first));
    const auto m2 = received.get();
    ASSERT_TRUE(m2) << "the message above 1 MiB did not arrive";
    ASSERT_EQ(m2->size(), big);
    EXPECT_EQ(check_payload(*m2).seq, 1u);
    EXPECT_EQ(low_water(), 1);
}

TEST_F(TcpSlowWriter, APeerThatClosesMidMessageWakesItsReaderWithThePeerLost) {
    constexpr std::size_t size = 512 * 1024;
    const auto bytes = message(0, size);
    auto received = receive_later();
    ASSERT_TRUE(raw_.send_all(bytes.data(), tcp::frame_header_size + size / 2));
    ASSERT_TRUE(eventually([&] { return low_water() > 1; }, patience));
    raw_.close(); // half of the message was written
    EXPECT_THROW((void)received.get(), PeerLost) << "the receive did not end with the peer lost";
}

} // namespace
} // namespace msgpass::test
