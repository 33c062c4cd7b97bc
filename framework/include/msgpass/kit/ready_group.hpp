// The implementer kit: a group receive whose cost per message does not grow with the
// group (issue 31). The technology learns which members may have something (sci: the
// ready marks its members set in its segment; tcp: its epoll set of their connections
// and the marks they set; udp: the marks its members set) and hands those to
// ReadyGroup as pending bits, a bit per member slot; ReadyGroup looks only at the
// pending members, in slot order from a cursor, and keeps the seed's fairness: the
// start rotates among the ready ones, as BasicGroup's rotates among all (a member that
// gave a message stays pending, more may wait behind it, and is looked at again only
// after every other pending one). Every sweep_interval (50 ms) the technology looks
// at every member once (sweep_due), in case a mark was spent on a look that could not
// take its message yet.
#pragma once

#include <msgpass/kit/lifetime.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace msgpass::kit {

// The ready marks of a group: a bit per member slot, set by the member (from any
// thread) when it has something for a receive, taken (exchanged for 0) by the group's
// receive (ReadyGroup::take_marks).
struct ReadyMarks {
    explicit ReadyMarks(std::size_t slots)
        : count((slots + 63) / 64), words(std::make_unique<std::atomic<std::uint64_t>[]>(count)) {}
    void set(std::size_t slot) noexcept {
        words[slot / 64].fetch_or(std::uint64_t{1} << (slot % 64), std::memory_order_release);
    }
    const std::size_t count;
    const std::unique_ptr<std::atomic<std::uint64_t>[]> words;
};

// CLOCK_MONOTONIC_COARSE in ns: a few ns to read, a few ms of resolution (the sweep's clock).
[[nodiscard]] std::int64_t coarse_now_ns() noexcept;

// A technology's group that knows which members may have something derives from this
// (instead of GroupBase): its collect() brings the pending bits up to date (mark,
// mark_bits, take_marks, mark_all) and takes a message through next_ready or
// ready_to_end, with a look(slot) that receives from the member in that slot. The
// members' slots are the technology's: dense (set_slots: udp, tcp) or positions with
// gaps (set_members: sci's positions in the nodes file). The receiver thread only;
// add and remove are not concurrent with receive (msgpass/group.hpp).
class ReadyGroup : public GroupBase {
public:
    // The measurement switch of msgpass-bench's fanin pattern (the technology's
    // MSGPASS_<T>_GROUP_SCAN=all in the environment when the group is made): every
    // receive looks at every member, as before the ready marks. Not for production.
    [[nodiscard]] bool scans_all() const noexcept { return scan_all_; }
    // For the tests: how many times a member was looked at (a look per message, and
    // one that finds nothing per member whose mark was spent), and the sweep's period
    // (a test that sets it long sees only what the marks bring).
    [[nodiscard]] std::uint64_t looks() const noexcept { return looks_; }
    void set_sweep_interval(std::chrono::nanoseconds interval) noexcept;

protected:
    // scan_variable: the environment variable that, set to "all", makes scans_all().
    ReadyGroup(std::string name, Doorbell* bell, const char* scan_variable);

    // Slots 0..slots-1 are the members: nothing pending, the next look from slot 0.
    void set_slots(std::size_t slots);
    // The members are the bits of mask (a word per 64 slots): what was pending for a
    // member that stays, stays, and the cursor with it.
    void set_members(std::vector<std::uint64_t> mask);
    void mark(std::size_t slot) noexcept { pending_[slot / 64] |= std::uint64_t{1} << (slot % 64); }
    void mark_bits(std::size_t word, std::uint64_t bits) noexcept { pending_[word] |= bits; }
    // Every member pending (a sweep).
    void mark_all() noexcept {
        for (const std::size_t w : words_)
            pending_[w] = mask_[w];
    }
    // The marks the members set since the last take become pending (count words).
    void take_marks(std::atomic<std::uint64_t>* marks, std::size_t count) noexcept {
        for (std::size_t w = 0; w < count && w < pending_.size(); ++w)
            if (marks[w].load(std::memory_order_relaxed) != 0)
                pending_[w] |= marks[w].exchange(0, std::memory_order_acquire);
    }
    // Whether the sweep of every member is due (every sweep_interval); when it is,
    // the next is due an interval from now.
    [[nodiscard]] bool sweep_due() noexcept {
        const std::int64_t now = coarse_now_ns();
        if (now < next_sweep_ns_) return false;
        next_sweep_ns_ = now + sweep_interval_.count();
        return true;
    }
    // A sweep ran for another reason: the next is due an interval from now.
    void swept_now() noexcept { next_sweep_ns_ = coarse_now_ns() + sweep_interval_.count(); }
    // Whether any member is pending.
    [[nodiscard]] bool any_pending() const noexcept {
        return std::any_of(words_.begin(), words_.end(), [this](std::size_t w) { return pending_[w] != 0; });
    }
    // The words of slots that hold a member, in order, and their members' bits.
    [[nodiscard]] const std::vector<std::size_t>& member_words() const noexcept { return words_; }
    [[nodiscard]] std::uint64_t member_bits(std::size_t word) const noexcept { return mask_[word]; }

