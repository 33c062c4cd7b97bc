// The largest timeout on every blocking call of the API: std::chrono::nanoseconds::max()
// means "until it happens". A deadline computed as now + timeout overflows into the
// past, so that the call returned at once (receive) or gave up at once (flush); these
// tests make each call wait for an event that comes later, on every technology.
#include "../support/partition.hpp"

#include <gtest/gtest.h>

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
// The event is made to come this much later than the call starts, so that a call
// that returned at once (the overflow) is told from one that waited. It is a delay,
// not a synchronisation: the assertions hold for any value.
constexpr auto later = 30ms;

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
    std::thread sender([&] {
        std::this_thread::sleep_for(later);
        to_b->send(make_message(*a, 64, 0, 7));
    });
    auto got = bounded("Node::receive(nanoseconds::max())", [&] { return from_a->receive(forever); });
    sender.join();
    ASSERT_NE(got, nullptr) << "receive(nanoseconds::max()) returned nothing after "
                            << (std::chrono::steady_clock::now() - start) / 1us << " us";
    EXPECT_EQ(check_payload(*got).seq, 7u);
    EXPECT_GE(std::chrono::steady_clock::now() - start, later);
}

TEST_P(LargestTimeout, GroupReceiveWaitsForAMessageSentLater) {
    auto c = make(3, [](config::Configuration& c) { c.groups["sources"] = {2, 3}; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto sources = a->create_group("sources");
    auto to_a = b->create_node(1);
    const auto start = std::chrono::steady_clock::now();
    std::thread sender([&] {
        std::this_thread::sleep_for(later);
        to_a->send(make_message(*b, 64, 0, 9));
    });
    auto got = bounded("Group::receive(nanoseconds::max())", [&] { return sources->receive(forever); });
    sender.join();
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
    std::thread peer([&] { // starts later, then receives as a running peer does
        std::this_thread::sleep_for(later);
        b = NodeFactory::create(c, 2);
        got = b->create_node(1)->receive(patience);
    });
    const bool flushed = bounded("Node::flush(nanoseconds::max())", [&] { return to_b->flush(forever); });
    peer.join();
    EXPECT_TRUE(flushed) << "flush(nanoseconds::max()) gave up with a message queued";
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
    std::thread peer([&] {
        std::this_thread::sleep_for(later);
        b = NodeFactory::create(c, 2);
        got = b->create_node(1)->receive(patience);
    });
    const bool flushed = bounded("NodeFactory::flush(nanoseconds::max())", [&] { return a->flush(forever); });
    peer.join();
    EXPECT_TRUE(flushed) << "factory flush(nanoseconds::max()) gave up with a message queued";
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(check_payload(*got).seq, 12u);
}

INSTANTIATE_TEST_SUITE_P(Technologies, LargestTimeout, ::testing::Values("sci", "tcp", "udp", "auto"),
                         [](const auto& info) { return info.param; });

} // namespace
} // namespace msgpass::test
