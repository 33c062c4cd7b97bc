// SciException: the exception class of the sci technology (the seed's SCIException,
// derived from the project's base error as SCIException derives from T2Exception).
// The remote-memory layer throws it when the (emulated) driver refuses an operation:
// a segment that cannot be created, sized, opened, mapped or given pages, a virtual
// device that cannot be opened, a transfer that keeps failing. It is a ResourceError,
// so code that catches the technology-neutral class keeps working; code written
// against the seed's wrappers can catch it and ask which operation failed on which
// segment. message() (from msgpass::Error) gives the reason, as SCIException's did.
#pragma once

#include <msgpass/error.hpp>

#include <string>
#include <utility>

namespace msgpass::sci {

class SciException : public ResourceError {
public:
    SciException(std::string operation, std::string segment, const std::string& what)
        : ResourceError(what), operation_(std::move(operation)), segment_(std::move(segment)) {}
    // What was asked of the driver: "open", "create", "reserve", "map", "connect",
    // "set available", "transfer".
    [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
    // The segment's name, empty for an operation on no segment (a device, a transfer).
    [[nodiscard]] const std::string& segment() const noexcept { return segment_; }

private:
    std::string operation_;
    std::string segment_;
};

// LocalSegment::create found the segment held by a live process: most often another
// process started with the same node id in the same partition. holder() is that
// process's pid when /proc/locks tells it, 0 otherwise; the transport names the node id
// and the partition in what it throws.
class SegmentInUse : public SciException {
public:
    SegmentInUse(std::string segment, long holder, const std::string& what)
        : SciException("create", std::move(segment), what), holder_(holder) {}
    [[nodiscard]] long holder() const noexcept { return holder_; }

private:
    long holder_;
};

} // namespace msgpass::sci
