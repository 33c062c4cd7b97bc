// The configuration model: the network file (partition-wide settings, the top-level
// `sci` context, static groups) and the nodes file (machines and nodes), with the
// keys and defaults of section 10 of the SCI seed. load() validates everything and
// reports every problem at once, one line each, as
//   file:line:column: key.path: expected X, found Y
// Option structs map one-to-one onto YAML keys; their defaults are documented here
// and in docs/configuration.md.
#pragma once

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

// Where a value came from, for error messages ("network.yaml:12:5").
struct Location {
    std::string file;
    int line = 0;   // 1-based; 0 when unknown (defaults, --set)
    int column = 0; // 1-based
    [[nodiscard]] std::string str() const;
};

// The SCI context (seed section 10). Top level in the network file; a node's own
// `sci` context overrides single keys.
struct SciParameters {
    std::uint32_t max_outst_buffers = 1;      // outstanding sends of this node to each partner (1..15)
    std::uint32_t recv_seg_id = 8;            // segment identifier
    std::uint64_t recv_seg_size = 1 * MiB;    // whole local segment
    std::uint64_t header_area_size = 8 * KiB; // 128-byte headers, one per node
    std::uint32_t recv_buffer_no = 127;       // receive slots
    std::uint64_t recv_buffer_size = 8 * KiB; // bytes per receive slot
    bool use_send_pool = false;               // pre-allocated send buffers, else heap
    std::uint32_t send_buffer_no = 127;       // send pool buffers
    std::uint64_t send_buffer_size = 8 * KiB; // bytes per send pool buffer
    // msgpass extensions
    double inject_error_rate = 0.0;      // emulated transfer error probability
    std::uint64_t inject_error_seed = 1; // seed of the error injection
};

struct Machine {
    std::string name;
    std::optional<std::uint32_t> sci_node_id; // SCI node identifier; absent = invalid
    Location where;
};

struct NodeConfig {
    NodeId id = 0;
    std::string name; // default "node-<id>"
    std::string host = "localhost";
    std::uint16_t port = 0;           // 0: none (sci only)
    std::string machine;              // name of a Machine, or ""
    std::vector<std::string> command; // program and arguments for msgpass-run, or empty
    SciParameters sci;                // resolved: defaults < top level < node scope
    Location where;
};

struct Configuration {
    std::string partition = "msgpass";            // scopes shared-memory names and handshakes
    std::string technology = "sci";               // sci | tcp | udp | auto
    std::uint64_t max_message_size = 64 * MiB;    // larger sends throw MessageTooLarge
    std::chrono::milliseconds peer_timeout{1000}; // a silent dead peer is declared lost after this
    std::uint32_t send_queue_limit = 65536;       // queued messages per node before SendQueueFull
    SciParameters sci;                            // resolved top-level context
    std::map<std::string, std::vector<NodeId>> groups;
    std::vector<Machine> machines;
    std::vector<NodeConfig> nodes; // in file order
    std::filesystem::path network_file;
    std::filesystem::path nodes_file;

    // The node with this id, or nullptr.
    [[nodiscard]] const NodeConfig* find_node(NodeId id) const noexcept;
    // The node with this id; throws ConfigError naming the nodes file.
    [[nodiscard]] const NodeConfig& node(NodeId id) const;
    [[nodiscard]] const Machine* find_machine(const std::string& name) const noexcept;
    // The members of a static group; throws ConfigError naming the known groups.
    [[nodiscard]] const std::vector<NodeId>& group(const std::string& name) const;
};

// Reads and validates both files, then applies overrides ("key.path=value", as
// --set: e.g. "sci.recv_buffer_no=255", "partition=test", "nodes.3.port=0" is not
// supported: overrides address network-file keys). Throws ConfigError whose what()
// has one line per problem. Never crashes on any input.
Configuration load(const std::filesystem::path& network_file, const std::filesystem::path& nodes_file,
                   const std::vector<std::string>& overrides = {});

// The same from in-memory YAML text (tests, embedded use); names are used in errors.
Configuration load_text(const std::string& network_yaml, const std::string& nodes_yaml,
                        const std::vector<std::string>& overrides = {},
                        const std::string& network_name = "network.yaml", const std::string& nodes_name = "nodes.yaml");

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

namespace msgpass {
// Shorthand for applications: msgpass::options(argc, argv).
inline config::Options options(int argc, const char* const* argv) {
    return config::parse_command_line(argc, argv);
}
} // namespace msgpass
