// Tests of tcp's lending receive (TcpNode::receive_view: small messages lent from
// reference-counted read chunks, ip/tcp/src/read_chunk.hpp) beyond the conformance
// suite's: views held while the read buffer moves on to other chunks and while the
// connection is reset and made again, released from another thread; and the
// acknowledgement of a large message as soon as it has been read whole.
#include "tcp_test_support.hpp"

#include "read_chunk.hpp"

#include <deque>

namespace msgpass::test {
namespace {

// ------------------------------------------------------------ the read chunks

// The read buffer reads on in another chunk when it would overwrite lent bytes, and
// in place when nothing is lent; a chunk outlives its reader while a view holds it.
TEST(TcpReadChunk, LentBytesAreNeverOverwrittenAndAChunkIsFreedByItsLastReference) {
    tcp::ReadBuffer rx;
    rx.ensure(64);
    std::memset(rx.data(), 'a', 64);
    rx.end = 64;
    rx.begin = 40; // 40 bytes parsed, 24 not yet
    tcp::ReadChunk* first = rx.chunk();
    first->lend(1); // a view of bytes 0..39
    MessageView lent({reinterpret_cast<const std::byte*>(first->data()), 40}, 3, &tcp::chunk_lender, first, 0);
    rx.data()[40] = std::byte{'b'};
    rx.compact();
    EXPECT_NE(rx.chunk(), first) << "compacted over a lent chunk";
    EXPECT_EQ(rx.begin, 0u);
    EXPECT_EQ(rx.end, 24u);
    EXPECT_EQ(rx.data()[0], std::byte{'b'}) << "the unparsed bytes moved";
    EXPECT_EQ(lent.data()[0], std::byte{'a'});
    rx.begin = rx.end;
    rx.rewind(true);
    EXPECT_EQ(rx.end, 0u) << "nothing lent from the new chunk: reading starts again at its front";
    // The old chunk is the spare, kept while lent; once released it is read into again.
    lent.release();
    rx.end = 10;
    rx.begin = 5;
    rx.chunk()->lend(1);
    tcp::ReadChunk* second = rx.chunk();
    rx.compact();
    EXPECT_EQ(rx.chunk(), first) << "the spare, no longer lent, was not reused";
    rx.clear();
    EXPECT_EQ(rx.chunk(), first) << "nothing lent from it: clear keeps the chunk";
    second->release(); // its view released: the spare (ASan: no leak, no double free at the end)
    first->lend(1);
    rx.clear();
    EXPECT_NE(rx.chunk(), first) << "cleared over a lent chunk";
    first->release();
}

// ------------------------------------------------------------ views over tcp

// A receiver that keeps up to 300 views at once (released oldest first, a third of
// them by another thread) while a mixed stream (small messages lent, larger ones
// read into their own buffers) goes on and the connection is reset mid-stream from
// either side: every message arrives once, in order, and every held view keeps its
// bytes until it is released.
TEST(TcpViews, ViewsHeldWhileTheReadBufferMovesOnAndTheConnectionIsResetStayIntactAndComeOnce) {
    NodePair pair(local_pair(2000ms));
    auto& [a, b, to_b, from_a] = pair;
    constexpr std::uint64_t n = 12000;
    constexpr std::uint64_t window = 1500;
    std::atomic<std::uint64_t> received{0};
    std::atomic<bool> failed{false};
    std::string send_error, receive_error;
    std::thread sender([&] {
        std::vector<std::byte> bytes;
        for (std::uint64_t i = 0; i < n && !failed; ++i) {
            if (!eventually([&] { return failed || i < received + window; }, patience)) {
                send_error = "the receiver stalled at " + std::to_string(received);
                failed = true;
                return;
            }
            try {
                const std::size_t size = i % 97 == 0 ? mixed_size(i) : sizeof(PayloadHeader) + (i * 37) % 300;
                if (i % 2 == 0) {
                    send_retrying(*to_b, make_message(*a, size, 0, i), "message " + std::to_string(i));
                } else {
                    bytes.resize(size);
                    fill_payload(bytes, 0, i);
                    send_bytes_retrying(*to_b, bytes, "message " + std::to_string(i));
                }
            } catch (const std::exception& e) {
                send_error = "message " + std::to_string(i) + ": " + e.what();
                failed = true;
                return;
            }
        }
        if (!to_b->flush(patience)) send_error = "could not flush";
    });
    std::mutex other_mutex;
    std::condition_variable other_wake;
    std::deque<std::pair<MessageView, std::uint64_t>> for_other; // released by the other thread
    bool done = false;                                           // other_mutex
    std::string other_error;
    std::thread other([&] {
        for (;;) {
            std::unique_lock lock(other_mutex);
            other_wake.wait(lock, [&] { return done || !for_other.empty(); });
            if (for_other.empty()) return; // done
            auto [v, seq] = std::move(for_other.front());
            for_other.pop_front();
            lock.unlock();
            try {
                if (check_view(v).seq != seq) other_error = "view of message " + std::to_string(seq) + " changed";
            } catch (const std::string& e) {
                other_error = "view of message " + std::to_string(seq) + ": " + e;
            }
            v.release();
        }
    });
    std::thread receiver([&] {
        std::deque<std::pair<MessageView, std::uint64_t>> held;
        auto release_oldest = [&] {
            auto& [v, seq] = held.front();
            if (seq % 3 == 0) {
                std::lock_guard lock(other_mutex);
                for_other.emplace_back(std::move(v), seq);
                other_wake.notify_one();
            } else {
                if (check_view(v).seq != seq) throw std::string("view of message " + std::to_string(seq) + " changed");
                v.release();
            }
            held.pop_front();
        };
        try {
            while (received < n && !failed) {
                auto v = from_a->receive_view(patience);
                if (!v) {
                    receive_error = "stalled at " + std::to_string(received);
                    break;
                }
                const auto h = check_view(v);
                if (h.seq != received) {
                    receive_error = "expected message " + std::to_string(received) + ", got " + std::to_string(h.seq);
                    break;
                }
                if (v.source() != 1) {
                    receive_error = "message " + std::to_string(h.seq) + " from node " + std::to_string(v.source());
                    break;
                }
                held.emplace_back(std::move(v), h.seq);
                ++received;
                if (held.size() > 1 + (h.seq * 7) % 300) release_oldest();
            }
            while (!held.empty())
                release_oldest();
            if (receive_error.empty() && !failed && from_a->receive_view(300ms)) receive_error = "a message came twice";
        } catch (const std::string& e) {
            receive_error = e;
        } catch (const Error& e) {
            receive_error = e.what();
        }
        if (!receive_error.empty()) failed = true;
    });
    int mid_stream = 0;
    for (std::uint64_t point = 1500; point < n; point += 2500) {
        if (!eventually([&] { return failed || received >= point; }, patience) || failed) break;
        if (point / 2500 % 2 == 0) {
            tcp_of(*a).reset_connections(2);
        } else {
            tcp_of(*b).reset_connections(1);
        }
        if (received < n) ++mid_stream;
    }
    sender.join();
    receiver.join();
    {
        std::lock_guard lock(other_mutex);
        done = true;
    }
    other_wake.notify_one();
    other.join();
    EXPECT_EQ(send_error, "");
    EXPECT_EQ(receive_error, "");
    EXPECT_EQ(other_error, "");
    EXPECT_EQ(received, n);
    EXPECT_GE(mid_stream, 3) << "the resets did not fall in the stream";
    EXPECT_EQ(from_a->stats().messages_received, n);
}

// The two receive calls mixed within what one read brought: messages lent by
// receive_view's read and then taken by receive() come as buffers, whole, in order,
// with their source; views still held are unchanged.
TEST(TcpViews, MessagesReadForViewsAndTakenAsBuffersComeWholeInOrder) {
    NodePair pair(local_pair(2000ms));
    auto& [a, b, to_b, from_a] = pair;
    constexpr std::uint64_t n = 400;
    for (std::uint64_t i = 0; i < n; ++i)
        to_b->send(make_message(*a, sizeof(PayloadHeader) + i % 50, 0, i));
    ASSERT_TRUE(to_b->flush(patience));
    std::vector<MessageView> views;
    for (std::uint64_t i = 0; i < n; ++i) {
        SCOPED_TRACE("message " + std::to_string(i));
        if (i % 5 < 2) {
            auto v = from_a->receive_view(patience);
            ASSERT_TRUE(v);
            ASSERT_EQ(check_view(v).seq, i);
            views.push_back(std::move(v));
        } else {
            auto m = from_a->receive(patience);
            ASSERT_TRUE(m);
            EXPECT_EQ(m->source(), 1u);
            ASSERT_EQ(m->size(), sizeof(PayloadHeader) + i % 50);
            ASSERT_EQ(check_payload(*m).seq, i);
        }
    }
    for (std::size_t k = 0; k < views.size(); ++k)
        EXPECT_EQ(check_view(views[k]).seq, k / 2 * 5 + k % 2) << "a view changed before it was released";
    views.clear();
    EXPECT_FALSE(from_a->receive_view(50ms));
}

// ------------------------------------------------------------ acknowledgements

// A large message is acknowledged as soon as it has been read whole, by the read
// that completed it (not after ack_every messages or ack_bytes, nor by the
// background thread for messages left unacknowledged): its sender lets it go then.
TEST(TcpLargeAck, ALargeMessageIsAcknowledgedByTheReadThatCompletesIt) {
    NodePair pair(local_pair(10000ms));
    auto& [a, b, to_b, from_a] = pair;
    auto* receiving = dynamic_cast<tcp::TcpNode*>(from_a.get());
    ASSERT_NE(receiving, nullptr);
    for (const std::size_t size : {std::size_t{1} << 20, std::size_t{200} * 1024, std::size_t{3} << 20}) {
        SCOPED_TRACE("size " + std::to_string(size));
        const std::uint64_t alone = receiving->standalone_acks() - receiving->idle_acks();
        SharedBuffer m = make_message(*a, size, 0, size);
        to_b->send_shared(m);
        auto got = from_a->receive(patience);
        ASSERT_TRUE(got);
        EXPECT_EQ(check_payload(*got).seq, size);
        EXPECT_TRUE(eventually([&] { return m.use_count() == 1; }, patience)) << "the sender still holds the message";
        EXPECT_EQ(receiving->standalone_acks() - receiving->idle_acks(), alone + 1)
            << "not acknowledged alone by the read that completed it";
    }
}

} // namespace
} // namespace msgpass::test
