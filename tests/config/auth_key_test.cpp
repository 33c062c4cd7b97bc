// auth_key_file: the key file of an authenticated partition is read and checked at
// load, and every way it can be wrong is an error naming the file and what to do.
#include <msgpass/config.hpp>

#include "../support/environment.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace msgpass::config {
namespace {

const char* const nodes = "nodes:\n  - {id: 1, host: localhost, port: 17001}\n";

// A directory of the test's own, removed at the end.
class KeyDir {
public:
    KeyDir() {
        char name[] = "/tmp/msgpass-auth-key-XXXXXX";
        dir_ = ::mkdtemp(name);
    }
    KeyDir(const KeyDir&) = delete;
    KeyDir& operator=(const KeyDir&) = delete;
    ~KeyDir() { std::filesystem::remove_all(dir_); }
    // Writes a file of these bytes and this mode; returns its path.
    std::filesystem::path file(const std::string& name, const std::string& bytes, mode_t mode = 0600) const {
        const auto path = dir_ / name;
        std::ofstream(path, std::ios::binary) << bytes;
        ::chmod(path.c_str(), mode);
        return path;
    }
    [[nodiscard]] const std::filesystem::path& path() const { return dir_; }

private:
    std::filesystem::path dir_;
};

std::string error_of(const std::string& network, const std::vector<std::string>& overrides = {},
                     const std::string& network_name = "network.yaml") {
    try {
        (void)load_text(network, nodes, overrides, network_name);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

const std::string raw_key(32, '\x5a');
const std::string hex_key = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";

TEST(AuthKeyFile, ARawKeyOfThirtyTwoBytesIsRead) {
    const KeyDir dir;
    const auto file = dir.file("key", raw_key);
    const auto c = load_text("auth_key_file: " + file.string() + "\n", nodes);
    ASSERT_TRUE(c.auth_key.has_value());
    EXPECT_EQ(c.auth_key_file, file);
    for (auto byte : *c.auth_key)
        EXPECT_EQ(byte, 0x5a);
}

TEST(AuthKeyFile, SixtyFourHexadecimalDigitsWithALineBreakAreRead) {
    const KeyDir dir;
    const auto c = load_text("auth_key_file: " + dir.file("key", hex_key).string() + "\n", nodes);
    ASSERT_TRUE(c.auth_key.has_value());
    EXPECT_EQ((*c.auth_key)[0], 0x00);
    EXPECT_EQ((*c.auth_key)[1], 0x11);
    EXPECT_EQ((*c.auth_key)[15], 0xff);
    EXPECT_EQ((*c.auth_key)[31], 0xff);
}

TEST(AuthKeyFile, WithoutTheKeyThereIsNoKey) {
    const auto c = load_text("partition: open\n", nodes);
    EXPECT_FALSE(c.auth_key.has_value());
    EXPECT_TRUE(c.auth_key_file.empty());
}

TEST(AuthKeyFile, ARelativePathIsTakenFromTheNetworkFilesDirectory) {
    const KeyDir dir;
    dir.file("partition.key", raw_key);
    const auto c = load_text("auth_key_file: partition.key\n", nodes, {}, (dir.path() / "network.yaml").string());
    ASSERT_TRUE(c.auth_key.has_value());
    EXPECT_EQ(c.auth_key_file, dir.path() / "partition.key");
}

TEST(AuthKeyFile, ItMayBeGivenBySet) {
    const KeyDir dir;
    const auto file = dir.file("key", raw_key);
    const auto c = load_text("partition: p\n", nodes, {"auth_key_file=" + file.string()});
    EXPECT_TRUE(c.auth_key.has_value());
}

TEST(AuthKeyFile, AFileOthersCanReadIsRefusedWithTheChmodToRun) {
    const KeyDir dir;
    const auto file = dir.file("key", raw_key, 0644);
    const auto error = error_of("partition: p\nauth_key_file: " + file.string() + "\n");
    EXPECT_NE(error.find("network.yaml:2:16: auth_key_file:"), std::string::npos) << error;
    EXPECT_NE(error.find("has mode 0644"), std::string::npos) << error;
    EXPECT_NE(error.find("chmod 600 " + file.string()), std::string::npos) << error;
    EXPECT_EQ(error_of("auth_key_file: " + dir.file("group", raw_key, 0640).string() + "\n").find("mode 0640") ==
                  std::string::npos,
              false);
}

TEST(AuthKeyFile, ReadOnlyForTheOwnerIsAccepted) {
    const KeyDir dir;
    EXPECT_EQ(error_of("auth_key_file: " + dir.file("key", raw_key, 0400).string() + "\n"), "");
}

TEST(AuthKeyFile, AMissingFileADirectoryAndAWrongSizeAreEachNamed) {
    const KeyDir dir;
    const auto missing = error_of("auth_key_file: " + (dir.path() / "nothing").string() + "\n");
    EXPECT_NE(missing.find("cannot be opened: No such file or directory"), std::string::npos) << missing;
    std::filesystem::create_directory(dir.path() / "d");
    ::chmod((dir.path() / "d").c_str(), 0700);
    const auto directory = error_of("auth_key_file: " + (dir.path() / "d").string() + "\n");
    EXPECT_NE(directory.find("is not a regular file"), std::string::npos) << directory;
    const auto short_key = error_of("auth_key_file: " + dir.file("short", std::string(31, 'k')).string() + "\n");
    EXPECT_NE(short_key.find("holds 31 bytes: expected a 32-byte key"), std::string::npos) << short_key;
    const auto bad_hex = error_of("auth_key_file: " + dir.file("hex", std::string(64, 'g')).string() + "\n");
    EXPECT_NE(bad_hex.find("holds 64 bytes: expected a 32-byte key"), std::string::npos) << bad_hex;
    const auto big = error_of("auth_key_file: " + dir.file("big", std::string(4096, 'k')).string() + "\n");
    EXPECT_NE(big.find("holds more than 129 bytes"), std::string::npos) << big;
}

TEST(AuthKeyFile, AFileOfAnotherUserIsRefused) {
    MSGPASS_REQUIRE(::geteuid() == 0,
                    "needs root to give a file to another user; this test runs as uid " << ::geteuid());
    const KeyDir dir;
    const auto file = dir.file("key", raw_key);
    ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
    const auto error = error_of("auth_key_file: " + file.string() + "\n");
    EXPECT_NE(error.find("is owned by uid 65534, not by the user of this process (uid 0)"), std::string::npos) << error;
}

TEST(AuthKeyFile, AnEmptyPathIsAnError) {
    const auto error = error_of("auth_key_file: ''\n");
    EXPECT_NE(error.find("auth_key_file: expected the path of a 32-byte key file, found an empty path"),
              std::string::npos)
        << error;
}

} // namespace
} // namespace msgpass::config
