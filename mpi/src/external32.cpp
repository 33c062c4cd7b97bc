// MPI_Pack_external, MPI_Unpack_external and MPI_Pack_external_size: a buffer of any
// datatype to and from "external32", the representation the standard fixes for
// exchanging data with other MPIs and machines (MPI 3.1, 13.5.2): every predefined
// element big-endian at a fixed size, with no padding (a pair type is its value then
// its int). The sizes are the standard's table: MPI_LONG and MPI_UNSIGNED_LONG take
// 4 bytes (a value that does not fit is an error, not a silent truncation), long
// double is IEEE binary128 (x86's 80-bit format converted both ways), MPI_AINT,
// MPI_OFFSET and MPI_COUNT 8.
#include <cfloat>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

enum class Kind { plain, narrow_signed, narrow_unsigned, long_double };

// One part of a predefined element: where it is in memory, its size there and in
// external32, and how it converts.
struct Part {
    std::size_t offset, native, external;
    Kind kind;
};

struct Layout {
    Part parts[2];
    int n;
};

Part plain(std::size_t offset, std::size_t size) {
    return Part{offset, size, size, Kind::plain};
}

Part long_double_at(std::size_t offset) {
    return Part{offset, sizeof(long double), 16, Kind::long_double};
}

Part long_at(std::size_t offset, bool is_signed) {
    return Part{offset, sizeof(long), 4, is_signed ? Kind::narrow_signed : Kind::narrow_unsigned};
}

template <class Value>
constexpr std::size_t int_after() {
    struct Pair {
        Value value;
        int index;
    };
    return offsetof(Pair, index);
}

Layout layout_of(MPI_Datatype base) {
    switch (base) {
    case MPI_LONG:
        return {{long_at(0, true), {}}, 1};
    case MPI_UNSIGNED_LONG:
        return {{long_at(0, false), {}}, 1};
    case MPI_LONG_DOUBLE:
        return {{long_double_at(0), {}}, 1};
    case MPI_C_FLOAT_COMPLEX:
        return {{plain(0, 4), plain(4, 4)}, 2};
    case MPI_C_DOUBLE_COMPLEX:
        return {{plain(0, 8), plain(8, 8)}, 2};
    case MPI_C_LONG_DOUBLE_COMPLEX:
        return {{long_double_at(0), long_double_at(sizeof(long double))}, 2};
    case MPI_2INT:
        return {{plain(0, sizeof(int)), plain(int_after<int>(), sizeof(int))}, 2};
    case MPI_FLOAT_INT:
        return {{plain(0, sizeof(float)), plain(int_after<float>(), sizeof(int))}, 2};
    case MPI_DOUBLE_INT:
        return {{plain(0, sizeof(double)), plain(int_after<double>(), sizeof(int))}, 2};
    case MPI_LONG_INT:
        return {{long_at(0, true), plain(int_after<long>(), sizeof(int))}, 2};
    case MPI_SHORT_INT:
        return {{plain(0, sizeof(short)), plain(int_after<short>(), sizeof(int))}, 2};
    case MPI_LONG_DOUBLE_INT:
        return {{long_double_at(0), plain(int_after<long double>(), sizeof(int))}, 2};
    default:
        return {{plain(0, msgpass::mpi::element_bytes(base)), {}}, 1};
    }
}

std::size_t external_bytes(MPI_Datatype base) {
    const Layout l = layout_of(base);
    std::size_t n = 0;
    for (int i = 0; i < l.n; ++i)
        n += l.parts[i].external;
    return n;
}

// The bytes of `count` elements of the type in external32.
std::size_t external_size(const msgpass::mpi::TypeMap& m, std::size_t count) {
    std::size_t one = 0;
    for (const auto& b : m.blocks)
        one += b.count * external_bytes(b.base);
    return one * count;
}

void big_endian(const std::byte* from, std::byte* to, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        to[i] = from[n - 1 - i]; // (a little-endian host: the only kind msgpass builds for, see below)
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "external32 conversion written for little-endian hosts");

