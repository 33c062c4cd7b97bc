// The C entry points of msgpass's MPI (mpi.h), communicators and groups: dup, split,
// create, free, compare, names, attributes, and the groups they are made from.
// A group is a list of world ranks kept here under its handle; the communicators
// themselves are the engine's (communicators.cpp).
#include <algorithm>
#include <cstdint>
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
int appnum_value = 0;        // msgpass-run starts one program
int universe_size_value = 0; // the world's size, set at the first query

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

// The ranks of n {first, last, stride} triplets, in order (MPI 3.1, 6.3.2): each a
// rank of the group, none twice, no stride 0.
std::vector<int> range_ranks(const std::vector<int>& group, int n, int ranges[][3], const char* what) {
    if (n < 0) throw MpiError(MPI_ERR_ARG, std::string(what) + ": n is negative (" + std::to_string(n) + ")");
    if (n > 0 && ranges == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + ": ranges is NULL");
    const int size = static_cast<int>(group.size());
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
        const int first = ranges[i][0], last = ranges[i][1], stride = ranges[i][2];
        const std::string range = "ranges[" + std::to_string(i) + "] = {" + std::to_string(first) + ", " +
                                  std::to_string(last) + ", " + std::to_string(stride) + "}";
        if (stride == 0) throw MpiError(MPI_ERR_ARG, std::string(what) + ": " + range + " has stride 0");
        if (first < 0 || first >= size || last < 0 || last >= size)
            throw MpiError(MPI_ERR_RANK,
                           std::string(what) + ": " + range + " is not within the group of " + std::to_string(size));
        for (long r = first; stride > 0 ? r <= last : r >= last; r += stride)
            out.push_back(static_cast<int>(r));
    }
    check_ranks(group, static_cast<int>(out.size()), out.data(), what); // none twice
    return out;
}

// Keyvals of the application and the attributes set with them, per communicator or
// datatype (their handles' ranges differ, so one map keeps both; a keyval serves one
// kind of object, and its functions get that object's handle, an int either way).
struct Keyval {
    MPI_Comm_copy_attr_function* copy;
    MPI_Comm_delete_attr_function* remove;
    void* extra;
    bool freed = false;     // MPI_Comm_free_keyval called: kept while attributes use it
    int uses = 0;           // attributes set with it
    bool for_types = false; // made by MPI_Type_create_keyval
};
std::map<int, Keyval> keyvals;
int next_keyval = 0x68000001;
struct Attribute {
    void* value;
    std::uint64_t order; // when it was set: MPI_Finalize deletes the last set first
};
std::map<MPI_Comm, std::map<int, Attribute>> attributes;
std::uint64_t next_order = 0;

bool predefined_keyval(int keyval) {
    return keyval == MPI_TAG_UB || keyval == MPI_HOST || keyval == MPI_IO || keyval == MPI_WTIME_IS_GLOBAL ||
           keyval == MPI_APPNUM || keyval == MPI_UNIVERSE_SIZE || keyval == MPI_LASTUSEDCODE;
}

// A keyval of the application. A freed one still serves the attributes set with it
// (in_use: MPI_Comm_get_attr, MPI_Comm_delete_attr), but sets none.
Keyval& keyval_of(int keyval, bool in_use = false, bool for_types = false) {
    const auto it = keyvals.find(keyval);
    const char* maker = for_types ? "MPI_Type_create_keyval" : "MPI_Comm_create_keyval";
    if (it == keyvals.end() || (it->second.freed && !in_use) || it->second.for_types != for_types)
        throw MpiError(MPI_ERR_KEYVAL, "keyval " + std::to_string(keyval) +
                                           (keyval == MPI_KEYVAL_INVALID ? std::string(" is MPI_KEYVAL_INVALID")
                                            : it == keyvals.end() || it->second.for_types != for_types
                                                ? std::string(" was not created by ") + maker
                                                : std::string(" was freed")));
    return it->second;
}

// The keyval an MPI_Comm_free_keyval or MPI_Type_free_keyval frees: freeing one that
// was freed already is accepted while attributes still hold it (as a reference each,
// which MPICH's tests rely on: a delete function that frees its keyval, then the
// program freeing its own copy of the handle); once none holds it, "was freed".
Keyval& keyval_to_free(int keyval, bool for_types) {
    const auto it = keyvals.find(keyval);
    if (it != keyvals.end() && it->second.freed && it->second.uses > 0 && it->second.for_types == for_types)
        return it->second;
    return keyval_of(keyval, false, for_types);
}

