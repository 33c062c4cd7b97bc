// MPI_Info of msgpass's MPI: per-process sets of (key, value) strings, kept in the
// order their keys were first set (MPI_Info_get_nthkey's order). Nothing in the
// library reads them yet: they exist so that programs that pass hints run. Keys and
// values longer than MPI_MAX_INFO_KEY - 1 and MPI_MAX_INFO_VAL - 1 characters are
// refused, so a buffer of MPI_MAX_INFO_KEY (MPI_MAX_INFO_VAL) chars always holds one
// with its terminating NUL.
#include "api.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
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

std::string read_file(const char* path) {
    std::string out;
    if (std::FILE* f = std::fopen(path, "rb")) {
        char chunk[4096];
        std::size_t n = 0;
        while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0)
            out.append(chunk, n);
        std::fclose(f);
    }
    return out;
}

// MPI_INFO_ENV's keys, made at its first use: the command line from /proc/self/cmdline
// (MPI_Init may have been given no argv), the world's size, the thread level, the host
// and the working directory; without run, only what is the same before MPI_Init and
// after it (MPI_Info_create_env): the command line, the host, the directory.
Entries environment(bool run = true) {
    Entries e;
    const std::string cmdline = read_file("/proc/self/cmdline");
    std::string command;
    std::string args;
    std::size_t at = 0;
    for (bool first = true; at < cmdline.size(); first = false) {
        const std::size_t end = std::min(cmdline.find('\0', at), cmdline.size());
        const std::string word = cmdline.substr(at, end - at);
        if (first)
            command = word;
        else
            args += (args.empty() ? "" : " ") + word;
        at = end + 1;
    }
    e.emplace_back("command", command);
    e.emplace_back("argv", args);
    if (run && engine) e.emplace_back("maxprocs", std::to_string(engine->info(MPI_COMM_WORLD).size));
    static const char* const levels[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
                                         "MPI_THREAD_MULTIPLE"};
    if (run) e.emplace_back("thread_level", levels[thread_level]);
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) e.emplace_back("host", host);
    char cwd[4096] = {};
    if (::getcwd(cwd, sizeof cwd) != nullptr) e.emplace_back("wdir", cwd);
    return e;
}

Entries& entries_of(MPI_Info info) {
    if (info == MPI_INFO_ENV && infos.count(info) == 0) infos.emplace(info, environment());
    const auto it = infos.find(info);
    if (it == infos.end())
        throw MpiError(MPI_ERR_INFO, info == MPI_INFO_NULL ? std::string("MPI_INFO_NULL is not an info object")
                                                           : "invalid info object " + std::to_string(info));
    return it->second;
}

