// The C entry points of msgpass's MPI (mpi.h) that make and query derived datatypes
// beyond contiguous ones (vector, indexed, struct, resized, dup, true extent,
// Get_elements) and pack and unpack buffers (MPI_Pack, MPI_Unpack, MPI_Pack_size).
// Each constructor turns its arguments into copies of old types at byte
// displacements (types.cpp's type_create). Every entry point goes through api::guarded.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

using Disps = std::vector<std::ptrdiff_t>;
using Counts = std::vector<int>;
using Types = std::vector<MPI_Datatype>;

// The names MPI_Type_set_name gave (the big lock keeps them under MPI_THREAD_MULTIPLE).
std::map<MPI_Datatype, std::string>& type_names() {
    static std::map<MPI_Datatype, std::string> names;
    return names;
}

// How each derived type was made (MPI_Type_get_envelope/_contents): the combiner and
// the constructor's integers, addresses and types. A derived old type is kept as a
// hidden duplicate, so that MPI_Type_get_contents can hand out a new handle of it
// even after the application freed its own.
struct Envelope {
    int combiner = MPI_COMBINER_NAMED;
    std::vector<int> ints;
    std::vector<MPI_Aint> aints;
    std::vector<MPI_Datatype> types;
};

std::map<MPI_Datatype, Envelope>& envelopes() {
    static std::map<MPI_Datatype, Envelope> all;
    return all;
}

void record(MPI_Datatype made, int combiner, std::vector<int> ints, std::vector<MPI_Aint> aints,
            std::vector<MPI_Datatype> types) {
    for (MPI_Datatype& t : types) {
        if (!msgpass::mpi::is_derived(t)) continue;
        const MPI_Datatype hidden = msgpass::mpi::type_dup(t);
        if (const auto it = envelopes().find(t); it != envelopes().end()) {
            Envelope same = it->second; // the hidden copy answers as the original
            envelopes()[hidden] = std::move(same);
        }
        t = hidden;
    }
    envelopes()[made] = Envelope{combiner, std::move(ints), std::move(aints), std::move(types)};
}

template <class T>
std::vector<T> joined(std::initializer_list<T> head, const T* array, int count, std::initializer_list<T> tail = {}) {
    std::vector<T> out(head);
    if (array != nullptr) out.insert(out.end(), array, array + count);
    out.insert(out.end(), tail);
    return out;
}

void check_out(const MPI_Datatype* newtype) {
    if (newtype == nullptr) throw MpiError(MPI_ERR_ARG, "newtype is NULL");
}

void check_count(int count) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
}

template <class T>
void check_array(const T* array, int count, const char* what) {
    if (count > 0 && array == nullptr) throw MpiError(MPI_ERR_ARG, std::string(what) + " is NULL");
}

// count blocks of blocklength old elements, block i at i * stride bytes.
MPI_Datatype vector_of(int count, int blocklength, std::ptrdiff_t stride, MPI_Datatype old) {
    check_count(count);
    if (blocklength < 0) throw MpiError(MPI_ERR_COUNT, "negative block length " + std::to_string(blocklength));
    Disps disps(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < disps.size(); ++i)
        disps[i] = static_cast<std::ptrdiff_t>(i) * stride;
    return msgpass::mpi::type_create(disps, Counts(disps.size(), blocklength), Types(disps.size(), old), false);
}

// MPI_Type_create_darray's distribution of one dimension (MPI 3.1, 4.1.4): dimension
// dim of gsizes, over nprocs processes of which this is number rank, laid over the
// type built for the faster dimensions (inner, whose extent is one step along dim;
// oldtype for the first). stride is the bytes of one step along dim. Returns the new type and sets start, this process's
// first index along dim (0 where the type places it already).
struct DarrayStep {
    MPI_Datatype type;
    std::ptrdiff_t start;
};

DarrayStep darray_block(int global, int nprocs, int rank, int darg, std::ptrdiff_t stride, bool first,
                        MPI_Datatype inner) {
    int block = (global + nprocs - 1) / nprocs;
    if (darg != MPI_DISTRIBUTE_DFLT_DARG) {
        if (darg <= 0 || static_cast<long long>(darg) * nprocs < global)
            throw MpiError(MPI_ERR_ARG, "block size " + std::to_string(darg) + " over " + std::to_string(nprocs) +
                                            " processes does not cover the dimension's " + std::to_string(global) +
                                            " elements");
        block = darg;
    }
    const int mine = std::max(0, std::min(block, global - block * rank));
    const MPI_Datatype t = first ? msgpass::mpi::type_contiguous(mine, inner) : vector_of(mine, 1, stride, inner);
    return {t, mine == 0 ? 0 : static_cast<std::ptrdiff_t>(block) * rank};
}

