// The datatypes of msgpass's MPI: the basic types and the pair types of mpi.h. A
// buffer of count elements is count * element_bytes contiguous bytes and travels as
// they are (every rank runs on one architecture); MPI_Type_size's data size leaves
// out a pair type's padding, as the standard says.
#include "engine.hpp"

#include <string>

namespace msgpass::mpi {

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
        return element_bytes(type);
    }
}

} // namespace msgpass::mpi
