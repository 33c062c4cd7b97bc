// The C entry points of msgpass's MPI (mpi.h), point to point: send and receive,
// requests, probe, counts. Every entry point goes through api::guarded.
#include <array>
#include <climits>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "api.hpp"

using namespace msgpass::mpi::api; // NOLINT(google-build-using-namespace): the entry points' shared state and checks
using msgpass::mpi::CommInfo;
using msgpass::mpi::give_status;
using msgpass::mpi::MpiError;

extern "C" {

// ------------------------------------------------------------------- point to point

namespace {

// A receive's bytes; from MPI_PROC_NULL, nothing of MPI_DATATYPE_NULL is accepted too
// (it receives nothing: MPICH's recvnull).
[[gnu::always_inline]] inline std::size_t recv_bytes_of(void* buf, int count, MPI_Datatype type, int source) {
    if (source == MPI_PROC_NULL && count == 0 && type == MPI_DATATYPE_NULL) return 0;
    return bytes_of(buf, count, type);
}

// MPI_Isend, MPI_Issend and MPI_Irsend: a synchronous one completes when the receiver
// matched it; a ready send is a standard one (the receive is posted, as it promises).
int isend_common(const char* name, const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                 MPI_Request* request, bool synchronous) {
    return guarded(name, comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_rank(c, dest, false);
        check_send_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = dest == MPI_PROC_NULL ? engine->completed_proc_null()
                                         : isend_typed(c, dest, tag, buf, count, type, bytes, synchronous);
        return MPI_SUCCESS;
    });
}

} // namespace

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
    return isend_common("MPI_Isend", buf, count, type, dest, tag, comm, request, false);
}

int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
    return isend_common("MPI_Issend", buf, count, type, dest, tag, comm, request, true);
}

int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request) {
    return isend_common("MPI_Irsend", buf, count, type, dest, tag, comm, request, false);
}

int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return send_common("MPI_Rsend", buf, count, type, dest, tag, comm, false);
}

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return send_common("MPI_Send", buf, count, type, dest, tag, comm, false);
}

int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    return send_common("MPI_Ssend", buf, count, type, dest, tag, comm, true);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Irecv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = recv_bytes_of(buf, count, type, source);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = source == MPI_PROC_NULL ? engine->completed_proc_null()
                                           : irecv_typed(c, source, tag, buf, count, type, bytes);
        return MPI_SUCCESS;
    });
}

int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Recv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = recv_bytes_of(buf, count, type, source);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        MPI_Status own{};
        int code = MPI_SUCCESS;
        if (engine->can_recv_now() && bytes <= engine->eager_limit() && msgpass::mpi::buffer_is_message(type)) {
            code = engine->recv_now(c, source, tag, buf, bytes, own);
        } else {
            MPI_Request h = irecv_typed(c, source, tag, buf, count, type, bytes);
            code = engine->wait(&h, &own);
        }
        give_status(status, own);
        return request_error(code, own);
    });
}

namespace {

// The checks every send-and-receive pair makes after its buffers': the destination,
// the source (MPI_ANY_SOURCE allowed) and both tags.
void check_pair(const CommInfo& c, int dest, int sendtag, int source, int recvtag) {
    check_rank(c, dest, false);
    check_rank(c, source, true);
    check_send_tag(sendtag);
    check_recv_tag(recvtag);
}

// The checked arguments of MPI_Sendrecv and MPI_Isendrecv: the bytes to send and to
// receive (each buffer named in an error).
struct PairBytes {
    std::size_t send;
    std::size_t recv;
};

PairBytes checked_pair(const CommInfo& c, const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                       int sendtag, void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag) {
    const PairBytes bytes{bytes_of(sendbuf, sendcount, sendtype, "sendbuf"),
                          bytes_of(recvbuf, recvcount, recvtype, "recvbuf")};
    check_pair(c, dest, sendtag, source, recvtag);
    return bytes;
}

// The exchange of MPI_Sendrecv and MPI_Sendrecv_replace, once their arguments are
// checked: the receive is posted before the send, both are waited for, and a send
// error is reported before a receive error.
struct Typed {
    int count;
    MPI_Datatype type;
};

int exchange(const CommInfo& c, int dest, int sendtag, const void* out, std::size_t out_bytes, Typed out_type,
             int source, int recvtag, void* in, std::size_t in_bytes, Typed in_type, MPI_Status* status) {
    MPI_Request r = source == MPI_PROC_NULL
                        ? MPI_REQUEST_NULL
                        : irecv_typed(c, source, recvtag, in, in_type.count, in_type.type, in_bytes);
    MPI_Request s = dest == MPI_PROC_NULL
                        ? MPI_REQUEST_NULL
                        : isend_typed(c, dest, sendtag, out, out_type.count, out_type.type, out_bytes, false);
    MPI_Status sent{};
    const int send_code = engine->wait(&s, &sent);
    MPI_Status own{};
    const int recv_code = engine->wait(&r, &own);
    if (source == MPI_PROC_NULL) proc_null_status(&own);
    give_status(status, own);
    if (send_code != MPI_SUCCESS) return request_error(send_code, sent);
    return request_error(recv_code, own);
}

} // namespace

