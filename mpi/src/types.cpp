// The datatypes of msgpass's MPI: the basic types and the pair types of mpi.h, and
// the derived types made of them (contiguous, vector, indexed, struct, resized...).
// Every type is a typemap: blocks of (displacement, predefined type, count) in the
// order the type lists them, a lower bound and an extent. A message carries a type's
// blocks packed one after another (every rank runs on one architecture, so a
// predefined element's bytes travel as they are, a pair type's padding included);
// a type whose one block starts at 0 and fills its extent (a predefined or a
// contiguous one) is "dense": its buffer is its message, and goes without packing.
// MPI_Type_size's data size leaves out a pair type's padding, as the standard says.
#include "engine.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>

namespace msgpass::mpi {

namespace {

struct Derived {
    TypeMapPtr map;
    bool committed = false;
    bool freed = false;
};

// Derived types' handles count up from here (mpi.h's handles are integers). Freed
// types stay known, so a use after MPI_Type_free says so. Callers hold the big lock
// under MPI_THREAD_MULTIPLE (api.hpp's guarded).
constexpr MPI_Datatype first_derived = 0x4d000001;
std::map<MPI_Datatype, Derived> derived_types;
MPI_Datatype next_derived = first_derived;
std::map<MPI_Datatype, TypeMapPtr> predefined_maps;
// A type of more blocks than this is refused (its typemap is kept flat, one entry
// per block, and packed block by block).
constexpr std::size_t max_blocks = std::size_t{1} << 22;

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

std::size_t alignment_of(MPI_Datatype base) {
    switch (base) {
    case MPI_2INT:
    case MPI_FLOAT_INT:
    case MPI_SHORT_INT:
        return alignof(int);
    case MPI_DOUBLE_INT:
        return alignof(double);
    case MPI_LONG_INT:
        return alignof(long);
    case MPI_LONG_DOUBLE_INT:
    case MPI_LONG_DOUBLE:
        return alignof(long double);
    case MPI_C_FLOAT_COMPLEX: // a complex number is aligned as its parts
        return alignof(float);
    case MPI_C_DOUBLE_COMPLEX:
        return alignof(double);
    case MPI_C_LONG_DOUBLE_COMPLEX:
        return alignof(long double);
    default:
        return element_bytes(base);
    }
}

// The map of any type: committed (communication) or not (a constructor's old type).
TypeMapPtr map_of(MPI_Datatype type, bool commit) {
    if (const Derived* d = find_derived(type, commit)) return d->map;
    auto& cached = predefined_maps[type];
    if (!cached) {
        const std::size_t eb = element_bytes(type); // MPI_ERR_TYPE when it is no type
        auto m = std::make_shared<TypeMap>();
        m->blocks.push_back(TypeBlock{0, type, 1});
        m->ub = m->true_ub = static_cast<std::ptrdiff_t>(eb);
        m->packed = eb;
        m->data = data_bytes(type);
        m->align = alignment_of(type);
        cached = std::move(m);
    }
    return cached;
}

// Builds a type from copies of old types: copy i is count[i] elements of types[i]
// starting at displacement disps[i] bytes (each element one extent after the last).
class Builder {
public:
    void add(std::ptrdiff_t disp, std::size_t count, const TypeMap& old) {
        if (count == 0) return;
        const std::ptrdiff_t extent = old.extent();
        for (std::size_t k = 0; k < count; ++k) {
            const std::ptrdiff_t at = disp + static_cast<std::ptrdiff_t>(k) * extent;
            for (const TypeBlock& b : old.blocks)
                append(TypeBlock{at + b.disp, b.base, b.count});
            if (old.blocks.empty()) touch(at + old.true_lb, at + old.true_ub);
        }
        const std::ptrdiff_t first = disp;
        const std::ptrdiff_t last = disp + static_cast<std::ptrdiff_t>(count - 1) * extent;
        bound(std::min(first, last) + old.lb, std::max(first, last) + old.ub);
        m_.packed += count * old.packed;
        m_.data += count * old.data;
        m_.align = std::max(m_.align, old.align);
        m_.explicit_bounds = m_.explicit_bounds || old.explicit_bounds;
        if (m_.packed > static_cast<std::size_t>(INT_MAX))
            throw MpiError(MPI_ERR_COUNT, "the type would be larger than INT_MAX bytes");
    }
    // A struct's extent is rounded up to its strictest alignment, so that an array of
    // the C struct it describes is an array of the type (as other MPIs do).
    void pad_to_alignment() {
        if (m_.explicit_bounds || !any_) return;
        const auto a = static_cast<std::ptrdiff_t>(m_.align);
        const std::ptrdiff_t extent = m_.ub - m_.lb;
        if (a > 1 && extent % a != 0) m_.ub += a - extent % a;
    }
    TypeMapPtr finish() {
        if (!any_) m_.lb = m_.ub = 0;
        if (!touched_) m_.true_lb = m_.true_ub = 0;
        m_.dense = m_.lb == 0 && static_cast<std::size_t>(m_.extent()) == m_.packed &&
                   (m_.blocks.empty() || (m_.blocks.size() == 1 && m_.blocks[0].disp == 0));
        return std::make_shared<TypeMap>(std::move(m_));
    }

private:
    void append(const TypeBlock& b) {
        const std::size_t eb = element_bytes(b.base);
        touch(b.disp, b.disp + static_cast<std::ptrdiff_t>(b.count * eb));
        if (!m_.blocks.empty()) {
            TypeBlock& last = m_.blocks.back();
            if (last.base == b.base && last.disp + static_cast<std::ptrdiff_t>(last.count * eb) == b.disp) {
                last.count += b.count;
                return;
            }
        }
        if (m_.blocks.size() == max_blocks)
            throw MpiError(MPI_ERR_OTHER,
                           "the type has more than " + std::to_string(max_blocks) + " separate blocks (not provided)");
        m_.blocks.push_back(b);
    }
    void touch(std::ptrdiff_t lo, std::ptrdiff_t hi) {
        m_.true_lb = touched_ ? std::min(m_.true_lb, lo) : lo;
        m_.true_ub = touched_ ? std::max(m_.true_ub, hi) : hi;
        touched_ = true;
    }
    void bound(std::ptrdiff_t lo, std::ptrdiff_t hi) {
        m_.lb = any_ ? std::min(m_.lb, lo) : lo;
        m_.ub = any_ ? std::max(m_.ub, hi) : hi;
        any_ = true;
    }