// x86's 80-bit long double (sign and 15-bit exponent, a 64-bit significand with its
// integer bit) to binary128 (the same sign and exponent, 112 fraction bits), both as
// little-endian integers, and back.
static_assert(LDBL_MANT_DIG == 64, "long double is x86's 80-bit format here");
void long_double_to_binary128(const std::byte* from, std::byte* to) {
    std::uint64_t significand = 0;
    std::uint16_t sign_exponent = 0;
    std::memcpy(&significand, from, 8);
    std::memcpy(&sign_exponent, from + 8, 2);
    const std::uint64_t fraction = significand & ~(std::uint64_t{1} << 63); // 63 bits: the top of binary128's 112
    const std::uint64_t words[2] = {fraction << 49, (std::uint64_t{sign_exponent} << 48) | (fraction >> 15)};
    std::byte little[16];
    std::memcpy(little, words, 16);
    big_endian(little, to, 16);
}

void binary128_to_long_double(const std::byte* from, std::byte* to) {
    std::byte little[16];
    big_endian(from, little, 16);
    std::uint64_t words[2] = {0, 0};
    std::memcpy(words, little, 16);
    const auto sign_exponent = static_cast<std::uint16_t>(words[1] >> 48);
    const std::uint64_t fraction = ((words[1] & ((std::uint64_t{1} << 48) - 1)) << 15) | (words[0] >> 49);
    const bool normal = (sign_exponent & 0x7fff) != 0; // (infinities and NaNs keep the integer bit as well)
    const std::uint64_t significand = fraction | (normal ? std::uint64_t{1} << 63 : 0);
    std::memset(to, 0, sizeof(long double));
    std::memcpy(to, &significand, 8);
    std::memcpy(to + 8, &sign_exponent, 2);
}

void put(const Part& p, const std::byte* in, std::byte* out) {
    switch (p.kind) {
    case Kind::plain:
        big_endian(in, out, p.native);
        return;
    case Kind::long_double:
        long_double_to_binary128(in, out);
        return;
    case Kind::narrow_signed: {
        long v = 0;
        std::memcpy(&v, in, sizeof v);
        if (v < INT32_MIN || v > INT32_MAX)
            throw MpiError(MPI_ERR_ARG, "MPI_LONG value " + std::to_string(v) + " does not fit external32's 4 bytes");
        const auto narrow = static_cast<std::int32_t>(v);
        big_endian(reinterpret_cast<const std::byte*>(&narrow), out, 4);
        return;
    }
    case Kind::narrow_unsigned: {
        unsigned long v = 0;
        std::memcpy(&v, in, sizeof v);
        if (v > UINT32_MAX)
            throw MpiError(MPI_ERR_ARG,
                           "MPI_UNSIGNED_LONG value " + std::to_string(v) + " does not fit external32's 4 bytes");
        const auto narrow = static_cast<std::uint32_t>(v);
        big_endian(reinterpret_cast<const std::byte*>(&narrow), out, 4);
        return;
    }
    }
}

void get(const Part& p, const std::byte* in, std::byte* out) {
    switch (p.kind) {
    case Kind::plain:
        big_endian(in, out, p.native);
        return;
    case Kind::long_double:
        binary128_to_long_double(in, out);
        return;
    case Kind::narrow_signed: {
        std::int32_t narrow = 0;
        big_endian(in, reinterpret_cast<std::byte*>(&narrow), 4);
        const long v = narrow;
        std::memcpy(out, &v, sizeof v);
        return;
    }
    case Kind::narrow_unsigned: {
        std::uint32_t narrow = 0;
        big_endian(in, reinterpret_cast<std::byte*>(&narrow), 4);
        const unsigned long v = narrow;
        std::memcpy(out, &v, sizeof v);
        return;
    }
    }
}

// Walks count elements of the type in memory at buf and in external32 at ext,
// converting each part one way (pack) or the other.
template <bool Pack>
void convert(const msgpass::mpi::TypeMap& m, std::byte* buf, std::size_t count, std::byte* ext) {
    // (integer arithmetic: buf is MPI_BOTTOM, a null pointer, for a type of absolute addresses)
    const auto base = reinterpret_cast<std::uintptr_t>(buf);
    const std::ptrdiff_t extent = m.extent();
    for (std::size_t e = 0; e < count; ++e) {
        const std::ptrdiff_t element = static_cast<std::ptrdiff_t>(e) * extent;
        for (const auto& b : m.blocks) {
            const Layout l = layout_of(b.base);
            const std::size_t stride = msgpass::mpi::element_bytes(b.base);
            for (std::size_t k = 0; k < b.count; ++k) {
                auto* at = reinterpret_cast<std::byte*>(
                    base + static_cast<std::uintptr_t>(element + b.disp + static_cast<std::ptrdiff_t>(k * stride)));
                for (int i = 0; i < l.n; ++i) {
                    const Part& p = l.parts[i];
                    if constexpr (Pack)
                        put(p, at + p.offset, ext);
                    else
                        get(p, ext, at + p.offset);
                    ext += p.external;
                }
            }
        }
    }
}

