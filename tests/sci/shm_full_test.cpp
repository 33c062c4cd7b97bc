// Tests of a full /dev/shm. A tmpfs hands out its pages when they are first written,
// and one that is full answers the writer with SIGBUS; the sci technology reserves
// the pages of its segments when it creates them (and of its large-message and
// broadcast regions before it writes them), so that a lack of space is a
// ResourceError naming the segment, its size and /dev/shm instead.
//
// Each test runs itself again, as root, under `unshare --mount` with a 4 MiB tmpfs
// mounted on /dev/shm of that private mount namespace (the machine's /dev/shm is not
// touched), and checks the outcome of that run. Without root, or when the namespace
// is refused, a test is skipped naming the reason; with the variable CI set it fails
// instead, so that a CI machine cannot skip it unnoticed.
#include <msgpass/sci/naming.hpp>
#include <msgpass/sci/options.hpp>
#include <msgpass/sci/protocol.hpp>

#include "../support/environment.hpp"
#include "../support/partition.hpp"
#include "../support/process.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>

namespace msgpass::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* inside_variable = "MSGPASS_TEST_SMALL_SHM";
constexpr std::uint64_t small_shm = 4 * config::MiB;

bool inside() {
    return std::getenv(inside_variable) != nullptr;
}

// Path of a system tool, or "".
std::string tool(const std::string& name) {
    for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"})
        if (::access((dir + name).c_str(), X_OK) == 0) return dir + name;
    return "";
}

// Why the test cannot run its body in a small /dev/shm here, or "" when it can.
std::string unavailable() {
    if (::geteuid() != 0)
        return "a private mount namespace with a small /dev/shm needs root; this test runs as uid " +
               std::to_string(::geteuid());
    for (const char* name : {"unshare", "mount", "env", "sh"})
        if (tool(name).empty()) return std::string("no '") + name + "' tool (util-linux, coreutils)";
    return "";
}

// Runs the current test again in a private mount namespace with a 4 MiB tmpfs on
// /dev/shm; returns its output, or sets refused to why the namespace was refused.
struct InsideRun {
    std::string refused;
    std::string output;
    int status = 0;
};

InsideRun run_inside() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string filter = std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    // The shell mounts, says so, and becomes the test; "namespace ready" tells a refused
    // namespace (unshare or mount failed) from a failing test.
    const std::string script = tool("mount") + " -t tmpfs -o size=" + std::to_string(small_shm) +
                               ",mode=1777 msgpass-test /dev/shm || exit 97\n"
                               "echo namespace ready\n"
                               "exec " +
                               tool("env") + " " + inside_variable + "=1 \"$0\" \"$@\"\n";
    ChildProcess child(
        {tool("unshare"), "--mount", "--propagation", "private", "--", tool("sh"), "-c", script, self, filter});
    InsideRun run;
    const auto deadline = std::chrono::steady_clock::now() + 180s;
    bool ready = false;
    while (std::chrono::steady_clock::now() < deadline) {
        const auto line = child.next_line(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
        if (!line) break;
        if (*line == "namespace ready") {
            ready = true;
            continue;
        }
        run.output += *line + "\n";
    }
    child.kill(SIGKILL); // no-op when it ended; ends it at the deadline otherwise
    run.status = child.wait();
    if (!ready) {
        run.refused = "no private mount namespace with a tmpfs on /dev/shm here (unshare/mount exit status " +
                      std::to_string(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1) + ")";
    }
    return run;
}

// In a test body: outside, runs the test inside and checks that run; inside, makes sure
// /dev/shm is the small tmpfs before the body goes on.
#define RUN_IN_A_SMALL_DEV_SHM()                                                                                       \
    do {                                                                                                               \
        if (!inside()) {                                                                                               \
            const auto reason = unavailable();                                                                         \
            MSGPASS_REQUIRE(reason.empty(), reason);                                                                   \
            const auto run = run_inside();                                                                             \
            MSGPASS_REQUIRE(run.refused.empty(), run.refused);                                                         \
            EXPECT_TRUE(WIFEXITED(run.status))                                                                         \
                << "the run in the small /dev/shm was killed by signal " << WTERMSIG(run.status) << ":\n"              \
                << run.output;                                                                                         \
            EXPECT_EQ(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1, 0) << run.output;                          \
            EXPECT_NE(run.output.find("[  PASSED  ] 1 test"), std::string::npos) << run.output;                        \
            return;                                                                                                    \
        }                                                                                                              \
        struct statvfs st {};                                                                                          \
        ASSERT_EQ(::statvfs("/dev/shm", &st), 0);                                                                      \
        ASSERT_EQ(std::uint64_t{st.f_blocks} * st.f_frsize, small_shm) << "not in the small /dev/shm: stopping";       \
    } while (false)

config::Configuration sci_configuration(const std::string& partition, int nodes,
                                        const std::function<void(config::Configuration&)>& tweak = {}) {
    return make_configuration("sci", partition, nodes, [&](config::Configuration& c) {
        c.peer_timeout = 1000ms;
        c.edit_section<sci::Options>().max_outst_buffers = 4; // as sci_peer
        if (tweak) tweak(c);
    });
}

