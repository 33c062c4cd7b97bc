// The communicator's conformance suite (docs/communicator.md), written once and run
// on every technology like tests/conformance. Test names quote the rule they check
// (MPI matching, BMI requests, BIP probe, EPOS queues). On `auto` the nodes
// alternate between two machines, so node 1 reaches node 2 through tcp and node 3
// through sci.
#include <msgpass/comm.hpp>

#include "../support/partition.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
using comm::any_source;
using comm::any_tag;
using comm::Communicator;
using comm::Status;
constexpr auto patience = 10s; // a bound for waits that succeed in milliseconds

class CommConformance : public ::testing::TestWithParam<std::string> {
protected:
    config::Configuration make(int n, const std::function<void(config::Configuration&)>& tweak = {}) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        auto c = make_configuration(GetParam(), unique_partition(info->name()), n, tweak);
        if (GetParam() == "auto") {
            for (auto& node : c.nodes)
                node.machine = node.id % 2 == 1 ? "m1" : "m2";
        }
        return c;
    }
};

// Makes progress on a sending communicator from a thread of its own, as the
// sender's process would with its own calls: a node moves what it queued only when
// its process calls it. It flushes, and when nothing is queued blocks in probe for a
// tag nobody sends, so every message it pulls stays for the test to receive.
class Pump {
public:
    explicit Pump(Communicator& c)
        : thread_([this, &c] {
              while (!stop_.load(std::memory_order_acquire)) {
                  try {
                      // Hands queued messages over (sleeping in the nodes' flush), and
                      // when none are queued sleeps in a receive.
                      if (c.flush(20ms)) (void)c.probe(any_source, 0x7ffffff0, 5ms);
                  } catch (const std::exception& e) {
                      ADD_FAILURE() << "the pump's progress failed: " << e.what();
                      return;
                  }
              }
          }) {}
    Pump(const Pump&) = delete;
    Pump& operator=(const Pump&) = delete;
    ~Pump() {
        stop_.store(true, std::memory_order_release);
        thread_.join();
    }

private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

std::vector<std::byte> bytes_of(const std::string& s) {
    std::vector<std::byte> v(s.size());
    std::memcpy(v.data(), s.data(), s.size());
    return v;
}

std::string text_of(const Buffer& b) {
    std::string s(b.size(), '\0');
    b.copy_to(std::as_writable_bytes(std::span(s)));
    return s;
}

std::string text_of(std::span<const std::byte> b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void send_text(Communicator& c, NodeId dest, comm::Tag tag, const std::string& s) {
    c.send(dest, tag, bytes_of(s));
}

std::string recv_text(Communicator& c, NodeId source, comm::Tag tag, comm::Tag* got_tag = nullptr,
                      NodeId* got_source = nullptr) {
    auto m = c.recv(source, tag, patience);
    if (!m) {
        ADD_FAILURE() << "nothing matching (source " << source << ", tag " << tag << ") arrived within "
                      << patience.count() << " s";
        return "<timeout>";
    }
    if (got_tag) *got_tag = m->tag;
    if (got_source) *got_source = m->source;
    EXPECT_EQ(m->buffer->source(), m->source);
    return text_of(*m->buffer);
}

// Waits until the receiver has pulled `count` messages matching (source, tag) into
// its unexpected queue (each iprobe makes progress).
void await_unexpected(Communicator& c, std::uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (c.stats().unexpected_messages < count) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline)
            << "the unexpected queue holds " << c.stats().unexpected_messages << " messages, waited for " << count;
        (void)c.probe(any_source, 999999, 5ms);
    }
}

TEST_P(CommConformance, BlockingSendAndRecvCarryTagSourceAndPayloadAsAZeroCopyView) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    EXPECT_EQ(a.peers(), std::vector<NodeId>{2});
    send_text(a, 2, 7, "hello");
    auto m = b.recv(1, 7, patience);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->source, 1u);
    EXPECT_EQ(m->tag, 7);
    ASSERT_NE(m->buffer->single(), nullptr);
    EXPECT_EQ(text_of(*m->buffer), "hello");
    // A Buffer payload (sent as envelope + buffer, gathered) and an empty message.
    a.send(2, 8, HeapBuffer::copy_of(*m->buffer));
    a.send(2, 9, std::span<const std::byte>{});
    EXPECT_EQ(recv_text(b, 1, 8), "hello");
    auto empty = b.recv(1, 9, patience);
    ASSERT_TRUE(empty.has_value());
    EXPECT_EQ(empty->buffer->size(), 0u);
}

// MPI: "messages from one source that match the same receive are matched in the
// order they were sent"; a receive for another tag overtakes them.
TEST_P(CommConformance, MessagesFromOneSourceMatchingTheSameReceiveAreMatchedInSendOrder) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    constexpr int n = 50;
    for (int i = 0; i < n; ++i) {
        send_text(a, 2, 1, "one-" + std::to_string(i));
        send_text(a, 2, 2, "two-" + std::to_string(i));
    }
    for (int i = 0; i < n; ++i)
        ASSERT_EQ(recv_text(b, 1, 2), "two-" + std::to_string(i)) << "tag 2 out of its send order";
    for (int i = 0; i < n; ++i)
        ASSERT_EQ(recv_text(b, any_source, any_tag), "one-" + std::to_string(i)) << "tag 1 out of its send order";
    EXPECT_FALSE(b.iprobe(any_source, any_tag).has_value());
}

// MPI: "if a message matches several pending receives, it goes to the one posted
// first"; a blocking receive counts as posted when it is called, so a matching
// receive posted before it takes the first message, the blocking one the next.
TEST_P(CommConformance, AMessageGoesToTheEarliestPostedMatchingReceiveThoughABlockingReceiveWaitsForIt) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    const auto earlier = b.post_recv(1, 7);
    ASSERT_FALSE(earlier.done.has_value()) << "nothing was sent yet";
    const auto any = b.post_recv(any_source, any_tag);
    ASSERT_FALSE(any.done.has_value());
    Pump pump(a);
    send_text(a, 2, 7, "first");
    send_text(a, 2, 7, "second");
    send_text(a, 2, 7, "third");
    EXPECT_EQ(recv_text(b, 1, 7), "third") << "the receives posted before the blocking one match first";
    auto first = b.wait(earlier.id, patience);
    ASSERT_TRUE(first.has_value());
    ASSERT_EQ(first->status, Status::success);
    EXPECT_EQ(text_of(*first->buffer), "first");
    auto second = b.wait(any.id, patience);
    ASSERT_TRUE(second.has_value());
    ASSERT_EQ(second->status, Status::success);
    EXPECT_EQ(text_of(*second->buffer), "second");
    EXPECT_FALSE(b.iprobe(any_source, any_tag).has_value());
}

// MPI_Recv's receive (recv_into): the message copied into the caller's memory, cut to
// it (the envelope keeps its size), with recv's rules: a receive posted before it
// matches first, a message it does not match waits unexpected, a posted receive of
// another context (as MPI's per-peer loss receives) is passed by; a large message too.
TEST_P(CommConformance, AReceiveIntoTheCallersMemoryCopiesAndCutsTheMessageAndKeepsTheMatchingRules) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    MessageView held; // (released before the communicators and factories go)
    const auto other_context = b.post_recv(comm::Context{9}, 1, 0);
    ASSERT_FALSE(other_context.done.has_value());
    const auto earlier = b.post_recv(1, 7);
    ASSERT_FALSE(earlier.done.has_value());
    Pump pump(a);
    send_text(a, 2, 7, "first");
    send_text(a, 2, 5, "other");
    send_text(a, 2, 7, "second");
    std::array<std::byte, 16> into{};
    auto e = b.recv_into(comm::Context{}, 1, 7, into, &held);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->source, 1u);
    EXPECT_EQ(e->tag, 7);
    EXPECT_EQ(e->size, 6u);
    EXPECT_EQ(e->context, comm::Context{});
    EXPECT_EQ(text_of(std::span(into).first(6)), "second") << "the earlier posted receive takes \"first\"";
    EXPECT_TRUE(static_cast<bool>(held));
    held.release();
    auto first = b.wait(earlier.id, patience);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(text_of(*first->buffer), "first");
    EXPECT_EQ(recv_text(b, 1, 5), "other") << "the unmatched message waited unexpected";

    // Cut to the caller's 4 bytes; the bytes past them are untouched; no held memory asked.
    send_text(a, 2, 8, "a longer message");
    std::array<std::byte, 8> small{};
    std::fill(small.begin(), small.end(), std::byte{'#'});
    e = b.recv_into(comm::Context{}, any_source, any_tag, std::span(small).first(4));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->tag, 8);
    EXPECT_EQ(e->size, 16u);
    EXPECT_EQ(text_of(small), "a lo####");

    // Nothing queued, the other context's receive still posted: the message is taken
    // as it comes, and that receive stays pending.
    for (int i = 0; i < 100; ++i) {
        send_text(a, 2, 9, "m" + std::to_string(i));
        e = b.recv_into(comm::Context{}, 1, 9, into, &held);
        ASSERT_TRUE(e.has_value());
        ASSERT_EQ(text_of(std::span(into).first(e->size)), "m" + std::to_string(i));
    }
    held.release();
    EXPECT_FALSE(b.test(other_context.id).has_value()) << "a receive of another context took a message";

    // Above the eager limit (rendezvous).
    std::vector<std::byte> large(100 * 1024);
    for (std::size_t i = 0; i < large.size(); ++i)
        large[i] = static_cast<std::byte>(i * 7 + 3);
    const auto sent = a.post_send(2, 11, large);
    std::vector<std::byte> got(large.size());
    e = b.recv_into(comm::Context{}, 1, 11, got, &held);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->size, large.size());
    EXPECT_EQ(got, large);
    held.release();
    if (!sent.done) {
        EXPECT_TRUE(a.wait(sent.id, patience).has_value());
    }
    ASSERT_TRUE(b.cancel(other_context.id));
    (void)b.test(other_context.id);
}

// recv_into's wait takes the communicator's lock once: a message that is its own ends
// the wait without it. Another thread's posted receives of the same messages meanwhile
// (it sleeps while recv_into waits in the node, and takes the node over when woken):
// every message is taken once, each thread's in the order they were sent. Each thread
// stops at its first "end" (two are sent last).
TEST_P(CommConformance, AReceiveIntoMemoryAndAnotherThreadsPostedReceivesShareTheMessagesOnceInOrder) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    constexpr int n = 300;
    std::vector<int> by_recv, by_posted;
    bool recv_ended = false, posted_ended = false;
    std::thread receiver([&] {
        std::array<std::byte, 16> into{};
        for (;;) {
            const auto e = b.recv_into(comm::Context{}, 1, 5, into);
            if (!e) return;
            const std::string text = text_of(std::span(into).first(e->size));
            if (text == "end") {
                recv_ended = true;
                return;
            }
            by_recv.push_back(std::stoi(text));
        }
    });
    std::thread poster([&] {
        for (;;) {
            auto p = b.post_recv(1, 5);
            auto d = std::move(p.done);
            if (!d) d = b.wait(p.id, patience);
            if (!d) return;
            const std::string text = text_of(*d->buffer);
            if (text == "end") {
                posted_ended = true;
                return;
            }
            by_posted.push_back(std::stoi(text));
        }
    });
    for (int i = 0; i < n; ++i)
        send_text(a, 2, 5, std::to_string(i));
    send_text(a, 2, 5, "end");
    send_text(a, 2, 5, "end");
    receiver.join();
    poster.join();
    EXPECT_TRUE(recv_ended);
    EXPECT_TRUE(posted_ended);
    EXPECT_TRUE(std::is_sorted(by_recv.begin(), by_recv.end()));
    EXPECT_TRUE(std::is_sorted(by_posted.begin(), by_posted.end()));
    std::vector<int> all = by_recv;
    all.insert(all.end(), by_posted.begin(), by_posted.end());
    std::sort(all.begin(), all.end());
    ASSERT_EQ(all.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
        ASSERT_EQ(all[static_cast<std::size_t>(i)], i);
}

