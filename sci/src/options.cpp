// The sci technology's configuration: the keys of the SCI context and of a machine,
// their ranges and the rules that tie them together (seed section 10).
#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

namespace msgpass::sci {

namespace {
constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
} // namespace

const std::vector<std::string>& Options::keys() {
    static const std::vector<std::string> list = {"max_outst_buffers", "recv_seg_id",       "recv_seg_size",
                                                  "header_area_size",  "recv_buffer_no",    "recv_buffer_size",
                                                  "use_send_pool",     "send_buffer_no",    "send_buffer_size",
                                                  "inject_error_rate", "inject_error_seed", "records"};
    return list;
}

void Options::set(const std::string& key, const config::Value& value) {
    if (key == "max_outst_buffers") {
        if (auto n = value.integer(1, 15)) max_outst_buffers = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_id") {
        if (auto n = value.integer(0, u32)) recv_seg_id = static_cast<std::uint32_t>(*n);
    } else if (key == "recv_seg_size") {
        if (auto n = value.size()) {
            recv_seg_size = *n;
            recv_seg_size_at = value.location();
        }
    } else if (key == "header_area_size") {
        if (auto n = value.size()) {
            if (*n % 128 != 0) {
                value.report("a multiple of 128 bytes (one 128-byte header per node)");
            } else {
                header_area_size = *n;
                header_area_size_at = value.location();
            }
        }
    } else if (key == "recv_buffer_no") {
        if (auto n = value.integer(1, u32)) {
            recv_buffer_no = static_cast<std::uint32_t>(*n);
            recv_buffer_no_at = value.location();
        }
    } else if (key == "recv_buffer_size") {
        if (auto n = value.size()) {
            if (*n % 64 != 0) {
                value.report("a multiple of 64 bytes");
            } else {
                recv_buffer_size = *n;
            }
        }
    } else if (key == "records") {
        if (auto b = value.boolean()) records = *b;
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
    std::ostringstream sum;
    sum << "header_area_size (" << header_area_size << ") + recv_buffer_no (" << recv_buffer_no
        << ") * recv_buffer_size (" << recv_buffer_size << ") = ";
    if (needed < 1.8e19L) {
        sum << static_cast<std::uint64_t>(needed);
    } else {
        sum << "more than 2^64";
    }
    if (recv_seg_size_at && static_cast<long double>(recv_seg_size) < needed) {
        section.report_key("recv_seg_size", "recv_seg_size >= " + sum.str(),
                           "recv_seg_size " + std::to_string(recv_seg_size));
    } else if (!recv_seg_size_at && needed > static_cast<long double>(config::max_size)) {
        // An unwritten recv_seg_size grows to hold them (size_for), up to the bound of a size.
        section.report_key("recv_seg_size", "a segment of at most 16GiB: " + sum.str() + " bytes",
                           "recv_seg_size not written");
    }
    if (use_send_pool &&
        static_cast<long double>(send_buffer_no) * send_buffer_size > static_cast<long double>(config::max_size)) {
        section.report_key("send_buffer_no", "a send pool (send_buffer_no * send_buffer_size) of at most 16GiB",
                           std::to_string(send_buffer_no) + " * " + std::to_string(send_buffer_size) + " bytes");
    }
}

void Options::size_for(std::uint64_t node_count, std::uint64_t partners, std::uint64_t peer_outstanding) {
    const std::uint64_t peers = partners;
    if (!header_area_size_at) header_area_size = std::max(header_area_size, header_size * node_count);
    if (!recv_buffer_no_at) {
        // At most the ack word's slot field: a partition past that must write its own
        // value (and is refused by the check that compares it with peer_outstanding).
        const std::uint64_t wanted = std::min<std::uint64_t>(peer_outstanding + peers, ack_slot_mask);
        recv_buffer_no = static_cast<std::uint32_t>(std::max<std::uint64_t>(recv_buffer_no, wanted));
    }
    if (!recv_seg_size_at) {
        const long double needed =
            static_cast<long double>(header_area_size) +
            static_cast<long double>(recv_buffer_no) * static_cast<long double>(recv_buffer_size);
        if (needed > static_cast<long double>(recv_seg_size))
            recv_seg_size = needed < 1.8e19L ? static_cast<std::uint64_t>(needed) : ~std::uint64_t{0};
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

Partners partners_of(const config::Configuration& c, const config::NodeConfig& node) {
    Partners p;
    for (const auto& other : c.nodes)
        if (other.id != node.id && c.sci_partners(node, other)) {
            ++p.count;
            p.outstanding += c.section<Options>(other).max_outst_buffers;
        }
    return p;
}

std::vector<Partners> partners_of_each(const config::Configuration& c) {
    // The sums of one machine (of the whole partition under sci); a node's partners
    // are its machine's nodes but itself.
    std::unordered_map<std::string, Partners> machines;
    std::vector<std::pair<Partners*, std::uint64_t>> own;
    own.reserve(c.nodes.size());
    const bool per_machine = c.technology == "auto";
    for (const auto& node : c.nodes) {
        auto& m = machines[per_machine ? config::machine_key(node) : std::string()];
        const std::uint64_t outstanding = c.section<Options>(node).max_outst_buffers;
        ++m.count;
        m.outstanding += outstanding;
        own.emplace_back(&m, outstanding);
    }
    std::vector<Partners> each;
    each.reserve(c.nodes.size());
    for (const auto& [m, outstanding] : own)
        each.push_back(Partners{m->count - 1, m->outstanding - outstanding});
    return each;
}

namespace {

// The defaults that follow the partition (Options::size_for): the top level for the
// node granted most, each node's own section exactly.
void size_for_partition(config::Configuration& c) {
    if (c.nodes.empty()) return; // a client: no nodes file
    std::uint64_t most_partners = 0;
    std::uint64_t most_outstanding = 0;
    const std::vector<Partners> each = partners_of_each(c);
    for (const auto& p : each) {
        most_partners = std::max(most_partners, p.count);
        most_outstanding = std::max(most_outstanding, p.outstanding);
    }
    c.edit_section<Options>().size_for(c.nodes.size(), most_partners, most_outstanding);
    for (std::size_t i = 0; i < c.nodes.size(); ++i)
        if (c.nodes[i].sections.find<Options>() != nullptr)
            c.nodes[i].sections.edit<Options>().size_for(c.nodes.size(), each[i].count, each[i].outstanding);
}

std::string nodes_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " node" : " nodes");
}

// The written values that do not fit the partition, checked when it is loaded rather
// than when the node starts: a key of the top level is reported once, not per node.
void written_sizes_fit_partition(const config::Configuration& c, const config::Reporter& reporter) {
    if (c.technology != "sci" && c.technology != "auto") return;
    const std::uint64_t n = c.nodes.size();
    std::set<std::string> reported;
    std::string prefix; // "nodes[i]." for a key written in node i of the nodes file
    const auto report = [&](const config::Location& at, const std::string& key, const std::string& expected,
                            const std::string& found) {
        const std::string path = (at.file == c.nodes_file.string() ? prefix : std::string()) + "sci." + key;
        if (reported.insert(key + "@" + at.str()).second) reporter.report(at, path, expected, found);
    };
    const Options defaults;
    const std::vector<Partners> each = partners_of_each(c);
    for (std::size_t i = 0; i < c.nodes.size(); ++i) {
        const auto& node = c.nodes[i];
        prefix = "nodes[" + std::to_string(i) + "].";
        const auto& o = c.section<Options>(node);
        if (o.header_area_size_at && o.header_area_size < header_size * n) {
            report(*o.header_area_size_at, "header_area_size",
                   "one " + std::to_string(header_size) + "-byte header per node of the nodes file: at least " +
                       std::to_string(header_size * n) + " bytes for " + nodes_text(n) +
                       " (or leave it out: it follows the node count)",
                   std::to_string(o.header_area_size));
        }
        const std::uint64_t others = each[i].outstanding;
        if (o.recv_buffer_no_at && o.recv_buffer_no < others) {
            report(*o.recv_buffer_no_at, "recv_buffer_no",
                   "at least the sum of the other nodes' max_outst_buffers: " + std::to_string(others) +
                       " slots for node " + std::to_string(node.id) + " of " + nodes_text(n) +
                       (c.technology == "auto" ? " (its machine's under auto)" : "") +
                       " (or leave it out: it follows the node count)",
                   std::to_string(o.recv_buffer_no));
        }
        if (o.recv_buffer_no_at && o.recv_buffer_no > ack_slot_mask) {
            report(*o.recv_buffer_no_at, "recv_buffer_no", "at most " + std::to_string(ack_slot_mask),
                   std::to_string(o.recv_buffer_no));
        }
        // Options::check compared a written recv_seg_size with the values as written
        // (defaults for the others); here only what the partition's sizing added.
        if (o.recv_seg_size_at) {
            const auto need = [&](std::uint64_t header, std::uint64_t slots) {
                return static_cast<long double>(header) + static_cast<long double>(slots) * o.recv_buffer_size;
            };
            const long double now = need(o.header_area_size, o.recv_buffer_no);
            const long double before = need(o.header_area_size_at ? o.header_area_size : defaults.header_area_size,
                                            o.recv_buffer_no_at ? o.recv_buffer_no : defaults.recv_buffer_no);
            const auto size = static_cast<long double>(o.recv_seg_size);
            if (size < now && size >= before && now < 1.8e19L) {
                report(*o.recv_seg_size_at, "recv_seg_size",
                       "at least header_area_size (" + std::to_string(o.header_area_size) + ") + recv_buffer_no (" +
                           std::to_string(o.recv_buffer_no) + ") * recv_buffer_size (" +
                           std::to_string(o.recv_buffer_size) +
                           ") = " + std::to_string(static_cast<std::uint64_t>(now)) + " bytes for " + nodes_text(n) +
                           " (or leave it out: it follows the node count)",
                       std::to_string(o.recv_seg_size));
            }
        }
    }
}

} // namespace

config::TechnologySchema schema() {
    return config::TechnologySchema("sci")
        .with_section(config::SectionType::of<Options>("a mapping of SCI parameters"))
        .with_node_scope()
        .with_machine_section(config::SectionType::of<MachineOptions>("a mapping with the SCI node_id"))
        .with_resolve(size_for_partition)
        .with_check([](const config::Configuration& c, const config::Reporter& reporter) {
            one_machine_per_sci_node_id(c, reporter);
            written_sizes_fit_partition(c, reporter);
        });
}

} // namespace msgpass::sci