// The info object for a call that changes it: MPI_INFO_ENV is read only.
Entries& writable(MPI_Info info) {
    if (info == MPI_INFO_ENV) throw MpiError(MPI_ERR_INFO, "MPI_INFO_ENV is read only");
    return entries_of(info);
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

namespace {

// The MPI_Info calls may be made before MPI_Init and after MPI_Finalize.
template <class F>
int info_guarded(const char* call, F&& body) {
    return guarded(call, MPI_COMM_WORLD, std::forward<F>(body), true);
}

} // namespace

extern "C" {

int MPI_Info_create(MPI_Info* info) {
    return info_guarded("MPI_Info_create", [&] {
        if (info == nullptr) throw MpiError(MPI_ERR_ARG, "info is NULL");
        *info = new_info({});
        return MPI_SUCCESS;
    });
}

int MPI_Info_set(MPI_Info info, const char* key, const char* value) {
    return info_guarded("MPI_Info_set", [&] {
        Entries& e = writable(info);
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
    return info_guarded("MPI_Info_get", [&] {
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

int MPI_Info_create_env(int argc, char* argv[], MPI_Info* info) {
    (void)argc; // (the command line is read from /proc/self/cmdline, as MPI_INFO_ENV's)
    (void)argv;
    return info_guarded("MPI_Info_create_env", [&] {
        if (info == nullptr) throw MpiError(MPI_ERR_ARG, "info is NULL");
        *info = new_info(environment(false));
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_string(MPI_Info info, const char* key, int* buflen, char* value, int* flag) {
    return info_guarded("MPI_Info_get_string", [&] {
        Entries& e = entries_of(info);
        const std::string k = checked_key(key);
        if (buflen == nullptr || flag == nullptr) throw MpiError(MPI_ERR_ARG, "buflen or flag is NULL");
        if (*buflen < 0) throw MpiError(MPI_ERR_ARG, "negative buflen " + std::to_string(*buflen));
        if (*buflen > 0 && value == nullptr) throw MpiError(MPI_ERR_ARG, "value is NULL");
        const auto it = find_key(e, k);
        *flag = it != e.end() ? 1 : 0;
        if (it == e.end()) return MPI_SUCCESS;
        const int given = *buflen;
        *buflen = static_cast<int>(it->second.size()) + 1;
        if (given > 0) {
            const std::size_t n = std::min(it->second.size(), static_cast<std::size_t>(given - 1));
            std::memcpy(value, it->second.data(), n);
            value[n] = '\0';
        }
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_valuelen(MPI_Info info, const char* key, int* valuelen, int* flag) {
    return info_guarded("MPI_Info_get_valuelen", [&] {
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
    return info_guarded("MPI_Info_get_nkeys", [&] {
        Entries& e = entries_of(info);
        if (nkeys == nullptr) throw MpiError(MPI_ERR_ARG, "nkeys is NULL");
        *nkeys = static_cast<int>(e.size());
        return MPI_SUCCESS;
    });
}

int MPI_Info_get_nthkey(MPI_Info info, int n, char* key) {
    return info_guarded("MPI_Info_get_nthkey", [&] {
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
    return info_guarded("MPI_Info_delete", [&] {
        Entries& e = writable(info);
        const std::string k = checked_key(key);
        const auto it = find_key(e, k);
        if (it == e.end()) throw MpiError(MPI_ERR_INFO_NOKEY, "no key '" + k + "' in info " + std::to_string(info));
        e.erase(it);
        return MPI_SUCCESS;
    });
}

int MPI_Info_dup(MPI_Info info, MPI_Info* newinfo) {
    return info_guarded("MPI_Info_dup", [&] {
        Entries copy = entries_of(info);
        if (newinfo == nullptr) throw MpiError(MPI_ERR_ARG, "newinfo is NULL");
        *newinfo = new_info(std::move(copy));
        return MPI_SUCCESS;
    });
}

int MPI_Info_free(MPI_Info* info) {
    return info_guarded("MPI_Info_free", [&] {
        if (info == nullptr) throw MpiError(MPI_ERR_ARG, "info is NULL");
        (void)writable(*info);
        infos.erase(*info);
        *info = MPI_INFO_NULL;
        return MPI_SUCCESS;
    });
}

// A communicator's hints: none is used (docs/mpi.md), so none is kept.
int MPI_Comm_set_info(MPI_Comm comm, MPI_Info info) {
    return guarded("MPI_Comm_set_info", comm, [&] {
        (void)engine->info(comm);
        if (info != MPI_INFO_NULL) (void)entries_of(info);
        return MPI_SUCCESS;
    });
}

int MPI_Comm_get_info(MPI_Comm comm, MPI_Info* info_used) {
    return guarded("MPI_Comm_get_info", comm, [&] {
        (void)engine->info(comm);
        if (info_used == nullptr) throw MpiError(MPI_ERR_ARG, "info_used is NULL");
        *info_used = new_info({});
        return MPI_SUCCESS;
    });
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm) {
    const int code = guarded("MPI_Comm_dup_with_info", comm, [&] {
        if (info != MPI_INFO_NULL) (void)entries_of(info);
        return MPI_SUCCESS;
    });
    return code != MPI_SUCCESS ? code : MPI_Comm_dup(comm, newcomm);
}

int MPI_Comm_idup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* newcomm, MPI_Request* request) {
    const int code = guarded("MPI_Comm_idup_with_info", comm, [&] {
        if (info != MPI_INFO_NULL) (void)entries_of(info);
        return MPI_SUCCESS;
    });
    return code != MPI_SUCCESS ? code : MPI_Comm_idup(comm, newcomm, request);
}

} // extern "C"
