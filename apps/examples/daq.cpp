// msgpass-daq: the demo's data-acquisition partition in one program, whose role
// follows from the static groups of network.yaml. A readout source (group `sources`)
// sends one checksummed fragment per event to the event builder (group `builders`);
// the builder receives from the whole sources group, checks every fragment, assembles
// events and broadcasts a summary of each complete event to the `farm` group, whose
// workers check that events arrive complete and in order. An end-of-run message
// closes each stream and is acknowledged, so nothing queued is abandoned at exit.
//
// Flow control: the builder grants every source credit for the events it may send
// (at most --window events beyond the last one built), so the builder's memory of
// partly built events is bounded and a fast source waits for a slow one instead of
// filling the builder; a fragment beyond its credit breaks the protocol and counts
// as corrupt. Every wait has a timeout that means "no progress" (nothing received,
// a queue that did not shrink), never "not finished": a dead or silent peer ends the
// run with an error, never a hang, and a slow but live one does not. While it runs
// each node prints a line every --progress seconds; --json adds a one-line summary;
// --record DIR writes, per node, the summary (DIR/<node>.json), the event rate and
// queue depth over time (DIR/<node>.dat) and their plot (DIR/<node>.png, gnuplot).
// Exit status: 0 success, 1 loss/corruption/timeout, 2 setup error.
#include <msgpass/msgpass.hpp>

#include <boost/crc.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using msgpass::NodeId;

struct Settings {
    std::uint32_t events = 20000;
    std::uint64_t fragment_size = 1024;
    std::chrono::milliseconds timeout{5000};
    std::uint32_t window = 512;               // events in flight at the builder (its credit)
    std::chrono::milliseconds progress{1000}; // 0: no live lines
    bool json = false;
    std::string record;                          // --record DIR, empty: none
    std::chrono::milliseconds record_every{100}; // the recorded samples' interval
};

Settings parse_settings(const std::vector<std::string>& args) {
    namespace po = boost::program_options;
    Settings s;
    std::string size_text = "1KiB";
    double timeout_s = 5.0;
    double progress_s = 1.0;
    double record_s = 0.1;
    po::options_description desc("msgpass-daq options");
    desc.add_options()("events", po::value(&s.events), "events per source (default 20000)")(
        "fragment-size", po::value(&size_text), "payload bytes per fragment, e.g. 1KiB (default 1KiB)")(
        "timeout", po::value(&timeout_s), "seconds without progress before a peer is declared dead (default 5)")(
        "window", po::value(&s.window), "events in flight at the builder: the sources' credit (default 512)")(
        "progress", po::value(&progress_s), "seconds between live lines, 0 for none (default 1)")(
        "json", po::bool_switch(&s.json), "print a one-line JSON summary at the end")(
        "record", po::value(&s.record),
        "directory for DIR/<node>.json (the summary), .dat (rate and queue depth over time) and .png (their plot)")(
        "record-interval", po::value(&record_s), "seconds between recorded samples (default 0.1)");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
    auto size = msgpass::config::parse_size(size_text);
    if (!size) throw msgpass::UsageError("--fragment-size: expected a size such as 1KiB, found '" + size_text + "'");
    if (s.events == 0) throw msgpass::UsageError("--events: expected at least 1");
    if (!(timeout_s > 0 && timeout_s < 3600)) throw msgpass::UsageError("--timeout: expected 0 < seconds < 3600");
    if (s.window < 4 || s.window > 1u << 20) throw msgpass::UsageError("--window: expected 4 to 1048576 events");
    if (!(progress_s >= 0 && progress_s < 3600)) throw msgpass::UsageError("--progress: expected 0 <= seconds < 3600");
    s.progress = std::chrono::milliseconds(static_cast<long long>(progress_s * 1000));
    if (!(record_s >= 0.001 && record_s < 3600))
        throw msgpass::UsageError("--record-interval: expected 0.001 <= seconds < 3600");
    s.record_every = std::chrono::milliseconds(static_cast<long long>(record_s * 1000));
    if (!s.record.empty()) {
        std::error_code error;
        std::filesystem::create_directories(s.record, error);
        if (error || !std::filesystem::is_directory(s.record))
            throw msgpass::UsageError("--record: cannot make the directory '" + s.record + "': " + error.message());
    }
    s.fragment_size = *size;
    s.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    return s;
}