// MPI: a message of one communicator (context) never matches a receive of another,
// whatever its wildcards; the context travels in the envelope (not in tag bits), so
// every tag is free in every context.
TEST_P(CommConformance, AContextIsMatchedExactlySoAWildcardReceiveOfAnotherContextNeverTakesTheMessage) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    const comm::Context one{1}, two{2};
    a.send(one, 2, 7, bytes_of("in-one"));
    a.send(two, 2, 7, bytes_of("in-two"));
    a.send(2, 7, bytes_of("in-default"));
    // A wildcard receive of context two takes the message of two, though the one of
    // context one came first.
    auto m = b.recv(two, any_source, any_tag, patience);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(text_of(*m->buffer), "in-two");
    EXPECT_EQ(m->context, two);
    EXPECT_EQ(m->tag, 7);
    // Probe sees context one's message in one only; the calls without a context use
    // Context{0}.
    auto e = b.probe(one, any_source, any_tag, patience);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->context, one);
    EXPECT_EQ(e->size, 6u);
    EXPECT_EQ(recv_text(b, any_source, any_tag), "in-default");
    std::array<std::byte, 16> into{};
    auto posted = b.post_recv(one, 1, 7, into);
    auto done = posted.done ? std::move(posted.done) : b.wait(posted.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->context, one);
    EXPECT_EQ(text_of(std::span<const std::byte>(into.data(), done->bytes)), "in-one");
    EXPECT_FALSE(b.iprobe(one, any_source, any_tag).has_value());
    EXPECT_FALSE(b.iprobe(two, any_source, any_tag).has_value());
    // A large message (rendezvous) keeps its context too.
    std::vector<std::byte> big(comm::Limits{}.eager_limit + 1, std::byte{0x5a});
    const auto big_send = a.post_send(two, 2, 3, big);
    EXPECT_FALSE(b.iprobe(one, any_source, any_tag).has_value());
    auto got = b.recv(two, 1, 3, patience);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->context, two);
    EXPECT_EQ(got->buffer->size(), big.size());
    if (!big_send.done) {
        EXPECT_TRUE(a.wait(big_send.id, patience).has_value());
    }
}

// MPI: a rank may send to itself; in a context, this node is a destination and a
// source like a peer, matched in the same order as the messages from the nodes.
TEST_P(CommConformance, AMessageToItselfInAContextIsMatchedLikeAPeersMessage) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    Communicator a(*fa, c);
    const comm::Context ctx{3};
    const auto posted = a.post_recv(ctx, 1, 4);
    ASSERT_FALSE(posted.done.has_value());
    const auto sent = a.post_send(ctx, 1, 4, bytes_of("to-me"));
    ASSERT_TRUE(sent.done.has_value()) << "a send to itself completes at once";
    auto done = a.wait(posted.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->source, 1u);
    EXPECT_EQ(text_of(*done->buffer), "to-me");
    // Large ones go by a copy, not by rendezvous.
    std::vector<std::byte> big(comm::Limits{}.eager_limit * 2, std::byte{7});
    a.send(ctx, 1, 5, big);
    auto m = a.recv(ctx, any_source, 5, patience);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->buffer->size(), big.size());
    // Not in the calls without a context: there oneself is not a peer.
    EXPECT_THROW(a.send(1, 4, bytes_of("x")), UsageError);
}

// MPI_Ssend: a synchronous send completes only once a receive matched it, however
// small the message, to a peer or to itself.
TEST_P(CommConformance, ASynchronousSendCompletesOnlyOnceAReceiveMatchedIt) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    const comm::Context ctx{1};
    const auto sent = a.post_ssend(ctx, 2, 9, bytes_of("sync"));
    ASSERT_FALSE(sent.done.has_value());
    // The receiver pulls the announcement but does not receive: the send waits.
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (!b.iprobe(ctx, 1, 9)) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline);
        a.progress();
    }
    EXPECT_FALSE(a.wait(sent.id, 50ms).has_value()) << "completed before the receiver matched it";
    std::optional<comm::Message> m;
    std::thread receiver([&] { m = b.recv(ctx, 1, 9, patience); });
    auto done = a.wait(sent.id, patience);
    receiver.join();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::success);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(text_of(*m->buffer), "sync");
    // To itself: completes when its own receive takes it; a cancelled one is taken back.
    const auto self_sent = a.post_ssend(ctx, 1, 2, bytes_of("me"));
    ASSERT_FALSE(self_sent.done.has_value());
    EXPECT_FALSE(a.test(self_sent.id).has_value());
    auto mine = a.recv(ctx, 1, 2, patience);
    ASSERT_TRUE(mine.has_value());
    auto self_done = a.test(self_sent.id);
    ASSERT_TRUE(self_done.has_value());
    EXPECT_EQ(self_done->status, Status::success);
    const auto withdrawn = a.post_ssend(ctx, 1, 2, bytes_of("never"));
    EXPECT_TRUE(a.cancel(withdrawn.id));
    EXPECT_EQ(a.test(withdrawn.id)->status, Status::cancelled);
    EXPECT_FALSE(a.iprobe(ctx, 1, 2).has_value());
}

// MPI: "a receive names a source or any, a tag or any".
TEST_P(CommConformance, AnySourceAndAnyTagReceiveFromEverySourceAndTagAndNamedOnesOnlyTheirs) {
    auto c = make(3);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    Communicator c1(*f1, c), c2(*f2, c), c3(*f3, c);
    Pump p2(c2), p3(c3);
    send_text(c2, 1, 5, "from-2");
    send_text(c3, 1, 6, "from-3");
    comm::Tag tag = -1;
    NodeId source = 0;
    // A named source takes only its message even though the other may be first.
    EXPECT_EQ(recv_text(c1, 3, any_tag, &tag, &source), "from-3");
    EXPECT_EQ(tag, 6);
    EXPECT_EQ(source, 3u);
    EXPECT_EQ(recv_text(c1, any_source, any_tag, &tag, &source), "from-2");
    EXPECT_EQ(tag, 5);
    EXPECT_EQ(source, 2u);
    send_text(c2, 1, 5, "again-2");
    send_text(c3, 1, 5, "again-3");
    std::set<std::string> got{recv_text(c1, any_source, 5), recv_text(c1, any_source, 5)};
    EXPECT_EQ(got, (std::set<std::string>{"again-2", "again-3"}));
    EXPECT_THROW((void)c1.recv(1, 5, 1ms), UsageError) << "a receive from itself is not a peer";
    EXPECT_THROW((void)c1.post_recv(2, -5), UsageError) << "a negative tag other than any_tag";
    EXPECT_THROW(send_text(c1, 2, any_tag, "x"), UsageError) << "a send with a wildcard tag";
}

// EPOS: "received but not requested messages wait in the unexpected queue"; BMI:
// "a post that completed at once says so".
TEST_P(CommConformance, AnUnrequestedMessageWaitsUnexpectedAndItsLaterPostCompletesImmediately) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    int user = 0;
    auto send = a.post_send(2, 3, bytes_of("early"), &user);
    ASSERT_TRUE(send.done.has_value()) << "a send the node accepted at once completes at once";
    EXPECT_TRUE(send.done->immediate);
    EXPECT_TRUE(send.done->is_send);
    EXPECT_EQ(send.done->status, Status::success);
    EXPECT_EQ(send.done->user, &user);
    EXPECT_EQ(send.done->size, 5u);
    await_unexpected(b, 1);
    EXPECT_EQ(b.stats().unexpected_bytes, 5u + 24u);
    std::array<std::byte, 16> into{};
    auto r = b.post_recv(1, 3, into, &user);
    ASSERT_TRUE(r.done.has_value()) << "the message waited unexpected: the post must complete at once";
    EXPECT_TRUE(r.done->immediate);
    EXPECT_EQ(r.done->status, Status::success);
    EXPECT_EQ(r.done->source, 1u);
    EXPECT_EQ(r.done->tag, 3);
    EXPECT_EQ(r.done->size, 5u);
    EXPECT_EQ(r.done->bytes, 5u);
    EXPECT_EQ(r.done->user, &user);
    EXPECT_EQ(text_of(std::span(into).first(5)), "early");
    EXPECT_THROW((void)b.test(r.id), UsageError) << "an immediately completed request is retired";
    EXPECT_EQ(b.stats().unexpected_messages, 0u);
    EXPECT_EQ(b.stats().unexpected_bytes, 0u);
    // Posted first: it waits in the expected queue and completes by test.
    auto later = b.post_recv(1, 4, &user);
    ASSERT_FALSE(later.done.has_value());
    EXPECT_EQ(b.stats().posted_receives, 1u);
    send_text(a, 2, 4, "late");
    auto some = b.wait_some(std::span(&later.id, 1), patience);
    ASSERT_EQ(some.size(), 1u);
    auto* done = &some[0];
    EXPECT_FALSE(done->immediate);
    EXPECT_EQ(done->id, later.id);
    ASSERT_NE(done->buffer, nullptr);
    EXPECT_EQ(text_of(*done->buffer), "late");
    EXPECT_EQ(b.stats().posted_receives, 0u);
}

// EPOS/issue 11: "both queues bounded (comm.unexpected_limit in bytes)": at the bound
// the receiver stops taking messages from its nodes (back-pressure), loses none.
TEST_P(CommConformance, TheUnexpectedQueueStopsAtItsByteBoundAndLosesNothing) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    comm::Limits limits;
    limits.unexpected_limit = 4096;
    Communicator a(*fa, c), b(*fb, c, limits);
    Pump pump(a);
    constexpr int n = 40;
    constexpr std::size_t size = 1000;
    for (int i = 0; i < n; ++i) {
        std::vector<std::byte> m(size, std::byte{static_cast<unsigned char>(i)});
        a.send(2, 1, m);
    }
    const std::size_t whole = size + 24;
    // Progress until the bound is reached, then some more: the queue stays there.
    await_unexpected(b, (4096 + whole - 1) / whole);
    for (int i = 0; i < 20; ++i)
        b.progress();
    const auto s = b.stats();
    EXPECT_LE(s.unexpected_bytes, 4096 + whole) << "the bound was passed by more than one message";
    EXPECT_LT(s.unexpected_messages, static_cast<std::uint64_t>(n));
    EXPECT_GT(s.backpressure_stops, 0u);
    for (int i = 0; i < n; ++i) {
        auto m = b.recv(1, 1, patience);
        ASSERT_TRUE(m.has_value()) << "message " << i << " never came after the queue drained";
        ASSERT_EQ(m->buffer->size(), size);
        std::vector<std::byte> got(size);
        m->buffer->copy_to(got);
        ASSERT_EQ(got[0], std::byte{static_cast<unsigned char>(i)}) << "message " << i << " out of order";
        ASSERT_LE(b.stats().unexpected_bytes, 4096 + whole);
    }
}

// BIP: "probe gives the envelope of the next matching message without taking it".
TEST_P(CommConformance, ProbeGivesTheEnvelopeOfTheNextMatchingMessageWithoutTakingIt) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    EXPECT_FALSE(b.iprobe(any_source, any_tag).has_value());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(b.probe(1, 11, 50ms).has_value());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms) << "probe returned before its timeout";
    send_text(a, 2, 11, "first");
    send_text(a, 2, 12, "second!");
    auto e = b.probe(1, 12, patience);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->source, 1u);
    EXPECT_EQ(e->tag, 12);
    EXPECT_EQ(e->size, 7u);
    auto again = b.iprobe(any_source, any_tag);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->tag, 11) << "the next message of any tag is the first one sent";
    EXPECT_EQ(again->size, 5u);
    EXPECT_EQ(recv_text(b, 1, 12), "second!");
    EXPECT_EQ(recv_text(b, 1, 11), "first");
    EXPECT_FALSE(b.iprobe(any_source, any_tag).has_value());
}

// BMI: "cancel: the operation completes with a cancelled status"; the message it
// would have taken goes to the next receive.
TEST_P(CommConformance, ACancelledReceiveCompletesAsCancelledAndTakesNoMessage) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    int user = 0;
    auto r = b.post_recv(1, 21, &user);
    ASSERT_FALSE(r.done.has_value());
    EXPECT_FALSE(b.test(r.id).has_value());
    EXPECT_TRUE(b.cancel(r.id));
    auto done = b.test(r.id);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::cancelled);
    EXPECT_EQ(done->user, &user);
    EXPECT_THROW((void)b.cancel(r.id), UsageError) << "a collected request is no longer live";
    send_text(a, 2, 21, "kept");
    EXPECT_EQ(recv_text(b, 1, 21), "kept");
}

// BMI: "a receive into a too small buffer completes with a truncation error and
// loses nothing else".
TEST_P(CommConformance, AReceiveIntoATooSmallBufferCompletesTruncatedAndLosesNothingElse) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    std::array<std::byte, 4> small{};
    auto r = b.post_recv(1, 31, small);
    send_text(a, 2, 31, "too long for it");
    send_text(a, 2, 31, "next");
    auto done = b.wait(r.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::truncated);
    EXPECT_EQ(done->size, 15u);
    EXPECT_EQ(done->bytes, 4u);
    EXPECT_EQ(text_of(small), "too ");
    EXPECT_EQ(recv_text(b, 1, 31), "next");
}

