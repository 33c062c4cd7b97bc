// Communicators made at run time (MPI_Comm_dup, _split, _create, _free): each is a
// pair of the communicator's contexts and the world ranks of its members; the
// contexts are agreed by the members themselves, with no central server
// (engine.hpp, docs/mpi.md, *Communicators*).
#include "engine.hpp"

#include <algorithm>
#include <array>
#include <numeric>

namespace msgpass::mpi {

namespace {

// comm::Context is 16 bits; the last one is the sentinels'.
constexpr int last_context = sentinel_context - 1;

// The communicator of the world ranks of a group (MPI_Comm_create, _create_group): this
// rank at index rank of it, contexts from base.
CommInfo group_comm(const std::vector<int>& world, std::ptrdiff_t rank, int base) {
    CommInfo n;
    n.size = static_cast<int>(world.size());
    n.rank = static_cast<int>(rank);
    n.p2p = base;
    n.coll = base + 1;
    n.world = std::make_shared<const std::vector<int>>(world);
    return n;
}

} // namespace

CommInfo Engine::info(MPI_Comm comm) const {
    if (comm == MPI_COMM_WORLD) return CommInfo{world_size(), rank_, world_p2p, world_coll, nullptr, nullptr};
    if (comm == MPI_COMM_SELF) return CommInfo{1, 0, self_p2p, self_coll, self_world_, nullptr};
    const auto it = comms_.find(comm);
    if (it == comms_.end())
        throw MpiError(MPI_ERR_COMM, comm == MPI_COMM_NULL
                                         ? std::string("the communicator is MPI_COMM_NULL")
                                         : "invalid communicator " + std::to_string(comm) + " (never made, or freed)");
    return it->second;
}

std::vector<int> Engine::members(MPI_Comm comm) const {
    CommInfo c = info(comm);
    if (c.local) c = *c.local; // an intercommunicator's group is its local one
    if (c.world) return *c.world;
    std::vector<int> all(static_cast<std::size_t>(c.size));
    std::iota(all.begin(), all.end(), 0);
    return all;
}

std::string& Engine::name(MPI_Comm comm) {
    (void)info(comm);
    auto [it, fresh] = names_.try_emplace(comm);
    if (fresh && comm == MPI_COMM_WORLD) it->second = "MPI_COMM_WORLD";
    if (fresh && comm == MPI_COMM_SELF) it->second = "MPI_COMM_SELF";
    return it->second;
}

int Engine::take_contexts(int base) {
    if (base + 1 > last_context)
        throw MpiError(MPI_ERR_INTERN, "no context left for a new communicator (" + std::to_string(last_context) +
                                           " contexts, two per communicator, are not reused)");
    next_context_ = base + 2;
    return base;
}

MPI_Comm Engine::add_comm(CommInfo c) {
    const MPI_Comm handle = next_comm_++;
    comms_.emplace(handle, std::move(c));
    return handle;
}

MPI_Request Engine::idup(MPI_Comm comm, MPI_Comm* newcomm) {
    settle_idup();
    const CommInfo c = info(comm);
    // The handle at once; its contexts, the sentinel's until the agreement completed
    // (using the communicator before its request completed is erroneous).
    CommInfo n = c;
    n.p2p = sentinel_context;
    n.coll = sentinel_context;
    if (!n.world) n.world = std::make_shared<const std::vector<int>>(members(comm));
    const MPI_Comm handle = add_comm(std::move(n));
    // This rank's next free context, then the largest of its group (or, of an
    // intercommunicator, of the other group and of its own), kept by the finish step.
    auto values = std::make_shared<std::array<int, 3>>(std::array<int, 3>{next_context_, 0, 0});
    std::unique_ptr<Schedule> s;
    if (c.local) {
        s = inter_allreduce_schedule(c, &(*values)[0], &(*values)[1], 1, MPI_INT, MPI_MAX);
        s->splice(allreduce_schedule(*c.local, &(*values)[0], &(*values)[2], 1, MPI_INT, MPI_MAX), true);
    } else {
        s = allreduce_schedule(c, &(*values)[0], &(*values)[1], 1, MPI_INT, MPI_MAX);
    }
    s->name = "MPI_Comm_idup";
    s->finish.push_back([this, handle, values, inter = c.local != nullptr] {
        const int base = take_contexts(std::max((*values)[1], (*values)[2]));
        CommInfo& made = comms_.at(handle);
        made.p2p = base;
        made.coll = base + 1;
        if (inter) { // the same groups in the same order; the local group's own pair too
            (void)take_contexts(base + 2);
            auto local = std::make_shared<CommInfo>(*made.local);
            local->p2p = base + 2;
            local->coll = base + 3;
            made.local = std::move(local);
        }
    });
    auto done = std::make_shared<bool>(false);
    s->always.push_back([done] { *done = true; });
    idup_done_ = std::move(done);
    *newcomm = handle;
    return start(std::move(s));
}

MPI_Comm Engine::dup(MPI_Comm comm) {
    settle_idup();
    CommInfo c = info(comm);
    if (c.local) return inter_split(c, 0, c.rank); // the same groups in the same order
    int mine = next_context_;
    int agreed = 0;
    run(allreduce_schedule(c, &mine, &agreed, 1, MPI_INT, MPI_MAX));
    const int base = take_contexts(agreed);
    c.p2p = base;
    c.coll = base + 1;
    if (!c.world) c.world = std::make_shared<const std::vector<int>>(members(comm));
    return add_comm(std::move(c));
}

MPI_Comm Engine::split(MPI_Comm comm, int color, int key) {
    settle_idup();
    const CommInfo c = info(comm);
    if (c.local) return inter_split(c, color, key);
    // Every rank learns every rank's color and key, and the largest next free
    // context among them: one allgather.
    const std::array<int, 3> own{color, key, next_context_};
    std::vector<std::array<int, 3>> all(static_cast<std::size_t>(c.size));
    const std::vector<std::size_t> sizes(all.size(), sizeof own);
    std::vector<std::size_t> displs(all.size());
    for (std::size_t i = 0; i < displs.size(); ++i)
        displs[i] = i * sizeof own;
    run(allgatherv_schedule(c, own.data(), all.data(), sizes, displs));
    int agreed = 0;
    for (const auto& a : all)
        agreed = std::max(agreed, a[2]);
    const int base = take_contexts(agreed); // one pair for every color: their members never meet in it
    if (color == MPI_UNDEFINED) return MPI_COMM_NULL;
    std::vector<int> ranks; // of comm, with this color, ordered by key then rank
    for (int r = 0; r < c.size; ++r)
        if (all[static_cast<std::size_t>(r)][0] == color) ranks.push_back(r);
    std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) {
        return all[static_cast<std::size_t>(a)][1] < all[static_cast<std::size_t>(b)][1];
    });
    auto world = std::make_shared<std::vector<int>>();
    CommInfo n;
    n.size = static_cast<int>(ranks.size());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        world->push_back(c.world_rank(ranks[i]));
        if (ranks[i] == c.rank) n.rank = static_cast<int>(i);
    }
    n.p2p = base;
    n.coll = base + 1;
    n.world = std::move(world);
    return add_comm(std::move(n));
}

