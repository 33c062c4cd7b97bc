// The tcp group (group.hpp): the members' connections in an epoll set of the group,
// the pending members looked at in turn (kit::ReadyGroup).
#include "group.hpp"
#include "node.hpp"

#include <msgpass/error.hpp>

#include <algorithm>
#include <utility>

namespace msgpass::tcp {

namespace {

// At most this many readable members are taken from the set per refresh; the others
// come with the next one (a level-triggered set reports them again, after these).
constexpr std::size_t most_events = 1024;

} // namespace

TcpGroup::TcpGroup(std::string name, std::shared_ptr<Transport> transport)
    : ReadyGroup(std::move(name), nullptr, "MSGPASS_TCP_GROUP_SCAN"), transport_(std::move(transport)),
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
    set_slots(members_.size());
    events_.resize(std::min(members_.size() + 1, most_events));
    since_refresh_ = refresh_rounds; // the next receive asks the set first
    swept_ = false;
}

// Every member's state under its receive lock, without a system call: the
// connections new since the last sweep join the set, and a member with something a
// receive finds without reading its socket becomes pending.
void TcpGroup::sweep() {
    swept_ = true;
    ++sweeps_;
    swept_now();
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

// One receive from the member in slot (kit::ReadyGroup keeps it pending when it gave
// a message or threw): a member that gave one owes its acknowledgement at the next
// idle wait.
BufferPtr TcpGroup::look(std::size_t slot) {
    Member& m = members_[slot];
    auto b = m.node->receive();
    if (b && !m.owes) {
        m.owes = true;
        owing_.push_back(slot);
    }
    return b;
}

BufferPtr TcpGroup::collect() {
    if (scans_all()) return BasicGroup::receive();
    if (members_.empty()) return nullptr;
    const std::uint64_t changes = transport_->shared().receiver_changes.load(std::memory_order_acquire);
    if (!swept_ || changes != seen_changes_ || sweep_due()) {
        seen_changes_ = changes;
        sweep();
    }
    if (since_refresh_ >= refresh_rounds) refresh();
    ++since_refresh_;
    const auto by_slot = [this](std::size_t slot) { return look(slot); };
    if (auto m = ready_to_end(by_slot)) return m;
    // The round is over: a new one from the first slot, with what is readable now.
    restart_round();
    refresh();
    return ready_to_end(by_slot);
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
    if (scans_all()) {
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