void check_datarep(const char* datarep) {
    if (datarep == nullptr || std::strcmp(datarep, "external32") != 0)
        throw MpiError(MPI_ERR_ARG, std::string("data representation '") + (datarep ? datarep : "(null)") +
                                        "' (only \"external32\" is defined for MPI_Pack_external)");
}

void check_position(MPI_Aint position, MPI_Aint size, const char* size_name) {
    if (position < 0 || size < 0 || position > size)
        throw MpiError(MPI_ERR_ARG, "position " + std::to_string(position) + " is not within " + size_name + " " +
                                        std::to_string(size));
}

} // namespace

extern "C" {

int MPI_Pack_external_size(const char datarep[], int incount, MPI_Datatype datatype, MPI_Aint* size) {
    return guarded("MPI_Pack_external_size", MPI_COMM_WORLD, [&] {
        check_datarep(datarep);
        if (incount < 0) throw MpiError(MPI_ERR_COUNT, "incount " + std::to_string(incount) + " is negative");
        if (size == nullptr) throw MpiError(MPI_ERR_ARG, "size is NULL");
        *size = static_cast<MPI_Aint>(
            external_size(*msgpass::mpi::typemap_of(datatype), static_cast<std::size_t>(incount)));
        return MPI_SUCCESS;
    });
}

int MPI_Pack_external(const char datarep[], const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf,
                      MPI_Aint outsize, MPI_Aint* position) {
    return guarded("MPI_Pack_external", MPI_COMM_WORLD, [&] {
        check_datarep(datarep);
        if (incount < 0) throw MpiError(MPI_ERR_COUNT, "incount " + std::to_string(incount) + " is negative");
        if (position == nullptr) throw MpiError(MPI_ERR_ARG, "position is NULL");
        check_position(*position, outsize, "outsize");
        const auto m = msgpass::mpi::typemap_of(datatype);
        const std::size_t bytes = external_size(*m, static_cast<std::size_t>(incount));
        if (bytes > static_cast<std::size_t>(outsize - *position))
            throw MpiError(MPI_ERR_TRUNCATE, "packing " + std::to_string(bytes) + " bytes at position " +
                                                 std::to_string(*position) + " goes beyond outsize " +
                                                 std::to_string(outsize));
        if (bytes == 0) return MPI_SUCCESS;
        if (outbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "outbuf is NULL");
        convert<true>(*m, static_cast<std::byte*>(const_cast<void*>(inbuf)), static_cast<std::size_t>(incount),
                      static_cast<std::byte*>(outbuf) + *position);
        *position += static_cast<MPI_Aint>(bytes);
        return MPI_SUCCESS;
    });
}

int MPI_Unpack_external(const char datarep[], const void* inbuf, MPI_Aint insize, MPI_Aint* position, void* outbuf,
                        int outcount, MPI_Datatype datatype) {
    return guarded("MPI_Unpack_external", MPI_COMM_WORLD, [&] {
        check_datarep(datarep);
        if (outcount < 0) throw MpiError(MPI_ERR_COUNT, "outcount " + std::to_string(outcount) + " is negative");
        if (position == nullptr) throw MpiError(MPI_ERR_ARG, "position is NULL");
        check_position(*position, insize, "insize");
        const auto m = msgpass::mpi::typemap_of(datatype);
        const std::size_t bytes = external_size(*m, static_cast<std::size_t>(outcount));
        if (bytes > static_cast<std::size_t>(insize - *position))
            throw MpiError(MPI_ERR_TRUNCATE, "unpacking " + std::to_string(bytes) + " bytes at position " +
                                                 std::to_string(*position) + " goes beyond insize " +
                                                 std::to_string(insize));
        if (bytes == 0) return MPI_SUCCESS;
        if (inbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "inbuf is NULL");
        convert<false>(*m, static_cast<std::byte*>(outbuf), static_cast<std::size_t>(outcount),
                       static_cast<std::byte*>(const_cast<void*>(inbuf)) + *position);
        *position += static_cast<MPI_Aint>(bytes);
        return MPI_SUCCESS;
    });
}

} // extern "C"
