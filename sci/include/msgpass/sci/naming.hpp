// The names of the shared-memory segments of the sci technology, written once: the
// technology creates and connects its segments by these names, msgpass-run removes
// them (--cleanup, and at the end of a partition), msgpass-bench and the tests find
// them. docs/sci-protocol.md ("Segment names") gives the rule.
#pragma once

#include <msgpass/config.hpp>
#include <msgpass/node_factory.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <system_error>
#include <vector>

namespace msgpass::sci {

// Where Linux keeps POSIX shared-memory objects: "/name" is the file "/dev/shm/name".
inline constexpr std::string_view shm_directory = "/dev/shm";

// The user part of segment names: the login name of uid, or "uid<N>" when uid has no
// passwd entry (a container started with a bare numeric user, say).
std::string segment_user(uid_t uid);
// segment_user of the effective user of this process.
std::string segment_user();

// "msgpass.<user>.<partition>.": the name of every segment of the partition is "/"
// followed by this.
std::string partition_prefix(std::string_view user, std::string_view partition);

// What a segment is named after. SISCI connects a remote segment by (SCI node id,
// segment id); in the emulation every process is an SCI node of its own, so the
// node id comes too (the nodes of one machine share its SCI node id and, by
// default, their recv_seg_id).
struct SegmentAddress {
    std::string user;
    std::string partition;
    std::optional<std::uint32_t> sci_node_id; // of the node's machine; none without one
    NodeId node = 0;
    std::uint32_t segment_id = 0; // the node's recv_seg_id
};

// "/msgpass.<user>.<partition>.sci<S>.node<N>.seg<G>" ("sci-none" for a node without
// an SCI node id), followed by "." and suffix when suffix is not empty (the regions
// of a node: "bcast", "large.<sender>").
std::string segment_name(const SegmentAddress& address, std::string_view suffix = {});

// The SCI node id of a node: its machine's node_id, none when the node names no
// machine or its machine has none. Throws ConfigError for a node not in the nodes file.
std::optional<std::uint32_t> sci_node_id_of(const config::Configuration& configuration, NodeId node);

// The address of a node's segment in a configuration (its partition, the SCI node id
// of its machine and its recv_seg_id), for user. Throws ConfigError when the node is
// not in the nodes file.
SegmentAddress segment_address(const config::Configuration& configuration, NodeId node,
                               const std::string& user = segment_user());

// "/dev/shm/name" for the segment "/name" (or "name").
std::string shm_path(std::string_view name);

// The segments (names with their leading '/') in directory whose name starts with
// prefix (given without '/'), sorted. error is set when the directory cannot be read.
std::vector<std::string> find_segments(std::string_view prefix, std::error_code& error,
                                       std::string_view directory = shm_directory);

// The segments of one node: its segment and the regions named after it (the names
// segment_name gives for this address, with any suffix).
std::vector<std::string> node_segments(const SegmentAddress& address, std::error_code& error,
                                       std::string_view directory = shm_directory);

// Every segment of a partition: find_segments(partition_prefix(user, partition)).
std::vector<std::string> partition_segments(std::string_view user, std::string_view partition, std::error_code& error);

// What remove_stale_segment did (the registry's word for any technology's leftovers).
using Removal = LeftoverRemoval;

// Removes a segment unless a live process owns it (kit::remove_unheld_shm: the owner
// of every sci segment holds an exclusive flock on it for its whole life). With
// dry_run it only tells what it would do.
Removal remove_stale_segment(const std::string& name, std::error_code& error, bool dry_run = false);

// What the sci technology leaves in /dev/shm, for the TechnologyRegistry: the
// segments of a partition or of one node, and their removal.
Leftovers leftovers();

} // namespace msgpass::sci
