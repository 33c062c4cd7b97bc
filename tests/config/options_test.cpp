// Tests of the command line (parse_command_line) and of how a process finds its own
// node id (resolve_self_id): --node-id, MSGPASS_NODE_ID, then the rank variables of
// mpirun/srun taken as an index into the nodes file. The environment is saved and
// restored around each test.
#include <msgpass/config.hpp>

#include <msgpass/sci/options.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <unistd.h>

namespace msgpass::config {
namespace {

const std::vector<const char*> launcher_variables = {"MSGPASS_NODE_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                     "SLURM_PROCID",    "MSGPASS_CONFIG",       "MSGPASS_NODES",
                                                     "MSGPASS_SET"};

// Clears the launcher's variables for the test and puts the old values back after it.
class Environment : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* name : launcher_variables) {
            if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
            ::unsetenv(name);
        }
    }
    void TearDown() override {
        for (const char* name : launcher_variables)
            ::unsetenv(name);
        for (const auto& [name, value] : saved_)
            ::setenv(name.c_str(), value.c_str(), 1);
    }
    static void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

    static std::string error_of(const std::function<void()>& call) {
        try {
            call();
        } catch (const ConfigError& e) {
            return e.what();
        }
        return "";
    }

private:
    std::vector<std::pair<std::string, std::string>> saved_;
};

// nodes in file order 10, 20, 30: ranks 0, 1, 2.
Configuration three_nodes() {
    return load_text("", "nodes:\n  - {id: 10}\n  - {id: 20}\n  - {id: 30}\n");
}

class SelfId : public Environment {};

TEST_F(SelfId, CommandLineWinsOverEnvironment) {
    set("MSGPASS_NODE_ID", "20");
    set("OMPI_COMM_WORLD_RANK", "2");
    EXPECT_EQ(resolve_self_id(three_nodes(), NodeId{10}), 10u);
    EXPECT_EQ(resolve_self_id(three_nodes(), std::nullopt), 20u);
}

TEST_F(SelfId, LauncherRankIsAnIndexIntoTheNodesFile) {
    set("OMPI_COMM_WORLD_RANK", "2");
    EXPECT_EQ(resolve_self_id(three_nodes(), std::nullopt), 30u);
    ::unsetenv("OMPI_COMM_WORLD_RANK");
    set("PMI_RANK", "1");
    EXPECT_EQ(resolve_self_id(three_nodes(), std::nullopt), 20u);
    ::unsetenv("PMI_RANK");
    set("SLURM_PROCID", "0");
    EXPECT_EQ(resolve_self_id(three_nodes(), std::nullopt), 10u);
}

TEST_F(SelfId, ErrorsNameTheSourceOfTheValue) {
    const auto c = three_nodes();
    EXPECT_EQ(error_of([&] { (void)resolve_self_id(c, std::nullopt); }),
              "environment:0:0: node id: expected --node-id, MSGPASS_NODE_ID or a launcher rank "
              "(OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID), found nothing");
    EXPECT_EQ(error_of([&] { (void)resolve_self_id(c, NodeId{11}); }),
              "--node-id:0:0: --node-id: expected a node id of nodes.yaml (10, 20, 30), found '11'");
    set("MSGPASS_NODE_ID", "ten");
    EXPECT_EQ(error_of([&] { (void)resolve_self_id(c, std::nullopt); }),
              "MSGPASS_NODE_ID:0:0: MSGPASS_NODE_ID: expected a node id of nodes.yaml (10, 20, 30), found 'ten'");
    set("MSGPASS_NODE_ID", "15");
    EXPECT_NE(error_of([&] { (void)resolve_self_id(c, std::nullopt); }).find("found '15'"), std::string::npos);
    ::unsetenv("MSGPASS_NODE_ID");
    set("SLURM_PROCID", "3");
    EXPECT_EQ(error_of([&] { (void)resolve_self_id(c, std::nullopt); }),
              "SLURM_PROCID:0:0: SLURM_PROCID: expected a rank from 0 to 2 (an index into nodes.yaml), found '3'");
    set("SLURM_PROCID", "-1");
    EXPECT_NE(error_of([&] { (void)resolve_self_id(c, std::nullopt); }).find("SLURM_PROCID:0:0"), std::string::npos);
}

