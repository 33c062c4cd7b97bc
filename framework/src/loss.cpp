// The loss latch of the implementer kit (msgpass/kit/loss.hpp).
#include <msgpass/kit/loss.hpp>

#include <algorithm>

namespace msgpass::kit {

namespace {
thread_local std::vector<std::shared_ptr<PeerHealth>> scope_stack;
} // namespace

void PeerHealth::lost(const std::string& reason) {
    {
        std::lock_guard lock(mutex_);
        last_error_ = reason;
    }
    losses_.fetch_add(1, std::memory_order_release);
}

std::string PeerHealth::last_error() const {
    std::lock_guard lock(mutex_);
    return last_error_;
}

HealthScope::HealthScope(std::shared_ptr<PeerHealth> health) {
    scope_stack.push_back(std::move(health));
}

HealthScope::~HealthScope() {
    scope_stack.pop_back();
}

std::vector<std::shared_ptr<PeerHealth>> HealthScope::current() {
    return scope_stack;
}

bool LossLatch::raised_for(std::uint64_t incarnation) const {
    std::lock_guard lock(mutex_);
    return incarnation != 0 && incarnation == incarnation_;
}

void LossLatch::raise(std::uint64_t incarnation, std::string reason, std::uint64_t unacknowledged, bool may_live) {
    std::lock_guard lock(mutex_);
    incarnation_ = incarnation;
    may_live_ = may_live;
    for (const auto& health : observers_)
        health->lost(reason);
    loss_ = Loss{std::move(reason), unacknowledged};
    pending_.store(true, std::memory_order_release);
}

void LossLatch::observe_current_scopes() {
    std::lock_guard lock(mutex_);
    for (auto& health : HealthScope::current()) {
        if (std::find(observers_.begin(), observers_.end(), health) != observers_.end()) continue;
        if (incarnation_ != 0 || pending_.load(std::memory_order_relaxed)) health->lost(loss_.reason);
        observers_.push_back(std::move(health));
    }
}

void LossLatch::revive(std::uint64_t incarnation) {
    std::lock_guard lock(mutex_);
    if (incarnation != 0 && incarnation == incarnation_ && may_live_) {
        incarnation_ = 0;
        may_live_ = false;
    }
}

std::optional<Loss> LossLatch::take() {
    if (!pending()) return std::nullopt;
    std::lock_guard lock(mutex_);
    if (!pending_.load(std::memory_order_relaxed)) return std::nullopt;
    pending_.store(false, std::memory_order_relaxed);
    return std::move(loss_);
}

} // namespace msgpass::kit
