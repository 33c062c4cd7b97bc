// msgpass-run -n N: a partition made on the fly for N processes on this host (MPI's
// mpirun -n): a fresh directory with a network file and a nodes file of N nodes
// (ids 1..N, names rank-0..rank-N-1, so rank r is the r-th node), a partition name
// no other run uses, and free ports on 127.0.0.1 for the technologies with sockets.
#pragma once

#include <filesystem>
#include <string>

namespace msgpass::run {

struct LocalPartition {
    std::filesystem::path directory; // removed by remove_local_partition
    std::filesystem::path network_file;
    std::filesystem::path nodes_file;
    std::string partition;
};

// Writes the files for n ranks of technology (sci, tcp, udp or auto) under TMPDIR.
// Throws UsageError for n out of 1..1024, std::runtime_error when the files or the
// ports cannot be had.
LocalPartition make_local_partition(int n, const std::string& technology);

// msgpass-run --technology T with a nodes file: a copy of the nodes file, in a fresh
// directory, in which every node without a `port` key (or with port 0) has a port free on 127.0.0.1
// now (UDP ports for udp, TCP ports otherwise), so that a partition written for sci
// on one host runs over tcp, udp or auto unchanged. network_file stays empty; the
// file's other keys are kept (comments are not). Throws std::runtime_error when the
// file cannot be read or written or the ports cannot be had.
LocalPartition with_free_ports(const std::filesystem::path& nodes_file, const std::string& technology);

// Removes the directory of the files (never throws).
void remove_local_partition(const LocalPartition& local) noexcept;

} // namespace msgpass::run
