// The statistics page of the implementer kit (msgpass/kit/stats_page.hpp): its layout
// in shared memory, the seqlock that lets a reader take a consistent snapshot while
// the publisher writes, the publisher's thread, and the reader msgpass-top uses.
#include <msgpass/kit/stats_page.hpp>
#include <msgpass/log.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <new>
#include <pwd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace msgpass::kit {

namespace {

constexpr std::uint64_t page_magic = 0x3173746174737067ULL; // "gpstats1"
constexpr std::uint32_t page_version = 1;
constexpr std::size_t error_words = 32; // 256 bytes of the last error

// The counters of a NodeStats in their order on the page.
constexpr std::size_t counter_count = 8;

// One peer. Every field is an atomic written with relaxed stores inside the seqlock,
// so that a reader in the same process (the tests) races with nothing.
struct Slot {
    std::atomic<std::uint64_t> id_plus_one; // 0: unused
    std::array<std::atomic<std::uint64_t>, counter_count> counters;
    std::atomic<std::uint64_t> losses;
    std::atomic<std::uint64_t> lost;
    std::atomic<std::uint64_t> error_length;
    std::array<std::atomic<std::uint64_t>, error_words> error;
};

// The page: what never changes is written once before magic is stored (release).
struct Header {
    std::atomic<std::uint64_t> magic;
    std::uint32_t version;
    std::uint32_t capacity;
    std::uint32_t node;
    std::uint32_t interval_ms;
    std::int32_t pid;
    std::uint32_t reserved;
    char partition[128];
    char name[64];
    char technology[32];
    char host[64];
    char groups[256];               // comma-separated
    std::atomic<std::uint64_t> seq; // odd while a snapshot is written
    std::atomic<std::uint64_t> heartbeat_ns;
    std::atomic<std::uint64_t> publishes;
    std::atomic<std::uint64_t> closing;
    std::atomic<std::uint64_t> peer_count;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the page is shared between processes");

constexpr std::size_t page_size = 4096;

std::size_t round_to_pages(std::size_t bytes) {
    return (bytes + page_size - 1) / page_size * page_size;
}

// The size of the object: room for a slot per node of the file. Only the first page
// (the header and the first slots) is taken at start; the pages of the other slots
// are taken when a peer first needs one (StatsPublisher::place), so a node that talks
// to 2 peers of a 256-node file holds one page, not 23.
std::size_t page_bytes(std::size_t capacity) {
    return round_to_pages(sizeof(Header) + capacity * sizeof(Slot));
}

// The bytes the object must hold for its first `used` slots.
std::size_t bytes_for_slots(std::size_t used) {
    return round_to_pages(sizeof(Header) + used * sizeof(Slot));
}

// Takes the pages of [from, to) from /dev/shm now: a full /dev/shm is an error here,
// not a SIGBUS at the first write. 0 or the errno.
int reserve(int fd, std::size_t from, std::size_t to) {
    int rc = 0;
    do {
        rc = ::posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from));
    } while (rc == EINTR);
    return rc;
}

Slot* slots(void* page) {
    return reinterpret_cast<Slot*>(static_cast<char*>(page) + sizeof(Header));
}

std::int64_t monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <std::size_t N>
void copy_text(char (&to)[N], const std::string& from) {
    const std::size_t n = std::min(from.size(), N - 1);
    std::memcpy(to, from.data(), n);
    to[n] = '\0';
}

template <std::size_t N>
std::string read_text(const char (&from)[N]) {
    return std::string(from, ::strnlen(from, N));
}

void store_error(Slot& slot, const std::string& text) {
    const std::size_t n = std::min(text.size(), error_words * 8);
    for (std::size_t w = 0; w < (n + 7) / 8; ++w) {
        std::uint64_t word = 0;
        std::memcpy(&word, text.data() + w * 8, std::min<std::size_t>(8, n - w * 8));
        slot.error[w].store(word, std::memory_order_relaxed);
    }
    slot.error_length.store(n, std::memory_order_relaxed);
}