MPI_Comm Engine::create(MPI_Comm comm, const std::vector<int>& world) {
    settle_idup();
    const CommInfo c = info(comm);
    if (c.local) { // world: a group of the local group; the remote group gives its own
        for (int w : world)
            if (c.local->rank_of_world(w) < 0)
                throw MpiError(MPI_ERR_GROUP, "the group holds world rank " + std::to_string(w) +
                                                  ", which is not a member of the intercommunicator's local group");
        const auto self = std::find(world.begin(), world.end(), c.local->world_rank(c.rank));
        return inter_split(c, self == world.end() ? MPI_UNDEFINED : 0, static_cast<int>(self - world.begin()));
    }
    for (int w : world)
        if (c.rank_of_world(w) < 0)
            throw MpiError(MPI_ERR_GROUP, "the group holds world rank " + std::to_string(w) +
                                              ", which is not a member of the communicator");
    int mine = next_context_;
    int agreed = 0;
    run(allreduce_schedule(c, &mine, &agreed, 1, MPI_INT, MPI_MAX));
    const int base = take_contexts(agreed);
    const auto self = std::find(world.begin(), world.end(), c.world_rank(c.rank));
    if (self == world.end()) return MPI_COMM_NULL;
    return add_comm(group_comm(world, self - world.begin(), base));
}

