// The shared parts of msgpass's MPI entry points (api.hpp).
#include "api.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

namespace msgpass::mpi::api {

const char* class_text(int code) {
    switch (code) {
    case MPI_SUCCESS:
        return "no error";
    case MPI_ERR_BUFFER:
        return "invalid buffer pointer";
    case MPI_ERR_COUNT:
        return "invalid count argument";
    case MPI_ERR_TYPE:
        return "invalid datatype";
    case MPI_ERR_TAG:
        return "invalid tag";
    case MPI_ERR_COMM:
        return "invalid communicator";
    case MPI_ERR_RANK:
        return "invalid rank";
    case MPI_ERR_REQUEST:
        return "invalid request";
    case MPI_ERR_ROOT:
        return "invalid root";
    case MPI_ERR_GROUP:
        return "invalid group";
    case MPI_ERR_OP:
        return "invalid reduction operation";
    case MPI_ERR_TOPOLOGY:
        return "invalid topology";
    case MPI_ERR_DIMS:
        return "invalid dimensions";
    case MPI_ERR_ARG:
        return "invalid argument";
    case MPI_ERR_UNKNOWN:
        return "unknown error";
    case MPI_ERR_TRUNCATE:
        return "message truncated";
    case MPI_ERR_OTHER:
        return "other error";
    case MPI_ERR_INTERN:
        return "internal error";
    case MPI_ERR_IN_STATUS:
        return "error code is in status";
    case MPI_ERR_PENDING:
        return "pending request";
    case MPI_ERR_UNSUPPORTED_OPERATION:
        return "operation not supported by msgpass's MPI";
    case MPI_ERR_PROC_FAILED:
        return "a peer process failed";
    case MPI_ERR_INFO:
        return "invalid info object";
    case MPI_ERR_INFO_KEY:
        return "invalid info key";
    case MPI_ERR_INFO_VALUE:
        return "invalid info value";
    case MPI_ERR_INFO_NOKEY:
        return "no such key in the info object";
    case MPI_ERR_KEYVAL:
        return "invalid keyval";
    default: {
        // A class or code of the application: its string, empty until one is added.
        if (added_codes.count(code) == 0) return nullptr;
        const auto it = added_strings.find(code);
        return it != added_strings.end() ? it->second.c_str() : "";
    }
    }
}

int world_rank() {
    return engine ? engine->world_rank() : -1;
}

// Reports an error as the communicator's handler says: MPI_ERRORS_ARE_FATAL prints
// the call, the rank and what went wrong, and ends the process with exit code 1.
int fail(const char* call, MPI_Comm comm, int code, const std::string& what) {
    last_code = code;
    last_message = std::string(call) + ": " + what;
    const MPI_Errhandler handler = handler_of(comm);
    if (const auto user = user_handlers.find(handler); user != user_handlers.end()) {
        // The application's function, with the communicator and the code (it may change
        // neither); the call then returns the code.
        MPI_Comm c = comm;
        int e = code;
        user->second.function(&c, &e);
        return code;
    }
    if (handler == MPI_ERRORS_ARE_FATAL) {
        std::fflush(stdout);
        const char* text = class_text(code);
        std::fprintf(stderr, "msgpass-mpi: rank %d: %s: %s (%s)\n", world_rank(), call, what.c_str(),
                     text != nullptr && *text != '\0' ? text : ("error code " + std::to_string(code)).c_str());
        std::fflush(stderr);
        std::_Exit(1);
    }
    return code;
}

std::size_t type_size(MPI_Datatype type) {
    return element_bytes(type);
}

void bad_count(int count, const char* /*what*/) {
    throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
}

void bad_buffer(int count, const char* what) {
    throw MpiError(MPI_ERR_BUFFER, std::string(what) + " is NULL with a count of " + std::to_string(count) +
                                       " (MPI_BOTTOM needs a type of absolute addresses, from MPI_Get_address)");
}

void bad_tag(int tag) {
    throw MpiError(MPI_ERR_TAG,
                   "tag " + std::to_string(tag) + " is not between 0 and " + std::to_string(MPI_TAG_UB_VALUE));
}

void bad_rank(const CommInfo& c, int rank) {
    throw MpiError(MPI_ERR_RANK, "rank " + std::to_string(rank) + " is not between 0 and " +
                                     std::to_string(c.size - 1) + " (the communicator's size is " +
                                     std::to_string(c.size) + ")");
}

void check_root(const CommInfo& c, int root) {
    if (root < 0 || root >= c.size)
        throw MpiError(MPI_ERR_ROOT,
                       "root " + std::to_string(root) + " is not between 0 and " + std::to_string(c.size - 1));
}

void check_op(MPI_Op op, MPI_Datatype type) {
    if (is_user_op(op)) { // any type: the function knows its own
        check_user_op(op);
        if (!typemap_of(type)->dense) (void)predefined_of(type);
        return;
    }
    const bool loc = op == MPI_MAXLOC || op == MPI_MINLOC;
    if (!loc && op != MPI_SUM && op != MPI_PROD && op != MPI_MAX && op != MPI_MIN && op != MPI_LAND && op != MPI_LOR &&
        op != MPI_LXOR && op != MPI_BAND && op != MPI_BOR && op != MPI_BXOR)
        throw MpiError(MPI_ERR_OP, "invalid operation " + std::to_string(op) +
                                       " (MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, "
                                       "MPI_BOR, MPI_BXOR, MPI_MAXLOC, MPI_MINLOC and those of MPI_Op_create are "
                                       "provided)");
    type = predefined_of(type).first; // a derived type's operations are its elements' (MPI_ERR_TYPE if unknown)
    if (loc != is_pair_type(type))
        throw MpiError(MPI_ERR_OP,
                       loc ? "MPI_MAXLOC and MPI_MINLOC are defined on the pair types only (MPI_2INT, "
                             "MPI_DOUBLE_INT, ...), not on " +
                                 type_name(type)
                           : "only MPI_MAXLOC and MPI_MINLOC are defined on the pair type " + type_name(type));
    if (type == MPI_FLOAT || type == MPI_DOUBLE || type == MPI_LONG_DOUBLE) // (logical and bitwise: integers)
        if (op != MPI_SUM && op != MPI_PROD && op != MPI_MAX && op != MPI_MIN)
            throw MpiError(MPI_ERR_OP, "the logical and bitwise operations are not defined on " + type_name(type));
    if (type == MPI_C_FLOAT_COMPLEX || type == MPI_C_DOUBLE_COMPLEX || type == MPI_C_LONG_DOUBLE_COMPLEX)
        if (op != MPI_SUM && op != MPI_PROD)
            throw MpiError(MPI_ERR_OP, "only MPI_SUM and MPI_PROD are defined on " + type_name(type));
    if (type == MPI_C_BOOL && op != MPI_LAND && op != MPI_LOR && op != MPI_LXOR)
        throw MpiError(MPI_ERR_OP, "only the logical operations are defined on MPI_C_BOOL");
}

void proc_null_status(MPI_Status* status) {
    give_status(status, MPI_Status{MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
}

// A request's own error, with the message of what happened to it.
int request_error_message(int code, const MPI_Status& status) {
    if (code == MPI_ERR_TRUNCATE)
        last_message = "the message from rank " + std::to_string(status.MPI_SOURCE) + " (tag " +
                       std::to_string(status.MPI_TAG) + ") is larger than the receive buffer";
    else if (code == MPI_ERR_PROC_FAILED)
        last_message = "rank " + std::to_string(status.MPI_SOURCE) + " was lost";
    else
        last_message.clear();
    return code;
}

int init(int* argc, char*** argv) {
    if (phase == Phase::running) return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, "called twice");
    if (phase == Phase::finalized) return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, "called after MPI_Finalize");
    const char* program = (argc != nullptr && argv != nullptr && *argc > 0 && *argv != nullptr) ? (*argv)[0] : nullptr;
    try {
        engine = std::make_unique<Engine>(program);
    } catch (const MpiError& e) {
        return fail("MPI_Init", MPI_COMM_WORLD, e.code(), e.what());
    } catch (const std::exception& e) {
        return fail("MPI_Init", MPI_COMM_WORLD, MPI_ERR_OTHER, e.what());
    }
    phase = Phase::running;
    main_thread = std::this_thread::get_id();
    return MPI_SUCCESS;
}

int send_common(const char* call, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                bool sync) {
    return guarded(call, comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
        if (!sync && engine->can_recv_now() && bytes <= engine->eager_limit() && buffer_is_message(type)) {
            engine->send_now(c, dest, tag, buf, bytes); // no request (the 8-byte latency's path)
            return MPI_SUCCESS;
        }
        MPI_Request h = isend_typed(c, dest, tag, buf, count, type, bytes, sync);
        MPI_Status status{};
        return request_error(engine->wait(&h, &status), status);
    });
}

