// Tests of the tcp connector (ip/tcp/src/link.cpp) against an acceptor that
// answers wrongly: a raw listener on node 2's port plays node 2 toward node 1's real
// factory. It reads node 1's Hello and answers what a broken, foreign, refusing or
// restarted peer would: each answer must leave node 1 in the state docs/tcp.md says
// (the connection closed and tried again with the messages kept, or the peer reported
// lost once with the number of messages it did not acknowledge).
#include "tcp_test_support.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>

namespace msgpass::test {
namespace {

// A listening socket on 127.0.0.1:port, for a test that plays a node's acceptor.
class RawListener {
public:
    explicit RawListener(std::uint16_t port) {
        RawSocket s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!s.valid()) return;
        int one = 1;
        ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(port);
        if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(s.fd(), 16) != 0) return;
        socket_ = std::move(s);
    }
    [[nodiscard]] bool valid() const { return socket_.valid(); }

    // The next connection, or an invalid socket when none comes within bound.
    RawSocket accept(std::chrono::milliseconds bound = patience) {
        pollfd p{socket_.fd(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(bound.count())) != 1) return RawSocket();
        return RawSocket(::accept4(socket_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    }

private:
    RawSocket socket_;
};

// An acknowledgement, a goodbye or a skip as the 24 bytes of the wire.
bool send_frame(RawSocket& s, const tcp::FrameHeader& h) {
    std::array<std::byte, tcp::frame_header_size> bytes{};
    tcp::encode(h, bytes.data());
    return s.send_all(bytes.data(), bytes.size());
}

// Node 1 of a partition of two with its real factory; node 2's port is held by a
// RawListener that the test answers from.
class TcpConnector : public ::testing::Test {
protected:
    // The connector gives an attempt min(peer_timeout, 2 s) to be answered: the test
    // thread answers well within that on a loaded machine. backoff_max is then 100 ms.
    static constexpr auto peer_timeout = 2000ms;
    static constexpr auto backoff_max = 100ms;
    static constexpr std::uint64_t first_incarnation = 0x2222'0000'0000'0001ULL;
    static constexpr std::uint64_t second_incarnation = 0x2222'0000'0000'0002ULL;

    void SetUp() override {
        text_ = local_partition(partition_for_test(), 2, peer_timeout);
        ASSERT_EQ(text_.nodes.size(), 2u) << "no free ports";
        listener_ = std::make_unique<RawListener>(text_.nodes[1].port);
        ASSERT_TRUE(listener_->valid()) << "cannot listen on node 2's port " << text_.nodes[1].port;
        f1_ = NodeFactory::create(text_.load(), 1);
        to2_ = f1_->create_node(2);
    }

    // Accepts node 1's next connection and checks its Hello (node 1 to node 2, this
    // partition).
    RawSocket accept_hello() {
        auto s = listener_->accept();
        EXPECT_TRUE(s.valid()) << "node 1 did not connect to node 2";
        if (!s.valid()) return s;
        tcp::Hello h{};
        EXPECT_EQ(s.read_exact(&h, sizeof h), sizeof h) << "node 1 sent no whole Hello";
        EXPECT_EQ(h.magic, tcp::magic);
        EXPECT_EQ(h.kind, static_cast<std::uint16_t>(tcp::Kind::hello));
        EXPECT_EQ(h.from, 1u);
        EXPECT_EQ(h.to, 2u);
        EXPECT_EQ(std::string(h.partition, h.partition_length), text_.partition);
        return s;
    }

    static tcp::Welcome welcome(std::uint64_t incarnation, std::uint64_t next_expected) {
        return ip::make_welcome(tcp::protocol, 2, 1, incarnation, next_expected);
    }

    // The next data frame on s and its payload's header; fails the test when none
    // comes whole within bound. On the pair's one two-way connection node 1 first
    // says where it stands in node 2's messages (a resume frame: none received) and
    // may acknowledge alone; its data frames carry its acknowledgement (0: node 2
    // sends nothing).
    std::optional<std::pair<tcp::FrameHeader, PayloadHeader>> read_data(RawSocket& s) {
        std::array<std::byte, tcp::frame_header_size> bytes{};
        tcp::FrameHeader h{};
        for (;;) {
            if (s.read_exact(bytes.data(), bytes.size()) != bytes.size()) {
                ADD_FAILURE() << "no frame header from node 1";
                return std::nullopt;
            }
            h = tcp::decode(bytes.data());
            if (h.type == static_cast<std::uint32_t>(tcp::FrameType::resume) ||
                h.type == static_cast<std::uint32_t>(tcp::FrameType::ack)) {
                EXPECT_EQ(h.length, 0u);
                EXPECT_EQ(h.seq, 0u) << "node 1 claims messages node 2 never sent";
                continue;
            }
            break;
        }
        EXPECT_TRUE(h.type == static_cast<std::uint32_t>(tcp::FrameType::data) ||
                    h.type == static_cast<std::uint32_t>(tcp::FrameType::data_acked))
            << "frame type " << h.type;
        if (h.type == static_cast<std::uint32_t>(tcp::FrameType::data_acked)) {
            EXPECT_EQ(h.flags, 0u);
        }
        if (h.length > 1 * config::MiB) {
            ADD_FAILURE() << "a data frame of " << h.length << " bytes";
            return std::nullopt;
        }
        std::vector<std::byte> payload(h.length);
        if (s.read_exact(payload.data(), payload.size()) != payload.size()) {
            ADD_FAILURE() << "the payload of message " << h.seq << " did not come whole";
            return std::nullopt;
        }
        auto b = f1_->create_buffer(payload.size());
        std::memcpy(b->single()->data(), payload.data(), payload.size());
        try {
            return std::make_pair(h, check_payload(*b));
        } catch (const std::string& e) {
            ADD_FAILURE() << e;
            return std::nullopt;
        }
    }

    void send(std::uint64_t seq) { to2_->send(make_message(*f1_, 100, 1, seq)); }

    // The PeerLost node 1's receive from node 2 raises (node 2 never sends), or
    // nullopt when none comes within bound.
    std::optional<PeerLost> lost_within(std::chrono::milliseconds bound) {
        const auto deadline = Clock::now() + bound;
        while (Clock::now() < deadline) {
            try {
                if (auto m = to2_->receive(100ms)) ADD_FAILURE() << "node 2 delivered a message it never sent";
            } catch (const PeerLost& e) {
                return e;
            }
        }
        return std::nullopt;
    }

    // No PeerLost or other error on node 1's node 2 within grace.
    std::string no_loss(std::chrono::milliseconds grace = 200ms) {
        try {
            if (auto m = to2_->receive(grace)) return "node 2 delivered a message it never sent";
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }

    PartitionText text_;
    std::unique_ptr<RawListener> listener_;
    std::unique_ptr<NodeFactory> f1_;
    NodePtr to2_;
};

// docs/tcp.md: "A Welcome that cannot match the window (next_expected ... beyond what
// was sent) is never trimmed to fit: it counts as protocol_error, is logged, the
// messages not acknowledged are reported lost and the numbering starts again".
TEST_F(TcpConnector, AWelcomeThatExpectsMessagesNeverSentIsOnePeerLostAndTheNumberingStartsAgain) {
    for (std::uint64_t i = 0; i < 3; ++i)
        send(i);
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 10)));
    EXPECT_TRUE(s.wait_closed()) << "node 1 kept a connection whose Welcome does not match what it sent";
    const auto lost = lost_within(patience);
    ASSERT_TRUE(lost.has_value()) << "the mismatching Welcome was not reported";
    EXPECT_EQ(lost->peer(), 2u);
    EXPECT_EQ(lost->unacknowledged(), 3u) << lost->what();
    EXPECT_NE(std::string(lost->what())
                  .find("its welcome expects message 10 but this node acknowledged up to 0 and sent up to 3"),
              std::string::npos)
        << lost->what();
    EXPECT_EQ(tcp_of(*f1_).listener_stats().count(Refusal::protocol_error), 1u);
    EXPECT_EQ(to2_->stats().queue_depth, 0u) << "the messages reported lost are still queued";
    EXPECT_EQ(no_loss(), "") << "the mismatch was reported twice";