MPI_Comm Engine::create_group(MPI_Comm comm, const std::vector<int>& world, int tag) {
    settle_idup();
    const CommInfo c = info(comm);
    if (c.local) throw MpiError(MPI_ERR_COMM, "MPI_Comm_create_group on an intercommunicator is not provided");
    if (world.empty()) return MPI_COMM_NULL;
    std::vector<int> ranks; // the members' ranks in comm
    for (int w : world) {
        const int r = c.rank_of_world(w);
        if (r < 0)
            throw MpiError(MPI_ERR_GROUP, "the group holds world rank " + std::to_string(w) +
                                              ", which is not a member of the communicator");
        ranks.push_back(r);
    }
    const auto self = std::find(world.begin(), world.end(), c.world_rank(c.rank));
    if (self == world.end())
        throw MpiError(MPI_ERR_GROUP, "this rank is not in the group (only the group's members call it)");
    // Only the members take part: the first one gathers their next free contexts and
    // sends back the largest, over comm's collective context with a tag of its own
    // range (between the blocking collectives' small tags and the schedules' from 2^27),
    // so that concurrent calls with other tags, or of disjoint groups, keep apart.
    const int t = (1 << 26) | (tag & ((1 << 26) - 1));
    int agreed = next_context_;
    if (self == world.begin()) {
        for (std::size_t i = 1; i < ranks.size(); ++i) {
            int theirs = 0;
            if (recv_bytes(c, ranks[i], t, &theirs, sizeof theirs) != sizeof theirs)
                throw MpiError(MPI_ERR_OTHER, "MPI_Comm_create_group: a member sent a context of the wrong size");
            agreed = std::max(agreed, theirs);
        }
        for (std::size_t i = 1; i < ranks.size(); ++i)
            send_bytes(c, ranks[i], t, &agreed, sizeof agreed);
    } else {
        send_bytes(c, ranks[0], t, &agreed, sizeof agreed);
        if (recv_bytes(c, ranks[0], t, &agreed, sizeof agreed) != sizeof agreed)
            throw MpiError(MPI_ERR_OTHER, "MPI_Comm_create_group: the first member sent a context of the wrong size");
    }
    const int base = take_contexts(agreed);
    return add_comm(group_comm(world, self - world.begin(), base));
}

