// Replays a fuzz target's corpus without libFuzzer: every file of the directories
// (and files) named on the command line is given to LLVMFuzzerTestOneInput once.
// A crash, a sanitizer finding or a broken invariant ends the process with a
// non-zero status; with --min-accepted N it also fails when fewer than N inputs were
// accepted by the decoder (the corpus must keep reaching past its checks).
//   fuzz_<target>_replay [--min-accepted N] DIR_OR_FILE...
#include "fuzz.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::cerr << "replay: cannot read " << path << "\n";
        std::exit(2);
    }
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

int main(int argc, char** argv) {
    std::size_t min_accepted = 0;
    std::vector<std::filesystem::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--min-accepted" && i + 1 < argc) {
            min_accepted = std::stoul(argv[++i]);
        } else if (std::filesystem::is_directory(arg)) {
            for (const auto& entry : std::filesystem::directory_iterator(arg)) {
                if (entry.is_regular_file()) inputs.push_back(entry.path());
            }
        } else if (std::filesystem::is_regular_file(arg)) {
            inputs.emplace_back(arg);
        } else {
            std::cerr << "replay: " << arg << " is neither a file nor a directory\n";
            return 2;
        }
    }
    std::sort(inputs.begin(), inputs.end());
    if (inputs.empty()) {
        std::cerr << "replay: no inputs (an empty corpus replays nothing)\n";
        return 2;
    }
    for (const auto& path : inputs) {
        const auto bytes = read_file(path);
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    }
    std::cout << "replay: " << inputs.size() << " inputs, " << msgpass::fuzz::accepted_inputs
              << " accepted by the decoder\n";
    if (msgpass::fuzz::accepted_inputs < min_accepted) {
        std::cerr << "replay: fewer than " << min_accepted
                  << " inputs were accepted: the seeds no longer reach past the decoder's checks\n";
        return 1;
    }
    return 0;
}