// BMI: many operations in flight, each completion carrying its user pointer.
TEST_P(CommConformance, TenThousandPostedRequestsCompleteOnceEachWithTheirUserPointers) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    constexpr int n = 10'000;
    std::vector<std::uint32_t> slots(n, 0xffffffffu);
    std::vector<comm::RequestId> ids;
    for (int i = 0; i < n; ++i) {
        auto p = b.post_recv(1, i % 7, std::as_writable_bytes(std::span(&slots[i], 1)), &slots[i]);
        ASSERT_FALSE(p.done.has_value());
        ids.push_back(p.id);
    }
    EXPECT_EQ(b.stats().posted_receives, static_cast<std::uint64_t>(n));
    std::vector<comm::RequestId> sends;
    for (std::uint32_t i = 0; i < n; ++i) {
        auto p = a.post_send(2, static_cast<comm::Tag>(i % 7), std::as_bytes(std::span(&i, 1)));
        if (!p.done) sends.push_back(p.id);
    }
    Pump pump(a);
    auto all = b.wait_all(ids, 30s);
    auto sent = a.wait_all(sends, patience);
    EXPECT_EQ(sent.size(), sends.size()) << "posted sends left pending";
    ASSERT_EQ(all.size(), static_cast<std::size_t>(n)) << "receives left pending";
    for (const auto& d : all) {
        ASSERT_EQ(d.status, Status::success);
        const auto* slot = static_cast<std::uint32_t*>(d.user);
        const auto i = static_cast<std::size_t>(slot - slots.data());
        ASSERT_LT(i, slots.size());
        // Receives of a tag are matched in post order, messages of a tag in send order:
        // the i-th posted receive gets the i-th message.
        EXPECT_EQ(*slot, i) << "request " << d.id;
        EXPECT_EQ(d.tag, static_cast<comm::Tag>(i % 7));
    }
    EXPECT_EQ(b.stats().posted_receives, 0u);
}

// Issue 11: "any thread may post; the thread that tests or waits makes progress".
TEST_P(CommConformance, AnyThreadMayPostWhileAnotherWaits) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    constexpr int n = 200;
    std::atomic<int> posted{0};
    std::vector<comm::Posted> posts(n);
    std::thread poster([&] {
        for (int i = 0; i < n; ++i) {
            posts[i] = b.post_recv(1, 41);
            posted.fetch_add(1, std::memory_order_release);
        }
    });
    std::thread sender([&] {
        for (int i = 0; i < n; ++i)
            send_text(a, 2, 41, std::to_string(i));
    });
    int done = 0;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    int next = 0;
    while (done < n && std::chrono::steady_clock::now() < deadline) {
        if (next < posted.load(std::memory_order_acquire)) {
            auto d = std::move(posts[next].done);
            if (!d) d = b.wait(posts[next].id, 100ms);
            if (!d) continue;
            EXPECT_EQ(text_of(*d->buffer), std::to_string(next));
            ++next;
            ++done;
        } else {
            b.progress();
        }
    }
    poster.join();
    sender.join();
    EXPECT_EQ(done, n);
}

// Issue 11: "a peer's loss completes its pending requests with PeerLost, never a
// hang"; receives from any source stay pending. Node 2 is a process of its own,
// killed while node 1 waits for it.
TEST_P(CommConformance, APeersLossCompletesItsPendingReceivesWithPeerLostAndAnySourceStaysPending) {
    auto c = make(3, [](config::Configuration& c) { c.peer_timeout = 300ms; });
    SegmentCleanup cleanup(c.partition);
    std::vector<std::string> args{COMM_PEER, GetParam(), c.partition, "3", "2"};
    for (const auto& node : c.nodes)
        if (node.port != 0) args.push_back(std::to_string(node.port));
    auto f1 = NodeFactory::create(c, 1);
    auto f3 = NodeFactory::create(c, 3);
    Communicator c1(*f1, c), c3(*f3, c);
    Pump pump(c3);
    ChildProcess peer(args);
    ASSERT_EQ(peer.wait_for_line("ready", patience), "ready");
    EXPECT_EQ(recv_text(c1, 2, 1), "hi");
    int u1 = 0, u2 = 0;
    auto named = c1.post_recv(2, 2, &u1);
    auto any = c1.post_recv(any_source, 2, &u2);
    ASSERT_FALSE(named.done || any.done);
    peer.kill(SIGKILL);
    peer.wait();
    auto done = c1.wait(named.id, patience);
    ASSERT_TRUE(done.has_value()) << "the receive from the killed peer hung";
    EXPECT_EQ(done->status, Status::peer_lost);
    EXPECT_EQ(done->source, 2u);
    EXPECT_EQ(done->user, &u1);
    EXPECT_FALSE(done->error.empty());
    EXPECT_FALSE(c1.test(any.id).has_value()) << "a receive from any source must stay pending";
    // A new receive naming the lost peer fails at once, and recv throws PeerLost.
    auto later = c1.post_recv(2, 2);
    ASSERT_TRUE(later.done.has_value());
    EXPECT_EQ(later.done->status, Status::peer_lost);
    try {
        (void)c1.recv(2, 3, patience);
        ADD_FAILURE() << "recv from a lost peer did not throw";
    } catch (const PeerLost& e) {
        EXPECT_EQ(e.peer(), 2u);
        EXPECT_NE(std::string(e.what()).find("node 2"), std::string::npos) << e.what();
    }
    // The other peer still talks, and the any_source receive takes its message.
    send_text(c3, 1, 2, "alive");
    auto d = c1.wait(any.id, patience);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->source, 3u);
    EXPECT_EQ(text_of(*d->buffer), "alive");
}

// "Nothing a peer sends may crash": a message without a valid envelope is dropped,
// counted and reported as an Error naming its source; what follows is delivered.
TEST_P(CommConformance, AMalformedEnvelopeIsCountedReportedAsAnErrorNamingTheSourceAndDropped) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator b(*fb, c);
    Communicator a(*fa, c);
    Pump pump(a); // moves what the raw node queued
    auto raw = fa->create_node(2);
    raw->send(std::make_unique<HeapBuffer>(bytes_of("short")));
    std::vector<std::byte> wrong(40, std::byte{0x5a});
    raw->send(std::make_unique<HeapBuffer>(wrong));
    std::vector<std::string> errors;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (errors.size() < 2 && std::chrono::steady_clock::now() < deadline) {
        try {
            (void)b.probe(any_source, any_tag, 20ms);
        } catch (const Error& e) {
            errors.push_back(e.what());
        }
    }
    ASSERT_EQ(errors.size(), 2u) << "the malformed messages were not reported";
    EXPECT_NE(errors[0].find("node 1 (node-1)"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("shorter than the 24-byte envelope"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("bad magic word"), std::string::npos) << errors[1];
    EXPECT_EQ(b.stats().malformed, 2u);
    EXPECT_EQ(b.stats().unexpected_messages, 0u);
    send_text(a, 2, 1, "fine");
    EXPECT_EQ(recv_text(b, 1, 1), "fine");
}

// BMI: "unexpected messages ... for a server that does not know who will talk to
// it": taken by test_unexpected only, never by a posted receive; beyond the size
// limit refused with a clear error.
TEST_P(CommConformance, UnexpectedMessagesReachAServerThatDidNotKnowItsClientsAndOnlyThroughTestUnexpected) {
    auto c = make(3);
    auto f1 = NodeFactory::create(c, 1);
    auto f2 = NodeFactory::create(c, 2);
    auto f3 = NodeFactory::create(c, 3);
    comm::Limits limits;
    limits.max_unexpected_size = 64;
    Communicator server(*f1, c), c2(*f2, c, limits), c3(*f3, c, limits);
    Pump p2(c2), p3(c3);
    auto ordinary = server.post_recv(any_source, any_tag);
    ASSERT_FALSE(ordinary.done.has_value());
    EXPECT_TRUE(server.test_unexpected(8).empty());
    int user = 0;
    auto s2 = c2.post_send_unexpected(1, 70, bytes_of("request from 2"), &user);
    ASSERT_TRUE(s2.done.has_value());
    EXPECT_EQ(s2.done->user, &user);
    (void)c3.post_send_unexpected(1, 71, bytes_of("request from 3"));
    std::map<NodeId, std::pair<comm::Tag, std::string>> got;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (got.size() < 2 && std::chrono::steady_clock::now() < deadline) {
        for (auto& m : server.wait_unexpected(8, 100ms)) {
            EXPECT_EQ(m.buffer->source(), m.source);
            got[m.source] = {m.tag, text_of(*m.buffer)};
        }
    }
    ASSERT_EQ(got.size(), 2u) << "an unexpected request never reached the server";
    EXPECT_EQ(got[2], (std::pair<comm::Tag, std::string>{70, "request from 2"}));
    EXPECT_EQ(got[3], (std::pair<comm::Tag, std::string>{71, "request from 3"}));
    EXPECT_FALSE(server.test(ordinary.id).has_value()) << "a posted receive took an unexpected message";
    EXPECT_FALSE(server.iprobe(any_source, any_tag).has_value()) << "probe saw an unexpected message";
    // The server answers clients it now knows; a too large request is refused.
    send_text(server, 2, 72, "answer");
    EXPECT_EQ(recv_text(c2, 1, 72), "answer");
    try {
        (void)c2.post_send_unexpected(1, 70, std::vector<std::byte>(65));
        ADD_FAILURE() << "an unexpected message above max_unexpected_size was accepted";
    } catch (const MessageTooLarge& e) {
        EXPECT_NE(std::string(e.what()).find("max_unexpected_size (64)"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(server.cancel(ordinary.id));
}

std::vector<std::byte> pattern(std::size_t size, unsigned seed) {
    std::vector<std::byte> v(size);
    for (std::size_t i = 0; i < size; ++i)
        v[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
    return v;
}

// comm.eager_limit 1 KiB for every node of the configuration.
void small_eager_limit(config::Configuration& c) {
    c.edit_section<config::CommOptions>().eager_limit = config::KiB;
}

// BIP: "long messages are sent when the receive is posted"; EPOS: rendezvous. Above
// comm.eager_limit the data goes straight into the posted receive's span; an
// announcement that arrives first waits unexpected as its envelope alone.
TEST_P(CommConformance, AMessageAboveTheEagerLimitGoesByRendezvousIntoThePostedReceive) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    constexpr std::size_t size = 200 * 1000;
    // Posted first: the announcement finds the receive.
    const auto first = pattern(size, 1);
    std::vector<std::byte> into(size + 10);
    int user = 0;
    auto r = b.post_recv(1, 5, into, &user);
    ASSERT_FALSE(r.done.has_value());
    auto s = a.post_send(2, 5, first);
    // The receive's request (EPOS's requested queue) may reach the sender before its
    // send: then the data goes at once, without the request-to-send round trip (on udp
    // this happens about every other run); else the send waits for the clear-to-send.
    const std::uint64_t requested = a.stats().requested_sends;
    ASSERT_LE(requested, 1u);
    EXPECT_EQ(s.done.has_value(), requested == 1u)
        << "a rendezvous send completes at once only when its receiver's request came first";
    auto done = b.wait(r.id, patience);
    ASSERT_TRUE(done.has_value()) << "the rendezvous never delivered";
    EXPECT_EQ(done->status, Status::success);
    EXPECT_EQ(done->size, size);
    EXPECT_EQ(done->bytes, size);
    EXPECT_EQ(done->source, 1u);
    EXPECT_EQ(done->user, &user);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), into.begin())) << "the data differs";
    EXPECT_EQ(b.stats().rendezvous_received, 1u - requested);
    // Sent first: the receiver keeps the 24-byte envelope only, probe sees its size,
    // and the receive posted later is not immediate (the data moves then).
    const auto second = pattern(size, 2);
    (void)a.post_send(2, 6, second);
    auto e = b.probe(1, 6, patience);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->size, size);
    EXPECT_EQ(b.stats().unexpected_bytes, 24u) << "an unexpected announcement must cost its envelope only";
    auto later = b.post_recv(1, 6, into);
    ASSERT_FALSE(later.done.has_value());
    done = b.wait(later.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::success);
    EXPECT_TRUE(std::equal(second.begin(), second.end(), into.begin()));
    // A receive that cleared an announcement can be cancelled (a peer that announces
    // and never sends must not hold it): its data, when it comes, is not lost but
    // waits for the next receive that matches, before the message sent after it.
    (void)a.post_send(2, 8, pattern(size, 5));
    ASSERT_TRUE(b.probe(1, 8, patience).has_value());
    auto given_up = b.post_recv(1, 8, into);
    ASSERT_FALSE(given_up.done.has_value());
    EXPECT_TRUE(b.cancel(given_up.id));
    EXPECT_EQ(b.test(given_up.id)->status, Status::cancelled);
    (void)a.post_send(2, 8, pattern(size, 6));
    for (unsigned seed : {5u, 6u}) {
        auto late = b.recv(1, 8, patience);
        ASSERT_TRUE(late.has_value()) << "the message of seed " << seed << " never came";
        std::vector<std::byte> bytes(late->buffer->size());
        late->buffer->copy_to(bytes);
        EXPECT_EQ(bytes, pattern(size, seed)) << "seed " << seed;
    }
    EXPECT_EQ(b.stats().malformed, 0u) << "the cancelled receive's data was taken as malformed";
    EXPECT_EQ(b.stats().rendezvous_returned, 0u);
    // Into the layer's buffer (zero-copy) and truncated into a small span; a blocking
    // send returns once the receiver took the data.
    std::thread sender([&] {
        try {
            a.send(2, 7, pattern(size, 3));
            a.send(2, 7, pattern(size, 4));
        } catch (const std::exception& ex) {
            ADD_FAILURE() << "blocking rendezvous send: " << ex.what();
        }
    });
    auto m = b.recv(1, 7, patience);
    ASSERT_TRUE(m.has_value());
    ASSERT_EQ(m->buffer->size(), size);
    std::vector<std::byte> got(size);
    m->buffer->copy_to(got);
    EXPECT_EQ(got, pattern(size, 3));
    std::array<std::byte, 100> small{};
    auto t = b.post_recv(1, 7, small);
    done = t.done ? std::move(t.done) : b.wait(t.id, patience);
    sender.join();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::truncated);
    EXPECT_EQ(done->size, size);
    EXPECT_TRUE(std::equal(small.begin(), small.end(), pattern(size, 4).begin()));
    EXPECT_EQ(a.stats().requested_sends, requested) << "only the first send had a request waiting for it";
    EXPECT_EQ(b.stats().rendezvous_received, 6u - requested);
    EXPECT_EQ(a.stats().rendezvous_sent, 6u - requested);
    EXPECT_EQ(b.stats().unexpected_bytes, 0u);
    EXPECT_EQ(b.stats().rendezvous_awaiting, 0u);
}

