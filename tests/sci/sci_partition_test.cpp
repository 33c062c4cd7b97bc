// A partition wider than the seed's defaults serve (an 8KiB header area holds 64
// nodes, 127 receive slots serve 127 peers): 80 sci nodes in one process, loaded from
// files that set none of the sizes, start and every one of them reaches node 1.
#include <msgpass/msgpass.hpp>
#include <msgpass/sci/options.hpp>

#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

TEST(SciWidePartition, EightyNodesFromFilesWithoutSizesStartAndEachReachesNodeOne) {
    register_builtin_technologies();
    constexpr int n = 80;
    const SegmentCleanup segments(unique_partition("wide"));
    std::string nodes = "nodes:\n";
    for (int id = 1; id <= n; ++id)
        nodes += "  - {id: " + std::to_string(id) + "}\n";
    const auto c = config::load_text("partition: " + segments.partition() + "\ntechnology: sci\n", nodes);
    const auto& sci = c.section<sci::Options>();
    ASSERT_GE(sci.header_area_size, n * 128u);
    ASSERT_GE(sci.recv_buffer_no, n - 1u);

    std::vector<std::unique_ptr<NodeFactory>> factories;
    for (int id = 1; id <= n; ++id)
        factories.push_back(NodeFactory::create(c, static_cast<NodeId>(id)));
    auto& one = *factories.front();
    auto group = one.create_group();
    for (int id = 2; id <= n; ++id)
        group->add(one.create_node(static_cast<NodeId>(id)));
    // Every other node sends one message to node 1 (its header is the last ones of node
    // 1's header area for the high ids); node 1 receives them all through the group.
    std::vector<NodePtr> to_one;
    for (int id = 2; id <= n; ++id) {
        auto& f = *factories[static_cast<std::size_t>(id - 1)];
        to_one.push_back(f.create_node(1));
        to_one.back()->send(make_message(f, 200, static_cast<std::uint32_t>(id), 0));
    }
    std::set<std::uint32_t> senders;
    for (int i = 0; i < n - 1; ++i) {
        auto m = group->receive(10s);
        ASSERT_NE(m, nullptr) << "after " << senders.size() << " of " << n - 1 << " messages";
        EXPECT_TRUE(senders.insert(check_payload(*m).stream).second) << "twice from " << check_payload(*m).stream;
    }
    EXPECT_EQ(senders.size(), static_cast<std::size_t>(n - 1));
    EXPECT_EQ(*senders.begin(), 2u);
    EXPECT_EQ(*senders.rbegin(), static_cast<std::uint32_t>(n));
    // And back: node 1 to the last node.
    one.create_node(n)->send(make_message(one, 200, 1, 1));
    auto back = factories.back()->create_node(1)->receive(10s);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(check_payload(*back).stream, 1u);
}

} // namespace
} // namespace msgpass::test
