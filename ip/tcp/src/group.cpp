// The tcp group (group.hpp): the members' connections and the factory's wake-up
// descriptor in an epoll set of the group, the members' ready marks, the pending
// members looked at in turn (kit::ReadyGroup).
#include "group.hpp"
#include "node.hpp"

#include <msgpass/error.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <utility>

namespace msgpass::tcp {

namespace {

// At most this many readable members are taken from the set per refresh; the others
// come with the next one (a level-triggered set reports them again, after these).
constexpr std::size_t most_events = 1024;

// The data of the wake-up descriptor's event in the set: its slot (the high 32 bits)
// is no member's.
constexpr std::uint64_t wake_event = ~std::uint64_t{0};

} // namespace

// How wait() sleeps: until ack_delay has passed it wakes then; from then on the
// members that gave messages whose sender holds a buffer for them acknowledge them
// before each sleep (acknowledge_owed). The sleep is an epoll_wait on the set, whose
// events make the members pending: the set asked at once.
struct TcpGroup::Sleeper {
    TcpGroup& group;

    template <class Poll>
    BufferPtr sleep(Poll& /*poll*/, std::chrono::nanoseconds step, const WaitPhase& at) {
        const bool idle = at.now >= at.start + ack_delay;
        if (idle) {
            group.acknowledge_owed();
        } else {
            step = std::min<std::chrono::nanoseconds>(step, ack_delay - (at.now - at.start));
        }
        group.sleep(step);
        return nullptr; // the wait polls again
    }
};

TcpGroup::TcpGroup(std::string name, std::shared_ptr<Transport> transport)
    : ReadyGroup(std::move(name), nullptr, "MSGPASS_TCP_GROUP_SCAN"), transport_(std::move(transport)),
      set_(std::make_unique<ip::Epoll>("tcp group")), marks_(std::make_shared<kit::ReadyMarks>(0)) {}

TcpGroup::~TcpGroup() {
    for (const Member& m : members_)
        m.node->unwatch_marks(marks_.get());
}

void TcpGroup::admit(NodePtr node) {
    auto tcp = std::dynamic_pointer_cast<TcpNode>(node);
    if (!tcp) throw UsageError("a tcp group takes only tcp nodes");
    BasicGroup::add(std::move(node));
    if (std::any_of(members_.begin(), members_.end(), [&](const Member& m) { return m.node == tcp; })) return;
    members_.push_back(Member{std::move(tcp)});
    rebuild();
}

bool TcpGroup::remove(NodeId id) {
    for (const Member& m : members_)
        if (m.node->id() == id) m.node->unwatch_marks(marks_.get());
    std::erase_if(members_, [id](const Member& m) { return m.node->id() == id; });
    rebuild();
    return BasicGroup::remove(id);
}

// The members changed (slots moved): a new set with the wake-up descriptor, new marks,
// every member swept at the next receive, a new round.
void TcpGroup::rebuild() {
    auto set = std::make_unique<ip::Epoll>("tcp group");
    if (!set->add(transport_->shared().recv_wake.fd(), EPOLLIN, wake_event)) {
        throw ResourceError("tcp group: cannot watch the wake-up descriptor: " + ip::errno_text(errno));
    }
    set_ = std::move(set);
    auto marks = std::make_shared<kit::ReadyMarks>(members_.size());
    owing_.clear();
    for (std::size_t slot = 0; slot < members_.size(); ++slot) {
        Member& m = members_[slot];
        m.watched = -1;
        m.drained = false;
        m.node->unwatch_marks(marks_.get());
        m.node->watch_marks(marks, slot);
        if (m.owes) owing_.push_back(slot);
    }
    marks_ = std::move(marks);
    set_slots(members_.size());
    events_.resize(std::min(members_.size() + 2, most_events));
    since_refresh_ = refresh_rounds; // the next receive asks the set first
    swept_ = false;
}

// Every member's state under its receive lock, without a system call: the
// connections new since the last sweep join the set, and a member with something a
// receive finds without reading its socket becomes pending. The marks set before it
// are spent on it.
void TcpGroup::sweep(bool all) {
    if (all) {
        swept_ = true;
        ++sweeps_;
        partial_sweeps_ = 0;
        swept_now();
        for (std::size_t w = 0; w < marks_->count; ++w)
            (void)marks_->words[w].exchange(0, std::memory_order_acquire);
    } else {
        // The periodic sweep: the members whose connection is in the set are followed
        // by it and by their marks (every change of a member's state marks it); the
        // others (no connection, or one the set did not take) only by the sweep.
        follow_marks();
    }
    for (std::size_t slot = 0; slot < members_.size(); ++slot) {
        Member& m = members_[slot];
        if (!all && m.watched >= 0) continue;
        ++swept_members_;
        if (m.node->watch(*set_, slot, m.watched)) ready(slot);
    }
}

// The members whose mark is set, as a sweep does for every member.
void TcpGroup::follow_marks() {
    for (std::size_t w = 0; w < marks_->count; ++w) {
        if (marks_->words[w].load(std::memory_order_relaxed) == 0) continue;
        std::uint64_t bits = marks_->words[w].exchange(0, std::memory_order_acquire);
        while (bits != 0) {
            const std::size_t slot = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
            bits &= bits - 1;
            Member& m = members_[slot];
            if (m.node->watch(*set_, slot, m.watched)) ready(slot);
        }
    }
}

// What the set reported: the members whose connection is readable become pending (an
// event of a connection the member no longer has, replaced while the old socket is
// still open, is not looked at); the wake-up descriptor is drained (the marks say
// what it rang for).
void TcpGroup::mark_readable(int events) {
    since_refresh_ = 0;
    for (int i = 0; i < events; ++i) {
        const std::uint64_t data = events_[static_cast<std::size_t>(i)].data.u64;
        if (data == wake_event) {
            transport_->shared().recv_wake.drain();
            continue;
        }
        const auto slot = static_cast<std::size_t>(data >> 32);
        if (slot < members_.size() && members_[slot].watched == static_cast<std::int64_t>(data & 0xffffffffu))
            ready(slot);
    }
}

// The set asked without waiting.
void TcpGroup::refresh() {
    ++refreshes_;
    mark_readable(set_->wait(events_, std::chrono::nanoseconds::zero()));
}

// The set asked, waiting at most step.
void TcpGroup::sleep(std::chrono::nanoseconds step) {
    ++sleeps_;
    mark_readable(set_->wait(events_, step));
}

// One receive from the member in slot (kit::ReadyGroup keeps it pending when it gave
// a message or threw): a member that gave one owes its acknowledgement at the next
// idle wait.
BufferPtr TcpGroup::look(std::size_t slot) {
    Member& m = members_[slot];
    if (m.drained) { // nothing without new input, which makes it pending again
        m.drained = false;
        return nullptr;
    }
    auto b = m.node->receive();
    if (b) {
        m.drained = m.node->drained();
        if (!m.owes) {
            m.owes = true;
            owing_.push_back(slot);
        }
    }
    return b;
}

BufferPtr TcpGroup::collect() {
    if (scans_all()) return BasicGroup::receive();
    if (members_.empty()) return nullptr;
    if (!swept_) {
        sweep(true);
    } else if (sweep_due()) {
        sweep(++partial_sweeps_ >= full_sweep_every);
    } else {
        follow_marks();
    }
    if (since_refresh_ >= refresh_rounds) refresh();
    ++since_refresh_;
    const auto by_slot = [this](std::size_t slot) { return look(slot); };
    if (auto m = ready_to_end(by_slot)) return m;
    // The round is over: a new one from the first slot, the set asked first when no
    // member is pending (a wait's sleep asks it next: not twice).
    restart_round();
    if (!any_pending()) {
        if (waiting_) return nullptr;
        refresh();
    }
    return ready_to_end(by_slot);
}

// The acknowledgements owed by the members that gave messages since the last time
// (the others owe none this receiver's reads made), written when their sender holds a
// buffer of its application for one of those messages (TcpNode::acknowledge_held:
// comm's send of the caller's memory completes then). A sender's copies of small
// messages wait for the acknowledgement of every ack_every messages or ack_bytes, or
// for the background thread's once the member's messages stopped for a tick
// (docs/tcp.md, "Acknowledgements"): with many members, each sending seldom, the
// group idled between most of their messages, and acknowledging every member at each
// idle wait wrote one frame, a system call and a segment, per message.
void TcpGroup::acknowledge_owed() {
    for (const std::size_t slot : owing_) {
        members_[slot].owes = false;
        members_[slot].node->acknowledge_held();
    }
    owing_.clear();
}

// Sleeps on the group's set (readable when a member's connection is, or when the
// factory's wake-up descriptor rang: a member marked a connection installed, a peer
// lost, a message the background thread read); once idle for ack_delay, the members
// that gave messages acknowledge them before each sleep. A poll at the deadline asks
// the set (the polls between sleeps leave that to the sleep).
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
    if (timeout <= std::chrono::nanoseconds::zero()) return kit::held::found(poll());
    struct Waiting {
        bool& flag;
        explicit Waiting(bool& f) : flag(f) { flag = true; }
        ~Waiting() { flag = false; }
    };
    {
        const Waiting waiting(waiting_);
        if (auto m = wait_with([this] { return poll(); }, timeout, Sleeper{*this}, socket_wait)) return m;
    }
    return poll();
}

} // namespace msgpass::tcp
