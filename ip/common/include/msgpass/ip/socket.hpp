// Socket helpers of the ip technologies: resolving a node's host and port from the
// nodes file, opening sockets in non-blocking close-on-exec mode, binding the
// listening socket, and naming addresses as host:port, so that every error of a
// connection or a bind says which address it was.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace msgpass::ip {

// "host:port", the way every error names an address.
[[nodiscard]] std::string host_port(const std::string& host, std::uint16_t port);

// An address of the nodes file, resolved: what connect() and bind() take, and its
// text for errors. length 0: not resolved (a node without a port).
struct Address {
    sockaddr_storage storage{};
    socklen_t length = 0;
    std::string text; // "host:port" as written in the nodes file

    [[nodiscard]] const sockaddr* get() const noexcept { return reinterpret_cast<const sockaddr*>(&storage); }
    [[nodiscard]] int family() const noexcept { return storage.ss_family; }
    [[nodiscard]] bool empty() const noexcept { return length == 0; }
};

// Resolves host (a name or a numeric address) and port for sockets of `type`
// (SOCK_STREAM, SOCK_DGRAM); passive: an address to bind rather than to connect to.
// Throws ConfigError "<where>: '<host>' does not resolve: <reason>".
[[nodiscard]] Address resolve(const std::string& host, std::uint16_t port, int type, bool passive,
                              const std::string& where);

// A socket of `type` for `family`, non-blocking and close-on-exec; -1 with errno set
// when the system refuses one.
[[nodiscard]] int open_socket(int family, int type) noexcept;

// A socket bound to address: a SOCK_STREAM one with SO_REUSEADDR (a restarted
// process gets its port back at once) and listening with `backlog`; a SOCK_DGRAM one
// without (its port is never shared). Throws ResourceError "<where>: cannot listen on host:port: <reason>"
// ("cannot bind" for a datagram socket).
[[nodiscard]] int bind_socket(const Address& address, int type, int backlog, const std::string& where);

// The text of an address that accept() or recvfrom() filled in: "10.0.0.1:17001",
// "::1:17001"; "?:0" for another family.
[[nodiscard]] std::string address_text(const sockaddr_storage& address);

// strerror(error) as a string.
[[nodiscard]] std::string errno_text(int error);

} // namespace msgpass::ip
