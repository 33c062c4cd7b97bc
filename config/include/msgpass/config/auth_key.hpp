// The secret of an authenticated partition (network-file key `auth_key_file`): 32
// bytes that every process of the partition reads from a file of its own user, so
// that the tcp and udp handshakes can prove that both ends hold it (docs/security.md).
// The file holds the 32 bytes raw, or as 64 hexadecimal digits (and an optional line
// break), e.g. made with `head -c 32 /dev/urandom > key && chmod 600 key`. It must
// be a regular file owned by the user that runs the process, with no access for the
// group or others (mode 0600 or 0400): a key others can read is no secret.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace msgpass::config {

using AuthKey = std::array<std::uint8_t, 32>;

// Reads and checks the key file. On failure returns nullopt and sets problem to what
// was wrong ("has mode 0644: group and others must have no access (chmod 600 ...)").
[[nodiscard]] std::optional<AuthKey> read_auth_key(const std::filesystem::path& file, std::string& problem);

} // namespace msgpass::config
