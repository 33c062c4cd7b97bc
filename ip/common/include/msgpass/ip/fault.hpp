// Fault injection of the ip technologies, one interface (after Aeron's loss
// generators): a technology asks a FaultInjector what becomes of each unit it
// receives (a datagram) and of each it sends where a loss is wanted at the sender (a
// multicast datagram), instead of keeping branches and random generators of its own
// inside its engine. RandomFaults is the one the network file configures (udp's
// `inject_*` keys): fixed fractions, drawn from a seeded generator so that a test's
// faults repeat. A test may give its own (a scripted pattern) through the same
// interface.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>

namespace msgpass::ip {

class FaultInjector {
public:
    // What becomes of one unit on receipt: handed on, dropped, handed on twice, or held
    // back and handed on after the next one.
    enum class Action { deliver, drop, duplicate, hold };

    virtual ~FaultInjector() = default;
    // Whether it injects anything on receipt (a technology takes the faulty path only then).
    [[nodiscard]] virtual bool on_receipt_active() const noexcept = 0;
    // The fate of a unit subject to injection on receipt; can_hold: no unit is held back
    // now (one at a time). Called by one thread at a time.
    [[nodiscard]] virtual Action on_receipt(bool can_hold) = 0;
    // Whether a unit is withheld at its first transmission (sent as if it had gone:
    // a loss every receiver sees). Any thread, at once.
    [[nodiscard]] virtual bool withhold_at_sender() noexcept = 0;
};

// Fixed fractions (each from 0 to 1) of units dropped, duplicated, held back on
// receipt, and withheld at the sender; seeded.
struct FaultRates {
    double loss = 0, duplicate = 0, reorder = 0, sender_loss = 0;
    std::uint64_t seed = 0;
};

class RandomFaults final : public FaultInjector {
public:
    explicit RandomFaults(const FaultRates& rates, std::uint64_t receipt_seed, std::uint64_t sender_seed)
        : rates_(rates), random_(receipt_seed), sender_state_(sender_seed) {}

    [[nodiscard]] bool on_receipt_active() const noexcept override {
        return rates_.loss > 0 || rates_.duplicate > 0 || rates_.reorder > 0;
    }

    // The draws in this order, each only when its fraction is set: loss, then
    // (can_hold) reorder, then duplicate.
    [[nodiscard]] Action on_receipt(bool can_hold) override {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        if (rates_.loss > 0 && u(random_) < rates_.loss) return Action::drop;
        if (rates_.reorder > 0 && can_hold && u(random_) < rates_.reorder) return Action::hold;
        if (rates_.duplicate > 0 && u(random_) < rates_.duplicate) return Action::duplicate;
        return Action::deliver;
    }

    // splitmix64 over an atomic counter: any sending thread, no lock.
    [[nodiscard]] bool withhold_at_sender() noexcept override {
        if (rates_.sender_loss <= 0) return false;
        std::uint64_t z =
            sender_state_.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed) + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return static_cast<double>(z >> 11) * 0x1.0p-53 < rates_.sender_loss;
    }

private:
    FaultRates rates_;
    std::mt19937_64 random_;
    std::atomic<std::uint64_t> sender_state_;
};

} // namespace msgpass::ip
