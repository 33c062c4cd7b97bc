// Tests of the configuration loader: the example files, defaults and their layering
// (default < top-level sci < node sci, file < --set), value syntax (sizes, durations,
// booleans), and that every kind of wrong input ends in one ConfigError listing each
// problem as "file:line:column: key.path: expected X, found Y" and never in a crash.
#include <msgpass/config.hpp>
#include <msgpass/config/comm_options.hpp>
#include <msgpass/config/log_options.hpp>

#include <msgpass/sci/options.hpp>
#include <msgpass/tcp/options.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <regex>
#include <unistd.h>

namespace msgpass::config {
namespace {

using SciOptions = sci::Options;

const std::string two_nodes = "nodes:\n  - {id: 1}\n  - {id: 2}\n";

// The what() of the ConfigError thrown by load_text, or "" when it loads.
std::string errors_of(const std::string& network, const std::string& nodes = two_nodes,
                      const std::vector<std::string>& overrides = {}) {
    try {
        (void)load_text(network, nodes, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start <= text.size() && !text.empty()) {
        const auto end = text.find('\n', start);
        lines.push_back(text.substr(start, end - start));
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return lines;
}

// A private directory removed at the end of the test.
class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "msgpass-config-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    [[nodiscard]] std::filesystem::path write(const std::string& name, const std::string& text) const {
        const auto file = path_ / name;
        std::ofstream(file) << text;
        return file;
    }
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

TEST(ConfigExamples, ExampleFilesLoadWithEveryDefault) {
    const std::filesystem::path examples = MSGPASS_CONFIG_EXAMPLES;
    const auto c = load(examples / "network.yaml", examples / "nodes.yaml");
    const SciOptions defaults;
    EXPECT_EQ(c.partition, "msgpass");
    EXPECT_EQ(c.technology, "sci");
    EXPECT_EQ(c.max_message_size, 64 * MiB);
    EXPECT_EQ(c.peer_timeout, std::chrono::milliseconds(1000));
    EXPECT_EQ(c.send_queue_limit, 65536u);
    EXPECT_EQ(c.section<SciOptions>().max_outst_buffers, defaults.max_outst_buffers);
    EXPECT_EQ(c.section<SciOptions>().recv_seg_id, defaults.recv_seg_id);
    EXPECT_EQ(c.section<SciOptions>().recv_seg_size, defaults.recv_seg_size);
    EXPECT_EQ(c.section<SciOptions>().header_area_size, defaults.header_area_size);
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_no, defaults.recv_buffer_no);
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_size, defaults.recv_buffer_size);
    EXPECT_EQ(c.section<SciOptions>().use_send_pool, defaults.use_send_pool);
    EXPECT_EQ(c.section<SciOptions>().send_buffer_no, defaults.send_buffer_no);
    EXPECT_EQ(c.section<SciOptions>().send_buffer_size, defaults.send_buffer_size);
    EXPECT_EQ(c.section<SciOptions>().inject_error_rate, defaults.inject_error_rate);
    EXPECT_EQ(c.section<SciOptions>().inject_error_seed, defaults.inject_error_seed);
    EXPECT_EQ(c.section<tcp::Options>().handshake_timeout, std::nullopt);
    EXPECT_EQ(c.section<tcp::Options>().ack_every, tcp::Options{}.ack_every);
    EXPECT_EQ(c.section<tcp::Options>().ack_bytes, tcp::Options{}.ack_bytes);

    ASSERT_EQ(c.nodes.size(), 7u);
    const std::vector<std::pair<NodeId, std::string>> expected = {
        {1, "ros-1"}, {2, "ros-2"}, {3, "ros-3"}, {4, "ros-4"}, {5, "evb"}, {10, "farm-1"}, {11, "farm-2"}};
    for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(c.nodes[i].id, expected[i].first);
        EXPECT_EQ(c.nodes[i].name, expected[i].second);
        EXPECT_EQ(c.nodes[i].host, "localhost");
        EXPECT_EQ(c.nodes[i].machine, "localhost");
        EXPECT_TRUE(c.nodes[i].command.empty());
    }
    EXPECT_EQ(c.node(1).port, 17001);
    EXPECT_EQ(c.node(11).port, 17011);
    EXPECT_EQ(c.section<SciOptions>(c.node(5)).recv_buffer_no, 255u);
    EXPECT_EQ(c.section<SciOptions>(c.node(5)).max_outst_buffers, 4u);
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).recv_buffer_no, 127u);
    ASSERT_NE(c.find_machine("localhost"), nullptr);
    EXPECT_EQ(c.find_machine("localhost")->section<sci::MachineOptions>().node_id, 4u);
    EXPECT_EQ(c.find_machine("elsewhere"), nullptr);
    EXPECT_EQ(c.groups.at("sources"), (std::vector<NodeId>{1, 2, 3, 4}));
    EXPECT_EQ(c.groups.at("farm"), (std::vector<NodeId>{10, 11}));
    EXPECT_EQ(c.groups.at("builders"), (std::vector<NodeId>{5}));
    EXPECT_EQ(c.network_file, examples / "network.yaml");
    EXPECT_EQ(c.nodes_file, examples / "nodes.yaml");
}

TEST(ConfigDefaults, EmptyNetworkFileGivesTheHeaderDefaults) {
    const auto c = load_text("", "nodes:\n  - id: 7\n");
    const Configuration defaults;
    EXPECT_EQ(c.partition, defaults.partition);
    EXPECT_EQ(c.technology, defaults.technology);
    EXPECT_EQ(c.max_message_size, defaults.max_message_size);
    EXPECT_EQ(c.peer_timeout, defaults.peer_timeout);
    EXPECT_EQ(c.send_queue_limit, defaults.send_queue_limit);
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_no, SciOptions{}.recv_buffer_no);
    EXPECT_TRUE(c.groups.empty());
    ASSERT_EQ(c.nodes.size(), 1u);
    const auto& n = c.nodes[0];
    EXPECT_EQ(n.id, 7u);
    EXPECT_EQ(n.name, "node-7");
    EXPECT_EQ(n.host, "localhost");
    EXPECT_EQ(n.port, 0);
    EXPECT_EQ(n.machine, "");
    EXPECT_EQ(n.where.str(), "nodes.yaml:2:5");
}

TEST(ConfigDefaults, NodeScopeSciWinsOverTopLevelWhichWinsOverDefault) {
    const auto c = load_text("sci:\n  recv_buffer_no: 100\n  max_outst_buffers: 3\n",
                             "nodes:\n  - {id: 1, sci: {recv_buffer_no: 50}}\n  - {id: 2}\n");
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_no, 100u);
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).recv_buffer_no, 50u);       // node scope
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).max_outst_buffers, 3u);     // top level
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).recv_seg_id, 8u);           // default
    EXPECT_EQ(c.section<SciOptions>(c.node(2)).recv_buffer_no, 100u);      // top level
    EXPECT_EQ(c.section<SciOptions>(c.node(2)).send_buffer_size, 8 * KiB); // default
}

