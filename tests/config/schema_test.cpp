// Tests of how a technology registers with the configuration (msgpass/config/schema.hpp):
// `technology:` accepts only registered names, and a registered technology's sections
// (top level, node scope, machine) are read by its own options struct, through the
// readers of the generic reader, with every problem reported at file:line:column.
// A fake technology is registered for the length of a test (ScopedSchema).
#include <msgpass/config/schema.hpp>

#include <msgpass/config.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/tcp/options.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <map>

namespace msgpass::config {
namespace {

using std::chrono::milliseconds;

const std::string two_nodes = "nodes:\n  - {id: 1}\n  - {id: 2}\n";

std::string errors_of(const std::string& network, const std::string& nodes = two_nodes,
                      const std::vector<std::string>& overrides = {}) {
    try {
        (void)load_text(network, nodes, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

// Registers a schema for the length of a test.
class ScopedSchema {
public:
    explicit ScopedSchema(TechnologySchema schema) : name_(schema.name) {
        SchemaRegistry::instance().add(std::move(schema));
    }
    ~ScopedSchema() { SchemaRegistry::instance().remove(name_); }
    ScopedSchema(const ScopedSchema&) = delete;
    ScopedSchema& operator=(const ScopedSchema&) = delete;

private:
    std::string name_;
};

// The section of a made-up technology, with a key of each kind the reader offers.
struct FakeOptions {
    std::uint64_t window = 16;
    std::uint64_t frame = 4 * KiB;
    milliseconds linger{100};
    bool fast = false;
    double share = 0.5;
    std::string mode = "plain";
    std::uint64_t low = 1;
    std::uint64_t high = 10;

    static const std::vector<std::string>& keys() {
        static const std::vector<std::string> list = {"window", "frame", "linger", "fast",
                                                      "share",  "mode",  "low",    "high"};
        return list;
    }
    void set(const std::string& key, const Value& v) {
        if (key == "window") {
            if (auto n = v.integer(1, 1024)) window = *n;
        } else if (key == "frame") {
            if (auto n = v.size(64 * KiB)) frame = *n;
        } else if (key == "linger") {
            if (auto d = v.duration(milliseconds(10), std::chrono::minutes(1))) linger = *d;
        } else if (key == "fast") {
            if (auto b = v.boolean()) fast = *b;
        } else if (key == "share") {
            if (auto x = v.number("a share from 0 to 1")) {
                if (*x < 0 || *x > 1) {
                    v.report("a share from 0 to 1");
                } else {
                    share = *x;
                }
            }
        } else if (key == "mode") {
            if (auto text = v.text("plain or framed")) {
                if (*text != "plain" && *text != "framed") {
                    v.report("plain or framed");
                } else {
                    mode = *text;
                }
            }
        } else if (key == "low") {
            if (auto n = v.integer(0, 100)) low = *n;
        } else if (key == "high") {
            if (auto n = v.integer(0, 100)) high = *n;
        }
    }
    void check(const Value& section) const {
        if (low > high) {
            section.report_key("low", "low <= high (" + std::to_string(high) + ")", "low " + std::to_string(low));
        }
    }
};

struct FakeMachineOptions {
    std::string rack;
    Location rack_at; // for the rule over all machines
    static const std::vector<std::string>& keys() {
        static const std::vector<std::string> list = {"rack"};
        return list;
    }
    void set(const std::string& key, const Value& v) {
        if (key == "rack") {
            if (auto text = v.text("a rack name")) rack = *text;
            rack_at = v.location();
        }
    }
};

// A rule over all machines, as the SCI node id of a machine must be its own.
void one_machine_per_rack(const Configuration& c, const Reporter& reporter) {
    std::map<std::string, const Machine*> first;
    for (const auto& m : c.machines) {
        const auto& options = m.section<FakeMachineOptions>();
        if (options.rack.empty()) continue;
        const auto [it, fresh] = first.emplace(options.rack, &m);
        if (!fresh) {
            reporter.report(options.rack_at, "machines." + m.name + ".fake.rack",
                            "a rack of one machine only (machine '" + it->second->name + "' has it)",
                            "'" + options.rack + "'");
        }
    }
}

TechnologySchema fake_schema() {
    return TechnologySchema("fake")
        .with_section(SectionType::of<FakeOptions>("a mapping of fake settings"))
        .with_node_scope()
        .with_machine_section(SectionType::of<FakeMachineOptions>("a mapping of fake machine settings"))
        .with_check(one_machine_per_rack);
}

TEST(TechnologyNames, AnUnregisteredTechnologyIsRefusedAtItsPlaceListingTheRegisteredOnes) {
    // Nothing registers myrinet: an unknown name used to pass validation and fail in
    // NodeFactory::create.
    ASSERT_FALSE(SchemaRegistry::instance().contains("myrinet"));
    const auto names = SchemaRegistry::instance().names();
    std::string listed;
    for (const auto& n : names)
        listed += (listed.empty() ? "" : ", ") + n;
    EXPECT_EQ(listed, "auto, sci, tcp, udp");
    EXPECT_EQ(errors_of("partition: p\ntechnology: myrinet\n"),
              "network.yaml:2:13: technology: expected one of auto, sci, tcp, udp, found 'myrinet'");
    EXPECT_EQ(errors_of("", two_nodes, {"technology=MYRINET"}),
              "--set:0:0: technology: expected one of auto, sci, tcp, udp, found 'MYRINET'");
}

TEST(TechnologyNames, ATechnologyIsAcceptedOnceItRegistersAndRefusedAgainWhenItLeaves) {
    {
        const ScopedSchema gm(TechnologySchema("gm"));
        EXPECT_EQ(load_text("technology: gm\n", two_nodes).technology, "gm");
        EXPECT_EQ(errors_of("technology: carrier-pigeon\n"),
                  "network.yaml:1:13: technology: expected one of auto, gm, sci, tcp, udp, found 'carrier-pigeon'");
    }
    EXPECT_EQ(errors_of("technology: gm\n"),
              "network.yaml:1:13: technology: expected one of auto, sci, tcp, udp, found 'gm'");
}

TEST(TechnologyNames, NamesThatAreNotLowerCaseNamesOrThatAreKeysOfTheFilesCannotRegister) {
    for (const char* bad :
         {"", "Fake", "two words", "a.b", "partition", "groups", "technology", "port", "id", "command"}) {
        EXPECT_THROW(SchemaRegistry::instance().add(TechnologySchema(bad)), UsageError) << bad;
        EXPECT_FALSE(SchemaRegistry::instance().contains(bad)) << bad;
    }
    EXPECT_THROW(SchemaRegistry::instance().add(TechnologySchema("scoped").with_node_scope()), UsageError);
    EXPECT_FALSE(SchemaRegistry::instance().contains("scoped"));
}

TEST(TechnologySections, ARegisteredSectionIsReadByItsOwnOptionsAtEveryScope) {
    const ScopedSchema fake(fake_schema());
    const auto c = load_text("technology: fake\n"
                             "fake:\n"
                             "  window: 0x20\n"
                             "  frame: 8KiB\n"
                             "  linger: 2.5s\n"
                             "  fast: yes\n"
                             "  share: 0.25\n"
                             "  mode: framed\n",
                             "machines:\n"
                             "  m1: {fake: {rack: r7}}\n"
                             "nodes:\n"
                             "  - {id: 1, machine: m1, fake: {window: 3}}\n"
                             "  - {id: 2}\n",
                             {"fake.linger=20ms"});
    EXPECT_EQ(c.technology, "fake");
    const auto& top = c.section<FakeOptions>();
    EXPECT_EQ(top.window, 32u);
    EXPECT_EQ(top.frame, 8 * KiB);
    EXPECT_EQ(top.linger, milliseconds(20)); // the override wins over the file
    EXPECT_TRUE(top.fast);
    EXPECT_EQ(top.share, 0.25);
    EXPECT_EQ(top.mode, "framed");
    // A node's own key overrides that one key of the top level.
    EXPECT_EQ(c.section<FakeOptions>(c.node(1)).window, 3u);
    EXPECT_EQ(c.section<FakeOptions>(c.node(1)).frame, 8 * KiB);
    EXPECT_EQ(c.section<FakeOptions>(c.node(2)).window, 32u);
    ASSERT_NE(c.find_machine("m1"), nullptr);
    EXPECT_EQ(c.find_machine("m1")->section<FakeMachineOptions>().rack, "r7");
    // A section nobody wrote holds the defaults.
    EXPECT_EQ(load_text("", two_nodes).section<FakeOptions>().window, 16u);
}

TEST(TechnologySections, SectionsAreCopiedWithTheConfigurationAndEditedInCode) {
    const ScopedSchema fake(fake_schema());
    auto c = load_text("fake: {window: 5}\n", two_nodes);
    auto copy = c;
    copy.edit_section<FakeOptions>().window = 6;
    EXPECT_EQ(c.section<FakeOptions>().window, 5u);
    EXPECT_EQ(copy.section<FakeOptions>().window, 6u);
    EXPECT_EQ(copy.section<FakeOptions>(copy.node(2)).window, 6u); // a node without its own follows
    Configuration built;                                           // in code, nothing loaded
    EXPECT_EQ(built.section<FakeOptions>().window, 16u);
}

TEST(TechnologySections, AnUnknownKeyInASectionIsReportedAtItsPlace) {
    const ScopedSchema fake(fake_schema());
    EXPECT_EQ(errors_of("fake:\n  windw: 3\n"),
              "network.yaml:2:3: fake.windw: expected a known key (did you mean 'window'? known: window, frame, "
              "linger, fast, share, mode, low, high), found unknown key 'windw'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, fake: {colour: red}}\n"),
              "nodes.yaml:2:20: nodes[0].fake.colour: expected a known key (known: window, frame, linger, fast, "
              "share, mode, low, high), found unknown key 'colour'");
    EXPECT_EQ(errors_of("", "machines:\n  m: {fake: {rak: 1}}\nnodes: [{id: 1}]\n"),
              "nodes.yaml:2:14: machines.m.fake.rak: expected a known key (did you mean 'rack'? known: rack), found "
              "unknown key 'rak'");
    EXPECT_EQ(errors_of("", two_nodes, {"fake.windw=3"})
                  .rfind("--set:0:0: fake.windw: expected a known key (did you mean 'window'?", 0),
              0u);
    // A key of the section written at the top level is pointed to its place.
    EXPECT_EQ(errors_of("linger: 1s\n")
                  .rfind("network.yaml:1:1: linger: expected a known key (did you mean 'fake.linger'? known: "
                         "partition, technology, max_message_size, peer_timeout, send_queue_limit, groups, "
                         "auth_key_file, comm, log, auto, fake, sci",
                         0),
              0u);
}

TEST(TechnologySections, WrongValuesAreReportedByTheReadersWithWhatWasExpected) {
    const ScopedSchema fake(fake_schema());
    EXPECT_EQ(errors_of("fake:\n  window: 0\n"),
              "network.yaml:2:11: fake.window: expected an integer from 1 to 1024, found '0'");
    EXPECT_EQ(errors_of("fake: {frame: 1MiB}\n"),
              "network.yaml:1:15: fake.frame: expected a size from 1 byte to 64KiB, found '1MiB'");
    EXPECT_EQ(errors_of("fake: {linger: 5ms}\n"),
              "network.yaml:1:16: fake.linger: expected a duration from 10ms to 1 min such as 500ms, 2.5s or 1000 "
              "(milliseconds), found '5ms'");
    EXPECT_EQ(errors_of("fake: {fast: maybe}\n"),
              "network.yaml:1:14: fake.fast: expected a boolean (true, false, or a number: 0 is false), found 'maybe'");
    EXPECT_EQ(errors_of("fake: {share: 1.5}\n"),
              "network.yaml:1:15: fake.share: expected a share from 0 to 1, found '1.5'");
    EXPECT_EQ(errors_of("fake: {mode: [a]}\n"), "network.yaml:1:14: fake.mode: expected plain or framed, found a list");
    EXPECT_EQ(errors_of("fake: 3\n"), "network.yaml:1:7: fake: expected a mapping of fake settings, found '3'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, fake: {window: many}}\n"),
              "nodes.yaml:2:28: nodes[0].fake.window: expected an integer from 1 to 1024, found 'many'");
}

TEST(TechnologySections, RulesOverSeveralKeysAreReportedAtTheSection) {
    const ScopedSchema fake(fake_schema());
    EXPECT_EQ(errors_of("fake:\n  low: 5\n  high: 4\n"),
              "network.yaml:2:3: fake.low: expected low <= high (4), found low 5");
    // The node's resolved section is checked where the node writes it.
    EXPECT_EQ(errors_of("fake: {high: 4}\n", "nodes:\n  - {id: 1, fake: {low: 5}}\n"),
              "nodes.yaml:2:19: nodes[0].fake.low: expected low <= high (4), found low 5");
    // Set only by an override: reported at --set under the section's name.
    EXPECT_EQ(errors_of("", two_nodes, {"fake.low=50", "fake.high=40"}),
              "--set:0:0: fake.low: expected low <= high (40), found low 50");
}

TEST(TechnologySections, ARuleOverAllMachinesIsReportedAtTheValueItNamesInFileOrder) {
    const ScopedSchema fake(fake_schema());
    EXPECT_EQ(errors_of("partition: 'a b'\n", "machines:\n"
                                              "  m1: {fake: {rack: r7}}\n"
                                              "  m2: {fake: {rack: r7}}\n"
                                              "nodes: [{id: 1, port: 70000}]\n"),
              "network.yaml:1:12: partition: expected a partition name of 1 to 64 characters [A-Za-z0-9_.-], found "
              "'a b'\n"
              "nodes.yaml:3:21: machines.m2.fake.rack: expected a rack of one machine only (machine 'm1' has it), "
              "found 'r7'\n"
              "nodes.yaml:4:23: nodes[0].port: expected a port from 0 to 65535, found '70000'");
    EXPECT_EQ(errors_of("", "machines:\n  m1: {fake: {rack: r7}}\n  m2: {fake: {rack: r8}}\nnodes: [{id: 1}]\n"), "");
}

TEST(TechnologySections, ATechnologyWithoutASectionOrNodeScopeHasNoKey) {
    const ScopedSchema plain(TechnologySchema("plain"));
    const ScopedSchema top_only(TechnologySchema("toponly").with_section(SectionType::of<FakeOptions>("a mapping")));
    EXPECT_EQ(load_text("technology: plain\n", two_nodes).technology, "plain");
    EXPECT_NE(errors_of("plain: {}\n").find("network.yaml:1:1: plain: expected a known key"), std::string::npos);
    EXPECT_NE(errors_of("", "nodes:\n  - {id: 1, toponly: {window: 2}}\n")
                  .find("nodes.yaml:2:13: nodes[0].toponly: expected a known key"),
              std::string::npos);
    EXPECT_NE(errors_of("", "machines:\n  m: {toponly: {}}\nnodes: [{id: 1}]\n")
                  .find("nodes.yaml:2:7: machines.m.toponly: expected a known key (known: sci)"),
              std::string::npos);
}

TEST(BuiltinSections, TheTcpSectionIsReadByTcpOptionsAndHasNoNodeScope) {
    const auto c = load_text("technology: tcp\ntcp:\n  handshake_timeout: 250ms\n  ack_every: 16\n", two_nodes,
                             {"tcp.ack_bytes=1MiB"});
    const auto& tcp = c.section<tcp::Options>();
    EXPECT_EQ(tcp.handshake_timeout, milliseconds(250));
    EXPECT_EQ(tcp.ack_every, 16u);
    EXPECT_EQ(tcp.ack_bytes, MiB);
    EXPECT_EQ(load_text("", two_nodes).section<tcp::Options>().handshake_timeout, std::nullopt);
    EXPECT_EQ(errors_of("tcp: {ack_every: 0}\n"),
              "network.yaml:1:18: tcp.ack_every: expected an integer from 1 to 65536, found '0'");
    EXPECT_EQ(errors_of("tcp: {handshake_timeout: 2 min}\n"),
              "network.yaml:1:26: tcp.handshake_timeout: expected a duration from 1ms to 1 min such as 500ms, 2.5s or "
              "1000 (milliseconds), found '2 min'");
    EXPECT_EQ(errors_of("", "nodes:\n  - {id: 1, tcp: {ack_every: 2}}\n"),
              "nodes.yaml:2:13: nodes[0].tcp: expected a known key (did you mean 'sci'? known: id, name, host, port, "
              "machine, command, sci), found unknown key 'tcp'");
}

TEST(BuiltinSections, TheSciSectionAndMachineNodeIdAreReadBySciOptions) {
    const auto c =
        load_text("sci: {recv_buffer_no: 63}\n", "machines:\n  pc: {sci: {node_id: 12}}\n"
                                                 "nodes:\n  - {id: 1, machine: pc, sci: {max_outst_buffers: 3}}\n"
                                                 "  - {id: 2}\n");
    EXPECT_EQ(c.section<sci::Options>().recv_buffer_no, 63u);
    EXPECT_EQ(c.section<sci::Options>(c.node(1)).max_outst_buffers, 3u);
    EXPECT_EQ(c.section<sci::Options>(c.node(1)).recv_buffer_no, 63u);
    EXPECT_EQ(c.section<sci::Options>(c.node(2)).max_outst_buffers, 1u);
    EXPECT_EQ(c.find_machine("pc")->section<sci::MachineOptions>().node_id, 12u);
    EXPECT_EQ(load_text("", "machines: {pc: {}}\nnodes: [{id: 1}]\n")
                  .find_machine("pc")
                  ->section<sci::MachineOptions>()
                  .node_id,
              std::nullopt);
}

} // namespace
} // namespace msgpass::config
