// What an sci node holds in /dev/shm follows the peers it talks to, not the nodes of
// the file (issue 31, item 2): partitions of 4, 64 and 256 nodes in one process, loaded
// from files that set no size, where every node talks to its two neighbours on a ring
// (a small and a large message each way). Objects, apparent and used bytes per node
// are counted in /dev/shm by the partition's name, the sci segments and the process's
// statistics page (kit/stats_page.hpp) alike; the node of the 256-node file holds at
// most twice what the node of the 4-node file holds, in all and in its statistics page
// (whose records took a page per 11 nodes of the file before they followed the peers).
#include <msgpass/kit/stats_page.hpp>
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

    void add(const std::string& path) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) return;
        objects += 1;
        apparent += static_cast<double>(st.st_size);
        used += static_cast<double>(st.st_blocks) * 512;
    }
    void per_node(int n) {
        objects /= n;
        apparent /= n;
        used /= n;
    }
};

// All of a node's, and of that its statistics page.
struct Held {
    Footprint all, stats;
};

// n nodes, each talking to its neighbours on the ring (two peers).
Held footprint(int n, int max_outst_buffers) {
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
    const auto pages = kit::find_stats_pages(kit::stats_user(), segments.partition(), error);
    EXPECT_FALSE(error) << error.message();
    EXPECT_EQ(pages.size(), static_cast<std::size_t>(n)) << "a statistics page per node (MSGPASS_STATS=0?)";
    Held h;
    for (const auto& name : names)
        h.all.add(sci::shm_path(name));
    for (const auto& page : pages) {
        h.all.add("/dev/shm" + page);
        h.stats.add("/dev/shm" + page);
    }
    h.all.per_node(n);
    h.stats.per_node(n);
    std::printf("sci footprint: %3d nodes, max_outst_buffers %2d, 2 peers each: %.1f objects, %.0f KiB apparent, "
                "%.0f KiB used per node, of which the statistics page %.1f KiB used\n",
                n, max_outst_buffers, h.all.objects, h.all.apparent / 1024, h.all.used / 1024, h.stats.used / 1024);
    return h;
}

void expect_follows_peers(int max_outst_buffers) {
    register_builtin_technologies();
    const Held small = footprint(4, max_outst_buffers);
    (void)footprint(64, max_outst_buffers);
    const Held large = footprint(256, max_outst_buffers);
    ASSERT_GT(small.all.objects, 0);
    EXPECT_LE(large.all.objects, 2 * small.all.objects);
    EXPECT_LE(large.all.used, 2 * small.all.used);
    EXPECT_LE(large.all.apparent, 2 * small.all.apparent);
    ASSERT_GT(small.stats.used, 0);
    EXPECT_LE(large.stats.objects, small.stats.objects);
    EXPECT_LE(large.stats.used, 2 * small.stats.used);
}

TEST(SciFootprint, ANodeOfTwoHundredFiftySixThatTalksToTwoHoldsWhatANodeOfFourDoes) {
    expect_follows_peers(1);
}

// The DAQ example's max_outst_buffers: 255 partners would need 4080 granted slots.
TEST(SciFootprint, ANodeOfTwoHundredFiftySixThatTalksToTwoHoldsWhatANodeOfFourDoesWithFifteenOutstanding) {
    expect_follows_peers(15);
}

} // namespace
} // namespace msgpass::test
