// The reliable window of a tcp pair: messages between a pair of nodes are
// numbered from 0 for each incarnation of the sender, and the receiver acknowledges
// cumulatively (every message before `seq` arrived). The sender keeps each message
// (the buffer itself, no copy) until it is acknowledged, so that after a broken
// connection it resends from the receiver's next expected number and nothing is lost
// or delivered twice; when the peer incarnation is lost, what it did not acknowledge
// is counted and dropped, and the numbering goes on: a peer given up while it lived
// (silent for peer_timeout) still counts our messages, and its next welcome shows
// which numbers it lacks (resume() says how many; the transport tells the peer to
// skip them). Only a new incarnation of the peer numbers from 0 again (renumber()). No sockets and no locks here: the
// technology calls these under its own locks, from its writer, its reader and its handshake.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/kit/queued_buffer.hpp>
#include <msgpass/tcp/frame.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <sys/socket.h>
#include <sys/uio.h>
#include <utility>
#include <vector>

namespace msgpass::tcp {

// A message whose payload the window does not copy (larger than small_payload):
// the buffer handed over or shared (kit::QueuedBuffer: buffer()), kept until the
// peer acknowledges it, and its number.
struct Outgoing : kit::QueuedBuffer {
    std::uint64_t seq = 0;
};

// The messages of a window in order, in a ring of slots that doubles when full: a
// std::deque allocated a 512-byte block every 9 messages at one end and freed it at
// the other, and tcp frees acknowledged messages on another thread than the one that
// sends (glibc's per-thread caches then miss). A slot left is reset to T{}.
template <class T>
class Ring {
public:
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] T& operator[](std::size_t i) noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
    [[nodiscard]] const T& operator[](std::size_t i) const noexcept {
        return slots_[(head_ + i) & (slots_.size() - 1)];
    }
    [[nodiscard]] T& front() noexcept { return slots_[head_]; }
    [[nodiscard]] const T& front() const noexcept { return slots_[head_]; }
    T& emplace_back() {
        if (size_ == slots_.size()) grow();
        ++size_;
        return (*this)[size_ - 1];
    }
    void pop_front() noexcept {
        slots_[head_] = T{};
        head_ = (head_ + 1) & (slots_.size() - 1);
        --size_;
    }
    // Drops the first n (n <= size()) without resetting their slots: for a T that
    // holds nothing to free.
    void drop_front(std::size_t n) noexcept {
        head_ = (head_ + n) & (slots_.size() - 1);
        size_ -= n;
    }
    void clear() noexcept {
        while (size_ > 0)
            pop_front();
        head_ = 0;
    }

private:
    void grow() {
        std::vector<T> bigger(std::max<std::size_t>(64, 2 * slots_.size())); // a power of two
        for (std::size_t i = 0; i < size_; ++i)
            bigger[i] = std::move((*this)[i]);
        slots_.swap(bigger);
        head_ = 0;
    }

