// The emulation backend of the remote-memory layer: POSIX shared-memory objects
// (Boost.Interprocess), an exclusive flock held by the owner as its liveness
// token, and State objects for the life cycles of local and remote segments.
#include "remote_memory.hpp"

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif
#include <fcntl.h>
#include <linux/membarrier.h>
#include <optional>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace bip = boost::interprocess;

namespace msgpass::sci {

namespace {

// Inode of the object a shared-memory name designates now, 0 if none.
std::uint64_t inode_of_name(const std::string& name) {
    struct stat st {};
    if (::stat(shm_path(name).c_str(), &st) != 0) return 0;
    return static_cast<std::uint64_t>(st.st_ino);
}

std::uint64_t inode_of_fd(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return 0;
    return static_cast<std::uint64_t>(st.st_ino);
}

// The pid holding a flock on the file of inode ino, from /proc/locks (lines such as
// "1: FLOCK  ADVISORY  WRITE 4785 00:1b:375887 0 EOF"), 0 when none is listed.
long flock_holder(std::uint64_t ino) {
    std::ifstream locks("/proc/locks");
    std::string line;
    const std::string suffix = ":" + std::to_string(ino);
    while (std::getline(locks, line)) {
        std::istringstream fields(line);
        std::string number, kind, mode, access, pid, device;
        fields >> number >> kind;
        if (kind == "->") fields >> kind; // a waiter, listed under the holder
        fields >> mode >> access >> pid >> device;
        if (kind != "FLOCK" || device.size() <= suffix.size() ||
            device.compare(device.size() - suffix.size(), suffix.size(), suffix) != 0) {
            continue;
        }
        try {
            const long holder = std::stol(pid);
            if (holder > 0) return holder;
        } catch (const std::exception&) {
        }
    }
    return 0;
}

// " (/dev/shm: N bytes, M free)", or "" when it cannot be told.
std::string shm_space() {
    struct statvfs st {};
    const std::string dir(shm_directory);
    if (::statvfs(dir.c_str(), &st) != 0) return "";
    return " (" + dir + ": " + std::to_string(std::uint64_t{st.f_blocks} * st.f_frsize) + " bytes, " +
           std::to_string(std::uint64_t{st.f_bavail} * st.f_frsize) + " free)";
}

// Takes the pages of [from, to) of the object behind fd from /dev/shm now, so that
// writing them later never meets a full tmpfs (SIGBUS). Throws ResourceError naming
// the segment, its size, the range and /dev/shm.
void reserve_pages(int fd, const std::string& name, std::size_t size, std::size_t from, std::size_t to) {
    int rc = 0;
    do {
        rc = ::posix_fallocate(fd, static_cast<off_t>(from), static_cast<off_t>(to - from));
    } while (rc == EINTR);
    if (rc == 0) return;
    const std::string what = from == 0 && to == size ? "the " + std::to_string(size) + " bytes"
                                                     : "bytes " + std::to_string(from) + " to " + std::to_string(to) +
                                                           " of the " + std::to_string(size) + " bytes";
    throw SciException("reserve", name,
                       "cannot reserve " + what + " of shared memory segment '" + name + "' in " +
                           std::string(shm_directory) + ": " + std::strerror(rc) + shm_space());
}

// Boost.Interprocess names are without the leading '/'.
std::string bip_name(const std::string& name) {
    return name.starts_with('/') ? name.substr(1) : name;
}

} // namespace

VirtualDevice::VirtualDevice(std::string partition, std::map<NodeId, std::optional<std::uint32_t>> sci_node_ids)
    : partition_(std::move(partition)), user_(segment_user()), sci_node_ids_(std::move(sci_node_ids)) {
    open();
}

VirtualDevice& VirtualDevice::instance() {
    static VirtualDevice device{config::Configuration{}.partition};
    if (!device.is_open()) device.open();
    return device;
}

void VirtualDevice::open() {
    const std::string directory(shm_directory);
    struct stat st {};
    std::string reason;
    if (::stat(directory.c_str(), &st) != 0) {
        reason = std::strerror(errno);
    } else if (!S_ISDIR(st.st_mode)) {
        reason = "not a directory";
    } else if (::access(directory.c_str(), W_OK | X_OK) != 0) {
        reason = std::strerror(errno);
    }
    if (!reason.empty()) {
        throw SciException("open", {},
                           "cannot open the sci virtual device: " + directory +
                               " is not a directory this process may create shared memory in: " + reason);
    }
    open_ = true;
}

std::string VirtualDevice::partition_prefix() const {
    return sci::partition_prefix(user_, partition_);
}

std::string VirtualDevice::segment_name(NodeId node, std::uint32_t segment_id, const std::string& suffix) const {
    if (!open_)
        throw UsageError("sci virtual device of partition '" + partition_ + "': cannot name a segment when closed");
    const auto sci = sci_node_ids_.find(node);
    return sci::segment_name(
        SegmentAddress{user_, partition_, sci != sci_node_ids_.end() ? sci->second : std::nullopt, node, segment_id},
        suffix);
}

// ---------------------------------------------------------------- local segment

struct LocalObjects {
    std::optional<bip::shared_memory_object> object;
    std::optional<bip::mapped_region> region;
};

class LocalSegment::State {
public:
    virtual ~State() = default;
    [[nodiscard]] virtual const char* name() const noexcept = 0;
    virtual void create(LocalSegment& s, const std::string&, std::size_t, Pages) { refuse(s, "create"); }
    virtual void map(LocalSegment& s) { refuse(s, "map"); }
    virtual void unmap(LocalSegment& s) { refuse(s, "unmap"); }
    virtual void destroy(LocalSegment& s) { refuse(s, "destroy"); }
    LocalObjects objects;

protected:
    void refuse(const LocalSegment& s, const char* op) const {
        throw UsageError(std::string("local segment '") + s.name() + "': cannot " + op + " when " + name());
    }
};

class LocalState {
public:
    static void become(LocalSegment& s, std::unique_ptr<LocalSegment::State> next) {
        next->objects = std::move(s.state_->objects);
        s.state_ = std::move(next);
    }
    static int& fd(LocalSegment& s) { return s.fd_; }
    static std::byte*& address(LocalSegment& s) { return s.address_; }
    static std::size_t& size(LocalSegment& s) { return s.size_; }
    static std::string& name(LocalSegment& s) { return s.name_; }
    static std::size_t& reserved(LocalSegment& s) { return s.reserved_; }
    static bool& available(LocalSegment& s) { return s.available_; }
};

namespace {

class LocalDestroyed final : public LocalSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "destroyed"; }
    void create(LocalSegment& s, const std::string& segment, std::size_t size, Pages pages) override;
};

