// How a sender copies large messages (from streaming_min_size) into its peer's
// region: through the cache, or with non-temporal stores that leave the lines in
// memory. Which is faster depends on the size, on where the VM's two CPUs sit at
// the moment (it changes every few minutes) and on what the receiver does with the
// bytes: when the CPUs share no cache, a receiver that reads lines still in the
// sender's cache reads a 1 MiB message at a third of the speed it reads memory
// with, while the sender's own copy through the cache looks the cheaper one
// (docs/sci-protocol.md, "Large messages"). So the choice is made on what the
// sender sees of the whole path, not on its own copy: the time from one large copy
// to the next, which includes the wait for room in the region while the receiver
// is the slower end.
//
// Each size class (256-512 KiB, 512 KiB-1 MiB, ... 8 MiB and more) chooses on its
// own, on the time from each of its copies to the sender's next large copy. Its
// copies go in blocks of one way. The first copies of a block only let the
// messages of the previous way leave the region (as many as the region holds of
// this size); the block's cost is the mean, over its remaining copies, of the time
// from a copy to the next per byte, leaving out the longest (a pause of the
// application between two messages says nothing about the way; the stalls of a
// full region come every few messages and stay in). The first four blocks
// alternate, streaming first, and the first two are not counted (the region's
// pages are taken then); then each block takes the cheaper way, and every
// explore_every-th block the other one, so that a change is seen. A block whose way
// cost jump times more or less than that way's kept cost says the path changed (the
// application went from a ping-pong to a stream of the same size, or the CPUs moved):
// its cost replaces the kept one, and the next block measures the other way afresh,
// instead of comparing with what that way cost before the change until the next
// exploration (up to explore_every blocks: half of a 0.5 s point of compare-peers'
// 1 MiB stream, which followed its ping-pong, went the wrong way).
#pragma once

#include <msgpass/sci/protocol.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <memory>

namespace msgpass::sci {

class CopyChoice {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr std::uint64_t explore_every = 64;
    static constexpr std::size_t max_samples = 32;
    // The first two blocks, one of each way, are not measured: the region's pages are
    // taken by the first messages that reach them (page faults, not the way's cost).
    static constexpr std::uint64_t first_measured = 2;
    // A block's cost this many times its way's kept cost, or that many times less: the
    // path changed. (At 1.3 the blocks of a steady 1 MiB stream crossed it by their own
    // spread, and the other way's blocks this called for cut the stream to 18-20 GB/s
    // from 27-29.)
    static constexpr double jump = 2.0;

    // The way of the copy of size bytes that starts at now: true to stream.
    bool begin(Clock::time_point now, std::uint64_t size) {
        if (block_length_ != 0 && in_block_ == block_length_) end_block();
        if (in_block_ == 0) start_block(size);
        last_ = now;
        last_size_ = size;
        ++in_block_;
        measuring_ = in_block_ > warm_;
        return streaming_;
    }
    // The sender's next large copy (of any size) starts at now: the time since this
    // class's last one began is that copy's cost.
    void finish(Clock::time_point now) {
        if (!measuring_ || samples_ == max_samples) return;
        measuring_ = false;
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
        per_byte_[samples_++] =
            static_cast<float>(static_cast<double>(ns) / static_cast<double>(std::max<std::uint64_t>(last_size_, 1)));
    }

private:
    void end_block() {
        if (blocks_ >= first_measured && samples_ > 1) {
            // The mean but for the longest: a pause of the application, not the stalls
            // of a full region, which come every few messages.
            double sum = 0;
            float longest = 0;
            for (std::size_t k = 0; k < samples_; ++k) {
                sum += per_byte_[k];
                longest = std::max(longest, per_byte_[k]);
            }
            const double c = (sum - longest) / static_cast<double>(samples_ - 1);
            const std::size_t way = streaming_ ? 1 : 0;
            double& kept = cost_[way];
            const bool changed = kept > 0 && (c > jump * kept || c * jump < kept);
            kept = kept <= 0 || changed ? c : 0.5 * kept + 0.5 * c;
            // The other way's cost is of before the change: not known (the next block measures it).
            if (changed && blocks_ >= first_measured + 2) cost_[1 - way] = 0;
        }
        ++blocks_;
        in_block_ = 0;
        samples_ = 0;
    }

    void start_block(std::uint64_t size) {
        const std::uint64_t in_region = large_wrap_at(size) / std::max<std::uint64_t>(size, 1) + 1;
        warm_ = std::clamp<std::uint64_t>(in_region, 4, 64);
        block_length_ = warm_ + 1 + std::clamp<std::uint64_t>(in_region, 8, max_samples - 1);
        if (blocks_ < first_measured + 2) {
            streaming_ = blocks_ % 2 == 0;
        } else if (cost_[0] <= 0 || cost_[1] <= 0) {
            streaming_ = cost_[1] <= 0; // the way whose cost is not known (since the path changed)
        } else {
            const bool better = cost_[1] <= cost_[0];
            streaming_ = blocks_ % explore_every == explore_every - 1 ? !better : better;
        }
    }

    std::array<double, 2> cost_{}; // through the cache, streamed; 0: not known
    bool streaming_ = true;
    std::uint64_t blocks_ = 0;
    std::uint64_t in_block_ = 0;
    std::uint64_t warm_ = 0;
    std::uint64_t block_length_ = 0;
    Clock::time_point last_{};
    std::uint64_t last_size_ = 0;
    bool measuring_ = false; // the copy that began last is one of the block's measured ones
    std::array<float, max_samples> per_byte_{};
    std::size_t samples_ = 0;
};

// One CopyChoice per size class, made when the first message of streaming_min_size
// or more goes to this peer.
class CopyChoices {
public:
    using Clock = CopyChoice::Clock;
    static constexpr std::size_t classes = 6;

    [[nodiscard]] static std::size_t class_of(std::uint64_t size) noexcept {
        const std::uint64_t units = std::max<std::uint64_t>(size / streaming_min_size, 1);
        return std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(units)) - 1, classes - 1);
    }
    // The way of the large copy of size bytes that starts at now: true to stream.
    bool next(Clock::time_point now, std::uint64_t size) {
        if (!choices_) choices_ = std::make_unique<std::array<CopyChoice, classes>>();
        auto& all = *choices_;
        all[last_class_].finish(now);
        last_class_ = class_of(size);
        return all[last_class_].begin(now, size);
    }

private:
    std::unique_ptr<std::array<CopyChoice, classes>> choices_;
    std::size_t last_class_ = 0;
};

} // namespace msgpass::sci
