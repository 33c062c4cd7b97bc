// Communicators made at run time (MPI_Comm_dup, _split, _create, _free): each is a
// pair of the communicator's contexts and the world ranks of its members; the
// contexts are agreed by the members themselves, with no central server
// (engine.hpp, docs/mpi.md, *Communicators*).
//
// Contexts: comm's contexts are 16 bits, taken in pairs (point to point,
// collectives). Each rank keeps a bit per pair it holds; MPI_Comm_free gives the pair
// back, so that a program may make and free communicators without end. An agreement
// looks at one stripe of the pairs per round (a sixteenth): every member contributes
// the pairs of the stripe it holds none of, a bitwise and over the members keeps the
// pairs free on all, and the lowest is taken. Several agreements may be in flight on a
// rank at once, in different orders on different ranks (MPI_Comm_idup, and a blocking
// call while it runs): a round holds its stripe on this rank until it ends, and an
// agreement whose stripe is held by another contributes nothing to that round (it
// finds no pair), so two agreements in flight never take the same pair. A round that
// found none moves to the next stripe, the same on every member (they see the same
// result); an agreement fails when every stripe was looked at by every member and
// none had a pair free on all.
#include "engine.hpp"

#include <algorithm>
#include <array>
#include <numeric>

namespace msgpass::mpi {

namespace {

// comm::Context is 16 bits; the last one is the sentinels'.
constexpr int last_context = sentinel_context - 1;
constexpr int pair_count = (last_context - first_free_context) / 2; // pairs (c, c + 1), c from first_free_context
constexpr int stripes = 16;
constexpr int stripe_words = (pair_count + stripes * 32 - 1) / (stripes * 32);
constexpr int stripe_pairs = stripe_words * 32;
// What a member contributes to a round: the stripe's free pairs, the stripe (a bit:
// every member looks at the same one), and whether it looked (bit 0: its stripe was
// not held by another agreement).
constexpr int agreement_words = stripe_words + 2;

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

struct Engine::Agreement {
    int stripe = 0; // of the round in flight (or next)
    int step = 1;   // to the next round's (odd: the rounds go through every stripe)
    int pairs = 1;  // wanted
    int fruitless = 0;
    bool holding = false;   // this rank holds stripe for the round in flight
    std::vector<int> bases; // the agreed pairs' point-to-point contexts
    // From key (the same on every member) and the pairs wanted.
    void start(int key, int wanted);
};

int Engine::agreement_key(const CommInfo& c) {
    return static_cast<int>((static_cast<std::uint32_t>(c.coll / 2) + agreement_seq_[c.coll]++) & 0x7fffffffU);
}

void Engine::contribute(Agreement& a, std::uint32_t* words) {
    if (pairs_used_.empty()) {
        pairs_used_.assign(static_cast<std::size_t>(stripes * stripe_words), 0);
        for (int p = pair_count; p < stripes * stripe_pairs; ++p) // beyond the last context: never free
            pairs_used_[static_cast<std::size_t>(p / 32)] |= 1U << (p % 32);
        stripe_held_.assign(stripes, false);
    }
    std::fill(words, words + agreement_words, 0U);
    words[stripe_words] = 1U << a.stripe;
    if (stripe_held_[static_cast<std::size_t>(a.stripe)]) return; // another agreement's round looks at it
    stripe_held_[static_cast<std::size_t>(a.stripe)] = true;
    a.holding = true;
    for (int w = 0; w < stripe_words; ++w)
        words[w] = ~pairs_used_[static_cast<std::size_t>(a.stripe * stripe_words + w)];
    words[stripe_words + 1] = 1;
}

void Engine::abandon(Agreement& a) {
    if (a.holding) stripe_held_[static_cast<std::size_t>(a.stripe)] = false;
    a.holding = false;
}

bool Engine::conclude(Agreement& a, const std::uint32_t* words) {
    abandon(a);
    if (words[stripe_words] != 1U << a.stripe)
        throw MpiError(MPI_ERR_INTERN, "the members of a new communicator looked at different contexts");
    std::vector<int> found;
    for (int w = 0; w < stripe_words && static_cast<int>(found.size()) < a.pairs; ++w)
        for (int b = 0; b < 32 && static_cast<int>(found.size()) < a.pairs; ++b)
            if ((words[w] >> b & 1U) != 0) found.push_back(a.stripe * stripe_pairs + w * 32 + b);
    if (static_cast<int>(found.size()) == a.pairs) {
        for (const int p : found) {
            pairs_used_[static_cast<std::size_t>(p / 32)] |= 1U << (p % 32);
            a.bases.push_back(first_free_context + 2 * p);
        }
        return true;
    }
    if ((words[stripe_words + 1] & 1U) != 0 && ++a.fruitless >= stripes)
        throw MpiError(MPI_ERR_INTERN, "no context left for a new communicator (" + std::to_string(pair_count) +
                                           " pairs of contexts, every one held by a communicator of some member)");
    a.stripe = (a.stripe + a.step) % stripes;
    return false;
}

void Engine::release_pair(int p2p) {
    if (p2p < first_free_context || p2p >= last_context || pairs_used_.empty()) return;
    const int p = (p2p - first_free_context) / 2;
    pairs_used_[static_cast<std::size_t>(p / 32)] &= ~(1U << (p % 32));
    coll_seq_.erase(p2p + 1); // a later communicator of the pair numbers its collectives from 0
    agreement_seq_.erase(p2p + 1);
}

void Engine::Agreement::start(int key, int wanted) {
    // Two agreements of one rank with the same first stripe most often step apart,
    // rather than meeting at every stripe after it.
    stripe = key % stripes;
    step = 1 + 2 * (key / stripes % (stripes / 2));
    pairs = wanted;
}

std::vector<int> Engine::agree(int key, int pairs,
                               const std::function<void(const std::uint32_t*, std::uint32_t*)>& and_all) {
    Agreement a;
    a.start(key, pairs);
    std::array<std::uint32_t, agreement_words> in{}, out{};
    while (true) {
        contribute(a, in.data());
        try {
            and_all(in.data(), out.data());
        } catch (...) {
            abandon(a);
            throw;
        }
        if (conclude(a, out.data())) return a.bases;
    }
}

namespace {

// The bitwise and of every member's words of c into out (an intercommunicator: both
// groups, the remote one's into out, the local one's into local, then together).
std::unique_ptr<Schedule> and_schedule(const CommInfo& c, const std::uint32_t* in, std::uint32_t* out,
                                       std::uint32_t* local) {
    if (!c.local) return allreduce_schedule(c, in, out, agreement_words, MPI_UNSIGNED, MPI_BAND);
    auto s = inter_allreduce_schedule(c, in, out, agreement_words, MPI_UNSIGNED, MPI_BAND);
    s->splice(allreduce_schedule(*c.local, in, local, agreement_words, MPI_UNSIGNED, MPI_BAND), true);
    s->next_round();
    s->reduce(out, local, agreement_words, MPI_UNSIGNED, MPI_BAND);
    return s;
}

} // namespace

std::vector<int> Engine::agree_over(const CommInfo& c, int pairs) {
    std::array<std::uint32_t, agreement_words> local{};
    return agree(agreement_key(c), pairs,
                 [&](const std::uint32_t* in, std::uint32_t* out) { run(and_schedule(c, in, out, local.data())); });
}

CommInfo Engine::info_of(MPI_Comm comm) const {
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

MPI_Comm Engine::add_comm(CommInfo c) {
    const MPI_Comm handle = next_comm_++;
    comms_.emplace(handle, std::move(c));
    return handle;
}

MPI_Request Engine::idup(MPI_Comm comm, MPI_Comm* newcomm) {
    const CommInfo c = info(comm);
    // The handle at once; its contexts, the sentinel's until the agreement completed
    // (using the communicator before its request completed is erroneous).
    CommInfo n = c;
    n.p2p = sentinel_context;
    n.coll = sentinel_context;
    if (!n.world) n.world = std::make_shared<const std::vector<int>>(members(comm));
    const MPI_Comm handle = add_comm(std::move(n));
    // Rounds of the agreement until it found its pairs (Schedule::more): each
    // contributes when it starts, and looks at the result when its and completed.
    struct State {
        Agreement a;
        std::array<std::uint32_t, agreement_words> in{}, out{}, local{};
        bool started = false;
    };
    auto state = std::make_shared<State>();
    state->a.start(agreement_key(c), c.local ? 2 : 1); // an intercommunicator: the local group's own pair too
    auto s = std::make_unique<Schedule>();
    s->comm = c;
    s->inter = c.local != nullptr;
    s->name = "MPI_Comm_idup";
    s->more = [this, c, state](Schedule& self) {
        if (state->started && conclude(state->a, state->out.data())) return false;
        state->started = true;
        contribute(state->a, state->in.data());
        self.splice(and_schedule(c, state->in.data(), state->out.data(), state->local.data()), false);
        return true;
    };
    s->finish.push_back([this, handle, state] {
        CommInfo& made = comms_.at(handle);
        made.p2p = state->a.bases[0];
        made.coll = state->a.bases[0] + 1;
        if (made.local) { // the same groups in the same order
            auto local = std::make_shared<CommInfo>(*made.local);
            local->p2p = state->a.bases[1];
            local->coll = state->a.bases[1] + 1;
            made.local = std::move(local);
        }
    });
    s->always.push_back([this, state] { abandon(state->a); });
    *newcomm = handle;
    return start(std::move(s));
}

MPI_Comm Engine::dup(MPI_Comm comm) {
    CommInfo c = info(comm);
    if (c.local) return inter_split(c, 0, c.rank); // the same groups in the same order
    const int base = agree_over(c, 1)[0];
    c.p2p = base;
    c.coll = base + 1;
    if (!c.world) c.world = std::make_shared<const std::vector<int>>(members(comm));
    return add_comm(std::move(c));
}

MPI_Comm Engine::split(MPI_Comm comm, int color, int key) {
    const CommInfo c = info(comm);
    if (c.local) return inter_split(c, color, key);
    // Every rank learns every rank's color and key (an allgather), then the members
    // agree on one pair for every color: their members never meet in it.
    const std::array<int, 2> own{color, key};
    std::vector<std::array<int, 2>> all(static_cast<std::size_t>(c.size));
    const std::vector<std::size_t> sizes(all.size(), sizeof own);
    std::vector<std::size_t> displs(all.size());
    for (std::size_t i = 0; i < displs.size(); ++i)
        displs[i] = i * sizeof own;
    run(allgatherv_schedule(c, own.data(), all.data(), sizes, displs));
    const int base = agree_over(c, 1)[0];
    if (color == MPI_UNDEFINED) {
        release_pair(base);
        return MPI_COMM_NULL;
    }
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
    const int base = agree_over(c, 1)[0];
    const auto self = std::find(world.begin(), world.end(), c.world_rank(c.rank));
    if (self == world.end()) {
        release_pair(base);
        return MPI_COMM_NULL;
    }
    return add_comm(group_comm(world, self - world.begin(), base));
}

MPI_Comm Engine::create_group(MPI_Comm comm, const std::vector<int>& world, int tag) {
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
    // Only the members take part: the first one gathers their contributions and
    // sends back their and, over comm's collective context with a tag of its own
    // range (between the blocking collectives' small tags and the schedules' from 2^27),
    // so that concurrent calls with other tags, or of disjoint groups, keep apart.
    const int t = (1 << 26) | (tag & ((1 << 26) - 1));
    constexpr std::size_t bytes = agreement_words * sizeof(std::uint32_t);
    const int key =
        static_cast<int>((static_cast<std::uint32_t>(c.coll / 2) + static_cast<std::uint32_t>(tag)) & 0x7fffffffU);
    const int base = agree(key, 1, [&](const std::uint32_t* in, std::uint32_t* out) {
        std::copy(in, in + agreement_words, out);
        if (self == world.begin()) {
            std::array<std::uint32_t, agreement_words> theirs{};
            for (std::size_t i = 1; i < ranks.size(); ++i) {
                if (recv_bytes(c, ranks[i], t, theirs.data(), bytes) != bytes)
                    throw MpiError(MPI_ERR_OTHER, "MPI_Comm_create_group: a member sent contexts of the wrong size");
                for (int w = 0; w < agreement_words; ++w)
                    out[w] &= theirs[static_cast<std::size_t>(w)];
            }
            for (std::size_t i = 1; i < ranks.size(); ++i)
                send_bytes(c, ranks[i], t, out, bytes);
        } else {
            send_bytes(c, ranks[0], t, in, bytes);
            if (recv_bytes(c, ranks[0], t, out, bytes) != bytes)
                throw MpiError(MPI_ERR_OTHER,
                               "MPI_Comm_create_group: the first member sent contexts of the wrong size");
        }
    })[0];
    return add_comm(group_comm(world, self - world.begin(), base));
}

MPI_Comm Engine::intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader,
                                  int tag) {
    const CommInfo l = info(local_comm);
    if (l.local) throw MpiError(MPI_ERR_COMM, "local_comm is an intercommunicator");
    if (local_leader < 0 || local_leader >= l.size)
        throw MpiError(MPI_ERR_RANK, "local_leader " + std::to_string(local_leader) + " is not between 0 and " +
                                         std::to_string(l.size - 1));
    // The leaders swap their groups (world ranks) over peer_comm, then the leader
    // tells its group; then both groups agree on two pairs (the intercommunicator's
    // and its local group's own): each round an and over the local group, the leaders
    // swap theirs over peer_comm, and the leader tells its group.
    std::vector<int> remote;
    int remote_size = 0;
    const CommInfo* p = nullptr;
    CommInfo peer;
    if (l.rank == local_leader) {
        peer = info(peer_comm);
        p = &peer;
        if (remote_leader < 0 || remote_leader >= p->size)
            throw MpiError(MPI_ERR_RANK, "remote_leader " + std::to_string(remote_leader) + " is not between 0 and " +
                                             std::to_string(p->size - 1));
    }
    // The leaders' exchange of out for in (both of bytes bytes) over peer_comm.
    auto swap = [&](const void* out, std::size_t out_bytes, void* in, std::size_t in_bytes) {
        MPI_Request r = irecv(*p, remote_leader, tag, in, in_bytes);
        MPI_Request s = isend(*p, remote_leader, tag, out, out_bytes, false);
        MPI_Status st{};
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS || st.msgpass_bytes != in_bytes)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over peer_comm failed");
    };
    if (p != nullptr) {
        const std::vector<int> group = members(local_comm);
        swap(&l.size, sizeof l.size, &remote_size, sizeof remote_size);
        remote.resize(static_cast<std::size_t>(remote_size));
        swap(group.data(), group.size() * sizeof(int), remote.data(), remote.size() * sizeof(int));
    }
    run(bcast_schedule(l, &remote_size, sizeof remote_size, local_leader));
    remote.resize(static_cast<std::size_t>(remote_size));
    run(bcast_schedule(l, remote.data(), remote.size() * sizeof(int), local_leader));
    constexpr std::size_t bytes = agreement_words * sizeof(std::uint32_t);
    const std::vector<int> bases =
        agree(static_cast<int>(static_cast<std::uint32_t>(tag) & 0x7fffffffU), 2,
              [&](const std::uint32_t* in, std::uint32_t* out) {
                  run(allreduce_schedule(l, in, out, agreement_words, MPI_UNSIGNED, MPI_BAND));
                  if (p != nullptr) {
                      std::array<std::uint32_t, agreement_words> theirs{};
                      swap(out, bytes, theirs.data(), bytes);
                      for (int w = 0; w < agreement_words; ++w)
                          out[w] &= theirs[static_cast<std::size_t>(w)];
                  }
                  run(bcast_schedule(l, out, bytes, local_leader));
              });
    auto local = std::make_shared<CommInfo>(l);
    local->p2p = bases[1];
    local->coll = bases[1] + 1;
    if (!local->world) local->world = std::make_shared<const std::vector<int>>(members(local_comm));
    CommInfo n;
    n.size = remote_size;
    n.rank = l.rank;
    n.p2p = bases[0];
    n.coll = bases[0] + 1;
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
    const CommInfo& l = *c.local;
    // Each group learns its ranks' colours and keys (an allgather), then the other
    // group's (the leaders swap them); then both groups agree on one pair of contexts
    // for the new intercommunicators and one for their local groups.
    using Entry = std::array<int, 2>; // colour, key
    const Entry own{color, key};
    std::vector<Entry> mine(static_cast<std::size_t>(l.size)), theirs(static_cast<std::size_t>(c.size));
    const std::vector<std::size_t> sizes(mine.size(), sizeof own);
    std::vector<std::size_t> displs(mine.size());
    for (std::size_t i = 0; i < displs.size(); ++i)
        displs[i] = i * sizeof own;
    run(allgatherv_schedule(l, own.data(), mine.data(), sizes, displs));
    swap_across(c, mine.data(), mine.size() * sizeof(Entry), theirs.data(), theirs.size() * sizeof(Entry));
    const std::vector<int> bases = agree_over(c, 2);
    auto nothing = [&] {
        release_pair(bases[0]);
        release_pair(bases[1]);
        return MPI_COMM_NULL;
    };
    if (color == MPI_UNDEFINED) return nothing();
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
    if (remote_world.empty()) return nothing();
    auto local = std::make_shared<CommInfo>();
    local->size = static_cast<int>(local_world.size());
    local->rank = static_cast<int>(std::find(local_ranks.begin(), local_ranks.end(), l.rank) - local_ranks.begin());
    local->p2p = bases[1];
    local->coll = bases[1] + 1;
    local->world = std::make_shared<const std::vector<int>>(local_world);
    CommInfo n;
    n.size = static_cast<int>(remote_world.size());
    n.rank = local->rank;
    n.p2p = bases[0];
    n.coll = bases[0] + 1;
    n.world = std::make_shared<const std::vector<int>>(remote_world);
    n.local = std::move(local);
    return add_comm(std::move(n));
}

MPI_Comm Engine::intercomm_merge(MPI_Comm intercomm, bool high) {
    const CommInfo c = info(intercomm);
    if (!c.local)
        throw MpiError(MPI_ERR_COMM, "communicator " + std::to_string(intercomm) + " is not an intercommunicator");
    const CommInfo& l = *c.local;
    // The leaders (rank 0 of each group) swap their group's high over the
    // intercommunicator's collective context, then tell their groups.
    std::array<int, 3> head{0, 0, 0}; // (unused), remote high, remote leader's world rank
    if (l.rank == 0) {
        const std::array<int, 3> out{0, high ? 1 : 0, l.world_rank(0)};
        std::array<int, 3> in{};
        CommInfo coll = c;
        coll.p2p = c.coll;
        MPI_Request r = irecv(coll, 0, 0, in.data(), sizeof in);
        MPI_Request s = isend(coll, 0, 0, out.data(), sizeof out, false);
        MPI_Status st{};
        if (wait(&s, &st) != MPI_SUCCESS || wait(&r, &st) != MPI_SUCCESS || st.msgpass_bytes != sizeof in)
            throw MpiError(MPI_ERR_OTHER, "the leaders' exchange over the intercommunicator failed");
        head = {0, in[1], in[2]};
    }
    run(bcast_schedule(l, head.data(), sizeof head, 0));
    const int base = agree_over(c, 1)[0];
    const bool remote_high = head[1] != 0;
    const bool local_first = high != remote_high ? !high : l.world_rank(0) < head[2];
    std::vector<int> world = local_first ? *l.world : *c.world;
    const std::vector<int>& second = local_first ? *c.world : *l.world;
    world.insert(world.end(), second.begin(), second.end());
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
    const CommInfo c = info(comm);
    // Its pairs go back (a later communicator may take them: a message of this one
    // still unreceived would be an erroneous program's, MPI_Comm_free being
    // collective).
    release_pair(c.p2p);
    if (c.local && c.local->p2p != c.p2p) release_pair(c.local->p2p);
    comms_.erase(comm);
    names_.erase(comm);
}

} // namespace msgpass::mpi
