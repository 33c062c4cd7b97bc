// msgpass-comm-ring: BIP's token ring with tags, through the communicator
// (msgpass::comm, docs/communicator.md). The first node of the static group `ring`
// sends two tokens at once to its successor, token A with tag 1, then token B with
// tag 2. Every node takes them from its predecessor by tag, B first:
// recv(prev, tag B) skips token A, which came first, and leaves it waiting in the
// communicator's unexpected queue (iprobe shows its envelope there) until the node
// asks for tag A. Then the node forwards both, A then B, one hop older, so the next
// node finds them in the same order and again takes B first. The first node checks
// that both came back with their values after one hop per member of the ring.
// No transport appears in the code; network.yaml chooses it. Start it on every node
// of the ring's files (apps/examples/ring/) with
//   msgpass-run --config ring/network.yaml --nodes ring/nodes.yaml -- msgpass-comm-ring
// and add --set technology=tcp (or udp, auto) to msgpass-run's options for another
// technology. Exits 0 when both tokens went round, 1 on a timeout or a wrong token,
// 2 on an error.
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <vector>

namespace {

using namespace std::chrono_literals;
using msgpass::NodeId;
namespace comm = msgpass::comm;

// The payload of a token; copied in and out, so no alignment is assumed.
struct Token {
    std::int32_t value;
    std::uint32_t hops; // hops travelled, counted by each receiver
};

// A token of the ring: its tag and the value the first node gives it.
struct Kind {
    const char* name;
    comm::Tag tag;
    std::int32_t value;
};
constexpr Kind token_a{"A", 1, 333};
constexpr Kind token_b{"B", 2, 444};
constexpr auto hop_timeout = 10s;

// Sends a token with its tag. The buffer of create_buffer has room for the
// communicator's envelope in front, so the send copies nothing (BMI's memalloc);
// send returns once the node took the message.
void send_token(comm::Communicator& comm, NodeId next, const Kind& kind, Token token) {
    auto buffer = comm.create_buffer(sizeof(Token));
    buffer->as<Token>() = token;
    comm.send(next, kind.tag, std::move(buffer));
}

// The token with kind's tag from prev: only a message of prev with that tag matches
// (MPI matching), whatever else prev sent before it. nullopt, with the reason on
// stderr, on a timeout or a malformed token.
std::optional<Token> recv_token(comm::Communicator& comm, NodeId prev, const Kind& kind) {
    auto message = comm.recv(prev, kind.tag, hop_timeout);
    if (!message) {
        std::fprintf(stderr, "msgpass-comm-ring: node %u: no token %s (tag %d) from %u within %llds\n", comm.self_id(),
                     kind.name, kind.tag, prev, static_cast<long long>(hop_timeout.count()));
        return std::nullopt;
    }
    Token token{};
    if (message->buffer->size() != sizeof token) {
        std::fprintf(stderr, "msgpass-comm-ring: node %u: token %s from %u has %zu bytes, expected %zu\n",
                     comm.self_id(), kind.name, prev, message->buffer->size(), sizeof token);
        return std::nullopt;
    }
    message->buffer->copy_to(std::as_writable_bytes(std::span(&token, 1)));
    ++token.hops;
    return token;
}

// Token A, sent before B, must be waiting unexpected once B was received: the node
// delivers prev's messages in order, and the communicator keeps what no receive asked
// for. iprobe gives its envelope without taking it.
bool a_waits_unexpected(comm::Communicator& comm, NodeId prev) {
    const auto envelope = comm.iprobe(prev, token_a.tag);
    if (!envelope || envelope->size != sizeof(Token)) {
        std::fprintf(stderr, "msgpass-comm-ring: node %u: token A (tag %d) of %u is not waiting unexpected\n",
                     comm.self_id(), token_a.tag, prev);
        return false;
    }
    return true;
}

} // namespace

int main(int argc, char** argv) try {
    const auto options = msgpass::options(argc, argv); // --config --nodes --node-id --set
    auto factory = msgpass::NodeFactory::create(options);
    auto ring = factory->create_group("ring"); // static group from network.yaml
    const NodeId self = factory->self_id();
    if (ring->size() < 2 || !ring->contains(self)) {
        std::fprintf(stderr, "msgpass-comm-ring: node %u: group ring must have this node and another\n", self);
        return 2;
    }
    const NodeId next = ring->next_after(self);
    const NodeId prev = ring->previous_before(self);
    std::vector<NodeId> peers{next};
    if (prev != next) peers.push_back(prev);
    // Over the two neighbours only, with the comm: section of network.yaml.
    comm::Communicator comm(*factory, peers, comm::Limits::from(options.configuration));

    if (self == ring->first()) {
        send_token(comm, next, token_a, {token_a.value, 0});
        send_token(comm, next, token_b, {token_b.value, 0});
        const auto b = recv_token(comm, prev, token_b);
        if (!b || !a_waits_unexpected(comm, prev)) return 1;
        const auto a = recv_token(comm, prev, token_a);
        if (!a) return 1;
        const auto hops = static_cast<std::uint32_t>(ring->size());
        if (a->value != token_a.value || b->value != token_b.value || a->hops != hops || b->hops != hops) {
            std::fprintf(stderr,
                         "msgpass-comm-ring: node %u: tokens came back wrong: A %d after %u hops, B %d after %u "
                         "hops; expected A %d, B %d after %u hops\n",
                         self, a->value, a->hops, b->value, b->hops, token_a.value, token_b.value, hops);
            return 1;
        }
        std::printf("tokens arrived back on %u after %zu nodes: tag %d: %d, tag %d: %d\n", self, ring->size(),
                    token_a.tag, a->value, token_b.tag, b->value);
        return 0;
    }

    // B first, although A came first: A waits in the unexpected queue meanwhile.
    const auto b = recv_token(comm, prev, token_b);
    if (!b || !a_waits_unexpected(comm, prev)) return 1;
    const auto a = recv_token(comm, prev, token_a);
    if (!a) return 1;
    std::printf("tokens received on %u from %u, tag %d first: tag %d: %d, tag %d: %d\n", self, prev, token_b.tag,
                token_a.tag, a->value, token_b.tag, b->value);
    send_token(comm, next, token_a, *a);
    send_token(comm, next, token_b, *b);
    // The node may still hold the tokens for a late successor: hand them over first.
    if (!comm.flush(hop_timeout)) {
        std::fprintf(stderr, "msgpass-comm-ring: node %u: could not hand the tokens to %u within %llds\n", self, next,
                     static_cast<long long>(hop_timeout.count()));
        return 1;
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "msgpass-comm-ring: %s\n", e.what());
    return 2;
}
