// The implementer kit: the statistics page. Every factory derived from FactoryBase
// publishes the counters of the nodes it made (NodeStats per peer, with the losses
// the kit's loss latch saw) in a small shared-memory page, so that msgpass-top and
// scripts see a running partition from outside, with no code in the application.
// A background thread of the factory writes a seqlock-protected snapshot every
// interval (200 ms by default); the data path is untouched: the snapshot reads the
// relaxed counters the nodes keep anyway. The page is named after the user, the
// partition and the node id ("/msgpass-stats.<user>.<partition>.node<N>", the user
// as sci names its segments), its owner holds an exclusive flock on it for its whole
// life (as sci's segments: msgpass-run --cleanup removes a page no process holds),
// and the factory removes it when destroyed. MSGPASS_STATS=0 turns publishing off,
// MSGPASS_STATS_INTERVAL=<ms> changes the interval (docs/operations.md).
#pragma once

#include <msgpass/kit/health.hpp>
#include <msgpass/stats.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <system_error>
#include <thread>
#include <vector>

namespace msgpass::kit {

// "uid<N>" or the login name of uid: the same user part as sci's segment names.
[[nodiscard]] std::string stats_user(uid_t uid);
[[nodiscard]] std::string stats_user();
// "msgpass-stats.<user>.<partition>.node": every page of the partition starts so (no '/').
[[nodiscard]] std::string stats_page_prefix(std::string_view user, std::string_view partition);
// "/msgpass-stats.<user>.<partition>.node<N>".
[[nodiscard]] std::string stats_page_name(std::string_view user, std::string_view partition, std::uint32_t node);
// The pages of a partition in /dev/shm (names with their '/'), in node id order;
// with an empty partition, the pages of every partition of the user.
[[nodiscard]] std::vector<std::string> find_stats_pages(std::string_view user, std::string_view partition,
                                                        std::error_code& error);

// One peer of a page, as read.
struct PeerView {
    std::uint32_t id = 0;
    NodeStats stats;
    std::uint64_t losses = 0; // losses of this peer the node's loss latch raised
    bool lost = false;        // lost, and no message moved to or from it since
    std::string last_error;   // the text of the last loss ("" if none)
};

// A page, as read.
struct PageView {
    enum class Owner { running, closing, stalled, dead };
    std::string shm_name;
    std::uint32_t node = 0;
    pid_t pid = 0;
    std::string partition, name, technology, host;
    std::vector<std::string> groups; // the static groups the node is a member of
    std::uint32_t interval_ms = 0;
    std::uint64_t publishes = 0;       // snapshots written so far
    std::int64_t heartbeat_age_ns = 0; // since the last snapshot (CLOCK_MONOTONIC)
    std::int64_t taken_ns = 0;         // CLOCK_MONOTONIC of the snapshot read
    Owner owner = Owner::running;
    std::vector<PeerView> peers;
};

[[nodiscard]] const char* owner_text(PageView::Owner owner) noexcept;

// Reads a page: nullopt with error set when it cannot be opened, is not a
// statistics page, or stayed mid-update for every try. owner is dead when no process
// holds the page's lock any more (the kernel drops it however the process ended),
// stalled when its publisher wrote nothing for 5 intervals and a second.
[[nodiscard]] std::optional<PageView> read_stats_page(const std::string& shm_name, std::string& error);

// The publisher of one factory. Made by FactoryBase; not for applications.
class StatsPublisher {
public:
    struct Identity {
        std::string partition, name, technology;
        std::uint32_t node = 0;
        std::vector<std::string> groups;
        std::size_t peers = 0; // the most peers the page has room for
    };
    struct Peer {
        std::uint32_t id = 0;
        NodeStats stats;
        std::shared_ptr<const PeerHealth> health; // may be null
    };
    using Source = std::function<std::vector<Peer>()>;

    // Claims the page and writes a first snapshot; null when publishing is off
    // (MSGPASS_STATS=0), or the page cannot be made (a full /dev/shm, say: reported
    // on stderr only when MSGPASS_STATS asked for publishing), or a live process
    // already publishes this node (the inner factories of auto, whose outer factory
    // publishes; or a second process with the same id, which its technology refuses).
    static std::unique_ptr<StatsPublisher> start(const Identity& identity, Source source);
    ~StatsPublisher();
    StatsPublisher(const StatsPublisher&) = delete;
    StatsPublisher& operator=(const StatsPublisher&) = delete;

    // Writes a snapshot now (the thread writes one every interval).
    void publish();
    // Marks the page as closing, stops the thread and removes the page. Idempotent.
    void stop();
    [[nodiscard]] const std::string& name() const noexcept { return name_; }

private:
    StatsPublisher() = default;
    void run();

    std::string name_;
    int fd_ = -1;
    void* page_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
    pid_t owner_pid_ = 0;
    Source source_;
    std::chrono::milliseconds interval_{200};
    std::mutex publish_mutex_;                 // one writer of the seqlock at a time
    std::vector<std::uint64_t> moved_at_loss_; // per slot: traffic when its last loss was seen
    std::vector<std::uint64_t> losses_seen_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    bool stopped_ = false;
    std::thread thread_;
};

} // namespace msgpass::kit
