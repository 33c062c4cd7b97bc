// MPI_Info of msgpass's MPI: per-process sets of (key, value) strings, kept in the
// order their keys were first set (MPI_Info_get_nthkey's order). Nothing in the
// library reads them yet: they exist so that programs that pass hints run. Keys and
// values longer than MPI_MAX_INFO_KEY - 1 and MPI_MAX_INFO_VAL - 1 characters are
// refused, so a buffer of MPI_MAX_INFO_KEY (MPI_MAX_INFO_VAL) chars always holds one
// with its terminating NUL.
#include "api.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace msgpass::mpi;
using namespace msgpass::mpi::api;

namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;

// Handles count up from first_info; freed ones are erased (a use is MPI_ERR_INFO).
// Callers hold the big lock under MPI_THREAD_MULTIPLE (guarded).
constexpr MPI_Info first_info = 0x5c000001;
std::map<MPI_Info, Entries> infos;
MPI_Info next_info = first_info;

Entries& entries_of(MPI_Info info) {
    const auto it = infos.find(info);
    if (it == infos.end())
        throw MpiError(MPI_ERR_INFO, info == MPI_INFO_NULL ? std::string("MPI_INFO_NULL is not an info object")
                                                           : "invalid info object " + std::to_string(info));
    return it->second;
}

std::string checked_key(const char* key) {
    if (key == nullptr) throw MpiError(MPI_ERR_INFO_KEY, "key is NULL");
    const std::size_t n = std::strlen(key);
    if (n == 0) throw MpiError(MPI_ERR_INFO_KEY, "the key is empty");
    if (n > MPI_MAX_INFO_KEY - 1)
        throw MpiError(MPI_ERR_INFO_KEY, "the key has " + std::to_string(n) + " characters, more than " +
                                             std::to_string(MPI_MAX_INFO_KEY - 1) + " (MPI_MAX_INFO_KEY - 1)");
    return key;
}

Entries::iterator find_key(Entries& e, const std::string& key) {
    return std::find_if(e.begin(), e.end(), [&](const auto& kv) { return kv.first == key; });
}

MPI_Info new_info(Entries entries) {
    if (next_info == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no info handle left");
    infos.emplace(next_info, std::move(entries));
    return next_info++;
}

} // namespace

extern "C" {

int MPI_Info_create(MPI_Info* info) {
    return guarded("MPI_Info_create", MPI_COMM_WORLD, [&] {
        if (info == nullptr) throw MpiError(MPI_ERR_ARG, "info is NULL");
        *info = new_info({});
        return MPI_SUCCESS;
    });
}

int MPI_Info_set(MPI_Info info, const char* key, const char* value) {
    return guarded("MPI_Info_set", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        const std::string k = checked_key(key);
        if (value == nullptr) throw MpiError(MPI_ERR_INFO_VALUE, "value is NULL");
        const std::size_t n = std::strlen(value);
        if (n == 0) throw MpiError(MPI_ERR_INFO_VALUE, "the value of key '" + k + "' is empty");
        if (n > MPI_MAX_INFO_VAL - 1)
            throw MpiError(MPI_ERR_INFO_VALUE, "the value of key '" + k + "' has " + std::to_string(n) +
                                                   " characters, more than " + std::to_string(MPI_MAX_INFO_VAL - 1) +
                                                   " (MPI_MAX_INFO_VAL - 1)");
        const auto it = find_key(e, k);
        if (it != e.end())
            it->second = value;
        else
            e.emplace_back(k, value);
        return MPI_SUCCESS;
    });
}

int MPI_Info_get(MPI_Info info, const char* key, int valuelen, char* value, int* flag) {
    return guarded("MPI_Info_get", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        const std::string k = checked_key(key);
        if (valuelen < 0) throw MpiError(MPI_ERR_ARG, "negative valuelen " + std::to_string(valuelen));
        if (value == nullptr || flag == nullptr) throw MpiError(MPI_ERR_ARG, "value or flag is NULL");
        const auto it = find_key(e, k);
        *flag = it != e.end() ? 1 : 0;
        if (it == e.end()) return MPI_SUCCESS;
        // At most valuelen characters, then a NUL (the buffer holds valuelen + 1).
        const std::size_t n = std::min(it->second.size(), static_cast<std::size_t>(valuelen));
        std::memcpy(value, it->second.data(), n);
        value[n] = '\0';
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_valuelen(MPI_Info info, const char* key, int* valuelen, int* flag) {
    return guarded("MPI_Info_get_valuelen", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        const std::string k = checked_key(key);
        if (valuelen == nullptr || flag == nullptr) throw MpiError(MPI_ERR_ARG, "valuelen or flag is NULL");
        const auto it = find_key(e, k);
        *flag = it != e.end() ? 1 : 0;
        if (it != e.end()) *valuelen = static_cast<int>(it->second.size());
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_nkeys(MPI_Info info, int* nkeys) {
    return guarded("MPI_Info_get_nkeys", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        if (nkeys == nullptr) throw MpiError(MPI_ERR_ARG, "nkeys is NULL");
        *nkeys = static_cast<int>(e.size());
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_nthkey(MPI_Info info, int n, char* key) {
    return guarded("MPI_Info_get_nthkey", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        if (n < 0 || static_cast<std::size_t>(n) >= e.size())
            throw MpiError(MPI_ERR_ARG, "key number " + std::to_string(n) + " of an info with " +
                                            std::to_string(e.size()) + " keys");
        if (key == nullptr) throw MpiError(MPI_ERR_ARG, "key is NULL");
        const std::string& k = e[static_cast<std::size_t>(n)].first;
        std::memcpy(key, k.c_str(), k.size() + 1);
        return MPI_SUCCESS;
    });
}

int MPI_Info_delete(MPI_Info info, const char* key) {
    return guarded("MPI_Info_delete", MPI_COMM_WORLD, [&] {
        Entries& e = entries_of(info);
        const std::string k = checked_key(key);
        const auto it = find_key(e, k);
        if (it == e.end()) throw MpiError(MPI_ERR_INFO_NOKEY, "no key '" + k + "' in info " + std::to_string(info));
        e.erase(it);
        return MPI_SUCCESS;
    });
}

int MPI_Info_dup(MPI_Info info, MPI_Info* newinfo) {
    return guarded("MPI_Info_dup", MPI_COMM_WORLD, [&] {
        Entries copy = entries_of(info);
        if (newinfo == nullptr) throw MpiError(MPI_ERR_ARG, "newinfo is NULL");
        *newinfo = new_info(std::move(copy));
        return MPI_SUCCESS;
    });
}

int MPI_Info_free(MPI_Info* info) {
    return guarded("MPI_Info_free", MPI_COMM_WORLD, [&] {
        if (info == nullptr) throw MpiError(MPI_ERR_ARG, "info is NULL");
        (void)entries_of(*info);
        infos.erase(*info);
        *info = MPI_INFO_NULL;
        return MPI_SUCCESS;
    });
}

} // extern "C"