// "max_outst_buffers: the value configured for the sending node (its node scope,
// else the top-level sci context); its range is 1..15".
TEST(ConfigValues, MaxOutstBuffersTakesOneToFifteenAtTheTopLevelOrInANodesScope) {
    const auto c =
        load_text("sci:\n  max_outst_buffers: 15\n", "nodes:\n  - {id: 1, sci: {max_outst_buffers: 1}}\n  - {id: 2}\n");
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).max_outst_buffers, 1u);  // node scope
    EXPECT_EQ(c.section<SciOptions>(c.node(2)).max_outst_buffers, 15u); // top level
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, sci: {max_outst_buffers: 16}}\n"),
              "nodes.yaml:2:38: nodes[0].sci.max_outst_buffers: expected an integer from 1 to 15, found '16'");
}

TEST(ConfigValues, SizesAcceptUnitsOfPowersOf1024) {
    EXPECT_EQ(parse_size("8192"), 8192u);
    EXPECT_EQ(parse_size("8KiB"), 8 * KiB);
    EXPECT_EQ(parse_size("8KB"), 8 * KiB);
    EXPECT_EQ(parse_size("8K"), 8 * KiB);
    EXPECT_EQ(parse_size("8 KiB"), 8 * KiB);
    EXPECT_EQ(parse_size("16MiB"), 16 * MiB);
    EXPECT_EQ(parse_size("16MB"), 16 * MiB);
    EXPECT_EQ(parse_size("1GiB"), GiB);
    EXPECT_EQ(parse_size("1G"), GiB);
    EXPECT_EQ(parse_size("0"), 0u);
    for (const char* bad : {"", "KiB", "8kib", "8 ", "8  KiB", "-8", "8.5KiB", "8 XB", "0x10", "99999999999999999999",
                            "17179869184GiB", " 8"}) {
        EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
    }
    const auto c =
        load_text("max_message_size: 1 MiB\nsci:\n  recv_seg_size: 2MiB\n  recv_buffer_size: 4096\n", two_nodes);
    EXPECT_EQ(c.max_message_size, MiB);
    EXPECT_EQ(c.section<SciOptions>().recv_seg_size, 2 * MiB);
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_size, 4096u);
}

TEST(ConfigValues, DurationsAndBooleansAndTechnologyAreParsed) {
    EXPECT_EQ(load_text("peer_timeout: 250\n", two_nodes).peer_timeout, std::chrono::milliseconds(250));
    EXPECT_EQ(load_text("peer_timeout: 500ms\n", two_nodes).peer_timeout, std::chrono::milliseconds(500));
    EXPECT_EQ(load_text("peer_timeout: 2.5s\n", two_nodes).peer_timeout, std::chrono::milliseconds(2500));
    EXPECT_EQ(load_text("peer_timeout: 1 min\n", two_nodes).peer_timeout, std::chrono::milliseconds(60000));
    // The seed: "0 means false, everything else means true".
    EXPECT_FALSE(load_text("sci: {use_send_pool: 0}\n", two_nodes).section<SciOptions>().use_send_pool);
    EXPECT_TRUE(load_text("sci: {use_send_pool: 3}\n", two_nodes).section<SciOptions>().use_send_pool);
    EXPECT_TRUE(load_text("sci: {use_send_pool: true}\n", two_nodes).section<SciOptions>().use_send_pool);
    EXPECT_FALSE(load_text("sci: {use_send_pool: no}\n", two_nodes).section<SciOptions>().use_send_pool);
    EXPECT_EQ(load_text("technology: TCP\n", two_nodes).technology, "tcp");
    EXPECT_EQ(load_text("technology: auto\n", two_nodes).technology, "auto");
    EXPECT_EQ(load_text("sci: {inject_error_rate: 0.25}\n", two_nodes).section<SciOptions>().inject_error_rate, 0.25);
    EXPECT_EQ(load_text("sci: {inject_error_seed: 18446744073709551615}\n", two_nodes)
                  .section<SciOptions>()
                  .inject_error_seed,
              18446744073709551615u);
    for (const char* bad : {"0", "0ms", "-5", "-1s", "2 hours", "1.5", "3601s", "abc", "1e400s"}) {
        EXPECT_NE(errors_of(std::string("peer_timeout: ") + bad + "\n"), "") << bad;
    }
}

TEST(ConfigNodes, CommandIsSplitOnWhitespaceOrTakenAsAList) {
    const auto c = load_text("", "nodes:\n"
                                 "  - {id: 1, command: '  ./reader --rate  100 '}\n"
                                 "  - {id: 2, command: [./builder, 'a b']}\n");
    EXPECT_EQ(c.node(1).command, (std::vector<std::string>{"./reader", "--rate", "100"}));
    EXPECT_EQ(c.node(2).command, (std::vector<std::string>{"./builder", "a b"}));
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, command: ''}\n"), "");
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, command: []}\n"), "");
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, command: {a: b}}\n"), "");
}

TEST(ConfigNodes, NodeThrowsForAnUnknownIdAndFindNodeReturnsNull) {
    const auto c = load_text("", two_nodes);
    EXPECT_EQ(c.find_node(3), nullptr);
    EXPECT_EQ(c.find_node(0), nullptr);
    EXPECT_EQ(c.find_node(2)->id, 2u);
    EXPECT_THROW((void)c.node(3), ConfigError);
}

TEST(ConfigErrors, MissingFileIsOneLineWithTheReason) {
    TempDir dir;
    const auto nodes = dir.write("nodes.yaml", two_nodes);
    const auto missing = dir.path() / "absent.yaml";
    try {
        (void)load(missing, nodes);
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  missing.string() + ":0:0: file: expected a readable YAML file, found No such file or directory");
    }
    // A directory is not a readable file either.
    try {
        (void)load(dir.path(), nodes);
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(lines_of(e.what()).size(), 1u);
        EXPECT_NE(std::string(e.what()).find(dir.path().string() + ":0:0: file: expected a readable YAML file"),
                  std::string::npos)
            << e.what();
    }
}

TEST(ConfigErrors, FilesOnDiskLoadAndReportTheirOwnPath) {
    TempDir dir;
    const auto network = dir.write("net.yaml", "partition: disk\n");
    const auto nodes = dir.write("n.yaml", "nodes:\n  - {id: 3, port: 99999}\n");
    try {
        (void)load(network, nodes);
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  nodes.string() + ":2:19: nodes[0].port: expected a port from 0 to 65535, found '99999'");
    }
    const auto good = dir.write("good.yaml", "nodes: [{id: 3}]\n");
    EXPECT_EQ(load(network, good).partition, "disk");
}

TEST(ConfigErrors, SyntaxErrorNamesFileLineAndColumn) {
    const auto what = errors_of("partition: a\nsci: [1, 2\n");
    ASSERT_EQ(lines_of(what).size(), 1u) << what;
    EXPECT_EQ(what.rfind("network.yaml:3:1: yaml: expected valid YAML, found a syntax error: ", 0), 0u) << what;
}

