// Fixed-size blocks for the objects a technology hands out per message (sci's received buffers,
// small send buffers), recycled instead of taken from the heap each time. Each
// thread keeps a chain of free blocks of its own (no lock, no atomic operation);
// a thread that frees more than it takes (a worker that drops what the receiver
// thread took) passes chains of `chain` blocks to a shared depot, and a thread that
// runs out takes a chain from there: one lock per `chain` blocks, never per block.
// Under AddressSanitizer a free block is poisoned past its link to the next free
// one, so a buffer used after it was dropped is still reported (the link stays
// readable, so that the leak checker follows the chains).
#pragma once

#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define MSGPASS_KIT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define MSGPASS_KIT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define MSGPASS_KIT_POISON(p, n) ((void)(p), (void)(n))
#define MSGPASS_KIT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace msgpass::kit {

template <std::size_t Size>
class BlockCache {
    static_assert(Size >= sizeof(void*) && Size % alignof(std::max_align_t) == 0);

public:
    static constexpr std::size_t block_size = Size;
    static constexpr std::size_t chain = 64;      // blocks moved between a thread and the depot at once
    static constexpr std::size_t depot_max = 256; // chains the depot keeps; more go back to the heap

    // A block of Size bytes, aligned for any object.
    static void* get() {
        Local& t = local();
        if (t.head == nullptr) t.refill();
        if (Free* b = t.head) {
            MSGPASS_KIT_UNPOISON(b + 1, Size - sizeof(Free));
            t.head = b->next;
            --t.count;
            return b;
        }
        return ::operator new(Size);
    }

    // Takes back a block of get() (from any thread).
    static void put(void* p) noexcept {
        Local& t = local();
        if (t.ended) {
            ::operator delete(p);
            return;
        }
        auto* b = static_cast<Free*>(p);
        b->next = t.head;
        MSGPASS_KIT_POISON(b + 1, Size - sizeof(Free));
        t.head = b;
        if (++t.count >= 2 * chain) t.spill();
    }

    // Blocks this thread holds (for tests).
    static std::size_t cached() noexcept { return local().count; }

private:
    struct Free {
        Free* next;
    };

    struct Depot {
        std::mutex mutex;
        std::vector<Free*> chains; // each `chain` blocks long
    };
    // Never destroyed: threads that end after static destruction still give their
    // blocks back (reachable through this pointer, so no leak is reported).
    static Depot& depot() {
        static Depot* d = new Depot;
        return *d;
    }

    // Trivially destructible, so that it stays usable by the destructors of other
    // thread-local objects that drop buffers; the chain is freed by a Guard at
    // thread exit, after which the thread's blocks go straight to the heap.
    struct Local {
        Free* head;
        std::size_t count;
        bool ended;

        // Gives the depot one chain of blocks (the oldest stay here).
        void spill() noexcept {
            Free* first = head;
            Free* last = head;
            for (std::size_t i = 1; i < chain; ++i)
                last = last->next;
            head = last->next;
            last->next = nullptr;
            count -= chain;
            Depot& d = depot();
            {
                std::lock_guard lock(d.mutex);
                if (d.chains.size() < depot_max) {
                    d.chains.push_back(first);
                    return;
                }
            }
            release(first);
        }
        void refill() {
            if (ended) return;
            Depot& d = depot();
            std::lock_guard lock(d.mutex);
            if (d.chains.empty()) return;
            head = d.chains.back();
            d.chains.pop_back();
            count = chain;
        }
        static void release(Free* b) noexcept {
            while (b != nullptr) {
                MSGPASS_KIT_UNPOISON(b + 1, Size - sizeof(Free));
                Free* n = b->next;
                ::operator delete(b);
                b = n;
            }
        }
    };
    struct Guard {
        Local* t;
        ~Guard() {
            t->ended = true;
            Local::release(t->head);
            t->head = nullptr;
            t->count = 0;
        }
    };
    static Local& local() {
        thread_local Local t{};
        thread_local Guard guard{&t};
        (void)guard;
        return t;
    }
};

} // namespace msgpass::kit