    // The numbering starts again: the next message is number 0 of a new connection.
    send(100);
    auto again = accept_hello();
    ASSERT_TRUE(again.send_struct(welcome(first_incarnation, 0)));
    const auto frame = read_data(again);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u);
    EXPECT_EQ(frame->second.seq, 100u) << "a message reported lost was sent after all";
    ASSERT_TRUE(send_frame(again, tcp::ack_frame(1)));
    EXPECT_TRUE(to2_->flush(patience));
}

// docs/tcp.md: "A restarted peer shows a new incarnation in its Hello or Welcome: the
// old one is lost." The connection to the first incarnation breaks with message 0 not
// acknowledged; the Welcome on the next one names another incarnation.
TEST_F(TcpConnector, AWelcomeOfANewIncarnationReportsTheOldOneLostOnceAndTheNextMessageIsItsNumberZero) {
    send(0);
    {
        auto s = accept_hello();
        ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
        const auto frame = read_data(s);
        ASSERT_TRUE(frame.has_value());
        EXPECT_EQ(frame->first.seq, 0u);
    } // closed without an acknowledgement or a goodbye: a crash
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(second_incarnation, 0)));
    const auto lost = lost_within(patience);
    ASSERT_TRUE(lost.has_value()) << "the restart was not reported";
    EXPECT_EQ(lost->unacknowledged(), 1u) << lost->what();
    EXPECT_NE(std::string(lost->what()).find("lost: it restarted; 1 messages sent to it were not acknowledged"),
              std::string::npos)
        << lost->what();
    EXPECT_EQ(no_loss(), "") << "the restart was reported twice";
    send(1);
    const auto frame = read_data(s);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u) << "the new incarnation did not get its own numbering";
    EXPECT_EQ(frame->second.seq, 1u) << "the message lost with the old incarnation was sent to the new one";
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(1)));
    EXPECT_TRUE(to2_->flush(patience));
}