std::string load_error(const Slot& slot) {
    const std::size_t n = std::min<std::uint64_t>(slot.error_length.load(std::memory_order_relaxed), error_words * 8);
    std::string text(n, '\0');
    for (std::size_t w = 0; w < (n + 7) / 8; ++w) {
        const std::uint64_t word = slot.error[w].load(std::memory_order_relaxed);
        std::memcpy(text.data() + w * 8, &word, std::min<std::size_t>(8, n - w * 8));
    }
    return text;
}

std::array<std::uint64_t, counter_count> counters_of(const NodeStats& s) {
    return {s.messages_sent, s.bytes_sent,  s.messages_received, s.bytes_received,
            s.sends_queued,  s.queue_depth, s.retries,           s.errors};
}

NodeStats stats_of(const std::array<std::uint64_t, counter_count>& c) {
    NodeStats s;
    s.messages_sent = c[0];
    s.bytes_sent = c[1];
    s.messages_received = c[2];
    s.bytes_received = c[3];
    s.sends_queued = c[4];
    s.queue_depth = c[5];
    s.retries = c[6];
    s.errors = c[7];
    return s;
}

// MSGPASS_STATS: unset (publish, silently when the page cannot be made), "0", "off",
// "no" or "false" (do not publish), anything else (publish, and say why not).
struct Setting {
    bool on = true;
    bool asked = false;
    std::chrono::milliseconds interval{200};
};

Setting setting() {
    Setting s;
    if (const char* v = std::getenv("MSGPASS_STATS"); v != nullptr && *v != '\0') {
        const std::string text = v;
        s.on = !(text == "0" || text == "off" || text == "no" || text == "false");
        s.asked = s.on;
    }
    if (const char* v = std::getenv("MSGPASS_STATS_INTERVAL"); v != nullptr && *v != '\0') {
        unsigned ms = 0;
        const auto end = v + std::strlen(v);
        if (auto [p, ec] = std::from_chars(v, end, ms); ec == std::errc() && p == end && ms >= 10 && ms <= 60000) {
            s.interval = std::chrono::milliseconds(ms);
        } else {
            MSGPASS_LOG(framework, warn,
                        "msgpass: MSGPASS_STATS_INTERVAL='" + std::string(v) +
                            "' is not a number of milliseconds from 10 to 60000: the statistics page is written every "
                            "200 ms");
        }
    }
    return s;
}

// Every publisher of the process, written by the node calls' tick.
struct Registry {
    std::mutex mutex;
    std::vector<StatsPublisher*> publishers;
    std::atomic<std::int64_t> next_due_ns{0};
    std::atomic<std::int64_t> interval_ns{200'000'000};
};

Registry& registry() {
    static Registry* r = new Registry; // never destroyed: a tick may come during exit
    return *r;
}

std::int64_t coarse_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

} // namespace