TEST(ConfigErrors, UnknownKeySuggestsTheClosestKnownOne) {
    const auto what = errors_of("sci:\n  recv_bufer_no: 3\n");
    EXPECT_EQ(what.rfind("network.yaml:2:3: sci.recv_bufer_no: expected a known key (did you mean 'recv_buffer_no'? "
                         "known: max_outst_buffers, ",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find(", found unknown key 'recv_bufer_no'"), std::string::npos) << what;
    // An SCI key at the top level is pointed to its place.
    EXPECT_NE(errors_of("recv_buffer_no: 3\n")
                  .find("network.yaml:1:1: recv_buffer_no: expected a known key (did you "
                        "mean 'sci.recv_buffer_no'?"),
              std::string::npos);
    EXPECT_NE(errors_of("", two_nodes, {"recv_buffer_no=3"}).find("did you mean 'sci.recv_buffer_no'?"),
              std::string::npos);
    EXPECT_NE(errors_of("colour: blue\n").find("network.yaml:1:1: colour: expected a known key (known: partition"),
              std::string::npos);
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, prot: 3}\n")
                  .find("nodes.yaml:2:13: nodes[0].prot: expected a "
                        "known key (did you mean 'port'?"),
              std::string::npos);
}

TEST(ConfigErrors, WrongTypesAreReportedWithWhatWasFound) {
    EXPECT_EQ(errors_of("partition: [a, b]\n"),
              "network.yaml:1:12: partition: expected a partition name of 1 to 64 characters [A-Za-z0-9_.-], "
              "found a list");
    EXPECT_EQ(errors_of("sci:\n  recv_buffer_no: many\n"),
              "network.yaml:2:19: sci.recv_buffer_no: expected an integer from 1 to 4294967295, found 'many'");
    EXPECT_EQ(errors_of("sci: 5\n"), "network.yaml:1:6: sci: expected a mapping of SCI parameters, found '5'");
    EXPECT_EQ(errors_of("technology: myrinet\n"),
              "network.yaml:1:13: technology: expected one of auto, sci, tcp, udp, found 'myrinet'");
    EXPECT_EQ(errors_of("- a\n- b\n"), "network.yaml:1:1: : expected a mapping of network settings, found a list");
    EXPECT_EQ(errors_of("just text\n"),
              "network.yaml:1:1: : expected a mapping of network settings, found 'just text'");
    EXPECT_EQ(errors_of("", ""), "nodes.yaml:0:0: nodes: expected a non-empty list of nodes, found nothing");
    EXPECT_EQ(errors_of("", "nodes: []\n"),
              "nodes.yaml:1:8: nodes: expected a non-empty list of nodes, found an empty list");
    EXPECT_EQ(errors_of("", "nodes:\n  - 5\n"),
              "nodes.yaml:2:5: nodes[0]: expected a mapping of node settings (id, name, host, port, machine, command, "
              "sci), found '5'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {name: x}\n"),
              "nodes.yaml:2:5: nodes[0].id: expected an integer node id, found nothing");
    EXPECT_EQ(errors_of("partition: 'a b'\n"),
              "network.yaml:1:12: partition: expected a partition name of 1 to 64 characters [A-Za-z0-9_.-], "
              "found 'a b'");
    EXPECT_EQ(errors_of("partition:\n"),
              "network.yaml:1:1: partition: expected a partition name of 1 to 64 characters [A-Za-z0-9_.-], "
              "found nothing");
}

TEST(ConfigErrors, ZeroNegativeAndHugeSizesAreRefused) {
    EXPECT_EQ(errors_of("sci: {send_buffer_size: 0}\n"),
              "network.yaml:1:25: sci.send_buffer_size: expected a size from 1 byte to 16GiB, found a zero size '0'");
    EXPECT_EQ(errors_of("sci: {send_buffer_size: -8KiB}\n"),
              "network.yaml:1:25: sci.send_buffer_size: expected a size from 1 byte to 16GiB, found a negative size "
              "'-8KiB'");
    EXPECT_EQ(errors_of("sci: {send_buffer_size: 17GiB}\n"),
              "network.yaml:1:25: sci.send_buffer_size: expected a size from 1 byte to 16GiB, found a huge size "
              "'17GiB'");
    EXPECT_EQ(errors_of("sci: {send_buffer_size: 99999999999999999999999}\n"),
              "network.yaml:1:25: sci.send_buffer_size: expected a size from 1 byte to 16GiB, found a huge size "
              "'99999999999999999999999'");
    EXPECT_EQ(errors_of("sci: {send_buffer_size: lots}\n"),
              "network.yaml:1:25: sci.send_buffer_size: expected a size such as 8KiB, found 'lots'");
    EXPECT_EQ(errors_of("max_message_size: 3GiB\n"),
              "network.yaml:1:19: max_message_size: expected a size from 1 byte to 2GiB, found '3GiB'");
    EXPECT_EQ(errors_of("sci: {recv_buffer_size: 100}\n"),
              "network.yaml:1:25: sci.recv_buffer_size: expected a multiple of 64 bytes, found '100'");
    EXPECT_EQ(errors_of("sci: {max_outst_buffers: 16}\n"),
              "network.yaml:1:26: sci.max_outst_buffers: expected an integer from 1 to 15, found '16'");
    EXPECT_EQ(errors_of("sci: {max_outst_buffers: 0}\n"),
              "network.yaml:1:26: sci.max_outst_buffers: expected an integer from 1 to 15, found '0'");
    EXPECT_EQ(errors_of("sci: {recv_seg_id: -1}\n"),
              "network.yaml:1:20: sci.recv_seg_id: expected an integer from 0 to 4294967295, found '-1'");
    EXPECT_EQ(errors_of("sci: {inject_error_rate: 1.0}\n"),
              "network.yaml:1:26: sci.inject_error_rate: expected a probability from 0.0 to below 1.0, found '1.0'");
}

TEST(ConfigErrors, SegmentTooSmallForItsBuffersNamesBothNumbers) {
    EXPECT_EQ(errors_of("sci:\n  recv_buffer_no: 255\n  recv_seg_size: 1MiB\n"),
              "network.yaml:2:3: sci.recv_seg_size: expected recv_seg_size >= header_area_size (8192) + "
              "recv_buffer_no (255) * recv_buffer_size (8192) = 2097152, found recv_seg_size 1048576");
    // Not written, it follows them.
    EXPECT_EQ(load_text("sci:\n  recv_buffer_no: 255\n", two_nodes).section<SciOptions>().recv_seg_size, 2 * MiB);
    const auto c = load_text("", "nodes:\n  - id: 1\n    sci: {recv_buffer_size: 16KiB}\n");
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).recv_seg_size, 8 * KiB + 127 * 16 * KiB);
    // The node's resolved context is checked too.
    EXPECT_EQ(errors_of("", "nodes:\n  - id: 1\n    sci: {recv_buffer_size: 16KiB, recv_seg_size: 1MiB}\n"),
              "nodes.yaml:3:10: nodes[0].sci.recv_seg_size: expected recv_seg_size >= header_area_size (8192) + "
              "recv_buffer_no (127) * recv_buffer_size (16384) = 2088960, found recv_seg_size 1048576");
    // A node may repair what it inherits.
    EXPECT_EQ(errors_of("", "nodes:\n  - id: 1\n    sci: {recv_buffer_size: 16KiB, recv_seg_size: 2MiB}\n"), "");
}

