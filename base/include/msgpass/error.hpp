// Error model of msgpass: every exception the library throws derives from
// msgpass::Error. Exceptions report setup errors and misuse (bad configuration,
// unknown technology, a message too large, a full send queue) and failures found
// asynchronously (a lost peer), which surface on the next call that involves the
// peer. Nothing a peer sends or a file contains aborts the process.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace msgpass {

using NodeId = std::uint32_t;

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
    // The reason of the error, as the seed's T2Exception::message().
    [[nodiscard]] std::string message() const { return what(); }
};

// A configuration file or command line is wrong; what() holds one line per problem,
// each "file:line:column: key.path: expected X, found Y".
class ConfigError : public Error {
public:
    using Error::Error;
};

// The configuration asks for a technology that no library registered.
class UnknownTechnology : public Error {
public:
    using Error::Error;
};

// A call broke the documented contract of the API (wrong buffer type, bad id, ...).
class UsageError : public Error {
public:
    using Error::Error;
};

// The message is larger than max_message_size (or than the buffer can hold).
class MessageTooLarge : public Error {
public:
    using Error::Error;
};

// The send queue towards a node holds send_queue_limit messages already.
class SendQueueFull : public Error {
public:
    using Error::Error;
};

// A resource of the host (shared memory, a port, memory) could not be obtained.
class ResourceError : public Error {
public:
    using Error::Error;
};

// The peer process died or stopped answering within peer_timeout. unacknowledged()
// tells how many messages sent to it were not confirmed as received.
class PeerLost : public Error {
public:
    PeerLost(NodeId peer, const std::string& what, std::uint64_t unacknowledged = 0)
        : Error(what), peer_(peer), unacknowledged_(unacknowledged) {}
    [[nodiscard]] NodeId peer() const noexcept { return peer_; }
    [[nodiscard]] std::uint64_t unacknowledged() const noexcept { return unacknowledged_; }

private:
    NodeId peer_;
    std::uint64_t unacknowledged_;
};

} // namespace msgpass