void detail::stats_tick_slow() noexcept {
    auto& r = registry();
    const std::int64_t now = coarse_ns();
    std::int64_t due = r.next_due_ns.load(std::memory_order_relaxed);
    if (now < due) return;
    // One thread wins the interval; the others go on at once.
    if (!r.next_due_ns.compare_exchange_strong(due, now + r.interval_ns.load(std::memory_order_relaxed),
                                               std::memory_order_relaxed))
        return;
    std::unique_lock lock(r.mutex, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (auto* publisher : r.publishers) {
        try {
            publisher->publish();
        } catch (...) { // a snapshot that cannot be made (no memory) waits for the next interval
        }
    }
}

std::string stats_user(uid_t uid) {
    passwd entry{};
    passwd* found = nullptr;
    std::vector<char> text(16384);
    if (::getpwuid_r(uid, &entry, text.data(), text.size(), &found) == 0 && found != nullptr &&
        found->pw_name != nullptr && found->pw_name[0] != '\0') {
        return found->pw_name;
    }
    return "uid" + std::to_string(uid);
}

std::string stats_user() {
    return stats_user(::geteuid());
}

std::string stats_page_prefix(std::string_view user, std::string_view partition) {
    std::string prefix = "msgpass-stats.";
    prefix += user;
    prefix += '.';
    prefix += partition;
    prefix += ".node";
    return prefix;
}

std::string stats_page_name(std::string_view user, std::string_view partition, std::uint32_t node) {
    std::string name = "/";
    name += stats_page_prefix(user, partition);
    name += std::to_string(node);
    return name;
}

std::vector<std::string> find_stats_pages(std::string_view user, std::string_view partition, std::error_code& error) {
    error.clear();
    // Every partition: "msgpass-stats.<user>." then anything, then ".node<N>".
    const std::string prefix =
        partition.empty() ? "msgpass-stats." + std::string(user) + "." : stats_page_prefix(user, partition);
    std::vector<std::pair<std::uint32_t, std::string>> found;
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) {
        error.assign(errno, std::system_category());
        return {};
    }
    while (const dirent* entry = ::readdir(dir)) {
        const std::string_view name = entry->d_name;
        if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) continue;
        auto digits = name.substr(prefix.size());
        if (partition.empty()) {
            const auto at = digits.rfind(".node");
            if (at == std::string_view::npos || at == 0) continue;
            digits = digits.substr(at + 5);
        }
        std::uint32_t id = 0;
        const auto end = digits.data() + digits.size();
        if (auto [p, ec] = std::from_chars(digits.data(), end, id); ec != std::errc() || p != end) continue;
        std::string path = "/"; // appended, not "/" + ...: GCC 12 warns falsely on that insert
        path += name;
        found.emplace_back(id, std::move(path));
    }
    ::closedir(dir);
    std::sort(found.begin(), found.end());
    std::vector<std::string> names;
    for (auto& [id, name] : found)
        names.push_back(std::move(name));
    return names;
}

const char* owner_text(PageView::Owner owner) noexcept {
    switch (owner) {
    case PageView::Owner::running:
        return "running";
    case PageView::Owner::closing:
        return "stopped";
    case PageView::Owner::idle:
        return "idle";
    case PageView::Owner::dead:
        return "dead";
    }
    return "?";
}