// Wire formats, copied with memcpy so that no alignment is assumed. Event number 0
// is the end-of-run marker: from a source, `size` holds the number of events it
// sent; from the builder to a source, the number of its fragments received. From
// the builder to a source, a header with event E > 0 and size 0 is a credit: the
// source may send every event up to E.
struct FragmentHeader {
    std::uint32_t event;
    std::uint32_t source;
    std::uint32_t size; // payload bytes after the header
    std::uint32_t crc;  // CRC-32C of the payload
};
// A built event: the header, then `fragments` CRC-32C words in source order. At end
// of run (event 0) `total_size` holds the number of events built (from the builder)
// or received (from a worker, as its acknowledgement).
struct SummaryHeader {
    std::uint32_t event;
    std::uint32_t fragments;
    std::uint64_t total_size;
};

// CRC-32C (Castagnoli) of the payload: with the SSE4.2 instruction where the CPU has
// it (8 bytes a step), else Boost.CRC's table (a byte a step) with the same result.
// The checksum is the example's own cost per fragment, paid twice (source and
// builder); with Boost's byte table it took about half of the partition's CPU time.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::span<const std::byte> bytes) {
    std::uint64_t crc = 0xFFFFFFFFu;
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
        std::uint64_t word;
        std::memcpy(&word, bytes.data() + i, 8);
        crc = __builtin_ia32_crc32di(crc, word);
    }
    auto c = static_cast<std::uint32_t>(crc);
    for (; i < bytes.size(); ++i)
        c = __builtin_ia32_crc32qi(c, static_cast<unsigned char>(bytes[i]));
    return c ^ 0xFFFFFFFFu;
}
#endif

std::uint32_t crc32(std::span<const std::byte> bytes) {
#if defined(__x86_64__)
    static const bool sse42 = __builtin_cpu_supports("sse4.2");
    if (sse42) return crc32c_sse42(bytes);
#endif
    Crc32c crc;
    crc.process_bytes(bytes.data(), bytes.size());
    return crc.checksum();
}

// Payload content that differs per event and source, so a misrouted fragment fails
// its checksum test at the builder as surely as a corrupted one: a 64-bit LCG, eight
// bytes a step.
void fill_payload(std::span<std::byte> payload, std::uint32_t event, std::uint32_t source) {
    std::uint64_t seed = (std::uint64_t{event} << 32 | source) * 0x9E3779B97F4A7C15ull + 1;
    std::size_t i = 0;
    for (; i + 8 <= payload.size(); i += 8) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        std::memcpy(payload.data() + i, &seed, 8);
    }
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (; i < payload.size(); ++i)
        payload[i] = static_cast<std::byte>(seed >> (8 * (i % 8)));
}

// The message as contiguous bytes: received buffers are contiguous, but checking
// costs nothing and a FragmentList is copied rather than misread.
std::span<const std::byte> bytes_of(const msgpass::Buffer& buffer, std::vector<std::byte>& scratch) {
    if (const auto* single = buffer.single()) return single->bytes();
    scratch.resize(buffer.size());
    buffer.copy_to(scratch);
    return scratch;
}

template <class T>
std::optional<T> read_header(std::span<const std::byte> bytes) {
    if (bytes.size() < sizeof(T)) return std::nullopt;
    T value;
    std::memcpy(&value, bytes.data(), sizeof(T));
    return value;
}