std::string partition_for_test() {
    return unique_partition(::testing::UnitTest::GetInstance()->current_test_info()->name());
}

std::vector<std::string> segments_of(const std::string& partition) {
    std::error_code error;
    auto names = sci::partition_segments(sci::segment_user(), partition, error);
    EXPECT_FALSE(error) << error.message();
    return names;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Segments of 8 MiB were created without complaint in a 4 MiB /dev/shm, and their
// owner died by SIGBUS on its 510th message. The headers, which every node of the file
// may write, take their pages when the segment is made (the slots when they are first
// granted: the next test).
TEST(FullDevShm, ASegmentThatDoesNotFitIsAResourceErrorNamingItsNameSizeAndDevShm) {
    RUN_IN_A_SMALL_DEV_SHM();
    const SegmentCleanup segments(partition_for_test());
    const auto c = sci_configuration(segments.partition(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().header_area_size = 8 * config::MiB;
        c.edit_section<sci::Options>().recv_seg_size = 9 * config::MiB;
    });
    try {
        auto f = NodeFactory::create(c, 1);
        FAIL() << "a factory with an 8 MiB segment was created in a 4 MiB /dev/shm";
    } catch (const ResourceError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, sci::segment_name(sci::segment_address(c, 1)))) << what;
        EXPECT_TRUE(contains(what, "bytes 0 to " + std::to_string(sci::control_block_size + 8 * config::MiB))) << what;
        EXPECT_TRUE(contains(what, "/dev/shm")) << what;
        EXPECT_TRUE(contains(what, "No space left on device")) << what;
    }
    EXPECT_EQ(segments_of(segments.partition()), std::vector<std::string>{}) << "the failed segment was left";
    // The default segment (1 MiB) fits.
    auto f = NodeFactory::create(sci_configuration(segments.partition(), 2), 1);
    EXPECT_NE(f, nullptr);
}

// Takes what is left of /dev/shm into an object of the partition (removed with it).
std::string fill_dev_shm(const std::string& partition) {
    const std::string name = "/" + sci::partition_prefix(sci::segment_user(), partition) + "filler";
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    off_t end = 0;
    for (off_t chunk = 1 << 20; chunk >= 4096;) {
        if (::posix_fallocate(fd, end, chunk) == 0) {
            end += chunk;
        } else {
            chunk /= 2;
        }
    }
    ::close(fd);
    return name;
}

// The receive slots take their pages when they are first granted: a segment of 8 MiB
// of slots starts in a 4 MiB /dev/shm, and a grant that finds no room is a
// ResourceError on the receive from that peer (never a SIGBUS in the peer that writes
// the slot); the message the peer sent meanwhile waits and comes when there is room.
TEST(FullDevShm, ASlotWithoutRoomIsAResourceErrorOnTheReceiveAndTheMessageWaits) {
    RUN_IN_A_SMALL_DEV_SHM();
    const SegmentCleanup segments(partition_for_test());
    const auto c = sci_configuration(segments.partition(), 2, [](config::Configuration& c) {
        c.edit_section<sci::Options>().recv_buffer_no = 1000;
        c.edit_section<sci::Options>().recv_seg_size = 9 * config::MiB;
    });
    auto one = NodeFactory::create(c, 1);
    auto two = NodeFactory::create(c, 2);
    const std::string filler = fill_dev_shm(segments.partition());
    auto one_to_two = one->create_node(2);
    auto two_to_one = two->create_node(1);
    two_to_one->send(make_message(*two, 256, 2, 0)); // no slot granted: it waits in the queue
    try {
        auto m = one_to_two->receive(20s);
        FAIL() << "a slot was granted in a full /dev/shm" << (m != nullptr ? " and a message came through it" : "");
    } catch (const ResourceError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "receive from node 2")) << what;
        EXPECT_TRUE(contains(what, sci::segment_name(sci::segment_address(c, 1)))) << what;
        EXPECT_TRUE(contains(what, "/dev/shm")) << what;
        EXPECT_TRUE(contains(what, "No space left on device")) << what;
    }
    EXPECT_EQ(one_to_two->stats().errors, 1u);
    ASSERT_EQ(::shm_unlink(filler.c_str()), 0);
    bool flushed = false;
    std::thread sender([&] { flushed = two_to_one->flush(20s); }); // node 2 sends once node 1 grants
    auto m = one_to_two->receive(20s);
    sender.join();
    EXPECT_TRUE(flushed);
    ASSERT_NE(m, nullptr) << "the message sent while /dev/shm was full was lost";
    EXPECT_EQ(check_payload(*m).stream, 2u);
}