std::string many_nodes(int n) {
    std::string nodes = "nodes:\n";
    for (int id = 1; id <= n; ++id)
        nodes += "  - {id: " + std::to_string(id) + "}\n";
    return nodes;
}

// The header area, the receive slots and the segment follow the node count when they
// are not written (the 8KiB header area of the seed holds 64 nodes, 127 slots serve 127
// peers of max_outst_buffers 1); a node's own section is sized for its own peers.
TEST(ConfigPartitionSizes, UnwrittenSizesFollowTheNodeCount) {
    const auto c =
        load_text("sci: {max_outst_buffers: 2}\n", many_nodes(300) + "  - {id: 301, sci: {max_outst_buffers: 15}}\n");
    const auto& top = c.section<SciOptions>();
    EXPECT_EQ(top.header_area_size, 301 * 128u);
    // The node granted most: 299 others of 2 and one of 15, plus a spare slot per peer.
    EXPECT_EQ(top.recv_buffer_no, 299u * 2 + 15 + 300);
    EXPECT_EQ(top.recv_seg_size, top.header_area_size + std::uint64_t{top.recv_buffer_no} * top.recv_buffer_size);
    const auto& own = c.section<SciOptions>(c.node(301));
    EXPECT_EQ(own.header_area_size, 301 * 128u);
    EXPECT_EQ(own.recv_buffer_no, 300u * 2 + 300);
    // Small partitions keep the seed's values.
    const auto small = load_text("", two_nodes);
    EXPECT_EQ(small.section<SciOptions>().header_area_size, 8 * KiB);
    EXPECT_EQ(small.section<SciOptions>().recv_buffer_no, 127u);
    EXPECT_EQ(small.section<SciOptions>().recv_seg_size, 1 * MiB);
    // A written value that fits is kept as written.
    const auto kept =
        load_text("sci: {header_area_size: 64KiB, recv_buffer_no: 400, recv_seg_size: 8MiB}\n", many_nodes(300));
    EXPECT_EQ(kept.section<SciOptions>().header_area_size, 64 * KiB);
    EXPECT_EQ(kept.section<SciOptions>().recv_buffer_no, 400u);
    EXPECT_EQ(kept.section<SciOptions>().recv_seg_size, 8 * MiB);
}

// Under technology auto sci serves only the nodes of one machine (the others talk by
// tcp or udp): the receive slots follow the nodes of the machine, the header area
// the whole file (its headers are indexed by the position in the file). A thousand
// nodes over a hundred hosts would otherwise reserve slots for 999 peers per node
// where 9 use them (docs/architecture.md, "A thousand nodes over a hundred hosts").
std::string two_machines() {
    std::string nodes = "nodes:\n";
    const auto add = [&](int id, const char* host, const std::string& extra) {
        nodes += "  - {id: " + std::to_string(id) + ", host: " + host + ", port: " + std::to_string(9000 + id) + extra +
                 "}\n";
    };
    for (int id = 1; id <= 3; ++id)
        add(id, "a", "");
    for (int id = 4; id <= 300; ++id)
        add(id, "b", "");
    add(301, "a", ", sci: {max_outst_buffers: 3}");
    return nodes;
}

TEST(ConfigPartitionSizes, UnderAutoTheReceiveSlotsFollowTheNodesOfTheMachine) {
    const auto c = load_text("technology: auto\nsci: {max_outst_buffers: 15}\n", two_machines());
    const auto& top = c.section<SciOptions>();
    EXPECT_EQ(top.header_area_size, 301 * 128u);
    // The node granted most is on host b: 296 partners of 15, a spare slot each.
    EXPECT_EQ(top.recv_buffer_no, 296u * 15 + 296);
    // Node 301 on host a: partners 1, 2 and 3 (45 slots and 3 spares): the seed's 127.
    const auto& own = c.section<SciOptions>(c.node(301));
    EXPECT_EQ(own.header_area_size, 301 * 128u);
    EXPECT_EQ(own.recv_buffer_no, 127u);
    // The same files under sci: every other node is a partner.
    const auto all = load_text("technology: sci\nsci: {max_outst_buffers: 15}\n", two_machines());
    EXPECT_EQ(all.section<SciOptions>().recv_buffer_no, 300u * 15 + 300); // granted most: node 301
    EXPECT_EQ(all.section<SciOptions>(all.node(301)).recv_buffer_no, 300u * 15 + 300);
    // A written value that serves the machine is accepted under auto, and refused
    // under sci, naming the machine's rule.
    std::string small = "nodes:\n  - {id: 1, host: a, port: 9001}\n  - {id: 2, host: a, port: 9002, sci: "
                        "{recv_buffer_no: 20}}\n";
    for (int id = 3; id <= 40; ++id)
        small += "  - {id: " + std::to_string(id) + ", host: b, port: " + std::to_string(9000 + id) + "}\n";
    EXPECT_EQ(errors_of("technology: auto\nsci: {max_outst_buffers: 15}\n", small), "");
    EXPECT_NE(errors_of("technology: sci\nsci: {max_outst_buffers: 15}\n", small)
                  .find("nodes[1].sci.recv_buffer_no: expected at least the sum of the other nodes' "
                        "max_outst_buffers: 585 slots for node 2 of 40 nodes"),
              std::string::npos);
    EXPECT_NE(errors_of("technology: auto\nsci: {max_outst_buffers: 15}\n",
                        "nodes:\n  - {id: 1, host: a, port: 9001}\n  - {id: 2, host: a, port: 9002}\n  - {id: 3, "
                        "host: a, port: 9003, sci: {recv_buffer_no: 20}}\n")
                  .find("sci.recv_buffer_no: expected at least the sum of the other nodes' max_outst_buffers: 30 "
                        "slots for node 3 of 3 nodes (its machine's under auto)"),
              std::string::npos);
}

