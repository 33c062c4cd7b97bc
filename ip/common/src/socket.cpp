// Socket helpers of the ip technologies (see socket.hpp).
#include <msgpass/ip/socket.hpp>

#include <msgpass/error.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

namespace msgpass::ip {

std::string host_port(const std::string& host, std::uint16_t port) {
    return host + ":" + std::to_string(port);
}

Address resolve(const std::string& host, std::uint16_t port, int type, bool passive, const std::string& where) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = type;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0 || found == nullptr) {
        throw ConfigError(where + ": '" + host + "' does not resolve: " + ::gai_strerror(rc));
    }
    Address a;
    std::memcpy(&a.storage, found->ai_addr, found->ai_addrlen);
    a.length = found->ai_addrlen;
    a.text = host_port(host, port);
    ::freeaddrinfo(found);
    return a;
}

int open_socket(int family, int type) noexcept {
    return ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

int bind_socket(const Address& address, int type, int backlog, const std::string& where) {
    const int fd = open_socket(address.family(), type);
    // A stream port is rebound at once after a restart (its old connections wait in
    // TIME_WAIT); a datagram port is never shared, which SO_REUSEADDR would allow.
    int one = 1;
    if (fd >= 0 && type == SOCK_STREAM) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || ::bind(fd, address.get(), address.length) != 0 ||
        (type == SOCK_STREAM && ::listen(fd, backlog) != 0)) {
        const std::string why = errno_text(errno);
        if (fd >= 0) ::close(fd);
        throw ResourceError(where + (type == SOCK_STREAM ? ": cannot listen on " : ": cannot bind ") + address.text +
                            ": " + why);
    }
    return fd;
}

std::string address_text(const sockaddr_storage& address) {
    char host[INET6_ADDRSTRLEN] = "?";
    std::uint16_t port = 0;
    if (address.ss_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
        ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (address.ss_family == AF_INET6) {
        const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
        ::inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
        port = ntohs(in->sin6_port);
    }
    return std::string(host) + ":" + std::to_string(port);
}

std::string errno_text(int error) {
    return std::strerror(error);
}

} // namespace msgpass::ip