// docs/tcp.md: "A peer that said goodbye with nothing outstanding is forgotten
// quietly; one that said goodbye with messages it never took is reported lost with
// their number."
TEST_F(TcpConnector, AGoodbyeWithMessagesOutstandingIsOnePeerLostWithTheirNumber) {
    for (std::uint64_t i = 0; i < 3; ++i)
        send(i);
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
    for (std::uint64_t i = 0; i < 3; ++i) {
        const auto frame = read_data(s);
        ASSERT_TRUE(frame.has_value());
        EXPECT_EQ(frame->first.seq, i);
    }
    ASSERT_TRUE(send_frame(s, tcp::goodbye_frame(1))); // took message 0 only
    s.shutdown_write();
    EXPECT_TRUE(s.wait_closed()) << "node 1 kept the connection after the goodbye";
    const auto lost = lost_within(patience);
    ASSERT_TRUE(lost.has_value()) << "a goodbye with two messages outstanding was not reported";
    EXPECT_EQ(lost->unacknowledged(), 2u) << lost->what();
    EXPECT_NE(std::string(lost->what()).find("it closed with messages outstanding (connection closed by the peer)"),
              std::string::npos)
        << lost->what();
    EXPECT_EQ(no_loss(), "") << "the goodbye was reported twice";
}

TEST_F(TcpConnector, AGoodbyeThatAcknowledgesEverythingIsForgottenQuietlyAndTheNextIncarnationIsNoLoss) {
    for (std::uint64_t i = 0; i < 3; ++i)
        send(i);
    {
        auto s = accept_hello();
        ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
        for (std::uint64_t i = 0; i < 3; ++i)
            ASSERT_TRUE(read_data(s).has_value());
        ASSERT_TRUE(send_frame(s, tcp::goodbye_frame(3)));
        s.shutdown_write();
        // Node 1 closes its side once it took the goodbye: the next send sees it.
        EXPECT_TRUE(s.wait_closed()) << "node 1 kept the connection after the goodbye";
    }
    EXPECT_EQ(no_loss(), "") << "a clean goodbye was reported";
    // A later process of node 2 (another incarnation) numbers from 0 and is no loss.
    send(3);
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(second_incarnation, 0)));
    const auto frame = read_data(s);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u);
    EXPECT_EQ(frame->second.seq, 3u);
    EXPECT_EQ(no_loss(), "") << "the next incarnation after a clean goodbye was reported as a restart";
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(1)));
}