// EPOS's requested queue: a receive of more than eager_limit bytes, posted for one
// source before its message came, tells that source, and the large send it matches
// goes at once with its data (no request-to-send round trip: the post completes at
// once, as an eager one). A synchronous send still waits for the match; a request
// used up by an announcement that came first is withdrawn with the clear-to-send;
// one whose receive was cancelled lets the next large send go at once anyway, and
// that message waits unexpected, whole, for the next receive.
TEST_P(CommConformance, AReceivePostedFirstLetsTheLargeSendItMatchGoAtOnce) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    constexpr std::size_t size = 200 * 1000;
    // a's progress until it holds `held` requests of b's.
    auto until_held = [&](std::uint64_t held) {
        const auto deadline = std::chrono::steady_clock::now() + patience;
        while (a.stats().requests_held != held && std::chrono::steady_clock::now() < deadline)
            a.progress();
        return a.stats().requests_held == held;
    };
    std::vector<std::byte> into(size);
    auto r = b.post_recv(1, 5, into);
    ASSERT_FALSE(r.done.has_value());
    EXPECT_EQ(b.stats().requests_sent, 1u);
    ASSERT_TRUE(until_held(1)) << "the request of the posted receive never reached the sender";
    {
        // A large send the request does not match (another tag) goes by rendezvous.
        auto other = a.post_send(2, 8, pattern(size, 9));
        EXPECT_FALSE(other.done.has_value()) << "a request for tag 5 let a send of tag 8 go at once";
        EXPECT_EQ(a.stats().requests_held, 1u);
        EXPECT_TRUE(a.cancel(other.id)); // withdrawn: b never takes tag 8
        const auto deadline = std::chrono::steady_clock::now() + patience;
        std::optional<comm::Completion> gone;
        while (!gone && std::chrono::steady_clock::now() < deadline) {
            (void)b.iprobe(1, 8);
            gone = a.test(other.id);
        }
        ASSERT_TRUE(gone.has_value());
        EXPECT_EQ(gone->status, Status::cancelled);
    }
    const auto first = pattern(size, 1);
    auto s = a.post_send(2, 5, first);
    ASSERT_TRUE(s.done.has_value()) << "a requested large send must go at once";
    EXPECT_EQ(s.done->status, Status::success);
    EXPECT_EQ(a.stats().requested_sends, 1u);
    EXPECT_EQ(a.stats().requests_held, 0u);
    auto done = b.wait(r.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::success);
    EXPECT_EQ(done->size, size);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), into.begin())) << "the data differs";
    EXPECT_EQ(b.stats().rendezvous_received, 0u) << "it went by rendezvous";
    Pump pump_a(a); // from here the sender's queued messages move without its calls
    // A small receive tells nothing; an any-source one neither.
    std::array<std::byte, 16> small{};
    auto r_small = b.post_recv(1, 6, small);
    auto r_any = b.post_recv(comm::any_source, 6, into);
    EXPECT_EQ(b.stats().requests_sent, 1u);
    send_text(a, 2, 6, "tiny");
    send_text(a, 2, 6, "tiny2");
    ASSERT_TRUE(b.wait(r_small.id, patience).has_value());
    ASSERT_TRUE(b.wait(r_any.id, patience).has_value());
    // Ssend waits for the match even with a request held.
    auto r2 = b.post_recv(1, 7, into);
    ASSERT_TRUE(until_held(1));
    Pump pump_b(b);
    const auto second = pattern(size, 2);
    {
        auto ss = a.post_ssend(comm::Context{}, 2, 7, second);
        ASSERT_FALSE(ss.done.has_value()) << "a synchronous send completed before its match";
        ASSERT_TRUE(a.wait(ss.id, patience).has_value());
    }
    ASSERT_TRUE(b.wait(r2.id, patience).has_value());
    EXPECT_TRUE(std::equal(second.begin(), second.end(), into.begin()));
    EXPECT_TRUE(until_held(0)) << "the clear-to-send of the synchronous send did not withdraw the request";
}

// BMI's list I/O: a send gathered from several buffers and a receive scattered into
// several, each end a list or one span, eager and by rendezvous; a message longer than
// the list truncates; an unexpected list send arrives as one message.
TEST_P(CommConformance, ListSendsAndReceivesCarryTheSameBytesAsOneSpan) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    EXPECT_TRUE(a.usable());
    Pump pump(a);
    using Piece = std::span<const std::byte>;
    using Room = std::span<std::byte>;
    for (const std::size_t size : {std::size_t{40}, std::size_t{300 * 1000}}) { // eager, rendezvous
        SCOPED_TRACE(size);
        const auto whole = pattern(size, static_cast<unsigned>(size));
        const std::size_t cut1 = size / 3, cut2 = size / 2;
        const std::array<Piece, 4> pieces{Piece(whole).first(cut1), Piece{}, Piece(whole).subspan(cut1, cut2 - cut1),
                                          Piece(whole).subspan(cut2)};
        // A list sent, one span received.
        std::vector<std::byte> one(size);
        auto r = b.post_recv(comm::Context{}, 1, 3, one);
        auto s = a.post_send_list(comm::Context{}, 2, 3, pieces);
        auto got = r.done ? std::move(r.done) : b.wait(r.id, patience);
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->status, Status::success);
        EXPECT_EQ(got->bytes, size);
        EXPECT_EQ(one, whole);
        if (!s.done) {
            ASSERT_TRUE(a.wait(s.id, patience).has_value());
        }
        // One span sent, a list received (uneven pieces, one empty).
        std::vector<std::byte> x(7), y, z(size);
        const std::array<Room, 3> rooms{Room(x), Room(y), Room(z)};
        r = b.post_recv_list(comm::Context{}, 1, 4, rooms);
        (void)a.post_send(2, 4, whole);
        got = r.done ? std::move(r.done) : b.wait(r.id, patience);
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->status, Status::success);
        EXPECT_EQ(got->bytes, size);
        std::vector<std::byte> joined(x);
        joined.insert(joined.end(), z.begin(), z.begin() + static_cast<std::ptrdiff_t>(size - x.size()));
        EXPECT_EQ(joined, whole);
        // A list into a list shorter than the message: truncated, the pieces full.
        std::vector<std::byte> p1(5), p2(6);
        const std::array<Room, 2> short_rooms{Room(p1), Room(p2)};
        r = b.post_recv_list(comm::Context{}, 1, 5, short_rooms);
        (void)a.post_send_list(comm::Context{}, 2, 5, pieces);
        got = r.done ? std::move(r.done) : b.wait(r.id, patience);
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->status, Status::truncated);
        EXPECT_EQ(got->size, size);
        EXPECT_EQ(got->bytes, 11u);
        EXPECT_TRUE(std::equal(p1.begin(), p1.end(), whole.begin()));
        EXPECT_TRUE(std::equal(p2.begin(), p2.end(), whole.begin() + 5));
    }
    // BMI's unexpected class, from a list.
    const auto text = bytes_of("unexpected, from two pieces");
    const std::array<Piece, 2> halves{Piece(text).first(10), Piece(text).subspan(10)};
    (void)a.post_send_unexpected_list(2, 9, halves);
    auto u = b.wait_unexpected(1, patience);
    ASSERT_EQ(u.size(), 1u);
    EXPECT_EQ(u.front().tag, 9);
    std::vector<std::byte> back(u.front().buffer->size());
    u.front().buffer->copy_to(back);
    EXPECT_TRUE(std::equal(back.begin(), back.end(), text.begin(), text.end()));
}

// BMI's testcontext: the requests of a completion context complete there, with
// their user pointers, up to a count; another context's stay out of it.
TEST_P(CommConformance, ACompletionContextReturnsWhatCompletedThereAndNothingElse) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    const auto mine = b.open_completion_context();
    const auto other = b.open_completion_context();
    EXPECT_NE(mine, other);
    std::array<int, 4> users{};
    std::vector<comm::RequestId> in_mine;
    for (int i = 0; i < 3; ++i) {
        auto r = b.post_recv(1, 20 + i, &users[static_cast<std::size_t>(i)]);
        ASSERT_FALSE(r.done.has_value());
        b.add_to(mine, r.id);
        in_mine.push_back(r.id);
    }
    auto r_other = b.post_recv(1, 30, &users[3]);
    b.add_to(other, r_other.id);
    EXPECT_THROW(b.add_to(mine, r_other.id), UsageError) << "a request in two contexts";
    EXPECT_THROW(b.add_to(mine, 987654), UsageError) << "a request that is not live";
    EXPECT_TRUE(b.wait_context(mine, 4, 20ms).empty()) << "nothing was sent yet";
    send_text(a, 2, 30, "other");
    send_text(a, 2, 21, "one");
    send_text(a, 2, 20, "zero");
    std::vector<comm::Completion> got;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (got.size() < 2 && std::chrono::steady_clock::now() < deadline)
        for (auto& done : b.wait_context(mine, 1, patience)) // at most one at a time
            got.push_back(std::move(done));
    ASSERT_EQ(got.size(), 2u);
    for (const auto& done : got) {
        EXPECT_EQ(done.status, Status::success);
        const auto i = static_cast<std::size_t>(done.tag - 20);
        EXPECT_EQ(done.user, &users[i]);
        EXPECT_EQ(done.id, in_mine[i]);
    }
    EXPECT_TRUE(b.test_context(mine, 4).empty()) << "the third receive has no message";
    auto theirs = b.wait_context(other, 4, patience);
    ASSERT_EQ(theirs.size(), 1u);
    EXPECT_EQ(theirs.front().user, &users[3]);
    b.close_completion_context(mine);
    EXPECT_THROW((void)b.test_context(mine, 1), UsageError);
    EXPECT_TRUE(b.cancel(in_mine[2])) << "a closed context leaves its requests live";
    EXPECT_EQ(b.test(in_mine[2])->status, Status::cancelled);
}

// BMI_unpost of a send whose announcement left: withdrawn when no receive took it
// (nothing of it is ever received), and delivered whole when a receive had cleared it
// before the withdrawal came.
TEST_P(CommConformance, ACancelledAnnouncedSendIsWithdrawnUnlessAReceiveClearedItFirst) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    const auto data = pattern(100 * 1000, 3);
    // Not received: withdrawn.
    auto s = a.post_send(2, 6, data);
    ASSERT_FALSE(s.done.has_value());
    ASSERT_TRUE(b.probe(1, 6, patience).has_value()) << "the announcement never came";
    EXPECT_TRUE(a.cancel(s.id));
    std::optional<comm::Completion> done;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (!done && std::chrono::steady_clock::now() < deadline) {
        (void)b.iprobe(1, 6); // the receiver's progress takes the withdrawal
        done = a.test(s.id);
    }
    ASSERT_TRUE(done.has_value()) << "the withdrawal was never confirmed";
    EXPECT_EQ(done->status, Status::cancelled);
    EXPECT_FALSE(b.iprobe(1, 6).has_value()) << "the withdrawn announcement is still queued";
    EXPECT_EQ(b.stats().unexpected_bytes, 0u);
    EXPECT_EQ(a.stats().rendezvous_withdrawn, 1u);
    EXPECT_EQ(a.stats().rendezvous_announced, 0u);
    // Cleared first: the cancel comes too late, the message is received whole.
    s = a.post_send(2, 7, data);
    ASSERT_TRUE(b.probe(1, 7, patience).has_value());
    auto r = b.post_recv(1, 7); // clears it: the clear-to-send is on its way
    ASSERT_FALSE(r.done.has_value());
    EXPECT_TRUE(a.cancel(s.id));
    Pump pump_b(b), pump_a(a); // (a node may hold the data until its process makes progress)
    done = a.wait(s.id, patience);
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->status, Status::success) << "a cleared send must complete with its data";
    auto got = b.wait(r.id, patience);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->status, Status::success);
    std::vector<std::byte> bytes(got->buffer->size());
    got->buffer->copy_to(bytes);
    EXPECT_EQ(bytes, data);
    EXPECT_EQ(a.stats().rendezvous_withdrawn, 1u);
}

