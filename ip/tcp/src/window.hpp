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
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace msgpass::tcp {

// One message kept until the peer acknowledges it: the buffer handed over or shared
// (kit::QueuedBuffer: buffer()), and its frame header.
struct Outgoing : kit::QueuedBuffer {
    FrameHeader header;
    bool written_once = false; // a later write is a resend (counted as a retry)

    [[nodiscard]] std::size_t frame_size() const noexcept {
        return frame_header_size + static_cast<std::size_t>(header.length);
    }
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

// The sender's side: the messages not yet acknowledged, in sequence order, and how
// far the transport has written them on the current connection.
class SendWindow {
public:
    // Numbers the message and keeps it; returns its sequence number.
    std::uint64_t push(BufferPtr buffer, std::uint64_t size) { return push_entry(std::move(buffer), size); }
    std::uint64_t push(SharedBuffer buffer, std::uint64_t size) { return push_entry(std::move(buffer), size); }

    // Messages not acknowledged; the ones from written() on are not written on this connection yet.
    [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
    [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
    [[nodiscard]] const Outgoing& operator[](std::size_t i) const noexcept { return entries_[i]; }
    // A message's header, for a transport that stamps what it carries besides the
    // message (tcp's acknowledgement) before writing it: not the one written() while
    // offset() is not 0 (its first bytes went out).
    [[nodiscard]] FrameHeader& header(std::size_t i) noexcept { return entries_[i].header; }
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
        return entries_.empty() ? next_seq_ : entries_.front().header.seq;
    }

    // The transport took `bytes` more of the frames (header and payload) from
    // written() on; done(entry, resent) for each frame now written whole, resent when
    // it had been written on an earlier connection.
    template <class Done>
    void wrote(std::size_t bytes, Done&& done) {
        while (bytes > 0 && written_ < entries_.size()) {
            Outgoing& e = entries_[written_];
            const std::size_t rest = e.frame_size() - offset_;
            if (bytes < rest) {
                offset_ += bytes;
                return;
            }
            bytes -= rest;
            offset_ = 0;
            ++written_;
            const bool resent = e.written_once;
            if (!resent) ++written_once_;
            e.written_once = true;
            done(static_cast<const Outgoing&>(e), resent);
        }
    }

    // Every message before this was acknowledged by the peer (an acknowledgement or a
    // welcome); below first_unacknowledged() when lose() dropped messages it lacks.
    [[nodiscard]] std::uint64_t acknowledged_to() const noexcept { return acknowledged_to_; }

    // An acknowledgement: every message before next_expected arrived; they move to
    // the acknowledged list. False, and nothing changes, when next_expected is beyond
    // what was sent (a protocol error). An older acknowledgement changes nothing.
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

    // The connection broke: whatever it took must be written again.
    void rewind() noexcept {
        written_ = 0;
        offset_ = 0;
    }

    // The peer incarnation is lost: returns how many messages it did not
    // acknowledge; they are dropped. The numbering goes on: if the peer lives after
    // all, resume() finds the numbers it lacks; a new incarnation gets renumber().
    std::uint64_t lose() noexcept {
        const std::uint64_t unacknowledged = entries_.size();
        entries_.clear();
        written_once_ = 0;
        rewind();
        return unacknowledged;
    }

    // A new incarnation of the peer expects message 0: the messages kept (none of
    // them reached it) are numbered again from 0.
    void renumber() noexcept {
        next_seq_ = 0;
        acknowledged_to_ = 0;
        for (std::size_t i = 0; i < entries_.size(); ++i)
            entries_[i].header.seq = next_seq_++;
        rewind();
    }

    // Hands over the acknowledged messages, so that the caller frees them outside its
    // lock (into must be empty; clearing it after keeps its capacity for the next time).
    void take_acknowledged(std::vector<Outgoing>& into) noexcept { into.swap(acknowledged_); }

private:
    template <class B>
    std::uint64_t push_entry(B buffer, std::uint64_t size) {
        Outgoing& e = entries_.emplace_back();
        e.hold(std::move(buffer));
        e.header = data_frame(next_seq_, size);
        return next_seq_++;
    }
    void trim(std::uint64_t next_expected) {
        while (!entries_.empty() && entries_.front().header.seq < next_expected) {
            if (written_ == 0) {
                offset_ = 0; // acknowledged before this connection wrote it whole (a resend)
            } else {
                --written_;
            }
            if (entries_.front().written_once) --written_once_;
            acknowledged_.push_back(std::move(entries_.front()));
            entries_.pop_front();
        }
    }

    Ring<Outgoing> entries_;             // not yet acknowledged, in seq order
    std::vector<Outgoing> acknowledged_; // trimmed, to be freed outside the caller's lock
    std::size_t written_ = 0;
    std::size_t offset_ = 0;
    std::size_t written_once_ = 0; // entries written on some connection (a prefix of entries_)
    std::uint64_t next_seq_ = 0;
    std::uint64_t acknowledged_to_ = 0; // the peer's cumulative acknowledgement
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
    }

    [[nodiscard]] bool ack_owed() const noexcept { return received_ != acknowledged_; }
    // An acknowledgement is due every `messages` messages or `bytes` bytes.
    [[nodiscard]] bool ack_due(std::uint64_t messages, std::uint64_t bytes) const noexcept {
        return received_ - acknowledged_ >= messages || bytes_since_ack_ >= bytes;
    }
    // The acknowledgement to send now (the next expected number), counted as sent.
    std::uint64_t acknowledge() noexcept {
        acknowledged_ = received_;
        bytes_since_ack_ = 0;
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
        }
        acknowledged_ = received_;
        return fresh;
    }

private:
    std::uint64_t incarnation_ = 0;
    std::uint64_t received_ = 0;
    std::uint64_t acknowledged_ = 0;
    std::uint64_t bytes_since_ack_ = 0;
};

} // namespace msgpass::tcp
