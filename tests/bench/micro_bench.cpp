// Micro-benchmarks of the sci hot paths (Google Benchmark; built with the tests,
// not registered with ctest): receive-slot and send-buffer allocation and release
// in sci::Transport, the pooled pieces behind them (the per-thread block cache of
// received-buffer objects, the lock-free send pool, small heap buffers), batch
// encoding and checking (batch.hpp), the whole path of a small message in one
// thread, header signing and checking (msgpass/sci/protocol.hpp), the gather
// copy of a FragmentList, and the implementer kit's buffer pool that tcp and udp
// take every message from (small ones made by one thread and dropped by another),
// one snapshot of a factory's statistics page, the send and receive locks
// (FastLock), alone and with two threads taking turns, and a receive that finds
// nothing (a turn of a waiting receive's spin).
// Run: build-dir/tests/bench/micro_bench.
#include "transport.hpp"

#include "batch.hpp"
#include "send_pool.hpp"
#include <msgpass/kit/block_cache.hpp>
#include <msgpass/kit/factory_base.hpp>
#include <msgpass/kit/fast_lock.hpp>
#include <msgpass/kit/pool.hpp>
#include <msgpass/tcp/frame.hpp>

#include <msgpass/msgpass.hpp>
#include <msgpass/sci/options.hpp>

#include "../support/partition.hpp"

#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