// Three 8 MiB messages into default segments killed the sender by SIGBUS. Now the
// send that does not fit throws, the message stays with the caller, and both ends
// go on: the receiver, another process, takes the messages before and after it.
TEST(FullDevShm, AMessageWithoutRoomIsAResourceErrorOnItsSendAndNobodyDies) {
    RUN_IN_A_SMALL_DEV_SHM();
    const SegmentCleanup segments(partition_for_test());
    const auto c = sci_configuration(segments.partition(), 2);
    ChildProcess peer({SCI_PEER, segments.partition(), "2", "2", "1", "receive", "2", "256", "1000"});
    ASSERT_EQ(peer.wait_for_line("ready", 20s), "ready");
    auto self = NodeFactory::create(c, 1);
    auto to_peer = self->create_node(2);
    to_peer->send(make_message(*self, 256, 1, 0));
    ASSERT_TRUE(to_peer->flush(20s)) << "the first message was not taken";
    auto big = make_message(*self, 8 * config::MiB, 1, 1);
    try {
        to_peer->send(std::move(big));
        FAIL() << "an 8 MiB message was sent through a 4 MiB /dev/shm";
    } catch (const ResourceError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "send to node 2")) << what;
        EXPECT_TRUE(contains(what, std::to_string(8 * config::MiB) + " bytes")) << what;
        EXPECT_TRUE(contains(what, sci::segment_name(sci::segment_address(c, 2), "large.1"))) << what;
        EXPECT_TRUE(contains(what, "/dev/shm")) << what;
    }
    EXPECT_NE(big, nullptr) << "the message that did not go was taken from the caller";
    to_peer->send(make_message(*self, 256, 1, 1));
    ASSERT_TRUE(to_peer->flush(20s));
    EXPECT_EQ(peer.wait_for_line("received", 20s), "received 2");
    const int status = peer.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the receiver ended with status " << status << (WIFSIGNALED(status) ? " (a signal)" : "");
    EXPECT_EQ(to_peer->stats().errors, 1u);
}

// A message queued while the peer was away meets the full /dev/shm in a flush that
// is no send (here flush()): it stays queued, and the next send reports why.
TEST(FullDevShm, AQueuedMessageWithoutRoomStaysQueuedAndTheNextSendReportsIt) {
    RUN_IN_A_SMALL_DEV_SHM();
    const SegmentCleanup segments(partition_for_test());
    const auto c = sci_configuration(segments.partition(), 2);
    auto self = NodeFactory::create(c, 1);
    auto to_peer = self->create_node(2);
    to_peer->send(make_message(*self, 8 * config::MiB, 1, 0)); // node 2 is not there yet: queued
    EXPECT_EQ(to_peer->stats().queue_depth, 1u);
    ChildProcess peer({SCI_PEER, segments.partition(), "2", "2", "1", "idle"});
    ASSERT_EQ(peer.wait_for_line("ready", 20s), "ready");
    EXPECT_FALSE(to_peer->flush(500ms));
    EXPECT_EQ(to_peer->stats().queue_depth, 1u) << "the message that did not fit was dropped";
    auto next = make_message(*self, 256, 1, 1);
    try {
        to_peer->send(std::move(next));
        FAIL() << "the queued 8 MiB message was sent through a 4 MiB /dev/shm, or its error was lost";
    } catch (const ResourceError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "send to node 2")) << what;
        EXPECT_TRUE(contains(what, "/dev/shm")) << what;
    }
    EXPECT_NE(next, nullptr);
    EXPECT_EQ(::waitpid(peer.pid(), nullptr, WNOHANG), 0) << "the peer died";
}

// A 1 MiB broadcast in msgpass-bench killed the sender by SIGBUS. Now the broadcast
// region without room falls back to a copy per member, which has no room either: the
// group send reports it for each member, and smaller messages still go (through the
// slots granted before /dev/shm was filled).
TEST(FullDevShm, ABroadcastWithoutRoomIsAnErrorNamingEachMember) {
    RUN_IN_A_SMALL_DEV_SHM();
    const SegmentCleanup segments(partition_for_test());
    const auto c = sci_configuration(segments.partition(), 3);
    auto one = NodeFactory::create(c, 1);
    auto two = NodeFactory::create(c, 2);
    auto three = NodeFactory::create(c, 3);
    auto at_two = two->create_node(1);
    auto at_three = three->create_node(1);
    auto group = one->create_group();
    group->add(one->create_node(2));
    group->add(one->create_node(3));
    group->send(make_message(*one, 2048, 1, 0));
    for (auto* at : {&at_two, &at_three}) {
        auto m = (*at)->receive(20s);
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(check_payload(*m).seq, 0u);
    }
    (void)fill_dev_shm(segments.partition());
    try {
        group->send(make_message(*one, config::MiB, 1, 1));
        FAIL() << "a 1 MiB broadcast went through a /dev/shm without room for it";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "send to node 2")) << what;
        EXPECT_TRUE(contains(what, "send to node 3")) << what;
        EXPECT_TRUE(contains(what, "/dev/shm")) << what;
    }
    group->send(make_message(*one, 2048, 1, 2));
    for (auto* at : {&at_two, &at_three}) {
        auto m = (*at)->receive(20s);
        ASSERT_NE(m, nullptr);
        EXPECT_EQ(check_payload(*m).seq, 2u);
    }
}

} // namespace
} // namespace msgpass::test
