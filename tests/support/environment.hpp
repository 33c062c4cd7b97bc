// Test support: what a test needs from the machine (a system tool, root, network
// namespaces) and the one rule for when it is missing. Outside CI a test skips and
// its message names what is missing; with the environment variable CI set (as
// .ci/run is run) the same test fails, so that a CI machine that lost a tool cannot
// pass by running fewer tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace msgpass::test {

// True when the tests run in CI (the variable CI is set and not "false" or "0").
inline bool in_ci() {
    const char* ci = std::getenv("CI");
    if (ci == nullptr) return false;
    const std::string v = ci;
    return !v.empty() && v != "0" && v != "false";
}

// Path of a system tool (ip, ss), or "".
inline std::string tool(const std::string& name) {
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"})
        if (::access((dir + name).c_str(), X_OK) == 0) return dir + name;
    return "";
}

} // namespace msgpass::test

// Ends the current test when `condition` does not hold: skipped with `reason`
// outside CI, failed with it in CI. Use it only in the test body (or a function
// returning void), as GTEST_SKIP and GTEST_FAIL.
#define MSGPASS_REQUIRE(condition, reason)                                                                             \
    do {                                                                                                               \
        if (!(condition)) {                                                                                            \
            if (::msgpass::test::in_ci()) GTEST_FAIL() << "required in CI (CI is set): " << reason;                    \
            GTEST_SKIP() << reason;                                                                                    \
        }                                                                                                              \
    } while (false)
