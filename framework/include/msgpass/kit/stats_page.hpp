// The implementer kit: the statistics page. Every factory derived from FactoryBase
// publishes the counters of the nodes it made (NodeStats per peer, with the losses
// the kit's loss latch saw) in a small shared-memory page, so that msgpass-top and
// scripts see a running partition from outside, with no code in the application.
// A seqlock-protected snapshot is written at most every interval (200 ms by
// default) by the application's own calls: every node call that moves messages
// passes the kit's lifetime check (kit/lifetime.hpp), which counts calls in a
// thread-local and reads a coarse clock every 16th; when the interval has passed,
// that call writes the pages of every factory of the process. No thread: a second
// thread would make glibc and libstdc++ leave their single-threaded fast paths
// (malloc, shared_ptr counts) for good, which cost a one-thread sci stream 20 % of
// its CPU per message (micro_bench SciStreamOneThread/64, 17.4 us against 21.8 us
// a burst). A node that makes no call publishes nothing new: msgpass-top shows it idle. The page is named after the
// user, the partition and the node id ("/msgpass-stats.<user>.<partition>.node<N>", the user as sci names its
// segments), its owner holds an exclusive flock on it for its whole life (as sci's segments: msgpass-run --cleanup
// removes a page no process holds), and the factory removes it when destroyed. MSGPASS_STATS=0 turns publishing off,
// MSGPASS_STATS_INTERVAL=<ms> changes the interval (docs/operations.md). The page has room for a record of
// every node of the file (616 + 352 x N bytes), but takes from /dev/shm only its first page (the header and 9
// records) at start and the page of a record when a peer first appears: 4 KiB x ceil((616 + 352 x T) / 4096)
// for T peers the node made, whatever N.
#pragma once

#include <msgpass/kit/health.hpp>
#include <msgpass/node_factory.hpp>
#include <msgpass/stats.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <system_error>
#include <unordered_map>
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

// Removes the shared-memory object name ("/name") unless a live process owns it. The
// owner of a page (and of every sci segment) holds an exclusive flock on it for its
// whole life, which the kernel drops however the process ends; an object that can be
// locked has no owner any more. The lock is held while the name is removed. With
// dry_run it only tells what it would do.
LeftoverRemoval remove_unheld_shm(const std::string& name, std::error_code& error, bool dry_run = false);

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
    enum class Owner { running, closing, idle, dead };
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
    // Its owner died while writing a snapshot (owner is dead): each counter is that
    // snapshot's or the one before.
    bool torn = false;
    std::vector<PeerView> peers;
};

[[nodiscard]] const char* owner_text(PageView::Owner owner) noexcept;

// Reads a page: nullopt with error set when it cannot be opened, is not a
// statistics page, or stayed mid-update for every try while its owner lived. owner
// is dead when no process holds the page's lock any more (the kernel drops it
// however the process ended; a snapshot it left mid-update is read as it stands,
// torn), idle when nothing was written for 5 intervals and a second (no node call).
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
    // The peers now, or nothing when they cannot be had without waiting (the page
    // keeps its last snapshot then).
    using Source = std::function<std::optional<std::vector<Peer>>()>;

    // Claims the page and writes a first snapshot; null when publishing is off
    // (MSGPASS_STATS=0), or the page cannot be made (a full /dev/shm, say: reported
    // on stderr only when MSGPASS_STATS asked for publishing), or a live process
    // already publishes this node (the inner factories of auto, whose outer factory
    // publishes; or a second process with the same id, which its technology refuses).
    static std::unique_ptr<StatsPublisher> start(const Identity& identity, Source source);
    ~StatsPublisher();
    StatsPublisher(const StatsPublisher&) = delete;
    StatsPublisher& operator=(const StatsPublisher&) = delete;

    // Writes a snapshot now (the node calls write one every interval).
    void publish();
    // Marks the page as closing, stops publishing and removes the page. Idempotent.
    void stop();
    [[nodiscard]] const std::string& name() const noexcept { return name_; }

private:
    StatsPublisher() = default;
    // The slot of peer id, placed (and its page of the object taken from /dev/shm)
    // when the peer first appears; nothing when the page is full or /dev/shm is.
    std::optional<std::size_t> place(std::uint32_t id);

    std::string name_;
    int fd_ = -1;
    void* page_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0; // slots the object has room for (the nodes of the file)
    std::size_t reserved_ = 0; // bytes of the object taken from /dev/shm (the first, whole pages)
    std::unordered_map<std::uint32_t, std::size_t> slot_of_; // peer id -> its slot, placed in order
    bool asked_ = false;          // MSGPASS_STATS asked for publishing: say why a peer is not shown
    bool reserve_failed_ = false; // said once
    pid_t owner_pid_ = 0;
    Source source_;
    std::chrono::milliseconds interval_{200};
    std::mutex publish_mutex_;                 // one writer of the seqlock at a time
    std::vector<std::uint64_t> moved_at_loss_; // per placed slot: traffic when its last loss was seen
    std::vector<std::uint64_t> losses_seen_;
    bool stopped_ = false; // under publish_mutex_, as the slots and reserved_
};

// The tick of the node calls (kit/lifetime.hpp's check_factory): every 16th call of
// a thread looks at a coarse clock, and writes every page of the process when the
// interval has passed. A thread-local count, so the data path touches no shared line.
namespace detail {
inline thread_local std::uint32_t stats_calls = 0;
void stats_tick_slow() noexcept;
} // namespace detail
inline void stats_tick() noexcept {
    if ((++detail::stats_calls & 15U) == 0) [[unlikely]]
        detail::stats_tick_slow();
}

} // namespace msgpass::kit