// The block of one rank in a gather, scatter or allgather: the send side's and the
// receive side's must have the same size.
std::size_t block_of(const char* side, int count, MPI_Datatype type, std::size_t other, bool check_other) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, std::string(side) + ": negative count " + std::to_string(count));
    const std::size_t bytes = static_cast<std::size_t>(count) * type_size(type);
    if (check_other && bytes != other)
        throw MpiError(MPI_ERR_TRUNCATE, "the send block (" + std::to_string(other) +
                                             " bytes) and the receive block (" + std::to_string(bytes) +
                                             " bytes) differ");
    return bytes;
}

MPI_Request isend_typed(const CommInfo& c, int dest, int tag, const void* buf, int count, MPI_Datatype type,
                        std::size_t bytes, bool sync) {
    if (is_dense(type)) return engine->isend(c, dest, tag, buf, bytes, sync, {}, true); // (the benchmarks' path)
    return isend_typed(c, dest, tag, buf, count, typemap_of(type), bytes, sync);
}

MPI_Request irecv_typed(const CommInfo& c, int source, int tag, void* buf, int count, MPI_Datatype type,
                        std::size_t bytes) {
    if (is_dense(type)) return engine->irecv(c, source, tag, buf, bytes, {}, {}, true);
    return irecv_typed(c, source, tag, buf, count, typemap_of(type), bytes);
}