MPI_Comm Engine::intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader,
                                  int tag) {
    settle_idup();
    const CommInfo l = info(local_comm);
    if (l.local) throw MpiError(MPI_ERR_COMM, "local_comm is an intercommunicator");
    if (local_leader < 0 || local_leader >= l.size)
        throw MpiError(MPI_ERR_RANK, "local_leader " + std::to_string(local_leader) + " is not between 0 and " +
                                         std::to_string(l.size - 1));
    // The local group's largest next free context, then the leaders swap it and
    // their groups (world ranks) over peer_comm, then the leader tells its group.
    int mine = next_context_;
    int agreed = 0;
    run(allreduce_schedule(l, &mine, &agreed, 1, MPI_INT, MPI_MAX));
    std::vector<int> remote;
    std::array<int, 2> head{agreed, 0}; // context, remote size
    if (l.rank == local_leader) {
        const CommInfo p = info(peer_comm);
        if (remote_leader < 0 || remote_leader >= p.size)
            throw MpiError(MPI_ERR_RANK, "remote_leader " + std::to_string(remote_leader) + " is not between 0 and " +
                                             std::to_string(p.size - 1));
        const std::vector<int> group = members(local_comm);
        const std::array<int, 2> out{agreed, l.size};
        std::array<int, 2> in{};
        MPI_Request r = irecv(p, remote_leader, tag, in.data(), sizeof in);
        MPI_Request s = isend(p, remote_leader, tag, out.data(), sizeof out, false);
        MPI_Status st{};
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS || st.msgpass_bytes != sizeof in)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over peer_comm failed");
        remote.resize(static_cast<std::size_t>(in[1]));
        r = irecv(p, remote_leader, tag, remote.data(), remote.size() * sizeof(int));
        s = isend(p, remote_leader, tag, group.data(), group.size() * sizeof(int), false);
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over peer_comm failed");
        head = {std::max(agreed, in[0]), in[1]};
    }
    run(bcast_schedule(l, head.data(), sizeof head, local_leader));
    remote.resize(static_cast<std::size_t>(head[1]));
    run(bcast_schedule(l, remote.data(), remote.size() * sizeof(int), local_leader));
    // Two pairs: the intercommunicator's and its local group's own.
    const int base = take_contexts(head[0]);
    (void)take_contexts(base + 2);
    auto local = std::make_shared<CommInfo>(l);
    local->p2p = base + 2;
    local->coll = base + 3;
    if (!local->world) local->world = std::make_shared<const std::vector<int>>(members(local_comm));
    CommInfo n;
    n.size = head[1];
    n.rank = l.rank;
    n.p2p = base;
    n.coll = base + 1;
    n.world = std::make_shared<const std::vector<int>>(std::move(remote));
    n.local = std::move(local);
    return add_comm(std::move(n));
}

void Engine::swap_across(const CommInfo& c, const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes) {
    const CommInfo& l = *c.local;
    if (l.rank == 0) {
        CommInfo coll = c;
        coll.p2p = c.coll;
        MPI_Request r = irecv(coll, 0, 0, in, in_bytes);
        MPI_Request s = isend(coll, 0, 0, out, out_bytes, false);
        MPI_Status st{};
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS || st.msgpass_bytes != in_bytes)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over the intercommunicator failed");
    }
    run(bcast_schedule(l, in, in_bytes, 0));
}