class LocalCreated final : public LocalSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "created"; }
    void map(LocalSegment& s) override;
    void destroy(LocalSegment& s) override;
};

class LocalMapped final : public LocalSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "mapped"; }
    void unmap(LocalSegment& s) override;
    void destroy(LocalSegment& s) override {
        unmap(s);
        s.destroy();
    }
};

// Takes the exclusive lock of a segment found at start, true when its owner is dead.
// A live owner holds that lock for its whole life; but a partner checking whether a
// dead owner is alive (RemoteSegment::owner_alive, connect) takes a shared lock on
// it for a moment, and a restarted node that tried just then took the dead owner for
// a live one (the 30-minute soak saw it once in 435 restarts). So the lock is tried
// again for up to stale_lock_grace before the owner is called alive.
bool lock_stale_segment(int fd) {
    constexpr auto stale_lock_grace = std::chrono::seconds(1);
    const auto deadline = std::chrono::steady_clock::now() + stale_lock_grace;
    for (;;) {
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
        if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

void LocalDestroyed::create(LocalSegment& s, const std::string& segment, std::size_t size, Pages pages) {
    const std::string name = bip_name(segment);
    bip::permissions owner_only;
    owner_only.set_permissions(0600);
    for (int attempt = 0; attempt < 16; ++attempt) {
        std::optional<bip::shared_memory_object> object;
        try {
            object.emplace(bip::create_only, name.c_str(), bip::read_write, owner_only);
        } catch (const bip::interprocess_exception& e) {
            if (e.get_error_code() != bip::already_exists_error) {
                throw SciException("create", segment,
                                   "cannot create shared memory segment '" + segment + "': " + e.what());
            }
            // A segment of this name exists: its owner is alive if it holds the lock.
            try {
                bip::shared_memory_object old(bip::open_only, name.c_str(), bip::read_write);
                const int old_fd = old.get_mapping_handle().handle;
                if (!lock_stale_segment(old_fd)) {
                    const long holder = flock_holder(inode_of_fd(old_fd));
                    throw SegmentInUse(segment, holder,
                                       "shared memory segment '" + segment + "' belongs to a live process" +
                                           (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                                           ": is another process running with the same node id in this partition?");
                }
                bip::shared_memory_object::remove(name.c_str()); // stale: its owner died
            } catch (const bip::interprocess_exception&) {
                // It vanished meanwhile; try again.
            }
            continue;
        }
        const int fd = object->get_mapping_handle().handle;
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || inode_of_fd(fd) != inode_of_name(name)) {
            continue; // a racing process took or removed this object; start over
        }
        try {
            object->truncate(static_cast<bip::offset_t>(size));
        } catch (const bip::interprocess_exception& e) {
            bip::shared_memory_object::remove(name.c_str());
            throw SciException("create", segment,
                               "cannot size shared memory segment '" + segment + "' to " + std::to_string(size) +
                                   " bytes: " + e.what());
        }
        if (pages == Pages::reserved && size > 0) {
            try {
                reserve_pages(fd, segment, size, 0, size);
            } catch (const ResourceError&) {
                bip::shared_memory_object::remove(name.c_str());
                throw;
            }
        }
        LocalState::fd(s) = fd;
        LocalState::name(s) = segment;
        LocalState::size(s) = size;
        LocalState::reserved(s) = pages == Pages::reserved ? size : 0;
        objects.object = std::move(object);
        LocalState::become(s, std::make_unique<LocalCreated>());
        return;
    }
    throw SciException("create", segment,
                       "cannot create shared memory segment '" + segment + "': other processes keep racing for it");
}

void LocalCreated::map(LocalSegment& s) {
    try {
        objects.region.emplace(*objects.object, bip::read_write);
    } catch (const bip::interprocess_exception& e) {
        throw SciException("map", s.name(), "cannot map shared memory segment '" + s.name() + "': " + e.what());
    }
    LocalState::address(s) = static_cast<std::byte*>(objects.region->get_address());
    LocalState::become(s, std::make_unique<LocalMapped>());
}

void LocalCreated::destroy(LocalSegment& s) {
    const std::string unavailable = s.name() + std::string(LocalSegment::unavailable_suffix);
    bip::shared_memory_object::remove(bip_name(s.is_available() ? s.name() : unavailable).c_str());
    LocalState::available(s) = true;
    objects.object.reset(); // closes the descriptor and drops the lock
    LocalState::fd(s) = -1;
    LocalState::size(s) = 0;
    LocalState::reserved(s) = 0;
    LocalState::become(s, std::make_unique<LocalDestroyed>());
}

void LocalMapped::unmap(LocalSegment& s) {
    objects.region.reset();
    LocalState::address(s) = nullptr;
    LocalState::become(s, std::make_unique<LocalCreated>());
}

} // namespace

LocalSegment::LocalSegment() : state_(std::make_unique<LocalDestroyed>()) {}
LocalSegment::~LocalSegment() {
    try {
        if (!is_destroyed()) destroy();
    } catch (...) {
        // Destruction never throws; the object is removed at the next start anyway.
    }
}
void LocalSegment::create(const std::string& name, std::size_t size, Pages pages) {
    state_->create(*this, name, size, pages);
}
void LocalSegment::reserve(std::size_t offset, std::size_t length) {
    const std::size_t end = offset + length;
    if (end <= reserved_) return;
    if (fd_ < 0 || end > size_) {
        throw UsageError("local segment '" + name_ + "': cannot reserve bytes " + std::to_string(offset) + " to " +
                         std::to_string(end) + " of " + std::to_string(size_));
    }
    reserve_pages(fd_, name_, size_, reserved_, end); // from the mark: the range before it is reserved
    reserved_ = end;
}
void LocalSegment::map() {
    state_->map(*this);
}
void LocalSegment::unmap() {
    state_->unmap(*this);
}
void LocalSegment::destroy() {
    state_->destroy(*this);
}
void LocalSegment::set_unavailable() {
    if (is_destroyed()) throw UsageError("local segment '" + name_ + "': cannot make unavailable when destroyed");
    if (!available_) return;
    const std::string from = shm_path(name_), to = from + std::string(unavailable_suffix);
    if (::rename(from.c_str(), to.c_str()) != 0) {
        throw SciException("set unavailable", name_,
                           "cannot make shared memory segment '" + name_ + "' unavailable: " + std::strerror(errno));
    }
    available_ = false;
}

void LocalSegment::set_available() {
    if (is_destroyed()) throw UsageError("local segment '" + name_ + "': cannot make available when destroyed");
    if (available_) return;
    const std::string to = shm_path(name_), from = to + std::string(unavailable_suffix);
    // RENAME_NOREPLACE: a process that took the name meanwhile keeps it.
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0) {
        throw SciException("set available", name_,
                           "cannot make shared memory segment '" + name_ + "' available again: " +
                               (errno == EEXIST ? std::string("another segment of that name exists")
                                                : std::string(std::strerror(errno))));
    }
    available_ = true;
}

