// The reduction operations the application makes (MPI_Op_create): a function of
// mpi.h's MPI_User_function and whether it commutes. The reductions call it as the
// standard says, inoutvec[i] = invec[i] op inoutvec[i], with invec the contribution
// of the lower ranks when the operation does not commute (the schedules combine
// lower ranks' data on the left: schedules.cpp), and with the datatype of the call
// when its layout is the message's (a dense type), else with the predefined type it
// is made of (the data reaches the function packed).
#include "engine.hpp"

#include <climits>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace msgpass::mpi {

namespace {

struct UserOp {
    MPI_User_function* fn = nullptr;
    bool commutative = true;
    bool freed = false;
};

// Handles count up from here; freed ones stay known so that a use says so. Callers
// hold the big lock under MPI_THREAD_MULTIPLE.
constexpr MPI_Op first_user_op = 0x59000001;
std::map<MPI_Op, UserOp> user_ops;
MPI_Op next_user_op = first_user_op;

// A call's operation must not have been freed; a reduction already under way keeps
// using one freed meanwhile (MPI 3.1, 5.9.5: freed when no operation uses it), so the
// schedules look it up with in_use.
const UserOp& find(MPI_Op op, bool in_use = false) {
    const auto it = user_ops.find(op);
    if (it == user_ops.end()) throw MpiError(MPI_ERR_OP, "invalid operation " + std::to_string(op));
    if (it->second.freed && !in_use)
        throw MpiError(MPI_ERR_OP, "operation " + std::to_string(op) + " was freed (MPI_Op_free)");
    return it->second;
}

} // namespace

bool is_user_op(MPI_Op op) {
    return op >= first_user_op && op < next_user_op;
}

bool is_commutative(MPI_Op op) {
    return !is_user_op(op) || find(op, true).commutative;
}

void check_user_op(MPI_Op op) {
    (void)find(op);
}

MPI_Op op_create(MPI_User_function* fn, bool commutative) {
    if (fn == nullptr) throw MpiError(MPI_ERR_ARG, "user_fn is NULL");
    if (next_user_op == INT_MAX) throw MpiError(MPI_ERR_INTERN, "no operation handle left");
    user_ops.emplace(next_user_op, UserOp{fn, commutative});
    return next_user_op++;
}

void op_free(MPI_Op op) {
    if (!is_user_op(op))
        throw MpiError(MPI_ERR_OP, "operation " + std::to_string(op) + " is predefined or unknown: it cannot be freed");
    (void)find(op);
    user_ops.at(op).freed = true;
}

void combine_user(MPI_Op op, MPI_Datatype type, std::byte* inout, const std::byte* in, int count, bool in_first) {
    MPI_User_function* fn = find(op, true).fn;
    MPI_Datatype t = type;
    int n = count;
    if (in_first) {
        fn(const_cast<std::byte*>(in), inout, &n, &t); // NOLINT(cppcoreguidelines-pro-type-const-cast): C's signature
        return;
    }
    // inout = inout op in: the function's left operand is its first argument.
    const std::size_t bytes = static_cast<std::size_t>(count) * element_bytes(type);
    std::vector<std::byte> right(in, in + bytes);
    fn(inout, right.data(), &n, &t);
    if (bytes > 0) std::memcpy(inout, right.data(), bytes);
}

} // namespace msgpass::mpi