// The partition is split into its machines in one pass (machine_key) rather than by
// comparing every pair (same_machine): both must say the same of every pair, and the
// partners counted in one pass must be those counted node by node.
TEST(ConfigPartitionSizes, MachinesFoundInOnePassAreThoseOfEveryPairwiseComparison) {
    std::vector<NodeConfig> nodes;
    const auto add = [&](const char* host, const char* machine) {
        NodeConfig n;
        n.id = static_cast<NodeId>(nodes.size() + 1);
        n.host = host;
        n.machine = machine;
        nodes.push_back(n);
    };
    for (const char* host : {"localhost", "127.0.0.1", "127.0.1.1", "::1", "a", "b", "machine:a", "host:a", ""})
        for (const char* machine : {"", "a", "b", "host:a", "loopback"})
            add(host, machine);
    for (const auto& x : nodes)
        for (const auto& y : nodes)
            EXPECT_EQ(same_machine(x, y), machine_key(x) == machine_key(y))
                << "host '" << x.host << "' machine '" << x.machine << "' against host '" << y.host << "' machine '"
                << y.machine << "'";

    for (const char* technology : {"auto", "sci"}) {
        const auto c =
            load_text(std::string("technology: ") + technology + "\nsci: {max_outst_buffers: 15}\n",
                      two_machines() + "  - {id: 302, host: localhost, port: 9302, sci: {max_outst_buffers: 4}}\n"
                                       "  - {id: 303, host: 127.0.0.1, port: 9303}\n");
        const auto each = sci::partners_of_each(c);
        ASSERT_EQ(each.size(), c.nodes.size());
        for (std::size_t i = 0; i < c.nodes.size(); ++i) {
            const auto one = sci::partners_of(c, c.nodes[i]);
            EXPECT_EQ(each[i].count, one.count) << technology << ", node " << c.nodes[i].id;
            EXPECT_EQ(each[i].outstanding, one.outstanding) << technology << ", node " << c.nodes[i].id;
        }
    }
}

TEST(ConfigPartitionSizes, WrittenSizesTooSmallForThePartitionAreRefusedWhenLoaded) {
    EXPECT_EQ(errors_of("sci:\n  header_area_size: 8KiB\n", many_nodes(300)),
              "network.yaml:2:21: sci.header_area_size: expected one 128-byte header per node of the nodes file: at "
              "least 38400 bytes for 300 nodes (or leave it out: it follows the node count), found 8192");
    // Once for the key, not once per node.
    EXPECT_EQ(errors_of("sci: {recv_buffer_no: 127}\n", many_nodes(200)),
              "network.yaml:1:23: sci.recv_buffer_no: expected at least the sum of the other nodes' max_outst_buffers: "
              "199 slots for node 1 of 200 nodes (or leave it out: it follows the node count), found 127");
    // A node's own value, at its place.
    EXPECT_EQ(errors_of("", many_nodes(99) + "  - {id: 100, sci: {header_area_size: 128}}\n"),
              "nodes.yaml:101:39: nodes[99].sci.header_area_size: expected one 128-byte header per node of the nodes "
              "file: at "
              "least 12800 bytes for 100 nodes (or leave it out: it follows the node count), found 128");
    // A written segment that the sizing outgrew.
    EXPECT_EQ(errors_of("sci: {recv_seg_size: 1MiB}\n", many_nodes(100)),
              "network.yaml:1:22: sci.recv_seg_size: expected at least header_area_size (12800) + recv_buffer_no "
              "(198) * recv_buffer_size (8192) = 1634816 bytes for 100 nodes (or leave it out: it follows the node "
              "count), found 1048576");
    // Only where sci serves the partition (auto uses it between the nodes of a host).
    EXPECT_EQ(errors_of("technology: tcp\nsci: {header_area_size: 8KiB}\n", many_nodes(100)), "");
    EXPECT_NE(errors_of("technology: auto\nsci: {header_area_size: 8KiB}\n", many_nodes(100))
                  .find("sci.header_area_size: expected one 128-byte header per node"),
              std::string::npos);
}

// Numbers whose product does not fit 64 bits are compared exactly (long double) and
// named as such; a send pool beyond 16GiB is refused only when it is used.
TEST(ConfigErrors, ProductsBeyondTheirBoundsAreRefusedWithoutOverflow) {
    EXPECT_EQ(errors_of("sci:\n  recv_buffer_no: 4294967295\n  recv_buffer_size: 16GiB\n  recv_seg_size: 1MiB\n"),
              "network.yaml:2:3: sci.recv_seg_size: expected recv_seg_size >= header_area_size (8192) + "
              "recv_buffer_no (4294967295) * recv_buffer_size (17179869184) = more than 2^64, found recv_seg_size "
              "1048576\n"
              "network.yaml:2:19: sci.recv_buffer_no: expected at most 16777215, found 4294967295");
    EXPECT_EQ(errors_of("sci:\n  recv_buffer_no: 2000000\n  recv_buffer_size: 16KiB\n"),
              "network.yaml:2:3: sci.recv_seg_size: expected a segment of at most 16GiB: header_area_size (8192) + "
              "recv_buffer_no (2000000) * recv_buffer_size (16384) = 32768008192 bytes, found recv_seg_size not "
              "written");
    // (A rule over several keys is reported at their section.)
    EXPECT_EQ(errors_of("sci: {use_send_pool: true, send_buffer_no: 3, send_buffer_size: 16GiB}\n"),
              "network.yaml:1:6: sci.send_buffer_no: expected a send pool (send_buffer_no * send_buffer_size) of at "
              "most 16GiB, found 3 * 17179869184 bytes");
    EXPECT_EQ(errors_of("sci: {use_send_pool: false, send_buffer_no: 3, send_buffer_size: 16GiB}\n"), "");
    EXPECT_EQ(errors_of("sci: {use_send_pool: true, send_buffer_no: 1, send_buffer_size: 16GiB}\n"), "");
}

TEST(ConfigErrors, DuplicateIdsNamesAndEndpointsAreRefused) {
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1}\n  - {id: 1}\n"),
              "nodes.yaml:3:10: nodes[1].id: expected a unique node id (nodes[0] has it), found '1'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, name: a}\n  - {id: 2, name: a}\n"),
              "nodes.yaml:3:19: nodes[1].name: expected a unique node name (nodes[0] has it), found 'a'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 2}\n  - {id: 3, name: node-2}\n"),
              "nodes.yaml:3:19: nodes[1].name: expected a unique node name (nodes[0] has it), found 'node-2'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, port: 5}\n  - {id: 2, port: 5}\n"),
              "nodes.yaml:3:19: nodes[1].port: expected a port not used by another node on host 'localhost' "
              "(nodes[0] has it), found '5'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, port: 5}\n  - {id: 2, port: 5, host: other}\n"), "");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 0}\n"),
              "nodes.yaml:2:10: nodes[0].id: expected an integer node id from 1 to 2147483647, found '0'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, machine: nowhere}\n"),
              "nodes.yaml:2:22: nodes[0].machine: expected the name of a machine in machines (none), found "
              "'nowhere'");
}

