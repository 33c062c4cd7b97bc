// Unit tests of msgpass/kit/factory_base.hpp over a fake technology: one node per
// peer id, the errors for self and for an unknown id, static groups made once and
// filled in file order, one deadline for flush, the report of close(), a group
// whose add() calls back into create_node (as auto's does), and the lifetime
// contract: what the factory made refuses calls once it is destroyed.
#include <msgpass/kit/errors.hpp>
#include <msgpass/kit/factory_base.hpp>

#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <thread>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

// A node that sends nothing: it records the timeouts flush was given, and a flush
// with messages still queued waits the whole timeout and fails, as a node whose peer
// does not take them does.
class FakeNode final : public Node, public kit::FactoryBound {
public:
    FakeNode(NodeId id, std::string name) : id_(id), name_(std::move(name)) {}

    [[nodiscard]] NodeId id() const noexcept override { return id_; }
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }
    void send(BufferPtr&&) override {
        check_factory("send");
        ++queued;
    }
    void send_shared(const SharedBuffer&) override {
        check_factory("send");
        ++queued;
    }
    [[nodiscard]] BufferPtr receive() override {
        check_factory("receive");
        return nullptr;
    }
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds) override {
        check_factory("receive");
        return nullptr;
    }
    bool flush(std::chrono::nanoseconds timeout) override {
        check_factory("flush");
        flush_timeouts.push_back(timeout);
        if (queued == 0) return true;
        // A peer that never takes the messages: the node waits out its timeout.
        std::this_thread::sleep_for(timeout);
        return false;
    }
    [[nodiscard]] NodeStats stats() const noexcept override {
        NodeStats s;
        s.queue_depth = queued;
        return s;
    }

    std::uint64_t queued = 0;
    std::vector<std::chrono::nanoseconds> flush_timeouts;

private:
    NodeId id_;
    std::string name_;
};

class FakeKitFactory;

// A group whose add() asks the factory for the node again, as auto's groups ask
// which technology made it.
class CallbackGroup final : public BasicGroup {
public:
    CallbackGroup(std::string name, FakeKitFactory& factory) : BasicGroup(std::move(name)), factory_(factory) {}
    void add(NodePtr node) override;

private:
    FakeKitFactory& factory_;
};

class FakeKitFactory final : public kit::FactoryBase {
public:
    FakeKitFactory(const config::Configuration& configuration, NodeId self, bool callback_groups = false)
        : FactoryBase(configuration, self), callback_groups_(callback_groups) {}
    ~FakeKitFactory() override { forget(); }

    [[nodiscard]] std::string_view technology() const noexcept override { return "fake-kit"; }
    BufferPtr create_buffer(std::size_t size) override { return std::make_unique<HeapBuffer>(size); }

    bool close_now(std::chrono::nanoseconds timeout) { return close(timeout); }
    std::shared_ptr<FakeNode> fake(NodeId id) { return std::dynamic_pointer_cast<FakeNode>(create_node(id)); }

    std::atomic<int> nodes_made{0};
    std::atomic<int> groups_made{0};

protected:
    NodePtr make_node(NodeId id) override {
        ++nodes_made;
        return std::make_shared<FakeNode>(id, configuration().node(id).name);
    }
    std::unique_ptr<BasicGroup> make_group(std::string name) override {
        ++groups_made;
        if (callback_groups_) return std::make_unique<CallbackGroup>(std::move(name), *this);
        return std::make_unique<kit::GroupBase>(std::move(name));
    }

private:
    bool callback_groups_;
};

void CallbackGroup::add(NodePtr node) {
    // The same node object comes back: the factory's lock is not held while a group
    // is filled.
    auto again = factory_.create_node(node->id());
    if (again != node) throw Error("create_node gave another object during add()");
    BasicGroup::add(std::move(node));
}

config::Configuration nodes(int n) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return make_configuration("fake-kit", unique_partition(info->name()), n, [](config::Configuration& c) {
        c.groups["ring"] = {3, 1, 4, 2};
        c.groups["others"] = {4, 2};
    });
}

TEST(FactoryBase, CreateNodeMakesOneNodePerPeerAndReturnsTheSameObjectAfterwards) {
    FakeKitFactory factory(nodes(3), 1);
    auto two = factory.create_node(2);
    auto three = factory.create_node(3);
    EXPECT_EQ(factory.create_node(2), two);
    EXPECT_EQ(factory.create_node(3), three);
    EXPECT_NE(two, three);
    EXPECT_EQ(two->id(), 2u);
    EXPECT_EQ(two->name(), "node-2");
    EXPECT_EQ(factory.nodes_made, 2);
}

