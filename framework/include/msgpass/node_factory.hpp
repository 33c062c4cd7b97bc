// NodeFactory: creates the nodes, buffers and groups of one technology (seed
// section 3), chosen by the configuration's `technology` key. Technologies register
// a maker under their name in the TechnologyRegistry; NodeFactory::create() looks
// the name up, so applications never name a technology in code.
#pragma once

#include <msgpass/buffer.hpp>
#include <msgpass/config.hpp>
#include <msgpass/group.hpp>
#include <msgpass/node.hpp>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace msgpass {

// Peers found at run time (BMI's addressing; docs/communicator.md, "Peers found at
// run time"). A process in no nodes file is a client: its factory has no node id of
// its own (no_node) and reaches servers by address (lookup). A server gives each
// client that reached it an id from first_runtime_id up, in the order they came,
// never reused; the nodes file's ids are 1 to 2^31-1, so the two never collide.
inline constexpr NodeId no_node = 0;
inline constexpr NodeId first_runtime_id = 0x80000000u;

class NodeFactory {
public:
    NodeFactory() = default;
    NodeFactory(const NodeFactory&) = delete;
    NodeFactory& operator=(const NodeFactory&) = delete;
    // The destructor flushes every node this factory made, with one deadline of the
    // configuration's peer_timeout for all of them, then writes one line on stderr
    // per node whose messages it could not hand over in that time (how many, to
    // which node: see kit::FactoryBase::close), tells the partners this process
    // ended cleanly where the technology can, and ends the transport.
    //
    // Lifetimes, the same on every technology (tests/conformance checks them):
    // - A Buffer may outlive its factory and its node: one from create_buffer and a
    //   received one stay valid, readable and writable, until dropped.
    // - A Node or a Group may be held past the factory's destruction, and dropping
    //   it then is safe. Its transport has ended with the factory: every call that
    //   moves messages (Node: send, send_shared, receive, flush; Group: send,
    //   receive, and add of a DynamicGroup) throws UsageError "<call> on node N
    //   (name) after its factory was destroyed ...", at once (a receive or flush
    //   with any timeout too), and a refused send leaves the buffer with the caller;
    //   id(), name(), stats(), members(), size() and remove() still answer. No use
    //   of such an object touches freed memory (kit/lifetime.hpp, checked by the
    //   conformance suite under AddressSanitizer).
    // - The destructor is not concurrent with calls on the factory's nodes and
    //   groups: stop the threads that use them first (a call running while the
    //   factory is destroyed is not covered by the above).
    virtual ~NodeFactory() = default;

    // Makes the factory of the configured technology for node self. Throws
    // UnknownTechnology (listing the known ones), ConfigError when self is not in
    // the nodes file, ResourceError when the local resources cannot be set up.
    // Defined in the msgpass umbrella library, which registers the built-in
    // technologies first.
    static std::unique_ptr<NodeFactory> create(const config::Configuration& configuration, NodeId self);
    // The same from parsed command-line options (msgpass::options()).
    static std::unique_ptr<NodeFactory> create(const config::Options& options);
    // The factory of a client: a process in no nodes file (configuration has no nodes,
    // config::load_network), whose peers are the servers it looks up. Throws
    // UsageError for a technology without run-time peers (sci; tcp, udp and auto
    // have them).
    static std::unique_ptr<NodeFactory> create_client(const config::Configuration& configuration);

    [[nodiscard]] virtual std::string_view technology() const noexcept = 0;
    [[nodiscard]] virtual NodeId self_id() const noexcept = 0;
    // The technology that reaches node id: technology() itself, except for a factory
    // made of several (auto: "sci" for a node on this machine, else "tcp" or "udp").
    // The communicator's single-copy path asks it (only sci peers share this host).
    [[nodiscard]] virtual std::string_view technology_of(NodeId id) const {
        (void)id;
        return technology();
    }

    // The node for a peer id of the nodes file; the same object on every call (the
    // factory keeps the list of nodes it created). Throws ConfigError for an id that
    // is not in the nodes file and UsageError for self_id(). Not concurrent with
    // receive() on the nodes it already made.
    virtual NodePtr create_node(NodeId id) = 0;