// A freed keyval's record stays (without uses it costs a map entry), so that a later
// use of its handle is told "was freed".
void release_keyval(int keyval) {
    const auto it = keyvals.find(keyval);
    if (it != keyvals.end()) --it->second.uses;
}

// Deletes one attribute through its delete function; a function that fails leaves
// the attribute in place and its code is the call's.
void delete_attribute(MPI_Comm comm, int keyval) {
    auto& on = attributes[comm];
    const auto it = on.find(keyval);
    if (it == on.end())
        throw MpiError(MPI_ERR_KEYVAL, std::string(comm >= 0x4c000000 ? "datatype " : "communicator ") +
                                           std::to_string(comm) + " has no attribute of keyval " +
                                           std::to_string(keyval));
    const Keyval& k = keyvals.at(keyval);
    if (k.remove != nullptr) {
        const int code = k.remove(comm, keyval, it->second.value, k.extra);
        if (code != MPI_SUCCESS)
            throw MpiError(code, "the delete function of keyval " + std::to_string(keyval) + " returned " +
                                     std::to_string(code));
    }
    on.erase(it);
    if (on.empty()) attributes.erase(comm);
    release_keyval(keyval);
}

} // namespace

namespace msgpass::mpi::api {

// MPI_Comm_dup, MPI_Type_dup: each attribute of from goes to to as its copy function says.
void copy_attributes(int from, int to) {
    const auto it = attributes.find(from);
    if (it == attributes.end()) return;
    const auto on = it->second; // a copy function may set attributes on from
    for (const auto& [keyval, attribute] : on) {
        Keyval& k = keyvals.at(keyval);
        if (k.copy == nullptr) continue;
        void* out = nullptr;
        int flag = 0;
        const int code = k.copy(from, keyval, k.extra, attribute.value, &out, &flag);
        if (code != MPI_SUCCESS)
            throw MpiError(code, "the copy function of keyval " + std::to_string(keyval) + " returned " +
                                     std::to_string(code));
        if (flag != 0) {
            attributes[to][keyval] = Attribute{out, next_order++};
            ++k.uses;
        }
    }
}

// The last set first (MPI 3.1, 8.7.1: MPI_COMM_SELF's in the reverse order of their setting).
void delete_attributes(MPI_Comm comm) {
    while (true) {
        const auto it = attributes.find(comm);
        if (it == attributes.end() || it->second.empty()) return;
        const auto last = std::max_element(it->second.begin(), it->second.end(), [](const auto& a, const auto& b) {
            return a.second.order < b.second.order;
        });
        delete_attribute(comm, last->first);
    }
}

} // namespace msgpass::mpi::api

extern "C" {

// ------------------------------------------------------------------- communicators

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_dup", comm, [&] {
        check_out(newcomm, "newcomm");
        *newcomm = engine->dup(comm);
        comm_handlers[*newcomm] = handler_of(comm); // a duplicate keeps the error handler
        copy_attributes(comm, *newcomm);
        copy_topology(comm, *newcomm);
        return MPI_SUCCESS;
    });
}