// BMI_set_info(BMI_DROP_ADDR): a dropped peer's queued messages are discarded and
// what waits on it completes peer_lost; a message it sends afterwards makes it a peer
// again.
TEST_P(CommConformance, DroppingAPeerDiscardsItsMessagesAndFailsWhatWaitsOnIt) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    for (int i = 0; i < 3; ++i)
        send_text(a, 2, 40, "queued " + std::to_string(i));
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (b.stats().unexpected_messages < 3 && std::chrono::steady_clock::now() < deadline)
        b.progress();
    ASSERT_EQ(b.stats().unexpected_messages, 3u);
    auto waiting = b.post_recv(1, 41);
    ASSERT_FALSE(waiting.done.has_value());
    b.drop(1);
    auto failed = b.test(waiting.id);
    ASSERT_TRUE(failed.has_value());
    EXPECT_EQ(failed->status, Status::peer_lost);
    EXPECT_NE(failed->error.find("dropped"), std::string::npos) << failed->error;
    EXPECT_EQ(b.stats().dropped_messages, 3u);
    EXPECT_EQ(b.stats().unexpected_messages, 0u);
    EXPECT_EQ(b.stats().unexpected_bytes, 0u);
    send_text(a, 2, 42, "after the drop");
    auto m = b.recv(any_source, 42, patience);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->source, 1u);
    send_text(a, 2, 43, "by name");
    EXPECT_EQ(recv_text(b, 1, 43), "by name") << "a peer again once it spoke";
}

// BIP's per-tag queues (bip_taginit): a tag range with a bound of its own. A sender
// floods a data tag while the receiver reads nothing, the receiver's unexpected queue
// being small; a control message sent after the flood still arrives at once (the data
// lane holds at most about its bound at the receiver, the rest waits at the sender
// for credit), and then every data message arrives, once and in order.
TEST_P(CommConformance, AFullDataTagQueueNeverHoldsBackAControlTag) {
    // The lane's bound is above the global one: were its messages counted against
    // unexpected_limit, a full lane alone would stop the communicator taking anything.
    constexpr std::size_t lane_limit = 4 * config::KiB;
    auto c = make(2, [](config::Configuration& c) {
        auto& o = c.edit_section<config::CommOptions>();
        o.unexpected_limit = 2 * config::KiB;
        o.tag_queues = {config::CommOptions::TagQueue{100, 199, lane_limit}};
    });
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    ASSERT_EQ(comm::Limits::from(c).tag_queues.size(), 1u);
    constexpr int count = 200;
    constexpr std::size_t size = 1000;
    std::vector<comm::RequestId> sends;
    for (int i = 0; i < count; ++i) {
        auto payload = pattern(size, static_cast<unsigned>(i));
        auto s = a.post_send(2, 150, payload);
        if (!s.done) sends.push_back(s.id);
    }
    EXPECT_GT(a.stats().lane_held_sends, 0u) << "the data lane never filled: the test tests nothing";
    Pump pump(a);
    send_text(a, 2, 7, "stop the run");
    EXPECT_EQ(recv_text(b, 1, 7), "stop the run") << "the control tag was held back behind the data tag";
    const auto held = b.stats().unexpected_bytes;
    EXPECT_LE(held, lane_limit + lane_limit / 4 + size + 24) << "the data lane went past its bound";
    for (int i = 0; i < count; ++i) {
        auto m = b.recv(1, 150, patience);
        ASSERT_TRUE(m.has_value()) << "data message " << i << " never came";
        std::vector<std::byte> bytes(m->buffer->size());
        m->buffer->copy_to(bytes);
        ASSERT_EQ(bytes, pattern(size, static_cast<unsigned>(i))) << "data message " << i << " out of order";
    }
    const auto done = a.wait_all(sends, patience);
    EXPECT_EQ(done.size(), sends.size());
    for (const auto& d : done)
        EXPECT_EQ(d.status, Status::success) << d.error;
    EXPECT_EQ(a.stats().lane_held_sends, 0u);
    EXPECT_GT(b.stats().lane_credits_sent, 0u);
    EXPECT_FALSE(b.iprobe(any_source, any_tag).has_value());
}

// Nothing lost to a timeout: a blocking recv that cleared an announcement and ran
// out of time before the data came leaves the message for the next receive (it was
// dropped once: recv with a zero timeout lost every large message it met). Large
// and small messages of one sender, taken by recv(0) in a loop, all arrive once and
// in the order sent.
TEST_P(CommConformance, ARecvThatTimesOutDuringARendezvousLosesNothing) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    constexpr unsigned count = 12;
    auto size_of = [](unsigned i) -> std::size_t { return i % 3 == 2 ? 16 : 100 * 1000 + i; };
    std::vector<comm::RequestId> sends;
    for (unsigned i = 0; i < count; ++i)
        if (auto s = a.post_send(2, 4, pattern(size_of(i), i)); !s.done) sends.push_back(s.id);
    // The sender makes no progress (its clear-to-send unanswered) until a recv has
    // run out of time on a cleared announcement and put it back: the case tested.
    std::optional<Pump> pump;
    bool returned = false;
    unsigned next = 0;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (next < count && std::chrono::steady_clock::now() < deadline) {
        auto m = b.recv(1, 4, std::chrono::nanoseconds::zero());
        if (!returned && b.stats().rendezvous_returned > 0) {
            returned = true;
            pump.emplace(a);
        }
        if (!m) continue;
        std::vector<std::byte> bytes(m->buffer->size());
        m->buffer->copy_to(bytes);
        EXPECT_EQ(bytes, pattern(size_of(next), next)) << "message " << next << " is not the one sent " << next << "th";
        ++next;
    }
    EXPECT_TRUE(returned) << "no recv gave a cleared announcement back: the test did not test the timeout";
    EXPECT_EQ(next, count) << "messages lost to recv's timeout";
    for (comm::RequestId id : sends) {
        auto done = a.wait(id, patience);
        ASSERT_TRUE(done.has_value());
        EXPECT_EQ(done->status, Status::success);
    }
    const auto stats = b.stats();
    EXPECT_EQ(stats.unexpected_messages, 0u);
    EXPECT_EQ(stats.rendezvous_awaiting, 0u);
    EXPECT_EQ(stats.rendezvous_returned, 0u);
    EXPECT_EQ(stats.malformed, 0u);
}

// Issue 12: post_send copies its bytes at once, so the caller may reuse them when it
// returns; above the eager limit that copy is kept until the clear-to-send. Messages
// of 4 KiB or more are made in memory the communicator reuses from one message to
// the next (fresh memory cost a page fault per page copied into). Many sends in a
// row from one caller buffer, scribbled over after every post, of sizes around the
// eager limit (64 KiB) and the glibc mapping threshold (128 KiB) and far above:
// every message arrives intact and in order, the memory is reused, and what is kept
// stays bounded.
TEST_P(CommConformance, LargeSendsReuseTheirMemoryAndArriveIntactThoughTheCallerReusesItsBytesAtOnce) {
    auto c = make(2, [](config::Configuration& c) { c.peer_timeout = 5s; }); // MiBs under a sanitizer
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    ASSERT_EQ(comm::Limits::from(c).eager_limit, 64 * config::KiB);
    const std::vector<std::size_t> sizes{64 * 1024 - 1,   64 * 1024,       64 * 1024 + 1,   128 * 1024 - 25,
                                         128 * 1024 - 24, 128 * 1024 - 23, 1024 * 1024 + 3, 3 * 1024 * 1024 + 7};
    std::vector<std::byte> scratch(3 * 1024 * 1024 + 7);
    std::vector<std::vector<std::byte>> into(sizes.size());
    Pump pump(a);
    constexpr unsigned rounds = 4;
    for (unsigned round = 0; round < rounds; ++round) {
        std::vector<comm::RequestId> sends;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            const auto want = pattern(sizes[i], round * 100 + static_cast<unsigned>(i));
            std::copy(want.begin(), want.end(), scratch.begin());
            const auto requested_before = a.stats().requested_sends;
            auto p = a.post_send(2, 4, std::span<const std::byte>(scratch.data(), sizes[i]));
            std::fill(scratch.begin(), scratch.end(), std::byte{0xee}); // allowed once post_send returned
            if (sizes[i] > 64 * 1024 && a.stats().requested_sends == requested_before) {
                // (A receive posted before its announcement came may have told the sender
                // to send the next one at once: the requested queue.)
                EXPECT_FALSE(p.done.has_value()) << sizes[i] << " bytes: a rendezvous completed before it was cleared";
            }
            if (p.done) {
                EXPECT_EQ(p.done->status, Status::success) << p.done->error;
            } else {
                sends.push_back(p.id);
            }
        }
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            into[i].assign(sizes[i] + 1, std::byte{0x11});
            auto r = b.post_recv(1, 4, into[i]);
            auto done = r.done ? std::move(r.done) : b.wait(r.id, patience);
            ASSERT_TRUE(done.has_value())
                << "round " << round << ": the message of " << sizes[i] << " bytes never came";
            ASSERT_EQ(done->status, Status::success) << done->error;
            ASSERT_EQ(done->size, sizes[i]) << "round " << round << ": out of order";
            const auto want = pattern(sizes[i], round * 100 + static_cast<unsigned>(i));
            ASSERT_TRUE(std::equal(want.begin(), want.end(), into[i].begin()))
                << "round " << round << ": the message of " << sizes[i] << " bytes was damaged";
        }
        const auto sent = a.wait_all(sends, patience);
        ASSERT_EQ(sent.size(), sends.size()) << "round " << round << ": sends did not complete";
        for (const auto& s : sent)
            EXPECT_EQ(s.status, Status::success) << s.error;
    }
    const auto stats = a.stats();
    EXPECT_EQ(stats.rendezvous_sent + stats.requested_sends, rounds * 6);
    // From the second round on the messages find the memory of those that went
    // before (once their node let go of them: an ip node may hold a message a while
    // after its peer had it).
    EXPECT_GT(stats.large_buffers_reused, 0u) << "the memory of the messages was not reused";
    EXPECT_GT(stats.large_buffers_kept_bytes, 0u);
    EXPECT_LE(stats.large_buffers_kept_bytes, 32u * 1024 * 1024);
}

// Issue 11: "an unexpected large message costs the receiver no memory beyond the
// envelope"; the queue is bounded by comm.unexpected_limit, and the sender holds
// its further announcements back (Limits::rendezvous_window) rather than the
// receiver growing. 100 messages of 64 KiB wait; then all arrive, in order.
TEST_P(CommConformance, HundredUnexpectedLargeMessagesCostTheReceiverTheirEnvelopesWithinTheLimit) {
    // 6.4 MB under a sanitizer on a shared machine: a generous peer_timeout, so that
    // a starved keepalive thread does not make the peer lost.
    auto c = make(2, [](config::Configuration& c) {
        small_eager_limit(c);
        c.peer_timeout = 5s;
    });
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    comm::Limits limits = comm::Limits::from(c);
    ASSERT_EQ(limits.eager_limit, config::KiB);
    limits.unexpected_limit = limits.rendezvous_window * 24; // the least the constructor takes
    constexpr int n = 100;
    constexpr std::size_t size = 64 * 1024;
    // Made before the nodes talk: a node idle for its peer_timeout (as b would be
    // while a slow build makes them) may be declared lost by an ip technology.
    std::vector<std::vector<std::byte>> payloads;
    for (int i = 0; i < n; ++i)
        payloads.push_back(pattern(size, static_cast<unsigned>(i)));
    Communicator a(*fa, c), b(*fb, c, limits);
    Pump pump(a);
    std::vector<comm::RequestId> sends;
    for (int i = 0; i < n; ++i) {
        auto p = a.post_send(2, 3, payloads[static_cast<std::size_t>(i)]);
        ASSERT_FALSE(p.done.has_value());
        sends.push_back(p.id);
    }
    const std::uint64_t window = limits.rendezvous_window;
    await_unexpected(b, window);
    for (int i = 0; i < 50; ++i)
        (void)b.probe(any_source, 999999, 1ms); // more progress: nothing more may come
    const auto held = b.stats();
    EXPECT_EQ(held.unexpected_messages, window);
    EXPECT_EQ(held.unexpected_bytes, window * 24) << "only envelopes may wait: " << held.unexpected_bytes;
    EXPECT_LE(held.unexpected_bytes, limits.unexpected_limit);
    EXPECT_EQ(a.stats().rendezvous_announced, window) << "the sender must hold back beyond its window";
    std::vector<std::byte> into(size);
    for (int i = 0; i < n; ++i) {
        auto r = b.post_recv(1, 3, into);
        auto done = r.done ? std::move(r.done) : b.wait(r.id, patience);
        ASSERT_TRUE(done.has_value()) << "message " << i << " never came; receiver: " << b.stats().unexpected_messages
                                      << " unexpected, " << b.stats().rendezvous_awaiting
                                      << " awaiting data; sender: " << a.stats().rendezvous_announced << " announced, "
                                      << a.stats().rendezvous_sent << " sent";
        ASSERT_EQ(done->status, Status::success) << done->error;
        ASSERT_EQ(into, payloads[static_cast<std::size_t>(i)]) << "message " << i << " out of order or damaged";
        ASSERT_LE(b.stats().unexpected_bytes, limits.unexpected_limit);
    }
    EXPECT_EQ(a.wait_all(sends, patience).size(), static_cast<std::size_t>(n));
    EXPECT_EQ(b.stats().unexpected_messages, 0u);
}

