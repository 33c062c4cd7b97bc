// The configuration model: the network file (partition-wide settings, each
// technology's section, static groups) and the nodes file (machines and nodes), with
// the keys and defaults of section 10 of the SCI seed. load() validates everything and
// reports every problem at once, one line each, as
//   file:line:column: key.path: expected X, found Y
// Option structs map one-to-one onto YAML keys; their defaults are documented here
// and in docs/configuration.md. The sections of a technology (`sci:`, `tcp:`) are
// read by that technology's own options struct, registered with SchemaRegistry
// (msgpass/config/schema.hpp), and stored here by type: configuration.section<T>().
#pragma once

#include <msgpass/config/auth_key.hpp>
#include <msgpass/config/schema.hpp>
#include <msgpass/config/value.hpp>
#include <msgpass/error.hpp>
#include <msgpass/sizes.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::config {

using msgpass::GiB;
using msgpass::KiB;
using msgpass::MiB;

namespace detail {
// A default-constructed T, for a section nobody wrote.
template <typename T>
const T& defaults() {
    static const T value{};
    return value;
}
} // namespace detail

struct Machine {
    std::string name;
    Sections sections; // each technology's machine section (sci: the SCI node_id)
    Location where;

    // The machine's section of type T, or T's defaults.
    template <typename T>
    [[nodiscard]] const T& section() const {
        const T* own = sections.find<T>();
        return own != nullptr ? *own : detail::defaults<T>();
    }
};

struct NodeConfig {
    NodeId id = 0;
    std::string name; // default "node-<id>"
    std::string host = "localhost";
    std::uint16_t port = 0;           // 0: none (sci only)
    std::string machine;              // name of a Machine, or ""
    std::vector<std::string> command; // program and arguments for msgpass-run, or empty
    Sections sections;                // its own sections (node scope), resolved over the top level
    Location where;
};

// True when the two nodes are on the same machine: both name the same `machine`,
// or neither names one and they have the same host (localhost, 127.* and ::1 are
// one). technology auto uses sci between such nodes.
[[nodiscard]] bool same_machine(const NodeConfig& a, const NodeConfig& b) noexcept;
// The machine a node is on, as a key: same_machine(a, b) exactly when the keys of a and
// b are equal. Lets a partition be split into its machines in one pass, not by
// comparing every pair.
[[nodiscard]] std::string machine_key(const NodeConfig& node);

struct Configuration {
    std::string partition = "msgpass";            // scopes shared-memory names and handshakes
    std::string technology = "sci";               // a name registered with SchemaRegistry
    std::uint64_t max_message_size = 64 * MiB;    // larger sends throw MessageTooLarge
    std::chrono::milliseconds peer_timeout{1000}; // a silent dead peer is declared lost after this
    std::uint32_t send_queue_limit = 65536;       // queued messages per node before SendQueueFull
    // auth_key_file: the key every process of the partition proves it holds in the
    // tcp and udp handshakes (msgpass/config/auth_key.hpp); empty: none, anyone who
    // can reach a port and knows the partition's name may join (docs/security.md).
    // A relative path is taken from the network file's directory (from the working
    // directory when given by --set). load() reads and checks the file; code that
    // builds a Configuration sets auth_key itself.
    std::filesystem::path auth_key_file;
    std::optional<AuthKey> auth_key;
    Sections sections; // each registered technology's section
    std::map<std::string, std::vector<NodeId>> groups;
    std::vector<Machine> machines;
    std::vector<NodeConfig> nodes; // in file order
    std::filesystem::path network_file;
    std::filesystem::path nodes_file;

