// A user's program built against the installed msgpass (tests/install): it uses the
// umbrella header, buffers and the configuration loader, and references
// NodeFactory::create so that linking proves every library of the package is there
// and in a working order. Prints one line the install test checks.
#include <msgpass/msgpass.hpp>

#include <cstdio>
#include <cstring>
#include <memory>

int main(int argc, char**) try {
    auto header = std::make_unique<msgpass::HeapBuffer>(8);
    std::memset(header->data(), 0xab, header->size());
    std::byte payload[24] = {};
    msgpass::FragmentList message;
    message.append(std::move(header));
    message.append_view(payload);

    const auto configuration =
        msgpass::config::load_text("technology: sci\ngroups:\n  pair: [1, 2]\n", "nodes:\n  - {id: 1}\n  - {id: 2}\n");
    // Never called by the test (it would create shared memory); linked all the same.
    if (argc > 1) (void)msgpass::NodeFactory::create(configuration, 1);

    std::printf("msgpass outside: fragments=%zu size=%zu nodes=%zu technology=%s\n", message.fragments().size(),
                message.size(), configuration.nodes.size(), configuration.technology.c_str());
    return 0;
} catch (const msgpass::Error& e) {
    std::fprintf(stderr, "outside: %s\n", e.what());
    return 1;
}
