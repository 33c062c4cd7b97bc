// The gather list of one tcp write: frame headers and the fragments
// of the messages as iovecs for one sendmsg(), many messages per system call, with
// no staging copy of a large fragment (it goes out from the application's memory).
// Small pieces (headers, small messages) are copied together into one staging area
// instead, which the kernel copies far faster than hundreds of tiny iovecs. A stream
// writer puts the frames of its window back to back, leaving out what an
// earlier write took.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/tcp/frame.hpp>

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <vector>

namespace msgpass::tcp {

class GatherList {
public:
    static constexpr int max_iov = 512;
    static constexpr std::size_t small_piece = 512;        // copied into the staging area up to this
    static constexpr std::size_t staging_size = 64 * 1024; // per write

    // Starts an empty list that leaves out the first `skip` bytes of what is added.
    void start(std::size_t skip) {
        if (staging_.capacity() < staging_size) staging_.reserve(staging_size);
        staging_.clear();
        n_ = 0;
        skip_ = skip;
        last_staged_ = false;
    }

    // Adds a frame: its header, then each fragment of its payload. False when the list
    // is full, before or within the frame; what did not fit goes in the next write.
    bool add_frame(const FrameHeader& header, const Buffer& payload) {
        if (n_ >= max_iov - 1) return false;
        add(&header, sizeof header);
        for (const auto& f : payload.fragments()) {
            if (n_ >= max_iov) return false;
            if (!f.empty()) add(f.data(), f.size());
        }
        return n_ < max_iov;
    }

    [[nodiscard]] int count() const noexcept { return n_; }
    [[nodiscard]] const iovec& operator[](int i) const noexcept { return iov_[static_cast<std::size_t>(i)]; }
    [[nodiscard]] msghdr message() noexcept {
        msghdr m{};
        m.msg_iov = iov_.data();
        m.msg_iovlen = static_cast<std::size_t>(n_);
        return m;
    }

private:
    void add(const void* p, std::size_t len) {
        if (skip_ >= len) {
            skip_ -= len;
            return;
        }
        const auto* from = static_cast<const std::byte*>(p) + skip_;
        len -= skip_;
        skip_ = 0;
        if (len <= small_piece && staging_.size() + len <= staging_size) {
            std::byte* to = staging_.data() + staging_.size(); // reserved: no reallocation
            staging_.insert(staging_.end(), from, from + len);
            if (last_staged_) {
                iov_[static_cast<std::size_t>(n_ - 1)].iov_len += len;
            } else {
                iov_[static_cast<std::size_t>(n_)] = iovec{to, len};
                ++n_;
                last_staged_ = true;
            }
            return;
        }
        iov_[static_cast<std::size_t>(n_)] = iovec{const_cast<std::byte*>(from), len};
        ++n_;
        last_staged_ = false;
    }

    std::array<iovec, max_iov> iov_;
    std::vector<std::byte> staging_;
    int n_ = 0;
    std::size_t skip_ = 0;
    bool last_staged_ = false;
};

} // namespace msgpass::tcp