    TypeMap m_;
    bool any_ = false;
    bool touched_ = false;
};

MPI_Datatype add_type(TypeMapPtr map, bool committed = false) {
    if (next_derived == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no datatype handle left");
    derived_types.emplace(next_derived, Derived{std::move(map), committed});
    return next_derived++;
}

void check_count(const char* what, int count) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, std::string("negative ") + what + " " + std::to_string(count));
}

} // namespace

TypeMapPtr typemap_of(MPI_Datatype type) {
    return map_of(type, true);
}

bool is_dense(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, true)) return d->map->dense;
    (void)element_bytes(type); // MPI_ERR_TYPE when it is no type
    return true;
}

std::pair<MPI_Datatype, std::size_t> predefined_of(MPI_Datatype type) {
    const TypeMapPtr m = map_of(type, true);
    if (m->blocks.empty()) return {MPI_BYTE, 0};
    const MPI_Datatype base = m->blocks.front().base;
    for (const TypeBlock& b : m->blocks)
        if (b.base != base)
            throw MpiError(MPI_ERR_TYPE, "datatype " + std::to_string(type) +
                                             " mixes predefined types: a reduction needs a type made of one");
    return {base, m->packed / element_bytes(base)};
}

MPI_Datatype type_create(const std::vector<std::ptrdiff_t>& disps, const std::vector<int>& counts,
                         const std::vector<MPI_Datatype>& types, bool is_struct) {
    Builder b;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        check_count(is_struct || counts.size() > 1 ? "block length" : "count", counts[i]);
        const TypeMapPtr old = map_of(types[i], false);
        b.add(disps[i], static_cast<std::size_t>(counts[i]), *old);
    }
    if (is_struct) b.pad_to_alignment();
    return add_type(b.finish());
}

MPI_Datatype type_contiguous(int count, MPI_Datatype old) {
    check_count("count", count);
    return type_create({0}, {count}, {old}, false);
}

MPI_Datatype type_resized(MPI_Datatype old, std::ptrdiff_t lb, std::ptrdiff_t extent) {
    TypeMap m = *map_of(old, false);
    m.lb = lb;
    m.ub = lb + extent;
    m.explicit_bounds = true;
    m.dense = m.lb == 0 && extent >= 0 && static_cast<std::size_t>(extent) == m.packed &&
              (m.blocks.empty() || (m.blocks.size() == 1 && m.blocks[0].disp == 0));
    return add_type(std::make_shared<TypeMap>(std::move(m)));
}

MPI_Datatype type_dup(MPI_Datatype old) {
    const Derived* d = find_derived(old, false);
    return add_type(map_of(old, false), d == nullptr || d->committed); // a predefined type's copy is committed
}

const TypeMap& type_info(MPI_Datatype type) {
    return *map_of(type, false);
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
    return static_cast<std::size_t>(map_of(type, false)->extent());
}

namespace {

// The address offset bytes after base, as an integer sum: base may be MPI_BOTTOM (a null
// pointer) with a type of absolute addresses, and arithmetic on a null pointer is
// undefined.
const std::byte* address(const void* base, std::ptrdiff_t offset) {
    return reinterpret_cast<const std::byte*>(reinterpret_cast<std::uintptr_t>(base) +
                                              static_cast<std::uintptr_t>(offset));
}

std::byte* address(void* base, std::ptrdiff_t offset) {
    return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(base) + static_cast<std::uintptr_t>(offset));
}

} // namespace

bool absolute_addresses(const TypeMap& m) {
    return !m.dense && m.true_lb >= lowest_absolute_address;
}

