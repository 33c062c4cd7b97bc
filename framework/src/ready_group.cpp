// The kit's group receive by readiness (msgpass/kit/ready_group.hpp): the members'
// slots, the sweep's clock and the measurement switch.
#include <msgpass/kit/ready_group.hpp>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

namespace msgpass::kit {

namespace {
bool scan_all_from_environment(const char* variable) {
    const char* v = std::getenv(variable);
    return v != nullptr && std::strcmp(v, "all") == 0;
}
} // namespace

std::int64_t coarse_now_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

ReadyGroup::ReadyGroup(std::string name, Doorbell* bell, const char* scan_variable)
    : GroupBase(std::move(name), bell), scan_all_(scan_all_from_environment(scan_variable)) {}

void ReadyGroup::set_slots(std::size_t slots) {
    std::vector<std::uint64_t> mask((slots + 63) / 64, ~std::uint64_t{0});
    if (slots % 64 != 0) mask.back() = (std::uint64_t{1} << (slots % 64)) - 1;
    set_members(std::move(mask));
    std::fill(pending_.begin(), pending_.end(), 0);
    cursor_ = 0;
}

void ReadyGroup::set_members(std::vector<std::uint64_t> mask) {
    mask_ = std::move(mask);
    pending_.resize(mask_.size(), 0);
    words_.clear();
    for (std::size_t w = 0; w < mask_.size(); ++w) {
        pending_[w] &= mask_[w];
        if (mask_[w] != 0) words_.push_back(w);
    }
}

void ReadyGroup::set_sweep_interval(std::chrono::nanoseconds interval) noexcept {
    sweep_interval_ = interval;
    next_sweep_ns_ = coarse_now_ns() + interval.count();
}

} // namespace msgpass::kit
