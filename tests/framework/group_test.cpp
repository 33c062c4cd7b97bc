// Unit tests of msgpass/group.hpp: BasicGroup over a fake in-memory technology
// (membership, send to every member, failures of some members, fair receive,
// blocking receive) and the ring helpers of Group.
#include <msgpass/group.hpp>

#include <msgpass/wait.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace msgpass {
namespace {

using namespace std::chrono_literals;

// A node of a fake technology: sends are recorded for the test to inspect, receives
// pop from an inbox the test fills, and a configured failure makes every send throw.
// The error messages deliberately do not name the node, so that tests can check
// that the group names it.
class FakeNode final : public Node {
public:
    enum class Failure { none, peer_lost, queue_full };

    explicit FakeNode(NodeId id) : id_(id), name_("fake-" + std::to_string(id)) {}

    [[nodiscard]] NodeId id() const noexcept override { return id_; }
    [[nodiscard]] const std::string& name() const noexcept override { return name_; }

    void send(BufferPtr&& buffer) override {
        throw_configured_failure();
        record(SharedBuffer(std::move(buffer)));
    }
    void send_shared(const SharedBuffer& buffer) override {
        throw_configured_failure();
        record(buffer);
    }

    [[nodiscard]] BufferPtr receive() override {
        std::lock_guard lock(mutex_);
        ++receive_calls_;
        if (inbox_.empty()) return nullptr;
        auto b = std::move(inbox_.front());
        inbox_.pop_front();
        b->set_source(id_);
        counters_.received(b->size());
        return b;
    }
    [[nodiscard]] BufferPtr receive(std::chrono::nanoseconds timeout) override {
        return wait_for([this] { return receive(); }, timeout, nullptr);
    }
    bool flush(std::chrono::nanoseconds) override { return true; }
    [[nodiscard]] NodeStats stats() const noexcept override { return counters_.snapshot(); }

    // Test side.
    void deliver(BufferPtr b) {
        std::lock_guard lock(mutex_);
        inbox_.push_back(std::move(b));
    }
    void fail_with(Failure f) {
        std::lock_guard lock(mutex_);
        failure_ = f;
    }
    [[nodiscard]] std::vector<SharedBuffer> sent() const {
        std::lock_guard lock(mutex_);
        return sent_;
    }
    [[nodiscard]] std::size_t receive_calls() const {
        std::lock_guard lock(mutex_);
        return receive_calls_;
    }

private:
    void throw_configured_failure() {
        std::lock_guard lock(mutex_);
        if (failure_ == Failure::peer_lost) {
            counters_.error();
            throw PeerLost(id_, "peer process died", 2);
        }
        if (failure_ == Failure::queue_full) {
            counters_.error();
            throw SendQueueFull("send queue is full");
        }
    }
    void record(SharedBuffer b) {
        std::lock_guard lock(mutex_);
        counters_.sent(b->size());
        sent_.push_back(std::move(b));
    }

    const NodeId id_;
    const std::string name_;
    mutable std::mutex mutex_;
    std::deque<BufferPtr> inbox_;
    std::vector<SharedBuffer> sent_;
    Failure failure_ = Failure::none;
    std::size_t receive_calls_ = 0;
    StatsCounters counters_;
};

using FakePtr = std::shared_ptr<FakeNode>;

BufferPtr message(const std::string& text) {
    auto b = std::make_unique<HeapBuffer>(text.size());
    std::memcpy(b->data(), text.data(), text.size());
    return b;
}

std::string text_of(const Buffer& b) {
    std::string out(b.size(), '\0');
    b.copy_to(std::as_writable_bytes(std::span(out)));
    return out;
}

// A group of fake nodes with these ids, in this order.
struct Fixture {
    explicit Fixture(std::initializer_list<NodeId> ids, Doorbell* bell = nullptr, WaitPolicy policy = {})
        : group("test", bell, policy) {
        for (NodeId id : ids) {
            nodes.push_back(std::make_shared<FakeNode>(id));
            group.add(nodes.back());
        }
    }
    BasicGroup group;
    std::vector<FakePtr> nodes;
};

TEST(BasicGroup, MembersAreInInsertionOrder) {
    Fixture f{3, 1, 2};
    EXPECT_EQ(f.group.members(), (std::vector<NodeId>{3, 1, 2}));
    EXPECT_EQ(f.group.size(), 3u);
    EXPECT_EQ(f.group.name(), "test");
}

// The header: "members() shows it, send and receive skip it".
TEST(BasicGroup, AddSelfListsTheOwnIdAmongTheMembersInOrder) {
    BasicGroup group("ring");
    auto two = std::make_shared<FakeNode>(2);
    auto three = std::make_shared<FakeNode>(3);
    group.add(two);
    group.add_self(1);
    group.add(three);
    EXPECT_EQ(group.members(), (std::vector<NodeId>{2, 1, 3}));
    EXPECT_EQ(group.size(), 3u);
    EXPECT_TRUE(group.contains(1));
    group.add_self(1);
    group.add(std::make_shared<FakeNode>(1)); // the own id is taken: no node is added for it
    EXPECT_EQ(group.members(), (std::vector<NodeId>{2, 1, 3}));
    EXPECT_EQ(group.next_after(2), 1u);
    EXPECT_EQ(group.next_after(1), 3u);
}

TEST(BasicGroup, SendAndReceiveSkipTheOwnId) {
    BasicGroup group("ring");
    auto two = std::make_shared<FakeNode>(2);
    group.add_self(1);
    group.add(two);
    group.send(message("m"));
    EXPECT_EQ(two->sent().size(), 1u);
    EXPECT_EQ(group.receive(), nullptr);
    two->deliver(message("x"));
    auto b = group.receive();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->source(), 2u);
}

