// The config tests load files that name the built-in technologies and use their
// sections: they are registered before any test runs, as the umbrella library does
// for a program before main.
#include <msgpass/msgpass.hpp>

#include <gtest/gtest.h>

namespace {

class BuiltinTechnologies : public ::testing::Environment {
public:
    void SetUp() override { msgpass::register_builtin_technologies(); }
};

[[maybe_unused]] auto* const environment = ::testing::AddGlobalTestEnvironment(new BuiltinTechnologies);

} // namespace
