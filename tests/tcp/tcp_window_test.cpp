// Unit tests of ip/tcp/src/window.hpp, the reliable window on its own: sequence
// numbers per pair, cumulative acknowledgements, what the sender keeps and drops,
// the resend from the receiver's next expected number after a reconnection, and the
// count of unacknowledged messages when the peer is lost (docs/tcp.md,
// Acknowledgements and resending).
#include "window.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

namespace msgpass::tcp {
namespace {

SharedBuffer message(std::size_t size) {
    return std::make_shared<HeapBuffer>(size);
}

// What wrote() reported, summed over writes.
struct Written {
    std::size_t messages = 0, resent = 0;
    std::uint64_t bytes = 0;
    void take(SendWindow& w, std::size_t bytes_written) {
        const auto took = w.wrote(bytes_written);
        messages += took.messages;
        resent += took.resent;
        bytes += took.bytes;
    }
};

std::size_t frame(std::size_t payload) {
    return frame_header_size + payload;
}

TEST(SendWindow, NumbersMessagesFromZeroAsDataFramesOfTheirSize) {
    SendWindow w;
    EXPECT_EQ(w.push(message(10), 10), 0u);
    EXPECT_EQ(w.push(BufferPtr(std::make_unique<HeapBuffer>(20)), 20), 1u);
    EXPECT_EQ(w.next_seq(), 2u);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w.header(0).type, static_cast<std::uint32_t>(FrameType::data));
    EXPECT_EQ(w.header(1).seq, 1u);
    EXPECT_EQ(w.header(1).length, 20u);
    ASSERT_NE(w.kept(1), nullptr);
    EXPECT_EQ(w.kept(1)->size(), 20u);
    EXPECT_EQ(w.waiting(), 2u);
    EXPECT_EQ(w.first_unacknowledged(), 0u);
}

// "The sender keeps every message (the buffer itself, no copy) until it is acknowledged."
TEST(SendWindow, KeepsTheBufferItselfUntilAcknowledgedAndHandsItOverToBeFreed) {
    SendWindow w;
    const SharedBuffer kept = message(64);
    w.push(kept, 64);
    w.push(message(64), 64);
    (void)w.wrote(2 * frame(64));
    EXPECT_EQ(w.kept(0), kept.get()) << "the window copied the buffer";
    EXPECT_EQ(kept.use_count(), 2);
    ASSERT_TRUE(w.acknowledge(1));
    EXPECT_EQ(w.size(), 1u);
    EXPECT_EQ(w.first_unacknowledged(), 1u);
    {
        std::vector<Outgoing> acknowledged;
        w.take_acknowledged(acknowledged);
        ASSERT_EQ(acknowledged.size(), 1u);
        EXPECT_EQ(acknowledged[0].seq, 0u);
        EXPECT_EQ(kept.use_count(), 2) << "freed before the caller took it";
    }
    EXPECT_EQ(kept.use_count(), 1) << "an acknowledged buffer was still held";
    std::vector<Outgoing> none;
    w.take_acknowledged(none);
    EXPECT_TRUE(none.empty());
}

TEST(SendWindow, AnAcknowledgementBeyondWhatWasSentIsRefusedAndChangesNothing) {
    SendWindow w;
    for (int i = 0; i < 3; ++i)
        w.push(message(8), 8);
    EXPECT_FALSE(w.acknowledge(4));
    EXPECT_EQ(w.size(), 3u);
    EXPECT_TRUE(w.acknowledge(3)) << "acknowledging everything sent is allowed";
    EXPECT_TRUE(w.empty());
    EXPECT_FALSE(w.acknowledge(4));
}

TEST(SendWindow, AnOlderAcknowledgementChangesNothing) {
    SendWindow w;
    for (int i = 0; i < 3; ++i)
        w.push(message(8), 8);
    ASSERT_TRUE(w.acknowledge(2));
    EXPECT_TRUE(w.acknowledge(1));
    EXPECT_TRUE(w.acknowledge(0));
    EXPECT_EQ(w.size(), 1u);
    EXPECT_EQ(w.first_unacknowledged(), 2u);
}

TEST(SendWindow, CountsWholeFramesWrittenAndRemembersHowMuchOfAPartOneWent) {
    SendWindow w;
    w.push(message(10), 10);
    w.push(message(20), 20);
    Written seen;
    seen.take(w, frame_header_size + 5);
    EXPECT_EQ(seen.messages, 0u);
    EXPECT_EQ(w.written(), 0u);
    EXPECT_EQ(w.offset(), frame_header_size + 5);
    seen.take(w, 5 + frame_header_size);
    EXPECT_EQ(seen.messages, 1u);
    EXPECT_EQ(seen.bytes, 10u);
    EXPECT_EQ(w.written(), 1u);
    EXPECT_EQ(w.offset(), frame_header_size);
    seen.take(w, 20);
    EXPECT_EQ(seen.messages, 2u);
    EXPECT_EQ(seen.bytes, 30u);
    EXPECT_EQ(seen.resent, 0u);
    EXPECT_TRUE(w.all_written());
    EXPECT_EQ(w.waiting(), 0u);
    EXPECT_EQ(w.size(), 2u) << "written is not acknowledged";
}

// "the sender reconnects ...; the Welcome's next_expected tells it where the receiver
// stands, it drops what came before and resends the rest."
TEST(SendWindow, AfterAReconnectionResendsFromNextExpectedAndDropsWhatCameBefore) {
    SendWindow w;
    for (int i = 0; i < 5; ++i)
        w.push(message(100), 100);
    Written first;
    first.take(w, 5 * frame(100));
    ASSERT_EQ(first.messages, 5u);
    w.rewind(); // the connection broke
    EXPECT_EQ(w.written(), 0u);
    ASSERT_TRUE(w.resume(3)); // the receiver holds 0, 1, 2
    EXPECT_EQ(w.size(), 2u);
    EXPECT_EQ(w.first_unacknowledged(), 3u);
    EXPECT_EQ(w.waiting(), 2u);
    Written again;
    again.take(w, 2 * frame(100));
    EXPECT_EQ(again.resent, 2u) << "messages written on the broken connection count as resent";
    EXPECT_EQ(again.messages, 0u);
    EXPECT_EQ(w.push(message(1), 1), 5u) << "numbering goes on after a reconnection";
}

// The send queue (send_queue_limit, NodeStats::queue_depth) is what was never
// written: after a broken connection the messages written before go again
// (waiting()), but they are not queued anew (queued()), so a reconnection cannot
// push the queue beyond its bound (issue 14: 1983 against a limit of 64).
TEST(SendWindow, TheQueueCountsOnlyMessagesNeverWrittenAndAReconnectionDoesNotRefillIt) {
    SendWindow w;
    for (int i = 0; i < 6; ++i)
        w.push(message(100), 100);
    EXPECT_EQ(w.queued(), 6u);
    Written seen;
    seen.take(w, 4 * frame(100) + 10); // 0..3 whole, a part of 4
    EXPECT_EQ(w.queued(), 2u) << "a frame written in part is still queued";
    ASSERT_TRUE(w.acknowledge(1));
    EXPECT_EQ(w.queued(), 2u) << "acknowledging written messages changes nothing queued";
    w.rewind(); // the connection broke
    EXPECT_EQ(w.waiting(), 5u) << "everything not acknowledged goes again";
    EXPECT_EQ(w.queued(), 2u) << "what went once does not count as queued again";
    ASSERT_TRUE(w.resume(2));
    EXPECT_EQ(w.waiting(), 4u);
    EXPECT_EQ(w.queued(), 2u);
    seen.take(w, 4 * frame(100)); // 2, 3 again; 4, 5 for the first time
    EXPECT_EQ(w.queued(), 0u);
    EXPECT_EQ(seen.messages, 6u);
    EXPECT_EQ(seen.resent, 2u);
    EXPECT_EQ(w.lose(), 4u);
    EXPECT_EQ(w.queued(), 0u);
    w.push(message(1), 1);
    EXPECT_EQ(w.queued(), 1u) << "after a loss the count starts again";
}

TEST(SendWindow, AResumeOutsideTheUnacknowledgedRangeIsRefusedAndChangesNothing) {
    SendWindow w;
    for (int i = 0; i < 4; ++i)
        w.push(message(8), 8);
    ASSERT_TRUE(w.acknowledge(2));
    EXPECT_FALSE(w.resume(5)) << "the peer claims a message never sent";
    EXPECT_FALSE(w.resume(1)) << "the peer lost a message it had acknowledged";
    EXPECT_EQ(w.size(), 2u);
    EXPECT_TRUE(w.resume(2));
    EXPECT_TRUE(w.resume(4));
    EXPECT_TRUE(w.empty());
}

TEST(SendWindow, AFramePartlyWrittenThenAcknowledgedLeavesNoOffsetForTheNext) {
    SendWindow w;
    w.push(message(100), 100);
    w.push(message(100), 100);
    Written seen;
    seen.take(w, frame(100));
    w.rewind(); // broke; the new connection writes from message 0
    seen.take(w, 10);
    ASSERT_EQ(w.offset(), 10u);
    ASSERT_TRUE(w.acknowledge(1)); // a late acknowledgement of message 0
    EXPECT_EQ(w.written(), 0u);
    EXPECT_EQ(w.offset(), 0u) << "message 1 would start mid-frame";
    EXPECT_EQ(w.first_unacknowledged(), 1u);
}

// "with unacknowledged() = the messages sent to that incarnation it had not
// acknowledged; they are dropped" (the numbering goes on: renumber() for the peer's
// next incarnation)
TEST(SendWindow, LosingThePeerCountsTheUnacknowledgedAndDropsThemButTheNumberingGoesOn) {
    SendWindow w;
    const SharedBuffer held = message(8);
    w.push(held, 8);
    for (int i = 0; i < 3; ++i)
        w.push(message(8), 8);
    (void)w.wrote(2 * frame(8));
    ASSERT_TRUE(w.acknowledge(1));
    EXPECT_EQ(held.use_count(), 2) << "acknowledged but not taken yet";
    EXPECT_EQ(w.lose(), 3u);
    EXPECT_TRUE(w.empty());
    EXPECT_EQ(w.written(), 0u);
    EXPECT_EQ(w.next_seq(), 4u) << "a peer given up while it lived still counts our messages";
    EXPECT_EQ(w.acknowledged_to(), 1u);
    EXPECT_EQ(w.push(message(8), 8), 4u);
    EXPECT_EQ(w.lose(), 1u);
    EXPECT_EQ(w.lose(), 0u);
}

// The soak's "expected message 34608, got 34610 (a gap)": a peer given up for
// silence that answers again expects the first message it lacks; the window never
// trims what it did not get: resume() says how many numbers it must skip.
TEST(SendWindow, AResumeBelowTheMessagesKeptAfterALossSaysHowManyThePeerMustSkip) {
    SendWindow w;
    for (int i = 0; i < 10; ++i)
        w.push(message(8), 8);
    ASSERT_TRUE(w.acknowledge(4)); // then the peer got 4..6 but its acknowledgement was lost
    EXPECT_EQ(w.lose(), 6u);       // 4..9 dropped
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(w.push(message(8), 8), 10u + static_cast<std::uint64_t>(i));
    EXPECT_FALSE(w.resume(3).has_value()) << "below what the peer acknowledged";
    EXPECT_FALSE(w.resume(14).has_value()) << "beyond what was sent";
    const auto skipped = w.resume(7);
    ASSERT_TRUE(skipped.has_value());
    EXPECT_EQ(*skipped, 3u) << "7, 8 and 9 were dropped: the peer skips to 10";
    EXPECT_EQ(w.first_unacknowledged(), 10u);
    EXPECT_EQ(w.size(), 3u) << "nothing kept was trimmed";
    const auto again = w.resume(7); // the connection broke before the skip arrived
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, 3u);
    EXPECT_EQ(w.resume(10).value_or(99), 0u) << "the peer skipped: nothing to skip now";
    EXPECT_EQ(w.size(), 3u);
}

