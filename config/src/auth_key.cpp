// The key file of an authenticated partition (see msgpass/config/auth_key.hpp).
#include <msgpass/config/auth_key.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace msgpass::config {

namespace {

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    [[nodiscard]] int get() const { return fd_; }

private:
    int fd_;
};

std::string octal_mode(mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return text;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    const int lower = std::tolower(static_cast<unsigned char>(c));
    if (lower >= 'a' && lower <= 'f') return lower - 'a' + 10;
    return -1;
}

} // namespace

std::optional<AuthKey> read_auth_key(const std::filesystem::path& file, std::string& problem) {
    const std::string name = file.string();
    // Opened first and judged on the open descriptor, so that what is checked is what
    // is read (no swap of the file between the check and the read).
    const Fd fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (fd.get() < 0) {
        problem = "cannot be opened: " + std::string(std::strerror(errno));
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        problem = "cannot be examined: " + std::string(std::strerror(errno));
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
        problem = "is not a regular file";
        return std::nullopt;
    }
    if (st.st_uid != ::geteuid()) {
        problem = "is owned by uid " + std::to_string(st.st_uid) + ", not by the user of this process (uid " +
                  std::to_string(::geteuid()) + ")";
        return std::nullopt;
    }
    if ((st.st_mode & 077) != 0) {
        problem = "has mode " + octal_mode(st.st_mode) + ": the group and others must have no access (chmod 600 " +
                  name + ")";
        return std::nullopt;
    }
    char text[130];
    std::size_t size = 0;
    for (;;) {
        const ssize_t n = ::read(fd.get(), text + size, sizeof text - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            problem = "cannot be read: " + std::string(std::strerror(errno));
            return std::nullopt;
        }
        if (n == 0) break;
        size += static_cast<std::size_t>(n);
        if (size == sizeof text) break;
    }
    AuthKey key{};
    if (size == key.size()) {
        std::memcpy(key.data(), text, key.size());
        return key;
    }
    std::size_t digits = size;
    while (digits > 0 && (text[digits - 1] == '\n' || text[digits - 1] == '\r'))
        --digits;
    bool hex = digits == 2 * key.size();
    for (std::size_t i = 0; hex && i < key.size(); ++i) {
        const int high = hex_digit(text[2 * i]);
        const int low = hex_digit(text[2 * i + 1]);
        hex = high >= 0 && low >= 0;
        if (hex) key[i] = static_cast<std::uint8_t>(high * 16 + low);
    }
    if (hex) return key;
    problem = size == sizeof text ? "holds more than 129 bytes" : "holds " + std::to_string(size) + " bytes";
    problem += ": expected a 32-byte key (32 raw bytes, or 64 hexadecimal digits)";
    return std::nullopt;
}

} // namespace msgpass::config
