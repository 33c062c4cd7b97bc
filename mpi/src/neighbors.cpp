// The neighbourhood collectives (MPI_Neighbor_allgather, _allgatherv, _alltoall,
// _alltoallv, _alltoallw and their non-blocking forms) on a communicator with a
// process topology (topology.cpp): a rank sends one block to each of its
// destinations and receives one from each of its sources, as a schedule the engine
// runs like any collective. On a Cartesian grid a rank's neighbours along a dimension
// are the rank one step back, then the one forward; what a rank sends forward arrives
// in its neighbour's "back" block, and the other way round, even where both are the
// same rank (a periodic dimension of 2) or the rank itself (of 1): each direction of
// each dimension is a round of its own, so the two messages a pair exchanges there
// cannot be confused. On a graph the i-th message from a rank to a neighbour is the
// neighbour's i-th block from that rank (the order of the lists); a rank that is its
// own neighbour copies.
#include <string>
#include <vector>

#include "api.hpp"
#include "topology.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;
using msgpass::mpi::Schedule;

namespace {

using Sched = std::unique_ptr<Schedule>;

// count elements of type at buf (one block to send, or one to receive into).
struct Region {
    const void* buf;
    int count;
    MPI_Datatype type;
};

struct Staged {
    std::byte* at;
    std::size_t bytes;
};

Sched neighbor_schedule(const char* name, MPI_Comm comm, const std::vector<Region>& out,
                        const std::vector<Region>& in) {
    const auto c = engine->info(comm);
    const Neighbors nb = neighbors_of(comm);
    Staging st;
    std::vector<Staged> send(out.size()), recv(in.size());
    for (std::size_t k = 0; k < out.size(); ++k) {
        const Region& r = out[k];
        const std::size_t bytes = bytes_of(r.buf, r.count, r.type, "sendbuf");
        send[k] = {static_cast<std::byte*>(const_cast<void*>(st.in(r.buf, r.count, r.type))), bytes};
    }
    for (std::size_t k = 0; k < in.size(); ++k) {
        const Region& r = in[k];
        const std::size_t bytes = bytes_of(r.buf, r.count, r.type, "recvbuf");
        recv[k] = {static_cast<std::byte*>(st.inout(const_cast<void*>(r.buf), r.count, r.type)), bytes};
    }
    auto s = std::make_unique<Schedule>();
    s->comm = c;
    s->name = name;
    auto self_copy = [&](std::size_t to, std::size_t from) {
        if (send[from].bytes != recv[to].bytes)
            throw MpiError(MPI_ERR_TRUNCATE, "this rank, its own neighbour, sends " + std::to_string(send[from].bytes) +
                                                 " bytes to itself into a block of " + std::to_string(recv[to].bytes));
        s->copy(recv[to].at, send[from].at, recv[to].bytes);
    };
    if (nb.cartesian) {
        for (std::size_t d = 0; 2 * d < nb.sources.size(); ++d) {
            // Forward (to 2d+1, from 2d: the one behind sent forward), then back.
            for (const auto& [to, from] : {std::pair{2 * d + 1, 2 * d}, std::pair{2 * d, 2 * d + 1}}) {
                s->next_round();
                const int dest = nb.destinations[to];
                const int source = nb.sources[from];
                if (dest == c.rank) { // (then source is this rank too: a periodic dimension of 1)
                    self_copy(from, to);
                    continue;
                }
                if (source != MPI_PROC_NULL) s->recv(source, recv[from].at, recv[from].bytes);
                if (dest != MPI_PROC_NULL) s->send(dest, send[to].at, send[to].bytes);
            }
        }
        return st.into(std::move(s));
    }
    s->next_round();
    std::vector<std::size_t> self_in, self_out;
    for (std::size_t k = 0; k < nb.sources.size(); ++k) {
        if (nb.sources[k] == c.rank)
            self_in.push_back(k);
        else
            s->recv(nb.sources[k], recv[k].at, recv[k].bytes);
    }
    for (std::size_t k = 0; k < nb.destinations.size(); ++k) {
        if (nb.destinations[k] == c.rank)
            self_out.push_back(k);
        else
            s->send(nb.destinations[k], send[k].at, send[k].bytes);
    }
    if (self_in.size() != self_out.size())
        throw MpiError(MPI_ERR_TOPOLOGY, "this rank is " + std::to_string(self_out.size()) +
                                             " times its own destination but " + std::to_string(self_in.size()) +
                                             " times its own source");
    for (std::size_t k = 0; k < self_in.size(); ++k)
        self_copy(self_in[k], self_out[k]);
    return st.into(std::move(s));
}

const std::byte* at_bytes(const void* buf, std::ptrdiff_t offset) {
    return static_cast<const std::byte*>(buf) + offset;
}

std::ptrdiff_t extent_of(MPI_Datatype type) {
    return msgpass::mpi::type_info(type).extent();
}

void check_count(const char* what, int count) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, std::string(what) + " " + std::to_string(count) + " is negative");
}