TEST(SendWindow, RenumberingForANewIncarnationNumbersTheKeptMessagesFromZero) {
    SendWindow w;
    for (int i = 0; i < 5; ++i)
        w.push(message(8), 8);
    ASSERT_TRUE(w.acknowledge(2));
    EXPECT_EQ(w.lose(), 3u);
    w.push(message(8), 8);
    w.push(message(8), 8);
    w.renumber();
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w.header(0).seq, 0u);
    EXPECT_EQ(w.header(1).seq, 1u);
    EXPECT_EQ(w.next_seq(), 2u);
    EXPECT_EQ(w.resume(0).value_or(99), 0u) << "the new incarnation expects 0 and lacks nothing";
}

TEST(ReceiveWindow, ASkipMovesTheNextExpectedOnAndCountsWhatWasSkipped) {
    ReceiveWindow r;
    r.attach(0x11);
    r.delivered(10);
    EXPECT_EQ(r.skip_to(1), 0u) << "nothing skipped when the skip is not beyond what arrived";
    EXPECT_EQ(r.skip_to(6), 5u);
    EXPECT_EQ(r.expected(), 6u);
    EXPECT_EQ(r.classify(6), ReceiveWindow::Arrival::in_order);
    EXPECT_TRUE(r.ack_owed()) << "the sender learns from the acknowledgement that the skip arrived";
    r.attach(0x11); // the same incarnation reconnects: the count goes on
    EXPECT_EQ(r.expected(), 6u);
}