// Files in a private directory, removed after the test.
class CommandLine : public Environment {
protected:
    void SetUp() override {
        Environment::SetUp();
        std::string pattern = (std::filesystem::temp_directory_path() / "msgpass-options-XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
        network_ = write("network.yaml", "partition: cli\nsci: {recv_buffer_no: 10}\n");
        nodes_ = write("nodes.yaml", "nodes:\n  - {id: 1}\n  - {id: 2}\n");
    }
    void TearDown() override {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
        Environment::TearDown();
    }
    std::string write(const std::string& name, const std::string& text) {
        std::ofstream(dir_ / name) << text;
        return (dir_ / name).string();
    }
    static Options parse(std::vector<std::string> arguments) {
        std::vector<const char*> argv = {"program"};
        for (const auto& a : arguments)
            argv.push_back(a.c_str());
        return parse_command_line(static_cast<int>(argv.size()), argv.data());
    }

    std::filesystem::path dir_;
    std::string network_;
    std::string nodes_;
};

TEST_F(CommandLine, OptionsAreReadAndTheRestIsLeftInOrder) {
    const auto o = parse({"-v", "--config", network_, "input.dat", "--nodes=" + nodes_, "--node-id", "2", "--set",
                          "sci.recv_buffer_no=20", "--rate=5", "--", "--config", "x"});
    EXPECT_EQ(o.configuration.partition, "cli");
    EXPECT_EQ(o.configuration.section<sci::Options>().recv_buffer_no, 20u);
    EXPECT_EQ(o.self, 2u);
    EXPECT_EQ(o.rest, (std::vector<std::string>{"-v", "input.dat", "--rate=5", "--config", "x"}));
}

TEST_F(CommandLine, EnvironmentGivesDefaultsAndSetLinesApplyBeforeCommandLineOnes) {
    set("MSGPASS_CONFIG", network_);
    set("MSGPASS_NODES", nodes_);
    set("MSGPASS_NODE_ID", "1");
    set("MSGPASS_SET", "partition=from-env\nsci.recv_buffer_no=30\r\n\ntechnology=tcp\n");
    const auto o = parse({"--set", "partition=from-cli"});
    EXPECT_EQ(o.self, 1u);
    EXPECT_EQ(o.configuration.partition, "from-cli");
    EXPECT_EQ(o.configuration.technology, "tcp");
    EXPECT_EQ(o.configuration.section<sci::Options>().recv_buffer_no, 30u);
    EXPECT_TRUE(o.rest.empty());
    EXPECT_EQ(o.configuration.network_file, network_);
}

TEST_F(CommandLine, WithoutAnIdSourceSelfIsZero) {
    const auto o = parse({"--config", network_, "--nodes", nodes_});
    EXPECT_EQ(o.self, 0u);
}

TEST_F(CommandLine, MalformedOptionsAndFilesThrowConfigError) {
    EXPECT_EQ(error_of([&] {
                  (void)parse({"--config", network_, "--nodes", nodes_, "--node-id", "x1"});
              }),
              "--node-id:0:0: --node-id: expected a node id from 1 to 2147483647, found 'x1'");
    EXPECT_EQ(error_of([&] {
                  (void)parse({"--config", network_, "--nodes", nodes_, "--node-id", "3"});
              }),
              "--node-id:0:0: --node-id: expected a node id of " + nodes_ + " (1, 2), found '3'");
    EXPECT_NE(error_of([&] {
                  (void)parse({"--config", network_, "--nodes", nodes_, "--node-id"});
              }).rfind("command line:0:0: options: expected valid msgpass options", 0),
              std::string::npos);
    EXPECT_EQ(error_of([&] {
                  (void)parse({"--config", network_, "--nodes", nodes_, "--set", "sci.recv_buffer_no=0"});
              }),
              "--set:0:0: sci.recv_buffer_no: expected an integer from 1 to 4294967295, found '0'");
    const auto missing = (dir_ / "none.yaml").string();
    EXPECT_EQ(error_of([&] {
                  (void)parse({"--config", missing, "--nodes", nodes_});
              }),
              missing + ":0:0: file: expected a readable YAML file, found No such file or directory");
    // Defaults are relative: network.yaml in the working directory, absent here.
    const auto cwd = std::filesystem::current_path();
    std::filesystem::create_directory(dir_ / "empty");
    std::filesystem::current_path(dir_ / "empty");
    const auto what = error_of([&] { (void)parse({}); });
    std::filesystem::current_path(cwd);
    EXPECT_NE(what.find("network.yaml:0:0: file: expected a readable YAML file"), std::string::npos) << what;
}

// The usage goes to stdout; the death test matches its pattern against stderr, so
// the child sends stdout there first. Every msgpass option is listed.
TEST_F(CommandLine, HelpPrintsUsageAndExitsWithZero) {
    EXPECT_EXIT(
        {
            ::dup2(STDERR_FILENO, STDOUT_FILENO);
            parse({"--help"});
        },
        ::testing::ExitedWithCode(0), "Usage: .*--config .*--nodes .*--node-id .*--set .*--help ");
}

TEST_F(CommandLine, NoArgumentsAtAllIsNotACrash) {
    set("MSGPASS_CONFIG", network_);
    set("MSGPASS_NODES", nodes_);
    const auto o = parse_command_line(0, nullptr);
    EXPECT_EQ(o.configuration.partition, "cli");
}

} // namespace
} // namespace msgpass::config