MPI_Request isend_typed(const CommInfo& c, int dest, int tag, const void* buf, int count, const TypeMapPtr& m,
                        std::size_t bytes, bool sync) {
    if (m->dense) return engine->isend(c, dest, tag, buf, bytes, sync, {}, true);
    std::vector<std::byte> packed(bytes);
    pack(*m, buf, static_cast<std::size_t>(count), packed.data());
    const std::byte* data = packed.data();
    return engine->isend(c, dest, tag, data, bytes, sync, std::move(packed));
}

MPI_Request irecv_typed(const CommInfo& c, int source, int tag, void* buf, int count, const TypeMapPtr& m,
                        std::size_t bytes) {
    (void)count;
    if (m->dense) return engine->irecv(c, source, tag, buf, bytes);
    std::vector<std::byte> staging(bytes);
    std::byte* at = staging.data();
    // The request's own staging is what arrived: unpack reads it there.
    return engine->irecv(c, source, tag, at, bytes, std::move(staging),
                         [m, at, buf](std::size_t n) { unpack(*m, at, n, buf); });
}

std::byte* Staging::alloc(std::size_t bytes) {
    memory_.push_back(std::make_unique<std::byte[]>(std::max<std::size_t>(bytes, 1)));
    return memory_.back().get();
}

const void* Staging::in(const void* buf, int count, MPI_Datatype type) {
    if (buf == MPI_IN_PLACE || buf == nullptr || count <= 0) return buf;
    if (is_dense(type)) return buf;
    const TypeMapPtr m = typemap_of(type);
    std::byte* out = alloc(static_cast<std::size_t>(count) * m->packed);
    pack(*m, buf, static_cast<std::size_t>(count), out);
    return out;
}

void* Staging::inout(void* buf, int count, MPI_Datatype type) {
    if (buf == MPI_IN_PLACE || buf == nullptr || count <= 0) return buf;
    if (is_dense(type)) return buf;
    const TypeMapPtr m = typemap_of(type);
    const std::size_t bytes = static_cast<std::size_t>(count) * m->packed;
    std::byte* out = alloc(bytes);
    pack(*m, buf, static_cast<std::size_t>(count), out);
    unpacks_.emplace_back([m, out, bytes, buf] { unpack(*m, out, bytes, buf); });
    return out;
}

