// Unit tests of msgpass/ip/reactor.hpp: the wake-up descriptor, the epoll set and the
// ppoll() sleep of a receiver, which the background thread and the receivers of an
// ip technology wait on.
#include <msgpass/ip/reactor.hpp>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace msgpass::ip {
namespace {

using namespace std::chrono_literals;

struct SocketPair {
    int fd[2] = {-1, -1};
    SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0); }
    ~SocketPair() {
        ::close(fd[0]);
        ::close(fd[1]);
    }
};

TEST(WaitReadable, ReturnsFalseWhenNothingIsReadableWithinTheTimeout) {
    const WakeFd wake("test");
    SocketPair pair;
    EXPECT_FALSE(wait_readable(wake, std::span<const int>(&pair.fd[0], 1), 1ms));
    EXPECT_FALSE(wait_readable(wake, {}, 0ns));
}

TEST(WaitReadable, ARungWakeFdEndsTheSleepAndIsDrained) {
    const WakeFd wake("test");
    wake.ring();
    wake.ring();
    EXPECT_TRUE(wait_readable(wake, {}, 10s));
    EXPECT_FALSE(wait_readable(wake, {}, 0ns)) << "the wake-up descriptor was not drained: it would spin";
}

TEST(WaitReadable, AReadableSocketEndsTheSleepWithoutTouchingItsData) {
    const WakeFd wake("test");
    SocketPair pair;
    const char byte = 'x';
    ASSERT_EQ(::write(pair.fd[1], &byte, 1), 1);
    EXPECT_TRUE(wait_readable(wake, std::span<const int>(&pair.fd[0], 1), 10s));
    char got = 0;
    EXPECT_EQ(::read(pair.fd[0], &got, 1), 1) << "the sleep consumed the socket's data";
    EXPECT_EQ(got, 'x');
}

TEST(WaitReadable, ARingFromAnotherThreadWakesASleeper) {
    const WakeFd wake("test");
    std::thread ringer([&] { wake.ring(); });
    const bool woke = wait_readable(wake, {}, 30s);
    ringer.join();
    EXPECT_TRUE(woke) << "30 s passed without the ring being seen";
}

TEST(Epoll, HandsBackTheDataOfTheReadyDescriptor) {
    const Epoll epoll("test");
    const WakeFd a("test"), b("test");
    ASSERT_TRUE(epoll.add(a.fd(), EPOLLIN, 0xa1));
    ASSERT_TRUE(epoll.add(b.fd(), EPOLLIN, 0xb2));
    std::array<epoll_event, 4> events{};
    EXPECT_EQ(epoll.wait(events, 0ns), 0);
    b.ring();
    ASSERT_EQ(epoll.wait(events, 10s), 1);
    EXPECT_EQ(events[0].data.u64, 0xb2u);
    EXPECT_NE(events[0].events & EPOLLIN, 0u);
    b.drain();
    EXPECT_EQ(epoll.wait(events, 1ms), 0) << "a drained descriptor stayed ready";
}

TEST(Epoll, ModifyChangesTheDataAndRemoveSilencesTheDescriptor) {
    const Epoll epoll("test");
    const WakeFd a("test");
    ASSERT_TRUE(epoll.add(a.fd(), EPOLLIN, 1));
    EXPECT_FALSE(epoll.add(a.fd(), EPOLLIN, 1)) << "a descriptor was added twice";
    ASSERT_TRUE(epoll.modify(a.fd(), EPOLLIN, 2));
    a.ring();
    std::array<epoll_event, 4> events{};
    ASSERT_EQ(epoll.wait(events, 10s), 1);
    EXPECT_EQ(events[0].data.u64, 2u);
    epoll.remove(a.fd());
    EXPECT_EQ(epoll.wait(events, 0ns), 0) << "a removed descriptor still reported";
}

TEST(Epoll, AWritableSocketIsReportedOnlyWhileEpolloutIsAsked) {
    const Epoll epoll("test");
    SocketPair pair;
    ASSERT_TRUE(epoll.add(pair.fd[0], EPOLLIN, 7));
    std::array<epoll_event, 4> events{};
    EXPECT_EQ(epoll.wait(events, 0ns), 0);
    ASSERT_TRUE(epoll.modify(pair.fd[0], EPOLLIN | EPOLLOUT, 8));
    ASSERT_EQ(epoll.wait(events, 10s), 1);
    EXPECT_EQ(events[0].data.u64, 8u);
    EXPECT_NE(events[0].events & EPOLLOUT, 0u);
}

} // namespace
} // namespace msgpass::ip