bool LocalSegment::is_created() const noexcept {
    return dynamic_cast<const LocalCreated*>(state_.get()) != nullptr;
}
bool LocalSegment::is_mapped() const noexcept {
    return dynamic_cast<const LocalMapped*>(state_.get()) != nullptr;
}
bool LocalSegment::is_destroyed() const noexcept {
    return dynamic_cast<const LocalDestroyed*>(state_.get()) != nullptr;
}

// --------------------------------------------------------------- remote segment

class RemoteSegment::State {
public:
    virtual ~State() = default;
    [[nodiscard]] virtual const char* name() const noexcept = 0;
    virtual bool connect(RemoteSegment& s, const std::string&) {
        refuse(s, "connect");
        return false;
    }
    virtual void map(RemoteSegment& s) { refuse(s, "map"); }
    virtual void unmap(RemoteSegment& s) { refuse(s, "unmap"); }
    virtual void disconnect(RemoteSegment& s) { refuse(s, "disconnect"); }
    LocalObjects objects;

protected:
    void refuse(const RemoteSegment& s, const char* op) const {
        throw UsageError(std::string("remote segment '") + s.name() + "': cannot " + op + " when " + name());
    }
};

class RemoteState {
public:
    static void become(RemoteSegment& s, std::unique_ptr<RemoteSegment::State> next) {
        next->objects = std::move(s.state_->objects);
        s.state_ = std::move(next);
    }
    static int& fd(RemoteSegment& s) { return s.fd_; }
    static std::uint64_t& inode(RemoteSegment& s) { return s.inode_; }
    static std::byte*& address(RemoteSegment& s) { return s.address_; }
    static std::size_t& size(RemoteSegment& s) { return s.size_; }
    static std::string& name(RemoteSegment& s) { return s.name_; }
    static std::size_t& reserved(RemoteSegment& s) { return s.reserved_; }
};