std::optional<PageView> read_stats_page(const std::string& shm_name, std::string& error) {
    const int fd = ::shm_open(shm_name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        error = shm_name + ": " + std::strerror(errno);
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(Header)) {
        error = shm_name + ": not a statistics page (too small)";
        ::close(fd);
        return std::nullopt;
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        error = shm_name + ": " + std::strerror(errno);
        ::close(fd);
        return std::nullopt;
    }
    // Whether a process still holds the page: its owner's exclusive lock stays until
    // it ends, however it ends.
    const auto probe_held = [fd] {
        if (::flock(fd, LOCK_SH | LOCK_NB) != 0) return true;
        ::flock(fd, LOCK_UN);
        return false;
    };
    bool held = probe_held();
    const auto& header = *static_cast<const Header*>(map);
    std::optional<PageView> result;
    if (header.magic.load(std::memory_order_acquire) != page_magic || header.version != page_version ||
        page_bytes(header.capacity) != size) {
        error = shm_name + ": not a statistics page of this version";
    } else {
        PageView view;
        view.shm_name = shm_name;
        view.node = header.node;
        view.pid = header.pid;
        view.partition = read_text(header.partition);
        view.name = read_text(header.name);
        view.technology = read_text(header.technology);
        view.host = read_text(header.host);
        const std::string groups = read_text(header.groups);
        for (std::size_t at = 0; at < groups.size();) {
            const auto comma = std::min(groups.find(',', at), groups.size());
            if (comma > at) view.groups.push_back(groups.substr(at, comma - at));
            at = comma + 1;
        }
        view.interval_ms = header.interval_ms;
        const Slot* peers = slots(map);
        // A snapshot mid-update is waited for while its writer lives. A writer that
        // died in the middle of one (killed while its node call wrote the page) never
        // ends it: the page is read as it stands, torn, each counter that snapshot's or
        // the one before (every field is written whole).
        constexpr int tries = 10000;
        bool consistent = false;
        for (int attempt = 0;; ++attempt) {
            const std::uint64_t before = header.seq.load(std::memory_order_acquire);
            view.torn = before % 2 != 0;
            if (view.torn && held) {
                if (attempt < tries) {
                    std::this_thread::yield();
                    continue;
                }
                held = probe_held(); // (it may have died meanwhile)
                if (held) break;     // alive, and stuck mid-update
            }
            view.peers.clear();
            const auto count =
                std::min<std::uint64_t>(header.peer_count.load(std::memory_order_relaxed), header.capacity);
            for (std::uint64_t i = 0; i < count; ++i) {
                const Slot& slot = peers[i];
                const std::uint64_t id = slot.id_plus_one.load(std::memory_order_relaxed);
                if (id == 0) continue;
                PeerView peer;
                peer.id = static_cast<std::uint32_t>(id - 1);
                std::array<std::uint64_t, counter_count> c{};
                for (std::size_t k = 0; k < counter_count; ++k)
                    c[k] = slot.counters[k].load(std::memory_order_relaxed);
                peer.stats = stats_of(c);
                peer.losses = slot.losses.load(std::memory_order_relaxed);
                peer.lost = slot.lost.load(std::memory_order_relaxed) != 0;
                peer.last_error = load_error(slot);
                view.peers.push_back(std::move(peer));
            }
            view.publishes = header.publishes.load(std::memory_order_relaxed);
            const auto heartbeat = static_cast<std::int64_t>(header.heartbeat_ns.load(std::memory_order_relaxed));
            std::atomic_thread_fence(std::memory_order_acquire);
            consistent = header.seq.load(std::memory_order_relaxed) == before;
            view.taken_ns = monotonic_ns();
            view.heartbeat_age_ns = view.taken_ns - heartbeat;
            if (consistent || attempt >= tries) break;
        }
        if (!consistent) {
            error = shm_name + ": the page stayed mid-update";
        } else {
            // Slots are placed as peers first appear; shown in id order.
            std::sort(view.peers.begin(), view.peers.end(),
                      [](const PeerView& a, const PeerView& b) { return a.id < b.id; });
            const std::int64_t stale_ns = (5LL * view.interval_ms + 1000) * 1'000'000;
            if (!held) {
                view.owner = PageView::Owner::dead;
            } else if (header.closing.load(std::memory_order_relaxed) != 0) {
                view.owner = PageView::Owner::closing;
            } else if (view.heartbeat_age_ns > stale_ns) {
                view.owner = PageView::Owner::idle;
            }
            result = std::move(view);
        }
    }
    ::close(fd);
    ::munmap(map, size);
    return result;
}