TEST(FactoryBase, CreateNodeForSelfIsAUsageError) {
    FakeKitFactory factory(nodes(2), 2);
    try {
        (void)factory.create_node(2);
        FAIL() << "create_node(self) did not throw";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("node 2 is this process itself"), std::string::npos) << e.what();
    }
    EXPECT_EQ(factory.nodes_made, 0);
}

TEST(FactoryBase, AnUnknownIdIsAConfigErrorWithTheWordingOfConfigurationNode) {
    const auto configuration = nodes(2);
    FakeKitFactory factory(configuration, 1);
    std::string expected;
    try {
        (void)configuration.node(9);
    } catch (const ConfigError& e) {
        expected = e.what();
    }
    ASSERT_NE(expected.find("node id 9 is not in the nodes file (ids: 1, 2)"), std::string::npos) << expected;
    try {
        (void)factory.create_node(9);
        FAIL() << "create_node(9) did not throw";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), expected);
    }
    EXPECT_EQ(factory.nodes_made, 0);
}

TEST(FactoryBase, AnOwnIdThatIsNotInTheNodesFileIsAConfigError) {
    EXPECT_THROW(FakeKitFactory(nodes(2), 7), ConfigError);
}

TEST(FactoryBase, AStaticGroupIsMadeOnceWithItsMembersInFileOrderAndSelfListed) {
    FakeKitFactory factory(nodes(4), 1);
    auto ring = factory.create_group("ring");
    EXPECT_EQ(factory.create_group("ring"), ring);
    EXPECT_EQ(factory.groups_made, 1);
    EXPECT_EQ(ring->name(), "ring");
    EXPECT_EQ(ring->members(), (std::vector<NodeId>{3, 1, 4, 2}));
    // Its peers are the factory's nodes, not copies.
    EXPECT_EQ(factory.nodes_made, 3);
    auto four = factory.fake(4);
    auto b = factory.create_buffer(8);
    ring->send(std::move(b));
    EXPECT_EQ(four->queued, 1u);
    EXPECT_THROW((void)factory.create_group("nobody"), ConfigError);
}

TEST(FactoryBase, FlushGivesEveryNodeWhatIsLeftOfOneDeadline) {
    FakeKitFactory factory(nodes(3), 1);
    auto two = factory.fake(2);
    auto three = factory.fake(3);
    two->queued = 1; // waits out all it is given
    const auto timeout = std::chrono::nanoseconds(100ms);
    EXPECT_FALSE(factory.flush(timeout));
    ASSERT_EQ(two->flush_timeouts.size(), 1u);
    ASSERT_EQ(three->flush_timeouts.size(), 1u);
    EXPECT_LE(two->flush_timeouts[0], timeout);
    EXPECT_GT(two->flush_timeouts[0], timeout / 2);
    // Node 2 used the whole deadline: node 3 is left nothing, not a fresh timeout.
    EXPECT_EQ(three->flush_timeouts[0], std::chrono::nanoseconds::zero());

    two->queued = 0;
    EXPECT_TRUE(factory.flush(timeout));
}