    // The node with this id, or nullptr.
    [[nodiscard]] const NodeConfig* find_node(NodeId id) const noexcept;
    // The node with this id; throws ConfigError naming the nodes file.
    [[nodiscard]] const NodeConfig& node(NodeId id) const;
    // The position of node id in the nodes file (its rank); throws as node().
    [[nodiscard]] std::size_t node_index(NodeId id) const;
    [[nodiscard]] const Machine* find_machine(const std::string& name) const noexcept;
    // True when b reaches a by emulated SCI (shared memory) under this configuration:
    // any two nodes when the technology is sci, only two nodes of the same machine
    // when it is auto (the others talk by tcp or udp). Sizes that follow the partition
    // (the sci receive slots) count these partners only.
    [[nodiscard]] bool sci_partners(const NodeConfig& a, const NodeConfig& b) const noexcept;
    // The members of a static group; throws ConfigError naming the known groups.
    [[nodiscard]] const std::vector<NodeId>& group(const std::string& name) const;

    // The top-level section of type T (sci::Options, ...), or T's defaults when none
    // was loaded (a Configuration built in code).
    template <typename T>
    [[nodiscard]] const T& section() const {
        const T* own = sections.find<T>();
        return own != nullptr ? *own : detail::defaults<T>();
    }
    // The section of type T that applies to a node: its own (node scope, resolved
    // over the top level when loaded), else the top-level one.
    template <typename T>
    [[nodiscard]] const T& section(const NodeConfig& node) const {
        const T* own = node.sections.find<T>();
        return own != nullptr ? *own : section<T>();
    }
    // The top-level section of type T to change (code that builds a configuration).
    template <typename T>
    T& edit_section() {
        return sections.edit<T>();
    }
};

// Reads and validates both files, then applies overrides ("key.path=value", as
// --set: e.g. "sci.recv_buffer_no=255", "partition=test", "nodes.3.port=0" is not
// supported: overrides address network-file keys). Throws ConfigError whose what()
// has one line per problem. Never crashes on any input. The technologies (the values
// of `technology` and their sections) are those of SchemaRegistry::instance() when
// it is called: a program linking msgpass::msgpass has the built-in ones registered
// before main (and msgpass::options() registers them too); one that links config
// alone calls msgpass::register_builtin_technologies() or registers its own first.
Configuration load(const std::filesystem::path& network_file, const std::filesystem::path& nodes_file,
                   const std::vector<std::string>& overrides = {});

// The same from in-memory YAML text (tests, embedded use); names are used in errors.
Configuration load_text(const std::string& network_yaml, const std::string& nodes_yaml,
                        const std::vector<std::string>& overrides = {},
                        const std::string& network_name = "network.yaml", const std::string& nodes_name = "nodes.yaml");

// The network file alone, for a client (a process in no nodes file: its peers are
// found at run time, NodeFactory::create_client): nodes, machines and groups are
// empty, and a group in the file is not checked against any nodes file.
Configuration load_network(const std::filesystem::path& network_file, const std::vector<std::string>& overrides = {});
Configuration load_network_text(const std::string& network_yaml, const std::vector<std::string>& overrides = {},
                                const std::string& network_name = "network.yaml");

// Parses a size with an optional unit: "8192", "8KiB", "16MiB", "1GiB", "8KB"
// (KB/MB/GB are taken as powers of 1024, as the seed means them). nullopt if malformed.
std::optional<std::uint64_t> parse_size(const std::string& text);

// Own node id: from_cli if set, else MSGPASS_NODE_ID, else the launcher's rank
// (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) taken as an index into the nodes
// file. Throws ConfigError when none is set or the id is not in the nodes file.
NodeId resolve_self_id(const Configuration& configuration, std::optional<NodeId> from_cli);

// Parsed command line of a msgpass program.
struct Options {
    Configuration configuration;
    NodeId self = 0;
    std::vector<std::string> rest; // arguments not understood, for the application
};

// --config FILE (default network.yaml), --nodes FILE (default nodes.yaml),
// --node-id N, --set key=value (repeatable), --help. Unknown options are left in
// rest. Throws ConfigError for malformed options or files.
Options parse_command_line(int argc, const char* const* argv);

} // namespace msgpass::config
