// The configuration of the sci technology (seed section 10): the SCI context, at the
// top of the network file (`sci:`) for every node and in a node of the nodes file
// for single keys of that node, and a machine's SCI node_id. The structs read their
// own keys (config::SectionOptions); register_technology() registers them under the
// name "sci" (schema()). The sci code reads them as
//   configuration.section<sci::Options>(node)           the context of a node
//   machine.section<sci::MachineOptions>().node_id
#pragma once

#include <msgpass/config.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::sci {

// The SCI context. A node's own keys override those of the top level, which override
// these defaults. header_area_size, recv_buffer_no and recv_seg_size not written in
// the files follow the partition (size_for); these are their floors.
struct Options {
    std::uint32_t max_outst_buffers = 1;              // outstanding sends of this node to each partner (1..15)
    std::uint32_t recv_seg_id = 8;                    // segment identifier
    std::uint64_t recv_seg_size = 1 * config::MiB;    // whole local segment
    std::uint64_t header_area_size = 8 * config::KiB; // 128-byte headers, one per node
    std::uint32_t recv_buffer_no = 127;               // receive slots
    std::uint64_t recv_buffer_size = 8 * config::KiB; // bytes per receive slot
    bool use_send_pool = false;                       // pre-allocated send buffers, else heap
    std::uint32_t send_buffer_no = 127;               // send pool buffers
    std::uint64_t send_buffer_size = 8 * config::KiB; // bytes per send pool buffer
    // msgpass extensions
    double inject_error_rate = 0.0;      // emulated transfer error probability
    std::uint64_t inject_error_seed = 1; // seed of the error injection
    // Small messages sent while the queue is empty go as records of an open slot
    // (docs/sci-protocol.md, "Records of an open slot"). Off by default: measured on
    // the loaded 2-CPU VM it helped the Buffer API's 8 B stream and slowed 64-256 B
    // and the Buffer-free path (docs/benchmarks.md, seventh session). A receiver
    // takes records whatever its own setting.
    bool records = false;

    // Where header_area_size, recv_buffer_no and recv_seg_size were written (file or
    // --set); unset: not written, the value follows the partition.
    std::optional<config::Location> header_area_size_at;
    std::optional<config::Location> recv_buffer_no_at;
    std::optional<config::Location> recv_seg_size_at;

    // The keys, in the order of the seed.
    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
    // The segment holds its headers and slots; a send pool stays within 16GiB.
    void check(const config::Value& section) const;
    // Raises the keys that were not written to what a node of a partition of
    // node_count nodes needs, of which `partners` reach it by sci (all the others
    // under technology sci, those of its machine under auto) and may have
    // peer_outstanding messages towards it (the sum of their max_outst_buffers);
    // written keys stay as given. Never lowers a value, so applying it twice changes
    // nothing. load() applies it (the schema's resolve rule); a Configuration built
    // in code keeps what it sets.
    //   header_area_size = max(8 KiB, 128 x node_count)         (a header per node of the file)
    //   recv_buffer_no   = max(127, peer_outstanding + partners) (a spare slot per partner)
    //   recv_seg_size    = max(1 MiB, header_area_size + recv_buffer_no x recv_buffer_size)
    void size_for(std::uint64_t node_count, std::uint64_t partners, std::uint64_t peer_outstanding);
};

// The nodes that reach a node by sci (config::Configuration::sci_partners: every
// other node under technology sci, those of its machine under auto) and the sum of
// their max_outst_buffers: the receive slots the node must be able to grant them.
struct Partners {
    std::uint64_t count = 0;
    std::uint64_t outstanding = 0;
};
[[nodiscard]] Partners partners_of(const config::Configuration& c, const config::NodeConfig& node);
// partners_of for every node of c.nodes, in their order, in one pass over the nodes
// (not one per node: a file of thousands of nodes loads in linear time).
[[nodiscard]] std::vector<Partners> partners_of_each(const config::Configuration& c);

// The SCI context of a machine (machines.yaml of the seed).
struct MachineOptions {
    std::optional<std::uint32_t> node_id; // the SCI node identifier; absent = invalid
    config::Location node_id_at;          // where it was written, for the one-machine-per-id rule

    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
};

// "sci": Options at the top level and node scope, MachineOptions in machines.
config::TechnologySchema schema();

} // namespace msgpass::sci
