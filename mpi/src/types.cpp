// The datatypes of msgpass's MPI: the basic types and the pair types of mpi.h, and the
// contiguous derived types made of them. A buffer of count elements is
// count * element_bytes contiguous bytes and travels as they are (every rank runs on
// one architecture); MPI_Type_size's data size leaves out a pair type's padding, as
// the standard says. A derived type is kept as the predefined type it repeats and how
// many times, so every call treats n elements of it as n * that many of the
// predefined type (reductions included).
#include "engine.hpp"

#include <climits>
#include <map>
#include <string>

namespace msgpass::mpi {

namespace {

struct Derived {
    MPI_Datatype base; // a predefined type
    std::size_t count; // of base in one element
    bool committed = false;
    bool freed = false;
};

// Derived types' handles count up from here (mpi.h's handles are integers). Freed
// types stay known, so a use after MPI_Type_free says so. Callers hold the big lock
// under MPI_THREAD_MULTIPLE (api.hpp's guarded).
constexpr MPI_Datatype first_derived = 0x4d000001;
std::map<MPI_Datatype, Derived> derived_types;
MPI_Datatype next_derived = first_derived;

// The derived type of a handle, or nullptr for a predefined one; MPI_ERR_TYPE for a
// freed one, an unknown one, or (commit) one that is not committed.
const Derived* find_derived(MPI_Datatype type, bool commit) {
    if (type < first_derived || type >= next_derived) return nullptr;
    const Derived& d = derived_types.at(type);
    if (d.freed) throw MpiError(MPI_ERR_TYPE, "datatype " + std::to_string(type) + " was freed (MPI_Type_free)");
    if (commit && !d.committed)
        throw MpiError(MPI_ERR_TYPE, "datatype " + std::to_string(type) +
                                         " is not committed (MPI_Type_commit before using it in communication)");
    return &d;
}

} // namespace

std::pair<MPI_Datatype, std::size_t> predefined_of(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, true)) return {d->base, d->count};
    (void)element_bytes(type);
    return {type, 1};
}

MPI_Datatype type_contiguous(int count, MPI_Datatype old) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
    Derived d{old, 1};
    if (const Derived* o = find_derived(old, false))
        d = Derived{o->base, o->count};
    else
        (void)element_bytes(old);
    d.count *= static_cast<std::size_t>(count);
    if (d.count * element_bytes(d.base) > static_cast<std::size_t>(INT_MAX))
        throw MpiError(MPI_ERR_COUNT, "the type would be larger than INT_MAX bytes");
    if (next_derived == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no datatype handle left");
    derived_types.emplace(next_derived, d);
    return next_derived++;
}

void type_commit(MPI_Datatype type) {
    if (find_derived(type, false) != nullptr)
        derived_types.at(type).committed = true;
    else
        (void)element_bytes(type); // a predefined type is committed already
}

void type_free(MPI_Datatype type) {
    if (find_derived(type, false) == nullptr) {
        (void)element_bytes(type);
        throw MpiError(MPI_ERR_TYPE, "the predefined " + type_name(type) + " cannot be freed");
    }
    derived_types.at(type).freed = true;
}

std::size_t extent_bytes(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, false)) return d->count * element_bytes(d->base);
    return element_bytes(type);
}

bool is_pair_type(MPI_Datatype type) {
    switch (type) {
    case MPI_2INT:
    case MPI_FLOAT_INT:
    case MPI_DOUBLE_INT:
    case MPI_LONG_INT:
    case MPI_SHORT_INT:
    case MPI_LONG_DOUBLE_INT:
        return true;
    default:
        return false;
    }
}

std::string type_name(MPI_Datatype type) {
    switch (type) {
    case MPI_CHAR:
        return "MPI_CHAR";
    case MPI_SIGNED_CHAR:
        return "MPI_SIGNED_CHAR";
    case MPI_UNSIGNED_CHAR:
        return "MPI_UNSIGNED_CHAR";
    case MPI_BYTE:
        return "MPI_BYTE";
    case MPI_SHORT:
        return "MPI_SHORT";
    case MPI_UNSIGNED_SHORT:
        return "MPI_UNSIGNED_SHORT";
    case MPI_INT:
        return "MPI_INT";
    case MPI_UNSIGNED:
        return "MPI_UNSIGNED";
    case MPI_LONG:
        return "MPI_LONG";
    case MPI_UNSIGNED_LONG:
        return "MPI_UNSIGNED_LONG";
    case MPI_LONG_LONG:
        return "MPI_LONG_LONG";
    case MPI_UNSIGNED_LONG_LONG:
        return "MPI_UNSIGNED_LONG_LONG";
    case MPI_FLOAT:
        return "MPI_FLOAT";
    case MPI_DOUBLE:
        return "MPI_DOUBLE";
    case MPI_2INT:
        return "MPI_2INT";
    case MPI_FLOAT_INT:
        return "MPI_FLOAT_INT";
    case MPI_DOUBLE_INT:
        return "MPI_DOUBLE_INT";
    case MPI_LONG_INT:
        return "MPI_LONG_INT";
    case MPI_SHORT_INT:
        return "MPI_SHORT_INT";
    case MPI_LONG_DOUBLE_INT:
        return "MPI_LONG_DOUBLE_INT";
    default:
        return "datatype " + std::to_string(type);
    }
}

std::size_t element_bytes(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, true)) return d->count * element_bytes(d->base);
    switch (type) {
    case MPI_CHAR:
    case MPI_SIGNED_CHAR:
    case MPI_UNSIGNED_CHAR:
    case MPI_BYTE:
    case MPI_SHORT:
    case MPI_UNSIGNED_SHORT:
    case MPI_INT:
    case MPI_UNSIGNED:
    case MPI_LONG:
    case MPI_UNSIGNED_LONG:
    case MPI_LONG_LONG:
    case MPI_UNSIGNED_LONG_LONG:
    case MPI_FLOAT:
    case MPI_DOUBLE:
    case MPI_2INT:
    case MPI_FLOAT_INT:
    case MPI_DOUBLE_INT:
    case MPI_LONG_INT:
    case MPI_SHORT_INT:
    case MPI_LONG_DOUBLE_INT:
        return static_cast<std::size_t>(type & 0xff); // (collectives.cpp checks the pairs' layout)
    default:
        throw MpiError(MPI_ERR_TYPE,
                       "invalid datatype " + std::to_string(type) + " (only the datatypes of mpi.h are provided)");
    }
}

std::size_t data_bytes(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, false)) return d->count * data_bytes(d->base);
    switch (type) {
    case MPI_2INT:
        return 2 * sizeof(int);
    case MPI_FLOAT_INT:
        return sizeof(float) + sizeof(int);
    case MPI_DOUBLE_INT:
        return sizeof(double) + sizeof(int);
    case MPI_LONG_INT:
        return sizeof(long) + sizeof(int);
    case MPI_SHORT_INT:
        return sizeof(short) + sizeof(int);
    case MPI_LONG_DOUBLE_INT:
        return sizeof(long double) + sizeof(int);
    default:
        return element_bytes(type); // (not derived: no commit needed)
    }
}

} // namespace msgpass::mpi
