// The library's logger (msgpass/log.hpp): levels per subsystem from a settings text
// (MSGPASS_LOG's syntax) and from a configuration's `log:` section through a factory,
// lines written to a file with their level and subsystem, nothing below the level.
#include "../support/partition.hpp"

#include <msgpass/config/log_options.hpp>
#include <msgpass/error.hpp>
#include <msgpass/log.hpp>
#include <msgpass/msgpass.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace msgpass;

namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Leaves the logger as a process starts: info to stderr.
struct RestoreLog {
    ~RestoreLog() { log::configure("", ""); }
};

std::filesystem::path temp_log(const std::string& name) {
    auto path = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".log");
    std::filesystem::remove(path);
    return path;
}

} // namespace

TEST(Log, ASettingsTextSetsALevelForAllThenPerSubsystemAndLinesBelowItAreNotWritten) {
    RestoreLog restore;
    const auto path = temp_log("msgpass-log-test");
    log::configure("warn,tcp=debug", path.string());
    EXPECT_TRUE(log::enabled(log::Subsystem::tcp, log::Level::debug));
    EXPECT_FALSE(log::enabled(log::Subsystem::tcp, log::Level::trace));
    EXPECT_FALSE(log::enabled(log::Subsystem::udp, log::Level::info));
    EXPECT_TRUE(log::enabled(log::Subsystem::udp, log::Level::warn));
    MSGPASS_LOG(tcp, debug, "a connection event " + std::to_string(42));
    MSGPASS_LOG(udp, info, std::string("not written: below warn"));
    MSGPASS_LOG(sci, error, "a refusal");
    const std::string text = read_file(path);
    EXPECT_NE(text.find("[debug] tcp: a connection event 42"), std::string::npos) << text;
    EXPECT_NE(text.find("[error] sci: a refusal"), std::string::npos) << text;
    EXPECT_EQ(text.find("not written"), std::string::npos) << text;
    std::filesystem::remove(path);
    // Off is off; a wrong part is named.
    log::configure("off", "");
    EXPECT_FALSE(log::enabled(log::Subsystem::framework, log::Level::error));
    try {
        log::configure("warn,tpc=debug", "");
        ADD_FAILURE() << "a wrong subsystem was taken";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("'tpc=debug'"), std::string::npos) << e.what();
    }
    try {
        log::configure("loud", "");
        ADD_FAILURE() << "a wrong level was taken";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("'loud'"), std::string::npos) << e.what();
    }
    EXPECT_THROW(log::configure("info", "/dev/null/x.log"), UsageError) << "a file under a file";
}

TEST(Log, AFactoryAppliesItsConfigurationsLogSection) {
    RestoreLog restore;
    ::unsetenv("MSGPASS_LOG"); // they would override the configuration
    ::unsetenv("MSGPASS_LOG_FILE");
    const auto path = temp_log("msgpass-log-factory");
    register_builtin_technologies();
    auto c =
        test::make_configuration("sci", "log-test-" + std::to_string(::getpid()), 2, [&](config::Configuration& c) {
            auto& o = c.edit_section<config::LogOptions>();
            o.level = "error";
            o.subsystems["comm"] = "trace";
            o.file = path.string();
        });
    auto factory = NodeFactory::create(c, 1);
    EXPECT_FALSE(log::enabled(log::Subsystem::sci, log::Level::warn));
    EXPECT_TRUE(log::enabled(log::Subsystem::comm, log::Level::trace));
    MSGPASS_LOG(comm, trace, std::string("through the factory's configuration"));
    EXPECT_NE(read_file(path).find("[trace] comm: through the factory's configuration"), std::string::npos);
    factory.reset();
    std::filesystem::remove(path);
}