// The sci segment names carry the machine's SCI node id, as SISCI addresses a
// segment by (SCI node id, segment id): two machines with one id would meet.
TEST(ConfigErrors, TwoMachinesWithOneSciNodeIdAreRefusedNamingBoth) {
    const std::string nodes = "machines:\n"
                              "  pc-a: {sci: {node_id: 4}}\n"
                              "  pc-b: {sci: {node_id: 7}}\n"
                              "  pc-c: {sci: {node_id: 4}}\n"
                              "nodes:\n  - {id: 1, machine: pc-a}\n  - {id: 2, machine: pc-c}\n";
    EXPECT_EQ(errors_of("", nodes),
              "nodes.yaml:4:25: machines.pc-c.sci.node_id: expected an SCI node id of one machine only (machine "
              "'pc-a' has it, at nodes.yaml:2:25), found '4'");
    // In a file, the error names the file.
    TempDir dir;
    const auto network = dir.write("network.yaml", "");
    const auto nodes_file = dir.write("nodes.yaml", nodes);
    try {
        (void)load(network, nodes_file);
        FAIL() << "two machines with SCI node id 4 were accepted";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()), nodes_file.string() +
                                             ":4:25: machines.pc-c.sci.node_id: expected an SCI node id of one "
                                             "machine only (machine 'pc-a' has it, at " +
                                             nodes_file.string() + ":2:25), found '4'");
    }
    // Distinct ids, and machines without one, are fine; so are nodes sharing a machine.
    EXPECT_EQ(errors_of("", "machines:\n  a: {sci: {node_id: 4}}\n  b: {sci: {node_id: 5}}\n  c: {}\n  d: {}\n"
                            "nodes:\n  - {id: 1, machine: a}\n  - {id: 2, machine: a}\n  - {id: 3, machine: c}\n"),
              "");
}

TEST(ConfigErrors, GroupMembersMustBeKnownNodesListedOnce) {
    EXPECT_EQ(errors_of("groups:\n  farm: [1, 12]\n"),
              "network.yaml:2:13: groups.farm[1]: expected a node id of nodes.yaml (1, 2), found '12'");
    EXPECT_EQ(errors_of("groups:\n  farm: [1, 2, 1]\n"),
              "network.yaml:2:16: groups.farm[2]: expected each member once, found a repeated member '1'");
    EXPECT_EQ(errors_of("groups:\n  'bad name': [1]\n"),
              "network.yaml:2:3: groups.bad name: expected a group name of 1 to 64 characters [A-Za-z0-9_.-], "
              "found 'bad name'");
    EXPECT_EQ(errors_of("groups:\n  farm: []\n"),
              "network.yaml:2:9: groups.farm: expected a non-empty list of node ids, found an empty list");
    EXPECT_EQ(errors_of("groups:\n  farm: 1\n"),
              "network.yaml:2:9: groups.farm: expected a non-empty list of node ids, found '1'");
}

TEST(ConfigErrors, UnreadableNodesFileIsOneErrorNotOnePerGroupMember) {
    EXPECT_EQ(lines_of(errors_of("groups: {farm: [1, 2, 3]}\n", "nodes: [\n")).size(), 1u);
}

TEST(ConfigErrors, EveryProblemIsReportedAtOnceInFileOrder) {
    const std::string network = "technology: carrier-pigeon\n"
                                "sci:\n"
                                "  recv_buffer_no: 0\n"
                                "  header_area_size: 100\n"
                                "groups:\n"
                                "  farm: [1, 99]\n";
    const std::string nodes = "nodes:\n"
                              "  - {id: 1, port: 70000}\n"
                              "  - {id: 1, colour: red}\n";
    const auto lines = lines_of(errors_of(network, nodes, {"partition=has space"}));
    const std::vector<std::string> expected = {
        "network.yaml:1:13: technology: expected one of auto, sci, tcp, udp, found 'carrier-pigeon'",
        "network.yaml:3:19: sci.recv_buffer_no: expected an integer from 1 to 4294967295, found '0'",
        "network.yaml:4:21: sci.header_area_size: expected a multiple of 128 bytes (one 128-byte header per node), "
        "found '100'",
        "network.yaml:6:13: groups.farm[1]: expected a node id of nodes.yaml (1), found '99'",
        "nodes.yaml:2:19: nodes[0].port: expected a port from 0 to 65535, found '70000'",
        "nodes.yaml:3:10: nodes[1].id: expected a unique node id (nodes[0] has it), found '1'",
        "nodes.yaml:3:13: nodes[1].colour: expected a known key (known: id, name, host, port, machine, command, sci), "
        "found unknown key 'colour'",
        "--set:0:0: partition: expected a partition name of 1 to 64 characters [A-Za-z0-9_.-], found 'has space'",
    };
    EXPECT_EQ(lines, expected);
}

TEST(ConfigOverrides, SetReplacesFileValuesBeforeNodeScope) {
    const auto c = load_text(
        "partition: file\nsci: {recv_buffer_no: 10}\n", "nodes:\n  - {id: 1, sci: {recv_buffer_no: 20}}\n  - {id: 2}\n",
        {"sci.recv_buffer_no=30", "partition=test-42", "technology=tcp", "max_message_size=1MiB", "peer_timeout=200ms",
         "send_queue_limit = 7", "sci.use_send_pool=1", "groups.pair=[1, 2]"});
    EXPECT_EQ(c.partition, "test-42");
    EXPECT_EQ(c.technology, "tcp");
    EXPECT_EQ(c.max_message_size, MiB);
    EXPECT_EQ(c.peer_timeout, std::chrono::milliseconds(200));
    EXPECT_EQ(c.send_queue_limit, 7u);
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_no, 30u);
    EXPECT_TRUE(c.section<SciOptions>().use_send_pool);
    EXPECT_EQ(c.section<SciOptions>(c.node(1)).recv_buffer_no, 20u); // the node's own key still wins
    EXPECT_EQ(c.section<SciOptions>(c.node(2)).recv_buffer_no, 30u);
    EXPECT_TRUE(c.section<SciOptions>(c.node(2)).use_send_pool);
    EXPECT_EQ(c.groups.at("pair"), (std::vector<NodeId>{1, 2}));
    // The last override of a key wins, and an override repairs a bad file value.
    EXPECT_EQ(load_text("partition: 'bad one'\n", two_nodes, {"partition=a", "partition=b"}).partition, "b");
}

