// The C entry points of msgpass's MPI (mpi.h), communicators and groups: dup, split,
// create, free, compare, names, attributes, and the groups they are made from.
// A group is a list of world ranks kept here under its handle; the communicators
// themselves are the engine's (communicators.cpp).
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

// Groups by handle: the world ranks of their members, in group order.
std::map<MPI_Group, std::vector<int>> groups;
MPI_Group next_group = MPI_GROUP_EMPTY + 1;
// The values the predefined attributes point to.
int tag_ub_value = MPI_TAG_UB_VALUE;
int host_value = MPI_PROC_NULL;
int io_value = MPI_ANY_SOURCE;
int wtime_is_global_value = 0;

const std::vector<int>& group_of(MPI_Group g) {
    static const std::vector<int> empty;
    if (g == MPI_GROUP_EMPTY) return empty;
    const auto it = groups.find(g);
    if (it == groups.end())
        throw MpiError(MPI_ERR_GROUP, g == MPI_GROUP_NULL ? std::string("the group is MPI_GROUP_NULL")
                                                          : "invalid group " + std::to_string(g));
    return it->second;
}

MPI_Group add_group(std::vector<int> members) {
    if (members.empty()) return MPI_GROUP_EMPTY;
    const MPI_Group g = next_group++;
    groups.emplace(g, std::move(members));
    return g;
}

// The ranks given to incl or excl: each a rank of the group, none twice.
void check_ranks(const std::vector<int>& group, int n, const int ranks[], const char* what) {
    if (n < 0) throw MpiError(MPI_ERR_ARG, std::string(what) + ": n is negative (" + std::to_string(n) + ")");
    if (n > 0 && ranks == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + ": ranks is NULL");
    std::set<int> seen;
    for (int i = 0; i < n; ++i) {
        if (ranks[i] < 0 || ranks[i] >= static_cast<int>(group.size()))
            throw MpiError(MPI_ERR_RANK, std::string(what) + ": ranks[" + std::to_string(i) +
                                             "] = " + std::to_string(ranks[i]) + " is not a rank of the group of " +
                                             std::to_string(group.size()));
        if (!seen.insert(ranks[i]).second)
            throw MpiError(MPI_ERR_RANK, std::string(what) + ": rank " + std::to_string(ranks[i]) + " is given twice");
    }
}

template <class T>
void check_out(T* p, const char* what) {
    if (p == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " is NULL");
}

} // namespace

