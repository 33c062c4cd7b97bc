// UdpGroup: the udp technology's group. A group is a BasicGroup (a send per member,
// a receive from any) unless it is udp.multicast_group: then a send goes once to the
// group's IP multicast address for every member whose stream takes it at once, with
// a table in each datagram giving every member its own datagram number, so that what
// follows (acknowledgements, NAKs, flow control, loss) is each pair's, as for a
// unicast message, but for the repair of a datagram that went to the address: sent
// there again once for the members that NAK it (sender.cpp, UdpNode::repair;
// docs/udp.md). It is a kit::ReadyGroup (a kit::GroupBase): once the factory is
// destroyed, send, receive and add throw UsageError before reaching a member.
//
// A receive looks only at the members whose ready mark it took (ReadyMarks, node.hpp:
// a member sets its bit when its inbox has an entry or its peer is lost), the start
// rotating among them (kit::ReadyGroup, as sci's and tcp's groups): a member that gave
// a message is looked at again (more may wait) only after every other marked one.
// Every 50 ms every member is looked at once, in case. Its cost per message does not
// grow with the group: a word of marks per 64 members, a look per message.
// MSGPASS_UDP_GROUP_SCAN=all in the environment when the group is made: every receive
// looks at every member, as before the marks (msgpass-bench fanin --compare-scan).
// Not for production.
#include "node.hpp"

#include <msgpass/error.hpp>
#include <msgpass/kit/errors.hpp>
#include <msgpass/kit/ready_group.hpp>
#include <msgpass/log.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace msgpass::udp {

namespace {

class UdpGroup final : public kit::ReadyGroup {
public:
    UdpGroup(std::string name, std::shared_ptr<Shared> shared, bool multicast)
        : ReadyGroup(std::move(name), &shared->bell, "MSGPASS_UDP_GROUP_SCAN"), shared_(std::move(shared)),
          multicast_(multicast) {}
    ~UdpGroup() override {
        for (const auto& m : members_)
            m->unwatch(marks_.get());
    }

    bool remove(NodeId id) override {
        const bool removed = BasicGroup::remove(id);
        std::lock_guard lock(mutex_);
        for (const auto& m : members_)
            if (m->id() == id) m->unwatch(marks_.get());
        std::erase_if(members_, [&](const auto& m) { return m->id() == id; });
        rebuild();
        return removed;
    }

protected:
    void admit(NodePtr node) override {
        auto udp = std::dynamic_pointer_cast<UdpNode>(node);
        if (!udp) throw UsageError("a udp group takes only udp nodes");
        BasicGroup::add(std::move(node));
        std::lock_guard lock(mutex_);
        if (std::none_of(members_.begin(), members_.end(), [&](const auto& m) { return m->id() == udp->id(); })) {
            members_.push_back(std::move(udp));
            rebuild();
        }
    }
    // The marked members from the cursor on, wrapping once (kit::ReadyGroup).
    [[nodiscard]] BufferPtr collect() override {
        if (scans_all()) return BasicGroup::receive();
        if (looked_.empty()) return nullptr;
        if (sweep_due()) mark_all();
        take_marks(marks_->words.get(), marks_->count);
        return next_ready([this](std::size_t slot) { return looked_[slot]->receive(); });
    }
    // As a node's receive: sleeping on the socket when it can have it lent.
    [[nodiscard]] BufferPtr wait(std::chrono::nanoseconds timeout) override {
        return wait_with(
            [this] {
                if (auto m = poll()) return m;
                return shared_->poll_socket() ? poll() : decltype(poll()){};
            },
            timeout, SocketSleeper{*shared_}, socket_wait);
    }
    void distribute(BufferPtr&& buffer) override {
        if (!multicast_ || !shared_->multicast_up.load(std::memory_order_relaxed)) {
            BasicGroup::send(std::move(buffer));
            return;
        }
        if (!buffer) kit::throw_null_buffer(*this);
        std::vector<std::shared_ptr<UdpNode>> members;
        {
            std::lock_guard lock(mutex_);
            members = members_;
        }
        UdpNode::broadcast(name(), std::move(members), SharedBuffer(std::move(buffer)));
    }

private:
    // under mutex_: new marks for the members' slots, each member marked at once.
    void rebuild() {
        auto marks = std::make_shared<ReadyMarks>(members_.size());
        for (std::size_t slot = 0; slot < members_.size(); ++slot) {
            if (marks_) members_[slot]->unwatch(marks_.get());
            members_[slot]->watch(marks, slot);
        }
        marks_ = std::move(marks);
        looked_.assign(members_.begin(), members_.end());
        set_slots(looked_.size());
    }

