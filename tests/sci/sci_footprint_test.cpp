// What an sci node holds in /dev/shm follows the peers it talks to, not the nodes of
// the file (issue 31, item 2): partitions of 4, 16 and 64 nodes in one process, loaded
// from files that set no size, where every node talks to its two neighbours on a ring
// (a small and a large message each way). Objects, apparent and used bytes per node
// are counted in /dev/shm by the partition's name; the node of the 64-node file holds
// at most twice what the node of the 4-node file holds.
#include <msgpass/msgpass.hpp>
#include <msgpass/sci/naming.hpp>

#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

struct Footprint {
    double objects = 0;  // files in /dev/shm per node
    double apparent = 0; // their sizes (st_size), bytes per node
    double used = 0;     // their pages (st_blocks), bytes per node
};

// n nodes, each talking to its neighbours on the ring (two peers).
Footprint footprint(int n, int max_outst_buffers) {
    const SegmentCleanup segments(unique_partition("footprint" + std::to_string(n)));
    std::string nodes = "nodes:\n";
    for (int id = 1; id <= n; ++id)
        nodes += "  - {id: " + std::to_string(id) + "}\n";
    const auto c =
        config::load_text("partition: " + segments.partition() + "\ntechnology: sci\nsci:\n  max_outst_buffers: " +
                              std::to_string(max_outst_buffers) + "\n",
                          nodes);
    std::vector<std::unique_ptr<NodeFactory>> factories;
    for (int id = 1; id <= n; ++id)
        factories.push_back(NodeFactory::create(c, static_cast<NodeId>(id)));
    const auto left = [n](int i) { return (i + n - 1) % n; }; // indices 0..n-1, ids 1..n
    const auto right = [n](int i) { return (i + 1) % n; };
    std::vector<std::vector<NodePtr>> peers(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        for (int j : {left(i), right(i)})
            peers[static_cast<std::size_t>(i)].push_back(
                factories[static_cast<std::size_t>(i)]->create_node(static_cast<NodeId>(j + 1)));
    }
    // A round of small messages, then one of large ones (through the large-message
    // regions): one message at a time per pair, as max_outst_buffers 1 allows.
    for (const std::size_t size : {std::size_t{200}, std::size_t{100000}}) {
        for (int i = 0; i < n; ++i) {
            for (const auto& node : peers[static_cast<std::size_t>(i)])
                node->send(
                    make_message(*factories[static_cast<std::size_t>(i)], size, static_cast<std::uint32_t>(i), size));
        }
        for (int i = 0; i < n; ++i) {
            for (const auto& node : peers[static_cast<std::size_t>(i)]) {
                auto m = node->receive(10s);
                EXPECT_NE(m, nullptr) << "node " << i + 1 << " from " << node->id();
                if (m == nullptr) return {};
                EXPECT_EQ(check_payload(*m).seq, size);
            }
        }
    }
    std::error_code error;
    const auto names = sci::partition_segments(sci::segment_user(), segments.partition(), error);
    EXPECT_FALSE(error) << error.message();
    Footprint f;
    for (const auto& name : names) {
        struct stat st {};
        if (::stat(sci::shm_path(name).c_str(), &st) != 0) continue;
        f.objects += 1;
        f.apparent += static_cast<double>(st.st_size);
        f.used += static_cast<double>(st.st_blocks) * 512;
    }
    f.objects /= n;
    f.apparent /= n;
    f.used /= n;
    std::printf("sci footprint: %2d nodes, max_outst_buffers %2d, 2 peers each: %.1f objects, %.0f KiB apparent, "
                "%.0f KiB used per node\n",
                n, max_outst_buffers, f.objects, f.apparent / 1024, f.used / 1024);
    return f;
}

void expect_follows_peers(int max_outst_buffers) {
    register_builtin_technologies();
    const Footprint small = footprint(4, max_outst_buffers);
    (void)footprint(16, max_outst_buffers);
    const Footprint large = footprint(64, max_outst_buffers);
    ASSERT_GT(small.objects, 0);
    EXPECT_LE(large.objects, 2 * small.objects);
    EXPECT_LE(large.used, 2 * small.used);
    EXPECT_LE(large.apparent, 2 * small.apparent);
}

TEST(SciFootprint, ANodeOfSixtyFourThatTalksToTwoHoldsWhatANodeOfFourDoes) {
    expect_follows_peers(1);
}

// The DAQ example's max_outst_buffers: 63 partners would need 1008 granted slots.
TEST(SciFootprint, ANodeOfSixtyFourThatTalksToTwoHoldsWhatANodeOfFourDoesWithFifteenOutstanding) {
    expect_follows_peers(15);
}

} // namespace
} // namespace msgpass::test