template <class T>
msgpass::BufferPtr make_message(msgpass::NodeFactory& factory, const T& header, std::size_t extra = 0) {
    auto buffer = factory.create_buffer(sizeof(T) + extra);
    auto* single = buffer->single();
    if (single == nullptr) throw msgpass::UsageError("create_buffer() returned a non-contiguous buffer");
    std::memcpy(single->data(), &header, sizeof(T));
    return buffer;
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Summaries queued towards one worker before the builder waits for it: far below
// send_queue_limit, because a group send cannot hand a buffer back on SendQueueFull.
constexpr std::uint64_t farm_queue_limit = 4096;
constexpr std::size_t max_sources = 65536; // the summary of an event holds a CRC word per source

double khz(std::uint64_t count, double seconds) {
    return seconds > 0 ? count / seconds / 1000.0 : 0.0;
}

// Waits until the node's send queue has room again (it shrank) or is empty; false
// only when it did not shrink for `patience`: a slow receiver is not a dead one.
bool wait_for_room(msgpass::Node& node, std::chrono::milliseconds patience) {
    const auto depth = node.stats().queue_depth;
    const auto deadline = Clock::now() + patience;
    do {
        if (node.flush(std::chrono::milliseconds(10))) return true;
        if (node.stats().queue_depth < depth) return true;
    } while (Clock::now() < deadline);
    return false;
}

// Hands over everything queued to the node; false only when nothing moved for
// `patience`.
bool drain(msgpass::Node& node, std::chrono::milliseconds patience) {
    while (node.stats().queue_depth > 0 || !node.flush(std::chrono::milliseconds(0))) {
        if (!wait_for_room(node, patience)) return false;
    }
    return true;
}

// The live line: every interval, the rate over the last interval and a depth.
class Progress {
public:
    Progress(std::string name, const Settings& s)
        : name_(std::move(name)), interval_(s.progress), recording_(!s.record.empty()), record_every_(s.record_every) {}
    // Called after each unit of work; `count` and `bytes` are totals so far.
    void tick(std::uint64_t count, std::uint64_t bytes, std::uint64_t depth, const char* what) {
        if (recording_) record(count, depth);
        if (interval_.count() == 0) return;
        const auto now = Clock::now();
        if (now < next_) return;
        if (last_time_ != Clock::time_point{}) {
            const double dt = std::chrono::duration<double>(now - last_time_).count();
            std::printf("%s: %.1f s: %.1f kHz, %.1f MB/s, %s %llu\n", name_.c_str(),
                        std::chrono::duration<double>(now - start_).count(), khz(count - last_count_, dt),
                        dt > 0 ? static_cast<double>(bytes - last_bytes_) / dt / 1e6 : 0.0, what,
                        static_cast<unsigned long long>(depth));
            std::fflush(stdout);
        } else {
            start_ = now;
        }
        last_time_ = now;
        last_count_ = count;
        last_bytes_ = bytes;
        next_ = now + interval_;
    }

    // --record: writes DIR/<name>.json (json_line), DIR/<name>.dat (the samples) and
    // DIR/<name>.png (their plot, by gnuplot); false with a message when one could not
    // be written.
    bool write_record(const std::string& dir, const std::string& json_line, const char* unit) const {
        const std::string base = (std::filesystem::path(dir) / name_).string();
        std::ofstream json(base + ".json");
        json << json_line;
        std::ofstream dat(base + ".dat");
        dat << "# seconds  rate_khz  " << unit << "\n";
        for (const auto& x : samples_)
            dat << x.seconds << ' ' << x.khz << ' ' << x.depth << '\n';
        json.close();
        dat.close();
        if (!json || !dat) {
            std::fprintf(stderr, "%s: --record: cannot write %s.json and %s.dat\n", name_.c_str(), base.c_str(),
                         base.c_str());
            return false;
        }
        if (samples_.empty()) {
            std::fprintf(stderr, "%s: --record: the run was shorter than --record-interval: no sample, no plot\n",
                         name_.c_str());
            return true;
        }
        std::ofstream gp(base + ".gp");
        gp << "set terminal png size 900,500\nset output '" << base << ".png'\n"
           << "set title '" << name_ << ": event rate and " << unit << " over time'\n"
           << "set xlabel 'seconds'\nset ylabel 'kHz'\nset y2label '" << unit << "'\n"
           << "set ytics nomirror\nset y2tics\nset key top left\nset grid\n"
           << "plot '" << base << ".dat' using 1:2 with lines lw 2 title 'rate (kHz)', '' using 1:3 axes x1y2"
           << " with steps title '" << unit << "'\n";
        gp.close();
        const std::string command = "gnuplot '" + base + ".gp' 2>/dev/null";
        if (!gp || std::system(command.c_str()) != 0) {
            std::fprintf(stderr, "%s: --record: gnuplot could not plot %s.png (is gnuplot installed?)\n", name_.c_str(),
                         base.c_str());
            return false;
        }
        return true;
    }

private:
    struct Sample {
        double seconds;
        double khz;
        std::uint64_t depth;
    };
    void record(std::uint64_t count, std::uint64_t depth) {
        const auto now = Clock::now();
        if (now < record_next_) return;
        if (record_start_ == Clock::time_point{}) {
            record_start_ = now;
        } else {
            const double dt = std::chrono::duration<double>(now - record_last_).count();
            samples_.push_back(
                {std::chrono::duration<double>(now - record_start_).count(), khz(count - record_count_, dt), depth});
        }
        record_last_ = now;
        record_count_ = count;
        record_next_ = now + record_every_;
    }

    std::string name_;
    std::chrono::milliseconds interval_;
    Clock::time_point start_{}, last_time_{}, next_{};
    std::uint64_t last_count_ = 0, last_bytes_ = 0;
    bool recording_;
    std::chrono::milliseconds record_every_;
    Clock::time_point record_start_{}, record_last_{}, record_next_{};
    std::uint64_t record_count_ = 0;
    std::vector<Sample> samples_;
};

// The summary line of --json (printed) and --record (written to DIR/<node>.json).
std::string json_line(const std::string& name, const char* role, std::uint64_t count, double seconds,
                      std::uint64_t bytes, std::uint64_t lost, std::uint64_t corrupt, std::uint64_t in_flight,
                      bool ok) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"node\": \"%s\", \"role\": \"%s\", \"count\": %llu, \"seconds\": %.6f, \"rate_khz\": %.3f, "
                  "\"mb_per_s\": %.3f, \"lost\": %llu, \"corrupt\": %llu, \"max_in_flight\": %llu, \"ok\": %s}\n",
                  name.c_str(), role, static_cast<unsigned long long>(count), seconds, khz(count, seconds),
                  seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0, static_cast<unsigned long long>(lost),
                  static_cast<unsigned long long>(corrupt), static_cast<unsigned long long>(in_flight),
                  ok ? "true" : "false");
    return line;
}