    std::vector<T> slots_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

// The staged bytes of the window's frames, in a ring that doubles when full,
// addressed by positions that only grow (a frame keeps its position until it is
// acknowledged, whatever the ring's size).
class StagedBytes {
public:
    [[nodiscard]] std::uint64_t begin() const noexcept { return begin_; }
    [[nodiscard]] std::uint64_t end() const noexcept { return end_; }
    // Room for n more bytes at end(); returns where they start.
    std::byte* claim_contiguous(std::size_t n) {
        reserve(n);
        const std::size_t at = static_cast<std::size_t>(end_) & mask_;
        if (at + n > size_) return nullptr; // wraps: append() piece by piece
        end_ += n;
        return bytes_.get() + at;
    }
    void append(const void* p, std::size_t n) {
        reserve(n);
        put(end_, p, n);
        end_ += n;
    }
    // n may be 0 with a null pointer (an empty message's payload): memcpy may not see it.
    void put(std::uint64_t pos, const void* p, std::size_t n) noexcept {
        if (n == 0) return;
        const std::size_t at = static_cast<std::size_t>(pos) & mask_;
        const std::size_t first = std::min(n, size_ - at);
        std::memcpy(bytes_.get() + at, p, first);
        if (first < n) std::memcpy(bytes_.get(), static_cast<const std::byte*>(p) + first, n - first);
    }
    void get(std::uint64_t pos, void* out, std::size_t n) const noexcept {
        if (n == 0) return;
        const std::size_t at = static_cast<std::size_t>(pos) & mask_;
        const std::size_t first = std::min(n, size_ - at);
        std::memcpy(out, bytes_.get() + at, first);
        if (first < n) std::memcpy(static_cast<std::byte*>(out) + first, bytes_.get(), n - first);
    }
    // The bytes [from, to) as at most two pieces; returns how many.
    int pieces(std::uint64_t from, std::uint64_t to, iovec out[2]) const noexcept {
        if (from >= to) return 0;
        const std::size_t at = static_cast<std::size_t>(from) & mask_;
        const std::size_t n = static_cast<std::size_t>(to - from);
        const std::size_t first = std::min(n, size_ - at);
        out[0] = iovec{bytes_.get() + at, first};
        if (first == n) return 1;
        out[1] = iovec{bytes_.get(), n - first};
        return 2;
    }
    void drop_to(std::uint64_t pos) noexcept { begin_ = pos; }
    // The ring's size (0 before the first byte).
    [[nodiscard]] std::size_t capacity() const noexcept { return size_; }
    // Frees the ring when it holds nothing and is larger than `keep`: a backlog of
    // megabytes (a receiver that paused) is not held for the connection's life.
    void shrink_if_empty(std::size_t keep) noexcept {
        if (begin_ != end_ || size_ <= keep) return;
        bytes_.reset();
        size_ = mask_ = 0;
    }

private:
    void reserve(std::size_t n) {
        const std::uint64_t need = end_ - begin_ + n;
        if (need <= size_) [[likely]]
            return;
        std::size_t size = std::max<std::size_t>(size_, 64 * 1024);
        while (size < need)
            size *= 2;
        std::unique_ptr<std::byte[]> bigger(new std::byte[size]); // not zeroed: only staged bytes are read
        const std::size_t mask = size - 1;
        for (std::uint64_t pos = begin_; pos < end_;) { // each piece up to the old or the new ring's end
            const std::size_t from = static_cast<std::size_t>(pos) & mask_, to = static_cast<std::size_t>(pos) & mask;
            const std::size_t n_here =
                std::min<std::size_t>({static_cast<std::size_t>(end_ - pos), size_ - from, size - to});
            std::memcpy(bigger.get() + to, bytes_.get() + from, n_here);
            pos += n_here;
        }
        bytes_ = std::move(bigger);
        size_ = size;
        mask_ = mask;
    }

    std::unique_ptr<std::byte[]> bytes_;
    std::size_t size_ = 0;
    std::size_t mask_ = 0;
    std::uint64_t begin_ = 0, end_ = 0;
};

// The iovecs of one sendmsg(): the window's staged bytes (frame headers and the
// payloads it copied, contiguous: one or two pieces for any number of frames) and
// the payloads it did not copy, from the application's memory, at most max_iov.
class GatherList {
public:
    static constexpr int max_iov = 512;

