// Fuzz target: the configuration loader (config/ load_text) over a network file and
// a nodes file, as a user or a tool writes them. The input is the network file, a
// NUL byte, then the nodes file (without a NUL: the network file alone, with the
// nodes file of the DAQ example). The loader's contract: it returns a validated
// Configuration or throws ConfigError naming each problem, and nothing else: no
// crash, no other exception, no hang.
#include "fuzz.hpp"

#include <msgpass/config.hpp>
#include <msgpass/error.hpp>
#include <msgpass/msgpass.hpp>

#include <cstdint>
#include <string>

namespace {
const char* const example_nodes = "nodes:\n"
                                  "  - {id: 1, name: ros-1, host: localhost, port: 17001}\n"
                                  "  - {id: 5, name: evb, host: localhost, port: 17005}\n";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool registered = (msgpass::register_builtin_technologies(), true);
    (void)registered;
    const std::string input(reinterpret_cast<const char*>(data), size);
    const auto nul = input.find('\0');
    const std::string network = input.substr(0, nul);
    const std::string nodes = nul == std::string::npos ? example_nodes : input.substr(nul + 1);
    try {
        const auto configuration = msgpass::config::load_text(network, nodes);
        msgpass::fuzz::accepted();
    } catch (const msgpass::ConfigError& e) {
        MSGPASS_FUZZ_CHECK(std::string(e.what()).size() > 0);
    }
    return 0;
}
