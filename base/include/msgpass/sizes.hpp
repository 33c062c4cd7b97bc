// Units of size used by the configuration and the technologies ("8KiB", "16MiB").
#pragma once

#include <cstdint>

namespace msgpass {

inline constexpr std::uint64_t KiB = 1024;
inline constexpr std::uint64_t MiB = 1024 * KiB;
inline constexpr std::uint64_t GiB = 1024 * MiB;

} // namespace msgpass