    void clear() noexcept { n_ = 0; }
    [[nodiscard]] bool full() const noexcept { return n_ >= max_iov; }
    [[nodiscard]] int room() const noexcept { return max_iov - n_; }
    void add(const void* p, std::size_t len) noexcept {
        if (len == 0) return;
        iov_[static_cast<std::size_t>(n_)] = iovec{const_cast<void*>(p), len};
        ++n_;
    }
    [[nodiscard]] iovec* next() noexcept { return iov_.data() + n_; }
    void added(int n) noexcept { n_ += n; }
    [[nodiscard]] int count() const noexcept { return n_; }
    [[nodiscard]] const iovec& operator[](int i) const noexcept { return iov_[static_cast<std::size_t>(i)]; }
    [[nodiscard]] msghdr message() noexcept {
        msghdr m{};
        m.msg_iov = iov_.data();
        m.msg_iovlen = static_cast<std::size_t>(n_);
        return m;
    }

private:
    std::array<iovec, max_iov> iov_;
    int n_ = 0;
};

// The sender's side: the messages not yet acknowledged, in sequence order, and how
// far the transport has written them on the current connection. Each message's
// frame is staged once, when it is pushed: its header and, up to small_payload
// bytes, its payload are copied into one ring of bytes (StagedBytes), at their
// final place, so that a write of hundreds of frames is one or two pieces of it;
// a larger payload stays in its buffer (kept until acknowledged) and goes out from
// there. What a write took is counted per write, not per frame (the positions of
// the frames' ends are searched), and acknowledged frames leave by moving the
// ring's start. Frames are staged as data frames; the transport stamps its
// acknowledgement into the first frame of each write (stamp()), and a reconnection
// makes them plain data frames again (an acknowledgement from an earlier write would
// be older than what the peer applied since). A frame whose payload is copied is
// staged in the compact form (frame.hpp, 8 bytes of header instead of 24) while the
// peer reads it (set_compact()); a connection to a peer that does not restages them.
class SendWindow {
public:
    static constexpr std::size_t small_payload = 512;           // copied into the staged bytes up to this
    static constexpr std::size_t staged_keep = 4 * 1024 * 1024; // a ring beyond this is freed once empty
    [[nodiscard]] std::size_t staged_capacity() const noexcept { return bytes_.capacity(); }
    // At most this much of the staged bytes per write: a write of megabytes (the
    // unacknowledged frames after a pause of the peer's acknowledgements) holds the
    // send lock as long, and measured no faster (docs/benchmarks.md, fifth session).
    static constexpr std::uint64_t write_cap = 64 * 1024;

    // Numbers the message and keeps the buffer (its payload is not copied); returns
    // its sequence number.
    std::uint64_t push(BufferPtr buffer, std::uint64_t size) { return push_kept(std::move(buffer), size); }
    std::uint64_t push(SharedBuffer buffer, std::uint64_t size) { return push_kept(std::move(buffer), size); }
    // Numbers the message and copies it (the caller's memory is free after): for a
    // payload up to small_payload bytes.
    std::uint64_t push_copy(const Buffer& payload) {
        const std::uint64_t size = payload.size();
        std::byte* at = stage_header(size, static_cast<std::size_t>(size), compact_);
        if (at != nullptr) {
            if (const SingleBuffer* one = payload.single(); one != nullptr) {
                if (size > 0) std::memcpy(at, one->data(), static_cast<std::size_t>(size));
            } else {
                payload.copy_to(std::span<std::byte>(at, static_cast<std::size_t>(size)));
            }
        } else {
            for (const auto& f : payload.fragments())
                bytes_.append(f.data(), f.size());
        }
        return finish(size, false, compact_);
    }
    std::uint64_t push_copy(std::span<const std::byte> payload) {
        std::byte* at = stage_header(payload.size(), payload.size(), compact_);
        if (at != nullptr) {
            if (!payload.empty()) std::memcpy(at, payload.data(), payload.size());
        } else {
            bytes_.append(payload.data(), payload.size());
        }
        return finish(payload.size(), false, compact_);
    }

    // Whether the frames of copied payloads are staged in the compact form: what the
    // peer of the connection now starting reads (called after resume() or a
    // renumber(), when nothing of the window is written on it yet). A change restages
    // the frames already in the window in the new form.
    void set_compact(bool on) {
        if (on == compact_) return;
        compact_ = on;
        if (!entries_.empty()) restage();
    }
    [[nodiscard]] bool compact() const noexcept { return compact_; }