// Toward the connector the acceptor writes acknowledgements and its goodbye only. A
// frame that is neither, or one that acknowledges messages never sent, breaks the
// connection; the messages are kept and sent again on the next one, once.
struct BadAckFrame {
    const char* name;
    tcp::FrameHeader frame;
    bool reported = false; // a frame the reading side reports once as an Error (as the acceptor does)
};

class TcpConnectorBadFrame : public TcpConnector, public ::testing::WithParamInterface<BadAckFrame> {};

TEST_P(TcpConnectorBadFrame, BreaksTheConnectionAndTheMessageIsSentAgainOnTheNextOnce) {
    send(0);
    {
        auto s = accept_hello();
        ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
        const auto frame = read_data(s);
        ASSERT_TRUE(frame.has_value());
        ASSERT_TRUE(send_frame(s, GetParam().frame));
        EXPECT_TRUE(s.wait_closed()) << "node 1 kept the connection after " << GetParam().name;
    }
    if (GetParam().reported) {
        const std::string error = no_loss();
        EXPECT_NE(error.find("node 2 sent"), std::string::npos) << GetParam().name << ": " << error;
    }
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
    const auto frame = read_data(s);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u);
    EXPECT_EQ(frame->second.seq, 0u);
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(1)));
    EXPECT_TRUE(to2_->flush(patience));
    EXPECT_EQ(to2_->stats().retries, 1u) << "message 0 was not counted as sent again";
    EXPECT_EQ(to2_->stats().messages_sent, 1u);
    EXPECT_EQ(no_loss(), "") << "a broken connection to a live peer was reported as a loss";
    send(1); // the connection works: message 1 follows on it
    const auto next = read_data(s);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->first.seq, 1u);
    EXPECT_EQ(next->second.seq, 1u);
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(2)));
}

INSTANTIATE_TEST_SUITE_P(
    Frames, TcpConnectorBadFrame,
    ::testing::Values(BadAckFrame{"an acknowledgement of messages never sent", tcp::ack_frame(5)},
                      BadAckFrame{"a frame of an unknown type", tcp::FrameHeader{0, 1, 77, 0}, true},
                      // node 2's first message is number 0: data is welcome both ways
                      BadAckFrame{"a data frame out of sequence", tcp::data_frame(3, 0), true},
                      BadAckFrame{"an acknowledgement with a length", tcp::FrameHeader{8, 1, 2, 0}, true}),
    [](const auto& info) {
        std::string name;
        for (const char* p = info.param.name; *p != '\0'; ++p)
            if (std::isalnum(static_cast<unsigned char>(*p))) name += *p;
        return name;
    });

// An answer to the Hello that is no Welcome: node 1 closes the connection and tries
// again, keeping its messages; nothing is lost while the peer was never reached. A
// refusal is tried again only after the longest backoff.
struct BadAnswer {
    const char* name;
    tcp::Welcome answer;
    std::chrono::milliseconds retry_after; // the least time to the next attempt
};

tcp::Welcome foreign_answer() {
    auto w = ip::make_welcome(tcp::protocol, 2, 3, 0x2222'0000'0000'0001ULL, 0); // to node 3
    return w;
}

tcp::Welcome unexpected_answer() {
    auto w = ip::make_welcome(tcp::protocol, 2, 1, 0x2222'0000'0000'0001ULL, 0);
    w.kind = 9; // of tcp's magic and version, for this pair, but no kind of answer
    return w;
}

class TcpConnectorBadAnswer : public TcpConnector, public ::testing::WithParamInterface<BadAnswer> {};

TEST_P(TcpConnectorBadAnswer, ClosesAndTriesAgainWithTheMessagesKept) {
    send(0);
    Clock::time_point answered;
    {
        auto s = accept_hello();
        answered = Clock::now();
        ASSERT_TRUE(s.send_struct(GetParam().answer));
        EXPECT_TRUE(s.wait_closed()) << "node 1 kept the connection after " << GetParam().name;
    }
    auto s = accept_hello();
    const auto waited = Clock::now() - answered;
    EXPECT_GE(waited, GetParam().retry_after) << "tried again after " << waited / 1ms << " ms";
    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
    const auto frame = read_data(s);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u);
    EXPECT_EQ(frame->second.seq, 0u);
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(1)));
    EXPECT_TRUE(to2_->flush(patience));
    EXPECT_EQ(no_loss(), "");
    EXPECT_EQ(to2_->stats().messages_sent, 1u);
    EXPECT_EQ(to2_->stats().retries, 0u) << "nothing was written before the handshake succeeded";
}

