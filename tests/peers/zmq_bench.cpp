// zmq_bench: the ZeroMQ peer benchmark that scripts/compare-peers.sh sets beside
// msgpass-bench: ping-pong and stream between two processes over ZeroMQ PAIR
// sockets on ipc:// (a Unix-domain socket) and tcp:// (loopback, or another
// network namespace with --peer-netns), each point a JSON line of msgpass-bench
// --json with technology "zeromq-ipc" or "zeromq-tcp". The patterns, the processes
// and the command line are the peer harness's (peer_bench.hpp); this file is the
// ZeroMQ socket. Built only by scripts/compare-peers.sh, not by the CMake build, so
// that msgpass itself never depends on ZeroMQ.
#include "peer_bench.hpp"

#include <zmq.h>

namespace {

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + ": " + zmq_strerror(zmq_errno()));
}

// A ZeroMQ context, one PAIR socket and the message received last. The peer's
// socket lingers on close so that its last message is delivered; the driver's
// does not (it closes only after the peer has exited).
class ZmqSocket {
public:
    ZmqSocket(std::uint64_t size, bool peer_end) {
        context_ = zmq_ctx_new();
        if (!context_) fail("zmq_ctx_new");
        socket_ = zmq_socket(context_, ZMQ_PAIR);
        if (!socket_) fail("zmq_socket");
        const int hwm = peers::queue_messages(size, 1000);
        set(ZMQ_SNDHWM, hwm);
        set(ZMQ_RCVHWM, hwm);
        set(ZMQ_LINGER, peer_end ? peers::timeout_ms : 0);
        set(ZMQ_RCVTIMEO, peers::timeout_ms);
        set(ZMQ_SNDTIMEO, peers::timeout_ms);
        zmq_msg_init(&message_);
    }
    ZmqSocket(const ZmqSocket&) = delete;
    ZmqSocket& operator=(const ZmqSocket&) = delete;
    ~ZmqSocket() {
        zmq_msg_close(&message_);
        if (socket_) zmq_close(socket_);
        if (context_) zmq_ctx_term(context_);
    }

    // Binds and returns the endpoint (the port the kernel chose for tcp://A:*).
    std::string bind(const std::string& transport, const std::string& address, const std::string& ipc_path) {
        const std::string url = transport == "ipc" ? "ipc://" + ipc_path : "tcp://" + address + ":*";
        if (zmq_bind(socket_, url.c_str()) != 0) fail("zmq_bind " + url);
        char bound[256];
        std::size_t length = sizeof bound;
        if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, bound, &length) != 0) fail("ZMQ_LAST_ENDPOINT");
        return bound;
    }
    void connect(const std::string& endpoint) {
        if (zmq_connect(socket_, endpoint.c_str()) != 0) fail("zmq_connect " + endpoint);
    }
    void send(const void* data, std::size_t size) {
        if (zmq_send(socket_, data, size, 0) < 0) fail("zmq_send");
    }
    bool receive(bool wait) {
        if (zmq_msg_recv(&message_, socket_, wait ? 0 : ZMQ_DONTWAIT) >= 0) return true;
        if (!wait && zmq_errno() == EAGAIN) return false;
        fail(wait && zmq_errno() == EAGAIN ? "no message within the timeout" : "zmq_msg_recv");
    }
    const void* data() { return zmq_msg_data(&message_); }
    std::size_t size() { return zmq_msg_size(&message_); }
    // Sends the received message back as it is (no copy).
    void echo() {
        if (zmq_msg_send(&message_, socket_, 0) < 0) fail("zmq_msg_send");
    }

private:
    void set(int option, int value) {
        if (zmq_setsockopt(socket_, option, &value, sizeof value) != 0) fail("zmq_setsockopt");
    }
    void* context_ = nullptr;
    void* socket_ = nullptr;
    zmq_msg_t message_;
};

} // namespace

int main(int argc, char** argv) {
    return peers::run<ZmqSocket>(argc, argv, "zmq_bench", "zeromq", {"ipc", "tcp"}, {"ipc", "tcp"});
}