int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Sendrecv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes =
            checked_pair(c, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag);
        return exchange(c, dest, sendtag, sendbuf, bytes.send, {sendcount, sendtype}, source, recvtag, recvbuf,
                        bytes.recv, {recvcount, recvtype}, status);
    });
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
    return guarded("MPI_Wait", MPI_COMM_WORLD, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        MPI_Status own{};
        const int code = engine->wait(request, &own);
        give_status(status, own);
        return request_error(code, own);
    });
}

namespace {

// The requests that failed in a completion of several: (index of its status, code).
// Empty, and so never allocated, when all succeeded.
using Failures = std::vector<std::pair<int, int>>;

// The result of a completion of n requests (statuses[0..n)): MPI_ERR_IN_STATUS, every
// status' MPI_ERROR then set, when one failed; otherwise MPI_SUCCESS, the MPI_ERROR
// fields left as the caller set them.
int in_status(int n, const Failures& failures, MPI_Status statuses[]) {
    if (failures.empty()) return MPI_SUCCESS;
    if (statuses != MPI_STATUSES_IGNORE) {
        for (int i = 0; i < n; ++i)
            statuses[i].MPI_ERROR = MPI_SUCCESS;
        for (const auto& [i, code] : failures)
            statuses[i].MPI_ERROR = code;
    }
    last_message = "a request failed; see the MPI_ERROR of its status";
    return MPI_ERR_IN_STATUS;
}

// Completes *request, known complete unless wait (then waited for): its status goes
// to statuses[at] (unless ignored), its failure, if any, into failures under at.
void complete_into(MPI_Request* request, bool wait, int at, MPI_Status statuses[], Failures& failures) {
    MPI_Status own{};
    int code = MPI_SUCCESS;
    if (wait)
        code = engine->wait(request, &own);
    else
        (void)engine->test(request, &own, &code);
    if (statuses != MPI_STATUSES_IGNORE) give_status(&statuses[at], own);
    if (code != MPI_SUCCESS) failures.emplace_back(at, code);
}

// The checks of an array of requests: a count not negative, the array there when
// count > 0, every request not MPI_REQUEST_NULL one of this process.
void check_requests(int count, MPI_Request requests[]) {
    if (count < 0) throw MpiError(MPI_ERR_COUNT, "negative count " + std::to_string(count));
    if (count > 0 && requests == nullptr) throw MpiError(MPI_ERR_REQUEST, "requests is NULL");
    for (int i = 0; i < count; ++i)
        if (requests[i] != MPI_REQUEST_NULL) engine->check_request(requests[i]);
}

} // namespace

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    return guarded("MPI_Waitall", MPI_COMM_WORLD, [&] {
        check_requests(count, requests);
        Failures failures;
        for (int i = 0; i < count; ++i) // in order: each wait makes progress for all
            complete_into(&requests[i], true, i, statuses, failures);
        return in_status(count, failures, statuses);
    });
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
    return guarded("MPI_Waitany", MPI_COMM_WORLD, [&] {
        check_requests(count, requests);
        *index = engine->wait_any(count, requests);
        if (*index == MPI_UNDEFINED) {
            give_status(status, MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
            return MPI_SUCCESS;
        }
        MPI_Status own{};
        const int code = engine->wait(&requests[*index], &own);
        give_status(status, own);
        return request_error(code, own);
    });
}

