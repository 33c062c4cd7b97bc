// ChildProcess: a child's exit is waited for on an event, and a child that does not
// exit within the bound is killed and said, so a hung program fails its test instead
// of holding it until ctest's timeout.
#include "process.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

TEST(ChildProcess, WaitReturnsTheExitStatusOfAChildThatEnds) {
    ChildProcess child({"/bin/sh", "-c", "echo ready; exit 3"});
    EXPECT_EQ(child.read_line(10s), "ready");
    const int status = child.wait();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST(ChildProcess, AChildThatDoesNotEndWithinTheBoundIsKilledAndSaid) {
    ChildProcess child({"/bin/sh", "-c", "echo ready; exec sleep 600"});
    ASSERT_EQ(child.read_line(10s), "ready");
    testing::internal::CaptureStderr();
    const int status = child.wait(50ms);
    const std::string said = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    EXPECT_NE(said.find("/bin/sh (pid " + std::to_string(child.pid()) + ") did not exit within 50 ms"),
              std::string::npos)
        << said;
    EXPECT_EQ(child.wait(), status) << "a second wait returns the same status";
}

} // namespace
} // namespace msgpass::test