INSTANTIATE_TEST_SUITE_P(
    Answers, TcpConnectorBadAnswer,
    ::testing::Values(BadAnswer{"Refusal", ip::make_refusal(tcp::protocol, 2, 1, 7, Refusal::wrong_partition), 100ms},
                      BadAnswer{"ForeignWelcome", foreign_answer(), 0ms},
                      BadAnswer{"UnknownKind", unexpected_answer(), 0ms}),
    [](const auto& info) { return std::string(info.param.name); });

// While it lives, this process can open no descriptor: its soft limit is below every
// free descriptor number (the descriptors open stay usable); destroyed, it restores
// the limit. (Holding every free descriptor is not enough here: a descriptor the
// connector closes is free again for its next socket.)
class NoNewDescriptors {
public:
    NoNewDescriptors() {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit lowered = saved_;
        lowered.rlim_cur = 3; // stdin, stdout and stderr
        set_ = ::setrlimit(RLIMIT_NOFILE, &lowered) == 0;
    }
    NoNewDescriptors(const NoNewDescriptors&) = delete;
    NoNewDescriptors& operator=(const NoNewDescriptors&) = delete;
    ~NoNewDescriptors() { ::setrlimit(RLIMIT_NOFILE, &saved_); }
    [[nodiscard]] bool set() const { return set_; }

private:
    rlimit saved_{};
    bool set_ = false;
};

// While it lives, what this process writes on stderr goes into a pipe that the test
// reads (with a bound); destroyed, it restores stderr and writes there what it took.
class StderrCapture {
public:
    StderrCapture() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
        read_ = fds[0];
        saved_ = ::dup(STDERR_FILENO);
        if (saved_ < 0 || ::dup2(fds[1], STDERR_FILENO) < 0) {
            ::close(fds[1]);
            return;
        }
        ::close(fds[1]);
        ok_ = true;
    }
    StderrCapture(const StderrCapture&) = delete;
    StderrCapture& operator=(const StderrCapture&) = delete;
    ~StderrCapture() {
        if (saved_ >= 0) {
            ::dup2(saved_, STDERR_FILENO);
            ::close(saved_);
        }
        (void)take(0ms);
        if (!text_.empty()) (void)!::write(STDERR_FILENO, text_.data(), text_.size());
        if (read_ >= 0) ::close(read_);
    }
    [[nodiscard]] bool ok() const { return ok_; }

    // True once what was written contains `what`; false after bound.
    bool wait_for(const std::string& what, std::chrono::milliseconds bound) {
        const auto deadline = Clock::now() + bound;
        while (text_.find(what) == std::string::npos) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) return false;
            (void)take(left);
        }
        return true;
    }
    [[nodiscard]] const std::string& text() const { return text_; }

private:
    // Appends what the pipe holds, waiting at most bound for the first byte.
    bool take(std::chrono::milliseconds bound) {
        pollfd p{read_, POLLIN, 0};
        if (read_ < 0 || ::poll(&p, 1, static_cast<int>(bound.count())) != 1) return false;
        char chunk[4096];
        ssize_t n = 0;
        while ((n = ::read(read_, chunk, sizeof chunk)) > 0)
            text_.append(chunk, static_cast<std::size_t>(n));
        return true;
    }

    int read_ = -1, saved_ = -1;
    bool ok_ = false;
    std::string text_;
};