// Issue 11: "a peer's loss completes its pending requests with PeerLost, never a
// hang", during a rendezvous: node 2 announces three large messages and stops making
// progress; node 1 clears two (one named, one from any source) and is left with the
// third unexpected; node 2 is killed.
TEST_P(CommConformance, ASenderKilledDuringARendezvousFailsTheReceivesWaitingForItsData) {
    auto c = make(3, [](config::Configuration& c) { c.peer_timeout = 300ms; });
    SegmentCleanup cleanup(c.partition);
    std::vector<std::string> args{COMM_PEER, "--announce", GetParam(), c.partition, "3", "2"};
    for (const auto& node : c.nodes)
        if (node.port != 0) args.push_back(std::to_string(node.port));
    auto f1 = NodeFactory::create(c, 1);
    auto f3 = NodeFactory::create(c, 3);
    Communicator c1(*f1, c), c3(*f3, c);
    Pump pump(c3);
    ChildProcess peer(args);
    // Node 1 takes what node 2 sends (a node may move a message only when its peer
    // takes the previous one), then node 2 says it handed everything over.
    EXPECT_EQ(recv_text(c1, 2, 1), "hi");
    for (comm::Tag tag : {9, 10, 11}) {
        auto e = c1.probe(2, tag, patience);
        ASSERT_TRUE(e.has_value()) << "announcement " << tag << " never arrived";
        EXPECT_EQ(e->size, 64 * config::KiB);
    }
    ASSERT_EQ(peer.wait_for_line("ready", patience), "ready");
    int u1 = 0, u2 = 0;
    std::vector<std::byte> into(64 * config::KiB);
    auto named = c1.post_recv(2, 9, into, &u1);
    auto any = c1.post_recv(any_source, 10, &u2);
    ASSERT_FALSE(named.done || any.done);
    EXPECT_EQ(c1.stats().rendezvous_awaiting, 2u);
    peer.kill(SIGKILL);
    peer.wait();
    for (auto [id, user] : {std::pair{named.id, &u1}, std::pair{any.id, &u2}}) {
        auto done = c1.wait(id, patience);
        ASSERT_TRUE(done.has_value()) << "a receive waiting for the killed sender's data hung";
        EXPECT_EQ(done->status, Status::peer_lost);
        EXPECT_EQ(done->source, 2u);
        EXPECT_EQ(done->user, user);
        EXPECT_NE(done->error.find("rendezvous"), std::string::npos) << done->error;
    }
    EXPECT_EQ(c1.stats().rendezvous_awaiting, 0u);
    // The third announcement can never be cleared: taking it fails at once.
    auto third = c1.post_recv(any_source, 11);
    ASSERT_TRUE(third.done.has_value());
    EXPECT_EQ(third.done->status, Status::peer_lost);
    EXPECT_EQ(third.done->size, 64 * config::KiB);
    // The other peer still talks.
    send_text(c3, 1, 2, "alive");
    EXPECT_EQ(recv_text(c1, 3, 2), "alive");
}

// The factory-lifetime contract (node_factory.hpp) holds for the communicator too:
// one held past its factory refuses every call but self_id, peers and stats with a
// UsageError naming the call, at once (also with the largest timeouts), instead of
// reaching the destroyed factory (a send makes its message with create_buffer, flush
// calls the factory's flush); it still answers what it knows and is dropped safely
// (ASan watches every call here).
TEST_P(CommConformance, ACommunicatorHeldPastItsFactoryRefusesItsCallsWithAUsageErrorAndMayBeDropped) {
    auto c = make(2);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    auto ca = std::make_unique<Communicator>(*fa, c);
    Communicator cb(*fb, c);
    send_text(*ca, 2, 1, "before");
    EXPECT_EQ(recv_text(cb, 1, 1), "before");
    send_text(cb, 1, 2, "waiting");
    await_unexpected(*ca, 1); // a message waits in the communicator's own queue
    auto pending = ca->post_recv(2, 7);
    ASSERT_FALSE(pending.done.has_value());
    fa.reset();

    const std::array<comm::RequestId, 1> ids{pending.id};
    constexpr auto forever = std::chrono::nanoseconds::max();
    const std::vector<std::pair<std::string, std::function<void()>>> calls{
        {"send", [&] { send_text(*ca, 2, 1, "after"); }},
        {"send", [&] { ca->send(2, 1, std::make_unique<HeapBuffer>(8)); }},
        {"post_send", [&] { (void)ca->post_send(2, 1, bytes_of("after")); }},
        {"post_send_unexpected", [&] { (void)ca->post_send_unexpected(2, 1, bytes_of("after")); }},
        {"recv", [&] { (void)ca->recv(2, 2); }},
        {"post_recv", [&] { (void)ca->post_recv(2, 2); }},
        {"test", [&] { (void)ca->test(pending.id); }},
        {"test_some", [&] { (void)ca->test_some(ids); }},
        {"wait", [&] { (void)ca->wait(pending.id, forever); }},
        {"wait_any", [&] { (void)ca->wait_any(ids, forever); }},
        {"wait_some", [&] { (void)ca->wait_some(ids, forever); }},
        {"wait_all", [&] { (void)ca->wait_all(ids, forever); }},
        {"cancel", [&] { (void)ca->cancel(pending.id); }},
        {"iprobe", [&] { (void)ca->iprobe(any_source, any_tag); }},
        {"probe", [&] { (void)ca->probe(any_source, any_tag, forever); }},
        {"progress", [&] { ca->progress(); }},
        {"flush", [&] { (void)ca->flush(forever); }},
        {"test_unexpected", [&] { (void)ca->test_unexpected(4); }},
        {"wait_unexpected", [&] { (void)ca->wait_unexpected(4, forever); }},
        {"post_send_list", [&] { (void)ca->post_send_list(comm::Context{}, 2, 1, {}); }},
        {"post_recv_list", [&] { (void)ca->post_recv_list(comm::Context{}, 2, 1, {}); }},
        {"post_send_unexpected_list", [&] { (void)ca->post_send_unexpected_list(2, 1, {}); }},
        {"open_completion_context", [&] { (void)ca->open_completion_context(); }},
        {"add_to", [&] { ca->add_to(1, pending.id); }},
        {"test_context", [&] { (void)ca->test_context(1, 4); }},
        {"wait_context", [&] { (void)ca->wait_context(1, 4, forever); }},
        {"drop", [&] { ca->drop(2); }},
    };
    for (const auto& [name, call] : calls) {
        auto done = std::async(std::launch::async, [&call]() -> std::string {
            try {
                call();
                return "(returned)";
            } catch (const UsageError& e) {
                return e.what();
            } catch (const std::exception& e) {
                return std::string("(not a UsageError) ") + e.what();
            }
        });
        if (done.wait_for(patience) != std::future_status::ready) {
            std::cerr << "comm " << name << " after the factory was destroyed did not return within "
                      << patience.count() << " s\n";
            std::abort(); // a thread that does not return cannot be joined
        }
        const std::string error = done.get();
        EXPECT_NE(error.find("comm: " + name + " on the communicator of node 1 after its factory was destroyed"),
                  std::string::npos)
            << name << ": " << error;
    }
    EXPECT_FALSE(ca->usable()) << "BMI_get_info(BMI_CHECK_INIT) after the factory was destroyed";
    EXPECT_EQ(ca->self_id(), 1u);
    EXPECT_EQ(ca->peers(), (std::vector<NodeId>{2}));
    EXPECT_EQ(ca->stats().posted_receives, 1u);
    EXPECT_EQ(ca->stats().unexpected_messages, 1u);
    ca.reset();
}

// Issue 11: "a peer's loss completes its pending requests with PeerLost, never a
// hang", during a rendezvous, the other way round: node 1 sends three large messages
// (above comm.eager_limit) to node 2, a process of its own, which takes the three
// announcements, clears one (tag 9) and stops making progress; node 2 is killed.
// The send it never cleared (posted, tag 10) completes with peer_lost, the blocking
// send of another thread (tag 11) throws PeerLost; the one it cleared completes too:
// success when its data was handed to the node before the loss was known, else
// peer_lost (send completes when the node took the data), never a hang.
TEST_P(CommConformance, AReceiverKilledDuringARendezvousFailsTheSendsWaitingForIt) {
    auto c = make(2, [](config::Configuration& c) {
        c.peer_timeout = 300ms;
        c.edit_section<config::CommOptions>().eager_limit = config::KiB;
    });
    SegmentCleanup cleanup(c.partition);
    std::vector<std::string> args{COMM_PEER, "--receive-large", GetParam(), c.partition, "2", "2"};
    for (const auto& node : c.nodes)
        if (node.port != 0) args.push_back(std::to_string(node.port));
    auto f1 = NodeFactory::create(c, 1);
    auto owned = std::make_unique<Communicator>(*f1, c);
    Communicator& c1 = *owned;
    ChildProcess peer(args);
    EXPECT_EQ(recv_text(c1, 2, 1), "hi");
    auto big = std::make_shared<const std::vector<std::byte>>(64 * config::KiB, std::byte{0x5a});
    int u9 = 0, u10 = 0;
    auto cleared = c1.post_send(2, 9, *big, &u9);
    auto posted = c1.post_send(2, 10, *big, &u10);
    ASSERT_FALSE(cleared.done || posted.done) << "a 64 KiB send above the 1 KiB eager limit completed at once";
    // The blocking send waits, making progress (it moves the announcements and
    // answers node 2's clear-to-send of tag 9), until node 2 is lost.
    auto blocked_result = std::make_shared<std::promise<std::string>>();
    auto blocked_done = blocked_result->get_future();
    std::thread blocked([&c1, big, blocked_result] {
        try {
            c1.send(2, 11, *big);
            blocked_result->set_value("returned");
        } catch (const PeerLost& e) {
            blocked_result->set_value(e.peer() == 2 ? "PeerLost" : "PeerLost of node " + std::to_string(e.peer()));
        } catch (const std::exception& e) {
            blocked_result->set_value(std::string("threw: ") + e.what());
        }
    });
    // A send that hangs (the failure is reported) is left to its thread, with the
    // communicator and factory it uses, so that the test ends instead of hanging too.
    struct Join {
        std::thread& t;
        std::future<std::string>& done;
        std::unique_ptr<Communicator>& comm;
        std::unique_ptr<NodeFactory>& factory;
        ~Join() {
            if (!done.valid() || done.wait_for(0s) == std::future_status::ready) {
                t.join();
                return;
            }
            t.detach();
            (void)comm.release();
            (void)factory.release();
        }
    } join{blocked, blocked_done, owned, f1};
    ASSERT_EQ(peer.wait_for_line("ready", patience), "ready") << "node 2 did not take the three announcements";
    EXPECT_EQ(blocked_done.wait_for(0s), std::future_status::timeout) << "the blocking send returned before the kill";
    peer.kill(SIGKILL);
    peer.wait();
    auto done = c1.wait(posted.id, patience);
    ASSERT_TRUE(done.has_value()) << "a posted send announced to the killed receiver hung";
    EXPECT_EQ(done->status, Status::peer_lost);
    EXPECT_TRUE(done->is_send);
    EXPECT_EQ(done->source, 2u);
    EXPECT_EQ(done->user, &u10);
    EXPECT_FALSE(done->error.empty());
    ASSERT_EQ(blocked_done.wait_for(patience), std::future_status::ready)
        << "a blocking send announced to the killed receiver hung";
    EXPECT_EQ(blocked_done.get(), "PeerLost");
    auto first = c1.wait(cleared.id, patience);
    ASSERT_TRUE(first.has_value()) << "the send the killed receiver had cleared hung";
    EXPECT_TRUE(first->status == Status::success || first->status == Status::peer_lost)
        << "status " << comm::to_string(first->status) << ": " << first->error;
    EXPECT_EQ(first->user, &u9);
    EXPECT_EQ(c1.stats().rendezvous_announced, 0u);
}

// ---------------------------------------------------------------- one copy
// (docs/communicator.md, "One copy"): between processes of this host (sci, and auto's
// sci peers) a large message goes from the sender's memory straight into the
// receiver's posted buffer (process_vm_writev); tcp and udp peers keep their path.
// Two communicators of one process are two ends like any (the write goes into this
// process itself).

// The peer of node 1 for these tests: on auto, node 3 is on node 1's machine (sci).
NodeId one_copy_peer(const std::string& technology) {
    return technology == "auto" ? 3 : 2;
}
bool one_copy_expected(const std::string& technology) {
    return technology == "sci" || technology == "auto";
}

// Waits for a request of c, failing the test on timeout.
comm::Completion wait_for(Communicator& c, comm::RequestId id, const char* what) {
    auto done = c.wait(id, patience);
    if (!done) {
        ADD_FAILURE() << what << " did not complete within " << patience.count() << " s";
        return {};
    }
    return std::move(*done);
}