    // Messages not acknowledged; the ones from written() on are not written on this connection yet.
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
    [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
    // The frame header of message i as it stands (tests, and the stamp).
    // A compact frame's as the full header it stands for.
    [[nodiscard]] FrameHeader header(std::size_t i) const noexcept {
        FrameHeader h;
        if (entries_[i].compact) {
            std::uint32_t c[2];
            bytes_.get(entries_[i].at, c, sizeof c);
            h.length = c[0] & compact_max_length;
            h.seq = first_seq_ + i;
            h.type = static_cast<std::uint32_t>(compact_tag(c[0]) == compact_data_acked ? FrameType::data_acked
                                                                                        : FrameType::data);
            h.flags = c[1];
            return h;
        }
        bytes_.get(entries_[i].at, &h, sizeof h);
        return h;
    }
    // The buffer kept for message i; null when its payload was copied.
    [[nodiscard]] const Buffer* kept(std::size_t i) const noexcept {
        if (!entries_[i].kept) return nullptr;
        return &kept_[kept_index(first_seq_ + i)].buffer();
    }
    [[nodiscard]] std::size_t written() const noexcept { return written_; }
    // Bytes of frame written() already written (a stream can take part of a frame).
    [[nodiscard]] std::size_t offset() const noexcept { return offset_; }
    [[nodiscard]] std::size_t waiting() const noexcept { return entries_.size() - written_; }
    // Messages never written on any connection: the send queue, which send_queue_limit
    // bounds. After a broken connection waiting() also counts the messages written
    // before and not acknowledged, which go again; those are not queued anew (their
    // number is bounded by what the socket buffers took), so queued() leaves them out.
    [[nodiscard]] std::size_t queued() const noexcept { return entries_.size() - written_once_; }
    [[nodiscard]] bool all_written() const noexcept { return written_ == entries_.size(); }
    [[nodiscard]] std::uint64_t next_seq() const noexcept { return next_seq_; }
    [[nodiscard]] std::uint64_t first_unacknowledged() const noexcept {
        return entries_.empty() ? next_seq_ : first_seq_;
    }

    // What one write took, for the statistics.
    struct Wrote {
        std::size_t messages = 0;   // frames written whole for the first time
        std::uint64_t bytes = 0;    // their payload bytes
        std::size_t resent = 0;     // frames written whole again after a broken connection
        bool stamp_written = false; // the frame stamp() stamped went out (its header whole)
    };

    // Gathers into g the frames from written() (less what was written of it) up to
    // message `end` (at most size()): the staged bytes in one or two pieces between
    // payloads that were not copied. Stops when g is full or after write_cap staged
    // bytes in one run (the rest is the next write's).
    void gather(GatherList& g, std::size_t end) const {
        g.clear();
        std::size_t i = written_;
        std::uint64_t off = offset_;
        while (i < end && g.room() >= 3) {
            const Entry& e = entries_[i];
            if (e.kept && off >= frame_header_size) { // within the payload of a kept message
                if (!add_payload(g, i, off - frame_header_size)) return;
                ++i;
                off = 0;
                continue;
            }
            const std::size_t j = next_kept(i, end);
            const std::uint64_t to = j < end ? entries_[j].at + frame_header_size : staged_end(end);
            if (to - (e.at + off) > write_cap) {
                g.added(bytes_.pieces(e.at + off, e.at + off + write_cap, g.next()));
                return;
            }
            g.added(bytes_.pieces(e.at + off, to, g.next()));
            if (j >= end) return;
            if (!add_payload(g, j, 0)) return;
            i = j + 1;
            off = 0;
        }
    }

    // Stamps the acknowledgement into the first frame of the next write not begun
    // yet (written(), or the one after it when part of it went); false when there is
    // none before `end`.
    bool stamp(std::size_t end, std::uint64_t ack) noexcept {
        const std::size_t i = offset_ == 0 ? written_ : written_ + 1;
        if (i >= end) {
            stamped_ = npos;
            return false;
        }
        put_type(i, FrameType::data_acked, static_cast<std::uint32_t>(ack));
        stamped_ = i;
        return true;
    }

    // The transport took `bytes` more of the frames (header and payload) from
    // written() on.
    Wrote wrote(std::size_t bytes) noexcept {
        Wrote w;
        if (bytes == 0 || entries_.empty()) return w;
        const std::uint64_t from = wire_start(written_) + offset_;
        const std::uint64_t to = from + bytes;
        if (stamped_ != npos) {
            w.stamp_written = wire_start(stamped_) + header_size(stamped_) <= to;
            stamped_ = npos;
        }
        // The frames now whole: those whose end is at most `to` (ends only grow).
        std::size_t lo = written_, hi = entries_.size();
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo) / 2;
            if (entries_[mid].wire_end <= to)
                lo = mid + 1;
            else
                hi = mid;
        }
        const std::size_t whole = lo;
        if (whole > written_) {
            const std::size_t again_to = std::min(whole, written_once_);
            if (again_to > written_) w.resent = again_to - written_;
            const std::size_t fresh_from = std::max(written_, written_once_);
            if (whole > fresh_from) {
                w.messages = whole - fresh_from;
                const std::size_t kept = kept_between(fresh_from, whole);
                w.bytes = entries_[whole - 1].wire_end - wire_start(fresh_from) - kept * frame_header_size -
                          (w.messages - kept) * (compact_ ? compact_header_size : frame_header_size);
                written_once_ = whole;
            }
            written_ = whole;
        }
        offset_ = written_ < entries_.size() ? static_cast<std::size_t>(to - wire_start(written_)) : 0;
        return w;
    }