namespace {

class RemoteDisconnected final : public RemoteSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "disconnected"; }
    bool connect(RemoteSegment& s, const std::string& segment) override;
};

class RemoteConnected final : public RemoteSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "connected"; }
    void map(RemoteSegment& s) override;
    void disconnect(RemoteSegment& s) override;
};

class RemoteMapped final : public RemoteSegment::State {
public:
    [[nodiscard]] const char* name() const noexcept override { return "mapped"; }
    void unmap(RemoteSegment& s) override;
    void disconnect(RemoteSegment& s) override {
        unmap(s);
        s.disconnect();
    }
};

bool RemoteDisconnected::connect(RemoteSegment& s, const std::string& segment) {
    std::optional<bip::shared_memory_object> object;
    try {
        object.emplace(bip::open_only, bip_name(segment).c_str(), bip::read_write);
    } catch (const bip::interprocess_exception& e) {
        if (e.get_error_code() == bip::not_found_error) return false;
        throw SciException("connect", segment, "cannot open shared memory segment '" + segment + "': " + e.what());
    }
    const int fd = object->get_mapping_handle().handle;
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
        ::flock(fd, LOCK_UN);
        return false; // nobody holds it: its owner died, the segment is stale
    }
    bip::offset_t size = 0;
    if (!object->get_size(size) || size <= 0) return false; // owner still sizing it
    RemoteState::fd(s) = fd;
    RemoteState::inode(s) = inode_of_fd(fd);
    RemoteState::name(s) = segment;
    RemoteState::size(s) = static_cast<std::size_t>(size);
    objects.object = std::move(object);
    RemoteState::become(s, std::make_unique<RemoteConnected>());
    return true;
}