std::unique_ptr<StatsPublisher> StatsPublisher::start(const Identity& identity, Source source) {
    const Setting s = setting();
    if (!s.on) return nullptr;
    const std::string name = stats_page_name(stats_user(), identity.partition, identity.node);
    const auto report = [&](const std::string& why) {
        if (s.asked) MSGPASS_LOG(framework, warn, "msgpass: the statistics page " + name + " is not published: " + why);
    };
    const std::size_t capacity = std::max<std::size_t>(identity.peers, 1);
    const std::size_t size = page_bytes(capacity);
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
        fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) break;
        // A page of this node exists: stale (no process holds it) is replaced; held by
        // a live process, it is that process's (this one's outer factory, for auto).
        const int old = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
        if (old < 0) continue;
        const bool stale = ::flock(old, LOCK_EX | LOCK_NB) == 0;
        if (stale) ::shm_unlink(name.c_str());
        ::close(old);
        if (!stale) return nullptr;
    }
    if (fd < 0) {
        report(std::strerror(errno));
        return nullptr;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) { // a reader probing it this very moment
        if (::flock(fd, LOCK_EX) != 0) {
            report(std::string("flock: ") + std::strerror(errno));
            ::shm_unlink(name.c_str());
            ::close(fd);
            return nullptr;
        }
    }
    // The object has room for a slot per node of the file but takes only its first
    // page now (the header and the first slots; reserved, so that a full /dev/shm is an
    // error here, not a SIGBUS at the first write); the rest stays a hole until peers
    // need it. Readers map the whole size and read only the slots peer_count covers.
    const std::size_t first = std::min(size, bytes_for_slots(0));
    const int rc = ::ftruncate(fd, static_cast<off_t>(size)) != 0 ? errno : reserve(fd, 0, first);
    if (rc != 0) {
        report(std::string("cannot reserve ") + std::to_string(first) + " of " + std::to_string(size) +
               " bytes in /dev/shm: " + std::strerror(rc));
        ::shm_unlink(name.c_str());
        ::close(fd);
        return nullptr;
    }
    void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        report(std::string("mmap: ") + std::strerror(errno));
        ::shm_unlink(name.c_str());
        ::close(fd);
        return nullptr;
    }
    // The slots are not constructed: a new object reads as zeros, an unused slot.
    auto* header = new (map) Header{};
    header->version = page_version;
    header->capacity = static_cast<std::uint32_t>(capacity);
    header->node = identity.node;
    header->interval_ms = static_cast<std::uint32_t>(s.interval.count());
    header->pid = ::getpid();
    copy_text(header->partition, identity.partition);
    copy_text(header->name, identity.name);
    copy_text(header->technology, identity.technology);
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) == 0) copy_text(header->host, std::string(host.data()));
    std::string groups;
    for (const auto& g : identity.groups)
        groups += (groups.empty() ? "" : ",") + g;
    copy_text(header->groups, groups);
    header->heartbeat_ns.store(static_cast<std::uint64_t>(monotonic_ns()), std::memory_order_relaxed);
    header->magic.store(page_magic, std::memory_order_release);

    std::unique_ptr<StatsPublisher> publisher(new StatsPublisher);
    publisher->name_ = name;
    publisher->fd_ = fd;
    publisher->page_ = map;
    publisher->size_ = size;
    publisher->capacity_ = capacity;
    publisher->owner_pid_ = ::getpid();
    publisher->source_ = std::move(source);
    publisher->interval_ = s.interval;
    publisher->reserved_ = first;
    publisher->asked_ = s.asked;
    publisher->publish();
    auto& r = registry();
    {
        std::lock_guard lock(r.mutex);
        r.publishers.push_back(publisher.get());
        r.interval_ns.store(std::chrono::nanoseconds(s.interval).count(), std::memory_order_relaxed);
    }
    return publisher;
}

std::optional<std::size_t> StatsPublisher::place(std::uint32_t id) {
    if (auto it = slot_of_.find(id); it != slot_of_.end()) return it->second;
    const std::size_t slot = slot_of_.size();
    if (slot >= capacity_) return std::nullopt;
    // The first peer of a page of the object takes that page from /dev/shm.
    if (const std::size_t end = bytes_for_slots(slot + 1); end > reserved_) {
        if (const int rc = reserve(fd_, reserved_, end); rc != 0) {
            if (asked_ && !reserve_failed_) {
                MSGPASS_LOG(framework, warn,
                            "msgpass: the statistics page " + name_ + " shows no more peers: cannot reserve bytes " +
                                std::to_string(reserved_) + " to " + std::to_string(end) +
                                " in /dev/shm: " + std::strerror(rc));
            }
            reserve_failed_ = true;
            return std::nullopt;
        }
        reserved_ = end;
    }
    slot_of_.emplace(id, slot);
    moved_at_loss_.push_back(0);
    losses_seen_.push_back(0);
    return slot;
}