    // The node of the process that listens at address ("tcp://host:port",
    // msgpass/address.hpp), which need not be in this process's nodes file: its
    // handshake runs now (at most peer_timeout), so that a refusal (another
    // partition, no key or another key, a server that takes no clients) is thrown
    // here, as an Error naming the address and the reason; the same address gives the
    // same node again. UsageError for a malformed address or a technology without
    // run-time peers (the default).
    virtual NodePtr lookup(std::string_view address);
    // How many clients reached this process at run time so far: their ids are
    // first_runtime_id + 0 to count - 1. One atomic load; a communicator polls it to
    // take new clients in (BMI's address registration callback).
    [[nodiscard]] virtual std::uint32_t runtime_peers_seen() const noexcept { return 0; }
    // The node of such a client, or null when it is gone (it left, or was lost, and
    // was forgotten).
    virtual NodePtr runtime_peer(NodeId id) {
        (void)id;
        return nullptr;
    }
    // The application is done with run-time client id (BMI_set_info's drop: a
    // communicator calls it once the client was dropped, or lost, and nothing of it is
    // left to read): the technology closes its connection, discards what it still
    // holds of it and forgets it, so that its node object is freed once the caller's
    // references go; should it come back it is refused. No effect for another id (the
    // default: no run-time peers).
    virtual void forget_runtime_peer(NodeId id) { (void)id; }
    // How many run-time clients the technology forgot so far, for any reason (they
    // left or were lost and everything they sent was read, or forget_runtime_peer):
    // runtime_peer gives null for them from then on. One atomic load; a communicator
    // polls it to release what it holds of a client that left.
    [[nodiscard]] virtual std::uint32_t runtime_peers_forgotten() const noexcept { return 0; }

    // A buffer of size bytes to fill and send; from the technology's send pool when
    // it has one, else from the heap. Throws MessageTooLarge beyond max_message_size.
    virtual BufferPtr create_buffer(std::size_t size) = 0;

    // An empty group to fill at run time.
    virtual std::unique_ptr<DynamicGroup> create_group() = 0;
    // The static group of the configuration with this name; its member nodes are
    // created if needed. The same object on every call. Throws ConfigError for an
    // unknown name (listing the known ones).
    virtual std::shared_ptr<Group> create_group(const std::string& name) = 0;

    // Waits at most timeout (one deadline for all nodes) until every node created by
    // this factory has handed its queued messages over to its peer; true when every
    // queue is empty. nanoseconds::max() waits until they are. Any thread.
    virtual bool flush(std::chrono::nanoseconds timeout) = 0;

    // A token that expires when this factory is destroyed (at the very end of its
    // destructor, after the transport ended). What holds this factory's nodes and
    // groups, or the factory itself by reference, past that point checks it to refuse
    // a call with UsageError instead of reaching freed memory: the kit's nodes and
    // groups (kit::FactoryBound), comm::Communicator. Checking it is one atomic load
    // (weak_ptr::expired); like every call above, not concurrent with the destructor.
    [[nodiscard]] std::weak_ptr<const void> lifetime() const noexcept { return lifetime_; }

private:
    std::shared_ptr<const int> lifetime_ = std::make_shared<const int>(0);
};

// The technologies this process can make, by name. Thread-safe.
// What removing one leftover did.
enum class LeftoverRemoval {
    removed, // its owner was gone: it is removed (with dry_run: would be)
    in_use,  // a live process holds it: left alone
    absent,  // there is no such thing (any more)
    failed,  // it could not be opened or removed: the error says why
};

// What a technology leaves outside its processes (sci: shared-memory segments), and how
// tools list and remove it without including the technology's headers (msgpass-run
// --cleanup and at the end of a partition, msgpass-bench after its peers).
struct Leftovers {
    std::string where; // where they live, for messages ("/dev/shm")
    // Every leftover of a partition of the effective user. error: where cannot be read.
    std::function<std::vector<std::string>(std::string_view partition, std::error_code& error)> of_partition;
    // The leftovers of one node of a configuration.
    std::function<std::vector<std::string>(const config::Configuration&, NodeId node, std::error_code& error)> of_node;
    // Removes one unless a live process holds it; with dry_run only says what it would do.
    std::function<LeftoverRemoval(const std::string& name, std::error_code& error, bool dry_run)> remove;
};

class TechnologyRegistry {
public:
    using Maker = std::function<std::unique_ptr<NodeFactory>(const config::Configuration&, NodeId self)>;

    static TechnologyRegistry& instance();

    // Registers (or replaces) a technology. Returns true if it was new.
    bool add(const std::string& name, Maker maker);
    [[nodiscard]] bool contains(const std::string& name) const;
    // Names in alphabetical order.
    [[nodiscard]] std::vector<std::string> names() const;
    // Throws UnknownTechnology "unknown technology 'x' (known: a, b, c)".
    [[nodiscard]] std::unique_ptr<NodeFactory> create(const std::string& name,
                                                      const config::Configuration& configuration, NodeId self) const;
    // Registers (or replaces) what the technology name leaves behind.
    void add_leftovers(const std::string& name, Leftovers leftovers);
    // The leftovers of every technology that has some, by technology name.
    [[nodiscard]] std::vector<std::pair<std::string, Leftovers>> leftovers() const;

private:
    struct Impl;
    TechnologyRegistry();
    std::shared_ptr<Impl> impl_;
};

} // namespace msgpass
