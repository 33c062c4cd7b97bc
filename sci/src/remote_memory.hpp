// The remote-memory layer of the sci technology: an object-oriented interface in
// the shape of the SISCI API (the seed's OOSISCI, section 11) over an emulation
// backend in which every process of a host is an SCI node and a "remote segment" is
// a POSIX shared-memory object of another process, mapped with Boost.Interprocess.
//
// - VirtualDevice: the channel to the (emulated) driver, a static one and dynamic
//   ones, open until closed; it names segments by user, partition, node id and
//   segment id.
// - LocalSegment: memory this process offers to others; destroyed -> created ->
//   mapped (State pattern), available or not to remote nodes. The owner holds an
//   exclusive flock on the object for its whole life, so others can tell a live
//   owner from a dead one.
// - RemoteSegment: another node's segment; disconnected -> connected -> mapped.
// - Sequence: checks a transfer for errors, resets its error count, makes store
//   barriers, and drives retries. Failures are SciException (msgpass/sci/error.hpp). The
//   emulation can inject transfer errors (rate and seed from the configuration):
//   an injected error damages the copy or repeats the stale control word, and the
//   sequence reports it, so the retry path is exercised, not assumed.
#pragma once

#include <msgpass/error.hpp>
#include <msgpass/sci/error.hpp>
#include <msgpass/sci/naming.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>

namespace msgpass::sci {

// The seed's two kinds of device (OOSISCI, "Virtual devices"): one statically
// allocated (instance(), a singleton, scoped to the default partition) and any number
// made dynamically (the constructor, one per factory: a process may hold factories of
// several partitions). A device is open from its construction until close(); open()
// opens it again. Opening checks that the emulated driver, the shared-memory
// directory, can be used (a directory this process may create files in) and throws
// SciException("open") naming it otherwise; naming a segment through a closed device
// is a UsageError.
class VirtualDevice {
public:
    // A device scoped to a partition (names of segments embed user and partition), with
    // the SCI node id of each node's machine (a node not listed has none).
    explicit VirtualDevice(std::string partition, std::map<NodeId, std::optional<std::uint32_t>> sci_node_ids = {});
    // The statically allocated device, scoped to the partition a configuration names
    // by default ("msgpass"), opened on first use.
    static VirtualDevice& instance();

    void open();
    void close() noexcept { open_ = false; }
    [[nodiscard]] bool is_open() const noexcept { return open_; }

    // The name of a node's segment or region, by sci::segment_name (naming.hpp).
    [[nodiscard]] std::string segment_name(NodeId node, std::uint32_t segment_id, const std::string& suffix = {}) const;
    // The prefix shared by every segment of the partition (without the leading '/').
    [[nodiscard]] std::string partition_prefix() const;
    [[nodiscard]] const std::string& partition() const noexcept { return partition_; }

private:
    std::string partition_;
    std::string user_;
    std::map<NodeId, std::optional<std::uint32_t>> sci_node_ids_;
    bool open_ = false;
};

// A mapping of a shared-memory object into this process.
class MemorySegment {
public:
    MemorySegment() = default;
    MemorySegment(const MemorySegment&) = delete;
    MemorySegment& operator=(const MemorySegment&) = delete;
    virtual ~MemorySegment() = default;

    [[nodiscard]] virtual bool is_mapped() const noexcept = 0;
    [[nodiscard]] std::byte* address() const noexcept { return address_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] const std::string& name() const noexcept { return name_; }

protected:
    std::byte* address_ = nullptr;
    std::size_t size_ = 0;
    std::string name_;
};

// When the pages of a segment are taken from /dev/shm. A tmpfs hands out pages when
// they are first written; one that is full then answers with SIGBUS, which kills the
// writer. Reserved pages are taken at once (fallocate), so that a lack of space is a
// ResourceError instead.
enum class Pages {
    reserved, // all of them, when the segment is created
    on_use,   // sparse: the writer reserves each range before its first write (reserve())
};

class LocalSegment final : public MemorySegment {
public:
    class State;
    LocalSegment();
    ~LocalSegment() override;

    // Creates the object mode 0600. A segment of the same name left by a dead
    // process is removed and replaced; a live owner makes this throw SegmentInUse
    // naming the segment and, when it can be told, the owner's pid. With Pages::reserved, a /dev/shm without room for
    // size bytes makes it throw ResourceError naming the segment, its size and
    // /dev/shm (and nothing is left behind).
    void create(const std::string& name, std::size_t size, Pages pages = Pages::reserved);
    // Reserves the pages of [offset, offset + length) before they are first written
    // (a segment created Pages::on_use); a range below what was reserved already
    // costs nothing. Throws ResourceError naming the segment, the range and /dev/shm.
    void reserve(std::size_t offset, std::size_t length);
    void map();
    void unmap();
    // Unmaps if needed and removes the object.
    void destroy();

    // Makes the segment unavailable to remote nodes and available again (the seed's
    // SCISetSegmentUnavailable/Available). A created segment is available. While it
    // is unavailable, RemoteSegment::connect to its name finds nothing (and retries
    // later, as for a segment not yet created); nodes connected already keep their
    // mapping, and see replaced() (the name no longer designates what they mapped).
    // The object is moved aside under the name followed by unavailable_suffix, so that
    // msgpass-run's clean-up of the partition still finds it. set_available throws
    // SciException("set available") when another segment took the name meanwhile.
    // Both are UsageErrors on a destroyed segment; each is a no-op when already so.
    void set_available();
    void set_unavailable();
    [[nodiscard]] bool is_available() const noexcept { return !is_destroyed() && available_; }
    static constexpr std::string_view unavailable_suffix = ".unavailable";

