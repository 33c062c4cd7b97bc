// Tests of the sci protocol paths that the conformance suite does not reach on its
// own: the ring of large messages in the receiver's region (buffers released out of
// order and held while the sender comes round), queued broadcasts that travel as
// batches of descriptors (also with injected transfer errors), queued small messages
// that travel as batches in one slot (and forged batches, well-formed and not), and
// the hot slot of an echo that goes on across a restart of the peer process.
#include <msgpass/sci/factory.hpp>
#include <msgpass/sci/options.hpp>

#include "node.hpp"
#include "remote_memory.hpp"
#include "send_pool.hpp"
#include "transport.hpp"
#include "yield_gauge.hpp"

#include "../support/partition.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

namespace msgpass::test {
namespace {

// A node's own sci section in a configuration built in code, made from the top-level
// one (as load() resolves a node scope over the top level) the first time.
sci::Options& node_sci(config::Configuration& c, std::size_t index) {
    auto& node = c.nodes.at(index);
    if (node.sections.find<sci::Options>() == nullptr) node.sections.edit<sci::Options>() = c.section<sci::Options>();
    return node.sections.edit<sci::Options>();
}

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string partition_for_test() {
    return unique_partition(::testing::UnitTest::GetInstance()->current_test_info()->name());
}

// ------------------------------------------------------ the data path's counters

// The sender and the receiver keep each index's round mod 255 and the salts mod
// 255, and sign with signature_mod: the same words as signature() of the round.
TEST(SciSignatures, TheCountersSignExactlyAsTheRoundDoes) {
    for (std::uint32_t salt = 0; salt < 256; ++salt) {
        std::uint32_t round255 = 0;
        for (std::uint64_t round = 0; round < 3 * 255 + 7; ++round) {
            ASSERT_EQ(sci::signature_mod(round255, salt % 255), sci::signature(round, salt))
                << "round " << round << ", salt " << salt;
            round255 = sci::next_round255(round255);
        }
    }
}

// ------------------------------------------------------------- send buffers

// Buffers of up to 4 KiB come from a per-thread block of their size class when the
// send pool has none left (a stream's queue outgrows the pool), not from malloc.
TEST(SciSendBuffers, SmallHeapBuffersHoldEverySizeUpToTheirCapacity) {
    EXPECT_GE(sci::small_buffer_capacity(), 4096u);
    for (const std::size_t size : {1, 8, 64, 200, 256, 512, 513, 1000, 1024, 2048, 3000, 4096}) {
        auto b = sci::small_heap_buffer(size);
        ASSERT_TRUE(b) << size;
        auto* s = b->single();
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->size(), size);
        std::memset(s->data(), 0x5a, size); // ASan: the whole size is the buffer's
    }
    EXPECT_FALSE(sci::small_heap_buffer(sci::small_buffer_capacity() + 1));
}

// The pool's per-thread cache: buffers dropped by one thread are taken again by it,
// buffers dropped by another thread come back too, and a pool closed while threads
// still cache its entries or hold its buffers ends when the last comes back (ASan
// reports a leak or a use after free otherwise).
TEST(SciSendBuffers, ThePoolsThreadCacheNeitherLosesNorLeaksBuffers) {
    auto* pool = sci::SendPool::create(8, 128);
    std::vector<BufferPtr> out;
    for (int round = 0; round < 3; ++round) {
        for (int k = 0; k < 8; ++k) {
            auto b = pool->get(64);
            ASSERT_TRUE(b) << "round " << round << ", buffer " << k;
            out.push_back(std::move(b));
        }
        EXPECT_FALSE(pool->get(64)) << "only 8 buffers";
        out.clear(); // back into this thread's cache (and the queue beyond it)
    }
    for (int k = 0; k < 8; ++k)
        out.push_back(pool->get(64));
    std::thread other([moved = std::move(out)]() mutable { moved.clear(); }); // dropped by another thread
    other.join();
    for (int k = 0; k < 8; ++k)
        out.push_back(pool->get(64)); // the other thread ended: its cache went back
    EXPECT_TRUE(out.back());
    std::promise<void> closed;
    std::thread holder([b = std::move(out.back()), done = closed.get_future()]() mutable {
        done.wait(); // the pool is closed while this thread holds b
        b.reset();
    });
    out.pop_back();
    out.resize(4); // three dropped into this thread's cache
    pool->close();
    out.clear();
    closed.set_value();
    holder.join();
}

// ------------------------------------------------------------ large messages

// The receiver holds about half of the large messages for a while and releases
// held ones in a random order (not the order they came in), so the sender's ring
// comes round to buffers still held, several times. A held buffer whose memory was
// written again would fail its checksum when it is finally checked.
// The wait's yields tell whether the CPU is shared (then a wait does not spin). On
// a VM whose lone yields take 1.2 to 1.6 us (the system call alone, measured on this
// project's 2-CPU machines), a fixed 1.5 us bound called the CPU shared for good and
// every blocking receive paid a yield; the bound is twice the fastest yield seen.
TEST(SciYieldGauge, LoneYieldsOfASlowSystemCallDoNotCallTheCpuSharedAndYieldsToAnotherTaskDo) {
    using msgpass::sci::YieldGauge;
    using std::chrono::nanoseconds;
    YieldGauge vm;
    std::mt19937 random(7);
    std::uniform_int_distribution<int> lone(1200, 1650);
    for (int i = 0; i < 10000; ++i) {
        vm.observe(nanoseconds(lone(random)));
        ASSERT_FALSE(vm.shared()) << "lone yield " << i;
    }
    // Another task ran: several passes through the scheduler and its own time.
    vm.observe(nanoseconds(6000));
    EXPECT_TRUE(vm.shared());
    for (std::uint32_t i = 0; i + 1 < YieldGauge::fast_to_clear; ++i) {
        vm.observe(nanoseconds(lone(random)));
        ASSERT_TRUE(vm.shared()) << "called free after " << i + 1 << " lone yields";
    }
    vm.observe(nanoseconds(1300));
    EXPECT_FALSE(vm.shared());

    // Bare metal: lone yields of ~0.1 us; the bound stays at its floor of 1.5 us.
    YieldGauge metal;
    for (int i = 0; i < 1000; ++i)
        metal.observe(nanoseconds(100 + i % 50));
    metal.observe(YieldGauge::floor);
    EXPECT_FALSE(metal.shared());
    metal.observe(YieldGauge::floor + nanoseconds(1));
    EXPECT_TRUE(metal.shared());

    // clear() marks the CPU free at once (a shared wait learns it from its probe).
    metal.clear();
    EXPECT_FALSE(metal.shared());

    // A clock that reads no time passing does not make every later yield look shared.
    YieldGauge coarse;
    coarse.observe(nanoseconds(0));
    coarse.observe(nanoseconds(1000));
    EXPECT_FALSE(coarse.shared());
}

TEST(SciLargeMessages, BuffersReleasedOutOfOrderAreNeverOverwrittenWhileHeld) {
    auto c = make_configuration("sci", partition_for_test(), 2,
                                [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = 4; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);

    // 100 KiB .. 3 MiB, log-uniform: about 60 MiB in all, the ring (8 to 12 MiB
    // before it wraps for these sizes) goes round several times.
    constexpr std::uint64_t n = 72;
    std::vector<std::size_t> size_of(n);
    std::mt19937_64 sizes(11);
    std::uint64_t total = 0;
    for (auto& s : size_of) {
        const double u = std::uniform_real_distribution<double>(0.0, 1.0)(sizes);
        s = static_cast<std::size_t>(100.0 * 1024 * std::exp(u * std::log(30.72)));
        total += s;
    }
    ASSERT_GT(total, 4 * (12ULL << 20));
    ASSERT_GT(size_of.front(), c.section<sci::Options>().recv_buffer_size);

    std::atomic<bool> stop{false};
    std::string send_error;
    std::thread sender([&] {
        const auto deadline = Clock::now() + 60s;
        try {
            for (std::uint64_t i = 0; i < n && !stop.load(); ++i) {
                to_b->send(make_message(*a, size_of[i], 0, i));
                // Keep at most one message queued: the sender waits for the receiver
                // to release ring space instead of piling up copies.
                while (to_b->stats().queue_depth > 1 && !stop.load() && Clock::now() < deadline)
                    (void)to_b->flush(10ms);
            }
            while (!stop.load() && !to_b->flush(10ms) && Clock::now() < deadline) {
            }
        } catch (const std::exception& e) {
            send_error = e.what();
        }
    });

    struct Held {
        BufferPtr buffer;
        std::uint64_t seq;
    };
    std::vector<Held> held;
    std::mt19937 rng(5);
    std::string error;
    std::uint64_t out_of_order_releases = 0;
    std::size_t most_held = 0;
    auto release_one = [&] {
        const std::size_t k = rng() % held.size();
        try {
            const auto h = check_payload(*held[k].buffer);
            if (h.seq != held[k].seq && error.empty())
                error = "held message " + std::to_string(held[k].seq) + " now carries " + std::to_string(h.seq);
        } catch (const std::string& e) {
            if (error.empty()) error = "held message " + std::to_string(held[k].seq) + ": " + e;
        }
        for (const auto& other : held) {
            if (other.seq < held[k].seq) {
                ++out_of_order_releases;
                break;
            }
        }
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    };

    std::uint64_t next = 0;
    const auto deadline = Clock::now() + 60s;
    while (next < n && error.empty()) {
        if (Clock::now() > deadline) {
            error = "stalled at message " + std::to_string(next) + " holding " + std::to_string(held.size());
            break;
        }
        // Nothing within 20 ms while the sender has a message queued: it waits for
        // ring space a held buffer keeps. Releasing one (any) lets it go on; this
        // decides only which buffers are held how long. A sender that is only slow
        // (a loaded machine, an -O0 build) queues nothing, and the buffers stay held.
        auto m = from_a->receive(20ms);
        if (!m) {
            if (!held.empty() && to_b->stats().queue_depth > 0) release_one();
            continue;
        }
        try {
            const auto h = check_payload(*m);
            if (h.seq != next) {
                error = "message " + std::to_string(h.seq) + " arrived when " + std::to_string(next) + " was due";
                break;
            }
            if (m->size() != size_of[next]) {
                error = "message " + std::to_string(next) + " has " + std::to_string(m->size()) + " bytes";
                break;
            }
        } catch (const std::string& e) {
            error = e;
            break;
        }
        if (rng() % 2 == 0) held.push_back({std::move(m), next});
        most_held = std::max(most_held, held.size());
        if (held.size() > 4) release_one();
        ++next;
    }
    while (!held.empty())
        release_one();
    stop.store(true);
    sender.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(send_error, "");
    EXPECT_EQ(next, n);
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    EXPECT_GE(most_held, 3u);
    EXPECT_GT(out_of_order_releases, 0u) << "no buffer was released before an older one";
}

// ------------------------------------------------------------- broadcast

// One sender, three members, one thread per member. A first burst is sent before
// any member receives, so the queues fill and the queued shared messages go out as
// batches of descriptors; small messages (no descriptor) are mixed in to check the
// order across both paths.
void queued_broadcast_arrives_everywhere(double error_rate) {
    const SegmentCleanup segments(partition_for_test());
    auto c = make_configuration("sci", segments.partition(), 4, [&](config::Configuration& c) {
        auto& options = c.edit_section<sci::Options>();
        options.max_outst_buffers = 4;
        options.inject_error_rate = error_rate;
        options.inject_error_seed = 77;
        c.groups["members"] = {2, 3, 4};
    });
    auto sender = NodeFactory::create(c, 1);
    std::vector<std::unique_ptr<NodeFactory>> members;
    std::vector<NodePtr> from_sender, to_member;
    for (NodeId id = 2; id <= 4; ++id) {
        members.push_back(NodeFactory::create(c, id));
        from_sender.push_back(members.back()->create_node(1));
        to_member.push_back(sender->create_node(id));
    }
    auto group = sender->create_group("members");

    constexpr std::uint64_t n = 1500;
    constexpr std::uint64_t burst = 300;
    auto size_of = [](std::uint64_t i) -> std::size_t {
        if (i % 97 == 5) return 200 * 1024;
        if (i % 7 == 3) return 100;
        return 1024 + (i * 2654435761u) % (15 * 1024);
    };

    std::atomic<bool> stop{false};
    std::vector<std::string> errors(members.size());
    std::vector<std::uint64_t> received(members.size(), 0);
    std::vector<std::thread> receivers;

    auto send_all = [&](std::uint64_t from, std::uint64_t to) {
        for (std::uint64_t i = from; i < to && !stop.load(); ++i) {
            group->send(make_message(*sender, size_of(i), 1, i));
            const auto until = Clock::now() + 20s;
            for (std::size_t k = 0; k < to_member.size() && !stop.load() && Clock::now() < until;) {
                if (i < burst || to_member[k]->stats().queue_depth < 400) {
                    ++k;
                } else {
                    (void)to_member[k]->flush(5ms);
                }
            }
        }
    };

    std::string send_error;
    try {
        send_all(0, burst);
    } catch (const std::exception& e) {
        send_error = e.what();
    }
    for (std::size_t k = 0; k < members.size(); ++k) {
        receivers.emplace_back([&, k] {
            try {
                for (std::uint64_t i = 0; i < n; ++i) {
                    auto m = from_sender[k]->receive(20s);
                    if (!m) {
                        errors[k] = "stalled at " + std::to_string(i);
                        break;
                    }
                    const auto h = check_payload(*m);
                    if (h.stream != 1 || h.seq != i || m->size() != size_of(i) || m->source() != 1) {
                        errors[k] = "message " + std::to_string(h.seq) + " of " + std::to_string(m->size()) +
                                    " bytes arrived when " + std::to_string(i) + " was due";
                        break;
                    }
                    ++received[k];
                }
                if (errors[k].empty() && from_sender[k]->receive() != nullptr) errors[k] = "a message arrived twice";
            } catch (const std::exception& e) {
                errors[k] = e.what();
            } catch (const std::string& e) {
                errors[k] = e;
            }
            if (!errors[k].empty()) stop.store(true);
        });
    }
    try {
        if (send_error.empty()) send_all(burst, n);
        const auto deadline = Clock::now() + 30s;
        for (auto& node : to_member) {
            while (!stop.load() && !node->flush(10ms) && Clock::now() < deadline) {
            }
        }
    } catch (const std::exception& e) {
        send_error = e.what();
        stop.store(true);
    }
    for (auto& t : receivers)
        t.join();

    EXPECT_EQ(send_error, "");
    std::uint64_t retries = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
        EXPECT_EQ(errors[k], "") << "member " << k + 2;
        EXPECT_EQ(received[k], n) << "member " << k + 2;
        const auto s = to_member[k]->stats();
        EXPECT_GT(s.sends_queued, burst / 2) << "the queue towards member " << k + 2 << " never built up";
        EXPECT_EQ(s.messages_sent, n);
        retries += s.retries + from_sender[k]->stats().retries;
    }
    if (error_rate > 0) {
        EXPECT_GT(retries, 0u) << "no injected error was repaired";
    } else {
        EXPECT_EQ(retries, 0u);
    }
}

TEST(SciBroadcast, QueuedBroadcastArrivesAtEveryMemberOnceInOrderAndIntact) {
    queued_broadcast_arrives_everywhere(0.0);
}

TEST(SciBroadcast, QueuedBroadcastWithTwoPercentInjectedErrorsArrivesAtEveryMemberOnceInOrderAndIntact) {
    queued_broadcast_arrives_everywhere(0.02);
}

// -------------------------------------------------------- outstanding buffers

// "max_outst_buffers: the value configured for the sending node (its node scope,
// else the top-level sci context) is how many receive buffers the receiving node
// reserves for that sender; its range is 1..15". Node 1 has 15 (node scope), node 2
// 1 (the top level), and the receiver, node 3, 4 of its own. Before the receiver
// takes anything, node 1 has handed over 15 messages and node 2 one, the rest wait
// in their send queues; then both stream, and every message arrives once, in order.
TEST(SciOutstandingBuffers, EachSenderHasItsOwnMaxOutstBuffersOutstandingAtTheSameReceiver) {
    const SegmentCleanup segments(partition_for_test());
    auto c = make_configuration("sci", segments.partition(), 3,
                                [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = 1; });
    node_sci(c, 0).max_outst_buffers = 15;
    node_sci(c, 2).max_outst_buffers = 4;
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto r = NodeFactory::create(c, 3);
    auto from_a = r->create_node(1); // the receiver connects and grants its slots
    auto from_b = r->create_node(2);
    auto a_to_r = a->create_node(3);
    auto b_to_r = b->create_node(3);

    constexpr std::uint64_t first = 20;
    for (std::uint64_t i = 0; i < first; ++i) { // each alone in its slot (smaller ones would share an open slot)
        a_to_r->send(make_message(*a, sci::hot_min_size, 1, i));
        b_to_r->send(make_message(*b, sci::hot_min_size, 2, i));
    }
    EXPECT_EQ(a_to_r->stats().messages_sent, 15u);
    EXPECT_EQ(a_to_r->stats().queue_depth, first - 15) << "node 1 (max_outst_buffers 15)";
    EXPECT_EQ(b_to_r->stats().messages_sent, 1u);
    EXPECT_EQ(b_to_r->stats().queue_depth, first - 1) << "node 2 (max_outst_buffers 1)";

    constexpr std::uint64_t n = 3000;
    std::atomic<bool> stop{false};
    auto stream = [&](NodeFactory& f, Node& to, std::uint32_t id) {
        for (std::uint64_t i = first; i < n && !stop.load(); ++i) {
            for (;;) {
                try {
                    to.send(make_message(f, 24 + i % 300, id, i));
                    break;
                } catch (const SendQueueFull&) {
                    (void)to.flush(1ms);
                }
            }
        }
        const auto deadline = Clock::now() + 30s;
        while (!stop.load() && !to.flush(10ms) && Clock::now() < deadline) {
        }
    };
    std::thread sender_a([&] { stream(*a, *a_to_r, 1); });
    std::thread sender_b([&] { stream(*b, *b_to_r, 2); });

    auto group = r->create_group();
    group->add(from_a);
    group->add(from_b);
    std::array<std::uint64_t, 3> next{};
    std::string error;
    try {
        while (next[1] < n || next[2] < n) {
            auto m = group->receive(20s);
            if (!m) {
                error = "stalled at " + std::to_string(next[1]) + " from node 1 and " + std::to_string(next[2]) +
                        " from node 2";
                break;
            }
            const auto h = check_payload(*m);
            if (h.stream != m->source() || (h.stream != 1 && h.stream != 2) || h.seq != next[h.stream]) {
                error = "message " + std::to_string(h.seq) + " of node " + std::to_string(m->source()) + " arrived";
                break;
            }
            ++next[h.stream];
        }
    } catch (const std::string& e) {
        error = e;
    }
    stop.store(true);
    sender_a.join();
    sender_b.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(next[1], n);
    EXPECT_EQ(next[2], n);
    EXPECT_EQ(group->receive(), nullptr) << "a message was delivered twice";
}

// A receiver reserves for each sender as many slots as the sender's value, so its
// pool must cover their sum: a node with too few fails at start and says why.
TEST(SciOutstandingBuffers, AReceiverWithFewerSlotsThanItsSendersReserveFailsClearlyAtStart) {
    auto c = make_configuration("sci", partition_for_test(), 3, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 15;
    });
    node_sci(c, 2).recv_buffer_no = 29;
    try {
        auto r = NodeFactory::create(c, 3);
        FAIL() << "a node with 29 slots for two senders of 15 started";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("recv_buffer_no: expected at least the sum of the other nodes' "
                                             "max_outst_buffers = 30 slots, found 29"),
                  std::string::npos)
            << e.what();
    }
    node_sci(c, 2).recv_buffer_no = 30;
    EXPECT_NO_THROW(NodeFactory::create(c, 3));
}