    std::shared_ptr<Shared> shared_;
    const bool multicast_;
    std::mutex mutex_;
    std::vector<std::shared_ptr<UdpNode>> members_;
    // The receiver's (add and remove are not concurrent with receive): the members by
    // slot and their marks.
    std::vector<std::shared_ptr<UdpNode>> looked_;
    std::shared_ptr<ReadyMarks> marks_ = std::make_shared<ReadyMarks>(0);
};

} // namespace

std::unique_ptr<BasicGroup> make_udp_group(std::string name, std::shared_ptr<Shared> shared) {
    const auto& o = shared->parameters.options;
    const bool multicast = o.multicasting() && name == o.multicast_group;
    return std::make_unique<UdpGroup>(std::move(name), std::move(shared), multicast);
}

void UdpNode::broadcast(const std::string& group, std::vector<std::shared_ptr<UdpNode>> members,
                        const SharedBuffer& buffer) {
    // Every member's lock, taken in id order (the background thread takes one at a
    // time), so that the datagrams of the message get the same place in every
    // member's stream as the multicast goes out.
    std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a->id() < b->id(); });
    std::string failures;
    bool all_lost = true;
    NodeId lost_peer = 0;
    std::uint64_t unacknowledged = 0;
    std::vector<std::unique_lock<std::mutex>> locks;
    std::vector<UdpNode*> queued;
    std::vector<OutMessage*> messages;
    locks.reserve(members.size());
    for (const auto& node : members) {
        try {
            node->check_factory("send"); // a member another (destroyed) factory made
            node->check_size(buffer->size());
            node->throw_if_lost();
            std::unique_lock lock(node->mutex_);
            // A pack waiting for more goes first (the message may then go by multicast:
            // nothing queued before it); the message itself is not packed, its
            // datagrams are the same for every member.
            node->pump(Clock::now(), false);
            SharedBuffer copy = buffer;
            messages.push_back(&node->enqueue(copy, false));
            locks.push_back(std::move(lock));
            queued.push_back(node.get());
        } catch (const PeerLost& e) {
            failures += (failures.empty() ? "" : "; ") + ("node " + std::to_string(node->id()) + ": ") + e.what();
            lost_peer = e.peer();
            unacknowledged += e.unacknowledged();
        } catch (const Error& e) {
            failures += (failures.empty() ? "" : "; ") + ("node " + std::to_string(node->id()) + ": ") + e.what();
            all_lost = false;
        }
    }
    const auto now = Clock::now();
    // The members that take the whole message at once, over the multicast: they know
    // us, joined the address, have nothing queued before it, nothing to skip (a member
    // given up while it lived hears of it first, per member), and their window takes it.
    std::vector<std::size_t> ready;
    for (std::size_t i = 0; i < queued.size(); ++i) {
        const UdpNode& n = *queued[i];
        const OutMessage& m = *messages[i];
        if (n.peer_incarnation_ != 0 && !n.closed_ && !n.address_.empty() && n.multicast_ok_ && n.skip_to_ == 0 &&
            n.sent_upto_ == m.first && m.first + m.count <= n.peer_limit_) {
            ready.push_back(i);
        }
    }
    std::uint64_t sent = 0;
    const int fd = ready.empty() ? -1 : queued[ready.front()]->shared_->fd.load();
    if (ready.size() >= 2 && fd >= 0) {
        Shared& shared = *queued[ready.front()]->shared_;
        const auto& p = shared.parameters;
        // The datagrams go as unicast ones do, up to DatagramBatch::most at a time (UDP
        // GSO runs in one sendmmsg()), each with its own table: every ready member's
        // number for it.
        const std::size_t members = ready.size();
        const std::size_t table_bytes = group_table_bytes(members);
        std::vector<GroupEntry> tables(DatagramBatch::most * members);
        for (std::size_t j = 0; j < DatagramBatch::most; ++j) {
            for (std::size_t k = 0; k < members; ++k) {
                tables[j * members + k].member = queued[ready[k]]->id_;
                tables[j * members + k].peer_incarnation = queued[ready[k]]->peer_incarnation_;
            }
        }
        const std::uint64_t size = buffer->size();
        const std::uint64_t count = messages[ready.front()]->count;
        std::vector<std::byte> staging;
        DatagramBatch& batch = DatagramBatch::of_this_thread();
        batch.clear();
        bool gso = shared.gso && shared.multicast_gso.load(std::memory_order_relaxed);
        // The datagram of each place in the batch (udp.inject_multicast_loss withholds
        // some: they count as sent, lost on the way).
        std::array<std::uint64_t, DatagramBatch::most> index{};
        std::uint64_t next = 0;
        while (sent < count) {
            while (next < count && !batch.full()) {
                const std::uint64_t d = next++;
                if (shared.withhold_multicast()) continue;
                index[batch.count] = d;
                GroupEntry* table = tables.data() + batch.count * members;
                for (std::size_t k = 0; k < members; ++k)
                    table[k].seq = messages[ready[k]]->first + d;
                const std::uint64_t offset = d * p.payload;
                const std::size_t piece = static_cast<std::size_t>(std::min<std::uint64_t>(p.payload, size - offset));
                DatagramHeader& h = batch.header[batch.count];
                h = header_of(DatagramType::group_data, p.self, p.partition_hash, shared.incarnation);
                h.length = size;
                h.offset = static_cast<std::uint32_t>(offset);
                h.flags = d == 0 ? flag_first : 0;
                h.reserved = static_cast<std::uint16_t>(members);
                const auto iov = batch.next_iov();
                iov[0] = {&h, header_size};
                iov[1] = {table, table_bytes};
                const std::size_t n = gather(*buffer, offset, piece, iov, 2, staging);
                batch.add(n, header_size + table_bytes + piece, n == 3 && iov[2].iov_base == staging.data());
            }
            const std::size_t prepared = batch.count;
            if (prepared == 0) { // every one withheld
                sent = next;
                continue;
            }
            int error = 0;
            const std::size_t took = batch.send(fd, reinterpret_cast<const sockaddr*>(&shared.multicast_address),
                                                sizeof shared.multicast_address, gso, error);
            if (!gso) shared.multicast_gso.store(false, std::memory_order_relaxed);
            shared.datagrams_sent.fetch_add(took, std::memory_order_relaxed);
            shared.multicast_sent.fetch_add(took, std::memory_order_relaxed);
            if (took < prepared) {
                sent = index[took];
                // A full socket buffer: the rest goes per member (pump, the resend
                // timer). Anything else: the address is not usable here (no multicast
                // route, an interface without multicast); per member from now on.
                if (error != EAGAIN && error != EWOULDBLOCK && error != ENOBUFS &&
                    shared.multicast_up.exchange(false)) {
                    MSGPASS_LOG(udp, warn,
                                "msgpass udp: group '" + group + "': sending to udp.multicast " + p.options.multicast +
                                    " failed (" + std::strerror(error) + "); the group sends per member from now on");
                }
                break;
            }
            sent = next;
        }
        // What went there stays with each of these members' entries until that member
        // acknowledged it: a NAK of it sends the same datagram there again (repair).
        if (sent > 0) {
            auto record = std::make_shared<MulticastMessage>();
            record->table.assign(tables.begin(), tables.begin() + static_cast<std::ptrdiff_t>(members));
            for (std::size_t k = 0; k < members; ++k)
                record->table[k].seq = messages[ready[k]]->first;
            record->sent = sent;
            record->repaired = std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(sent));
            for (const std::size_t i : ready)
                messages[i]->multicast = record;
        }
    }
    for (std::size_t i = 0; i < queued.size(); ++i) {
        UdpNode& n = *queued[i];
        if (sent > 0 && std::find(ready.begin(), ready.end(), i) != ready.end()) {
            const std::uint64_t before = n.sent_upto_;
            n.sent_upto_ += sent;
            n.last_sent_ = now;
            n.transmitted(before, now);
        }
        n.dispatch(now);
    }
    locks.clear();
    if (failures.empty()) return;
    std::string what = "group '" + group + "' send failed for some members: " + failures;
    if (all_lost) throw PeerLost(lost_peer, what, unacknowledged);
    throw Error(what);
}

} // namespace msgpass::udp