namespace {

// Takes every completed request of the array (Testsome, Waitsome): its index and
// status; MPI_ERR_IN_STATUS when one failed.
int collect_completed(int count, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
    Failures failures;
    *outcount = 0;
    for (int i = 0; i < count; ++i) {
        if (engine->is_inactive(requests[i]) || !engine->is_complete(requests[i])) continue;
        indices[*outcount] = i;
        complete_into(&requests[i], false, *outcount, statuses, failures);
        ++*outcount;
    }
    return in_status(*outcount, failures, statuses);
}

bool any_active(int count, const MPI_Request requests[]) {
    for (int i = 0; i < count; ++i)
        if (!engine->is_inactive(requests[i])) return true;
    return false;
}

} // namespace

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
    return guarded("MPI_Testany", MPI_COMM_WORLD, [&] {
        check_requests(count, requests);
        *index = MPI_UNDEFINED;
        if (!any_active(count, requests)) { // nothing active: true, with an empty status
            *flag = 1;
            give_status(status, MPI_Status{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS, 0, 0});
            return MPI_SUCCESS;
        }
        engine->poke();
        *flag = 0;
        for (int i = 0; i < count; ++i) {
            if (engine->is_inactive(requests[i]) || !engine->is_complete(requests[i])) continue;
            MPI_Status own{};
            int code = MPI_SUCCESS;
            (void)engine->test(&requests[i], &own, &code);
            *index = i;
            *flag = 1;
            give_status(status, own);
            return request_error(code, own);
        }
        return MPI_SUCCESS;
    });
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
    return guarded("MPI_Testsome", MPI_COMM_WORLD, [&] {
        check_requests(incount, requests);
        if (!any_active(incount, requests)) {
            *outcount = MPI_UNDEFINED;
            return MPI_SUCCESS;
        }
        engine->poke();
        return collect_completed(incount, requests, outcount, indices, statuses);
    });
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
    return guarded("MPI_Waitsome", MPI_COMM_WORLD, [&] {
        check_requests(incount, requests);
        if (engine->wait_any(incount, requests) == MPI_UNDEFINED) {
            *outcount = MPI_UNDEFINED;
            return MPI_SUCCESS;
        }
        return collect_completed(incount, requests, outcount, indices, statuses);
    });
}

int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                         MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Sendrecv_replace", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_pair(c, dest, sendtag, source, recvtag);
        // The buffer is received into: what it sends goes out of a packed copy.
        std::vector<std::byte> out(bytes);
        msgpass::mpi::pack(*msgpass::mpi::typemap_of(type), buf, static_cast<std::size_t>(count), out.data());
        return exchange(c, dest, sendtag, out.data(), bytes, {static_cast<int>(bytes), MPI_BYTE}, source, recvtag, buf,
                        bytes, {count, type}, status);
    });
}

namespace {

// The one request of MPI_Isendrecv and MPI_Isendrecv_replace over the receive r and
// the send s (posted in that order): a schedule of this rank alone, complete when
// both are, with the receive's status and the send's error first. keep: the packed
// copy the send goes out of (replace), kept until then.
MPI_Request sendrecv_request(MPI_Request r, MPI_Request s, std::shared_ptr<std::vector<std::byte>> keep) {
    auto schedule = std::make_unique<msgpass::mpi::Schedule>();
    schedule->comm = engine->info(MPI_COMM_SELF);
    schedule->name = "MPI_Isendrecv";
    auto both = std::make_shared<std::array<MPI_Request, 2>>(std::array<MPI_Request, 2>{r, s});
    schedule->gate = [both] { return engine->is_complete((*both)[0]) && engine->is_complete((*both)[1]); };
    schedule->query = [both, keep = std::move(keep)](MPI_Status& status) {
        MPI_Status sent{};
        const int send_code = engine->wait(&(*both)[1], &sent);
        const int recv_code = engine->wait(&(*both)[0], &status);
        return send_code != MPI_SUCCESS ? send_code : recv_code;
    };
    // (MPI_Cancel of it cancels neither: the pair completes as it would.)
    schedule->cancel = [](bool) {};
    return engine->start_local(std::move(schedule));
}

} // namespace