namespace {

using namespace msgpass;

std::shared_ptr<sci::Transport> make_local_node(bool send_pool) {
    static int counter = 0;
    std::string partition = "micro-";
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(++counter);
    auto c = test::make_configuration("sci", partition, 2, [&](config::Configuration& c) {
        c.edit_section<sci::Options>().use_send_pool = send_pool;
    });
    return std::make_shared<sci::Transport>(sci::TransportParameters::from(c, 1));
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

// The object of a received buffer: from the calling thread's block cache and back
// (what RecvBuffer's operator new and delete do), beside the heap it replaced.
void RecvBufferObjectFromCache(benchmark::State& state) {
    using Cache = kit::BlockCache<64>;
    for (auto _ : state) {
        void* p = Cache::get();
        benchmark::DoNotOptimize(p);
        Cache::put(p);
    }
}
BENCHMARK(RecvBufferObjectFromCache);

void RecvBufferObjectFromHeap(benchmark::State& state) {
    for (auto _ : state) {
        void* p = ::operator new(64);
        benchmark::DoNotOptimize(p);
        ::operator delete(p);
    }
}
BENCHMARK(RecvBufferObjectFromHeap);

// A batch's worth of objects taken by one thread (the receiver) and dropped by
// another (a worker): chains of blocks go back through the depot.
void RecvBufferObjectsDroppedByAnotherThread(benchmark::State& state) {
    using Cache = kit::BlockCache<64>;
    constexpr std::size_t batch = 256;
    std::vector<void*> blocks(batch);
    for (auto _ : state) {
        for (auto& p : blocks)
            p = Cache::get();
        std::thread([&] {
            for (void* p : blocks)
                Cache::put(p);
        }).join();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
BENCHMARK(RecvBufferObjectsDroppedByAnotherThread);

// sci::SendPool directly: one buffer out and back (two compare-exchanges).
void SendPoolGetPut(benchmark::State& state) {
    auto* pool = sci::SendPool::create(127, 8192);
    for (auto _ : state) {
        auto b = pool->get(64);
        benchmark::DoNotOptimize(b.get());
    }
    pool->close();
}
BENCHMARK(SendPoolGetPut);

// Two threads take buffers from one pool and drop them (the queue's compare-exchanges
// under contention).
void SendPoolGetPutTwoThreads(benchmark::State& state) {
    static sci::SendPool* pool = nullptr;
    if (state.thread_index() == 0) pool = sci::SendPool::create(127, 8192);
    for (auto _ : state) {
        auto b = pool->get(64);
        benchmark::DoNotOptimize(b.get());
    }
    if (state.thread_index() == 0) pool->close(); // ends when the other thread's last buffer is back
}
BENCHMARK(SendPoolGetPutTwoThreads)->Threads(2);

// The send lock of a message: taken and let go by one thread.
void FastLockAlone(benchmark::State& state) {
    kit::FastLock lock;
    std::uint64_t n = 0;
    for (auto _ : state) {
        lock.lock();
        benchmark::DoNotOptimize(++n);
        lock.unlock();
    }
}
BENCHMARK(FastLockAlone);

// Two threads taking one lock in turns (two senders to one node).
void FastLockTwoThreads(benchmark::State& state) {
    static kit::FastLock lock;
    static std::uint64_t n = 0;
    for (auto _ : state) {
        lock.lock();
        benchmark::DoNotOptimize(++n);
        lock.unlock();
    }
}
BENCHMARK(FastLockTwoThreads)->Threads(2);

// A heap send buffer of 64 bytes whose object and bytes share one cached block.
void SmallHeapBuffer(benchmark::State& state) {
    for (auto _ : state) {
        auto b = sci::small_heap_buffer(64);
        benchmark::DoNotOptimize(b.get());
    }
}
BENCHMARK(SmallHeapBuffer);

// What a sender does for a batch of count messages of size bytes: plan it, write
// its header and lengths, and copy the messages into an 8 KiB slot.
void BatchEncode(benchmark::State& state) {
    const auto count = static_cast<std::size_t>(state.range(0));
    const auto size = static_cast<std::size_t>(state.range(1));
    std::vector<std::vector<std::byte>> messages(count, std::vector<std::byte>(size, std::byte{7}));
    std::vector<std::byte> slot(8192);
    std::vector<std::uint32_t> table;
    auto size_of = [&](std::uint32_t k) -> std::uint64_t { return messages[k].size(); };
    std::uint64_t number = 0;
    for (auto _ : state) {
        const auto plan = sci::plan_batch(messages.size(), slot.size(), size_of);
        std::uint64_t at = sci::batch_data_offset(plan.count);
        for (std::uint32_t k = 0; k < plan.count; ++k) {
            std::memcpy(slot.data() + at, messages[k].data(), messages[k].size());
            at += sci::batch_align_up(messages[k].size());
        }
        sci::write_batch_table(table, number++, plan, size_of);
        std::memcpy(slot.data(), table.data(), table.size() * sizeof(std::uint32_t));
        benchmark::ClobberMemory();
        if (plan.count != count) state.SkipWithError("the batch did not take every message");
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BatchEncode)->Args({8, 64})->Args({100, 64})->Args({400, 8})->Args({7, 1024});

// What a receiver does before it hands out the first message of a batch: check the
// header and every length (check_batch), then find each message.
void BatchDecode(benchmark::State& state) {
    const auto count = static_cast<std::size_t>(state.range(0));
    const auto size = static_cast<std::size_t>(state.range(1));
    std::vector<std::byte> slot(8192);
    std::vector<std::uint32_t> table;
    auto size_of = [&](std::uint32_t) -> std::uint64_t { return size; };
    const auto plan = sci::plan_batch(count, slot.size(), size_of);
    sci::write_batch_table(table, 5, plan, size_of);
    std::memcpy(slot.data(), table.data(), table.size() * sizeof(std::uint32_t));
    std::vector<std::uint32_t> lengths;
    for (auto _ : state) {
        const auto why = sci::check_batch(slot.data(), plan.size, 5, 1 << 20, lengths);
        if (!why.empty()) state.SkipWithError(why.c_str());
        std::uint64_t at = sci::batch_data_offset(lengths.size());
        for (const auto length : lengths) {
            benchmark::DoNotOptimize(slot.data() + at);
            at = sci::batch_align_up(at + length);
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BatchDecode)->Args({8, 64})->Args({100, 64})->Args({400, 8})->Args({7, 1024});

// The whole data path of a small message, from create_buffer to the receiver's
// drop, in one thread: node 1 sends a burst of 256 messages to node 2 (7
// outstanding, the send pool, as msgpass-bench), moves its queue, and node 2
// receives, reads and drops them; CPU time per message, without the second CPU
// and the scheduler, which the stream of msgpass-bench measures too.
void SciStreamOneThread(benchmark::State& state) {
    register_builtin_technologies();
    const auto size = static_cast<std::size_t>(state.range(0));
    constexpr std::size_t burst = 256;
    std::string partition = "micro-stream-"; // (test::unique_partition trips GCC 12's -Wrestrict at -O3)
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(size);
    const test::SegmentCleanup segments(partition);
    auto c = test::make_configuration("sci", segments.partition(), 2, [](config::Configuration& c) {
        c.send_queue_limit = 1024;
        c.edit_section<sci::Options>().max_outst_buffers = 7;
        c.edit_section<sci::Options>().use_send_pool = true;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    std::uint64_t seq = 0;
    std::uint64_t sum = 0;
    for (auto _ : state) {
        for (std::size_t i = 0; i < burst; ++i) {
            auto m = a->create_buffer(size);
            std::memcpy(m->single()->data(), &seq, sizeof seq);
            ++seq;
            to_b->send(std::move(m));
        }
        for (std::size_t got = 0; got < burst;) {
            (void)to_b->flush(std::chrono::nanoseconds(0));
            while (auto m = from_a->receive()) {
                sum += static_cast<std::uint64_t>(m->single()->data()[0]);
                ++got;
            }
        }
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * burst));
}
BENCHMARK(SciStreamOneThread)->Arg(8)->Arg(64)->Arg(256)->Arg(1024);

// SciStreamOneThread through the Buffer-free path: send_bytes from one array, each
// message lent by receive_view and released at once (msgpass-bench --api bytes).
void SciBytesOneThread(benchmark::State& state) {
    register_builtin_technologies();
    const auto size = static_cast<std::size_t>(state.range(0));
    constexpr std::size_t burst = 256;
    std::string partition = "micro-bytes-"; // (test::unique_partition trips GCC 12's -Wrestrict at -O3)
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(size);
    const test::SegmentCleanup segments(partition);
    auto c = test::make_configuration("sci", segments.partition(), 2, [](config::Configuration& c) {
        c.send_queue_limit = 1024;
        c.edit_section<sci::Options>().max_outst_buffers = 7;
        c.edit_section<sci::Options>().use_send_pool = true;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    std::vector<std::byte> message(size);
    std::uint64_t seq = 0;
    std::uint64_t sum = 0;
    const auto part = state.range(1); // 0: both ends timed; 1: the sends only; 2: the receives only
    for (auto _ : state) {
        if (part == 2) state.PauseTiming();
        for (std::size_t i = 0; i < burst; ++i) {
            std::memcpy(message.data(), &seq, sizeof seq);
            ++seq;
            to_b->send_bytes(message);
        }
        if (part == 2) state.ResumeTiming();
        if (part == 1) state.PauseTiming();
        for (std::size_t got = 0; got < burst;) {
            (void)to_b->flush(std::chrono::nanoseconds(0));
            while (auto m = from_a->receive_view()) {
                sum += static_cast<std::uint64_t>(m.data()[0]);
                ++got;
            }
        }
        if (part == 1) state.ResumeTiming();
    }
    benchmark::DoNotOptimize(sum);
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * burst));
}
BENCHMARK(SciBytesOneThread)->ArgsProduct({{8, 64, 256, 1024}, {0}})->ArgsProduct({{64}, {1, 2}});

// A receive that finds nothing (arg 0: receive_view, 1: receive): what each turn of
// a waiting receive's spin costs.
void SciEmptyPoll(benchmark::State& state) {
    register_builtin_technologies();
    std::string partition = "micro-empty-"; // (test::unique_partition trips GCC 12's -Wrestrict at -O3)
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(state.range(0));
    const test::SegmentCleanup segments(partition);
    auto c = test::make_configuration("sci", segments.partition(), 2, [](config::Configuration&) {});
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    const std::uint64_t one = 1;
    to_b->send_bytes(std::as_bytes(std::span(&one, 1))); // both introduced
    while (!from_a->receive_view()) {
    }
    for (auto _ : state) {
        if (state.range(0) == 0) {
            benchmark::DoNotOptimize(from_a->receive_view());
        } else {
            benchmark::DoNotOptimize(from_a->receive());
        }
    }
}
BENCHMARK(SciEmptyPoll)->Arg(0)->Arg(1);

// One snapshot of the statistics page (msgpass/kit/stats_page.hpp) of a factory
// with arg peers, as its publisher thread writes one every 200 ms: the nodes'
// stats(), the seqlocked page write and the heartbeat. The data path pays nothing;
// this is the publisher's own CPU time (divide by 200 ms for its share of a CPU).
void StatsPublish(benchmark::State& state) {
    register_builtin_technologies();
    const auto peers = static_cast<int>(state.range(0));
    std::string partition = "micro-stats-"; // (test::unique_partition trips GCC 12's -Wrestrict at -O3)
    partition += std::to_string(::getpid());
    partition += '-';
    partition += std::to_string(peers);
    const test::SegmentCleanup segments(partition);
    const auto c = test::make_configuration("sci", segments.partition(), peers + 1);
    auto factory = NodeFactory::create(c, 1);
    for (int id = 2; id <= peers + 1; ++id)
        (void)factory->create_node(static_cast<NodeId>(id));
    auto& base = dynamic_cast<kit::FactoryBase&>(*factory);
    if (base.stats_page().empty()) state.SkipWithError("no statistics page (MSGPASS_STATS=0?)");
    for (auto _ : state)
        base.publish_stats();
}
BENCHMARK(StatsPublish)->Arg(1)->Arg(23);

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

// kit::BufferPool as tcp and udp use it: a batch of small messages made by the
// sending thread and dropped by another (the background thread, once acknowledged),
// beside the same with the heap (what InlineBuffer took before the block cache).
template <bool Cached>
void SmallMessagesDroppedByAnotherThread(benchmark::State& state) {
    auto pool = std::make_shared<kit::BufferPool>();
    const auto size = static_cast<std::size_t>(state.range(0));
    constexpr std::size_t batch = 256;
    std::vector<BufferPtr> messages(batch);
    for (auto _ : state) {
        for (auto& m : messages)
            m = Cached ? pool->make(size) : std::make_unique<HeapBuffer>(size);
        std::thread([&] {
            for (auto& m : messages)
                m.reset();
        }).join();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * batch));
}
BENCHMARK(SmallMessagesDroppedByAnotherThread<true>)->Arg(64);
BENCHMARK(SmallMessagesDroppedByAnotherThread<false>)->Arg(64);

// What tcp's receive path does per frame of a read chunk (TcpNode::parse_in_buffer):
// decode the 24-byte header, check it on the data side, make the message's buffer
// (kit::BufferPool: an InlineBuffer, a block of the block cache up to ~200 bytes) and
// copy the payload out; a 64 KiB chunk of frames of `size` bytes, messages dropped
// as made. Items: frames.
void TcpFrameParse(benchmark::State& state) {
    const auto size = static_cast<std::size_t>(state.range(0));
    const std::size_t frame = tcp::frame_header_size + size;
    const std::size_t frames = (64 * 1024) / frame;
    std::vector<std::byte> chunk(frames * frame);
    for (std::size_t i = 0; i < frames; ++i) {
        tcp::encode(tcp::data_frame(i, size), chunk.data() + i * frame);
        std::memset(chunk.data() + i * frame + tcp::frame_header_size, static_cast<int>(i), size);
    }
    auto pool = std::make_shared<kit::BufferPool>();
    for (auto _ : state) {
        std::size_t at = 0;
        while (at + tcp::frame_header_size <= chunk.size()) {
            const tcp::FrameHeader h = tcp::decode(chunk.data() + at);
            if (tcp::check_data_side(h, 1 << 20) != tcp::Frame::data) state.SkipWithError("a frame did not check");
            const auto n = static_cast<std::size_t>(h.length);
            auto m = pool->make(n);
            std::memcpy(m->single()->data(), chunk.data() + at + tcp::frame_header_size, n);
            benchmark::DoNotOptimize(m->single()->data());
            at += tcp::frame_header_size + n;
        }
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * frames));
}
BENCHMARK(TcpFrameParse)->Arg(8)->Arg(64)->Arg(1024);

BENCHMARK_MAIN();