    // Every message before this was acknowledged by the peer (an acknowledgement or a
    // welcome); below first_unacknowledged() when lose() dropped messages it lacks.
    [[nodiscard]] std::uint64_t acknowledged_to() const noexcept { return acknowledged_to_; }

    // An acknowledgement: every message before next_expected arrived; they leave the
    // window (the kept buffers to the acknowledged list). False, and nothing changes,
    // when next_expected is beyond what was sent (a protocol error). An older
    // acknowledgement changes nothing.
    [[nodiscard]] bool acknowledge(std::uint64_t next_expected) {
        if (next_expected > next_seq_) return false;
        acknowledged_to_ = std::max(acknowledged_to_, next_expected);
        trim(next_expected);
        return true;
    }

    // A new connection, whose peer expects next_expected: what came before is dropped
    // as acknowledged and the rest is written again from its first. Returns how many
    // numbers from next_expected on the peer will never get (lose() dropped them): the
    // transport tells it to skip to first_unacknowledged() before anything else; 0
    // when none. Nothing, and nothing changes, when next_expected is outside
    // [acknowledged_to, next_seq]: the peer claims messages never sent, or lost some
    // it had acknowledged; a welcome that does not match is never trimmed to fit.
    [[nodiscard]] std::optional<std::uint64_t> resume(std::uint64_t next_expected) {
        if (next_expected > next_seq_ || next_expected < acknowledged_to_) return std::nullopt;
        const std::uint64_t first = first_unacknowledged();
        acknowledged_to_ = next_expected;
        trim(next_expected);
        rewind();
        return next_expected < first ? first - next_expected : 0;
    }

    // The connection broke: whatever it took must be written again, every frame as a
    // plain data frame (the acknowledgements stamped into some belong to the old one).
    void rewind() noexcept {
        const std::size_t stamped_to = std::min(entries_.size(), std::max(written_ + 1, written_once_ + 1));
        for (std::size_t i = 0; i < stamped_to; ++i)
            put_type(i, FrameType::data, 0);
        written_ = 0;
        offset_ = 0;
        stamped_ = npos;
    }

    // The peer incarnation is lost: returns how many messages it did not
    // acknowledge; they are dropped. The numbering goes on: if the peer lives after
    // all, resume() finds the numbers it lacks; a new incarnation gets renumber().
    std::uint64_t lose() noexcept {
        const std::uint64_t unacknowledged = entries_.size();
        trim(next_seq_, false);
        written_once_ = 0;
        written_ = 0;
        offset_ = 0;
        stamped_ = npos;
        return unacknowledged;
    }

    // A new incarnation of the peer expects message 0: the messages kept (none of
    // them reached it) are numbered again from 0.
    void renumber() noexcept {
        for (std::size_t i = 0; i < entries_.size(); ++i) {
            const std::uint64_t seq = i;
            if (!entries_[i].compact) bytes_.put(entries_[i].at + offsetof(FrameHeader, seq), &seq, sizeof seq);
        }
        for (std::size_t k = 0; k < kept_.size(); ++k)
            kept_[k].seq -= first_seq_;
        first_seq_ = 0;
        next_seq_ = entries_.size();
        acknowledged_to_ = 0;
        rewind();
    }

