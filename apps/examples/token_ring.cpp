// BIP's token ring as a msgpass user writes it: the first node of the static group
// `ring` sends a token to its successor, every other node forwards what it receives
// from its predecessor, and the token comes back to the first node. No transport
// appears in the code; network.yaml chooses it. Start it on every node with
//   msgpass-run --config ring/network.yaml --nodes ring/nodes.yaml -- msgpass-token-ring
// Exits 0 when the token went round, 1 on a timeout or a wrong token, 2 on an error.
#include <msgpass/msgpass.hpp>

#include <chrono>
#include <cstdio>
#include <exception>

namespace {
constexpr int token_value = 333;
constexpr auto hop_timeout = std::chrono::seconds(10);
} // namespace

int main(int argc, char** argv) try {
    auto factory = msgpass::NodeFactory::create(msgpass::options(argc, argv)); // --config --nodes --node-id
    auto ring = factory->create_group("ring");                                 // static group from network.yaml
    const auto self = factory->self_id();
    auto next = factory->create_node(ring->next_after(self));
    auto prev = factory->create_node(ring->previous_before(self));

    if (self == ring->first()) {
        auto token = factory->create_buffer(sizeof(int));
        token->as<int>() = token_value;
        next->send(std::move(token));
        auto back = prev->receive(hop_timeout); // null on timeout
        if (!back) {
            std::fprintf(stderr, "msgpass-token-ring: node %u: the token did not come back within %llds\n", self,
                         static_cast<long long>(hop_timeout.count()));
            return 1;
        }
        std::printf("token arrived back on %u after %zu nodes: %d\n", self, ring->size(), back->as<int>());
        return back->as<int>() == token_value ? 0 : 1;
    }

    auto token = prev->receive(hop_timeout);
    if (!token) {
        std::fprintf(stderr, "msgpass-token-ring: node %u: no token from %u within %llds\n", self, prev->id(),
                     static_cast<long long>(hop_timeout.count()));
        return 1;
    }
    std::printf("token %d received on %u from %u\n", token->as<int>(), self, token->source());
    next->send(std::move(token)); // forward the received buffer as it is
    // send() never blocks: the token may still wait in the queue for a late peer.
    if (!next->flush(hop_timeout)) {
        std::fprintf(stderr, "msgpass-token-ring: node %u: could not hand the token to %u\n", self, next->id());
        return 1;
    }
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "msgpass-token-ring: %s\n", e.what());
    return 2;
}