void RemoteConnected::map(RemoteSegment& s) {
    try {
        objects.region.emplace(*objects.object, bip::read_write, 0, s.size());
    } catch (const bip::interprocess_exception& e) {
        throw SciException("map", s.name(), "cannot map shared memory segment '" + s.name() + "': " + e.what());
    }
    RemoteState::address(s) = static_cast<std::byte*>(objects.region->get_address());
    RemoteState::become(s, std::make_unique<RemoteMapped>());
}

void RemoteConnected::disconnect(RemoteSegment& s) {
    objects.object.reset();
    RemoteState::fd(s) = -1;
    RemoteState::inode(s) = 0;
    RemoteState::size(s) = 0;
    RemoteState::reserved(s) = 0;
    RemoteState::become(s, std::make_unique<RemoteDisconnected>());
}

void RemoteMapped::unmap(RemoteSegment& s) {
    objects.region.reset();
    RemoteState::address(s) = nullptr;
    RemoteState::become(s, std::make_unique<RemoteConnected>());
}

} // namespace

RemoteSegment::RemoteSegment() : state_(std::make_unique<RemoteDisconnected>()) {}
RemoteSegment::~RemoteSegment() {
    if (is_connected() || is_mapped()) disconnect();
}
bool RemoteSegment::connect(const std::string& name) {
    return state_->connect(*this, name);
}
void RemoteSegment::map() {
    state_->map(*this);
}
void RemoteSegment::unmap() {
    state_->unmap(*this);
}
void RemoteSegment::disconnect() {
    state_->disconnect(*this);
}
bool RemoteSegment::is_connected() const noexcept {
    return dynamic_cast<const RemoteConnected*>(state_.get()) != nullptr;
}
bool RemoteSegment::is_mapped() const noexcept {
    return dynamic_cast<const RemoteMapped*>(state_.get()) != nullptr;
}

bool RemoteSegment::owner_alive() const noexcept {
    if (fd_ < 0) return false;
    if (::flock(fd_, LOCK_SH | LOCK_NB) == 0) {
        ::flock(fd_, LOCK_UN);
        return false;
    }
    return errno == EWOULDBLOCK;
}

bool RemoteSegment::replaced() const noexcept {
    return fd_ < 0 || inode_of_name(name_) != inode_;
}

