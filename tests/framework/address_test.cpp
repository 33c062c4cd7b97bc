// Unit tests of msgpass/address.hpp: the address strings of peers found at run time,
// read and written back, and each malformed form refused with what is wrong.
#include <msgpass/address.hpp>

#include <gtest/gtest.h>

#include <string>

namespace msgpass::test {
namespace {

TEST(PeerAddressString, ATcpAddressGivesItsHostAndPortAndIsWrittenBackTheSame) {
    const auto a = parse_address("tcp://server.example:7000");
    EXPECT_EQ(a.technology, "tcp");
    EXPECT_EQ(a.host, "server.example");
    EXPECT_EQ(a.port, 7000);
    EXPECT_EQ(to_string(a), "tcp://server.example:7000");
    const auto v4 = parse_address("udp://127.0.0.1:65535");
    EXPECT_EQ(v4.technology, "udp");
    EXPECT_EQ(v4.host, "127.0.0.1");
    EXPECT_EQ(v4.port, 65535);
}

TEST(PeerAddressString, AnIpv6HostIsInBracketsAndComesBackWithoutThem) {
    const auto a = parse_address("tcp://[::1]:1");
    EXPECT_EQ(a.host, "::1");
    EXPECT_EQ(a.port, 1);
    EXPECT_EQ(to_string(a), "tcp://[::1]:1");
}

// Each malformed address is a UsageError that quotes it and names the fault.
void expect_refused(const std::string& text, const std::string& fault) {
    try {
        (void)parse_address(text);
        ADD_FAILURE() << text << " was accepted";
    } catch (const UsageError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'" + text + "'"), std::string::npos) << what;
        EXPECT_NE(what.find(fault), std::string::npos) << what;
    }
}

TEST(PeerAddressString, EachMalformedFormIsRefusedNamingTheFault) {
    expect_refused("server:7000", "no technology://");
    expect_refused("http://server:7000", "unknown technology 'http'");
    expect_refused("sci://host/3", "sci has no address string");
    expect_refused("tcp://:7000", "no host");
    expect_refused("tcp://server", "no :port");
    expect_refused("tcp://server:", "is not a number");
    expect_refused("tcp://server:70x0", "is not a number");
    expect_refused("tcp://server:0", "port 0 is not from 1 to 65535");
    expect_refused("tcp://server:65536", "port 65536 is not from 1 to 65535");
    expect_refused("tcp://server:99999999999", "is not a number");
    expect_refused("tcp://[::1:7000", "'[' without ']'");
    expect_refused("tcp://[::1]7000", "no :port");
    expect_refused("tcp://::1:7000", "must be in brackets");
    expect_refused("tcp://a/b:7000", "a host with a space");
}

} // namespace
} // namespace msgpass::test