DarrayStep darray_cyclic(int global, int nprocs, int rank, int darg, std::ptrdiff_t stride, std::ptrdiff_t extent,
                         bool first, MPI_Datatype inner) {
    const int block = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
    if (block <= 0) throw MpiError(MPI_ERR_ARG, "cyclic block size " + std::to_string(darg) + " is not positive");
    const long long first_index = static_cast<long long>(rank) * block;
    long long mine = 0;
    if (first_index < global) {
        const long long span = global - first_index;
        const long long round = static_cast<long long>(nprocs) * block;
        mine = span / round * block + std::min<long long>(span % round, block);
    }
    const int count = static_cast<int>(mine / block);
    const int rest = static_cast<int>(mine % block);
    const std::ptrdiff_t step = stride * nprocs * block;
    MPI_Datatype t = vector_of(count, block, step, inner);
    if (rest > 0) {
        const MPI_Datatype both =
            msgpass::mpi::type_create({0, static_cast<std::ptrdiff_t>(count) * step}, {1, rest}, {t, inner}, false);
        msgpass::mpi::type_free(t);
        t = both;
    }
    if (first) { // placed here already: this process's first block, in an extent of the whole dimension
        const MPI_Datatype placed =
            msgpass::mpi::type_create({static_cast<std::ptrdiff_t>(first_index) * extent}, {1}, {t}, false);
        msgpass::mpi::type_free(t);
        t = msgpass::mpi::type_resized(placed, 0, extent * global);
        msgpass::mpi::type_free(placed);
        return {t, 0};
    }
    return {t, mine == 0 ? 0 : static_cast<std::ptrdiff_t>(first_index)};
}

// Block i of counts[i] old elements at disps[i] * unit bytes.
template <class D>
MPI_Datatype indexed_of(int count, const int* counts, int same_count, const D* disps, std::ptrdiff_t unit,
                        MPI_Datatype old) {
    check_count(count);
    check_array(disps, count, "array_of_displacements");
    if (counts != nullptr || same_count < 0) check_array(counts, count, "array_of_blocklengths");
    Disps d(static_cast<std::size_t>(count));
    Counts n(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < d.size(); ++i) {
        d[i] = static_cast<std::ptrdiff_t>(disps[i]) * unit;
        n[i] = counts != nullptr ? counts[i] : same_count;
    }
    return msgpass::mpi::type_create(d, n, Types(d.size(), old), false);
}

} // namespace

namespace msgpass::mpi::api {

void record_contiguous(MPI_Datatype made, int count, MPI_Datatype old) {
    record(made, MPI_COMBINER_CONTIGUOUS, {count}, {}, {old});
}

} // namespace msgpass::mpi::api