TEST(ReceiveWindow, TellsTheNextMessageFromADuplicateAndAGap) {
    ReceiveWindow r;
    EXPECT_EQ(r.classify(0), ReceiveWindow::Arrival::in_order);
    EXPECT_EQ(r.classify(1), ReceiveWindow::Arrival::gap);
    r.delivered(10);
    EXPECT_EQ(r.expected(), 1u);
    EXPECT_EQ(r.classify(0), ReceiveWindow::Arrival::duplicate);
    EXPECT_EQ(r.classify(1), ReceiveWindow::Arrival::in_order);
    EXPECT_EQ(r.classify(7), ReceiveWindow::Arrival::gap);
}

// "The receiver acknowledges every 64 messages or 2 MiB"
TEST(ReceiveWindow, AnAcknowledgementIsDueAfterEnoughMessagesOrBytesAndIsCumulative) {
    ReceiveWindow r;
    EXPECT_FALSE(r.ack_owed());
    r.delivered(10);
    r.delivered(10);
    EXPECT_TRUE(r.ack_owed());
    EXPECT_FALSE(r.ack_due(3, 1000));
    r.delivered(10);
    EXPECT_TRUE(r.ack_due(3, 1000));
    EXPECT_EQ(r.acknowledge(), 3u) << "acknowledges every message before 3";
    EXPECT_FALSE(r.ack_owed());
    EXPECT_FALSE(r.ack_due(3, 1000));
    r.delivered(1000);
    EXPECT_TRUE(r.ack_due(3, 1000)) << "due by bytes";
    EXPECT_EQ(r.acknowledge(), 4u);
}

TEST(ReceiveWindow, AReconnectionResumesWhereItWasAndANewIncarnationCountsFromZero) {
    ReceiveWindow r;
    EXPECT_TRUE(r.attach(0xaaaa));
    EXPECT_EQ(r.expected(), 0u);
    for (int i = 0; i < 5; ++i)
        r.delivered(10);
    EXPECT_FALSE(r.attach(0xaaaa)) << "the same incarnation reconnected";
    EXPECT_EQ(r.expected(), 5u) << "the Welcome says 5: the sender resends from there";
    EXPECT_FALSE(r.ack_owed()) << "the Welcome acknowledged everything received";
    EXPECT_TRUE(r.attach(0xbbbb)) << "a restart is a new incarnation";
    EXPECT_EQ(r.incarnation(), 0xbbbbu);
    EXPECT_EQ(r.expected(), 0u);
    EXPECT_EQ(r.classify(0), ReceiveWindow::Arrival::in_order);
}

} // namespace
} // namespace msgpass::tcp