// Out of file descriptors the connector cannot open a socket: a known peer whose
// connection broke is declared lost after peer_timeout, and the report names why;
// with descriptors back, the next message reaches the peer's next connection.
TEST_F(TcpConnector, WithoutDescriptorsForASocketAKnownPeerIsLostAfterPeerTimeoutNamingTheCause) {
    send(0);
    auto s = accept_hello();
    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
    ASSERT_TRUE(read_data(s).has_value());
    Clock::time_point broken;
    Clock::time_point logged;
    {
        // The loss is seen in node 1's log while no descriptor can be opened (the
        // sanitizers need descriptors to report on an exception thrown meanwhile);
        // the PeerLost is taken once the limit is back.
        StderrCapture log;
        ASSERT_TRUE(log.ok()) << "cannot capture stderr";
        NoNewDescriptors none;
        ASSERT_TRUE(none.set()) << "could not lower the descriptor limit";
        broken = Clock::now();
        ::shutdown(s.fd(), SHUT_RDWR); // the connection breaks; its descriptor stays taken
        EXPECT_TRUE(log.wait_for("lost: no connection for peer_timeout (socket: ", peer_timeout + patience))
            << "node 1 did not declare node 2 lost for want of a socket; its log: " << log.text();
        logged = Clock::now();
    }
    EXPECT_GE(logged - broken, peer_timeout) << "declared lost before peer_timeout";
    const auto lost = lost_within(patience);
    ASSERT_TRUE(lost.has_value()) << "the loss in the log was not raised";
    EXPECT_EQ(lost->unacknowledged(), 1u) << lost->what();
    EXPECT_NE(std::string(lost->what()).find("no connection for peer_timeout (socket: Too many open files)"),
              std::string::npos)
        << lost->what();
    s.close();
    send(1);
    auto again = accept_hello();
    ASSERT_TRUE(again.send_struct(welcome(first_incarnation, 1)));
    const auto frame = read_data(again);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 1u) << "the numbering did not go on through the loss";
    EXPECT_EQ(frame->second.seq, 1u);
    ASSERT_TRUE(send_frame(again, tcp::ack_frame(2)));
}

// ------------------------------------------------ the tie-break of crossing connections

// The bytes of a message of node 2's stream as a data frame on the wire.
bool send_message(RawSocket& s, NodeFactory& f, std::uint64_t seq) {
    auto m = make_message(f, 100, 2, seq);
    std::vector<std::byte> bytes(m->size());
    std::memcpy(bytes.data(), m->single()->data(), bytes.size());
    return send_frame(s, tcp::data_frame(seq, bytes.size())) && s.send_all(bytes.data(), bytes.size());
}

// Node 1 (the lower id) connects to node 2 and, before node 2 answers, node 2's own
// Hello arrives: node 1 refuses it as crossed (counted as such, not as a fault) and
// keeps its own connection, which then carries both ways: node 1's message to node 2
// after its resume frame, node 2's message to node 1.
TEST_F(TcpConnector, TheLowerNodeRefusesACrossingHelloAndItsOwnConnectionCarriesBothWays) {
    send(0);
    auto s = accept_hello(); // node 1's attempt, not answered yet
    ASSERT_TRUE(s.valid());
    auto crossing = RawSocket::connect_to(text_.nodes[0].port);
    ASSERT_TRUE(crossing.valid()) << "cannot connect to node 1";
    ASSERT_TRUE(crossing.send_struct(tcp::make_hello(2, 1, first_incarnation, text_.partition)));
    tcp::Welcome answer{};
    ASSERT_EQ(crossing.read_exact(&answer, sizeof answer), sizeof answer) << "node 1 did not answer the crossing Hello";
    EXPECT_EQ(answer.kind, static_cast<std::uint16_t>(tcp::Kind::refusal));
    EXPECT_EQ(answer.reason, static_cast<std::uint32_t>(Refusal::crossed));
    EXPECT_TRUE(crossing.wait_closed()) << "node 1 kept the crossing connection";
    const auto stats = tcp_of(*f1_).listener_stats();
    EXPECT_EQ(stats.crossed, 1u);
    EXPECT_EQ(stats.refused_total(), 0u) << "a crossing Hello was counted as a fault: " << describe(stats);
    EXPECT_EQ(stats.accepted, 0u);

    ASSERT_TRUE(s.send_struct(welcome(first_incarnation, 0)));
    const auto frame = read_data(s);
    ASSERT_TRUE(frame.has_value());
    EXPECT_EQ(frame->first.seq, 0u);
    ASSERT_TRUE(send_message(s, *f1_, 0)); // node 2's message 0 on node 1's connection
    auto m = to2_->receive(patience);
    ASSERT_TRUE(m) << "node 2's message did not come on node 1's connection";
    EXPECT_EQ(check_payload(*m).seq, 0u);
    EXPECT_EQ(m->source(), 2u);
    ASSERT_TRUE(send_frame(s, tcp::ack_frame(1)));
    EXPECT_TRUE(to2_->flush(patience));
    EXPECT_EQ(no_loss(), "");
}

