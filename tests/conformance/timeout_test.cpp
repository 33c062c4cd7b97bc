// The largest timeout on every blocking call of the API: std::chrono::nanoseconds::max()
// means "until it happens". A deadline computed as now + timeout overflows into the
// past, so that the call returned at once (receive) or gave up at once (flush); these
// tests make each call wait for an event that comes later, on every technology.
#include "../support/threads.hpp"
#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;
constexpr auto forever = std::chrono::nanoseconds::max();
constexpr auto patience = 10s; // the event comes within milliseconds

// The event of each test comes once the thread that made the call sleeps in it (its
// scheduler state, tests/support/threads.hpp): a call that returned at once (the
// overflow) never sleeps there, and then the event is caused while it has already
// returned, which the test sees.
struct Waiter {
    std::atomic<pid_t> tid{0};
    std::atomic<bool> returned{false};
    std::atomic<bool> caused_while_waiting{false};

    // On the calling thread, just before the call.
    void entering() { tid = this_thread_id(); }
    // On the thread that causes the event: true when the call was asleep in it then.
    void await_sleep() { caused_while_waiting = wait_until_asleep(tid, patience) && !returned; }
};

// Runs a call that must return once an event happened; a call still blocked after
// patience ends the test binary with a message (it cannot be cancelled, and a
// hanging test must not turn into a ctest timeout without a word).
template <class F>
auto bounded(const char* what, F&& call) {
    auto result = std::async(std::launch::async, std::forward<F>(call));
    if (result.wait_for(patience) != std::future_status::ready) {
        std::fprintf(stderr, "%s did not return within %lld s after its event\n", what,
                     static_cast<long long>(patience.count()));
        std::_Exit(1);
    }
    return result.get();
}

class LargestTimeout : public ::testing::TestWithParam<std::string> {
protected:
    config::Configuration make(int n, const std::function<void(config::Configuration&)>& tweak = {}) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        auto c = make_configuration(GetParam(), unique_partition(info->name()), n, tweak);
        cleanup_ = std::make_unique<SegmentCleanup>(c.partition);
        return c;
    }

private:
    std::unique_ptr<SegmentCleanup> cleanup_;
};

TEST_P(LargestTimeout, NodeReceiveWaitsForAMessageSentLater) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const auto start = std::chrono::steady_clock::now();
    Waiter w;
    std::thread sender([&] {
        w.await_sleep();
        to_b->send(make_message(*a, 64, 0, 7));
    });
    auto got = bounded("Node::receive(nanoseconds::max())", [&] {
        w.entering();
        auto m = from_a->receive(forever);
        w.returned = true;
        return m;
    });
    sender.join();
    ASSERT_NE(got, nullptr) << "receive(nanoseconds::max()) returned nothing after "
                            << (std::chrono::steady_clock::now() - start) / 1us << " us";
    EXPECT_EQ(check_payload(*got).seq, 7u);
    EXPECT_TRUE(w.caused_while_waiting) << "the receive had returned, or never slept, before the message was sent";
}

TEST_P(LargestTimeout, GroupReceiveWaitsForAMessageSentLater) {
    auto c = make(3, [](config::Configuration& c) { c.groups["sources"] = {2, 3}; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto sources = a->create_group("sources");
    auto to_a = b->create_node(1);
    const auto start = std::chrono::steady_clock::now();
    Waiter w;
    std::thread sender([&] {
        w.await_sleep();
        to_a->send(make_message(*b, 64, 0, 9));
    });
    auto got = bounded("Group::receive(nanoseconds::max())", [&] {
        w.entering();
        auto m = sources->receive(forever);
        w.returned = true;
        return m;
    });
    sender.join();
    EXPECT_TRUE(w.caused_while_waiting) << "the receive had returned, or never slept, before the message was sent";
    ASSERT_NE(got, nullptr) << "group receive(nanoseconds::max()) returned nothing after "
                            << (std::chrono::steady_clock::now() - start) / 1us << " us";
    EXPECT_EQ(got->source(), 2u);
    EXPECT_EQ(check_payload(*got).seq, 9u);
}

// A message to a peer that does not run yet stays queued; flush with the largest
// timeout returns true once the peer started and took it (sci hands a message over
// into a slot that the running peer grants).
TEST_P(LargestTimeout, NodeFlushWaitsForAPeerThatStartsLater) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    to_b->send(make_message(*a, 64, 0, 11));
    std::unique_ptr<NodeFactory> b;
    BufferPtr got;
    Waiter w;
    std::thread peer([&] { // starts once the flush sleeps, then receives as a running peer does
        w.await_sleep();
        b = NodeFactory::create(c, 2);
        got = b->create_node(1)->receive(patience);
    });
    const bool flushed = bounded("Node::flush(nanoseconds::max())", [&] {
        w.entering();
        const bool done = to_b->flush(forever);
        w.returned = true;
        return done;
    });
    peer.join();
    EXPECT_TRUE(flushed) << "flush(nanoseconds::max()) gave up with a message queued";
    EXPECT_TRUE(w.caused_while_waiting) << "the flush had returned, or never slept, before the peer started";
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(check_payload(*got).seq, 11u);
}

TEST_P(LargestTimeout, FactoryFlushWaitsForAPeerThatStartsLater) {
    auto c = make(2);
    auto a = NodeFactory::create(c, 1);
    auto to_b = a->create_node(2);
    to_b->send(make_message(*a, 64, 0, 12));
    EXPECT_FALSE(a->flush(0ns)) << "a message to a peer that does not run yet cannot have been handed over";
    std::unique_ptr<NodeFactory> b;
    BufferPtr got;
    Waiter w;
    std::thread peer([&] { // starts once the flush sleeps, then receives as a running peer does
        w.await_sleep();
        b = NodeFactory::create(c, 2);
        got = b->create_node(1)->receive(patience);
    });
    const bool flushed = bounded("NodeFactory::flush(nanoseconds::max())", [&] {
        w.entering();
        const bool done = a->flush(forever);
        w.returned = true;
        return done;
    });
    peer.join();
    EXPECT_TRUE(flushed) << "factory flush(nanoseconds::max()) gave up with a message queued";
    EXPECT_TRUE(w.caused_while_waiting) << "the flush had returned, or never slept, before the peer started";
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(check_payload(*got).seq, 12u);
}

INSTANTIATE_TEST_SUITE_P(Technologies, LargestTimeout, ::testing::Values("sci", "tcp", "udp", "auto"),
                         [](const auto& info) { return info.param; });

} // namespace
} // namespace msgpass::test