    // The pending members from the cursor on, wrapping once, until a look gives a
    // message; null when none did.
    template <class Look>
    [[nodiscard]] BufferPtr next_ready(Look&& look);
    // The pending members from the cursor to the last slot, until a look gives a
    // message; null when none did, and the round is over (the cursor past the last slot).
    template <class Look>
    [[nodiscard]] BufferPtr ready_to_end(Look&& look);
    // The next round starts at the first slot.
    void restart_round() noexcept { cursor_ = 0; }

private:
    // look(slot), whose pending bit was cleared: the bit is set again when it gave a
    // message (more may wait) or threw (its next incarnation, or the error again, is
    // looked at on its next turn), and the next look starts after it.
    template <class Look>
    BufferPtr look_at(std::size_t slot, Look& look);
    // The lowest set bit of bits, cleared there and in pending_[w]: its slot.
    std::size_t take_lowest(std::size_t w, std::uint64_t& bits) noexcept {
        const auto b = static_cast<std::size_t>(std::countr_zero(bits));
        bits &= bits - 1;
        pending_[w] &= ~(std::uint64_t{1} << b);
        return w * 64 + b;
    }

    const bool scan_all_;
    std::vector<std::uint64_t> mask_;    // the members' bits, per word
    std::vector<std::size_t> words_;     // words that hold a member, in order
    std::vector<std::uint64_t> pending_; // members to look at, per word
    std::size_t cursor_ = 0;             // the next look starts at the first pending slot from here
    std::chrono::nanoseconds sweep_interval_{std::chrono::milliseconds(50)};
    std::int64_t next_sweep_ns_ = 0;
    std::uint64_t looks_ = 0;
};

template <class Look>
BufferPtr ReadyGroup::look_at(std::size_t slot, Look& look) {
    ++looks_;
    try {
        if (auto b = look(slot)) {
            mark(slot);
            cursor_ = slot + 1;
            return b;
        }
    } catch (...) {
        mark(slot);
        cursor_ = slot + 1;
        throw;
    }
    return nullptr;
}

// words_ in order from the cursor's word, that word's bits below the cursor last.
template <class Look>
BufferPtr ReadyGroup::next_ready(Look&& look) {
    const std::size_t n = words_.size();
    if (n == 0) return nullptr;
    const std::size_t from_word = (cursor_ / 64) % mask_.size();
    const std::uint64_t from_here = ~std::uint64_t{0} << (cursor_ % 64);
    const auto first =
        static_cast<std::size_t>(std::lower_bound(words_.begin(), words_.end(), from_word) - words_.begin());
    for (std::size_t k = 0; k <= n; ++k) {
        const std::size_t w = words_[(first + k) % n];
        std::uint64_t bits = pending_[w];
        if (k == 0 && w == from_word) bits &= from_here;
        if (k == n) {
            if (w != from_word) break; // the cursor's word held no member: every word was seen
            bits &= ~from_here;
        }
        while (bits != 0)
            if (auto m = look_at(take_lowest(w, bits), look)) return m;
    }
    return nullptr;
}

template <class Look>
BufferPtr ReadyGroup::ready_to_end(Look&& look) {
    const std::size_t from_word = cursor_ / 64;
    for (auto it = std::lower_bound(words_.begin(), words_.end(), from_word); it != words_.end(); ++it) {
        const std::size_t w = *it;
        std::uint64_t bits = pending_[w];
        if (w == from_word) bits &= ~std::uint64_t{0} << (cursor_ % 64);
        while (bits != 0)
            if (auto m = look_at(take_lowest(w, bits), look)) return m;
    }
    cursor_ = mask_.size() * 64;
    return nullptr;
}

} // namespace msgpass::kit
