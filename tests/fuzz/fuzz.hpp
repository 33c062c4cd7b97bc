// Support of the fuzz targets (tests/fuzz, docs/testing.md "Fuzzing"). Each target
// defines LLVMFuzzerTestOneInput over one decoder: built with clang's libFuzzer by
// scripts/fuzz.sh, and, in every build, linked with replay_main.cpp into a program
// that ctest runs over the target's corpus (seeds and every crash found so far).
//
// A target calls accepted() when its input passed the decoder's checks, so that the
// replay can require that a corpus still holds inputs the decoder takes (a format
// change that makes every seed a reject would leave the fuzzer only the reject
// paths), and check() for an invariant the decoder promises: a broken one aborts,
// which libFuzzer reports as a crash and the replay as a failure.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace msgpass::fuzz {

inline std::size_t accepted_inputs = 0;

inline void accepted() noexcept {
    ++accepted_inputs;
}

// An invariant of the decoder under test; aborts with its text when broken.
#define MSGPASS_FUZZ_CHECK(condition)                                                                                  \
    do {                                                                                                               \
        if (!(condition)) {                                                                                            \
            std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition);                     \
            std::abort();                                                                                              \
        }                                                                                                              \
    } while (false)

} // namespace msgpass::fuzz
