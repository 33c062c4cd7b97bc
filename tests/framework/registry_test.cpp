// Unit tests of msgpass/node_factory.hpp: the TechnologyRegistry with fake
// technologies, and NodeFactory::create's errors for an unknown technology and
// for an own id that is not in the nodes file.
#include <msgpass/node_factory.hpp>

#include "../support/partition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace msgpass::test {
namespace {

// A factory of a fake technology that only remembers who made it.
class FakeFactory final : public NodeFactory {
public:
    FakeFactory(std::string technology, NodeId self, std::string maker)
        : technology_(std::move(technology)), self_(self), maker_(std::move(maker)) {}

    [[nodiscard]] std::string_view technology() const noexcept override { return technology_; }
    [[nodiscard]] NodeId self_id() const noexcept override { return self_; }
    NodePtr create_node(NodeId) override { throw UsageError("fake technology makes no nodes"); }
    BufferPtr create_buffer(std::size_t size) override { return std::make_unique<HeapBuffer>(size); }
    std::unique_ptr<DynamicGroup> create_group() override { return std::make_unique<BasicGroup>(); }
    std::shared_ptr<Group> create_group(const std::string& name) override {
        throw ConfigError("no group named '" + name + "'");
    }
    bool flush(std::chrono::nanoseconds) override { return true; }

    [[nodiscard]] const std::string& maker() const { return maker_; }

private:
    std::string technology_;
    NodeId self_;
    std::string maker_;
};

TechnologyRegistry::Maker fake_maker(const std::string& technology, const std::string& tag) {
    return [technology, tag](const config::Configuration&, NodeId self) {
        return std::make_unique<FakeFactory>(technology, self, tag);
    };
}

config::Configuration one_node(const std::string& technology) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return make_configuration(technology, unique_partition(info->name()), 1);
}

bool has(const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(TechnologyRegistry, AddedTechnologiesAreListedInAlphabeticalOrder) {
    auto& registry = TechnologyRegistry::instance();
    registry.add("fake-zeta", fake_maker("fake-zeta", "z"));
    registry.add("fake-alpha", fake_maker("fake-alpha", "a"));
    EXPECT_TRUE(registry.contains("fake-zeta"));
    EXPECT_TRUE(registry.contains("fake-alpha"));
    EXPECT_FALSE(registry.contains("fake-never-added"));
    const auto names = registry.names();
    EXPECT_TRUE(has(names, "fake-alpha"));
    EXPECT_TRUE(has(names, "fake-zeta"));
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(TechnologyRegistry, CreateCallsTheMakerOfTheNamedTechnologyWithTheOwnId) {
    auto& registry = TechnologyRegistry::instance();
    registry.add("fake-make", fake_maker("fake-make", "first"));
    auto factory = registry.create("fake-make", one_node("fake-make"), 1);
    ASSERT_NE(factory, nullptr);
    EXPECT_EQ(factory->technology(), "fake-make");
    EXPECT_EQ(factory->self_id(), 1u);
}

TEST(TechnologyRegistry, AddReplacesAnExistingMakerAndReportsItWasNotNew) {
    // The registry lives as long as the process: a fresh name on every run of the test.
    static int run = 0;
    const std::string name = "fake-replaced-" + std::to_string(++run);
    auto& registry = TechnologyRegistry::instance();
    EXPECT_TRUE(registry.add(name, fake_maker(name, "old")));
    EXPECT_FALSE(registry.add(name, fake_maker(name, "new")));
    auto factory = registry.create(name, one_node(name), 1);
    auto* fake = dynamic_cast<FakeFactory*>(factory.get());
    ASSERT_NE(fake, nullptr);
    EXPECT_EQ(fake->maker(), "new");
    const auto names = registry.names();
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 1);
}

TEST(TechnologyRegistry, CreateWithAnUnknownNameThrowsUnknownTechnologyListingTheKnownOnes) {
    auto& registry = TechnologyRegistry::instance();
    registry.add("fake-a", fake_maker("fake-a", "a"));
    registry.add("fake-b", fake_maker("fake-b", "b"));
    try {
        (void)registry.create("fake-missing", one_node("fake-missing"), 1);
        ADD_FAILURE() << "create did not throw";
    } catch (const UnknownTechnology& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'fake-missing'"), std::string::npos) << what;
        EXPECT_NE(what.find("fake-a"), std::string::npos) << what;
        EXPECT_NE(what.find("fake-b"), std::string::npos) << what;
    }
}

TEST(NodeFactory, CreateWithAnUnknownTechnologyThrowsUnknownTechnologyListingSci) {
    auto configuration = one_node("nonexistent");
    try {
        (void)NodeFactory::create(configuration, 1);
        ADD_FAILURE() << "create did not throw";
    } catch (const UnknownTechnology& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'nonexistent'"), std::string::npos) << what;
        EXPECT_NE(what.find("sci"), std::string::npos) << what;
    }
}

TEST(NodeFactory, CreateForAnIdAbsentFromTheNodesFileThrowsConfigError) {
    auto configuration = one_node("sci");
    try {
        (void)NodeFactory::create(configuration, 2);
        ADD_FAILURE() << "create did not throw";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("nodes.yaml"), std::string::npos) << what;
        EXPECT_NE(what.find('2'), std::string::npos) << what;
    }
}

} // namespace
} // namespace msgpass::test
