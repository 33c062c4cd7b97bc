// Peer incarnations of the ip technologies (see incarnation.hpp).
#include <msgpass/ip/incarnation.hpp>

#include <chrono>
#include <random>
#include <unistd.h>

namespace msgpass::ip {

std::uint64_t new_incarnation() {
    std::random_device device;
    const std::uint64_t v = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                            static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                            (static_cast<std::uint64_t>(::getpid()) << 16);
    return v == 0 ? 1 : v;
}

} // namespace msgpass::ip
