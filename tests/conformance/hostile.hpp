// A peer that breaks the protocol, for the conformance suite: node.hpp's receive()
// "throws ... Error, once, when the peer broke the protocol (a length beyond
// max_message_size, ...)". Well-behaved nodes of this library never send such
// things, so each technology provides here (hostile.cpp) a peer that does, in its
// own way:
//   sci   node 2's real factory, then correctly signed words forged in node 2's
//         header of the receiver's segment (as tests/sci SciHostilePeer does);
//   tcp   a raw socket that says a correct Hello as node 2, then writes raw frames
//         (auto: node 2 is on another machine, so this is tcp too);
//   udp   a raw socket bound to node 2's port that says hello, learns the
//         receiver's incarnation from its welcome, then sends raw datagrams.
// Each first delivers one good message, which the receiver takes, so that the
// break comes on a link that works.
#pragma once

#include <msgpass/msgpass.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace msgpass::test {

enum class Break {
    oversized, // a whole message announced (and sent) beyond the receiver's max_message_size
    malformed, // something the protocol does not have (sci: a size word beyond the slot; tcp:
               // a frame of an unknown type; udp: a datagram of an unknown type)
};

inline const char* name_of(Break how) {
    return how == Break::oversized ? "a message beyond max_message_size" : "a malformed frame";
}

class HostilePeer {
public:
    HostilePeer() = default;
    HostilePeer(const HostilePeer&) = delete;
    HostilePeer& operator=(const HostilePeer&) = delete;
    virtual ~HostilePeer() = default;

    // The good message is taken (by the receiver's node for this peer) before it returns.
    virtual void break_protocol(Break how) = 0;
    // Whether the receiver reports a break by throwing from receive(): true on sci and
    // tcp (a link or a connection is dropped); false on udp, where a datagram anyone
    // can forge is dropped and counted (udp::DatagramStats), and the peer's real
    // datagrams keep flowing.
    [[nodiscard]] virtual bool reported_by_receive() const = 0;
    // What the receiver's report must say (in the exception's text).
    [[nodiscard]] virtual std::string named(Break how) const = 0;
    // udp: the datagrams the receiver refused since break_protocol (bad type or bad
    // fragment); 0 elsewhere.
    [[nodiscard]] virtual std::uint64_t refused() const { return 0; }
};

// Node `self` of configuration c, breaking the protocol toward node `victim`, whose
// factory runs in this process (`victim_factory`). Contact is made, and the good
// message taken from victim_factory.create_node(self), before it returns; fails the
// current test (and returns null) when that does not work.
std::unique_ptr<HostilePeer> make_hostile_peer(const config::Configuration& c, NodeId self, NodeId victim,
                                               NodeFactory& victim_factory);

} // namespace msgpass::test