// The communicator's `comm:` section (docs/communicator.md): sizes read like any
// other, refused with the key and line, and `comm` is no technology.
TEST(ConfigComm, TheCommSectionSetsTheCommunicatorLimitsAndBadValuesNameKeyAndLine) {
    const auto defaults = load_text("", two_nodes);
    EXPECT_EQ(defaults.section<CommOptions>().eager_limit, 64 * KiB);
    EXPECT_EQ(defaults.section<CommOptions>().unexpected_limit, 64 * MiB);
    const auto c = load_text("comm:\n  eager_limit: 8KiB\n  unexpected_limit: 1MiB\n", two_nodes);
    EXPECT_EQ(c.section<CommOptions>().eager_limit, 8 * KiB);
    EXPECT_EQ(c.section<CommOptions>().unexpected_limit, MiB);
    // The one-copy path (docs/communicator.md, "One copy"): on unless switched off.
    EXPECT_TRUE(defaults.section<CommOptions>().single_copy);
    EXPECT_FALSE(load_text("comm:\n  single_copy: false\n", two_nodes).section<CommOptions>().single_copy);
    EXPECT_FALSE(load_text("", two_nodes, {"comm.single_copy=false"}).section<CommOptions>().single_copy);
    EXPECT_EQ(errors_of("comm:\n  single_copy: often\n").rfind("network.yaml:2:16: comm.single_copy: expected", 0), 0u)
        << errors_of("comm:\n  single_copy: often\n");
    EXPECT_NE(errors_of("comm:\n  single_copi: true\n").find("did you mean 'single_copy'?"), std::string::npos)
        << errors_of("comm:\n  single_copi: true\n");
    EXPECT_EQ(load_text("comm: {eager_limit: 1KiB}\n", two_nodes, {"comm.eager_limit=2KiB"})
                  .section<CommOptions>()
                  .eager_limit,
              2 * KiB);
    EXPECT_EQ(errors_of("comm:\n  eager_limit: -1\n"),
              "network.yaml:2:16: comm.eager_limit: expected a size from 1 byte to 2GiB, found a negative size '-1'");
    EXPECT_EQ(errors_of("comm:\n  unexpected_limit: lots\n")
                  .rfind("network.yaml:2:21: comm.unexpected_limit: expected a size", 0),
              0u)
        << errors_of("comm:\n  unexpected_limit: lots\n");
    EXPECT_EQ(errors_of("comm:\n  eager_limt: 1\n").rfind("network.yaml:2:3: comm.eager_limt: expected a known key", 0),
              0u)
        << errors_of("comm:\n  eager_limt: 1\n");
    EXPECT_EQ(errors_of("comm: 5\n").rfind("network.yaml:1:", 0), 0u) << errors_of("comm: 5\n");
    EXPECT_NE(errors_of("technology: comm\n").find("expected one of auto, sci, tcp, udp"), std::string::npos);
}

// The logger's `log:` section (msgpass/log.hpp): a level for all, one per subsystem,
// a file; a wrong level or subsystem named with its key and line.
TEST(ConfigLog, TheLogSectionSetsLevelsAndFileAndBadValuesNameKeyAndLine) {
    EXPECT_EQ(load_text("", two_nodes).section<LogOptions>().level, "info");
    const auto c = load_text("log:\n  level: warn\n  tcp: debug\n  file: run.log\n", two_nodes, {"log.udp=trace"});
    const auto& o = c.section<LogOptions>();
    EXPECT_EQ(o.level, "warn");
    EXPECT_EQ(o.file, "run.log");
    EXPECT_EQ(o.subsystems.at("tcp"), "debug");
    EXPECT_EQ(o.subsystems.at("udp"), "trace");
    EXPECT_EQ(errors_of("log:\n  level: loud\n"),
              "network.yaml:2:10: log.level: expected a log level: trace, debug, info, warn, error or off, found "
              "'loud'");
    EXPECT_EQ(errors_of("log:\n  tpc: debug\n").rfind("network.yaml:2:3: log.tpc: expected a known key", 0), 0u)
        << errors_of("log:\n  tpc: debug\n");
}

// BIP's per-tag queues (comm.tag_queues): ranges and single tags with sizes; a
// range backwards, overlapping or without a size is named.
TEST(ConfigComm, TagQueuesAreRangesWithSizesAndBadOnesAreNamed) {
    const auto c = load_text("comm:\n  tag_queues: 100-199:64KiB, 7:4KiB\n", two_nodes);
    const auto& q = c.section<CommOptions>().tag_queues;
    ASSERT_EQ(q.size(), 2u);
    EXPECT_EQ(q[0].first, 100);
    EXPECT_EQ(q[0].last, 199);
    EXPECT_EQ(q[0].limit, 64 * KiB);
    EXPECT_EQ(q[1].first, 7);
    EXPECT_EQ(q[1].last, 7);
    EXPECT_EQ(q[1].limit, 4 * KiB);
    EXPECT_NE(
        errors_of("comm:\n  tag_queues: 9-3:1KiB\n").find("'9-3:1KiB' (tags from 0 to 2147483647, first <= last)"),
        std::string::npos)
        << errors_of("comm:\n  tag_queues: 9-3:1KiB\n");
    EXPECT_NE(errors_of("comm:\n  tag_queues: 1-10:1KiB,5:1KiB\n").find("'5:1KiB' (overlaps 1-10)"), std::string::npos);
    EXPECT_NE(errors_of("comm:\n  tag_queues: 5\n").find("'5' (no size)"), std::string::npos);
    EXPECT_EQ(
        errors_of("comm:\n  tag_queues: 5:lots\n").rfind("network.yaml:2:15: comm.tag_queues: expected tag queues", 0),
        0u)
        << errors_of("comm:\n  tag_queues: 5:lots\n");
}

TEST(ConfigOverrides, BadOverridesAreReportedAtSet) {
    EXPECT_EQ(errors_of("", two_nodes, {"sci.recv_buffer_no=-3"}),
              "--set:0:0: sci.recv_buffer_no: expected an integer from 1 to 4294967295, found '-3'");
    EXPECT_EQ(errors_of("", two_nodes, {"novalue"}),
              "--set:0:0: --set: expected key=value such as sci.recv_buffer_no=255, found 'novalue'");
    EXPECT_EQ(errors_of("", two_nodes, {"sci.recv_bufer_no=3"})
                  .rfind("--set:0:0: sci.recv_bufer_no: expected a known key (did you mean 'recv_buffer_no'?", 0),
              0u);
    EXPECT_EQ(errors_of("", two_nodes, {"partiton=x"})
                  .rfind("--set:0:0: partiton: expected a known key (did you mean 'partition'?", 0),
              0u);
    EXPECT_EQ(errors_of("", two_nodes, {"sci.recv_buffer_no.x=1"}),
              "--set:0:0: sci.recv_buffer_no.x: expected a network-file key such as partition or "
              "sci.recv_buffer_no, found 'sci.recv_buffer_no.x'");
    EXPECT_EQ(errors_of("", two_nodes, {"technology="}),
              "--set:0:0: technology: expected one of auto, sci, tcp, udp, found nothing");
    EXPECT_EQ(errors_of("", two_nodes, {"partition=[x"})
                  .rfind("--set:0:0: partition: expected a YAML value, found "
                         "'[x'",
                         0),
              0u);
    EXPECT_EQ(errors_of("", two_nodes, {"groups.farm=[9]"}),
              "--set:0:0: groups.farm[0]: expected a node id of nodes.yaml (1, 2), found '9'");
}

