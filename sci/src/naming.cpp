// The naming rule of the sci segments (msgpass/sci/naming.hpp).
#include <msgpass/sci/naming.hpp>
#include <msgpass/sci/options.hpp>

#include <msgpass/kit/stats_page.hpp>

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <pwd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

namespace msgpass::sci {

std::string segment_user(uid_t uid) {
    // One user naming for every shared-memory object of msgpass (segments, statistics
    // pages), so that msgpass-run --cleanup finds both under the same name.
    return kit::stats_user(uid);
}

std::string segment_user() {
    return segment_user(::geteuid());
}

std::string partition_prefix(std::string_view user, std::string_view partition) {
    std::string prefix = "msgpass.";
    prefix += user;
    prefix += '.';
    prefix += partition;
    prefix += '.';
    return prefix;
}

std::string segment_name(const SegmentAddress& address, std::string_view suffix) {
    std::string name = "/"; // appended, not "/" + ...: GCC 12 warns falsely on that insert
    name += partition_prefix(address.user, address.partition);
    name += address.sci_node_id ? "sci" + std::to_string(*address.sci_node_id) : std::string("sci-none");
    name += ".node";
    name += std::to_string(address.node);
    name += ".seg";
    name += std::to_string(address.segment_id);
    if (!suffix.empty()) {
        name += '.';
        name += suffix;
    }
    return name;
}

std::optional<std::uint32_t> sci_node_id_of(const config::Configuration& configuration, NodeId node) {
    const auto& n = configuration.node(node);
    if (n.machine.empty()) return std::nullopt;
    const auto* machine = configuration.find_machine(n.machine);
    return machine != nullptr ? machine->section<MachineOptions>().node_id : std::nullopt;
}

SegmentAddress segment_address(const config::Configuration& configuration, NodeId node, const std::string& user) {
    return SegmentAddress{user, configuration.partition, sci_node_id_of(configuration, node), node,
                          configuration.section<Options>(configuration.node(node)).recv_seg_id};
}

std::string shm_path(std::string_view name) {
    if (name.starts_with('/')) name.remove_prefix(1);
    std::string path(shm_directory);
    path += '/';
    path += name;
    return path;
}

std::vector<std::string> find_segments(std::string_view prefix, std::error_code& error, std::string_view directory) {
    error.clear();
    std::vector<std::string> names;
    for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with(prefix)) names.push_back("/" + name);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<std::string> node_segments(const SegmentAddress& address, std::error_code& error,
                                       std::string_view directory) {
    const std::string base = segment_name(address);
    auto names = find_segments(std::string_view(base).substr(1), error, directory);
    std::erase_if(names,
                  [&](const std::string& name) { return name.size() > base.size() && name[base.size()] != '.'; });
    return names;
}

std::vector<std::string> partition_segments(std::string_view user, std::string_view partition, std::error_code& error) {
    return find_segments(partition_prefix(user, partition), error);
}

Removal remove_stale_segment(const std::string& name, std::error_code& error, bool dry_run) {
    return kit::remove_unheld_shm(name, error, dry_run);
}

Leftovers leftovers() {
    Leftovers l;
    l.where = std::string(shm_directory);
    l.of_partition = [](std::string_view partition, std::error_code& error) {
        return partition_segments(segment_user(), partition, error);
    };
    l.of_node = [](const config::Configuration& configuration, NodeId node, std::error_code& error) {
        return node_segments(segment_address(configuration, node), error);
    };
    l.remove = remove_stale_segment;
    return l;
}

} // namespace msgpass::sci