    // Hands over the acknowledged messages whose buffers it kept, so that the caller
    // frees them outside its lock (into must be empty; clearing it after keeps its
    // capacity for the next time).
    void take_acknowledged(std::vector<Outgoing>& into) noexcept { into.swap(acknowledged_); }

private:
    static constexpr std::size_t npos = static_cast<std::size_t>(-1);

    // One message: where its frame starts in the staged bytes, where it ends on the
    // wire (positions that only grow, counting the payloads not copied too), and
    // whether its payload is in kept_ instead of the staged bytes.
    struct Entry {
        std::uint64_t at = 0;
        std::uint64_t wire_end = 0;
        bool kept = false;
        bool compact = false; // its header is the compact form's
    };

    // Stages the header of the next message and room for `staged` bytes of its
    // payload after it; returns where they go, or null when the ring wraps there
    // (the header is staged then, the payload is for append()).
    std::byte* stage_header(std::uint64_t length, std::size_t staged, bool compact) {
        const auto put = [&](const auto& header) -> std::byte* {
            std::byte* at = bytes_.claim_contiguous(sizeof header + staged);
            if (at == nullptr) {
                bytes_.append(&header, sizeof header);
                return nullptr;
            }
            std::memcpy(at, &header, sizeof header);
            return at + sizeof header;
        };
        // The compact header as one 8-byte value ({word, ack 0} on a little-endian
        // host): two 4-byte stores read back as one 8-byte load stalled on store
        // forwarding.
        if (compact) return put(std::uint64_t{compact_word(length, false)});
        return put(data_frame(next_seq_, length));
    }
    std::uint64_t finish(std::uint64_t size, bool kept, bool compact) {
        Entry& e = entries_.emplace_back();
        e.at = staged_at_;
        staged_at_ = bytes_.end();
        wire_end_ += (compact ? compact_header_size : frame_header_size) + size;
        e.wire_end = wire_end_;
        e.kept = kept;
        e.compact = compact;
        if (entries_.size() == 1) first_seq_ = next_seq_;
        return next_seq_++;
    }
    template <class B>
    std::uint64_t push_kept(B buffer, std::uint64_t size) {
        (void)stage_header(size, 0, false);
        Outgoing& k = kept_.emplace_back();
        k.hold(std::move(buffer));
        k.seq = next_seq_;
        return finish(size, true, false);
    }