TEST_P(CommConformance, ALargeMessageToAPeerOfThisHostGoesWithOneCopyIntoThePostedBuffer) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    std::uint64_t expected_bytes = 0;
    unsigned seed = 10;
    // Posted first (the requested queue), posted after the announcement arrived
    // (unexpected rendezvous), and from any source.
    for (std::size_t size :
         {std::size_t{64 * config::KiB + 1}, std::size_t{config::MiB}, std::size_t{16 * config::MiB}}) {
        for (int way = 0; way < 3; ++way) {
            const auto data = pattern(size, ++seed);
            std::vector<std::byte> into(size + 64, std::byte{0xee}); // 64 guard bytes
            const NodeId from = way == 2 ? any_source : 1;
            const std::span<std::byte> target(into.data(), size);
            comm::Posted recv;
            comm::Posted send;
            if (way == 1) {
                send = a.post_send_in_place(comm::Context{}, peer, 4, data);
                ASSERT_TRUE(b.probe(1, 4, patience).has_value()) << "the announcement never came";
                recv = b.post_recv_in_place(comm::Context{}, from, 4, target);
            } else {
                recv = b.post_recv_in_place(comm::Context{}, from, 4, target);
                send = a.post_send_in_place(comm::Context{}, peer, 4, data);
            }
            ASSERT_FALSE(recv.done.has_value());
            if (one_copy_expected(GetParam())) { // (elsewhere a receive posted first lets it go at once)
                ASSERT_FALSE(send.done.has_value()) << "a large send completed at its post";
            }
            const auto got = wait_for(b, recv.id, "the receive");
            EXPECT_EQ(got.status, Status::success) << got.error;
            EXPECT_EQ(got.size, size);
            EXPECT_EQ(got.bytes, size);
            EXPECT_EQ(got.source, 1u);
            EXPECT_EQ(got.tag, 4);
            EXPECT_TRUE(std::equal(data.begin(), data.end(), into.begin()))
                << size << " bytes, way " << way << ": the data differs";
            EXPECT_TRUE(std::all_of(into.begin() + static_cast<std::ptrdiff_t>(size), into.end(), [](std::byte x) {
                return x == std::byte{0xee};
            })) << "bytes written past the receive buffer";
            if (!send.done) {
                const auto sent = wait_for(a, send.id, "the send");
                EXPECT_EQ(sent.status, Status::success) << sent.error;
            }
            expected_bytes += size;
        }
    }
    const auto sa = a.stats();
    const auto sb = b.stats();
    if (one_copy_expected(GetParam())) {
        EXPECT_EQ(sa.single_copy_sent, 9u);
        EXPECT_EQ(sa.single_copy_bytes, expected_bytes);
        EXPECT_EQ(sb.single_copy_received, 9u);
        EXPECT_EQ(sa.single_copy_fallbacks, 0u);
        EXPECT_EQ(sa.single_copy_refused, 0u);
        EXPECT_EQ(sb.rendezvous_received, 9u);
    } else {
        EXPECT_EQ(sa.single_copy_sent, 0u) << "tcp and udp keep their path";
        EXPECT_EQ(sb.single_copy_received, 0u);
    }
    EXPECT_EQ(sb.malformed, 0u);
    EXPECT_EQ(sa.malformed, 0u);
}

// The sender's order holds across the two paths: large (written), eager (through the
// technology), large, taken by receives of one tag in that order; a receive shorter
// than the message is truncated, never written past.
TEST_P(CommConformance, OneCopyMessagesKeepTheSendersOrderWithEagerOnesBetweenAndTruncateIntoShortBuffers) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    const std::size_t big = 300 * config::KiB;
    const auto first = pattern(big, 1);
    const auto middle = pattern(100, 2);
    const auto last = pattern(big, 3);
    auto s1 = a.post_send_in_place(comm::Context{}, peer, 6, first);
    auto s2 = a.post_send_in_place(comm::Context{}, peer, 6, middle);
    auto s3 = a.post_send_in_place(comm::Context{}, peer, 6, last);
    EXPECT_TRUE(s2.done.has_value()) << "an eager message is copied at its post";
    std::vector<std::vector<std::byte>> into(3, std::vector<std::byte>(big + 16, std::byte{0xee}));
    std::vector<comm::Posted> posts;
    for (auto& v : into)
        posts.push_back(b.post_recv_in_place(comm::Context{}, any_source, 6, std::span(v.data(), big)));
    std::vector<std::size_t> sizes;
    for (auto& p : posts) // (the eager one may have come before its receive)
        sizes.push_back(p.done ? p.done->size : wait_for(b, p.id, "a receive").size);
    EXPECT_EQ(sizes, (std::vector<std::size_t>{big, 100, big})) << "the order changed";
    EXPECT_TRUE(std::equal(first.begin(), first.end(), into[0].begin()));
    EXPECT_TRUE(std::equal(middle.begin(), middle.end(), into[1].begin()));
    EXPECT_TRUE(std::equal(last.begin(), last.end(), into[2].begin()));
    for (const auto* p : {&s1, &s3}) {
        if (!p->done) {
            EXPECT_EQ(wait_for(a, p->id, "a send").status, Status::success);
        }
    }
    // A receive of 100 KiB for a 300 KiB message: truncated, 100 KiB written.
    std::vector<std::byte> small(100 * config::KiB + 16, std::byte{0xee});
    auto r = b.post_recv_in_place(comm::Context{}, 1, 7, std::span(small.data(), 100 * config::KiB));
    auto s = a.post_send_in_place(comm::Context{}, peer, 7, first);
    const auto got = wait_for(b, r.id, "the short receive");
    EXPECT_EQ(got.status, Status::truncated);
    EXPECT_EQ(got.size, big);
    EXPECT_EQ(got.bytes, 100 * config::KiB);
    EXPECT_TRUE(std::equal(first.begin(), first.begin() + 100 * 1024, small.begin()));
    EXPECT_TRUE(std::all_of(small.end() - 16, small.end(), [](std::byte x) { return x == std::byte{0xee}; }))
        << "bytes written past the receive buffer";
    if (!s.done) {
        EXPECT_EQ(wait_for(a, s.id, "the truncated send").status, Status::success);
    }
    if (one_copy_expected(GetParam())) {
        EXPECT_EQ(a.stats().single_copy_sent, 3u);
        EXPECT_EQ(b.stats().single_copy_received, 3u);
    }
}

// A cleared large send's data goes after the messages that came with its
// clear-to-send were dispatched, not inside that dispatch; a blocking receive that
// waits for the receiver's answer sends it meanwhile (here nothing else makes
// progress on the sender: the receive would wait forever otherwise).
TEST_P(CommConformance, ABlockingReceiveSendsTheDataOfALargeSendClearedWhileItWaits) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    const std::size_t big = 512 * config::KiB;
    for (unsigned round = 0; round < 3; ++round) {
        const auto data = pattern(big, 40 + round);
        std::vector<std::byte> into(big, std::byte{0xee});
        auto receiver = std::async(std::launch::async, [&] {
            auto r = b.post_recv_in_place(comm::Context{}, 1, 20, into);
            const auto got = r.done ? std::move(*r.done) : wait_for(b, r.id, "the large receive");
            send_text(b, 1, 21, got.status == Status::success && got.bytes == big ? "whole" : "broken");
        });
        auto s = a.post_send_in_place(comm::Context{}, peer, 20, data);
        EXPECT_EQ(recv_text(a, peer, 21), "whole") << "round " << round;
        ASSERT_EQ(receiver.wait_for(patience), std::future_status::ready);
        receiver.get();
        if (!s.done) {
            EXPECT_EQ(wait_for(a, s.id, "the large send").status, Status::success);
        }
        EXPECT_TRUE(std::equal(data.begin(), data.end(), into.begin())) << "round " << round << ": the data differs";
    }
    if (one_copy_expected(GetParam())) {
        EXPECT_EQ(a.stats().single_copy_sent, 3u);
    }
}

// Both ends send windows of large messages to each other at once (osu_bibw's
// pattern: every receive posted, then every send, then the sends waited for, then
// the receives): each end answers the other's announcements between its own writes,
// and every message arrives whole, in the order sent.
TEST_P(CommConformance, WindowsOfLargeMessagesBothWaysAtOnceArriveWholeAndInOrder) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    constexpr int window = 16;
    const std::size_t big = 256 * config::KiB;
    auto side = [&](Communicator& self, NodeId other, unsigned seed) {
        std::vector<std::vector<std::byte>> out, in;
        std::vector<comm::RequestId> recvs, sends;
        for (int i = 0; i < window; ++i) {
            out.push_back(pattern(big, seed + static_cast<unsigned>(i)));
            in.emplace_back(big, std::byte{0xee});
        }
        for (int round = 0; round < 2; ++round) {
            recvs.clear();
            sends.clear();
            for (int i = 0; i < window; ++i) {
                auto r = self.post_recv_in_place(comm::Context{}, other, 30, in[static_cast<std::size_t>(i)]);
                if (r.done) { // (tcp, udp: the peer's send went at once with an earlier request)
                    EXPECT_EQ(r.done->status, Status::success) << r.done->error;
                    EXPECT_EQ(r.done->bytes, big);
                } else {
                    recvs.push_back(r.id);
                }
            }
            for (int i = 0; i < window; ++i) {
                auto s = self.post_send_in_place(comm::Context{}, other, 30, out[static_cast<std::size_t>(i)]);
                if (s.done) {
                    EXPECT_EQ(s.done->status, Status::success) << s.done->error;
                } else {
                    sends.push_back(s.id);
                }
            }
            for (auto id : sends)
                EXPECT_EQ(wait_for(self, id, "a send").status, Status::success);
            for (auto id : recvs) {
                const auto got = wait_for(self, id, "a receive");
                EXPECT_EQ(got.status, Status::success) << got.error;
                EXPECT_EQ(got.bytes, big);
            }
        }
        // What the node still holds for the peer (the last completions) goes before
        // this end stops calling it.
        EXPECT_TRUE(self.flush(patience)) << "the last messages to " << other << " were not handed over";
        return in;
    };
    auto from_b = std::async(std::launch::async, [&] { return side(b, 1, 2000); });
    const auto got_a = side(a, peer, 1000);
    ASSERT_EQ(from_b.wait_for(patience), std::future_status::ready);
    const auto got_b = from_b.get();
    for (int i = 0; i < window; ++i) {
        // The i-th receive took the i-th send (one tag, one source: in order).
        EXPECT_TRUE(got_a[static_cast<std::size_t>(i)] == pattern(big, 2000 + static_cast<unsigned>(i)))
            << "message " << i << " from " << peer << " differs";
        EXPECT_TRUE(got_b[static_cast<std::size_t>(i)] == pattern(big, 1000 + static_cast<unsigned>(i)))
            << "message " << i << " from 1 differs";
    }
    if (one_copy_expected(GetParam())) {
        EXPECT_EQ(a.stats().single_copy_sent, 2u * window);
        EXPECT_EQ(b.stats().single_copy_sent, 2u * window);
    }
    EXPECT_EQ(a.stats().malformed, 0u);
    EXPECT_EQ(b.stats().malformed, 0u);
}

// The fallback, decided per message: comm.single_copy false at the receiver (it names
// no buffer), a receive into a list, a receive not posted in place, and a send of a
// copy (post_send) into a receive in place: every message arrives whole, once.
TEST_P(CommConformance, WithoutOneCopyEachLargeMessageStillArrivesWholeThroughTheTechnology) {
    auto c = make(3, [](config::Configuration& c) { c.edit_section<config::CommOptions>().single_copy = false; });
    const NodeId peer = one_copy_peer(GetParam());
    EXPECT_FALSE(comm::Limits::from(c).single_copy);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    comm::Limits on;
    Communicator a(*fa, c, on), b_off(*fb, c); // the receiver's configuration says false
    Pump pump(a);
    const std::size_t size = 200 * config::KiB;
    const auto data = pattern(size, 4);
    std::vector<std::byte> into(size);
    auto r = b_off.post_recv_in_place(comm::Context{}, 1, 3, into);
    auto s = a.post_send_in_place(comm::Context{}, peer, 3, data);
    EXPECT_EQ(wait_for(b_off, r.id, "the receive").status, Status::success);
    EXPECT_EQ(into, data);
    if (!s.done) {
        EXPECT_EQ(wait_for(a, s.id, "the send").status, Status::success);
    }
    EXPECT_EQ(a.stats().single_copy_sent, 0u);
    EXPECT_EQ(a.stats().single_copy_fallbacks, one_copy_expected(GetParam()) ? 1u : 0u);
    EXPECT_EQ(b_off.stats().single_copy_received, 0u);
}