int MPI_Isendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Isendrecv", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes =
            checked_pair(c, sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        const MPI_Request r = source == MPI_PROC_NULL
                                  ? engine->completed_proc_null()
                                  : irecv_typed(c, source, recvtag, recvbuf, recvcount, recvtype, bytes.recv);
        const MPI_Request s = dest == MPI_PROC_NULL
                                  ? engine->completed_proc_null()
                                  : isend_typed(c, dest, sendtag, sendbuf, sendcount, sendtype, bytes.send, false);
        *request = sendrecv_request(r, s, nullptr);
        return MPI_SUCCESS;
    });
}

int MPI_Isendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source, int recvtag,
                          MPI_Comm comm, MPI_Request* request) {
    return guarded("MPI_Isendrecv_replace", comm, [&] {
        const auto c = engine->info(comm);
        const auto bytes = bytes_of(buf, count, type);
        check_pair(c, dest, sendtag, source, recvtag);
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        // The buffer is received into: what it sends goes out of a packed copy.
        auto out = std::make_shared<std::vector<std::byte>>(bytes);
        msgpass::mpi::pack(*msgpass::mpi::typemap_of(type), buf, static_cast<std::size_t>(count), out->data());
        const MPI_Request r = source == MPI_PROC_NULL ? engine->completed_proc_null()
                                                      : irecv_typed(c, source, recvtag, buf, count, type, bytes);
        const MPI_Request s = dest == MPI_PROC_NULL ? engine->completed_proc_null()
                                                    : isend_typed(c, dest, sendtag, out->data(),
                                                                  static_cast<int>(bytes), MPI_BYTE, bytes, false);
        *request = sendrecv_request(r, s, std::move(out));
        return MPI_SUCCESS;
    });
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
    return guarded("MPI_Test", MPI_COMM_WORLD, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        MPI_Status own{};
        int code = MPI_SUCCESS;
        *flag = engine->test(request, &own, &code) ? 1 : 0;
        if (*flag != 0) give_status(status, own);
        return request_error(code, own);
    });
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
    return guarded("MPI_Request_get_status", MPI_COMM_WORLD, [&] {
        if (flag == nullptr) throw MpiError(MPI_ERR_ARG, "flag is NULL");
        MPI_Status own{};
        int code = MPI_SUCCESS;
        *flag = engine->peek(request, &own, &code) ? 1 : 0;
        if (*flag != 0) give_status(status, own);
        return request_error(code, own);
    });
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
    return guarded("MPI_Testall", MPI_COMM_WORLD, [&] {
        check_requests(count, requests);
        engine->poke(); // one progress for all, then all or nothing
        for (int i = 0; i < count; ++i) {
            if (!engine->is_complete(requests[i])) {
                *flag = 0;
                return MPI_SUCCESS;
            }
        }
        Failures failures;
        for (int i = 0; i < count; ++i)
            complete_into(&requests[i], false, i, statuses, failures);
        *flag = 1;
        return in_status(count, failures, statuses);
    });
}

