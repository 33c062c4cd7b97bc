// The implementer kit: what the kit knows of a peer beyond its NodeStats, for the
// statistics page (kit/stats_page.hpp): the losses its loss latch raised and the text
// of the last one. A latch learns whom to tell from the HealthScope alive on the
// thread that makes it (FactoryBase::create_node holds one around make_node), so a
// technology reports its losses to the page without a line of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace msgpass::kit {

// What the kit knows of a peer beyond its NodeStats: the losses the node's loss
// latch raised and the text of the last one. Shared by the latch (which records) and
// the factory's publisher (which reads); any thread.
class PeerHealth {
public:
    void lost(const std::string& reason);
    [[nodiscard]] std::uint64_t losses() const noexcept { return losses_.load(std::memory_order_acquire); }
    [[nodiscard]] std::string last_error() const;

private:
    std::atomic<std::uint64_t> losses_{0};
    mutable std::mutex mutex_;
    std::string last_error_;
};

// While one lives on a thread, every LossLatch made on that thread reports its
// losses to health (FactoryBase::create_node holds one around make_node, so that a
// node's latch made there tells the factory that made it; nested for auto).
class HealthScope {
public:
    explicit HealthScope(std::shared_ptr<PeerHealth> health);
    ~HealthScope();
    HealthScope(const HealthScope&) = delete;
    HealthScope& operator=(const HealthScope&) = delete;
    // The healths of the scopes alive on this thread, innermost last.
    [[nodiscard]] static std::vector<std::shared_ptr<PeerHealth>> current();
};

} // namespace msgpass::kit