void* Staging::stage_v(const void* buf, const int* counts, const int* displs, int n, MPI_Datatype type,
                       bool unpack_back) {
    if (buf == MPI_IN_PLACE || buf == nullptr || counts == nullptr || displs == nullptr)
        return const_cast<void*>(buf); // NOLINT(cppcoreguidelines-pro-type-const-cast): passed on as it came
    const TypeMapPtr m = typemap_of(type);
    if (m->dense) return const_cast<void*>(buf); // NOLINT(cppcoreguidelines-pro-type-const-cast)
    std::size_t end = 0;
    for (int i = 0; i < n; ++i)
        if (counts[i] > 0 && displs[i] >= 0)
            end =
                std::max(end, (static_cast<std::size_t>(displs[i]) + static_cast<std::size_t>(counts[i])) * m->packed);
    std::byte* out = alloc(end);
    const auto* user = static_cast<const std::byte*>(buf);
    std::vector<std::pair<std::size_t, std::size_t>> regions; // (element index, count)
    for (int i = 0; i < n; ++i) {
        if (counts[i] <= 0 || displs[i] < 0) continue;
        const auto at = static_cast<std::size_t>(displs[i]);
        pack(*m, user + static_cast<std::ptrdiff_t>(at) * m->extent(), static_cast<std::size_t>(counts[i]),
             out + at * m->packed);
        regions.emplace_back(at, static_cast<std::size_t>(counts[i]));
    }
    if (unpack_back)
        unpacks_.emplace_back([m, out, regions, buf] {
            auto* dst =
                static_cast<std::byte*>(const_cast<void*>(buf)); // NOLINT(cppcoreguidelines-pro-type-const-cast)
            for (const auto& [at, count] : regions)
                unpack(*m, out + at * m->packed, count * m->packed,
                       dst + static_cast<std::ptrdiff_t>(at) * m->extent());
        });
    return out;
}

const void* Staging::in_v(const void* buf, const int* counts, const int* displs, int n, MPI_Datatype type) {
    return stage_v(buf, counts, displs, n, type, false);
}

void* Staging::inout_v(void* buf, const int* counts, const int* displs, int n, MPI_Datatype type) {
    return stage_v(buf, counts, displs, n, type, true);
}

void* Staging::inout_w(const void* buf, const int* counts, const int* displs, const MPI_Datatype* types, int n,
                       std::vector<std::size_t>& displs_out, bool unpack_back) {
    void* same = const_cast<void*>(buf); // NOLINT(cppcoreguidelines-pro-type-const-cast): passed on as it came
    if (buf == MPI_IN_PLACE || buf == nullptr || counts == nullptr || displs == nullptr || types == nullptr)
        return same;
    bool all_dense = true;
    std::size_t total = 0;
    std::vector<TypeMapPtr> maps;
    for (int i = 0; i < n; ++i) {
        if (counts[i] <= 0) {
            maps.emplace_back();
            continue;
        }
        maps.push_back(typemap_of(types[i]));
        all_dense = all_dense && maps.back()->dense;
        total += static_cast<std::size_t>(counts[i]) * maps.back()->packed;
    }
    if (all_dense) return same;
    std::byte* out = alloc(total);
    const auto* user = static_cast<const std::byte*>(buf);
    std::size_t at = 0;
    for (int i = 0; i < n; ++i) {
        displs_out[static_cast<std::size_t>(i)] = at;
        if (!maps[static_cast<std::size_t>(i)]) continue;
        pack(*maps[static_cast<std::size_t>(i)], user + displs[i], static_cast<std::size_t>(counts[i]), out + at);
        at += static_cast<std::size_t>(counts[i]) * maps[static_cast<std::size_t>(i)]->packed;
    }
    if (unpack_back) {
        std::vector<std::tuple<TypeMapPtr, std::size_t, std::size_t, std::ptrdiff_t>> regions;
        for (int i = 0; i < n; ++i)
            if (maps[static_cast<std::size_t>(i)])
                regions.emplace_back(maps[static_cast<std::size_t>(i)], displs_out[static_cast<std::size_t>(i)],
                                     static_cast<std::size_t>(counts[i]) * maps[static_cast<std::size_t>(i)]->packed,
                                     displs[i]);
        unpacks_.emplace_back([regions, out, same] {
            for (const auto& [m, from, bytes, to] : regions)
                unpack(*m, out + from, bytes, static_cast<std::byte*>(same) + to);
        });
    }
    return out;
}

void Staging::finish() {
    for (const auto& f : unpacks_)
        f();
    unpacks_.clear();
}

std::unique_ptr<Schedule> Staging::into(std::unique_ptr<Schedule> s) {
    for (auto& m : memory_)
        s->scratch.push_back(std::move(m));
    memory_.clear();
    for (auto& f : unpacks_)
        s->finish.push_back(std::move(f));
    unpacks_.clear();
    return s;
}

} // namespace msgpass::mpi::api