int MPI_Request_free(MPI_Request* request) {
    return guarded("MPI_Request_free", MPI_COMM_WORLD, [&] {
        if (request == nullptr || *request == MPI_REQUEST_NULL)
            throw MpiError(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be freed");
        engine->free_request(request);
        return MPI_SUCCESS;
    });
}

int MPI_Cancel(MPI_Request* request) {
    return guarded("MPI_Cancel", MPI_COMM_WORLD, [&] {
        if (request == nullptr || *request == MPI_REQUEST_NULL)
            throw MpiError(MPI_ERR_REQUEST, "MPI_REQUEST_NULL cannot be cancelled");
        (void)engine->cancel(*request);
        return MPI_SUCCESS;
    });
}

int MPI_Test_cancelled(const MPI_Status* status, int* flag) {
    *flag = status != nullptr && status->msgpass_cancelled != 0;
    return MPI_SUCCESS;
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
    return guarded("MPI_Iprobe", comm, [&] {
        const auto c = engine->info(comm);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            *flag = 1;
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        *flag = engine->iprobe(c, source, tag, status) ? 1 : 0;
        return MPI_SUCCESS;
    });
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
    return guarded("MPI_Probe", comm, [&] {
        const auto c = engine->info(comm);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (source == MPI_PROC_NULL) {
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        engine->probe(c, source, tag, status);
        return MPI_SUCCESS;
    });
}

namespace {

int mprobe_common(const char* name, int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message,
                  MPI_Status* status) {
    return guarded(name, comm, [&] {
        const auto c = engine->info(comm);
        check_rank(c, source, true);
        check_recv_tag(tag);
        if (message == nullptr) throw MpiError(MPI_ERR_ARG, "message is NULL");
        if (source == MPI_PROC_NULL) {
            if (flag != nullptr) *flag = 1;
            *message = MPI_MESSAGE_NO_PROC;
            proc_null_status(status);
            return MPI_SUCCESS;
        }
        if (flag == nullptr) {
            engine->mprobe(c, source, tag, message, status);
        } else {
            *flag = engine->improbe(c, source, tag, message, status) ? 1 : 0;
            if (*flag == 0) *message = MPI_MESSAGE_NULL;
        }
        return MPI_SUCCESS;
    });
}

// The receive of MPI_Mrecv and MPI_Imrecv: the request of the matched message,
// told where the message goes; a completed one for MPI_MESSAGE_NO_PROC.
MPI_Request matched_receive(void* buf, int count, MPI_Datatype type, MPI_Message* message) {
    if (message == nullptr) throw MpiError(MPI_ERR_ARG, "message is NULL");
    if (*message == MPI_MESSAGE_NULL) throw MpiError(MPI_ERR_REQUEST, "MPI_MESSAGE_NULL has no message to receive");
    const auto bytes = bytes_of(buf, count, type);
    if (*message == MPI_MESSAGE_NO_PROC) {
        *message = MPI_MESSAGE_NULL;
        return engine->completed_proc_null();
    }
    const auto m = msgpass::mpi::typemap_of(type);
    const MPI_Request h = engine->receive_matched(
        *message, bytes, [m, buf](const std::byte* at, std::size_t n) { msgpass::mpi::unpack(*m, at, n, buf); });
    *message = MPI_MESSAGE_NULL;
    return h;
}

} // namespace

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) {
    return mprobe_common("MPI_Mprobe", source, tag, comm, nullptr, message, status);
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
    if (flag == nullptr)
        return guarded("MPI_Improbe", comm, []() -> int { throw MpiError(MPI_ERR_ARG, "flag is NULL"); });
    return mprobe_common("MPI_Improbe", source, tag, comm, flag, message, status);
}

int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
    return guarded("MPI_Mrecv", MPI_COMM_WORLD, [&] {
        MPI_Request h = matched_receive(buf, count, type, message);
        MPI_Status own{};
        const int code = engine->wait(&h, &own);
        give_status(status, own);
        return request_error(code, own);
    });
}

int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) {
    return guarded("MPI_Imrecv", MPI_COMM_WORLD, [&] {
        if (request == nullptr) throw MpiError(MPI_ERR_REQUEST, "request is NULL");
        *request = matched_receive(buf, count, type, message);
        return MPI_SUCCESS;
    });
}

int MPI_Get_count(const MPI_Status* status, MPI_Datatype type, int* count) {
    return guarded("MPI_Get_count", MPI_COMM_WORLD, [&] {
        if (status == nullptr) throw MpiError(MPI_ERR_ARG, "status is NULL (MPI_STATUS_IGNORE has no count)");
        const std::size_t size = type_size(type);
        if (size == 0) { // a type of no data (hindexed of zero lengths): none of it, or undefined
            *count = status->msgpass_bytes == 0 ? 0 : MPI_UNDEFINED;
            return MPI_SUCCESS;
        }
        if (status->msgpass_bytes % size != 0 || status->msgpass_bytes / size > INT_MAX)
            *count = MPI_UNDEFINED;
        else
            *count = static_cast<int>(status->msgpass_bytes / size);
        return MPI_SUCCESS;
    });
}

} // extern "C"