void no_in_place(const void* buf) {
    if (buf == MPI_IN_PLACE) throw MpiError(MPI_ERR_BUFFER, "MPI_IN_PLACE is not for a neighbourhood collective");
}

// count blocks of count elements, one after another from buf.
std::vector<Region> uniform(const void* buf, int count, MPI_Datatype type, std::size_t n) {
    std::vector<Region> r;
    const std::ptrdiff_t step = extent_of(type) * count;
    for (std::size_t k = 0; k < n; ++k)
        r.push_back({buf == nullptr ? nullptr : at_bytes(buf, static_cast<std::ptrdiff_t>(k) * step), count, type});
    return r;
}

// counts[k] elements at displs[k] extents of type from buf.
std::vector<Region> varied(const char* what, const void* buf, const int* counts, const int* displs, MPI_Datatype type,
                           std::size_t n) {
    if (n > 0 && (counts == nullptr || displs == nullptr))
        throw MpiError(MPI_ERR_ARG, std::string(what) + " counts or displacements are NULL");
    std::vector<Region> r;
    const std::ptrdiff_t extent = extent_of(type);
    for (std::size_t k = 0; k < n; ++k) {
        check_count(what, counts[k]);
        r.push_back({buf == nullptr ? nullptr : at_bytes(buf, displs[k] * extent), counts[k], type});
    }
    return r;
}

// counts[k] elements of types[k] at displs[k] bytes from buf.
std::vector<Region> typed(const char* what, const void* buf, const int* counts, const MPI_Aint* displs,
                          const MPI_Datatype* types, std::size_t n) {
    if (n > 0 && (counts == nullptr || displs == nullptr || types == nullptr))
        throw MpiError(MPI_ERR_ARG, std::string(what) + " counts, displacements or types are NULL");
    std::vector<Region> r;
    for (std::size_t k = 0; k < n; ++k) {
        check_count(what, counts[k]);
        r.push_back({buf == nullptr ? nullptr : at_bytes(buf, displs[k]), counts[k], types[k]});
    }
    return r;
}

Sched make_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm) {
    no_in_place(sendbuf);
    check_count("sendcount", sendcount);
    check_count("recvcount", recvcount);
    const Neighbors nb = neighbors_of(comm);
    return neighbor_schedule("neighbor_allgather", comm,
                             std::vector<Region>(nb.destinations.size(), Region{sendbuf, sendcount, sendtype}),
                             uniform(recvbuf, recvcount, recvtype, nb.sources.size()));
}

Sched make_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                      const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    no_in_place(sendbuf);
    check_count("sendcount", sendcount);
    const Neighbors nb = neighbors_of(comm);
    return neighbor_schedule("neighbor_allgatherv", comm,
                             std::vector<Region>(nb.destinations.size(), Region{sendbuf, sendcount, sendtype}),
                             varied("recv", recvbuf, recvcounts, displs, recvtype, nb.sources.size()));
}