    [[nodiscard]] std::uint64_t wire_start(std::size_t i) const noexcept {
        return i == 0 ? wire_front_ : entries_[i - 1].wire_end;
    }
    [[nodiscard]] std::size_t header_size(std::size_t i) const noexcept {
        return entries_[i].compact ? compact_header_size : frame_header_size;
    }
    // How many of messages [from, to) kept their buffers.
    [[nodiscard]] std::size_t kept_between(std::size_t from, std::size_t to) const noexcept {
        if (kept_.empty()) return 0;
        return kept_index(first_seq_ + to) - kept_index(first_seq_ + from);
    }
    // Stages every frame of the window again, copied payloads in the form compact_
    // says (set_compact(): nothing of it is written on the connection yet, and no
    // acknowledgement is stamped in it).
    void restage() {
        StagedBytes fresh;
        std::vector<std::byte> payload;
        std::uint64_t old_start = wire_front_;
        std::uint64_t wire = wire_front_;
        for (std::size_t i = 0; i < entries_.size(); ++i) {
            Entry& e = entries_[i];
            const std::uint64_t old_end = e.wire_end;
            const std::uint64_t size = old_end - old_start - header_size(i);
            const std::uint64_t at = fresh.end();
            if (e.kept) {
                std::array<std::byte, frame_header_size> h;
                bytes_.get(e.at, h.data(), h.size());
                fresh.append(h.data(), h.size());
            } else {
                payload.resize(static_cast<std::size_t>(size));
                bytes_.get(e.at + header_size(i), payload.data(), payload.size());
                if (compact_) {
                    const std::uint32_t c[2] = {compact_word(size, false), 0};
                    fresh.append(c, sizeof c);
                } else {
                    const FrameHeader h = data_frame(first_seq_ + i, size);
                    fresh.append(&h, sizeof h);
                }
                fresh.append(payload.data(), payload.size());
                e.compact = compact_;
            }
            e.at = at;
            wire += (e.compact ? compact_header_size : frame_header_size) + size;
            old_start = old_end;
            e.wire_end = wire;
        }
        bytes_ = std::move(fresh);
        staged_at_ = bytes_.end();
        wire_end_ = wire;
    }
    // Where the staged bytes of messages before `end` end.
    [[nodiscard]] std::uint64_t staged_end(std::size_t end) const noexcept {
        return end < entries_.size() ? entries_[end].at : bytes_.end();
    }
    // The index in kept_ of message seq (kept_ is in seq order).
    [[nodiscard]] std::size_t kept_index(std::uint64_t seq) const noexcept {
        std::size_t lo = 0, hi = kept_.size();
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo) / 2;
            if (kept_[mid].seq < seq)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    // The first message from i on (before end) whose payload was not copied; end when none.
    [[nodiscard]] std::size_t next_kept(std::size_t i, std::size_t end) const noexcept {
        if (kept_.empty()) return end;
        const std::size_t k = kept_index(first_seq_ + i);
        if (k == kept_.size()) return end;
        return std::min<std::size_t>(end, static_cast<std::size_t>(kept_[k].seq - first_seq_));
    }
    // The payload of kept message i from `skip` on; false when g filled up.
    bool add_payload(GatherList& g, std::size_t i, std::uint64_t skip) const noexcept {
        const Buffer& b = kept_[kept_index(first_seq_ + i)].buffer();
        for (const auto& f : b.fragments()) {
            if (skip >= f.size()) {
                skip -= f.size();
                continue;
            }
            if (g.full()) return false;
            g.add(f.data() + skip, f.size() - static_cast<std::size_t>(skip));
            skip = 0;
        }
        return !g.full();
    }
    void put_type(std::size_t i, FrameType type, std::uint32_t flags) noexcept {
        if (entries_[i].compact) {
            const std::uint64_t length = entries_[i].wire_end - wire_start(i) - compact_header_size;
            const std::uint32_t c[2] = {compact_word(length, type == FrameType::data_acked), flags};
            bytes_.put(entries_[i].at, c, sizeof c);
            return;
        }
        const std::uint32_t tf[2] = {static_cast<std::uint32_t>(type), flags};
        bytes_.put(entries_[i].at + offsetof(FrameHeader, type), tf, sizeof tf);
    }
    // Drops the messages before next_expected; `hand_over` keeps their buffers for
    // take_acknowledged() (lose() drops them with the window).
    void trim(std::uint64_t next_expected, bool hand_over = true) {
        if (entries_.empty() || next_expected <= first_seq_) return;
        const std::size_t n =
            std::min<std::size_t>(entries_.size(), static_cast<std::size_t>(next_expected - first_seq_));
        if (written_ >= n) {
            written_ -= n;
        } else {
            written_ = 0;
            offset_ = 0; // acknowledged before this connection wrote it whole (a resend)
        }
        written_once_ -= std::min(written_once_, n);
        if (stamped_ != npos) stamped_ = stamped_ >= n ? stamped_ - n : npos;
        wire_front_ = entries_[n - 1].wire_end;
        const std::uint64_t last = first_seq_ + n;
        while (!kept_.empty() && kept_.front().seq < last) {
            if (hand_over) acknowledged_.push_back(std::move(kept_.front()));
            kept_.pop_front();
        }
        entries_.drop_front(n);
        first_seq_ = last;
        bytes_.drop_to(entries_.empty() ? bytes_.end() : entries_.front().at);
        if (entries_.empty()) bytes_.shrink_if_empty(staged_keep);
    }