// Node 2 (the higher id) connects to node 1 and, before node 1 answers, node 1's
// Hello arrives: node 2 welcomes it and takes it as the pair's connection; its own
// attempt stays open until node 1 refuses it (so node 1 never sees a Hello cut
// short), and its message goes on node 1's connection after node 1's resume frame,
// once.
TEST(TcpCrossing, TheHigherNodeTakesTheLowerNodesConnectionAndGivesItsOwnAttemptUp) {
    constexpr std::uint64_t node_1_incarnation = 0x1111'0000'0000'0001ULL;
    const auto text = local_partition(partition_for_test(), 2, 2000ms);
    ASSERT_EQ(text.nodes.size(), 2u) << "no free ports";
    RawListener listener(text.nodes[0].port); // node 1's port, played by the test
    ASSERT_TRUE(listener.valid());
    auto f2 = NodeFactory::create(text.load(), 2);
    auto to1 = f2->create_node(1);
    to1->send(make_message(*f2, 100, 2, 0));
    auto attempt = listener.accept(); // node 2's attempt, not answered yet
    ASSERT_TRUE(attempt.valid()) << "node 2 did not connect to node 1";
    tcp::Hello theirs{};
    ASSERT_EQ(attempt.read_exact(&theirs, sizeof theirs), sizeof theirs);
    EXPECT_EQ(theirs.from, 2u);

    auto ours = RawSocket::connect_to(text.nodes[1].port);
    ASSERT_TRUE(ours.valid()) << "cannot connect to node 2";
    ASSERT_TRUE(ours.send_struct(tcp::make_hello(1, 2, node_1_incarnation, text.partition)));
    tcp::Welcome answer{};
    ASSERT_EQ(ours.read_exact(&answer, sizeof answer), sizeof answer) << "node 2 did not answer node 1's Hello";
    EXPECT_EQ(answer.kind, static_cast<std::uint16_t>(tcp::Kind::welcome));
    EXPECT_EQ(answer.next_expected, 0u);
    // Node 2 gave its attempt up but keeps it open for node 1's refusal.
    EXPECT_FALSE(attempt.wait_closed(200ms)) << "node 2 cut its attempt short";
    const tcp::Welcome refusal = ip::make_refusal(tcp::protocol, 1, 2, node_1_incarnation, Refusal::crossed);
    ASSERT_TRUE(attempt.send_struct(refusal));

    ASSERT_TRUE(send_frame(ours, tcp::resume_frame(0))); // node 1 has none of node 2's messages
    std::array<std::byte, tcp::frame_header_size> bytes{};
    ASSERT_EQ(ours.read_exact(bytes.data(), bytes.size()), bytes.size()) << "node 2 sent nothing on the connection";
    const auto h = tcp::decode(bytes.data());
    EXPECT_TRUE(h.type == static_cast<std::uint32_t>(tcp::FrameType::data) ||
                h.type == static_cast<std::uint32_t>(tcp::FrameType::data_acked))
        << "frame type " << h.type;
    EXPECT_EQ(h.seq, 0u);
    EXPECT_EQ(h.length, 100u);
    std::vector<std::byte> payload(h.length);
    ASSERT_EQ(ours.read_exact(payload.data(), payload.size()), payload.size());
    ASSERT_TRUE(send_frame(ours, tcp::ack_frame(1)));
    EXPECT_TRUE(to1->flush(patience));
    EXPECT_TRUE(eventually([&] { return to1->stats().queue_depth == 0; }, patience));
    EXPECT_EQ(tcp_of(*f2).listener_stats().accepted, 1u);
    EXPECT_EQ(tcp_of(*f2).listener_stats().refused_total(), 0u) << describe(tcp_of(*f2).listener_stats());
}

} // namespace
} // namespace msgpass::test