MPI_Comm Engine::inter_split(const CommInfo& c, int color, int key) {
    settle_idup();
    const CommInfo& l = *c.local;
    // Each group learns its ranks' colours, keys and next free contexts (an
    // allgather), then the other group's (the leaders swap them): one pair of
    // contexts for the new intercommunicators and one for their local groups, above
    // every member's next free one.
    using Entry = std::array<int, 3>; // colour, key, next free context
    const Entry own{color, key, next_context_};
    std::vector<Entry> mine(static_cast<std::size_t>(l.size)), theirs(static_cast<std::size_t>(c.size));
    const std::vector<std::size_t> sizes(mine.size(), sizeof own);
    std::vector<std::size_t> displs(mine.size());
    for (std::size_t i = 0; i < displs.size(); ++i)
        displs[i] = i * sizeof own;
    run(allgatherv_schedule(l, own.data(), mine.data(), sizes, displs));
    swap_across(c, mine.data(), mine.size() * sizeof(Entry), theirs.data(), theirs.size() * sizeof(Entry));
    int agreed = 0;
    for (const auto& e : mine)
        agreed = std::max(agreed, e[2]);
    for (const auto& e : theirs)
        agreed = std::max(agreed, e[2]);
    const int base = take_contexts(agreed);
    (void)take_contexts(base + 2);
    if (color == MPI_UNDEFINED) return MPI_COMM_NULL;
    // The ranks of this colour, by key then rank: of a group (world ranks of ranks r).
    auto of_color = [color](const std::vector<Entry>& entries, const CommInfo& g) {
        std::vector<int> ranks;
        for (int r = 0; r < static_cast<int>(entries.size()); ++r)
            if (entries[static_cast<std::size_t>(r)][0] == color) ranks.push_back(r);
        std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) {
            return entries[static_cast<std::size_t>(a)][1] < entries[static_cast<std::size_t>(b)][1];
        });
        std::vector<int> world;
        for (int r : ranks)
            world.push_back(g.world_rank(r));
        return std::pair{ranks, world};
    };
    const auto [local_ranks, local_world] = of_color(mine, l);
    const auto [remote_ranks, remote_world] = of_color(theirs, c);
    if (remote_world.empty()) return MPI_COMM_NULL;
    auto local = std::make_shared<CommInfo>();
    local->size = static_cast<int>(local_world.size());
    local->rank = static_cast<int>(std::find(local_ranks.begin(), local_ranks.end(), l.rank) - local_ranks.begin());
    local->p2p = base + 2;
    local->coll = base + 3;
    local->world = std::make_shared<const std::vector<int>>(local_world);
    CommInfo n;
    n.size = static_cast<int>(remote_world.size());
    n.rank = local->rank;
    n.p2p = base;
    n.coll = base + 1;
    n.world = std::make_shared<const std::vector<int>>(remote_world);
    n.local = std::move(local);
    return add_comm(std::move(n));
}

MPI_Comm Engine::intercomm_merge(MPI_Comm intercomm, bool high) {
    settle_idup();
    const CommInfo c = info(intercomm);
    if (!c.local)
        throw MpiError(MPI_ERR_COMM, "communicator " + std::to_string(intercomm) + " is not an intercommunicator");
    const CommInfo& l = *c.local;
    int mine = next_context_;
    int agreed = 0;
    run(allreduce_schedule(l, &mine, &agreed, 1, MPI_INT, MPI_MAX));
    // The leaders (rank 0 of each group) swap their group's high and context over the
    // intercommunicator's collective context, then tell their groups.
    std::array<int, 3> head{agreed, 0, 0}; // context, remote high, remote leader's world rank
    if (l.rank == 0) {
        const std::array<int, 3> out{agreed, high ? 1 : 0, l.world_rank(0)};
        std::array<int, 3> in{};
        CommInfo coll = c;
        coll.p2p = c.coll;
        MPI_Request r = irecv(coll, 0, 0, in.data(), sizeof in);
        MPI_Request s = isend(coll, 0, 0, out.data(), sizeof out, false);
        MPI_Status st{};
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS || st.msgpass_bytes != sizeof in)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over the intercommunicator failed");
        head = {std::max(agreed, in[0]), in[1], in[2]};
    }
    run(bcast_schedule(l, head.data(), sizeof head, 0));
    const bool remote_high = head[1] != 0;
    const bool local_first = high != remote_high ? !high : l.world_rank(0) < head[2];
    std::vector<int> world = local_first ? *l.world : *c.world;
    const std::vector<int>& second = local_first ? *c.world : *l.world;
    world.insert(world.end(), second.begin(), second.end());
    const int base = take_contexts(head[0]);
    CommInfo n;
    n.size = static_cast<int>(world.size());
    n.rank = (local_first ? 0 : c.size) + l.rank;
    n.p2p = base;
    n.coll = base + 1;
    n.world = std::make_shared<const std::vector<int>>(std::move(world));
    return add_comm(std::move(n));
}

void Engine::free_comm(MPI_Comm comm) {
    if (comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF)
        throw MpiError(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed");
    (void)info(comm);
    // Its contexts are not reused: a message of it still on its way can never match
    // a receive of a later communicator.
    comms_.erase(comm);
    names_.erase(comm);
}

} // namespace msgpass::mpi
