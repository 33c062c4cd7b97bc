// Generalized requests (MPI_Grequest_start, MPI_Grequest_complete): an operation the
// application runs itself (a thread of its own, an I/O library) gets a request that
// MPI_Wait, MPI_Test and the rest complete like any other. The engine keeps it as a
// schedule of no rounds and of this rank alone (Engine::start_local) whose gate opens
// at MPI_Grequest_complete; on completion the application's query function gives the
// status and its free function runs (their errors are the request's), and MPI_Cancel
// calls its cancel function.
#include <map>
#include <memory>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::MpiError;

namespace {

// The gates of the generalized requests not yet completed, by handle (the big lock
// keeps them under MPI_THREAD_MULTIPLE).
std::map<MPI_Request, std::shared_ptr<bool>>& gates() {
    static std::map<MPI_Request, std::shared_ptr<bool>> open;
    return open;
}

} // namespace

extern "C" {

int MPI_Grequest_start(MPI_Grequest_query_function* query_fn, MPI_Grequest_free_function* free_fn,
                       MPI_Grequest_cancel_function* cancel_fn, void* extra_state, MPI_Request* request) {
    return guarded("MPI_Grequest_start", MPI_COMM_WORLD, [&] {
        if (query_fn == nullptr || free_fn == nullptr || cancel_fn == nullptr)
            throw MpiError(MPI_ERR_ARG, "query_fn, free_fn and cancel_fn must all be given");
        if (request == nullptr) throw MpiError(MPI_ERR_ARG, "request is NULL");
        auto s = std::make_unique<msgpass::mpi::Schedule>();
        s->comm = engine->info(MPI_COMM_SELF);
        s->name = "generalized request";
        auto completed = std::make_shared<bool>(false);
        auto handle = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
        s->gate = [completed] { return *completed; };
        s->query = [query_fn, free_fn, extra_state, handle](MPI_Status& status) {
            gates().erase(*handle);
            status.MPI_ERROR = MPI_SUCCESS;
            const int queried = query_fn(extra_state, &status);
            const int freed = free_fn(extra_state);
            return queried != MPI_SUCCESS ? queried : freed;
        };
        s->cancel = [cancel_fn, extra_state](bool complete) { (void)cancel_fn(extra_state, complete ? 1 : 0); };
        *handle = engine->start_local(std::move(s));
        gates()[*handle] = completed;
        *request = *handle;
        return MPI_SUCCESS;
    });
}

int MPI_Grequest_complete(MPI_Request request) {
    return guarded("MPI_Grequest_complete", MPI_COMM_WORLD, [&] {
        const auto it = gates().find(request);
        if (it == gates().end() || *it->second)
            throw MpiError(MPI_ERR_REQUEST, "request " + std::to_string(request) +
                                                " is no generalized request waiting for MPI_Grequest_complete");
        *it->second = true;
        engine->poke();
        return MPI_SUCCESS;
    });
}

} // extern "C"