// The end of a role: the --json line, the --record files; the exit status (a record
// that could not be written fails the run: it was asked for).
int finish(const Settings& s, const Progress& progress, const std::string& line, const char* unit, bool ok) {
    if (s.json) std::fputs(line.c_str(), stdout);
    if (!s.record.empty() && !progress.write_record(s.record, line, unit)) ok = false;
    return ok ? 0 : 1;
}

// ---------------------------------------------------------------- readout source
int run_source(msgpass::NodeFactory& factory, const std::string& name, NodeId builder_id, const Settings& s) {
    const NodeId self = factory.self_id();
    auto builder = factory.create_node(builder_id);
    const auto size = static_cast<std::uint32_t>(s.fragment_size);
    if (size != s.fragment_size) throw msgpass::UsageError("--fragment-size: at most 4 GiB");
    std::vector<std::byte> scratch;
    std::uint32_t granted = 0;                 // the builder's credit: events up to this one may go
    std::optional<std::uint32_t> acknowledged; // the builder's end-of-run answer

    // Takes one message from the builder (a credit, or the end-of-run answer); false
    // when none came within the timeout or it was malformed.
    auto take_from_builder = [&](std::uint32_t event) {
        auto message = builder->receive(s.timeout);
        if (!message) {
            std::fprintf(stderr, "%s: builder %u granted no credit for %.1f s (at event %u, credit up to %u)\n",
                         name.c_str(), builder_id, s.timeout.count() / 1000.0, event, granted);
            return false;
        }
        const auto header = read_header<FragmentHeader>(bytes_of(*message, scratch));
        if (!header || header->source != builder_id) {
            std::fprintf(stderr, "%s: malformed message from builder %u\n", name.c_str(), builder_id);
            return false;
        }
        if (header->event == 0) {
            acknowledged = header->size;
        } else {
            granted = std::max(granted, header->event);
        }
        return true;
    };
    // Never block the readout loop: send() queues; only when the queue is full does
    // the source wait for the builder to take something. On SendQueueFull the buffer
    // stays with the caller, so it is sent again.
    auto send = [&](msgpass::BufferPtr buffer) {
        for (;;) {
            try {
                builder->send(std::move(buffer));
                return true;
            } catch (const msgpass::SendQueueFull&) {
                if (!wait_for_room(*builder, s.timeout)) return false;
            }
        }
    };

    Progress progress(name, s);
    const auto start = Clock::now();
    std::uint64_t bytes = 0;
    for (std::uint32_t event = 1; event <= s.events; ++event) {
        while (event > granted && !acknowledged) {
            if (!take_from_builder(event)) return 1;
        }
        if (acknowledged) {
            std::fprintf(stderr, "%s: builder %u ended the run at event %u\n", name.c_str(), builder_id, event);
            return 1;
        }
        auto buffer = make_message(factory, FragmentHeader{event, self, size, 0}, size);
        auto payload = buffer->single()->bytes().subspan(sizeof(FragmentHeader));
        fill_payload(payload, event, self);
        const FragmentHeader header{event, self, size, crc32(payload)};
        std::memcpy(buffer->single()->data(), &header, sizeof header);
        if (!send(std::move(buffer))) {
            std::fprintf(stderr, "%s: builder %u took nothing for %.1f s at event %u\n", name.c_str(), builder_id,
                         s.timeout.count() / 1000.0, event);
            return 1;
        }
        bytes += size;
        progress.tick(event, bytes, builder->stats().queue_depth, "queued");
    }
    const double queued = seconds_since(start); // send() returned for every fragment

    if (!send(make_message(factory, FragmentHeader{0, self, s.events, 0}))) {
        std::fprintf(stderr, "%s: could not send end-of-run to %u\n", name.c_str(), builder_id);
        return 1;
    }
    // Hand everything over; a slow builder is fine as long as it takes messages.
    if (!drain(*builder, s.timeout)) {
        std::fprintf(stderr, "%s: builder %u took nothing for %.1f s, %llu fragments still queued\n", name.c_str(),
                     builder_id, s.timeout.count() / 1000.0,
                     static_cast<unsigned long long>(builder->stats().queue_depth));
        return 1;
    }
    const double elapsed = seconds_since(start); // every fragment is in the builder's memory
    std::printf("%s: sent %u fragments (events 1..%u, %llu B each) in %.3f s: %.1f kHz, %.1f MB/s "
                "(send calls returned after %.3f s)\n",
                name.c_str(), s.events, s.events, static_cast<unsigned long long>(s.fragment_size), elapsed,
                khz(s.events, elapsed), elapsed > 0 ? bytes / elapsed / 1e6 : 0.0, queued);
    while (!acknowledged) { // credits may still come before the answer
        if (!take_from_builder(s.events)) {
            std::fprintf(stderr, "%s: no end-of-run acknowledgement from builder %u\n", name.c_str(), builder_id);
            return 1;
        }
    }
    std::printf("%s: end of run acknowledged: builder received %u of %u fragments\n", name.c_str(), *acknowledged,
                s.events);
    const bool ok = *acknowledged == s.events;
    return finish(
        s, progress,
        json_line(name, "source", s.events, elapsed, bytes, s.events - std::min(*acknowledged, s.events), 0, 0, ok),
        "fragments queued", ok);
}