    StagedBytes bytes_;
    Ring<Entry> entries_;                // not yet acknowledged, in seq order
    Ring<Outgoing> kept_;                // the buffers of entries_ whose payload was not copied
    std::vector<Outgoing> acknowledged_; // trimmed, to be freed outside the caller's lock
    std::uint64_t staged_at_ = 0;        // where the next frame's staged bytes start
    std::uint64_t wire_end_ = 0;         // where the last frame ends on the wire
    std::uint64_t wire_front_ = 0;       // where entries_'s first frame starts on the wire
    std::uint64_t first_seq_ = 0;        // the number of entries_'s first message
    std::size_t written_ = 0;
    std::size_t offset_ = 0;
    std::size_t written_once_ = 0; // entries written on some connection (a prefix of entries_)
    std::size_t stamped_ = npos;   // the frame the last stamp() marked, for wrote()
    std::uint64_t next_seq_ = 0;
    std::uint64_t acknowledged_to_ = 0; // the peer's cumulative acknowledgement
    bool compact_ = false;              // copied payloads' frames are staged compact
};

// The receiver's side: which message comes next from the peer's incarnation, and
// what is owed in acknowledgements.
class ReceiveWindow {
public:
    enum class Arrival {
        in_order,  // the next expected message
        duplicate, // already received
        gap,       // one or more before it are missing
    };
    [[nodiscard]] Arrival classify(std::uint64_t seq) const noexcept {
        return seq == received_ ? Arrival::in_order : seq < received_ ? Arrival::duplicate : Arrival::gap;
    }
    // The next expected sequence number: how many messages arrived.
    [[nodiscard]] std::uint64_t expected() const noexcept { return received_; }
    // The incarnation these numbers belong to (0: none yet).
    [[nodiscard]] std::uint64_t incarnation() const noexcept { return incarnation_; }
    // The sender dropped the messages before seq that did not arrive (it gave this
    // side up while it lived, a skip frame): numbering goes on from seq. Returns how
    // many were skipped; 0 when seq is not beyond expected().
    std::uint64_t skip_to(std::uint64_t seq) noexcept {
        if (seq <= received_) return 0;
        const std::uint64_t skipped = seq - received_;
        received_ = seq;
        return skipped;
    }
    // The in-order message of `bytes` arrived whole.
    void delivered(std::uint64_t bytes) noexcept {
        ++received_;
        bytes_since_ack_ += bytes;
        largest_since_ack_ = std::max(largest_since_ack_, bytes);
    }
    // The largest message received since the last acknowledgement counted as sent.
    [[nodiscard]] std::uint64_t largest_since_ack() const noexcept { return largest_since_ack_; }

    [[nodiscard]] bool ack_owed() const noexcept { return received_ != acknowledged_; }
    // An acknowledgement is due every `messages` messages or `bytes` bytes.
    [[nodiscard]] bool ack_due(std::uint64_t messages, std::uint64_t bytes) const noexcept {
        return received_ - acknowledged_ >= messages || bytes_since_ack_ >= bytes;
    }
    // The acknowledgement to send now (the next expected number), counted as sent.
    std::uint64_t acknowledge() noexcept {
        acknowledged_ = received_;
        bytes_since_ack_ = 0;
        largest_since_ack_ = 0;
        return received_;
    }

    // A connection from the peer's incarnation; the handshake tells it expected(), so
    // everything received counts as acknowledged. A new incarnation counts from 0
    // again; true when it is new.
    bool attach(std::uint64_t incarnation) noexcept {
        const bool fresh = incarnation != incarnation_;
        if (fresh) {
            incarnation_ = incarnation;
            received_ = 0;
            bytes_since_ack_ = 0;
            largest_since_ack_ = 0;
        }
        acknowledged_ = received_;
        return fresh;
    }

private:
    std::uint64_t incarnation_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t acknowledged_ = 0;
    std::uint64_t bytes_since_ack_ = 0;
    std::uint64_t largest_since_ack_ = 0;
};

} // namespace msgpass::tcp