TEST_P(CommConformance, AListReceiveOrAReceiveNotInPlaceTakesALargeMessageThroughTheTechnology) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    const std::size_t size = 200 * config::KiB;
    const auto data = pattern(size, 5);
    std::vector<std::byte> head(1000), tail(size - 1000);
    const std::array<std::span<std::byte>, 2> pieces{std::span(head), std::span(tail)};
    auto r1 = b.post_recv_list(comm::Context{}, 1, 3, pieces);
    auto s1 = a.post_send_in_place(comm::Context{}, peer, 3, data);
    EXPECT_EQ(wait_for(b, r1.id, "the list receive").status, Status::success);
    EXPECT_TRUE(std::equal(head.begin(), head.end(), data.begin()));
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), data.begin() + 1000));
    std::vector<std::byte> into(size);
    auto r2 = b.post_recv(1, 3, into);
    auto s2 = a.post_send_in_place(comm::Context{}, peer, 3, data);
    EXPECT_EQ(wait_for(b, r2.id, "the receive").status, Status::success);
    EXPECT_EQ(into, data);
    for (const auto* p : {&s1, &s2}) {
        if (!p->done) {
            EXPECT_EQ(wait_for(a, p->id, "a send").status, Status::success);
        }
    }
    EXPECT_EQ(a.stats().single_copy_sent, 0u);
    EXPECT_EQ(a.stats().single_copy_fallbacks, one_copy_expected(GetParam()) ? 2u : 0u);
    // A send of a copy (post_send) into a receive in place is written from that copy
    // (announced first: a receive posted first would let it go at once, eager, on
    // its request).
    std::fill(into.begin(), into.end(), std::byte{0});
    (void)a.post_send(peer, 3, data);
    ASSERT_TRUE(b.probe(1, 3, patience).has_value());
    auto r3 = b.post_recv_in_place(comm::Context{}, 1, 3, into);
    EXPECT_EQ(wait_for(b, r3.id, "the receive in place").status, Status::success);
    EXPECT_EQ(into, data);
    EXPECT_EQ(b.stats().single_copy_received, one_copy_expected(GetParam()) ? 1u : 0u);
}

// A receive whose buffer went to the sender cannot be cancelled (the sender may be
// writing into it): it completes with its message, as a matched MPI receive does.
// Over tcp and udp it gives no buffer and stays cancellable, as post_recv.
TEST_P(CommConformance, AReceiveThatGaveItsBufferToTheSenderIsNotCancelledButCompletesWithTheMessage) {
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c), b(*fb, c);
    const std::size_t size = 200 * config::KiB;
    const auto data = pattern(size, 6);
    auto s = a.post_send_in_place(comm::Context{}, peer, 3, data);
    ASSERT_TRUE(b.probe(1, 3, patience).has_value());
    std::vector<std::byte> into(size);
    auto r = b.post_recv_in_place(comm::Context{}, 1, 3, into); // its buffer goes to node 1
    ASSERT_FALSE(r.done.has_value());
    if (!one_copy_expected(GetParam())) {
        EXPECT_TRUE(b.cancel(r.id)) << "a receive that gave no buffer is cancellable";
        EXPECT_EQ(b.test(r.id)->status, Status::cancelled);
        r = b.post_recv_in_place(comm::Context{}, 1, 3, into); // takes the returned announcement
        ASSERT_FALSE(r.done.has_value());
    } else {
        EXPECT_FALSE(b.cancel(r.id));
    }
    Pump pump(a);
    const auto got = wait_for(b, r.id, "the receive");
    EXPECT_EQ(got.status, Status::success);
    EXPECT_EQ(into, data);
    EXPECT_EQ(wait_for(a, s.id, "the send").status, Status::success);
}

// "Nothing a peer sends may crash": a clear-to-send naming a buffer at a bad address,
// another host's process, or memory of the sending process itself that no receive
// offered (a peer naming the sender's own pid), is refused and counted; the data then
// goes through the technology, once, and the memory named stays as it was. The
// receiver here is a raw node answering by hand.
// Over tcp and udp such a buffer is never written into (not a peer of this host).
TEST_P(CommConformance, AClearToSendNamingABadBufferIsRefusedCountedAndTheDataGoesThroughTheTechnology) {
    const bool local = one_copy_expected(GetParam());
    auto c = make(3);
    const NodeId peer = one_copy_peer(GetParam());
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, peer);
    Communicator a(*fa, c);
    Pump pump(a);
    auto raw = fb->create_node(1);
    const std::size_t size = 100 * config::KiB;
    const auto data = pattern(size, 7);
    // This process's boot id hash and pid namespace, as comm sends them.
    std::uint64_t boot = 1469598103934665603ULL;
    {
        std::string id;
        std::ifstream in("/proc/sys/kernel/random/boot_id");
        std::getline(in, id);
        for (unsigned char ch : id)
            boot = (boot ^ ch) * 1099511628211ULL;
    }
    struct stat ns {};
    ASSERT_EQ(::stat("/proc/self/ns/pid", &ns), 0);
    std::vector<std::byte> victim(size, std::byte{0x5a}); // this process's memory, offered to nobody
    for (int round = 0; round < (local ? 4 : 2); ++round) {
        auto s = a.post_send_in_place(comm::Context{}, peer, 8, data);
        auto rts = raw->receive(patience);
        ASSERT_TRUE(rts) << "no announcement";
        ASSERT_EQ(rts->size(), 24u);
        std::array<std::byte, 24 + 40> cts{};
        rts->copy_to(std::span(cts).first(24));
        cts[5] = std::byte{10};             // kind: a clear-to-send naming a buffer
        std::memset(cts.data() + 8, 0, 4);  // tag
        std::memset(cts.data() + 16, 0, 8); // size: no request withdrawn
        std::uint32_t pid = static_cast<std::uint32_t>(::getpid());
        if (round == 3) { // a process that ended (and was reaped): the receiver is gone
            const pid_t child = ::fork();
            if (child == 0) ::_exit(0);
            ASSERT_GT(child, 0);
            ASSERT_EQ(::waitpid(child, nullptr, 0), child);
            pid = static_cast<std::uint32_t>(child);
        }
        const std::uint64_t fields[4] = {round == 1 ? boot + 1 : boot, static_cast<std::uint64_t>(ns.st_ino),
                                         round == 3   ? reinterpret_cast<std::uintptr_t>(data.data())
                                         : round == 2 ? reinterpret_cast<std::uintptr_t>(victim.data())
                                                      : 0x10,
                                         size}; // address 0x10: never mapped
        std::memcpy(cts.data() + 24, &pid, 4);
        std::memcpy(cts.data() + 32, fields, sizeof fields);
        raw->send(std::make_unique<HeapBuffer>(std::span<const std::byte>(cts)));
        if (round == 3) {
            auto lost = wait_for(a, s.id, "the send to a process that is gone");
            EXPECT_EQ(lost.status, Status::peer_lost) << lost.error;
            EXPECT_NE(lost.error.find("is gone"), std::string::npos) << lost.error;
            break;
        }
        auto d = raw->receive(patience);
        ASSERT_TRUE(d) << "round " << round << ": no data after the refused buffer";
        ASSERT_EQ(d->size(), 24 + size);
        std::vector<std::byte> got(d->size());
        d->copy_to(got);
        EXPECT_EQ(got[5], std::byte{5}) << "not a data message";
        EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin() + 24));
        EXPECT_EQ(wait_for(a, s.id, "the send").status, Status::success);
    }
    EXPECT_EQ(a.stats().single_copy_refused, local ? 3u : 0u)
        << "a bad address, another host's boot id, then this process's own memory";
    EXPECT_TRUE(std::all_of(victim.begin(), victim.end(), [](std::byte b) { return b == std::byte{0x5a}; }))
        << "a peer naming this process's pid made it write over its own memory";
    EXPECT_EQ(a.stats().single_copy_sent, 0u);
}

// A receiver killed after it gave its buffer and before the sender wrote into it: the
// send completes peer_lost (the write finds no process), never hangs; the sends
// announced behind it fail too.
// (Over tcp and udp the same run takes the technology's path.)
// BMI's user memory without a copy (issue 29 item 5): a large send in place whose
// receive gives no buffer to write into goes through the technology from the caller's
// memory itself, the data message holding a view of it, and completes only when the
// technology let that view go (tcp and udp: the peer acknowledged the message; sci:
// it was copied into the shared memory), so that the caller may then reuse or free it.
// The memory is read when the receiver clears the message, and no data message is
// made in the communicator's memory (its pool keeps nothing). A receive posted first (the requested queue) lets such a
// send go at once, from the caller's memory as well.
TEST_P(CommConformance, AnInPlaceSendGoesFromTheCallersMemoryWithoutACopyAndCompletesWhenTheTechnologyLetItGo) {
    auto c = make(2, small_eager_limit);
    auto fa = NodeFactory::create(c, 1);
    auto fb = NodeFactory::create(c, 2);
    Communicator a(*fa, c), b(*fb, c);
    Pump pump(a);
    constexpr std::size_t size = 4 * config::MiB;
    auto data = std::make_unique<std::vector<std::byte>>(pattern(size, 7));
    const auto expected = *data;
    auto s = a.post_send_in_place(comm::Context{}, 2, 9, *data);
    ASSERT_FALSE(s.done.has_value()) << "a large send in place completes only after its data went";
    std::vector<std::byte> into(size);
    auto r = b.post_recv(1, 9, into); // no buffer for the sender to write into
    EXPECT_EQ(wait_for(b, r.id, "the receive").status, Status::success);
    EXPECT_EQ(into, expected);
    EXPECT_EQ(wait_for(a, s.id, "the send").status, Status::success);
    data.reset(); // the caller's memory goes: no node reads it any more (AddressSanitizer would tell)
    auto stats = a.stats();
    EXPECT_EQ(stats.zero_copy_sent, 1u);
    EXPECT_EQ(stats.zero_copy_bytes, size);
    EXPECT_EQ(stats.large_buffers_kept_bytes, 0u) << "a data message was made in the communicator's memory: a copy";
    EXPECT_EQ(stats.single_copy_sent, 0u);

    std::vector<std::byte> into_first(size);
    auto r2 = b.post_recv(1, 11, into_first); // posted first: its request goes to node 1
    const auto second = pattern(size, 8);
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (GetParam() != "sci" && a.stats().requests_held == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms); // node 1's pump takes the request
    auto s2 = a.post_send_in_place(comm::Context{}, 2, 11, second);
    EXPECT_EQ(wait_for(b, r2.id, "the receive posted first").status, Status::success);
    EXPECT_EQ(into_first, second);
    if (!s2.done) {
        EXPECT_EQ(wait_for(a, s2.id, "the second send").status, Status::success);
    }
    stats = a.stats();
    EXPECT_EQ(stats.zero_copy_sent, 2u);
    EXPECT_EQ(stats.large_buffers_kept_bytes, 0u);
    if (GetParam() != "sci") {
        EXPECT_EQ(stats.requested_sends, 1u) << "the request let it go at once";
    }
}

TEST_P(CommConformance, ASenderWhoseOneCopyReceiverWasKilledGetsPeerLostNotAHang) {
    auto c = make(3, [](config::Configuration& c) {
        c.peer_timeout = 300ms;
        small_eager_limit(c);
    });
    SegmentCleanup cleanup(c.partition);
    const NodeId peer = one_copy_peer(GetParam());
    std::vector<std::string> args{COMM_PEER, "--receive-in-place", GetParam(), c.partition, "3", std::to_string(peer)};
    for (const auto& node : c.nodes)
        if (node.port != 0) args.push_back(std::to_string(node.port));
    auto f1 = NodeFactory::create(c, 1);
    Communicator c1(*f1, c);
    ChildProcess child(args);
    EXPECT_EQ(recv_text(c1, peer, 1), "hi");
    const auto big = pattern(64 * config::KiB, 8);
    std::vector<comm::RequestId> sends;
    for (comm::Tag tag : {9, 10, 11}) {
        auto s = c1.post_send_in_place(comm::Context{}, peer, tag, big);
        ASSERT_FALSE(s.done.has_value());
        sends.push_back(s.id);
    }
    // The announcements are handed over (a node moves the next message when its peer
    // took the one before); the clear-to-send of tag 9 comes only after all three.
    ASSERT_TRUE(c1.flush(patience));
    ASSERT_EQ(child.wait_for_line("ready", patience), "ready") << "the peer did not clear tag 9";
    child.kill(SIGKILL);
    child.wait();
    // Tag 9: written before the kill when the flush above took its clear-to-send
    // (rarely), else peer_lost: the write found no process (the raw test below has
    // that case alone). 10 and 11 were never cleared.
    for (std::size_t i = 0; i < sends.size(); ++i) {
        auto done = c1.wait(sends[i], patience);
        ASSERT_TRUE(done.has_value()) << "a send to the killed receiver hung";
        if (i == 0 && done->status == Status::success) {
            EXPECT_EQ(c1.stats().single_copy_sent, one_copy_expected(GetParam()) ? 1u : 0u);
        } else {
            EXPECT_EQ(done->status, Status::peer_lost) << "tag " << 9 + i << ": " << done->error;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Technologies, CommConformance, ::testing::Values("sci", "tcp", "udp", "auto"),
                         [](const auto& info) { return info.param; });

} // namespace
} // namespace msgpass::test