extern "C" {

int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_vector", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        const auto extent = static_cast<std::ptrdiff_t>(msgpass::mpi::type_info(oldtype).extent());
        *newtype = vector_of(count, blocklength, stride * extent, oldtype);
        record(*newtype, MPI_COMBINER_VECTOR, {count, blocklength, stride}, {}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_hvector", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        *newtype = vector_of(count, blocklength, stride, oldtype);
        record(*newtype, MPI_COMBINER_HVECTOR, {count, blocklength}, {stride}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_hvector", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        *newtype = vector_of(count, blocklength, stride, oldtype);
        record(*newtype, MPI_COMBINER_HVECTOR, {count, blocklength}, {stride}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_indexed(int count, const int array_of_blocklengths[], const int array_of_displacements[],
                     MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_indexed", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        const auto extent = static_cast<std::ptrdiff_t>(msgpass::mpi::type_info(oldtype).extent());
        *newtype = indexed_of(count, array_of_blocklengths, -1, array_of_displacements, extent, oldtype);
        std::vector<int> ints = joined<int>({count}, array_of_blocklengths, count);
        ints.insert(ints.end(), array_of_displacements, array_of_displacements + count);
        record(*newtype, MPI_COMBINER_INDEXED, std::move(ints), {}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_hindexed(int count, const int array_of_blocklengths[], const MPI_Aint array_of_displacements[],
                             MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_hindexed", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        *newtype = indexed_of(count, array_of_blocklengths, -1, array_of_displacements, 1, oldtype);
        record(*newtype, MPI_COMBINER_HINDEXED, joined<int>({count}, array_of_blocklengths, count),
               joined<MPI_Aint>({}, array_of_displacements, count), {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_indexed_block(int count, int blocklength, const int array_of_displacements[], MPI_Datatype oldtype,
                                  MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_indexed_block", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        if (blocklength < 0) throw MpiError(MPI_ERR_COUNT, "negative block length " + std::to_string(blocklength));
        const auto extent = static_cast<std::ptrdiff_t>(msgpass::mpi::type_info(oldtype).extent());
        *newtype = indexed_of<int>(count, nullptr, blocklength, array_of_displacements, extent, oldtype);
        record(*newtype, MPI_COMBINER_INDEXED_BLOCK, joined<int>({count, blocklength}, array_of_displacements, count),
               {}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_hindexed_block(int count, int blocklength, const MPI_Aint array_of_displacements[],
                                   MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_hindexed_block", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        if (blocklength < 0) throw MpiError(MPI_ERR_COUNT, "negative block length " + std::to_string(blocklength));
        *newtype = indexed_of<MPI_Aint>(count, nullptr, blocklength, array_of_displacements, 1, oldtype);
        record(*newtype, MPI_COMBINER_HINDEXED_BLOCK, {count, blocklength},
               joined<MPI_Aint>({}, array_of_displacements, count), {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_struct(int count, const int array_of_blocklengths[], const MPI_Aint array_of_displacements[],
                           const MPI_Datatype array_of_types[], MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_struct", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        check_count(count);
        check_array(array_of_blocklengths, count, "array_of_blocklengths");
        check_array(array_of_displacements, count, "array_of_displacements");
        check_array(array_of_types, count, "array_of_types");
        const auto n = static_cast<std::size_t>(count);
        *newtype = msgpass::mpi::type_create(Disps(array_of_displacements, array_of_displacements + n),
                                             Counts(array_of_blocklengths, array_of_blocklengths + n),
                                             Types(array_of_types, array_of_types + n), true);
        record(*newtype, MPI_COMBINER_STRUCT, joined<int>({count}, array_of_blocklengths, count),
               joined<MPI_Aint>({}, array_of_displacements, count), Types(array_of_types, array_of_types + n));
        return MPI_SUCCESS;
    });
}

int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_resized", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        *newtype = msgpass::mpi::type_resized(oldtype, lb, extent);
        record(*newtype, MPI_COMBINER_RESIZED, {}, {lb, extent}, {oldtype});
        return MPI_SUCCESS;
    });
}

// A block of an n-dimensional array (MPI 3.1, 4.1.3): the dimension that varies
// fastest (the last in C order, the first in Fortran order) is a contiguous run of
// subsizes elements; each slower one repeats the faster ones at the stride of a whole
// row of the array; the block is placed at its starts and the type resized to the
// whole array, so that count > 1 steps from array to array.
int MPI_Type_create_subarray(int ndims, const int sizes[], const int subsizes[], const int starts[], int order,
                             MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_subarray", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        if (ndims <= 0) throw MpiError(MPI_ERR_ARG, "ndims " + std::to_string(ndims) + " is not positive");
        check_array(sizes, ndims, "array_of_sizes");
        check_array(subsizes, ndims, "array_of_subsizes");
        check_array(starts, ndims, "array_of_starts");
        if (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN)
            throw MpiError(MPI_ERR_ARG,
                           "order " + std::to_string(order) + " is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN");
        for (int d = 0; d < ndims; ++d) {
            const std::string dim = " of dimension " + std::to_string(d);
            if (sizes[d] < 1)
                throw MpiError(MPI_ERR_ARG, "size " + std::to_string(sizes[d]) + dim + " is not positive");
            if (subsizes[d] < 1 || subsizes[d] > sizes[d])
                throw MpiError(MPI_ERR_ARG, "subsize " + std::to_string(subsizes[d]) + dim + " is not between 1 and " +
                                                "its size " + std::to_string(sizes[d]));
            if (starts[d] < 0 || starts[d] > sizes[d] - subsizes[d])
                throw MpiError(MPI_ERR_ARG, "start " + std::to_string(starts[d]) + dim + " puts the block of " +
                                                std::to_string(subsizes[d]) + " outside the size " +
                                                std::to_string(sizes[d]));
        }
        const auto extent = static_cast<std::ptrdiff_t>(msgpass::mpi::type_info(oldtype).extent());
        std::vector<int> fastest_first(static_cast<std::size_t>(ndims));
        for (int i = 0; i < ndims; ++i)
            fastest_first[static_cast<std::size_t>(i)] = order == MPI_ORDER_C ? ndims - 1 - i : i;
        std::ptrdiff_t stride = extent; // of one step along the dimension at hand
        std::ptrdiff_t disp = 0;
        MPI_Datatype block = MPI_DATATYPE_NULL;
        for (const int d : fastest_first) {
            const MPI_Datatype next = block == MPI_DATATYPE_NULL ? msgpass::mpi::type_contiguous(subsizes[d], oldtype)
                                                                 : vector_of(subsizes[d], 1, stride, block);
            if (block != MPI_DATATYPE_NULL) msgpass::mpi::type_free(block);
            block = next;
            disp += static_cast<std::ptrdiff_t>(starts[d]) * stride;
            stride *= sizes[d];
        }
        const MPI_Datatype placed = msgpass::mpi::type_create({disp}, {1}, {block}, false);
        msgpass::mpi::type_free(block);
        *newtype = msgpass::mpi::type_resized(placed, 0, stride); // stride: now the whole array's extent
        msgpass::mpi::type_free(placed);
        std::vector<int> ints = joined<int>({ndims}, sizes, ndims);
        ints.insert(ints.end(), subsizes, subsizes + ndims);
        ints.insert(ints.end(), starts, starts + ndims);
        ints.push_back(order);
        record(*newtype, MPI_COMBINER_SUBARRAY, std::move(ints), {}, {oldtype});
        return MPI_SUCCESS;
    });
}

// The block of a distributed array (HPF's BLOCK, CYCLIC(k) or none per dimension over
// a grid of processes, row-major) that process `rank` of `size` holds, in the array's
// order, with the whole array's extent (built as ROMIO does: fastest dimension first).
int MPI_Type_create_darray(int size, int rank, int ndims, const int gsizes[], const int distribs[], const int dargs[],
                           const int psizes[], int order, MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_create_darray", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        if (ndims <= 0) throw MpiError(MPI_ERR_ARG, "ndims " + std::to_string(ndims) + " is not positive");
        check_array(gsizes, ndims, "array_of_gsizes");
        check_array(distribs, ndims, "array_of_distribs");
        check_array(dargs, ndims, "array_of_dargs");
        check_array(psizes, ndims, "array_of_psizes");
        if (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN)
            throw MpiError(MPI_ERR_ARG,
                           "order " + std::to_string(order) + " is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN");
        long long processes = 1;
        for (int d = 0; d < ndims; ++d) {
            const std::string dim = " of dimension " + std::to_string(d);
            if (gsizes[d] < 1)
                throw MpiError(MPI_ERR_ARG, "global size " + std::to_string(gsizes[d]) + dim + " is not positive");
            if (psizes[d] < 1)
                throw MpiError(MPI_ERR_ARG, "process count " + std::to_string(psizes[d]) + dim + " is not positive");
            if (distribs[d] != MPI_DISTRIBUTE_BLOCK && distribs[d] != MPI_DISTRIBUTE_CYCLIC &&
                distribs[d] != MPI_DISTRIBUTE_NONE)
                throw MpiError(MPI_ERR_ARG, "distribution " + std::to_string(distribs[d]) + dim +
                                                " (MPI_DISTRIBUTE_BLOCK, _CYCLIC or _NONE)");
            if (distribs[d] == MPI_DISTRIBUTE_NONE && psizes[d] != 1)
                throw MpiError(MPI_ERR_ARG, "dimension " + std::to_string(d) + " is not distributed but has " +
                                                std::to_string(psizes[d]) + " processes");
            processes *= psizes[d];
        }
        if (processes != size)
            throw MpiError(MPI_ERR_ARG, "the process grid has " + std::to_string(processes) + " processes, size is " +
                                            std::to_string(size));
        if (rank < 0 || rank >= size)
            throw MpiError(MPI_ERR_ARG, "rank " + std::to_string(rank) + " is not below size " + std::to_string(size));
        // This process's coordinates in the grid (row-major whatever the order).
        std::vector<int> coords(static_cast<std::size_t>(ndims));
        int left = rank;
        int per = size;
        for (int d = 0; d < ndims; ++d) {
            per /= psizes[d];
            coords[static_cast<std::size_t>(d)] = left / per;
            left %= per;
        }
        const auto extent = static_cast<std::ptrdiff_t>(msgpass::mpi::type_info(oldtype).extent());
        std::ptrdiff_t stride = extent; // of one step along the dimension at hand
        std::ptrdiff_t disp = 0;        // of this process's first element, in bytes
        MPI_Datatype built = oldtype;
        for (int i = 0; i < ndims; ++i) {
            const int d = order == MPI_ORDER_C ? ndims - 1 - i : i;
            const auto du = static_cast<std::size_t>(d);
            const bool first = i == 0;
            // One step along d is one extent of the faster dimensions' type: stride bytes.
            const MPI_Datatype element = first ? built : msgpass::mpi::type_resized(built, 0, stride);
            if (!first) msgpass::mpi::type_free(built);
            DarrayStep step{};
            if (distribs[d] == MPI_DISTRIBUTE_CYCLIC)
                step = darray_cyclic(gsizes[d], psizes[d], coords[du], dargs[d], stride, extent, first, element);
            else if (distribs[d] == MPI_DISTRIBUTE_BLOCK)
                step = darray_block(gsizes[d], psizes[d], coords[du], dargs[d], stride, first, element);
            else
                step = darray_block(gsizes[d], 1, 0, MPI_DISTRIBUTE_DFLT_DARG, stride, first, element);
            if (!first) msgpass::mpi::type_free(element);
            built = step.type;
            disp += step.start * stride;
            stride *= gsizes[d];
        }
        const MPI_Datatype placed = msgpass::mpi::type_create({disp}, {1}, {built}, false);
        msgpass::mpi::type_free(built);
        *newtype = msgpass::mpi::type_resized(placed, 0, stride); // stride: now the whole array's extent
        msgpass::mpi::type_free(placed);
        std::vector<int> ints{size, rank, ndims};
        for (const int* a : {gsizes, distribs, dargs, psizes})
            ints.insert(ints.end(), a, a + ndims);
        ints.push_back(order);
        record(*newtype, MPI_COMBINER_DARRAY, std::move(ints), {}, {oldtype});
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_envelope(MPI_Datatype datatype, int* num_integers, int* num_addresses, int* num_datatypes,
                          int* combiner) {
    return guarded("MPI_Type_get_envelope", MPI_COMM_WORLD, [&] {
        if (num_integers == nullptr || num_addresses == nullptr || num_datatypes == nullptr || combiner == nullptr)
            throw MpiError(MPI_ERR_ARG, "an output argument is NULL");
        (void)msgpass::mpi::type_info(datatype);
        const auto it = envelopes().find(datatype);
        const Envelope e = it != envelopes().end() ? it->second : Envelope{};
        *num_integers = static_cast<int>(e.ints.size());
        *num_addresses = static_cast<int>(e.aints.size());
        *num_datatypes = static_cast<int>(e.types.size());
        *combiner = e.combiner;
        return MPI_SUCCESS;
    });
}

// The arguments of the constructor; a derived type among them comes back as a new
// handle (the application frees it), a predefined one as itself.
int MPI_Type_get_contents(MPI_Datatype datatype, int max_integers, int max_addresses, int max_datatypes,
                          int array_of_integers[], MPI_Aint array_of_addresses[], MPI_Datatype array_of_datatypes[]) {
    return guarded("MPI_Type_get_contents", MPI_COMM_WORLD, [&] {
        (void)msgpass::mpi::type_info(datatype);
        const auto it = envelopes().find(datatype);
        if (it == envelopes().end())
            throw MpiError(MPI_ERR_TYPE, "the predefined " + msgpass::mpi::type_name(datatype) +
                                             " has no contents (its combiner is MPI_COMBINER_NAMED)");
        const Envelope& e = it->second;
        if (max_integers < static_cast<int>(e.ints.size()) || max_addresses < static_cast<int>(e.aints.size()) ||
            max_datatypes < static_cast<int>(e.types.size()))
            throw MpiError(MPI_ERR_ARG, "the arrays hold " + std::to_string(max_integers) + ", " +
                                            std::to_string(max_addresses) + " and " + std::to_string(max_datatypes) +
                                            " entries; the contents are " + std::to_string(e.ints.size()) + ", " +
                                            std::to_string(e.aints.size()) + " and " + std::to_string(e.types.size()) +
                                            " (MPI_Type_get_envelope)");
        check_array(array_of_integers, static_cast<int>(e.ints.size()), "array_of_integers");
        check_array(array_of_addresses, static_cast<int>(e.aints.size()), "array_of_addresses");
        check_array(array_of_datatypes, static_cast<int>(e.types.size()), "array_of_datatypes");
        std::copy(e.ints.begin(), e.ints.end(), array_of_integers);
        std::copy(e.aints.begin(), e.aints.end(), array_of_addresses);
        const Envelope copy = e; // record below may rehash the map
        for (std::size_t i = 0; i < copy.types.size(); ++i) {
            MPI_Datatype t = copy.types[i];
            if (msgpass::mpi::is_derived(t)) {
                const MPI_Datatype fresh = msgpass::mpi::type_dup(t);
                const auto inner = envelopes().find(t);
                if (inner != envelopes().end()) envelopes()[fresh] = inner->second; // it looks like the original
                t = fresh;
            }
            array_of_datatypes[i] = t;
        }
        return MPI_SUCCESS;
    });
}

int MPI_Get_address(const void* location, MPI_Aint* address) {
    return guarded("MPI_Get_address", MPI_COMM_WORLD, [&] {
        if (address == nullptr) throw MpiError(MPI_ERR_ARG, "address is NULL");
        *address = static_cast<MPI_Aint>(reinterpret_cast<std::uintptr_t>(location));
        return MPI_SUCCESS;
    });
}

int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype* newtype) {
    return guarded("MPI_Type_dup", MPI_COMM_WORLD, [&] {
        check_out(newtype);
        *newtype = msgpass::mpi::type_dup(oldtype);
        record(*newtype, MPI_COMBINER_DUP, {}, {}, {oldtype});
        copy_attributes(oldtype, *newtype);
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_true_extent(MPI_Datatype datatype, MPI_Aint* true_lb, MPI_Aint* true_extent) {
    return guarded("MPI_Type_get_true_extent", MPI_COMM_WORLD, [&] {
        if (true_lb == nullptr || true_extent == nullptr) throw MpiError(MPI_ERR_ARG, "true_lb or true_extent is NULL");
        const auto& m = msgpass::mpi::type_info(datatype);
        *true_lb = m.true_lb;
        *true_extent = m.true_ub - m.true_lb;
        return MPI_SUCCESS;
    });
}

int MPI_Get_elements(const MPI_Status* status, MPI_Datatype datatype, int* count) {
    return guarded("MPI_Get_elements", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL (MPI_STATUS_IGNORE has no count)");
        if (count == nullptr) throw MpiError(MPI_ERR_ARG, "count is NULL");
        const std::size_t n = msgpass::mpi::basic_elements(*msgpass::mpi::typemap_of(datatype), status->msgpass_bytes);
        *count = n > static_cast<std::size_t>(INT_MAX) ? MPI_UNDEFINED : static_cast<int>(n);
        return MPI_SUCCESS;
    });
}

int MPI_Type_get_true_extent_x(MPI_Datatype datatype, MPI_Count* true_lb, MPI_Count* true_extent) {
    MPI_Aint lb = 0, extent = 0;
    const int code = MPI_Type_get_true_extent(datatype, &lb, &extent);
    if (code == MPI_SUCCESS && true_lb != nullptr && true_extent != nullptr) {
        *true_lb = lb;
        *true_extent = extent;
    }
    return code;
}

int MPI_Get_elements_x(const MPI_Status* status, MPI_Datatype datatype, MPI_Count* count) {
    return guarded("MPI_Get_elements_x", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL (MPI_STATUS_IGNORE has no count)");
        if (count == nullptr) throw MpiError(MPI_ERR_ARG, "count is NULL");
        const std::size_t n = msgpass::mpi::basic_elements(*msgpass::mpi::typemap_of(datatype), status->msgpass_bytes);
        *count = n == std::numeric_limits<std::size_t>::max() ? MPI_UNDEFINED : static_cast<MPI_Count>(n);
        return MPI_SUCCESS;
    });
}

// The status says count basic elements of datatype arrived (a generalized request's,
// or a library's own completion): the bytes of that many elements of the predefined
// type datatype is made of.
int MPI_Status_set_elements_x(MPI_Status* status, MPI_Datatype datatype, MPI_Count count) {
    return guarded("MPI_Status_set_elements_x", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL");
        if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
        const auto base = msgpass::mpi::predefined_of(datatype).first; // MPI_ERR_TYPE for a mixed type
        const std::size_t per = msgpass::mpi::is_pair_type(base) ? msgpass::mpi::element_bytes(base) / 2
                                                                 : msgpass::mpi::element_bytes(base);
        status->msgpass_bytes = static_cast<std::size_t>(count) * per;
        return MPI_SUCCESS;
    });
}

int MPI_Status_set_elements(MPI_Status* status, MPI_Datatype datatype, int count) {
    return MPI_Status_set_elements_x(status, datatype, count);
}

int MPI_Status_set_cancelled(MPI_Status* status, int flag) {
    return guarded("MPI_Status_set_cancelled", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL");
        status->msgpass_cancelled = flag != 0 ? 1 : 0;
        return MPI_SUCCESS;
    });
}

int MPI_Reduce_local(const void* inbuf, void* inoutbuf, int count, MPI_Datatype datatype, MPI_Op op) {
    return guarded("MPI_Reduce_local", MPI_COMM_WORLD, [&] {
        check_op(op, datatype);
        (void)bytes_of(inbuf, count, datatype, "inbuf");
        (void)bytes_of(inoutbuf, count, datatype, "inoutbuf");
        Staging st;
        const void* in = st.in(inbuf, count, datatype);
        void* inout = st.inout(inoutbuf, count, datatype);
        msgpass::mpi::combine(datatype, op, static_cast<std::byte*>(inout), static_cast<const std::byte*>(in), count,
                              true); // inoutbuf = inbuf op inoutbuf
        st.finish();
        return MPI_SUCCESS;
    });
}

int MPI_Type_set_name(MPI_Datatype datatype, const char* name) {
    return guarded("MPI_Type_set_name", MPI_COMM_WORLD, [&] {
        if (name == nullptr) throw MpiError(MPI_ERR_ARG, "name is NULL");
        (void)msgpass::mpi::type_info(datatype);
        type_names()[datatype] = std::string(name, strnlen(name, MPI_MAX_OBJECT_NAME - 1));
        return MPI_SUCCESS;
    });
}

// A predefined type is named by its constant in mpi.h until the application renames
// it; a derived one has an empty name.
int MPI_Type_get_name(MPI_Datatype datatype, char* name, int* resultlen) {
    return guarded("MPI_Type_get_name", MPI_COMM_WORLD, [&] {
        if (name == nullptr || resultlen == nullptr) throw MpiError(MPI_ERR_ARG, "name or resultlen is NULL");
        (void)msgpass::mpi::type_info(datatype);
        std::string s;
        if (const auto it = type_names().find(datatype); it != type_names().end())
            s = it->second;
        else if (!msgpass::mpi::is_derived(datatype))
            s = msgpass::mpi::type_name(datatype);
        std::memcpy(name, s.c_str(), s.size() + 1);
        *resultlen = static_cast<int>(s.size());
        return MPI_SUCCESS;
    });
}

int MPI_Pack_size(int incount, MPI_Datatype datatype, MPI_Comm comm, int* size) {
    return guarded("MPI_Pack_size", comm, [&] {
        (void)engine->info(comm);
        check_count(incount);
        if (size == nullptr) throw MpiError(MPI_ERR_ARG, "size is NULL");
        const std::size_t bytes = static_cast<std::size_t>(incount) * type_size(datatype);
        if (bytes > static_cast<std::size_t>(INT_MAX))
            throw MpiError(MPI_ERR_COUNT, "the packed size is beyond INT_MAX bytes");
        *size = static_cast<int>(bytes);
        return MPI_SUCCESS;
    });
}

int MPI_Pack(const void* inbuf, int incount, MPI_Datatype datatype, void* outbuf, int outsize, int* position,
             MPI_Comm comm) {
    return guarded("MPI_Pack", comm, [&] {
        (void)engine->info(comm);
        const std::size_t bytes = bytes_of(inbuf, incount, datatype, "inbuf");
        if (position == nullptr) throw MpiError(MPI_ERR_ARG, "position is NULL");
        if (*position < 0 || outsize < 0 || *position > outsize)
            throw MpiError(MPI_ERR_ARG, "position " + std::to_string(*position) + " is not within outsize " +
                                            std::to_string(outsize));
        if (bytes > static_cast<std::size_t>(outsize - *position))
            throw MpiError(MPI_ERR_TRUNCATE, "packing " + std::to_string(bytes) + " bytes at position " +
                                                 std::to_string(*position) + " goes beyond outsize " +
                                                 std::to_string(outsize));
        if (bytes == 0) return MPI_SUCCESS;
        if (outbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "outbuf is NULL");
        msgpass::mpi::pack(*msgpass::mpi::typemap_of(datatype), inbuf, static_cast<std::size_t>(incount),
                           static_cast<std::byte*>(outbuf) + *position);
        *position += static_cast<int>(bytes);
        return MPI_SUCCESS;
    });
}

int MPI_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount, MPI_Datatype datatype,
               MPI_Comm comm) {
    return guarded("MPI_Unpack", comm, [&] {
        (void)engine->info(comm);
        const std::size_t bytes = bytes_of(outbuf, outcount, datatype, "outbuf");
        if (position == nullptr) throw MpiError(MPI_ERR_ARG, "position is NULL");
        if (*position < 0 || insize < 0 || *position > insize)
            throw MpiError(MPI_ERR_ARG,
                           "position " + std::to_string(*position) + " is not within insize " + std::to_string(insize));
        if (bytes > static_cast<std::size_t>(insize - *position))
            throw MpiError(MPI_ERR_TRUNCATE, "unpacking " + std::to_string(bytes) + " bytes at position " +
                                                 std::to_string(*position) + " goes beyond insize " +
                                                 std::to_string(insize));
        if (bytes == 0) return MPI_SUCCESS;
        if (inbuf == nullptr) throw MpiError(MPI_ERR_BUFFER, "inbuf is NULL");
        msgpass::mpi::unpack(*msgpass::mpi::typemap_of(datatype), static_cast<const std::byte*>(inbuf) + *position,
                             bytes, outbuf);
        *position += static_cast<int>(bytes);
        return MPI_SUCCESS;
    });
}

} // extern "C"

extern "C" {

int MPI_Type_match_size(int typeclass, int size, MPI_Datatype* datatype) {
    return guarded("MPI_Type_match_size", MPI_COMM_WORLD, [&] {
        check_out(datatype);
        MPI_Datatype t = MPI_DATATYPE_NULL;
        switch (typeclass) {
        case MPI_TYPECLASS_INTEGER:
            t = size == 1   ? MPI_SIGNED_CHAR
                : size == 2 ? MPI_SHORT
                : size == 4 ? MPI_INT
                : size == 8 ? MPI_LONG_LONG
                            : MPI_DATATYPE_NULL;
            break;
        case MPI_TYPECLASS_REAL:
            t = size == 4 ? MPI_FLOAT : size == 8 ? MPI_DOUBLE : size == 16 ? MPI_LONG_DOUBLE : MPI_DATATYPE_NULL;
            break;
        case MPI_TYPECLASS_COMPLEX:
            t = size == 8    ? MPI_C_FLOAT_COMPLEX
                : size == 16 ? MPI_C_DOUBLE_COMPLEX
                : size == 32 ? MPI_C_LONG_DOUBLE_COMPLEX
                             : MPI_DATATYPE_NULL;
            break;
        default:
            throw MpiError(MPI_ERR_ARG,
                           "typeclass " + std::to_string(typeclass) + " (MPI_TYPECLASS_INTEGER, _REAL or _COMPLEX)");
        }
        if (t == MPI_DATATYPE_NULL)
            throw MpiError(MPI_ERR_ARG, "no predefined type of typeclass " + std::to_string(typeclass) + " has " +
                                            std::to_string(size) + " bytes");
        *datatype = t;
        return MPI_SUCCESS;
    });
}

} // extern "C"