// ---------------------------------------------------------------- event builder
int run_builder(msgpass::NodeFactory& factory, const std::string& name, const Settings& s) {
    auto sources = factory.create_group("sources");
    auto farm = factory.create_group("farm");
    const auto source_ids = sources->members();
    const std::size_t n = source_ids.size();
    // A fragment is found by its source's index (a table, not a search) and marked in
    // a bit per source, so a builder of hundreds of sources costs per fragment what a
    // builder of four does.
    if (n == 0 || n > max_sources)
        throw msgpass::UsageError("group 'sources' must have 1 to " + std::to_string(max_sources) + " members, has " +
                                  std::to_string(n));
    if (farm->size() == 0) throw msgpass::UsageError("group 'farm' is empty");
    std::vector<msgpass::NodePtr> farm_nodes;
    for (NodeId id : farm->members())
        farm_nodes.push_back(factory.create_node(id));
    // Receive from the sources that have not ended yet: a source leaves once its
    // end of run is acknowledged, and a departed member must not be polled again.
    auto running = factory.create_group();
    std::vector<msgpass::NodePtr> source_nodes;
    for (NodeId id : source_ids) {
        source_nodes.push_back(factory.create_node(id));
        running->add(source_nodes.back());
    }
    std::vector<bool> source_ended(n, false);
    // The credit: every source may send the events up to `granted`, at most a window
    // beyond the last event built, so at most a window of events is partly built.
    std::uint32_t granted = 0;
    auto grant = [&](std::uint32_t up_to) {
        granted = up_to;
        for (std::size_t i = 0; i < n; ++i) {
            if (!source_ended[i])
                source_nodes[i]->send(make_message(factory, FragmentHeader{up_to, factory.self_id(), 0, 0}));
        }
    };
    grant(s.window);

    // The events partly built: the credit keeps them within a window after the last
    // event built, so a ring of `window` entries holds them (event e at e % window),
    // allocated once.
    struct Partial {
        std::uint32_t event = 0; // 0: free
        std::vector<bool> have;  // per source index
        std::uint32_t count = 0;
        std::uint64_t total = 0;
        std::vector<std::uint32_t> crcs;
    };
    std::vector<Partial> partial(s.window);
    for (auto& p : partial) {
        p.crcs.resize(n);
        p.have.resize(n);
    }
    std::uint64_t in_flight = 0; // entries in use
    std::vector<std::uint64_t> received(n, 0);
    std::vector<std::optional<std::uint32_t>> announced(n); // events each source sent, from its end-of-run
    std::size_t ended = 0;
    std::uint64_t built = 0, corrupt = 0, fragments = 0, out_of_order = 0;
    std::uint32_t first_built = 0, last_built = 0;
    std::uint64_t max_in_flight = 0, beyond_credit = 0, fragment_bytes = 0;
    Progress progress(name, s);
    std::optional<Clock::time_point> start;
    Clock::time_point end = Clock::now();
    std::vector<std::byte> scratch;
    bool failed = false;

    std::unordered_map<NodeId, std::size_t> index_by_id;
    for (std::size_t i = 0; i < n; ++i)
        index_by_id.emplace(source_ids[i], i);
    auto index_of = [&](NodeId id) -> std::optional<std::size_t> {
        auto it = index_by_id.find(id);
        if (it == index_by_id.end()) return std::nullopt;
        return it->second;
    };

    while (ended < n) {
        msgpass::BufferPtr buffer;
        try {
            buffer = running->receive(s.timeout);
        } catch (const msgpass::PeerLost& e) {
            std::fprintf(stderr, "%s: source lost: %s\n", name.c_str(), e.what());
            failed = true;
            break;
        }
        if (!buffer) {
            failed = true;
            std::fprintf(stderr, "%s: nothing from the sources for %.1f s; no end of run from source", name.c_str(),
                         s.timeout.count() / 1000.0);
            for (std::size_t i = 0; i < n; ++i)
                if (!announced[i]) std::fprintf(stderr, " %u", source_ids[i]);
            std::fprintf(stderr, "\n");
            break;
        }
        if (!start) start = Clock::now();
        const auto bytes = bytes_of(*buffer, scratch);
        const auto header = read_header<FragmentHeader>(bytes);
        const auto index = index_of(buffer->source());
        if (!header || !index || header->source != buffer->source() ||
            bytes.size() != sizeof(FragmentHeader) + (header->event == 0 ? 0 : header->size)) {
            ++corrupt;
            continue;
        }
        if (header->event == 0) {
            if (announced[*index]) {
                ++corrupt;
                continue;
            }
            ++ended;
            announced[*index] = header->size;
            source_ended[*index] = true;
            running->remove(header->source);
            source_nodes[*index]->send(make_message(
                factory, FragmentHeader{0, factory.self_id(), static_cast<std::uint32_t>(received[*index]), 0}));
            continue;
        }
        if (crc32(bytes.subspan(sizeof(FragmentHeader))) != header->crc) {
            ++corrupt;
            continue;
        }
        if (header->event > granted || header->event <= last_built) { // beyond its credit, or built already
            if (beyond_credit++ == 0) {
                std::fprintf(stderr, "%s: source %u sent event %u outside its credit (events %u..%u)\n", name.c_str(),
                             header->source, header->event, last_built + 1, granted);
            }
            ++corrupt;
            continue;
        }
        auto& event = partial[header->event % s.window];
        if (event.event != header->event) { // free: the credit keeps an older event from holding it
            event.event = header->event;
            std::fill(event.have.begin(), event.have.end(), false);
            event.count = 0;
            event.total = 0;
            max_in_flight = std::max(max_in_flight, ++in_flight);
        }
        if (event.have[*index]) { // a duplicate is as wrong as a corrupt fragment
            ++corrupt;
            continue;
        }
        ++received[*index];
        ++fragments;
        fragment_bytes += header->size;
        event.have[*index] = true;
        event.total += header->size;
        event.crcs[*index] = header->crc;
        if (++event.count < n) continue;

        auto summary = make_message(factory, SummaryHeader{header->event, static_cast<std::uint32_t>(n), event.total},
                                    n * sizeof(std::uint32_t));
        std::memcpy(summary->single()->data() + sizeof(SummaryHeader), event.crcs.data(), n * sizeof(std::uint32_t));
        event.event = 0;
        --in_flight;
        if (header->event <= last_built) ++out_of_order;
        if (built == 0) first_built = header->event;
        last_built = header->event;
        bool farm_alive = true;
        for (const auto& node : farm_nodes) {
            while (farm_alive && node->stats().queue_depth > farm_queue_limit)
                farm_alive = wait_for_room(*node, s.timeout);
        }
        if (!farm_alive) {
            std::fprintf(stderr, "%s: the farm took nothing for %.1f s\n", name.c_str(), s.timeout.count() / 1000.0);
            failed = true;
            break;
        }
        farm->send(std::move(summary));
        ++built;
        end = Clock::now();
        if (last_built + s.window >= granted + s.window / 4) grant(last_built + s.window);
        progress.tick(built, fragment_bytes, in_flight, "in flight");
    }

    std::uint64_t expected = 0;
    for (std::size_t i = 0; i < n; ++i)
        expected += announced[i].value_or(s.events);
    const std::uint64_t lost = expected > fragments ? expected - fragments : 0;
    const double elapsed = start ? std::chrono::duration<double>(end - *start).count() : 0.0;
    std::printf("%s: received %llu fragments from %zu sources, built events %u..%u, %zu incomplete, "
                "at most %llu events in flight (window %u)\n",
                name.c_str(), static_cast<unsigned long long>(fragments), n, first_built, last_built, in_flight,
                static_cast<unsigned long long>(max_in_flight), s.window);

    // End of run: tell the farm how many events there were, then wait until every
    // worker confirmed the whole stream and the sources' acknowledgements are out.
    farm->send(make_message(factory, SummaryHeader{0, 0, built}));
    std::map<NodeId, std::uint64_t> confirmed;
    while (confirmed.size() < farm_nodes.size() && !failed) {
        auto message = farm->receive(s.timeout);
        if (!message) {
            std::fprintf(stderr, "%s: %zu of %zu farm workers did not confirm the end of run\n", name.c_str(),
                         farm_nodes.size() - confirmed.size(), farm_nodes.size());
            failed = true;
            break;
        }
        auto ack = read_header<SummaryHeader>(bytes_of(*message, scratch));
        if (ack && ack->event == 0) {
            confirmed[message->source()] = ack->total_size;
        } else {
            ++corrupt;
        }
    }
    for (const auto& node : source_nodes)
        failed = !drain(*node, s.timeout) || failed;
    for (const auto& [worker, count] : confirmed) {
        if (count != built) {
            std::fprintf(stderr, "%s: worker %u received %llu of %llu events\n", name.c_str(), worker,
                         static_cast<unsigned long long>(count), static_cast<unsigned long long>(built));
            failed = true;
        }
    }

    std::printf("events built: %llu, rate: %.1f kHz, fragments lost: %llu, corrupt: %llu\n",
                static_cast<unsigned long long>(built), khz(built, elapsed), static_cast<unsigned long long>(lost),
                static_cast<unsigned long long>(corrupt));
    if (out_of_order != 0) {
        std::printf("%s: %llu events built out of order\n", name.c_str(),
                    static_cast<unsigned long long>(out_of_order));
    }
    const bool ok = lost == 0 && corrupt == 0 && out_of_order == 0 && !failed;
    return finish(s, progress,
                  json_line(name, "builder", built, elapsed, fragment_bytes, lost, corrupt, max_in_flight, ok),
                  "events in flight", ok);
}

