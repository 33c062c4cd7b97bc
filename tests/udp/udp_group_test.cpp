// The udp group's receive (ip/udp/src/group.cpp): it looks only at the members whose
// ready mark it took, so that its cost per message does not grow with the group, and
// keeps the seed's fairness among the members that have messages. A group of 32
// sources of which one, then four, send.
#include <msgpass/msgpass.hpp>

#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

constexpr auto patience = 30s; // a bound for waits that succeed in milliseconds
constexpr NodeId builder_id = 1;
constexpr std::size_t sources = 32;

class UdpGroupOf32 : public ::testing::Test {
protected:
    void SetUp() override {
        c_ = make_configuration("udp", unique_partition("udpgroup"), static_cast<int>(sources) + 1,
                                [](config::Configuration& c) { c.peer_timeout = 5s; });
        builder_ = NodeFactory::create(c_, builder_id);
        group_ = builder_->create_group();
        for (std::size_t s = 0; s < sources; ++s) {
            factories_.push_back(NodeFactory::create(c_, id_of(s)));
            to_builder_.push_back(factories_.back()->create_node(builder_id));
            group_->add(builder_->create_node(id_of(s)));
        }
        next_seq_.assign(sources, 0);
    }
    static NodeId id_of(std::size_t s) { return static_cast<NodeId>(builder_id + 1 + s); }
    void send(std::size_t s) { to_builder_[s]->send(make_message(*factories_[s], 64, id_of(s), sent_[s]++)); }

    config::Configuration c_;
    std::unique_ptr<NodeFactory> builder_;
    std::unique_ptr<DynamicGroup> group_;
    std::vector<std::unique_ptr<NodeFactory>> factories_;
    std::vector<NodePtr> to_builder_;
    std::vector<std::uint64_t> next_seq_;
    std::vector<std::uint64_t> sent_ = std::vector<std::uint64_t>(sources, 0);
};

TEST_F(UdpGroupOf32, OneSenderOfThirtyTwoHasEveryMessageTakenInOrder) {
    constexpr std::size_t sender = 17;
    constexpr std::uint64_t messages = 300;
    for (std::uint64_t i = 0; i < messages; ++i) {
        send(sender);
        if (i % 3 == 0) { // some alone, some in runs
            ASSERT_TRUE(to_builder_[sender]->flush(patience));
        }
        auto m = group_->receive(patience);
        ASSERT_NE(m, nullptr) << "message " << i;
        EXPECT_EQ(m->source(), id_of(sender));
        EXPECT_EQ(check_payload(*m).seq, i) << "message " << i << " out of order";
    }
    EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
}

TEST_F(UdpGroupOf32, TheStartRotatesAmongTheMembersWithMessages) {
    // Four senders spread over the group (first and last slots among them), each with
    // messages waiting (a flush on udp returns once the peer acknowledged them: they
    // are in the builder's inbox): while all four have some, each run of four receives
    // takes one message from each.
    const std::vector<std::size_t> senders{0, 9, 22, 31};
    constexpr std::uint64_t per_sender = 6;
    for (std::uint64_t i = 0; i < per_sender; ++i)
        for (const std::size_t s : senders)
            send(s);
    for (const std::size_t s : senders)
        ASSERT_TRUE(to_builder_[s]->flush(patience));
    std::vector<NodeId> order;
    std::string said;
    for (std::size_t i = 0; i < per_sender * senders.size(); ++i) {
        auto m = group_->receive(patience);
        ASSERT_NE(m, nullptr) << "receive " << i;
        const std::size_t s = m->source() - builder_id - 1;
        EXPECT_EQ(check_payload(*m).seq, next_seq_[s]++) << "from node " << m->source();
        order.push_back(m->source());
        said += std::to_string(m->source()) + " ";
    }
    for (std::size_t i = 0; i + senders.size() <= order.size(); i += senders.size()) {
        const std::set<NodeId> run(order.begin() + static_cast<std::ptrdiff_t>(i),
                                   order.begin() + static_cast<std::ptrdiff_t>(i + senders.size()));
        EXPECT_EQ(run.size(), senders.size()) << "receives " << i << ".." << i + senders.size() - 1
                                              << " did not take one message from each sender; order: " << said;
    }
    EXPECT_EQ(group_->receive(), nullptr) << "a message more than was sent";
}

} // namespace
} // namespace msgpass::test