    [[nodiscard]] bool is_created() const noexcept;
    [[nodiscard]] bool is_mapped() const noexcept override;
    [[nodiscard]] bool is_destroyed() const noexcept;

private:
    friend class LocalState;
    std::unique_ptr<State> state_;
    int fd_ = -1;
    std::size_t reserved_ = 0; // [0, reserved_) has its pages
    bool available_ = true;    // false: the object lies under name_ + unavailable_suffix
};

class RemoteSegment final : public MemorySegment {
public:
    class State;
    RemoteSegment();
    ~RemoteSegment() override;

    // Opens another node's segment. Returns false (and stays disconnected) when it
    // does not exist or its owner is dead (a stale segment), so that the caller
    // retries later; throws ResourceError on other failures.
    bool connect(const std::string& name);
    void map();
    void unmap();
    void disconnect();

    [[nodiscard]] bool is_connected() const noexcept;
    [[nodiscard]] bool is_mapped() const noexcept override;
    // True while the owner process holds its segment (one non-blocking syscall).
    [[nodiscard]] bool owner_alive() const noexcept;
    // True when the name now designates another object than the one connected
    // (the owner restarted and replaced its segment).
    [[nodiscard]] bool replaced() const noexcept;
    // As LocalSegment::reserve, for a segment whose owner left its pages to the writer
    // (a large-message region, which the sender fills).
    void reserve(std::size_t offset, std::size_t length);

private:
    friend class RemoteState;
    std::unique_ptr<State> state_;
    int fd_ = -1;
    std::uint64_t inode_ = 0;
    std::size_t reserved_ = 0; // [0, reserved_) has its pages, as far as this mapping knows
};

// Decides which transfers fail, reproducibly (Bernoulli with a seed).
class ErrorInjector {
public:
    ErrorInjector(double rate, std::uint64_t seed) : rate_(rate), rng_(seed) {}
    [[nodiscard]] bool enabled() const noexcept { return rate_ > 0.0; }
    bool fail() {
        if (rate_ <= 0.0) return false;
        std::lock_guard lock(mutex_);
        return std::bernoulli_distribution(rate_)(rng_);
    }

private:
    double rate_;
    std::mutex mutex_;
    std::mt19937_64 rng_;
};

// A sequence of transfers to one remote segment (SCIMapSequence). Transfers are
// done "safely": copy, check, and repeat until the check reports no error, up to
// max_attempts (then ResourceError). Every repetition is counted in retries().
class Sequence {
public:
    explicit Sequence(ErrorInjector* injector = nullptr) : injector_(injector) {}

    // Copies the fragments to dst in order. dst must hold their total size.
    void copy(std::byte* dst, std::span<const std::span<std::byte>> fragments);
    // Without error injection (the usual case) a plain copy, inline: a small message's
    // copy was otherwise a call through the fragment loop (about 60 instructions).
    void copy(std::byte* dst, const void* src, std::size_t n) {
        if (injector_ != nullptr) [[unlikely]]
            return copy_checked(dst, src, n);
        if (n != 0) std::memcpy(dst, src, n);
    }
    // As copy, with stores that bypass the cache (non-temporal), fenced before it
    // returns. For large messages: the reader's core gets them from memory instead of
    // snooping them out of this core's cache line by line.
    void copy_streaming(std::byte* dst, std::span<const std::span<std::byte>> fragments);
    // Publishes a control word with release order. stale is the value the word held
    // before: an injected error writes it again (a repeated notification) before the
    // retry writes the right value, so the receiver must rely on the signature.
    void write_word(std::uint32_t* word, std::uint32_t value, std::uint32_t stale) {
        if (injector_ != nullptr) [[unlikely]]
            return write_word_checked(word, value, stale);
        std::atomic_ref<std::uint32_t>(*word).store(value, std::memory_order_release);
    }

    [[nodiscard]] std::uint64_t retries() const noexcept { return retries_.load(std::memory_order_relaxed); }
    // Resets the error counter (the seed's SCIResetSequence): retries() counts from 0.
    void reset() noexcept { retries_.store(0, std::memory_order_relaxed); }
    // A store barrier (the seed's SCIStoreBarrier): every store made through this
    // sequence, non-temporal ones included, is visible to the remote node before any
    // store made after it.
    static void barrier() noexcept;

    static constexpr int max_attempts = 64;

private:
    void copy_checked(std::byte* dst, const void* src, std::size_t n);
    void write_word_checked(std::uint32_t* word, std::uint32_t value, std::uint32_t stale);
    // The emulated SCICheckSequence: whether the last transfer had an error.
    bool check() { return injector_ == nullptr || !injector_->fail(); }
    ErrorInjector* injector_;
    std::atomic<std::uint64_t> retries_{0};
};

// A memory barrier that one process makes on behalf of others (Linux membarrier,
// MEMBARRIER_CMD_GLOBAL_EXPEDITED): every thread of the processes that registered
// for it and runs at that moment passes a full barrier before the call returns. The
// sci sleep handshake uses it so that the side that writes on every message (a
// note, a grant) needs no fence of its own, and the side that is about to sleep,
// rarely, pays for both (about 1 us on the 2-core VM).
//
// True when this process registered (done once, on the first call) and has made one
// barrier: it may then skip its fences towards a partner that makes barriers.
bool process_barrier_registered() noexcept;
// Makes the barrier; false when the system call failed.
bool process_barrier() noexcept;

} // namespace msgpass::sci