void pack(const TypeMap& m, const void* buf, std::size_t count, std::byte* out) {
    const std::ptrdiff_t extent = m.extent();
    for (std::size_t e = 0; e < count; ++e) {
        const std::ptrdiff_t element = static_cast<std::ptrdiff_t>(e) * extent;
        for (const TypeBlock& b : m.blocks) {
            const std::size_t n = b.count * element_bytes(b.base);
            std::memcpy(out, address(buf, element + b.disp), n);
            out += n;
        }
    }
}

void unpack(const TypeMap& m, const std::byte* in, std::size_t bytes, void* buf) {
    const std::ptrdiff_t extent = m.extent();
    for (std::size_t e = 0; bytes > 0 && m.packed > 0; ++e) {
        const std::ptrdiff_t element = static_cast<std::ptrdiff_t>(e) * extent;
        for (const TypeBlock& b : m.blocks) {
            const std::size_t n = std::min(bytes, b.count * element_bytes(b.base));
            std::memcpy(address(buf, element + b.disp), in, n);
            in += n;
            bytes -= n;
            if (bytes == 0) return;
        }
    }
}

std::size_t basic_elements(const TypeMap& m, std::size_t bytes) {
    // A pair type is two basic elements (its value and its index).
    auto basics = [](MPI_Datatype base, std::size_t count) { return is_pair_type(base) ? 2 * count : count; };
    std::size_t per_element = 0;
    for (const TypeBlock& b : m.blocks)
        per_element += basics(b.base, b.count);
    if (m.packed == 0) return bytes == 0 ? 0 : std::numeric_limits<std::size_t>::max();
    std::size_t n = bytes / m.packed * per_element;
    std::size_t rest = bytes % m.packed;
    for (const TypeBlock& b : m.blocks) {
        if (rest == 0) break;
        const std::size_t eb = element_bytes(b.base);
        const std::size_t whole = std::min(b.count, rest / eb);
        n += basics(b.base, whole);
        rest -= whole * eb;
        if (whole < b.count) break;
    }
    return rest == 0 ? n : std::numeric_limits<std::size_t>::max();
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

bool is_derived(MPI_Datatype type) {
    return type >= first_derived && type < next_derived;
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
    case MPI_PACKED:
        return "MPI_PACKED";
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
    case MPI_LONG_DOUBLE:
        return "MPI_LONG_DOUBLE";
    case MPI_INT8_T:
        return "MPI_INT8_T";
    case MPI_INT16_T:
        return "MPI_INT16_T";
    case MPI_INT32_T:
        return "MPI_INT32_T";
    case MPI_INT64_T:
        return "MPI_INT64_T";
    case MPI_UINT8_T:
        return "MPI_UINT8_T";
    case MPI_UINT16_T:
        return "MPI_UINT16_T";
    case MPI_UINT32_T:
        return "MPI_UINT32_T";
    case MPI_UINT64_T:
        return "MPI_UINT64_T";
    case MPI_C_BOOL:
        return "MPI_C_BOOL";
    case MPI_WCHAR:
        return "MPI_WCHAR";
    case MPI_AINT:
        return "MPI_AINT";
    case MPI_OFFSET:
        return "MPI_OFFSET";
    case MPI_COUNT:
        return "MPI_COUNT";
    case MPI_C_FLOAT_COMPLEX:
        return "MPI_C_FLOAT_COMPLEX";
    case MPI_C_DOUBLE_COMPLEX:
        return "MPI_C_DOUBLE_COMPLEX";
    case MPI_C_LONG_DOUBLE_COMPLEX:
        return "MPI_C_LONG_DOUBLE_COMPLEX";
    default:
        return "datatype " + std::to_string(type);
    }
}

std::size_t element_bytes_lookup(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, true)) return d->map->packed;
    switch (type) {
    case MPI_CHAR:
    case MPI_SIGNED_CHAR:
    case MPI_UNSIGNED_CHAR:
    case MPI_BYTE:
    case MPI_PACKED:
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
    case MPI_LONG_DOUBLE:
    case MPI_INT8_T:
    case MPI_INT16_T:
    case MPI_INT32_T:
    case MPI_INT64_T:
    case MPI_UINT8_T:
    case MPI_UINT16_T:
    case MPI_UINT32_T:
    case MPI_UINT64_T:
    case MPI_C_BOOL:
    case MPI_WCHAR:
    case MPI_AINT:
    case MPI_OFFSET:
    case MPI_COUNT:
    case MPI_C_FLOAT_COMPLEX:
    case MPI_C_DOUBLE_COMPLEX:
    case MPI_C_LONG_DOUBLE_COMPLEX:
        return static_cast<std::size_t>(type & 0xff); // (collectives.cpp checks the pairs' and others' sizes)
    default:
        throw MpiError(MPI_ERR_TYPE,
                       "invalid datatype " + std::to_string(type) + " (only the datatypes of mpi.h are provided)");
    }
}

std::size_t data_bytes(MPI_Datatype type) {
    if (const Derived* d = find_derived(type, false)) return d->map->data;
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