Sched make_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                    MPI_Datatype recvtype, MPI_Comm comm) {
    no_in_place(sendbuf);
    check_count("sendcount", sendcount);
    check_count("recvcount", recvcount);
    const Neighbors nb = neighbors_of(comm);
    return neighbor_schedule("neighbor_alltoall", comm, uniform(sendbuf, sendcount, sendtype, nb.destinations.size()),
                             uniform(recvbuf, recvcount, recvtype, nb.sources.size()));
}

Sched make_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                     void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
    no_in_place(sendbuf);
    const Neighbors nb = neighbors_of(comm);
    return neighbor_schedule("neighbor_alltoallv", comm,
                             varied("send", sendbuf, sendcounts, sdispls, sendtype, nb.destinations.size()),
                             varied("recv", recvbuf, recvcounts, rdispls, recvtype, nb.sources.size()));
}

Sched make_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                     const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[], const MPI_Aint rdispls[],
                     const MPI_Datatype recvtypes[], MPI_Comm comm) {
    no_in_place(sendbuf);
    const Neighbors nb = neighbors_of(comm);
    return neighbor_schedule("neighbor_alltoallw", comm,
                             typed("send", sendbuf, sendcounts, sdispls, sendtypes, nb.destinations.size()),
                             typed("recv", recvbuf, recvcounts, rdispls, recvtypes, nb.sources.size()));
}

} // namespace

extern "C" {

int MPI_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                           MPI_Datatype recvtype, MPI_Comm comm) {
    return blocking("MPI_Neighbor_allgather", comm,
                    [&] { return make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int MPI_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                            const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
    return blocking("MPI_Neighbor_allgatherv", comm, [&] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                          MPI_Datatype recvtype, MPI_Comm comm) {
    return blocking("MPI_Neighbor_alltoall", comm,
                    [&] { return make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int MPI_Neighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                           void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                           MPI_Comm comm) {
    return blocking("MPI_Neighbor_alltoallv", comm, [&] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Neighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm) {
    return blocking("MPI_Neighbor_alltoallw", comm, [&] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

int MPI_Ineighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                            MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ineighbor_allgather", comm, request, [&] {
        return make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Ineighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                             const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                             MPI_Request* request) {
    return nonblocking("MPI_Ineighbor_allgatherv", comm, request, [&] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Ineighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                           MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ineighbor_alltoall", comm, request,
                       [&] { return make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); });
}

int MPI_Ineighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                            void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                            MPI_Comm comm, MPI_Request* request) {
    return nonblocking("MPI_Ineighbor_alltoallv", comm, request, [&] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Ineighbor_alltoallw(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                            const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                            const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                            MPI_Request* request) {
    return nonblocking("MPI_Ineighbor_alltoallw", comm, request, [&] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

// ------------------------------------------------------------------- persistent (MPI-4)

int MPI_Neighbor_allgather_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                                MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Neighbor_allgather_init", comm, request, [=] {
        return make_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Neighbor_allgatherv_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                                 MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Neighbor_allgatherv_init", comm, request, [=] {
        return make_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    });
}

int MPI_Neighbor_alltoall_init(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                               MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Neighbor_alltoall_init", comm, request, [=] {
        return make_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    });
}

int MPI_Neighbor_alltoallv_init(const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                                void* recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype,
                                MPI_Comm comm, MPI_Info info, MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Neighbor_alltoallv_init", comm, request, [=] {
        return make_alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    });
}

int MPI_Neighbor_alltoallw_init(const void* sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                                const MPI_Datatype sendtypes[], void* recvbuf, const int recvcounts[],
                                const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Info info,
                                MPI_Request* request) {
    (void)info; // (no hints are taken)
    return persistent_collective("MPI_Neighbor_alltoallw_init", comm, request, [=] {
        return make_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    });
}

} // extern "C"
