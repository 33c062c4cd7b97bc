// The sci group (group.hpp): the members' ready marks, taken and looked at in turn.
#include "group.hpp"
#include "link.hpp"
#include "node.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace msgpass::sci {

namespace {
bool scan_all_from_environment() {
    const char* v = std::getenv("MSGPASS_SCI_GROUP_SCAN");
    return v != nullptr && std::strcmp(v, "all") == 0;
}
} // namespace

SciGroup::SciGroup(std::string name, std::shared_ptr<Transport> transport)
    : GroupBase(std::move(name), &transport->bell()), transport_(std::move(transport)),
      scan_all_(scan_all_from_environment()) {}

void SciGroup::admit(NodePtr node) {
    auto sci = std::dynamic_pointer_cast<SciNode>(node);
    if (!sci) throw UsageError("an sci group takes only sci nodes");
    BasicGroup::add(std::move(node));
    if (std::find(members_.begin(), members_.end(), sci) != members_.end()) return;
    if (!scan_all_) sci->want_marks(); // marks the member itself: its first look comes with the next receive
    members_.push_back(std::move(sci));
    rebuild();
}

bool SciGroup::remove(NodeId id) {
    std::erase_if(members_, [id](const auto& n) { return n->id() == id; });
    rebuild();
    return BasicGroup::remove(id);
}

// The tables by position from members_; marks pending for members that stay, stay.
void SciGroup::rebuild() {
    const std::size_t positions = transport_->parameters().node_count;
    at_.assign(positions, nullptr);
    const std::size_t words = (positions + 63) / 64;
    mask_.assign(words, 0);
    pending_.resize(words, 0);
    for (const auto& m : members_) {
        const std::size_t p = m->position();
        at_[p] = m.get();
        mask_[p / 64] |= std::uint64_t{1} << (p % 64);
    }
    words_.clear();
    for (std::size_t w = 0; w < words; ++w) {
        pending_[w] &= mask_[w];
        if (mask_[w] != 0) words_.push_back(w);
    }
}

// One receive from the member at position p, whose pending mark was cleared: the
// mark is pending again when it gave a message (more may be behind it) or an error
// (its next incarnation is looked at next).
BufferPtr SciGroup::look(std::size_t p) {
    const std::uint64_t bit = std::uint64_t{1} << (p % 64);
    ++looks_;
    try {
        if (auto b = at_[p]->receive()) {
            pending_[p / 64] |= bit;
            cursor_ = p + 1;
            return b;
        }
    } catch (...) {
        pending_[p / 64] |= bit;
        cursor_ = p + 1;
        throw;
    }
    return nullptr;
}

BufferPtr SciGroup::collect() {
    if (scan_all_) return BasicGroup::receive();
    if (members_.empty()) return nullptr;
    // What each member's receive did for the group when it polled them all: the send
    // queues of this process move while it waits here.
    transport_->driver().progress();
    if (const std::int64_t now = coarse_now_ns(); now >= next_sweep_ns_) {
        next_sweep_ns_ = now + sweep_interval_.count();
        for (const std::size_t w : words_)
            pending_[w] = mask_[w];
    }
    for (const std::size_t w : words_)
        pending_[w] |= transport_->take_ready(w, mask_[w]);
    // The pending members from the cursor on, wrapping once: words_ in order from the
    // cursor's word, that word's bits below the cursor last.
    const std::size_t from_word = (cursor_ / 64) % mask_.size();
    const auto first =
        static_cast<std::size_t>(std::lower_bound(words_.begin(), words_.end(), from_word) - words_.begin());
    const std::size_t n = words_.size();
    for (std::size_t k = 0; k <= n; ++k) {
        const std::size_t w = words_[(first + k) % n];
        std::uint64_t bits = pending_[w];
        if (k == 0 && w == from_word) bits &= ~std::uint64_t{0} << (cursor_ % 64);
        if (k == n) {
            if (w != from_word) break; // the cursor's word held no member: every word was seen
            bits = pending_[w] & ~(~std::uint64_t{0} << (cursor_ % 64));
        }
        while (bits != 0) {
            const auto b = static_cast<std::size_t>(std::countr_zero(bits));
            bits &= bits - 1;
            pending_[w] &= ~(std::uint64_t{1} << b);
            if (auto m = look(w * 64 + b)) return m;
        }
    }
    return nullptr;
}

void SciGroup::set_sweep_interval(std::chrono::nanoseconds interval) noexcept {
    sweep_interval_ = interval;
    next_sweep_ns_ = coarse_now_ns() + interval.count();
}

BufferPtr SciGroup::wait(std::chrono::nanoseconds timeout) {
    return transport_->wait([this] { return poll(); }, timeout);
}

} // namespace msgpass::sci
