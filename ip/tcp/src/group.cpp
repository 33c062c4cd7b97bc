// The tcp group (group.hpp): the members' connections in an epoll set of the group,
// the pending members looked at in turn.
#include "group.hpp"
#include "node.hpp"

#include <msgpass/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

namespace msgpass::tcp {

namespace {

bool scan_all_from_environment() {
    const char* v = std::getenv("MSGPASS_TCP_GROUP_SCAN");
    return v != nullptr && std::strcmp(v, "all") == 0;
}

// The sweep's clock, read once per receive: CLOCK_MONOTONIC_COARSE (a few ms of
// resolution, a few ns to read; sci/src/link.hpp says why).
std::int64_t coarse_now_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// At most this many readable members are taken from the set per refresh; the others
// come with the next one (a level-triggered set reports them again, after these).
constexpr std::size_t most_events = 1024;

} // namespace

TcpGroup::TcpGroup(std::string name, std::shared_ptr<Transport> transport)
    : GroupBase(std::move(name)), transport_(std::move(transport)), scan_all_(scan_all_from_environment()),
      set_(std::make_unique<ip::Epoll>("tcp group")) {}

TcpGroup::~TcpGroup() = default;

void TcpGroup::admit(NodePtr node) {
    auto tcp = std::dynamic_pointer_cast<TcpNode>(node);
    if (!tcp) throw UsageError("a tcp group takes only tcp nodes");
    BasicGroup::add(std::move(node));
    if (std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.node == tcp; })) return;
    members_.push_back(Member{std::move(tcp)});
    rebuild();
}

bool TcpGroup::remove(NodeId id) {
    std::erase_if(members_, [id](const Member& m) { return m.node->id() == id; });
    rebuild();
    return BasicGroup::remove(id);
}

// The members changed (slots moved): a new set, every member swept at the next
// receive, a new round.
void TcpGroup::rebuild() {
    set_ = std::make_unique<ip::Epoll>("tcp group");
    owing_.clear();
    for (std::size_t slot = 0; slot < members_.size(); ++slot) {
        members_[slot].watched = -1;
        if (members_[slot].owes) owing_.push_back(slot);
    }
    pending_.assign((members_.size() + 63) / 64, 0);
    events_.resize(std::min(members_.size() + 1, most_events));
    cursor_ = 0;
    since_refresh_ = refresh_rounds; // the next receive asks the set first
    swept_ = false;
}

// Every member's state under its receive lock, without a system call: the
// connections new since the last sweep join the set, and a member with something a
// receive finds without reading its socket becomes pending.
void TcpGroup::sweep() {
    swept_ = true;
    next_sweep_ns_ = coarse_now_ns() + sweep_interval_.count();
    for (std::size_t slot = 0; slot < members_.size(); ++slot) {
        Member& m = members_[slot];
        if (m.node->watch(*set_, slot, m.watched)) mark(slot);
    }
}

// The members whose connection is readable now (the set's epoll_wait, not waiting)
// become pending. An event of a connection the member no longer has (it was
// replaced, the old socket is still open) is not looked at.
void TcpGroup::refresh() {
    since_refresh_ = 0;
    ++refreshes_;
    const int n = set_->wait(events_, std::chrono::nanoseconds::zero());
    for (int i = 0; i < n; ++i) {
        const std::uint64_t data = events_[static_cast<std::size_t>(i)].data.u64;
        const auto slot = static_cast<std::size_t>(data >> 32);
        if (slot < members_.size() && members_[slot].watched == static_cast<std::int64_t>(data & 0xffffffffu))
            mark(slot);
    }
}

// One receive from the member in slot, whose pending bit was cleared: the bit is set
// again when it gave a message (more may be parsed behind it) or an error (its loss
// is reported again on the member's next turn, as every receive from it reports it).
BufferPtr TcpGroup::look(std::size_t slot) {
    ++looks_;
    Member& m = members_[slot];
    try {
        if (auto b = m.node->receive()) {
            mark(slot);
            cursor_ = slot + 1;
            if (!m.owes) {
                m.owes = true;
                owing_.push_back(slot);
            }
            return b;
        }
    } catch (...) {
        mark(slot);
        cursor_ = slot + 1;
        throw;
    }
    return nullptr;
}

// The pending members from the cursor to the last slot, in slot order, until one
// gives a message; null when none did (the round is over).
BufferPtr TcpGroup::round() {
    for (std::size_t w = cursor_ / 64; w < pending_.size(); ++w) {
        std::uint64_t bits = pending_[w];
        if (w == cursor_ / 64) bits &= ~std::uint64_t{0} << (cursor_ % 64);
        while (bits != 0) {
            const auto b = static_cast<std::size_t>(std::countr_zero(bits));
            bits &= bits - 1;
            pending_[w] &= ~(std::uint64_t{1} << b);
            if (auto m = look(w * 64 + b)) return m;
        }
    }
    cursor_ = members_.size();
    return nullptr;
}

BufferPtr TcpGroup::collect() {
    if (scan_all_) return BasicGroup::receive();
    if (members_.empty()) return nullptr;
    const std::uint64_t changes = transport_->shared().receiver_changes.load(std::memory_order_acquire);
    if (!swept_ || changes != seen_changes_ || coarse_now_ns() >= next_sweep_ns_) {
        seen_changes_ = changes;
        sweep();
    }
    if (since_refresh_ >= refresh_rounds) refresh();
    ++since_refresh_;
    if (auto m = round()) return m;
    // The round is over: a new one from the first slot, with what is readable now.
    cursor_ = 0;
    refresh();
    return round();
}

void TcpGroup::set_sweep_interval(std::chrono::nanoseconds interval) noexcept {
    sweep_interval_ = interval;
    next_sweep_ns_ = coarse_now_ns() + interval.count();
}

// The acknowledgements owed by the members that gave messages since the last time:
// the others owe none this receiver's reads made.
void TcpGroup::acknowledge_owed() {
    for (const std::size_t slot : owing_) {
        members_[slot].owes = false;
        (void)members_[slot].node->prepare_to_sleep(true);
    }
    owing_.clear();
}

// Sleeps in poll() on the group's set (readable when a member's connection is) and on
// the factory's wake-up descriptor (a connection was installed, a peer was lost, the
// background thread read a message); once idle for ack_delay, the members that gave
// messages acknowledge them before each sleep.
BufferPtr TcpGroup::wait(std::chrono::nanoseconds timeout) {
    if (scan_all_) {
        SocketSleeper sleeper{transport_->shared().recv_wake,
                              [this](bool idle, std::vector<int>& fds) {
                                  for (const auto& m : members_) {
                                      if (const int fd = m.node->prepare_to_sleep(idle); fd >= 0) fds.push_back(fd);
                                  }
                              },
                              nullptr};
        return wait_with([this] { return poll(); }, timeout, sleeper, socket_wait);
    }
    SocketSleeper sleeper{transport_->shared().recv_wake,
                          [this](bool idle, std::vector<int>& fds) {
                              if (idle) acknowledge_owed();
                              fds.push_back(set_->fd());
                          },
                          nullptr};
    return wait_with([this] { return poll(); }, timeout, sleeper, socket_wait);
}

} // namespace msgpass::tcp