TEST(ConfigRobustness, AliasesDeepNestingAndOddDocumentsNeverCrash) {
    // Aliases are plain YAML: a shared SCI context.
    const auto c = load_text("sci: &common {recv_buffer_no: 63}\n", "nodes:\n  - {id: 1, sci: {recv_buffer_no: 7}}\n");
    EXPECT_EQ(c.section<SciOptions>().recv_buffer_no, 63u);
    EXPECT_NE(errors_of("a: &x [*x]\n"), "");
    EXPECT_NE(errors_of("groups: {g: &x [1, *x]}\n"), "");
    // yaml-cpp refuses nesting beyond its depth guard with an exception, not a crash.
    for (int depth : {100, 400, 3000, 100000}) {
        const std::string deep =
            std::string(static_cast<std::size_t>(depth), '[') + std::string(static_cast<std::size_t>(depth), ']');
        EXPECT_NE(errors_of("groups: {g: " + deep + "}\n"), "") << depth;
        EXPECT_NE(errors_of("", "nodes: " + deep + "\n"), "") << depth;
    }
    std::string block;
    for (int i = 0; i < 3000; ++i)
        block += std::string(static_cast<std::size_t>(i), ' ') + "a:\n";
    EXPECT_NE(errors_of(block), "");
    EXPECT_NE(errors_of(std::string("\0\xff\xfe", 3)), "");
    EXPECT_NE(errors_of("? [a, b]\n: c\n"), "");
    EXPECT_NE(errors_of("partition: a\npartition: b\n").find("expected each key once"), std::string::npos);
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 99999999999999999999999999}\n"), "");
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, port: -1}\n"), "");
    EXPECT_NE(errors_of("", "machines: {m: {sci: {node_id: x}}}\nnodes: [{id: 1, machine: m}]\n"), "");
    EXPECT_NE(errors_of("--- a\n--- b\n"), "");
}

TEST(ConfigRobustness, LargeFilesStayFastAndReportAtMostAHundredProblems) {
    std::string nodes = "nodes:\n";
    std::string farm;
    for (int id = 1; id <= 20000; ++id) {
        nodes += "  - {id: " + std::to_string(id) + ", port: " + std::to_string(id) + "}\n";
        farm += (farm.empty() ? "" : ", ") + std::to_string(id);
    }
    const auto c = load_text("groups:\n  farm: [" + farm + "]\n", nodes);
    EXPECT_EQ(c.nodes.size(), 20000u);
    EXPECT_EQ(c.groups.at("farm").size(), 20000u);

    std::string bad;
    for (int i = 0; i < 500; ++i)
        bad += "key" + std::to_string(i) + ": 1\n";
    const auto lines = lines_of(errors_of(bad));
    ASSERT_EQ(lines.size(), 101u);
    EXPECT_EQ(lines.back(), "network.yaml:101:1: errors: expected at most 100 problems, found 400 more");
}

// Every line of a ConfigError has the documented form
//   file:line:column: key.path: expected X, found Y
// with a file the loader was given (or --set), and a position inside that text
// (0:0 for a problem with no position: a whole file, an override); "" or what is wrong.
// The key path is empty only for the document itself (a file that is no mapping,
// or a key of its top level that is no name); a key of the file may hold any
// character, colons and spaces included.
std::string malformed_line(const std::string& line, const std::string& network, const std::string& nodes) {
    static const std::regex form(
        R"(^(network\.yaml|nodes\.yaml|--set):([0-9]+):([0-9]+): ([\s\S]*?): expected ([\s\S]+), found [\s\S]*$)");
    std::smatch m;
    if (!std::regex_match(line, m, form)) return "not file:line:column: key: expected X, found Y";
    if (m[4].length() == 0 && m[5].str().rfind("a mapping", 0) != 0 && m[5].str() != "a key name") return "no key path";
    const auto count_lines = [](const std::string& text) {
        return static_cast<long>(std::count(text.begin(), text.end(), '\n')) + 1;
    };
    const long row = std::stol(m[2]);
    const long column = std::stol(m[3]);
    if (m[1] == "--set") return row == 0 && column == 0 ? "" : "an override has no line";
    if (row == 0) return column == 0 ? "" : "a column without a line";
    const long rows = count_lines(m[1] == "network.yaml" ? network : nodes);
    if (row > rows) return "line " + std::to_string(row) + " of a text of " + std::to_string(rows) + " lines";
    if (column < 1) return "column 0 on a line";
    return "";
}

// "one line per problem": a key holding a line break (a quoted YAML key) is shown
// with the break escaped, as found values are.
TEST(ConfigErrors, AKeyWithALineBreakIsReportedOnOneLine) {
    const auto lines = lines_of(errors_of("\"bad\\nkey\": 1\n"));
    ASSERT_EQ(lines.size(), 1u) << errors_of("\"bad\\nkey\": 1\n");
    EXPECT_EQ(lines[0].rfind("network.yaml:1:1: bad\\nkey: expected a known key", 0), 0u) << lines[0];
}

// Mutates valid documents byte by byte and feeds garbage: each must load or throw
// ConfigError, nothing else (a crash or another exception fails the test), and
// every line of every error has the file:line:column: key form.
TEST(ConfigRobustness, MutatedAndGarbageDocumentsLoadOrThrowConfigError) {
    const std::filesystem::path examples = MSGPASS_CONFIG_EXAMPLES;
    auto read = [](const std::filesystem::path& p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string network = read(examples / "network.yaml");
    const std::string nodes = read(examples / "nodes.yaml");
    ASSERT_FALSE(network.empty());
    ASSERT_FALSE(nodes.empty());
    std::mt19937 random(12345);
    const std::string alphabet = "[]{}:,-&*!|>'\"#%@`? \n\t0123456789abcxyzKiB.\\\x01\xff";
    auto mutate = [&](std::string text) {
        const int edits = 1 + static_cast<int>(random() % 8);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const std::size_t at = random() % text.size();
            switch (random() % 4) {
            case 0:
                text[at] = alphabet[random() % alphabet.size()];
                break;
            case 1:
                text.insert(at, 1, alphabet[random() % alphabet.size()]);
                break;
            case 2:
                text.erase(at, 1 + random() % 20);
                break;
            default:
                text.insert(at, text.substr(random() % text.size(), random() % 40));
                break;
            }
        }
        return text;
    };
    int loaded = 0;
    int refused = 0;
    for (int i = 0; i < 400; ++i) {
        std::string a = network;
        std::string b = nodes;
        if (i % 3 != 1) a = mutate(a);
        if (i % 3 != 0) b = mutate(b);
        if (i % 10 == 9) {
            a.clear();
            for (int k = 0; k < 200; ++k)
                a += alphabet[random() % alphabet.size()];
        }
        try {
            (void)load_text(a, b,
                            i % 5 == 0 ? std::vector<std::string>{mutate("sci.recv_buffer_no=100")}
                                       : std::vector<std::string>{});
            ++loaded;
        } catch (const ConfigError& e) {
            ++refused;
            const auto problems = lines_of(e.what()); // one line per problem, each with its place
            EXPECT_FALSE(problems.empty());
            for (const auto& line : problems) {
                const auto wrong = malformed_line(line, a, b);
                if (!wrong.empty()) {
                    ADD_FAILURE() << wrong << ": " << line << "\nfor:\n" << a << "\n---\n" << b;
                    break;
                }
            }
        } catch (const std::exception& e) {
            ADD_FAILURE() << "unexpected exception " << e.what() << " for:\n" << a << "\n---\n" << b;
        }
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(loaded, 0);
}

} // namespace
} // namespace msgpass::config
