// nng_bench: the NNG peer benchmark that scripts/compare-peers.sh sets beside
// msgpass-bench: ping-pong and stream between two processes over NNG pair (pair1)
// sockets on tcp:// (loopback, or another network namespace with --peer-netns) or
// ipc://, each point a JSON line of msgpass-bench --json with technology
// "nng-tcp" or "nng-ipc". The patterns, the processes and the command line are the
// peer harness's (peer_bench.hpp); this file is the NNG socket. Built only by
// scripts/compare-peers.sh (Debian's libnng-dev), not by the CMake build, so that
// msgpass itself never depends on NNG.
#include "peer_bench.hpp"

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

namespace {

[[noreturn]] void fail(const std::string& what, int rv) {
    throw std::runtime_error(what + ": " + nng_strerror(rv));
}

void check(const std::string& what, int rv) {
    if (rv != 0) fail(what, rv);
}

// One pair1 socket and the message received last. Each end queues up to 16 MiB
// of messages (at most 8192, NNG's limit) so that the stream is not held back by a
// queue of a few messages; messages up to any size are accepted (NNG's default
// refuses more than 1 MiB). TCP_NODELAY is NNG's default.
class NngSocket {
public:
    NngSocket(std::uint64_t size, bool /*peer_end*/) {
        check("nng_pair1_open", nng_pair1_open(&socket_));
        open_ = true;
        const int queue = peers::queue_messages(size, 8192);
        check("NNG_OPT_SENDBUF", nng_socket_set_int(socket_, NNG_OPT_SENDBUF, queue));
        check("NNG_OPT_RECVBUF", nng_socket_set_int(socket_, NNG_OPT_RECVBUF, queue));
        check("NNG_OPT_RECVMAXSZ", nng_socket_set_size(socket_, NNG_OPT_RECVMAXSZ, 0));
        check("NNG_OPT_RECVTIMEO", nng_socket_set_ms(socket_, NNG_OPT_RECVTIMEO, peers::timeout_ms));
        check("NNG_OPT_SENDTIMEO", nng_socket_set_ms(socket_, NNG_OPT_SENDTIMEO, peers::timeout_ms));
    }
    NngSocket(const NngSocket&) = delete;
    NngSocket& operator=(const NngSocket&) = delete;
    ~NngSocket() {
        if (message_) nng_msg_free(message_);
        if (open_) nng_close(socket_);
    }

    // Listens and returns the endpoint (the port the kernel chose for tcp://A:0).
    std::string bind(const std::string& transport, const std::string& address, const std::string& ipc_path) {
        const std::string url = transport == "ipc" ? "ipc://" + ipc_path : "tcp://" + address + ":0";
        nng_listener listener;
        check("nng_listen " + url, nng_listen(socket_, url.c_str(), &listener, 0));
        if (transport == "ipc") return url;
        int port = 0;
        check("NNG_OPT_TCP_BOUND_PORT", nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port));
        return "tcp://" + address + ":" + std::to_string(port);
    }
    void connect(const std::string& endpoint) {
        check("nng_dial " + endpoint, nng_dial(socket_, endpoint.c_str(), nullptr, 0));
    }
    void send(const void* data, std::size_t size) {
        // nng_send copies the bytes into a message of its own.
        check("nng_send", nng_send(socket_, const_cast<void*>(data), size, 0));
    }
    bool receive(bool wait) {
        nng_msg* m = nullptr;
        const int rv = nng_recvmsg(socket_, &m, wait ? 0 : NNG_FLAG_NONBLOCK);
        if (rv == NNG_EAGAIN && !wait) return false;
        if (rv != 0) fail(rv == NNG_ETIMEDOUT ? "no message within the timeout" : "nng_recvmsg", rv);
        if (message_) nng_msg_free(message_);
        message_ = m;
        return true;
    }
    const void* data() { return message_ ? nng_msg_body(message_) : nullptr; }
    std::size_t size() { return message_ ? nng_msg_len(message_) : 0; }
    // Sends the received message back as it is (no copy; NNG owns it on success).
    void echo() {
        const int rv = nng_sendmsg(socket_, message_, 0);
        if (rv != 0) fail("nng_sendmsg", rv);
        message_ = nullptr;
    }

private:
    nng_socket socket_ = NNG_SOCKET_INITIALIZER;
    bool open_ = false;
    nng_msg* message_ = nullptr;
};

} // namespace

int main(int argc, char** argv) {
    return peers::run<NngSocket>(argc, argv, "nng_bench", "nng", {"tcp", "ipc"}, {"tcp"});
}