TEST(BasicGroup, AddingAMemberTwiceIsANoOp) {
    Fixture f{1, 2};
    f.group.add(f.nodes[0]);
    f.group.add(std::make_shared<FakeNode>(2)); // another object with a member's id
    EXPECT_EQ(f.group.members(), (std::vector<NodeId>{1, 2}));
    f.group.send(message("once"));
    EXPECT_EQ(f.nodes[0]->sent().size(), 1u);
    EXPECT_EQ(f.nodes[1]->sent().size(), 1u);
}

TEST(BasicGroup, AddingANullNodeThrowsUsageError) {
    BasicGroup group;
    EXPECT_THROW(group.add(nullptr), UsageError);
    EXPECT_EQ(group.size(), 0u);
}

TEST(BasicGroup, RemoveReturnsFalseForANonMember) {
    Fixture f{1, 2};
    EXPECT_FALSE(f.group.remove(9));
    EXPECT_EQ(f.group.members(), (std::vector<NodeId>{1, 2}));
}

TEST(BasicGroup, RemovedMemberNoLongerGetsOrDeliversMessages) {
    Fixture f{1, 2, 3};
    EXPECT_TRUE(f.group.remove(2));
    EXPECT_FALSE(f.group.remove(2));
    EXPECT_EQ(f.group.members(), (std::vector<NodeId>{1, 3}));
    f.group.send(message("m"));
    EXPECT_TRUE(f.nodes[1]->sent().empty());
    f.nodes[1]->deliver(message("from the removed node"));
    EXPECT_EQ(f.group.receive(), nullptr);
}

TEST(BasicGroup, SendReachesEveryMemberOnceWithTheSameSharedBuffer) {
    Fixture f{1, 2, 3};
    auto b = message("to all");
    f.group.send(std::move(b));
    EXPECT_EQ(b, nullptr); // the layer owns it now
    const Buffer* shared = nullptr;
    for (const auto& node : f.nodes) {
        auto sent = node->sent();
        ASSERT_EQ(sent.size(), 1u) << "node " << node->id();
        if (shared == nullptr) shared = sent[0].get();
        EXPECT_EQ(sent[0].get(), shared) << "node " << node->id() << " got a copy";
        EXPECT_EQ(text_of(*sent[0]), "to all");
        EXPECT_EQ(node->stats().messages_sent, 1u);
        EXPECT_EQ(node->stats().bytes_sent, 6u);
    }
}

TEST(BasicGroup, SendOfANullBufferThrowsUsageError) {
    Fixture f{1};
    EXPECT_THROW(f.group.send(nullptr), UsageError);
    EXPECT_TRUE(f.nodes[0]->sent().empty());
}

TEST(BasicGroup, SendToAnEmptyGroupSucceeds) {
    BasicGroup group;
    auto b = message("nobody");
    EXPECT_NO_THROW(group.send(std::move(b)));
}

