// Micro-benchmarks of the sci hot paths (Google Benchmark; built with the tests,
// not registered with ctest): receive-slot and send-buffer allocation and release
// in sci::LocalNode, header signing and checking (msgpass/sci/protocol.hpp), and the
// gather copy of a FragmentList. Run: build-dir/tests/bench/micro_bench.
#include "local_node.hpp"

#include <msgpass/sci/options.hpp>

#include "../support/partition.hpp"

#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

namespace {

using namespace msgpass;

std::shared_ptr<sci::LocalNode> make_local_node(bool send_pool) {
    static int counter = 0;
    std::string partition = "micro-";
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(++counter);
    auto c = test::make_configuration("sci", partition, 2, [&](config::Configuration& c) {
        c.edit_section<sci::Options>().use_send_pool = send_pool;
    });
    return std::make_shared<sci::LocalNode>(sci::LocalNodeParameters::from(c, 1));
}

void RecvSlotAllocateRelease(benchmark::State& state) {
    auto node = make_local_node(false);
    for (auto _ : state) {
        auto slot = node->allocate_recv_slot();
        benchmark::DoNotOptimize(slot);
        if (slot) node->release_recv_slot(*slot);
    }
}
BENCHMARK(RecvSlotAllocateRelease);

void SendBufferFromPool(benchmark::State& state) {
    auto node = make_local_node(true);
    const auto size = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        auto b = node->allocate_send_buffer(size);
        benchmark::DoNotOptimize(b.get());
    }
}
BENCHMARK(SendBufferFromPool)->Arg(64)->Arg(8192);

void SendBufferFromHeap(benchmark::State& state) {
    auto node = make_local_node(false);
    const auto size = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        auto b = node->allocate_send_buffer(size);
        benchmark::DoNotOptimize(b.get());
    }
}
BENCHMARK(SendBufferFromHeap)->Arg(64)->Arg(8192);

// What a sender does per message (sign the notification) and what the receiver
// does to recognise it (compare the signature with the one expected for the round).
void HeaderSignAndCheck(benchmark::State& state) {
    const std::uint32_t salt = sci::salt_of(0x1234567u);
    std::uint64_t round = 0;
    std::uint32_t word = 0;
    std::uint64_t matched = 0;
    for (auto _ : state) {
        const auto sig = sci::signature(round, salt);
        word = sci::make_note(sig, (round & 1) != 0, static_cast<std::uint32_t>(round & sci::note_size_mask));
        benchmark::DoNotOptimize(word);
        matched += sci::sig_of(word) == sci::signature(round, salt) ? 1 : 0;
        ++round;
    }
    if (matched != round) state.SkipWithError("a signature did not check");
    state.SetItemsProcessed(static_cast<std::int64_t>(round));
}
BENCHMARK(HeaderSignAndCheck);

// FragmentList::copy_to over 4 fragments of size/4 bytes each.
void FragmentListGather(benchmark::State& state) {
    const auto size = static_cast<std::size_t>(state.range(0));
    FragmentList list;
    for (int i = 0; i < 4; ++i)
        list.append(std::make_unique<HeapBuffer>(size / 4));
    std::vector<std::byte> dst(list.size());
    for (auto _ : state) {
        benchmark::DoNotOptimize(list.copy_to(dst));
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * list.size()));
}
BENCHMARK(FragmentListGather)->Arg(64)->Arg(1024)->Arg(8192)->Arg(65536)->Arg(1 << 20);

} // namespace

BENCHMARK_MAIN();