// ---------------------------------------------------------------- farm worker
int run_worker(msgpass::NodeFactory& factory, const std::string& name, NodeId builder_id, const Settings& s) {
    auto builder = factory.create_node(builder_id);
    std::vector<std::byte> scratch;
    std::uint64_t count = 0, bytes = 0, bad = 0, order_errors = 0;
    std::uint32_t first = 0, last = 0;
    std::optional<std::uint64_t> announced;
    std::optional<Clock::time_point> start;
    Progress progress(name, s);

    while (!announced) {
        // Twice the builder's patience, so that when a source fails the builder
        // (which knows which one) reports before the workers give up.
        auto buffer = builder->receive(2 * s.timeout);
        if (!buffer) {
            std::fprintf(stderr, "%s: nothing from builder %u for %.1f s after %llu events\n", name.c_str(), builder_id,
                         2 * s.timeout.count() / 1000.0, static_cast<unsigned long long>(count));
            return 1;
        }
        if (!start) start = Clock::now();
        const auto data = bytes_of(*buffer, scratch);
        const auto summary = read_header<SummaryHeader>(data);
        if (!summary || data.size() != sizeof(SummaryHeader) + std::uint64_t{summary->fragments} * 4) {
            ++bad;
            continue;
        }
        if (summary->event == 0) {
            announced = summary->total_size;
            break;
        }
        if (summary->event != last + 1) ++order_errors; // the builder completes events in order
        if (count == 0) first = summary->event;
        last = summary->event;
        ++count;
        bytes += summary->total_size;
        progress.tick(count, bytes, builder->stats().queue_depth, "queued");
    }
    const double elapsed = start ? seconds_since(*start) : 0.0;
    std::printf("%s: received %llu built events (%u..%u, %.1f MB of fragments) in %.3f s: %.1f kHz\n", name.c_str(),
                static_cast<unsigned long long>(count), first, last, bytes / 1e6, elapsed, khz(count, elapsed));

    builder->send(make_message(factory, SummaryHeader{0, 0, count}));
    const bool delivered = drain(*builder, s.timeout);
    const bool ok = delivered && bad == 0 && order_errors == 0 && count == *announced;
    std::printf("%s: end of run: builder built %llu, malformed %llu, out of order %llu%s\n", name.c_str(),
                static_cast<unsigned long long>(*announced), static_cast<unsigned long long>(bad),
                static_cast<unsigned long long>(order_errors), delivered ? "" : ", acknowledgement not delivered");
    return finish(s, progress,
                  json_line(name, "worker", count, elapsed, bytes, *announced > count ? *announced - count : 0,
                            bad + order_errors, 0, ok),
                  "summaries queued", ok);
}

} // namespace

int main(int argc, char** argv) try {
    const auto options = msgpass::options(argc, argv);
    const auto settings = parse_settings(options.rest);
    auto factory = msgpass::NodeFactory::create(options);
    const NodeId self = factory->self_id();
    const std::string name = options.configuration.node(self).name;

    auto sources = factory->create_group("sources");
    auto builders = factory->create_group("builders");
    auto farm = factory->create_group("farm");
    const NodeId builder = builders->first();
    if (sources->contains(self)) return run_source(*factory, name, builder, settings);
    if (self == builder) return run_builder(*factory, name, settings);
    if (farm->contains(self)) return run_worker(*factory, name, builder, settings);
    std::fprintf(stderr, "msgpass-daq: node %u is in none of the groups sources, builders, farm\n", self);
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "msgpass-daq: %s\n", e.what());
    return 2;
}
