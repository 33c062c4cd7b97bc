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
// these defaults.
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

    // The keys, in the order of the seed.
    static const std::vector<std::string>& keys();
    void set(const std::string& key, const config::Value& value);
    // The segment holds its headers and slots; a send pool stays within 16GiB.
    void check(const config::Value& section) const;
};

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