extern "C" {

// ------------------------------------------------------------------- communicators

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_dup", comm, [&] {
        check_out(newcomm, "newcomm");
        *newcomm = engine->dup(comm);
        comm_handlers[*newcomm] = handler_of(comm); // a duplicate keeps the error handler
        return MPI_SUCCESS;
    });
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_split", comm, [&] {
        check_out(newcomm, "newcomm");
        if (color < 0 && color != MPI_UNDEFINED)
            throw MpiError(MPI_ERR_ARG, "color " + std::to_string(color) + " is negative (and not MPI_UNDEFINED)");
        *newcomm = engine->split(comm, color, key);
        if (*newcomm != MPI_COMM_NULL) comm_handlers[*newcomm] = handler_of(comm);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_create", comm, [&] {
        check_out(newcomm, "newcomm");
        *newcomm = engine->create(comm, group_of(group));
        if (*newcomm != MPI_COMM_NULL) comm_handlers[*newcomm] = handler_of(comm);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_free(MPI_Comm* comm) {
    return guarded("MPI_Comm_free", comm != nullptr ? *comm : MPI_COMM_WORLD, [&] {
        check_out(comm, "comm");
        engine->free_comm(*comm);
        comm_handlers.erase(*comm);
        *comm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int* result) {
    return guarded("MPI_Comm_compare", comm1, [&] {
        check_out(result, "result");
        const auto a = engine->members(comm1);
        const auto b = engine->members(comm2);
        if (comm1 == comm2) {
            *result = MPI_IDENT;
        } else if (a == b) {
            *result = MPI_CONGRUENT;
        } else if (std::set<int>(a.begin(), a.end()) == std::set<int>(b.begin(), b.end())) {
            *result = MPI_SIMILAR;
        } else {
            *result = MPI_UNEQUAL;
        }
        return MPI_SUCCESS;
    });
}

int MPI_Intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag,
                         MPI_Comm* newintercomm) {
    return guarded("MPI_Intercomm_create", local_comm, [&] {
        check_out(newintercomm, "newintercomm");
        check_send_tag(tag);
        *newintercomm = engine->intercomm_create(local_comm, local_leader, peer_comm, remote_leader, tag);
        comm_handlers[*newintercomm] = handler_of(local_comm);
        return MPI_SUCCESS;
    });
}

int MPI_Intercomm_merge(MPI_Comm intercomm, int high, MPI_Comm* newintracomm) {
    return guarded("MPI_Intercomm_merge", intercomm, [&] {
        check_out(newintracomm, "newintracomm");
        *newintracomm = engine->intercomm_merge(intercomm, high != 0);
        comm_handlers[*newintracomm] = handler_of(intercomm);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_test_inter(MPI_Comm comm, int* flag) {
    return guarded("MPI_Comm_test_inter", comm, [&] {
        check_out(flag, "flag");
        *flag = engine->info(comm).local ? 1 : 0;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_remote_size(MPI_Comm comm, int* size) {
    return guarded("MPI_Comm_remote_size", comm, [&] {
        check_out(size, "size");
        const auto c = engine->info(comm);
        if (!c.local)
            throw MpiError(MPI_ERR_COMM, "communicator " + std::to_string(comm) + " is not an intercommunicator");
        *size = c.size;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_remote_group(MPI_Comm comm, MPI_Group* group) {
    return guarded("MPI_Comm_remote_group", comm, [&] {
        check_out(group, "group");
        const auto c = engine->info(comm);
        if (!c.local)
            throw MpiError(MPI_ERR_COMM, "communicator " + std::to_string(comm) + " is not an intercommunicator");
        *group = add_group(*c.world);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_group(MPI_Comm comm, MPI_Group* group) {
    return guarded("MPI_Comm_group", comm, [&] {
        check_out(group, "group");
        *group = add_group(engine->members(comm));
        return MPI_SUCCESS;
    });
}

int MPI_Comm_set_name(MPI_Comm comm, const char* name) {
    return guarded("MPI_Comm_set_name", comm, [&] {
        check_out(name, "name");
        std::string s(name, strnlen(name, MPI_MAX_OBJECT_NAME - 1)); // longer names are cut (MPI 3.1, 6.8)
        engine->name(comm) = std::move(s);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_get_name(MPI_Comm comm, char* name, int* resultlen) {
    return guarded("MPI_Comm_get_name", comm, [&] {
        check_out(name, "name");
        check_out(resultlen, "resultlen");
        const std::string& s = engine->name(comm);
        std::memcpy(name, s.c_str(), s.size() + 1);
        *resultlen = static_cast<int>(s.size());
        return MPI_SUCCESS;
    });
}

int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void* attribute_val, int* flag) {
    return guarded("MPI_Comm_get_attr", comm, [&] {
        (void)engine->info(comm);
        check_out(flag, "flag");
        check_out(attribute_val, "attribute_val");
        int* value = nullptr;
        switch (keyval) {
        case MPI_TAG_UB:
            value = &tag_ub_value;
            break;
        case MPI_HOST:
            value = &host_value;
            break;
        case MPI_IO:
            value = &io_value;
            break;
        case MPI_WTIME_IS_GLOBAL:
            value = &wtime_is_global_value;
            break;
        default:
            throw MpiError(MPI_ERR_ARG, "keyval " + std::to_string(keyval) +
                                            " is not a predefined attribute (MPI_TAG_UB, MPI_HOST, MPI_IO, "
                                            "MPI_WTIME_IS_GLOBAL are provided)");
        }
        // The standard's C binding: attribute_val is a pointer to a pointer to the value.
        *static_cast<int**>(attribute_val) = value;
        *flag = 1;
        return MPI_SUCCESS;
    });
}

// ------------------------------------------------------------------- groups

int MPI_Group_size(MPI_Group group, int* size) {
    return guarded("MPI_Group_size", MPI_COMM_WORLD, [&] {
        check_out(size, "size");
        *size = static_cast<int>(group_of(group).size());
        return MPI_SUCCESS;
    });
}

int MPI_Group_rank(MPI_Group group, int* rank) {
    return guarded("MPI_Group_rank", MPI_COMM_WORLD, [&] {
        check_out(rank, "rank");
        const auto& g = group_of(group);
        const auto it = std::find(g.begin(), g.end(), engine->world_rank());
        *rank = it == g.end() ? MPI_UNDEFINED : static_cast<int>(it - g.begin());
        return MPI_SUCCESS;
    });
}

int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group* newgroup) {
    return guarded("MPI_Group_incl", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& g = group_of(group);
        check_ranks(g, n, ranks, "MPI_Group_incl");
        std::vector<int> out;
        for (int i = 0; i < n; ++i)
            out.push_back(g[static_cast<std::size_t>(ranks[i])]);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_excl(MPI_Group group, int n, const int ranks[], MPI_Group* newgroup) {
    return guarded("MPI_Group_excl", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& g = group_of(group);
        check_ranks(g, n, ranks, "MPI_Group_excl");
        const std::set<int> drop(ranks, ranks + n);
        std::vector<int> out;
        for (std::size_t i = 0; i < g.size(); ++i)
            if (drop.count(static_cast<int>(i)) == 0) out.push_back(g[i]);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_union(MPI_Group group1, MPI_Group group2, MPI_Group* newgroup) {
    return guarded("MPI_Group_union", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        std::vector<int> out = group_of(group1); // group1's members, then group2's others, in their orders
        for (int w : group_of(group2))
            if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_intersection(MPI_Group group1, MPI_Group group2, MPI_Group* newgroup) {
    return guarded("MPI_Group_intersection", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& b = group_of(group2);
        std::vector<int> out; // in group1's order
        for (int w : group_of(group1))
            if (std::find(b.begin(), b.end(), w) != b.end()) out.push_back(w);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_difference(MPI_Group group1, MPI_Group group2, MPI_Group* newgroup) {
    return guarded("MPI_Group_difference", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& b = group_of(group2);
        std::vector<int> out; // in group1's order
        for (int w : group_of(group1))
            if (std::find(b.begin(), b.end(), w) == b.end()) out.push_back(w);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_translate_ranks(MPI_Group group1, int n, const int ranks1[], MPI_Group group2, int ranks2[]) {
    return guarded("MPI_Group_translate_ranks", MPI_COMM_WORLD, [&] {
        const auto& a = group_of(group1);
        const auto& b = group_of(group2);
        if (n < 0) throw MpiError(MPI_ERR_ARG, "n is negative (" + std::to_string(n) + ")");
        if (n > 0 && (ranks1 == nullptr || ranks2 == nullptr)) throw MpiError(MPI_ERR_ARG, "ranks1 or ranks2 is NULL");
        for (int i = 0; i < n; ++i) {
            const int r = ranks1[i];
            if (r == MPI_PROC_NULL) {
                ranks2[i] = MPI_PROC_NULL;
                continue;
            }
            if (r < 0 || r >= static_cast<int>(a.size()))
                throw MpiError(MPI_ERR_RANK, "ranks1[" + std::to_string(i) + "] = " + std::to_string(r) +
                                                 " is not a rank of group1 (of " + std::to_string(a.size()) + ")");
            const auto it = std::find(b.begin(), b.end(), a[static_cast<std::size_t>(r)]);
            ranks2[i] = it == b.end() ? MPI_UNDEFINED : static_cast<int>(it - b.begin());
        }
        return MPI_SUCCESS;
    });
}

int MPI_Group_compare(MPI_Group group1, MPI_Group group2, int* result) {
    return guarded("MPI_Group_compare", MPI_COMM_WORLD, [&] {
        check_out(result, "result");
        const auto& a = group_of(group1);
        const auto& b = group_of(group2);
        if (a == b)
            *result = MPI_IDENT;
        else if (std::set<int>(a.begin(), a.end()) == std::set<int>(b.begin(), b.end()))
            *result = MPI_SIMILAR;
        else
            *result = MPI_UNEQUAL;
        return MPI_SUCCESS;
    });
}

int MPI_Group_free(MPI_Group* group) {
    return guarded("MPI_Group_free", MPI_COMM_WORLD, [&] {
        check_out(group, "group");
        if (*group != MPI_GROUP_EMPTY) {
            (void)group_of(*group);
            groups.erase(*group);
        }
        *group = MPI_GROUP_NULL;
        return MPI_SUCCESS;
    });
}

} // extern "C"