TEST(FactoryBase, CloseReportsEachNodeWithAQueueLeftAndReturnsFalse) {
    FakeKitFactory factory(nodes(4), 1);
    factory.fake(2)->queued = 3;
    (void)factory.fake(3); // empty: not reported
    factory.fake(4)->queued = 1;
    ::testing::internal::CaptureStderr();
    const bool all = factory.close_now(20ms);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(all);
    EXPECT_NE(err.find("msgpass fake-kit node 1: 3 messages to node 2 (node-2) were never handed over: the node did "
                       "not take them within 20 ms\n"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("1 messages to node 4 (node-4)"), std::string::npos) << err;
    EXPECT_EQ(err.find("node 3"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
    // The factory forgot its nodes: a new one is made on the next call.
    (void)factory.create_node(3);
    EXPECT_EQ(factory.nodes_made, 4);
}

TEST(FactoryBase, CloseWithEveryQueueEmptyIsSilentAndTrue) {
    FakeKitFactory factory(nodes(3), 1);
    (void)factory.fake(2);
    (void)factory.fake(3);
    ::testing::internal::CaptureStderr();
    const bool all = factory.close_now(20ms);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_TRUE(all);
}

TEST(FactoryBase, AGroupWhoseAddCallsCreateNodeDoesNotDeadlock) {
    FakeKitFactory factory(nodes(4), 2, /*callback_groups=*/true);
    auto made = std::async(std::launch::async, [&] { return factory.create_group("ring"); });
    if (made.wait_for(10s) != std::future_status::ready) {
        // A deadlocked thread cannot be joined: end the process with the reason.
        std::cerr << "create_group(\"ring\") did not return within 10 s: add() calling create_node deadlocked\n";
        std::abort();
    }
    auto ring = made.get();
    EXPECT_EQ(ring->members(), (std::vector<NodeId>{3, 1, 4, 2}));
    EXPECT_EQ(factory.nodes_made, 3);
}

// kit/lifetime.hpp: after the factory is destroyed, its nodes and groups refuse
// every call that moves messages with a UsageError naming the call and the object,
// answer id(), name(), stats() and members(), and may be dropped.
TEST(FactoryBase, WhatItMadeRefusesCallsWithAUsageErrorOnceItIsDestroyed) {
    auto factory = std::make_unique<FakeKitFactory>(nodes(4), 1);
    auto node = factory->fake(2);
    auto group = factory->create_group("others");
    auto dynamic = factory->create_group();
    dynamic->add(factory->create_node(3));
    node->send(std::make_unique<HeapBuffer>(4)); // works while the factory lives
    EXPECT_EQ(group->receive(), nullptr);
    EXPECT_EQ(dynamic->receive(1ms), nullptr);
    factory.reset();

    const auto expect_refused = [](const std::function<void()>& call, const std::string& expected) {
        try {
            call();
            ADD_FAILURE() << "no UsageError; expected: " << expected;
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        }
    };
    const std::string after = " after its factory was destroyed";
    BufferPtr kept = std::make_unique<HeapBuffer>(8);
    expect_refused([&] { node->send(std::move(kept)); }, "send on node 2 (node-2)" + after);
    EXPECT_NE(kept, nullptr) << "a refused send took the buffer";
    expect_refused([&] { (void)node->receive(); }, "receive on node 2 (node-2)" + after);
    expect_refused([&] { (void)node->flush(std::chrono::nanoseconds::max()); }, "flush on node 2 (node-2)" + after);
    expect_refused([&] { group->send(std::make_unique<HeapBuffer>(8)); }, "send on group 'others'" + after);
    expect_refused([&] { (void)group->receive(); }, "receive on group 'others'" + after);
    expect_refused([&] { (void)group->receive(std::chrono::nanoseconds::max()); }, "receive on group 'others'" + after);
    expect_refused([&] { dynamic->add(node); }, "add on a dynamic group" + after);
    EXPECT_EQ(node->queued, 1u) << "a refused call reached the node";
    EXPECT_EQ(node->id(), 2u);
    EXPECT_EQ(node->stats().queue_depth, 1u);
    EXPECT_EQ(group->members(), (std::vector<NodeId>{4, 2}));
    EXPECT_EQ(dynamic->members(), (std::vector<NodeId>{3}));
}

// A node that another factory made and handed on (auto's parts) follows the factory
// that handed it out last: the part's end does not end it. A node never bound (made
// outside a factory) checks nothing. The token is NodeFactory::lifetime(), which
// expires exactly when its factory is destroyed.
TEST(FactoryBase, ANodeBoundAgainFollowsTheLastFactoryThatBoundIt) {
    auto part = std::make_unique<FakeKitFactory>(nodes(4), 1);
    auto outer = std::make_unique<FakeKitFactory>(nodes(4), 1);
    FakeNode node(2, "node-2");
    EXPECT_NO_THROW(node.send(std::make_unique<HeapBuffer>(1)));
    node.bind(part->lifetime());
    node.bind(outer->lifetime());
    const auto part_life = part->lifetime();
    EXPECT_FALSE(part_life.expired());
    part.reset();
    EXPECT_TRUE(part_life.expired());
    EXPECT_NO_THROW(node.send(std::make_unique<HeapBuffer>(1)));
    outer.reset();
    EXPECT_THROW(node.send(std::make_unique<HeapBuffer>(1)), UsageError);
}

// kit/errors.hpp: the object in every shared wording; a node without a name is its id.
TEST(KitErrors, NodesAndGroupsAreDescribedTheSameWayInEveryMessage) {
    FakeNode named(2, "node-2"), unnamed(3, "");
    EXPECT_EQ(kit::describe(named), "node 2 (node-2)");
    EXPECT_EQ(kit::describe(unnamed), "node 3");
    EXPECT_EQ(kit::describe(BasicGroup("all")), "group 'all'");
    EXPECT_EQ(kit::describe(BasicGroup()), "a dynamic group");
    try {
        kit::throw_send_queue_full(unnamed, 4);
    } catch (const SendQueueFull& e) {
        EXPECT_STREQ(e.what(), "send on node 3: its send queue holds send_queue_limit (4) messages");
    }
    try {
        BasicGroup("all").send(nullptr);
        ADD_FAILURE() << "a null buffer was sent";
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(), "send on group 'all': the buffer is null");
    }
}

} // namespace
} // namespace msgpass::test
