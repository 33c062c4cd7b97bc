// The sci technology's configuration: the keys of the SCI context and of a machine,
// their ranges and the rules that tie them together (seed section 10).
#include <msgpass/sci/options.hpp>

#include <limits>
#include <map>
#include <sstream>

namespace msgpass::sci {

namespace {
constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
} // namespace

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {"max_outst_buffers", "recv_seg_id",      "recv_seg_size",
                                                  "header_area_size",  "recv_buffer_no",   "recv_buffer_size",
                                                  "use_send_pool",     "send_buffer_no",   "send_buffer_size",
                                                  "inject_error_rate", "inject_error_seed"};
    return list;
}

void Options::set(const std::string& key, const config::Value& value) {
    if (key == "max_outst_buffers") {
        if (auto n = value.integer(1, 15)) max_outst_buffers = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_id") {
        if (auto n = value.integer(0, u32)) recv_seg_id = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_size") {
        if (auto n = value.size()) recv_seg_size = *n;
    } else if (key == "header_area_size") {
        if (auto n = value.size()) {
            if (*n % 128 != 0) {
                value.report("a multiple of 128 bytes (one 128-byte header per node)");
            } else {
                header_area_size = *n;
            }
        }
    } else if (key == "recv_buffer_no") {
        if (auto n = value.integer(1, u32)) recv_buffer_no = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_buffer_size") {
        if (auto n = value.size()) {
            if (*n % 64 != 0) {
                value.report("a multiple of 64 bytes");
            } else {
                recv_buffer_size = *n;
            }
        }
    } else if (key == "use_send_pool") {
        if (auto b = value.boolean()) use_send_pool = *b;
    } else if (key == "send_buffer_no") {
        if (auto n = value.integer(1, u32)) send_buffer_no = static_cast<std::uint32_t>(*n);
    } else if (key == "send_buffer_size") {
        if (auto n = value.size()) send_buffer_size = *n;
    } else if (key == "inject_error_rate") {
        const std::string expected = "a probability from 0.0 to below 1.0";
        if (auto x = value.number(expected)) {
            if (*x < 0.0 || *x >= 1.0) {
                value.report(expected);
            } else {
                inject_error_rate = *x;
            }
        }
    } else if (key == "inject_error_seed") {
        if (auto n = value.integer(0, std::numeric_limits<std::uint64_t>::max())) inject_error_seed = *n;
    }
}

void Options::check(const config::Value& section) const {
    // Compared in long double: recv_buffer_no * recv_buffer_size can exceed 64 bits.
    const long double needed =
        static_cast<long double>(header_area_size) + static_cast<long double>(recv_buffer_no) * recv_buffer_size;
    if (static_cast<long double>(recv_seg_size) < needed) {
        std::ostringstream expected;
        expected << "recv_seg_size >= header_area_size (" << header_area_size << ") + recv_buffer_no ("
                 << recv_buffer_no << ") * recv_buffer_size (" << recv_buffer_size << ") = ";
        if (needed < 1.8e19L) {
            expected << static_cast<std::uint64_t>(needed);
        } else {
            expected << "more than 2^64";
        }
        section.report_key("recv_seg_size", expected.str(), "recv_seg_size " + std::to_string(recv_seg_size));
    }
    if (use_send_pool &&
        static_cast<long double>(send_buffer_no) * send_buffer_size > static_cast<long double>(config::max_size)) {
        section.report_key("send_buffer_no", "a send pool (send_buffer_no * send_buffer_size) of at most 16GiB",
                           std::to_string(send_buffer_no) + " * " + std::to_string(send_buffer_size) + " bytes");
    }
}

const std::vector<std::string>& MachineOptions::keys() {
    static const std::vector<std::string> list = {"node_id"};
    return list;
}

void MachineOptions::set(const std::string& key, const config::Value& value) {
    if (key == "node_id") {
        if (auto n = value.integer(0, u32, "an SCI node id")) node_id = static_cast<std::uint32_t>(*n);
        node_id_at = value.location();
    }
}

namespace {

// SISCI addresses a segment by (SCI node id, segment id), and the segment names carry
// the machine's SCI node id (naming.hpp): two machines must not share one.
void one_machine_per_sci_node_id(const config::Configuration& c, const config::Reporter& reporter) {
    std::map<std::uint32_t, const config::Machine*> first;
    for (const auto& m : c.machines) {
        const auto& options = m.section<MachineOptions>();
        if (!options.node_id) continue;
        const auto [it, fresh] = first.emplace(*options.node_id, &m);
        if (fresh) continue;
        const auto& earlier = it->second->section<MachineOptions>();
        std::string id = "'"; // appended, not "'" + ...: GCC 12 warns falsely on that insert
        id += std::to_string(*options.node_id);
        id += "'";
        reporter.report(options.node_id_at, "machines." + m.name + ".sci.node_id",
                        "an SCI node id of one machine only (machine '" + it->second->name + "' has it, at " +
                            earlier.node_id_at.str() + ")",
                        id);
    }
}

} // namespace

config::TechnologySchema schema() {
    return config::TechnologySchema("sci")
        .with_section(config::SectionType::of<Options>("a mapping of SCI parameters"))
        .with_node_scope()
        .with_machine_section(config::SectionType::of<MachineOptions>("a mapping with the SCI node_id"))
        .with_check(one_machine_per_sci_node_id);
}

} // namespace msgpass::sci