TEST(BasicGroup, AFailingMemberDoesNotStopTheOthersAndTheSendThrowsAfterwards) {
    Fixture f{11, 12, 13};
    f.nodes[1]->fail_with(FakeNode::Failure::queue_full);
    auto b = message("m");
    try {
        f.group.send(std::move(b));
        ADD_FAILURE() << "send did not throw";
    } catch (const PeerLost& e) {
        ADD_FAILURE() << "a full queue is not a lost peer: " << e.what();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("send queue is full"), std::string::npos) << e.what();
    }
    EXPECT_EQ(b, nullptr); // owned by the layer even on error
    EXPECT_EQ(f.nodes[0]->sent().size(), 1u);
    EXPECT_TRUE(f.nodes[1]->sent().empty());
    EXPECT_EQ(f.nodes[2]->sent().size(), 1u);
}

TEST(BasicGroup, SendThrowsPeerLostWhenEveryFailureIsALoss) {
    Fixture f{21, 22, 23};
    f.nodes[0]->fail_with(FakeNode::Failure::peer_lost);
    try {
        f.group.send(message("m"));
        ADD_FAILURE() << "send did not throw";
    } catch (const PeerLost& e) {
        EXPECT_EQ(e.peer(), 21u);
    }
    EXPECT_EQ(f.nodes[1]->sent().size(), 1u);
    EXPECT_EQ(f.nodes[2]->sent().size(), 1u);

    f.nodes[2]->fail_with(FakeNode::Failure::peer_lost);
    try {
        f.group.send(message("m"));
        ADD_FAILURE() << "send did not throw";
    } catch (const PeerLost& e) {
        EXPECT_TRUE(e.peer() == 21u || e.peer() == 23u) << e.peer();
    }
    EXPECT_EQ(f.nodes[1]->sent().size(), 2u);
}

TEST(BasicGroup, SendThrowsAPlainErrorWhenLossesAndOtherFailuresMix) {
    Fixture f{31, 32, 33};
    f.nodes[0]->fail_with(FakeNode::Failure::peer_lost);
    f.nodes[2]->fail_with(FakeNode::Failure::queue_full);
    try {
        f.group.send(message("m"));
        ADD_FAILURE() << "send did not throw";
    } catch (const PeerLost& e) {
        ADD_FAILURE() << "not every failure is a loss: " << e.what();
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("peer process died"), std::string::npos) << what;
        EXPECT_NE(what.find("send queue is full"), std::string::npos) << what;
    }
    EXPECT_EQ(f.nodes[1]->sent().size(), 1u);
}

// group.hpp: "an Error naming each failing member and its reason is thrown".
TEST(BasicGroup, SendErrorNamesEachFailingMember) {
    Fixture f{41, 42, 43};
    f.nodes[0]->fail_with(FakeNode::Failure::queue_full);
    f.nodes[2]->fail_with(FakeNode::Failure::peer_lost);
    try {
        f.group.send(message("m"));
        ADD_FAILURE() << "send did not throw";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("41"), std::string::npos) << what;
        EXPECT_NE(what.find("43"), std::string::npos) << what;
        EXPECT_EQ(what.find("42"), std::string::npos) << what;
    }
}

TEST(BasicGroup, ReceiveReturnsNullWhenNoMemberHasAMessage) {
    Fixture f{1, 2, 3};
    EXPECT_EQ(f.group.receive(), nullptr);
    for (const auto& node : f.nodes)
        EXPECT_EQ(node->receive_calls(), 1u) << "node " << node->id();
    BasicGroup empty;
    EXPECT_EQ(empty.receive(), nullptr);
}

TEST(BasicGroup, ReceiveTakesAMessageOfAnyMemberAndNamesTheSource) {
    Fixture f{1, 2, 3};
    f.nodes[2]->deliver(message("from three"));
    auto b = f.group.receive();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->source(), 3u);
    EXPECT_EQ(text_of(*b), "from three");
    EXPECT_EQ(f.group.receive(), nullptr);
}

// Seed, section 8: "A non-blocking receive() is converted into a non-blocking
// receive() for each of the nodes; to ensure fairness the loop starts every time
// from a different node."
TEST(BasicGroup, ReceiveRotatesStartNodeForFairness) {
    Fixture f{1, 2, 3};
    for (const auto& node : f.nodes)
        for (int i = 0; i < 3; ++i)
            node->deliver(message("m"));
    std::vector<NodeId> sources;
    for (int i = 0; i < 9; ++i) {
        auto b = f.group.receive();
        ASSERT_NE(b, nullptr) << "receive " << i;
        sources.push_back(b->source());
    }
    EXPECT_EQ(sources, (std::vector<NodeId>{1, 2, 3, 1, 2, 3, 1, 2, 3}));
}