// The handle at once; its contexts when the request completes (Engine::idup).
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm* newcomm, MPI_Request* request) {
    return guarded("MPI_Comm_idup", comm, [&] {
        check_out(request, "request");
        check_out(newcomm, "newcomm");
        *request = engine->idup(comm, newcomm);
        comm_handlers[*newcomm] = handler_of(comm);
        copy_attributes(comm, *newcomm); // at the call, as MPI_Comm_dup's
        copy_topology(comm, *newcomm);
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

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_create_group", comm, [&] {
        check_out(newcomm, "newcomm");
        check_send_tag(tag);
        *newcomm = engine->create_group(comm, group_of(group), tag);
        if (*newcomm != MPI_COMM_NULL) comm_handlers[*newcomm] = handler_of(comm);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_free(MPI_Comm* comm) {
    return guarded("MPI_Comm_free", comm != nullptr ? *comm : MPI_COMM_WORLD, [&] {
        check_out(comm, "comm");
        (void)engine->info(*comm);
        delete_attributes(*comm); // before the communicator goes (a failing delete function keeps it)
        engine->free_comm(*comm);
        comm_handlers.erase(*comm);
        drop_topology(*comm);
        *comm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_disconnect(MPI_Comm* comm) {
    if (comm == nullptr) return MPI_Comm_free(comm); // (its error)
    const int code = MPI_Barrier(*comm);
    return code != MPI_SUCCESS ? code : MPI_Comm_free(comm);
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
        case MPI_APPNUM:
            value = &appnum_value;
            break;
        case MPI_UNIVERSE_SIZE:
            universe_size_value = engine->info(MPI_COMM_WORLD).size;
            value = &universe_size_value;
            break;
        case MPI_LASTUSEDCODE:
            value = &last_used_code;
            break;
        default: {
            (void)keyval_of(keyval, true);
            *flag = 0;
            const auto on = attributes.find(comm);
            if (on == attributes.end()) return MPI_SUCCESS;
            const auto it = on->second.find(keyval);
            if (it == on->second.end()) return MPI_SUCCESS;
            *static_cast<void**>(attribute_val) = it->second.value; // the pointer that was set
            *flag = 1;
            return MPI_SUCCESS;
        }
        }
        // The standard's C binding: attribute_val is a pointer to a pointer to the value.
        *static_cast<int**>(attribute_val) = value;
        *flag = 1;
        return MPI_SUCCESS;
    });
}

int MPI_COMM_DUP_FN(MPI_Comm, int, void*, void* attribute_val_in, void* attribute_val_out, int* flag) {
    *static_cast<void**>(attribute_val_out) = attribute_val_in;
    *flag = 1;
    return MPI_SUCCESS;
}

int MPI_Comm_create_keyval(MPI_Comm_copy_attr_function* copy_fn, MPI_Comm_delete_attr_function* delete_fn, int* keyval,
                           void* extra_state) {
    return guarded("MPI_Comm_create_keyval", MPI_COMM_WORLD, [&] {
        check_out(keyval, "comm_keyval");
        *keyval = next_keyval++;
        keyvals.emplace(*keyval, Keyval{copy_fn, delete_fn, extra_state});
        return MPI_SUCCESS;
    });
}

int MPI_Comm_free_keyval(int* keyval) {
    return guarded("MPI_Comm_free_keyval", MPI_COMM_WORLD, [&] {
        check_out(keyval, "comm_keyval");
        if (predefined_keyval(*keyval))
            throw MpiError(MPI_ERR_KEYVAL, "keyval " + std::to_string(*keyval) + " is predefined and cannot be freed");
        Keyval& k = keyval_to_free(*keyval, false);
        k.freed = true; // the attributes set with it keep it until they are deleted
        *keyval = MPI_KEYVAL_INVALID;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_set_attr(MPI_Comm comm, int keyval, void* attribute_val) {
    return guarded("MPI_Comm_set_attr", comm, [&] {
        (void)engine->info(comm);
        if (predefined_keyval(keyval))
            throw MpiError(MPI_ERR_KEYVAL,
                           "MPI_Comm_set_attr: keyval " + std::to_string(keyval) + " is predefined and cannot be set");
        Keyval& k = keyval_of(keyval);
        auto& on = attributes[comm];
        if (on.count(keyval) != 0) delete_attribute(comm, keyval); // the old value's delete
        attributes[comm][keyval] = Attribute{attribute_val, next_order++};
        ++k.uses;
        return MPI_SUCCESS;
    });
}

int MPI_Comm_delete_attr(MPI_Comm comm, int keyval) {
    return guarded("MPI_Comm_delete_attr", comm, [&] {
        (void)engine->info(comm);
        (void)keyval_of(keyval, true);
        delete_attribute(comm, keyval);
        return MPI_SUCCESS;
    });
}

// ------------------------------------------------------------ datatypes' attributes

int MPI_TYPE_DUP_FN(MPI_Datatype, int, void*, void* attribute_val_in, void* attribute_val_out, int* flag) {
    *static_cast<void**>(attribute_val_out) = attribute_val_in;
    *flag = 1;
    return MPI_SUCCESS;
}

int MPI_Type_create_keyval(MPI_Type_copy_attr_function* copy_fn, MPI_Type_delete_attr_function* delete_fn, int* keyval,
                           void* extra_state) {
    return guarded("MPI_Type_create_keyval", MPI_COMM_WORLD, [&] {
        check_out(keyval, "type_keyval");
        *keyval = next_keyval++;
        keyvals.emplace(*keyval, Keyval{copy_fn, delete_fn, extra_state, false, 0, true});
        return MPI_SUCCESS;
    });
}

int MPI_Type_free_keyval(int* keyval) {
    return guarded("MPI_Type_free_keyval", MPI_COMM_WORLD, [&] {
        check_out(keyval, "type_keyval");
        keyval_to_free(*keyval, true).freed = true;
        *keyval = MPI_KEYVAL_INVALID;
        return MPI_SUCCESS;
    });
}

int MPI_Type_set_attr(MPI_Datatype type, int keyval, void* attribute_val) {
    return guarded("MPI_Type_set_attr", MPI_COMM_WORLD, [&] {
        (void)msgpass::mpi::type_info(type);
        Keyval& k = keyval_of(keyval, false, true);
        if (attributes[type].count(keyval) != 0) delete_attribute(type, keyval); // the old value's delete
        attributes[type][keyval] = Attribute{attribute_val, next_order++};
        ++k.uses;
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_attr(MPI_Datatype type, int keyval, void* attribute_val, int* flag) {
    return guarded("MPI_Type_get_attr", MPI_COMM_WORLD, [&] {
        (void)msgpass::mpi::type_info(type);
        check_out(flag, "flag");
        check_out(attribute_val, "attribute_val");
        (void)keyval_of(keyval, true, true);
        *flag = 0;
        const auto on = attributes.find(type);
        if (on == attributes.end()) return MPI_SUCCESS;
        const auto it = on->second.find(keyval);
        if (it == on->second.end()) return MPI_SUCCESS;
        *static_cast<void**>(attribute_val) = it->second.value;
        *flag = 1;
        return MPI_SUCCESS;
    });
}

int MPI_Type_delete_attr(MPI_Datatype type, int keyval) {
    return guarded("MPI_Type_delete_attr", MPI_COMM_WORLD, [&] {
        (void)msgpass::mpi::type_info(type);
        (void)keyval_of(keyval, true, true);
        delete_attribute(type, keyval);
        return MPI_SUCCESS;
    });
}

int MPI_Keyval_create(MPI_Copy_function* copy_fn, MPI_Delete_function* delete_fn, int* keyval, void* extra_state) {
    return MPI_Comm_create_keyval(copy_fn, delete_fn, keyval, extra_state);
}
int MPI_Keyval_free(int* keyval) {
    return MPI_Comm_free_keyval(keyval);
}
int MPI_Attr_put(MPI_Comm comm, int keyval, void* attribute_val) {
    return MPI_Comm_set_attr(comm, keyval, attribute_val);
}
int MPI_Attr_get(MPI_Comm comm, int keyval, void* attribute_val, int* flag) {
    return MPI_Comm_get_attr(comm, keyval, attribute_val, flag);
}
int MPI_Attr_delete(MPI_Comm comm, int keyval) {
    return MPI_Comm_delete_attr(comm, keyval);
}

// The ranks of one host share its memory: a split by the host each rank runs on
// (MPI_Get_processor_name), each host's ranks ordered by key, then by rank.
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info, MPI_Comm* newcomm) {
    return guarded("MPI_Comm_split_type", comm, [&] {
        check_out(newcomm, "newcomm");
        if (split_type != MPI_COMM_TYPE_SHARED && split_type != MPI_UNDEFINED)
            throw MpiError(MPI_ERR_ARG, "split_type " + std::to_string(split_type) +
                                            " is neither MPI_COMM_TYPE_SHARED nor MPI_UNDEFINED");
        const auto c = engine->info(comm);
        char host[MPI_MAX_PROCESSOR_NAME] = {};
        int length = 0;
        MPI_Get_processor_name(host, &length);
        std::vector<char> hosts(static_cast<std::size_t>(c.size) * MPI_MAX_PROCESSOR_NAME);
        int code =
            MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
        if (code != MPI_SUCCESS) return code;
        int color = MPI_UNDEFINED; // the first rank of this host
        for (int r = 0; split_type == MPI_COMM_TYPE_SHARED && r < c.size; ++r) {
            if (std::strncmp(&hosts[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME], host,
                             MPI_MAX_PROCESSOR_NAME) == 0) {
                color = r;
                break;
            }
        }
        return MPI_Comm_split(comm, color, key, newcomm);
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

int MPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group* newgroup) {
    return guarded("MPI_Group_range_incl", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& g = group_of(group);
        std::vector<int> out;
        for (int r : range_ranks(g, n, ranges, "MPI_Group_range_incl"))
            out.push_back(g[static_cast<std::size_t>(r)]);
        *newgroup = add_group(std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Group_range_excl(MPI_Group group, int n, int ranges[][3], MPI_Group* newgroup) {
    return guarded("MPI_Group_range_excl", MPI_COMM_WORLD, [&] {
        check_out(newgroup, "newgroup");
        const auto& g = group_of(group);
        const auto ranks = range_ranks(g, n, ranges, "MPI_Group_range_excl");
        const std::set<int> drop(ranks.begin(), ranks.end());
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
