// Unit tests of msgpass/ip/socket.hpp: resolution of a nodes file's host and port,
// non-blocking sockets, the listening socket, and addresses named as host:port in
// every error.
#include <msgpass/ip/socket.hpp>

#include <msgpass/error.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cerrno>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string>
#include <unistd.h>

namespace msgpass::ip {
namespace {

// The port a bound socket got.
std::uint16_t bound_port(int fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0) << errno_text(errno);
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

TEST(Resolve, ANumericIPv4AddressGivesItsFamilyPortAndHostPortText) {
    const Address a = resolve("127.0.0.1", 17001, SOCK_STREAM, false, "nodes.yaml:3:5: nodes.1.host");
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a.family(), AF_INET);
    EXPECT_EQ(a.length, sizeof(sockaddr_in));
    const auto* in = reinterpret_cast<const sockaddr_in*>(a.get());
    EXPECT_EQ(ntohs(in->sin_port), 17001);
    EXPECT_EQ(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);
    EXPECT_EQ(a.text, "127.0.0.1:17001");
}

TEST(Resolve, ANumericIPv6AddressGivesAnIPv6Address) {
    const Address a = resolve("::1", 17002, SOCK_DGRAM, false, "here");
    EXPECT_EQ(a.family(), AF_INET6);
    EXPECT_EQ(a.text, "::1:17002");
    EXPECT_EQ(address_text(a.storage), "::1:17002");
}

// "Bad input gets a clear error naming what was wrong and where."
TEST(Resolve, AHostThatDoesNotResolveIsAConfigErrorNamingWhereAndTheHost) {
    try {
        (void)resolve("no such host!", 17001, SOCK_STREAM, false, "nodes.yaml:7:9: nodes.4.host");
        FAIL() << "an unresolvable host was accepted";
    } catch (const ConfigError& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.rfind("nodes.yaml:7:9: nodes.4.host: 'no such host!' does not resolve: ", 0), 0u) << what;
    }
}

TEST(Resolve, AnEmptyAddressIsNotResolved) {
    const Address a;
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(host_port("pc-a", 0), "pc-a:0");
}

TEST(OpenSocket, GivesANonBlockingCloseOnExecSocketOfTheType) {
    Fd s{open_socket(AF_INET, SOCK_DGRAM)};
    ASSERT_GE(s.fd, 0) << errno_text(errno);
    EXPECT_NE(::fcntl(s.fd, F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(s.fd, F_GETFD) & FD_CLOEXEC, 0);
    int type = 0;
    socklen_t len = sizeof type;
    ASSERT_EQ(::getsockopt(s.fd, SOL_SOCKET, SO_TYPE, &type, &len), 0);
    EXPECT_EQ(type, SOCK_DGRAM);
    char byte = 0;
    EXPECT_LT(::recv(s.fd, &byte, 1, 0), 0) << "a read with nothing there blocked or returned data";
    EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno_text(errno);
}

TEST(BindSocket, AStreamSocketListensAndAcceptsAConnection) {
    Fd listener{bind_socket(resolve("127.0.0.1", 0, SOCK_STREAM, true, "here"), SOCK_STREAM, 16, "here")};
    const std::uint16_t port = bound_port(listener.fd);
    ASSERT_NE(port, 0);
    const Address to = resolve("127.0.0.1", port, SOCK_STREAM, false, "here");
    Fd client{open_socket(to.family(), SOCK_STREAM)};
    ASSERT_GE(client.fd, 0);
    const int rc = ::connect(client.fd, to.get(), to.length);
    ASSERT_TRUE(rc == 0 || errno == EINPROGRESS) << errno_text(errno);
    // The listener is non-blocking: wait for the connection, then accept it.
    pollfd ready{listener.fd, POLLIN, 0};
    ASSERT_EQ(::poll(&ready, 1, 10000), 1) << "no connection to accept within 10 s";
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int accepted = ::accept4(listener.fd, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    ASSERT_GE(accepted, 0) << errno_text(errno);
    EXPECT_EQ(address_text(from).rfind("127.0.0.1:", 0), 0u) << address_text(from);
    ::close(accepted);
}

TEST(BindSocket, AStreamPortInUseIsAResourceErrorNamingHostAndPort) {
    Fd first{bind_socket(resolve("127.0.0.1", 0, SOCK_STREAM, true, "here"), SOCK_STREAM, 16, "here")};
    const std::uint16_t port = bound_port(first.fd);
    try {
        Fd second{
            bind_socket(resolve("127.0.0.1", port, SOCK_STREAM, true, "x"), SOCK_STREAM, 16, "nodes.yaml: node 2")};
        FAIL() << "a second listener bound port " << port;
    } catch (const ResourceError& e) {
        EXPECT_EQ(std::string(e.what()), "nodes.yaml: node 2: cannot listen on 127.0.0.1:" + std::to_string(port) +
                                             ": " + errno_text(EADDRINUSE));
    }
}

TEST(BindSocket, ADatagramSocketIsBoundWithoutListenAndNamedAsABind) {
    Fd first{bind_socket(resolve("127.0.0.1", 0, SOCK_DGRAM, true, "here"), SOCK_DGRAM, 0, "here")};
    const std::uint16_t port = bound_port(first.fd);
    ASSERT_NE(port, 0);
    try {
        Fd second{bind_socket(resolve("127.0.0.1", port, SOCK_DGRAM, true, "x"), SOCK_DGRAM, 0, "udp node 3")};
        FAIL() << "a second datagram socket bound port " << port << " without SO_REUSEPORT";
    } catch (const ResourceError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "udp node 3: cannot bind 127.0.0.1:" + std::to_string(port) + ": " + errno_text(EADDRINUSE));
    }
}

TEST(AddressText, NamesAnotherFamilyAsUnknown) {
    sockaddr_storage a{};
    a.ss_family = AF_UNIX;
    EXPECT_EQ(address_text(a), "?:0");
}

} // namespace
} // namespace msgpass::ip