TEST(BasicGroup, ABusyMemberCannotStarveTheOthers) {
    Fixture f{1, 2};
    for (int i = 0; i < 10; ++i)
        f.nodes[0]->deliver(message("busy"));
    f.nodes[1]->deliver(message("quiet"));
    auto first = f.group.receive();
    auto second = f.group.receive();
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(first->source(), 1u);
    EXPECT_EQ(second->source(), 2u);
}

TEST(BasicGroup, BlockingReceiveReturnsNullAfterTheTimeoutWhenEmpty) {
    Fixture f{1, 2};
    const auto timeout = 30ms;
    const auto start = std::chrono::steady_clock::now();
    auto b = f.group.receive(timeout);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(b, nullptr);
    EXPECT_GE(elapsed, timeout);
}

TEST(BasicGroup, BlockingReceiveReturnsAPresentMessageAtOnce) {
    Fixture f{1, 2};
    f.nodes[1]->deliver(message("ready"));
    auto b = f.group.receive(10s);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->source(), 2u);
    // Found by the first poll: each member was asked at most once.
    EXPECT_LE(f.nodes[0]->receive_calls(), 1u);
    EXPECT_EQ(f.nodes[1]->receive_calls(), 1u);
}

// The group's receive sleeps on the doorbell it was given, with a policy that never
// re-polls on its own before the timeout: a message delivered while it sleeps is
// found only because the ring wakes it (a group that ignored the bell never shows a
// sleeper, and a ring that does nothing leaves it asleep until the timeout).
TEST(BasicGroup, BlockingReceiveWakesWhenAMessageArrivesFromAnotherThread) {
    Doorbell bell;
    const WaitPolicy policy{.spin = std::chrono::microseconds(0),
                            .yield = std::chrono::microseconds(0),
                            .max_sleep = std::chrono::microseconds(std::chrono::hours(1))};
    Fixture f({1, 2}, &bell, policy);
    const auto timeout = 5s;
    std::atomic<bool> done{false};
    std::atomic<bool> slept{false};
    std::thread sender([&] {
        // Deliver once the receiver sleeps (or has finished), then ring as a technology does.
        while (bell.sleepers.load() == 0 && !done.load())
            std::this_thread::yield();
        slept = bell.sleepers.load() != 0;
        f.nodes[1]->deliver(message("late"));
        bell.ring();
    });
    const auto start = std::chrono::steady_clock::now();
    auto b = f.group.receive(timeout);
    const auto waited = std::chrono::steady_clock::now() - start;
    done = true;
    sender.join();
    EXPECT_TRUE(slept) << "the group's receive never slept on its doorbell";
    ASSERT_NE(b, nullptr) << "the ring did not wake the group's receive";
    EXPECT_LT(waited, timeout) << "the receive returned only at its timeout";
    EXPECT_EQ(text_of(*b), "late");
    EXPECT_EQ(b->source(), 2u);
    EXPECT_EQ(bell.sequence.load(), 1u);
}

TEST(Group, RingHelpersWrapAround) {
    Fixture f{5, 7, 9};
    EXPECT_EQ(f.group.first(), 5u);
    EXPECT_EQ(f.group.next_after(5), 7u);
    EXPECT_EQ(f.group.next_after(7), 9u);
    EXPECT_EQ(f.group.next_after(9), 5u);
    EXPECT_EQ(f.group.previous_before(5), 9u);
    EXPECT_EQ(f.group.previous_before(9), 7u);
    EXPECT_TRUE(f.group.contains(7));
    EXPECT_FALSE(f.group.contains(6));
}

TEST(Group, RingOfOneMemberLeadsBackToIt) {
    Fixture f{4};
    EXPECT_EQ(f.group.next_after(4), 4u);
    EXPECT_EQ(f.group.previous_before(4), 4u);
}

TEST(Group, RingHelpersThrowUsageErrorForANonMember) {
    Fixture f{5, 7, 9};
    EXPECT_THROW((void)f.group.next_after(6), UsageError);
    EXPECT_THROW((void)f.group.previous_before(6), UsageError);
}

TEST(Group, RingHelpersThrowUsageErrorForAnEmptyGroup) {
    BasicGroup group("empty");
    EXPECT_THROW((void)group.first(), UsageError);
    EXPECT_THROW((void)group.next_after(1), UsageError);
    EXPECT_THROW((void)group.previous_before(1), UsageError);
    EXPECT_FALSE(group.contains(1));
}

} // namespace
} // namespace msgpass