void StatsPublisher::publish() {
    // The source is asked outside the seqlock: a node's stats() may take its lock.
    auto got = source_ ? source_() : std::optional<std::vector<Peer>>(std::vector<Peer>{});
    if (!got) return;
    std::vector<Peer> peers = std::move(*got);
    std::lock_guard lock(publish_mutex_);
    if (page_ == nullptr) return;
    // Each peer keeps the slot it was given when it first appeared (slots are placed in
    // order, so that the used ones are the first pages of the object); placed outside
    // the seqlock, as a slot at or past peer_count is read by no reader.
    std::vector<std::pair<std::size_t, const Peer*>> placed;
    placed.reserve(peers.size());
    std::vector<bool> present(slot_of_.size() + peers.size(), false);
    for (const Peer& peer : peers) {
        if (const auto slot = place(peer.id)) {
            placed.emplace_back(*slot, &peer);
            present[*slot] = true;
        }
    }
    const std::size_t used = slot_of_.size();
    auto& header = *static_cast<Header*>(page_);
    Slot* slot = slots(page_);
    const std::uint64_t seq = header.seq.load(std::memory_order_relaxed);
    header.seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    for (const auto& [i, peer] : placed) {
        Slot& s = slot[i];
        s.id_plus_one.store(std::uint64_t{peer->id} + 1, std::memory_order_relaxed);
        const auto c = counters_of(peer->stats);
        for (std::size_t k = 0; k < counter_count; ++k)
            s.counters[k].store(c[k], std::memory_order_relaxed);
        const std::uint64_t moved = peer->stats.messages_sent + peer->stats.messages_received;
        const std::uint64_t losses = peer->health ? peer->health->losses() : 0;
        if (losses != losses_seen_[i]) {
            // A new loss: the peer counts as lost until a message moves again.
            losses_seen_[i] = losses;
            moved_at_loss_[i] = moved;
            store_error(s, peer->health->last_error());
        }
        s.losses.store(losses, std::memory_order_relaxed);
        s.lost.store(losses > 0 && moved == moved_at_loss_[i] ? 1 : 0, std::memory_order_relaxed);
    }
    // A peer whose node is gone is not shown; its slot stays its own if it comes back.
    for (std::size_t i = 0; i < used; ++i)
        if (!present[i]) slot[i].id_plus_one.store(0, std::memory_order_relaxed);
    header.peer_count.store(used, std::memory_order_relaxed);
    header.seq.store(seq + 2, std::memory_order_release);
    header.heartbeat_ns.store(static_cast<std::uint64_t>(monotonic_ns()), std::memory_order_relaxed);
    header.publishes.fetch_add(1, std::memory_order_relaxed);
}

void StatsPublisher::stop() {
    {
        // Out of the registry first: no tick writes this page once stop returns.
        auto& r = registry();
        std::lock_guard lock(r.mutex);
        std::erase(r.publishers, this);
    }
    std::lock_guard lock(publish_mutex_);
    if (stopped_) return;
    stopped_ = true;
    if (page_ == nullptr) return;
    static_cast<Header*>(page_)->closing.store(1, std::memory_order_relaxed);
    // A child forked from the owner has the object, not the page's name to remove.
    if (::getpid() == owner_pid_) ::shm_unlink(name_.c_str());
    ::munmap(page_, size_);
    ::close(fd_);
    page_ = nullptr;
}

StatsPublisher::~StatsPublisher() {
    stop();
}

LeftoverRemoval remove_unheld_shm(const std::string& name, std::error_code& error, bool dry_run) {
    error.clear();
    const int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        if (errno == ENOENT) return LeftoverRemoval::absent;
        error.assign(errno, std::system_category());
        return LeftoverRemoval::failed;
    }
    LeftoverRemoval result = LeftoverRemoval::removed;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            result = LeftoverRemoval::in_use;
        } else {
            error.assign(errno, std::system_category());
            result = LeftoverRemoval::failed;
        }
    } else if (!dry_run && ::shm_unlink(name.c_str()) != 0) {
        if (errno == ENOENT) {
            result = LeftoverRemoval::absent;
        } else {
            error.assign(errno, std::system_category());
            result = LeftoverRemoval::failed;
        }
    }
    ::close(fd); // drops the lock
    return result;
}

} // namespace msgpass::kit