void RemoteSegment::reserve(std::size_t offset, std::size_t length) {
    const std::size_t end = offset + length;
    if (end <= reserved_) return;
    if (fd_ < 0 || end > size_) {
        throw UsageError("remote segment '" + name_ + "': cannot reserve bytes " + std::to_string(offset) + " to " +
                         std::to_string(end) + " of " + std::to_string(size_));
    }
    reserve_pages(fd_, name_, size_, reserved_, end);
    reserved_ = end;
}

// --------------------------------------------------------------------- sequence

void Sequence::copy(std::byte* dst, std::span<const std::span<std::byte>> fragments) {
    for (int attempt = 0; attempt < max_attempts; ++attempt) {
        std::byte* at = dst;
        for (const auto& f : fragments) {
            if (!f.empty()) std::memcpy(at, f.data(), f.size());
            at += f.size();
        }
        if (check()) return;
        if (at != dst) *dst = ~*dst; // the emulated link damaged the transfer
        retries_.fetch_add(1, std::memory_order_relaxed);
    }
    throw SciException("transfer", {}, "transfer failed " + std::to_string(max_attempts) + " times in a row");
}

namespace {
// Copies n bytes with non-temporal stores where dst is 16-byte aligned (SSE2, part
// of x86-64), plain memcpy for the unaligned head and the tail, and elsewhere.
void stream_bytes(std::byte* dst, const std::byte* src, std::size_t n) {
#if defined(__x86_64__)
    const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16);
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, n - i);
#else
    std::memcpy(dst, src, n);
#endif
}
} // namespace

void Sequence::copy_streaming(std::byte* dst, std::span<const std::span<std::byte>> fragments) {
    for (int attempt = 0; attempt < max_attempts; ++attempt) {
        std::byte* at = dst;
        for (const auto& f : fragments) {
            if (!f.empty()) stream_bytes(at, f.data(), f.size());
            at += f.size();
        }
#if defined(__x86_64__)
        _mm_sfence(); // non-temporal stores are not ordered by the release store of the note
#endif
        if (check()) return;
        if (at != dst) *dst = ~*dst; // the emulated link damaged the transfer
        retries_.fetch_add(1, std::memory_order_relaxed);
    }
    throw SciException("transfer", {}, "transfer failed " + std::to_string(max_attempts) + " times in a row");
}

void Sequence::barrier() noexcept {
#if defined(__x86_64__)
    _mm_sfence(); // orders non-temporal stores, which the fence below does not
#endif
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Sequence::copy_checked(std::byte* dst, const void* src, std::size_t n) {
    std::span<std::byte> one(static_cast<std::byte*>(const_cast<void*>(src)), n);
    copy(dst, std::span<const std::span<std::byte>>(&one, 1));
}

void Sequence::write_word_checked(std::uint32_t* word, std::uint32_t value, std::uint32_t stale) {
    std::atomic_ref<std::uint32_t> ref(*word);
    for (int attempt = 0; attempt < max_attempts; ++attempt) {
        if (check()) {
            ref.store(value, std::memory_order_release);
            return;
        }
        ref.store(stale, std::memory_order_release); // a repeated, stale control word
        retries_.fetch_add(1, std::memory_order_relaxed);
    }
    throw SciException("transfer", {},
                       "control word transfer failed " + std::to_string(max_attempts) + " times in a row");
}

namespace {
long membarrier(int command) noexcept {
    return ::syscall(SYS_membarrier, command, 0, 0);
}
} // namespace

bool process_barrier() noexcept {
    return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

// The barrier is tried before registering: a process that could not make one must
// not have partners rely on it, and one that did not register must keep its fences.
bool process_barrier_registered() noexcept {
    static const bool registered = [] {
        const long supported = membarrier(MEMBARRIER_CMD_QUERY);
        if (supported < 0 || (supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
            (supported & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0)
            return false;
        return process_barrier() && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
    }();
    return registered;
}

} // namespace msgpass::sci