// ------------------------------------------------------- batches of small messages

// Where a received buffer's bytes are: consecutive messages of one batch follow
// each other in its slot, each on the next 8-byte boundary.
struct Place {
    std::uintptr_t data = 0;
    std::size_t size = 0;
    // (or, for records of an open slot, after the next record's word)
    [[nodiscard]] bool followed_by(const Buffer& b) const {
        const auto next = reinterpret_cast<std::uintptr_t>(b.single()->data());
        return data != 0 && (next == data + sci::batch_align_up(size) ||
                             next == data + sci::batch_align_up(size) + sci::record_header_size);
    }
};
Place place_of(const Buffer& b) {
    return {reinterpret_cast<std::uintptr_t>(b.single()->data()), b.size()};
}

// "Several small messages queued to one peer travel in one slot behind one signed
// notification (a batch descriptor naming each message's length)". The receiver
// takes nothing until the sender has queued the whole stream behind its 2
// outstanding messages (small ones of many sizes, an empty-bodied one, and now and
// then one too large to share a slot); then every message arrives once, in order,
// intact, and nearly all of them next to the one before in the same slot.
void queued_small_messages_travel_in_batches(double error_rate) {
    auto c = make_configuration("sci", partition_for_test(), 2, [&](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 2;
        c.edit_section<sci::Options>().inject_error_rate = error_rate;
        c.edit_section<sci::Options>().inject_error_seed = 13;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 3000;
    auto size_of = [](std::uint64_t i) -> std::size_t {
        if (i % 500 == 499) return 5000; // alone in its slot
        return sizeof(PayloadHeader) + (i * 37) % 300;
    };
    std::atomic<bool> queued{false};
    std::atomic<bool> stop{false};
    std::thread sender([&] {
        for (std::uint64_t i = 0; i < n; ++i)
            to_b->send(make_message(*a, size_of(i), 1, i));
        queued.store(true);
        const auto deadline = Clock::now() + 30s;
        while (!stop.load() && !to_b->flush(10ms) && Clock::now() < deadline) {
        }
    });
    const auto until = Clock::now() + 30s;
    while (!queued.load() && Clock::now() < until)
        std::this_thread::yield();
    ASSERT_TRUE(queued.load()) << "the sender did not queue its stream";
    // What did not fit the 2 slots open to records (at most one record per 8 + 32 bytes).
    EXPECT_GE(to_b->stats().queue_depth,
              n - 2 * c.section<sci::Options>().recv_buffer_size / (sci::record_header_size + 32));
    std::uint64_t together = 0;
    Place last;
    std::string error;
    for (std::uint64_t i = 0; i < n && error.empty(); ++i) {
        auto m = from_a->receive(20s);
        if (!m) {
            error = "stalled at message " + std::to_string(i);
            break;
        }
        try {
            const auto h = check_payload(*m);
            if (h.seq != i) error = "message " + std::to_string(h.seq) + " when " + std::to_string(i) + " was due";
        } catch (const std::string& e) {
            error = e;
        }
        if (m->size() != size_of(i) || m->source() != 1) error = "message " + std::to_string(i) + ": size or source";
        if (last.followed_by(*m)) ++together;
        last = place_of(*m);
    }
    stop.store(true);
    sender.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    EXPECT_GE(together, n * 9 / 10) << "most queued messages did not share a slot";
    EXPECT_EQ(from_a->stats().messages_received, n);
    EXPECT_EQ(to_b->stats().messages_sent, n);
    if (error_rate > 0) {
        EXPECT_GT(to_b->stats().retries, 0u);
    }
}

TEST(SciBatches, QueuedSmallMessagesTravelInBatchesAndArriveOnceInOrderIntact) {
    queued_small_messages_travel_in_batches(0.0);
}

TEST(SciBatches, QueuedSmallMessagesWithTwoPercentInjectedErrorsArriveOnceInOrderIntact) {
    queued_small_messages_travel_in_batches(0.02);
}

// "A received message is a view into the slot; the slot returns when its last
// message is dropped". The receiver has one slot, which it grants the sender (one
// outstanding message): three messages queued behind the first travel as a batch,
// and a fourth waits until every message of that batch is dropped, whatever the order.
TEST(SciBatches, ASlotReturnsToTheSenderOnlyWhenTheLastMessageOfItsBatchIsDropped) {
    auto c = make_configuration("sci", partition_for_test(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 1;
        c.edit_section<sci::Options>().recv_buffer_no = 1;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i < 4; ++i) // the first alone in the slot (a smaller one would open it to records)
        to_b->send(make_message(*a, i == 0 ? sci::hot_min_size : 40 + i, 1, i));
    ASSERT_EQ(to_b->stats().queue_depth, 3u);
    auto first = from_a->receive(10s);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(check_payload(*first).seq, 0u);
    first.reset();                 // the one slot goes back to the sender
    ASSERT_TRUE(to_b->flush(10s)); // the three queued ones leave together
    std::array<BufferPtr, 3> batch;
    for (std::uint64_t i = 0; i < 3; ++i) {
        batch[i] = from_a->receive(10s);
        ASSERT_NE(batch[i], nullptr) << "message " << i + 1;
        ASSERT_EQ(check_payload(*batch[i]).seq, i + 1);
        if (i > 0) {
            EXPECT_TRUE(place_of(*batch[i - 1]).followed_by(*batch[i])) << "message " << i + 1 << " elsewhere";
        }
    }
    to_b->send(make_message(*a, 100, 1, 4));
    batch[1].reset();
    EXPECT_FALSE(to_b->flush(50ms)) << "the slot went back while two of its messages were held";
    batch[0].reset();
    EXPECT_FALSE(to_b->flush(50ms)) << "the slot went back while one of its messages was held";
    EXPECT_EQ(check_payload(*batch[2]).seq, 3u) << "a held message was overwritten";
    batch[2].reset();
    EXPECT_TRUE(to_b->flush(10s)) << "the slot did not go back with the last message of its batch";
    auto fifth = from_a->receive(10s);
    ASSERT_NE(fifth, nullptr);
    EXPECT_EQ(check_payload(*fifth).seq, 4u);
}

// A peer that writes a batch into our segment as it likes (correctly signed notes,
// node 2 gone mad): node 1 has taken one good message; the test writes the note of
// message 1 and the content of the slot granted for it.
class ForgedBatch {
public:
    static constexpr std::uint32_t k = 4;
    ForgedBatch()
        : c_(make_configuration("sci", partition_for_test(), 2,
                                [](config::Configuration& c) {
                                    c.peer_timeout = 10s;
                                    c.edit_section<sci::Options>().max_outst_buffers = k;
                                })),
          a_(NodeFactory::create(c_, 1)), b_(NodeFactory::create(c_, 2)), from_b_(a_->create_node(2)),
          to_a_(b_->create_node(1)), device_(c_.partition) {
        // Alone in its slot, not a record: a small message would open its slot to
        // records, and node 1 would look at no other note until that slot's close.
        to_a_->send(make_message(*b_, sci::hot_min_size, 2, 0));
        auto good = from_b_->receive(10s);
        EXPECT_NE(good, nullptr) << "the good message never arrived";
        const std::uint32_t seg = c_.section<sci::Options>().recv_seg_id;
        EXPECT_TRUE(theirs_.connect(device_.segment_name(1, seg))); // node 1's: our header, its slots
        EXPECT_TRUE(ours_.connect(device_.segment_name(2, seg)));   // node 2's: node 1's grants to us
        theirs_.map();
        ours_.map();
    }
    [[nodiscard]] const sci::ControlBlock& control() const {
        return *reinterpret_cast<const sci::ControlBlock*>(theirs_.address());
    }
    // Node 2 as node 1 sees it: where the forged messages come from.
    [[nodiscard]] Node& receiver() const { return *from_b_; }
    // Writes content into the slot node 1 granted for message 1, then the note.
    void forge(std::uint32_t flags_and_size, std::span<const std::byte> content) {
        auto* header = reinterpret_cast<sci::Header*>(theirs_.address() + control().header_offset + sci::header_size);
        auto* grants = reinterpret_cast<sci::Header*>(ours_.address() + sci::control_block_size);
        const std::uint32_t epoch = std::atomic_ref<std::uint32_t>(header->epoch).load();
        std::uint32_t ack = 0;
        const auto until = Clock::now() + 10s;
        while (sci::sig_of(ack = std::atomic_ref<std::uint32_t>(grants->index[1].ack).load()) == 0 &&
               Clock::now() < until)
            std::this_thread::yield();
        const std::uint32_t slot = ack & sci::ack_slot_mask;
        ASSERT_LT(slot, control().slot_count);
        slot_ = slot;
        write_slot(content);
        const std::uint32_t sig = sci::signature(1 / k, sci::salt_of(epoch));
        std::atomic_ref<std::uint32_t>(header->index[1].note).store((sig << 24) | flags_and_size);
    }
    // Writes content into the slot of the last forge again (no note): a sender's later
    // records of a slot it opened.
    void write_slot(std::span<const std::byte> content) {
        ASSERT_LE(content.size(), control().slot_size);
        std::memcpy(theirs_.address() + control().slot_offset + slot_ * control().slot_size, content.data(),
                    content.size());
    }
    // What node 1 makes of it: the messages it delivers and the losses it reports.
    struct Outcome {
        std::vector<BufferPtr> delivered;
        std::vector<std::string> losses;
    };
    Outcome take() {
        Outcome o;
        for (const auto until = Clock::now() + 300ms; Clock::now() < until;) {
            try {
                if (auto m = from_b_->receive(10ms)) o.delivered.push_back(std::move(m));
            } catch (const PeerLost& e) {
                o.losses.emplace_back(e.what());
            }
        }
        return o;
    }

private:
    config::Configuration c_;
    std::unique_ptr<NodeFactory> a_, b_;
    std::shared_ptr<Node> from_b_, to_a_;
    sci::VirtualDevice device_;
    sci::RemoteSegment theirs_, ours_;
    std::uint32_t slot_ = 0;
};

// A batch of count messages of the given lengths, laid out as a sender lays it out;
// the header is that of note 1 unless changed by tweak.
std::vector<std::byte> batch_of(const std::vector<std::uint32_t>& lengths,
                                const std::function<void(sci::BatchHeader&, std::vector<std::byte>&)>& tweak = {}) {
    const auto count = static_cast<std::uint32_t>(lengths.size());
    std::uint64_t end = sci::batch_data_offset(count);
    for (std::uint32_t k = 0; k < count; ++k)
        end = (k + 1 < count) ? sci::batch_align_up(end + lengths[k]) : end + lengths[k];
    std::vector<std::byte> content(end);
    if (!lengths.empty()) // memcpy from an empty vector's null data() is undefined
        std::memcpy(content.data() + sizeof(sci::BatchHeader), lengths.data(), 4 * lengths.size());
    std::uint64_t at = sci::batch_data_offset(count);
    for (std::uint32_t k = 0; k < count; ++k) {
        std::memset(content.data() + at, 'a' + static_cast<int>(k), lengths[k]);
        at = sci::batch_align_up(at + lengths[k]);
    }
    sci::BatchHeader h{1, count, sci::batch_check_of(1, count, static_cast<std::uint32_t>(end)), 0};
    if (tweak) tweak(h, content);
    std::memcpy(content.data(), &h, sizeof h);
    return content;
}

// A well-formed batch, as a sender of another build could write it (an empty
// message between two others): node 1 delivers each message with its own length
// and bytes, from node 2.
TEST(SciBatches, AForgedWellFormedBatchIsDeliveredMessageByMessage) {
    ForgedBatch peer;
    const auto content = batch_of({5, 0, 17});
    peer.forge(sci::note_batch_flag | static_cast<std::uint32_t>(content.size()), content);
    auto o = peer.take();
    EXPECT_TRUE(o.losses.empty()) << o.losses.front();
    ASSERT_EQ(o.delivered.size(), 3u);
    const std::array<std::size_t, 3> sizes{5, 0, 17};
    for (std::size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(o.delivered[k]->size(), sizes[k]);
        EXPECT_EQ(o.delivered[k]->source(), 2u);
        for (const auto byte : o.delivered[k]->single()->bytes())
            EXPECT_EQ(byte, static_cast<std::byte>('a' + k));
    }
}

// "A malformed batch is a protocol break reported once, never a crash": every way a
// batch can be wrong ends in one PeerLost naming it, and no message of it is
// delivered.
TEST(SciBatches, AMalformedBatchIsReportedOnceAndDeliversNothing) {
    struct Case {
        std::string what;
        std::uint32_t flags = sci::note_batch_flag;
        std::vector<std::byte> content;
        std::int64_t size = -1; // the note's size word, when not the content's
    };
    std::vector<Case> cases;
    cases.push_back({"a header of an earlier note (a stale slot)", sci::note_batch_flag,
                     batch_of({8, 8}, [](sci::BatchHeader& h, std::vector<std::byte>& c) {
                         h.sequence = 0;
                         h.check = sci::batch_check_of(0, h.count, static_cast<std::uint32_t>(c.size()));
                     })});
    cases.push_back({"a damaged check word", sci::note_batch_flag,
                     batch_of({8, 8}, [](sci::BatchHeader& h, std::vector<std::byte>&) { h.check ^= 1; })});
    cases.push_back({"a length that runs past the batch", sci::note_batch_flag,
                     batch_of({8, 8}, [](sci::BatchHeader&, std::vector<std::byte>& c) {
                         const std::uint32_t long_one = 4000;
                         std::memcpy(c.data() + sizeof(sci::BatchHeader), &long_one, 4);
                     })});
    cases.push_back({"no message", sci::note_batch_flag, batch_of({}, {})});
    cases.push_back({"a count whose lengths do not fit", sci::note_batch_flag,
                     batch_of({8}, [](sci::BatchHeader& h, std::vector<std::byte>&) {
                         h.count = 500;
                         h.check = sci::batch_check_of(1, 500, 32);
                     })});
    cases.push_back({"a count beyond batch_max_count", sci::note_batch_flag,
                     batch_of(std::vector<std::uint32_t>(sci::batch_max_count + 1, 0))});
    cases.push_back({"a last message that ends before the size", sci::note_batch_flag, batch_of({8, 8}), 64});
    cases.push_back({"the large flag too", sci::note_batch_flag | sci::note_large_flag, batch_of({8, 8})});
    cases.push_back({"a size beyond the slot", sci::note_batch_flag, batch_of({8, 8}), 8193});
    for (auto& k : cases) {
        SCOPED_TRACE(k.what);
        ForgedBatch peer;
        if (k.size >= 0 && static_cast<std::size_t>(k.size) <= 8192) k.content.resize(static_cast<std::size_t>(k.size));
        const auto size =
            k.size >= 0 ? static_cast<std::uint32_t>(k.size) : static_cast<std::uint32_t>(k.content.size());
        if (k.what == "a last message that ends before the size") {
            // A correct check for the larger size, so that only the layout is wrong.
            sci::BatchHeader h{};
            std::memcpy(&h, k.content.data(), sizeof h);
            h.check = sci::batch_check_of(1, h.count, size);
            std::memcpy(k.content.data(), &h, sizeof h);
        }
        peer.forge(k.flags | size, k.content);
        auto o = peer.take();
        EXPECT_TRUE(o.delivered.empty()) << o.delivered.size() << " messages delivered";
        ASSERT_EQ(o.losses.size(), 1u);
        EXPECT_NE(o.losses.front().find("malformed batch"), std::string::npos) << o.losses.front();
    }
}

// The records of an open slot (protocol.hpp, "An open slot") as a sender lays them
// out after the note of message 1 (sequence 1): each a signed word and its bytes,
// the close last unless close is false; tweak may change a record's word (by index).
std::vector<std::byte> records_of(const std::vector<std::uint32_t>& lengths, bool close = true,
                                  const std::function<void(std::size_t, std::uint64_t&)>& tweak = {}) {
    std::vector<std::byte> content;
    auto put = [&](std::uint32_t k, std::uint32_t length, std::size_t bytes) {
        std::uint64_t word = sci::make_record(2, 1, k, length);
        if (tweak) tweak(k, word);
        const std::size_t at = content.size();
        content.resize(at + sci::record_header_size + sci::batch_align_up(bytes));
        std::memcpy(content.data() + at, &word, sizeof word);
        std::memset(content.data() + at + sci::record_header_size, 'a' + static_cast<int>(k), bytes);
    };
    for (std::uint32_t k = 0; k < lengths.size(); ++k)
        put(k, lengths[k], lengths[k]);
    if (close) put(static_cast<std::uint32_t>(lengths.size()), sci::record_close, 0);
    return content;
}

// A well-formed open slot, as a sender of another build could write it (an empty
// message between two others): node 1 delivers each record as a message with its
// own length and bytes, from node 2, through buffers and through lent views.
TEST(SciRecords, AForgedOpenSlotIsDeliveredRecordByRecord) {
    for (const bool views : {false, true}) {
        SCOPED_TRACE(views ? "views" : "buffers");
        ForgedBatch peer;
        peer.forge(sci::note_batch_flag, records_of({5, 0, 17}));
        std::vector<std::vector<std::byte>> got;
        for (const auto until = Clock::now() + 10s; got.size() < 3 && Clock::now() < until;) {
            if (views) {
                if (auto v = peer.receiver().receive_view(10ms)) got.emplace_back(v.bytes().begin(), v.bytes().end());
            } else if (auto m = peer.receiver().receive(10ms)) {
                got.emplace_back(m->single()->bytes().begin(), m->single()->bytes().end());
            }
        }
        ASSERT_EQ(got.size(), 3u);
        const std::array<std::size_t, 3> sizes{5, 0, 17};
        for (std::size_t k = 0; k < 3; ++k) {
            EXPECT_EQ(got[k].size(), sizes[k]);
            for (const auto byte : got[k])
                EXPECT_EQ(byte, static_cast<std::byte>('a' + k));
        }
        auto o = peer.take();
        EXPECT_TRUE(o.losses.empty()) << o.losses.front();
        EXPECT_TRUE(o.delivered.empty()) << "a record delivered twice, or the close as a message";
    }
}

// A record that is not there yet (an unsigned or stale word) is waited for, not
// delivered: records of an earlier opening of the slot (another sequence) and a
// damaged check word deliver nothing and report nothing.
TEST(SciRecords, AStaleOrUnsignedRecordIsNotTakenForANewOne) {
    for (const auto& [what, tweak] :
         std::vector<std::pair<std::string, std::function<void(std::size_t, std::uint64_t&)>>>{
             {"an earlier sequence", [](std::size_t k, std::uint64_t&w) { w = sci::make_record(2, 0, k, 8); }},
             {"another sender's round of the same sequence",
              [](std::size_t k, std::uint64_t&w) { w = sci::make_record(3, 1, k, 8); }},
             {"a damaged check", [](std::size_t, std::uint64_t&w) { w ^= std::uint64_t{1} << 40; }},
             {"zeros", [](std::size_t, std::uint64_t&w) { w = 0; }}}) {
        SCOPED_TRACE(what);
        ForgedBatch peer;
        peer.forge(sci::note_batch_flag, records_of({8}, true, tweak));
        auto o = peer.take();
        EXPECT_TRUE(o.delivered.empty()) << o.delivered.size() << " messages delivered";
        EXPECT_TRUE(o.losses.empty()) << o.losses.front();
    }
}

// A slot goes back to the receiver's pool and may next be granted to another peer,
// whose notes are numbered on their own: a close that node 3's round of the slot left
// where node 2's second record goes, with the same sequence, is not node 2's close.
// Node 1 delivers the first record, waits for the second (the slot stays open), and
// delivers it once node 2 writes it. (Before records were signed with their sender,
// the stale close ended the slot: the second record was never read, and an MPI
// program of 5 ranks with records never ended its collectives.)
TEST(SciRecords, AnotherSendersCloseLeftInTheSlotDoesNotCloseIt) {
    ForgedBatch peer;
    auto content = records_of({8}, false);
    const std::uint64_t stale = sci::make_record(3, 1, 1, sci::record_close);
    const std::size_t at = content.size();
    content.resize(at + sci::record_header_size);
    std::memcpy(content.data() + at, &stale, sizeof stale);
    peer.forge(sci::note_batch_flag, content);
    auto o = peer.take();
    EXPECT_TRUE(o.losses.empty()) << o.losses.front();
    ASSERT_EQ(o.delivered.size(), 1u);
    EXPECT_EQ(o.delivered[0]->size(), 8u);
    peer.write_slot(records_of({8, 8})); // node 2's second record over the stale close, then its close
    o = peer.take();
    EXPECT_TRUE(o.losses.empty()) << o.losses.front();
    ASSERT_EQ(o.delivered.size(), 1u) << "the second record was not read: the stale close ended the slot";
    EXPECT_EQ(o.delivered[0]->size(), 8u);
    for (const auto byte : o.delivered[0]->single()->bytes())
        EXPECT_EQ(byte, static_cast<std::byte>('b'));
}

// "A malformed record is a protocol break reported once, never a crash": a signed
// record whose length runs past the slot (or leaves no room for the close), or
// exceeds max_message_size, ends in one PeerLost naming it, after the good records
// before it.
TEST(SciRecords, AMalformedRecordIsReportedOnceAfterTheGoodOnes) {
    for (const std::uint32_t bad : {std::uint32_t{8192}, std::uint32_t{8192 - 16 - 8}, std::uint32_t{0x7fffffff}}) {
        SCOPED_TRACE(bad);
        ForgedBatch peer;
        auto content = records_of({8}, false);
        const std::uint64_t word = sci::make_record(2, 1, 1, bad);
        const std::size_t at = content.size();
        content.resize(at + sci::record_header_size);
        std::memcpy(content.data() + at, &word, sizeof word);
        peer.forge(sci::note_batch_flag, content);
        auto o = peer.take();
        ASSERT_EQ(o.delivered.size(), 1u);
        EXPECT_EQ(o.delivered[0]->size(), 8u);
        ASSERT_EQ(o.losses.size(), 1u);
        EXPECT_NE(o.losses.front().find("malformed record"), std::string::npos) << o.losses.front();
    }
}

// "A slot open to records goes back to the sender only once it is closed and the
// last of its messages is dropped". The receiver has two slots, both granted to the
// sender (two outstanding messages): the first message goes alone (the send side
// meets the link then), the next ones fill the other slot as records, and the rest
// queue. The receiver takes every message it can, holding the first of each slot;
// the sender is then stuck until the held messages are dropped, and they are never
// overwritten.
TEST(SciRecords, AnOpenSlotReturnsOnlyWhenClosedAndItsLastMessageIsDropped) {
    auto c = make_configuration("sci", partition_for_test(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 2;
        c.edit_section<sci::Options>().recv_buffer_no = 2;
        c.edit_section<sci::Options>().records = true;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::size_t size = sizeof(PayloadHeader); // one record: 8 + this
    std::uint64_t sent = 0;
    while (to_b->stats().queue_depth == 0 && sent < 10000)
        to_b->send(make_message(*a, size, 1, sent++));
    ASSERT_GT(sent, c.section<sci::Options>().recv_buffer_size / (sci::record_header_size + 64))
        << "the messages did not share their slots";
    for (int more = 0; more < 10; ++more)
        to_b->send(make_message(*a, size, 1, sent++));
    std::vector<BufferPtr> held;
    std::uint64_t next = 0;
    const std::byte* slot_of_held = nullptr;
    for (BufferPtr m; (m = from_a->receive(50ms)) != nullptr; ++next) {
        ASSERT_EQ(check_payload(*m).seq, next);
        // The first message of a slot: not right after the one before.
        if (held.empty() || m->single()->data() < slot_of_held ||
            m->single()->data() >= slot_of_held + c.section<sci::Options>().recv_buffer_size) {
            slot_of_held = m->single()->data();
            held.push_back(std::move(m));
        }
    }
    ASSERT_LT(next, sent) << "every message arrived while the first of each slot was held";
    EXPECT_FALSE(to_b->flush(50ms)) << "a slot went back while one of its messages was held";
    for (std::size_t k = 0; k < held.size(); ++k)
        EXPECT_NO_THROW(check_payload(*held[k])) << "held message " << k << " was overwritten";
    held.clear();
    for (const auto until = Clock::now() + 10s; next < sent && Clock::now() < until;) {
        (void)to_b->flush(0ns);
        if (auto m = from_a->receive(1ms)) {
            ASSERT_EQ(check_payload(*m).seq, next);
            ++next;
        }
    }
    EXPECT_EQ(next, sent);
    EXPECT_TRUE(to_b->flush(10s));
}

// With sci.records a stream of small messages travels as records of open slots, with
// now and then a message that takes the general path (1 KiB and more: alone in its
// slot, or through the large region) and so closes the open slot: every message
// arrives once, in order, intact, through buffers and lent views alike, some of them
// held for a while.
TEST(SciRecords, AStreamOfRecordsAndOtherMessagesArrivesOnceInOrderIntact) {
    auto c = make_configuration("sci", partition_for_test(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 3;
        c.edit_section<sci::Options>().records = true;
        c.max_message_size = 64 * 1024;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 20000;
    auto size_of = [](std::uint64_t i) -> std::size_t {
        if (i % 997 == 996) return 20000; // the large region
        if (i % 101 == 100) return 1500;  // alone in its slot
        return sizeof(PayloadHeader) + (i * 37) % 200;
    };
    std::thread sender([&] {
        for (std::uint64_t i = 0; i < n; ++i) {
            auto m = make_message(*a, size_of(i), 1, i);
            if (i % 2 == 0) {
                to_b->send(std::move(m));
            } else {
                to_b->send_bytes(m->single()->bytes());
            }
            if (to_b->stats().queue_depth > 500) (void)to_b->flush(10s);
        }
        (void)to_b->flush(30s);
    });
    std::string error;
    std::deque<MessageView> held;
    for (std::uint64_t i = 0; i < n && error.empty(); ++i) {
        MessageView v;
        BufferPtr m;
        if (i % 3 == 0) {
            m = from_a->receive(20s);
        } else {
            v = from_a->receive_view(20s);
        }
        std::span<const std::byte> bytes = m ? std::span<const std::byte>(m->single()->bytes()) : v.bytes();
        if (!m && !v) {
            error = "stalled at message " + std::to_string(i);
            break;
        }
        try {
            class View final : public SingleBuffer {
            public:
                explicit View(std::span<const std::byte> b)
                    : SingleBuffer(const_cast<std::byte*>(b.data()), b.size(), b.size()) {}
            };
            const auto h = check_payload(View(bytes));
            if (h.seq != i) error = "message " + std::to_string(h.seq) + " when " + std::to_string(i) + " was due";
        } catch (const std::string& e) {
            error = e;
        }
        if (bytes.size() != size_of(i)) error = "message " + std::to_string(i) + ": size";
        if (v && i % 7 == 0) held.push_back(std::move(v)); // released later, out of turn
        if (held.size() > 20) held.pop_front();
    }
    held.clear();
    sender.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    EXPECT_EQ(from_a->stats().messages_received, n);
}

// Two nodes of a partition with sci.records on (max_outst_buffers 2), node 1
// sending to node 2, the link up both ways (a first message alone in its slot,
// taken and dropped), and node 2's taken word in node 1's segment (protocol.hpp,
// "The taken word") mapped for the test to read.
class RecordsLink {
public:
    explicit RecordsLink(const std::string& partition)
        : c_(make_configuration("sci", partition, 2,
                                [](config::Configuration& c) {
                                    c.edit_section<sci::Options>().max_outst_buffers = 2;
                                    c.edit_section<sci::Options>().records = true;
                                })),
          a_(NodeFactory::create(c_, 1)), b_(NodeFactory::create(c_, 2)), to_b_(a_->create_node(2)),
          from_a_(b_->create_node(1)), device_(partition) {
        to_b_->send(make_message(*a_, sci::hot_min_size, 1, 0));
        auto first = from_a_->receive(10s);
        EXPECT_NE(first, nullptr) << "the first message never arrived";
        EXPECT_TRUE(segment_.connect(device_.segment_name(1, c_.section<sci::Options>().recv_seg_id)));
        segment_.map();
    }
    [[nodiscard]] Node& to_b() const { return *to_b_; }
    [[nodiscard]] Node& from_a() const { return *from_a_; }
    [[nodiscard]] NodeFactory& a() const { return *a_; }
    [[nodiscard]] std::uint64_t slot_size() const { return c_.section<sci::Options>().recv_buffer_size; }
    // Node 2's taken word in node 1's segment (node 2's header there: position 1).
    [[nodiscard]] std::uint32_t taken() const {
        auto* header = reinterpret_cast<sci::Header*>(segment_.address() + sci::control_block_size + sci::header_size);
        return std::atomic_ref<std::uint32_t>(header->index[sci::taken_index].ack).load();
    }
    // Sends message seq (a record of 8 + 16 bytes).
    void send(std::uint64_t seq) const { to_b_->send(make_message(*a_, sizeof(PayloadHeader), 1, seq)); }

private:
    config::Configuration c_;
    std::unique_ptr<NodeFactory> a_, b_;
    std::shared_ptr<Node> to_b_, from_a_;
    sci::VirtualDevice device_;
    sci::RemoteSegment segment_;
};

// Where record k (8 + 16 bytes each) of an open slot starts, and how many fit a
// slot with its close.
std::uint64_t record_offset(std::uint64_t k) {
    std::uint64_t o = 0;
    for (std::uint64_t i = 0; i < k; ++i)
        o = sci::record_next(o, sizeof(PayloadHeader));
    return o;
}
std::uint64_t records_per_slot(std::uint64_t slot_size) {
    std::uint64_t k = 0;
    while (sci::record_next(record_offset(k), sizeof(PayloadHeader)) + sci::record_header_size <= slot_size)
        ++k;
    return k;
}

// "The receiver writes, when it opens the slot (0) and each time its next record's
// offset passes a quarter of the slot, how many records of that slot it took": a
// receiver that keeps up (each message taken right after it was sent) finds every
// message at once (the sender staged none: the receiver was never a quarter behind),
// in order, once, over three slots, and the word says exactly what it took, signed
// for each slot anew.
TEST(SciRecords, TheReceiverWritesTheRecordsItTookEachQuarterSlotAndAKeptUpSenderStagesNone) {
    const RecordsLink link(partition_for_test());
    EXPECT_EQ(link.taken(), 0u) << "a taken word before any slot was open to records";
    const std::uint64_t per_slot = records_per_slot(link.slot_size());
    const std::uint64_t quarter = link.slot_size() / 4;
    std::uint64_t seq = 1;
    std::uint32_t previous_check = 0;
    for (int slot = 0; slot < 3; ++slot) {
        std::uint32_t check = 0;
        std::uint32_t expected = 0;
        std::uint64_t report_at = quarter;
        for (std::uint64_t k = 0; k < per_slot; ++k, ++seq) {
            link.send(seq);
            auto m = link.from_a().receive(); // no wait: a record the sender wrote is in the slot
            ASSERT_NE(m, nullptr) << "message " << seq << " (record " << k << " of slot " << slot
                                  << ") was not in the slot right after its send";
            ASSERT_EQ(check_payload(*m).seq, seq);
            if (k == 0) {
                check = link.taken() >> 24;
                ASSERT_NE(check, 0u) << "no taken word when slot " << slot << " was opened";
                ASSERT_NE(check, previous_check) << "slot " << slot << "'s taken word is signed as the one before";
                expected = sci::make_taken(check, 0);
            }
            const std::uint64_t next = record_offset(k + 1);
            if (next >= report_at) {
                expected = sci::make_taken(check, static_cast<std::uint32_t>(k + 1));
                report_at = (next / quarter + 1) * quarter;
            }
            ASSERT_EQ(link.taken(), expected) << "after record " << k << " of slot " << slot;
        }
        previous_check = check;
    }
    link.send(seq); // closes the third slot
    auto m = link.from_a().receive(10s);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(check_payload(*m).seq, seq);
    EXPECT_EQ(link.from_a().receive(), nullptr) << "a message was delivered twice";
}

// A receiver more than a quarter of the slot behind: node 2 takes nothing while
// node 1 sends. The records of the first quarter go into the slot one by one; at
// the quarter the sender finds that node 2 has not even opened the slot (its taken
// word) and stages the next ones, which wait in node 1's memory until a quarter is
// staged or node 1 calls again (here a flush); then every message arrives, in
// order, once.
TEST(SciRecords, ASenderStagesItsRecordsWhileTheReceiverIsMoreThanAQuarterSlotBehind) {
    const RecordsLink link(partition_for_test());
    const std::uint64_t quarter = link.slot_size() / 4;
    std::uint64_t direct = 0; // records that start before the first quarter's end
    while (record_offset(direct) < quarter)
        ++direct;
    constexpr std::uint64_t staged = 10;
    for (std::uint64_t seq = 1; seq <= direct + staged; ++seq)
        link.send(seq);
    std::uint64_t next = 1;
    for (BufferPtr m; (m = link.from_a().receive()) != nullptr; ++next)
        ASSERT_EQ(check_payload(*m).seq, next);
    EXPECT_EQ(next, direct + 1) << "node 2 found " << next - 1 << " messages before node 1's next call, "
                                << "where the first " << direct << " are written one by one and the next staged";
    EXPECT_TRUE(link.to_b().flush(10s)); // publishes the staged records
    for (BufferPtr m; next <= direct + staged && (m = link.from_a().receive(10s)) != nullptr; ++next)
        ASSERT_EQ(check_payload(*m).seq, next);
    EXPECT_EQ(next, direct + staged + 1) << "a staged record never arrived";
    EXPECT_EQ(link.from_a().receive(), nullptr) << "a message was delivered twice";
}

// A flush starts afresh (docs/sci-protocol.md): node 1's stream staged its records
// (node 2 was more than a quarter of the slot behind), a flush published them and
// node 2 took everything. Each message sent after that goes straight into the open
// slot: node 2 finds it with no other call of node 1 (it waited for node 1's next
// call, a flush in the conformance suite after 10 s, until the next quarter).
TEST(SciRecords, AMessageSentAfterAFlushOfStagedRecordsArrivesWithoutAnotherCallOfTheSender) {
    const RecordsLink link(partition_for_test());
    const std::uint64_t quarter = link.slot_size() / 4;
    std::uint64_t direct = 0; // records that start before the first quarter's end
    while (record_offset(direct) < quarter)
        ++direct;
    constexpr std::uint64_t staged = 10;
    std::uint64_t seq = 1;
    for (; seq <= direct + staged; ++seq)
        link.send(seq);
    EXPECT_TRUE(link.to_b().flush(10s)); // publishes the staged records
    std::uint64_t next = 1;
    for (BufferPtr m; next < seq && (m = link.from_a().receive(10s)) != nullptr; ++next)
        ASSERT_EQ(check_payload(*m).seq, next);
    ASSERT_EQ(next, seq);
    for (int i = 0; i < 5; ++i, ++seq) { // within the same quarter of the slot
        link.send(seq);
        auto m = link.from_a().receive(10s);
        ASSERT_NE(m, nullptr) << "message " << seq << ", sent after the flush, waited for node 1's next call";
        EXPECT_EQ(check_payload(*m).seq, seq);
    }
    EXPECT_EQ(link.from_a().receive(), nullptr) << "a message was delivered twice";
}

// A full slot behind a slow receiver: node 1 sends what fills its two slots and
// more (the rest queues) while node 2 takes nothing. The staged records of each
// slot go in before its close, the next message opens the other slot, and once
// node 2 takes them (node 1's flushes moving the queue) every message arrives, in
// order, once, intact.
TEST(SciRecords, AFullSlotClosesAfterItsStagedRecordsAndTheStreamGoesOnInOrder) {
    const RecordsLink link(partition_for_test());
    const std::uint64_t n = 3 * records_per_slot(link.slot_size()) + 50;
    for (std::uint64_t seq = 1; seq <= n; ++seq)
        link.send(seq);
    EXPECT_GT(link.to_b().stats().queue_depth, 0u) << "two slots held every message";
    std::uint64_t next = 1;
    for (const auto until = Clock::now() + 20s; next <= n && Clock::now() < until;) {
        (void)link.to_b().flush(0ns);
        if (auto m = link.from_a().receive(1ms)) {
            ASSERT_EQ(check_payload(*m).seq, next);
            ++next;
        }
    }
    EXPECT_EQ(next, n + 1);
    EXPECT_TRUE(link.to_b().flush(10s));
    EXPECT_EQ(link.from_a().receive(), nullptr) << "a message was delivered twice";
}

// ------------------------------------------------------------ receive slots

// "A released receive buffer gives its offset back to the sender without waiting
// for the receiver's next receive call". The receiver has exactly the slots it
// grants the sender (4), holds the 4 messages it took, and the sender's fifth
// message waits in its queue. Dropping one buffer, with no receive call after it,
// lets the fifth go.
TEST(SciReceiveSlots, ADroppedBufferGivesItsSlotBackToTheSenderWithoutAnotherReceive) {
    constexpr std::uint32_t k = 4;
    auto c = make_configuration("sci", partition_for_test(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = k;
        c.edit_section<sci::Options>().recv_buffer_no = k; // no slot beyond those granted to the one sender
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    for (std::uint64_t i = 0; i <= k; ++i) // each alone in its slot (smaller ones would share an open slot)
        to_b->send(make_message(*a, sci::hot_min_size, 1, i));
    ASSERT_EQ(to_b->stats().queue_depth, 1u) << "the sender had more than " << k << " slots";
    std::vector<BufferPtr> held;
    for (std::uint64_t i = 0; i < k; ++i) {
        held.push_back(from_a->receive(10s));
        ASSERT_NE(held.back(), nullptr) << "message " << i;
        ASSERT_EQ(check_payload(*held.back()).seq, i);
    }
    EXPECT_FALSE(to_b->flush(50ms)) << "the fifth message went while every slot was held";
    held.erase(held.begin()); // message 0: its slot goes back to the sender now
    EXPECT_TRUE(to_b->flush(10s)) << "the queued message still waits for a slot";
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
    auto fifth = from_a->receive(10s);
    ASSERT_NE(fifth, nullptr);
    EXPECT_EQ(check_payload(*fifth).seq, k);
    for (std::size_t i = 0; i < held.size(); ++i)
        EXPECT_EQ(check_payload(*held[i]).seq, i + 1) << "a held message was overwritten";
}

// Grants in batches (docs/sci-protocol.md): a slot the receiving thread gives back
// while the peer's next note already waits is granted in the index word, and its ack
// is written by that thread's next receive call once half the window (3 of 7) waits
// so, or by a call that finds nothing. One thread plays both ends, so which acks wait
// is fixed: messages 0-2 are dropped with the next note there (their acks wait), the
// eighth message, on index 0 again, then queues; the receive of message 3 writes the
// three acks and the queue goes. Every message arrives once, in order.
TEST(SciReceiveSlots, TheReceivingThreadsDropsWriteTheirAcksHalfAWindowAtATime) {
    constexpr std::uint32_t k = 7;
    auto c = make_configuration("sci", partition_for_test(), 2,
                                [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = k; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    // Each alone in its slot: messages from hot_min_size on are never held back in a
    // staged batch while the receiver is behind (SciHold below).
    constexpr std::size_t size = sci::hot_min_size;
    for (std::uint64_t i = 0; i < k; ++i)
        to_b->send(make_message(*a, size, 1, i));
    ASSERT_EQ(to_b->stats().queue_depth, 0u) << "the sender had fewer than " << k << " slots";
    std::uint64_t next = 0;
    auto take = [&] {
        auto m = from_a->receive(10s);
        ASSERT_NE(m, nullptr) << "message " << next;
        EXPECT_EQ(check_payload(*m).seq, next);
        ++next; // m dropped here, by the receiving thread
    };
    for (int i = 0; i < 3; ++i)
        take();
    to_b->send(make_message(*a, size, 1, k));
    EXPECT_EQ(to_b->stats().queue_depth, 1u) << "the ack of a drop with the next note waiting was written at once";
    take(); // message 3: its receive writes the three acks
    EXPECT_TRUE(to_b->flush(10s)) << "the receive call did not write the acks that waited";
    while (next <= k)
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    // Nothing waits now: the last drop (no next note) and the empty receive wrote every ack.
    for (std::uint64_t i = 0; i < k; ++i)
        to_b->send(make_message(*a, size, 1, k + 1 + i));
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "an ack still waited after an empty receive";
    while (next <= 2 * k)
        take();
}

// The SciHold tests: node 1 sends 64 B messages to node 2 with max_outst_buffers k
// (and a third node when asked); one thread plays both ends, and take() checks that
// the next message is the one expected.
class SciHold : public ::testing::Test {
protected:
    static constexpr std::uint32_t k = 7;
    void start(std::uint32_t nodes = 2) {
        c_ = make_configuration("sci", partition_for_test(), nodes,
                                [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = k; });
        a = NodeFactory::create(c_, 1);
        b = NodeFactory::create(c_, 2);
        to_b = a->create_node(2);
        from_a = b->create_node(1);
    }
    void send(std::size_t size = 64) { to_b->send(make_message(*a, size, 1, sent++)); }
    void take() {
        auto m = from_a->receive(10s);
        ASSERT_NE(m, nullptr) << "message " << next;
        EXPECT_EQ(check_payload(*m).seq, next);
        ++next;
    }

    config::Configuration c_;
    std::unique_ptr<NodeFactory> a, b;
    NodePtr to_b, from_a;
    std::uint64_t sent = 0, next = 0;
};

// Holding small messages (docs/sci-protocol.md): from the send that finds no slot
// granted for its small message (the receiver is a window behind), sends hold their
// messages in one staged batch, even once slots are granted again, until a send finds
// the whole window granted, which sends the batch with one note; a flush sends what
// is held, and a send that finds the whole window granted with no more than one
// message waiting stops holding. One thread plays both ends, so when each grant is
// seen is fixed; the node's path counters say how the messages went.
TEST_F(SciHold, ASenderAWindowBehindHoldsItsSmallMessagesInOneBatchUntilTheReceiverTookEverything) {
    start();
    const sci::PathCounters& paths = dynamic_cast<sci::SciNode&>(*to_b).paths();
    auto count = [](const std::atomic<std::uint64_t>& n) { return n.load(std::memory_order_relaxed); };
    for (std::uint32_t i = 0; i < k; ++i) // 0-6: each alone, at once
        send();
    EXPECT_EQ(count(paths.alone), k);
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
    for (int i = 0; i < 6; ++i) // 7-12: no slot granted, held
        send();
    EXPECT_EQ(to_b->stats().queue_depth, 6u);
    for (int i = 0; i < 4; ++i) // 0-3: three slots granted again (the fourth's ack waits)
        take();
    send(); // 13
    EXPECT_EQ(to_b->stats().queue_depth, 7u) << "a send with slots granted, but not all, sent what was held";
    EXPECT_EQ(count(paths.alone), k);
    EXPECT_EQ(count(paths.batches), 0u);
    while (next < k)
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a held message was delivered";
    // The whole window is granted: this send sends the seven held messages as one
    // batch and holds its own (the batch is outstanding).
    send(); // 14
    EXPECT_EQ(count(paths.batches), 1u);
    EXPECT_EQ(count(paths.batched), 7u);
    EXPECT_EQ(count(paths.alone), k) << "a stream's next message went alone";
    EXPECT_EQ(to_b->stats().queue_depth, 1u);
    EXPECT_TRUE(to_b->flush(10s)) << "a flush did not send the held message";
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
    while (next < sent && !HasFatalFailure())
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    // Everything taken and granted: a lone message goes at once, and holding stops.
    const std::uint64_t alone = count(paths.alone);
    send(); // 15
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "a lone message was held after the receiver took everything";
    EXPECT_EQ(count(paths.alone), alone + 1);
    take();
    send(); // 16: holding stopped
    EXPECT_EQ(to_b->stats().queue_depth, 0u);
    take();
}

// Held messages wait at most until the process's next call that moves queues
// (docs/sci-protocol.md): a receive on the holding node, and a send to another node,
// send what is held though the receiver has not taken everything, and every message
// arrives once, in order.
TEST_F(SciHold, AReceiveAndASendToAnotherNodeSendWhatIsHeld) {
    start(3);
    auto third = NodeFactory::create(c_, 3);
    auto to_third = a->create_node(3);
    auto third_from_a = third->create_node(1);
    for (std::uint32_t i = 0; i < k + 2; ++i) // 0-6 alone, 7-8 held
        send();
    ASSERT_EQ(to_b->stats().queue_depth, 2u);
    for (int i = 0; i < 4; ++i) // 0-3: slots granted again, not the whole window
        take();
    EXPECT_EQ(to_b->receive(), nullptr);
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "a receive on the holding node did not send what was held";
    send(); // 9: held (the batch of 7-8 is outstanding)
    ASSERT_EQ(to_b->stats().queue_depth, 1u);
    to_third->send(make_message(*a, 64, 2, 0));
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "a send to another node did not send what was held";
    while (next < sent && !HasFatalFailure())
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
    auto m = third_from_a->receive(10s);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(check_payload(*m).stream, 2u);
}

// A flush starts afresh (docs/sci-protocol.md): node 1 held (no slot was granted
// for message 7), node 2 took four messages (not the whole window granted again) and
// a flush sent what was held. The next message finds a slot granted and goes at once:
// node 2 finds it with no other call of node 1 (it was held, and waited for node 1's
// next call, because the sender went on holding until it found the whole window).
TEST_F(SciHold, AMessageSentAfterAFlushGoesAtOnceThoughNotTheWholeWindowIsGranted) {
    start();
    for (std::uint32_t i = 0; i < k + 3; ++i) // 0-6 alone, 7-9 held
        send();
    ASSERT_EQ(to_b->stats().queue_depth, 3u);
    for (int i = 0; i < 4; ++i) // 0-3: slots granted again, not the whole window
        take();
    EXPECT_TRUE(to_b->flush(10s)) << "a flush did not send what was held";
    send(); // 10
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "a message sent after a flush was held though a slot was granted";
    while (next < sent && !HasFatalFailure()) // 4-9, then 10 with no call of node 1 in between
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
}

// Messages above hold_max_size (128 B) are never held (docs/sci-protocol.md): a held
// one is copied twice, into the staged batch and then into the slot, which cost a
// 256 B stream more than batching gained. Message 7 finds no slot granted and
// queues; once slots are granted again, message 8 first sends it and then goes at
// once, each alone in its slot.
TEST_F(SciHold, AMessageAboveTheHoldSizeIsNeverHeld) {
    start();
    const sci::PathCounters& paths = dynamic_cast<sci::SciNode&>(*to_b).paths();
    auto count = [](const std::atomic<std::uint64_t>& n) { return n.load(std::memory_order_relaxed); };
    constexpr std::size_t size = 2 * 128;
    for (std::uint32_t i = 0; i < k + 1; ++i) // 0-6 alone, 7 queued (no slot granted)
        send(size);
    ASSERT_EQ(to_b->stats().queue_depth, 1u);
    for (int i = 0; i < 4; ++i) // 0-3: slots granted again, not the whole window
        take();
    send(size); // 8
    EXPECT_EQ(to_b->stats().queue_depth, 0u) << "a message of " << size << " bytes was held";
    EXPECT_EQ(count(paths.alone), k + 2);
    EXPECT_EQ(count(paths.batches), 0u);
    while (next < sent && !HasFatalFailure())
        take();
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
}

// The receiver thread hands every message to a worker thread that checks and drops
// it, so grants are written by the worker while the receiver takes the next
// messages and grants from the pool (a pool of 2 slots beyond the sender's 4). Every
// message arrives once, in order, intact.
TEST(SciReceiveSlots, BuffersDroppedByAnotherThreadWhileTheReceiverGoesOnArriveOnceInOrder) {
    auto c = make_configuration("sci", partition_for_test(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().max_outst_buffers = 4;
        c.edit_section<sci::Options>().recv_buffer_no = 6;
    });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    constexpr std::uint64_t n = 20000;
    std::atomic<bool> stop{false};
    std::thread sender([&] {
        for (std::uint64_t i = 0; i < n && !stop.load(); ++i) {
            for (;;) {
                try {
                    to_b->send(make_message(*a, 24 + i % 500, 1, i));
                    break;
                } catch (const SendQueueFull&) {
                    (void)to_b->flush(1ms);
                }
            }
        }
        const auto deadline = Clock::now() + 30s;
        while (!stop.load() && !to_b->flush(10ms) && Clock::now() < deadline) {
        }
    });
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<BufferPtr> handed;
    bool done = false;
    std::string worker_error;
    std::uint64_t checked = 0;
    std::thread worker([&] {
        for (;;) {
            BufferPtr m;
            {
                std::unique_lock lock(mutex);
                cv.wait(lock, [&] { return done || !handed.empty(); });
                if (handed.empty()) return;
                m = std::move(handed.front());
                handed.pop_front();
            }
            try {
                const auto h = check_payload(*m);
                if (h.seq != checked && worker_error.empty())
                    worker_error = "message " + std::to_string(h.seq) + " when " + std::to_string(checked) + " was due";
            } catch (const std::string& e) {
                if (worker_error.empty()) worker_error = e;
            }
            ++checked;
            m.reset(); // the worker's drop grants the slot
        }
    });
    std::string error;
    for (std::uint64_t i = 0; i < n; ++i) {
        auto m = from_a->receive(20s);
        if (!m) {
            error = "stalled at " + std::to_string(i);
            break;
        }
        std::lock_guard lock(mutex);
        handed.push_back(std::move(m));
        cv.notify_one();
    }
    {
        std::lock_guard lock(mutex);
        done = true;
        cv.notify_one();
    }
    worker.join();
    stop.store(true);
    sender.join();
    EXPECT_EQ(error, "");
    EXPECT_EQ(worker_error, "");
    EXPECT_EQ(checked, n);
    EXPECT_EQ(from_a->receive(), nullptr) << "a message was delivered twice";
}

// ---------------------------------------------------------------- doorbell

// A receiver that sleeps says so in its header in the sender's segment, which is
// where the sender looks (its own memory). A sender that publishes after that rings
// the receiver's doorbell; one whose receiver does not sleep makes no system call.
// Node 2 receives, node 1 sends; the test watches node 2's status word in node 1's
// segment and node 2's doorbell.
TEST(SciDoorbell, ASleepingReceiverIsRungAndAnAwakeOneIsNot) {
    const SegmentCleanup segments(partition_for_test());
    auto c = make_configuration("sci", segments.partition(), 2,
                                [](config::Configuration& c) { c.edit_section<sci::Options>().max_outst_buffers = 4; });
    auto a = NodeFactory::create(c, 1);
    auto b = NodeFactory::create(c, 2);
    auto to_b = a->create_node(2);
    auto from_a = b->create_node(1);
    sci::VirtualDevice device(segments.partition());
    sci::RemoteSegment segment_a, segment_b;
    ASSERT_TRUE(segment_a.connect(device.segment_name(1, c.section<sci::Options>().recv_seg_id)));
    ASSERT_TRUE(segment_b.connect(device.segment_name(2, c.section<sci::Options>().recv_seg_id)));
    segment_a.map();
    segment_b.map();
    auto* status = &reinterpret_cast<sci::Header*>(segment_a.address() + sci::control_block_size + sci::header_size)
                        ->status; // node 2's header in node 1's segment
    auto& bell = reinterpret_cast<sci::ControlBlock*>(segment_b.address())->bell;
    auto asleep = [&] { return sci::asleep_of(std::atomic_ref<std::uint32_t>(*status).load()); };

    // Awake: node 2 polls without waiting; the sends ring nothing.
    ASSERT_FALSE(asleep());
    const std::uint32_t rung_before = bell.sequence.load();
    for (std::uint64_t i = 0; i < 100; ++i) {
        to_b->send(make_message(*a, 64, 1, i));
        BufferPtr m;
        const auto until = Clock::now() + 10s;
        while (!m && Clock::now() < until)
            m = from_a->receive();
        ASSERT_NE(m, nullptr) << "message " << i;
    }
    EXPECT_EQ(bell.sequence.load(), rung_before) << "a sender rang a receiver that was awake";

    // Asleep: node 2 waits in receive(10 s) and announces it; node 1's send rings.
    BufferPtr got;
    std::thread receiver([&] { got = from_a->receive(10s); });
    const auto until = Clock::now() + 10s;
    while (!asleep() && Clock::now() < until)
        std::this_thread::yield();
    const bool announced = asleep();
    const std::uint32_t rung = bell.sequence.load();
    to_b->send(make_message(*a, 64, 1, 100));
    receiver.join();
    ASSERT_TRUE(announced) << "node 2 never said it sleeps";
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(check_payload(*got).seq, 100u);
    EXPECT_NE(bell.sequence.load(), rung) << "the sender did not ring the sleeping receiver";
    EXPECT_FALSE(asleep()) << "node 2 still says it sleeps after it woke";
}

// ------------------------------------------------------------------ hot slot

std::vector<std::string> echo_args(const std::string& partition) {
    return {SCI_PEER, partition, "2", "2", "1", "echo", "0", "0", "300"};
}

// The grant word node 2 wrote into node 1's segment: its hot slot for node 1.
std::uint32_t hot_signature_granted_by_peer(const sci::RemoteSegment& own) {
    auto* header = reinterpret_cast<sci::Header*>(own.address() + sci::control_block_size + sci::header_size);
    return sci::hot_sig_of(std::atomic_ref<std::uint32_t>(header->status).load(std::memory_order_acquire));
}

// Node 1 (here) sends a fresh message, node 2 (a process) echoes it, node 1 sends
// the echo on as it is (a received buffer: it grants its hot slot), node 2 echoes
// it again. Node 2 is killed while node 1 holds one of its echoes, which node 1
// sends on to the restarted node 2 as it is; the pattern then goes on.
TEST(SciHotSlot, AnEchoOfReceivedBuffersDeliversIntactDataAcrossAPeerRestart) {
    const SegmentCleanup segments(partition_for_test()); // the killed peer leaves segments behind
    const auto& partition = segments.partition();
    auto c = make_configuration("sci", partition, 2, [](config::Configuration& c) {
        c.peer_timeout = 300ms;
        c.edit_section<sci::Options>().max_outst_buffers = 4;
    });
    auto self = NodeFactory::create(c, 1);
    auto peer = self->create_node(2);
    sci::VirtualDevice device(partition);
    sci::RemoteSegment own; // this process's own segment, to watch the peer's hot grant
    ASSERT_TRUE(own.connect(device.segment_name(1, c.section<sci::Options>().recv_seg_id)));
    own.map();

    std::uint64_t seq = 0;
    std::uint64_t hot_grants_seen = 0;
    bool lost_reported = false;
    // Waits for the echo of message `expected`, intact; PeerLost of the killed
    // incarnation is taken once.
    auto echo_of = [&](std::uint64_t expected) -> BufferPtr {
        const auto deadline = Clock::now() + 10s;
        while (Clock::now() < deadline) {
            try {
                auto m = peer->receive(deadline - Clock::now());
                if (!m) break;
                const auto h = check_payload(*m);
                EXPECT_EQ(h.seq, expected);
                if (h.seq != expected) return nullptr;
                if (hot_signature_granted_by_peer(own) != 0) ++hot_grants_seen;
                return m;
            } catch (const PeerLost&) {
                EXPECT_FALSE(lost_reported) << "PeerLost was raised twice for one loss";
                lost_reported = true;
            } catch (const std::string& e) {
                ADD_FAILURE() << e;
                return nullptr;
            }
        }
        ADD_FAILURE() << "no echo of message " << expected;
        return nullptr;
    };
    auto size_of = [](std::uint64_t i) -> std::size_t { return i % 5 == 4 ? 64 : 256 + (i * 977) % (8192 - 256); };
    // One fresh message and the relay of its echo; returns the second echo.
    auto round_trip = [&]() -> BufferPtr {
        const std::uint64_t i = seq++;
        peer->send(make_message(*self, size_of(i), 1, i));
        auto first = echo_of(i);
        if (!first) return nullptr;
        peer->send(std::move(first));
        return echo_of(i);
    };

    BufferPtr held;
    {
        ChildProcess first(echo_args(partition));
        ASSERT_EQ(first.wait_for_line("ready", 10s), "ready");
        for (int r = 0; r < 200; ++r)
            ASSERT_NE(round_trip(), nullptr) << "round " << r << " before the restart";
        held = round_trip();
        ASSERT_NE(held, nullptr);
        first.kill(SIGKILL);
        first.wait();
    }
    EXPECT_FALSE(lost_reported) << "PeerLost before the peer died";
    const std::uint64_t held_seq = seq - 1;
    const std::uint64_t grants_before = hot_grants_seen;
    EXPECT_GT(grants_before, 200u) << "the peer granted no hot slot before the restart";

    ChildProcess second(echo_args(partition));
    ASSERT_EQ(second.wait_for_line("ready", 10s), "ready");
    // The buffer received from the first incarnation goes to the second as it is.
    peer->send(std::move(held));
    auto back = echo_of(held_seq);
    ASSERT_NE(back, nullptr) << "the held echo did not come back from the restarted peer";
    back.reset();
    for (int r = 0; r < 200; ++r)
        ASSERT_NE(round_trip(), nullptr) << "round " << r << " after the restart";
    EXPECT_GT(hot_grants_seen - grants_before, 200u) << "the restarted peer granted no hot slot";
    EXPECT_EQ(peer->receive(), nullptr) << "an echo arrived twice";
    EXPECT_TRUE(lost_reported) << "the loss of the first incarnation was never reported";
}

} // namespace
} // namespace msgpass::test
