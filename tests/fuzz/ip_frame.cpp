// Fuzz target: the frame codec of the ip technologies (ip/common frame.hpp): a header
// read from a peer's byte stream, checked on the data side against max_message_size
// and on the acknowledging side, and the description of a fault that goes into the
// Error a user reads. Invariants: a data frame accepted is within max_message_size
// and flagless; an acknowledgement, goodbye or skip carries no payload.
#include "fuzz.hpp"

#include <msgpass/tcp/frame.hpp>

#include <cstdint>
#include <span>

using namespace msgpass::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    constexpr std::uint64_t max_message = 1 << 20;
    const auto header = decode(std::as_bytes(std::span(data, size)));
    if (!header) {
        MSGPASS_FUZZ_CHECK(size < frame_header_size);
        return 0;
    }
    const FrameHeader& h = *header;
    const Frame data_side = check_data_side(h, max_message);
    const Frame ack_side = check_ack_side(h);
    if (data_side == Frame::data) {
        MSGPASS_FUZZ_CHECK(h.length <= max_message && h.flags == 0);
        MSGPASS_FUZZ_CHECK(h.type == static_cast<std::uint32_t>(FrameType::data));
    }
    if (data_side == Frame::skip) {
        MSGPASS_FUZZ_CHECK(h.type == static_cast<std::uint32_t>(FrameType::skip) && h.flags == 0);
    }
    if (data_side == Frame::goodbye || data_side == Frame::skip || ack_side == Frame::goodbye ||
        ack_side == Frame::ack) {
        MSGPASS_FUZZ_CHECK(h.length == 0);
    }
    if (data_side == Frame::malformed || data_side == Frame::too_long) {
        MSGPASS_FUZZ_CHECK(refusal_of(data_side) != Refusal::none);
        MSGPASS_FUZZ_CHECK(!describe_fault(h, data_side, max_message).empty());
    } else {
        msgpass::fuzz::accepted();
    }
    if (ack_side == Frame::malformed) MSGPASS_FUZZ_CHECK(!describe_fault(h, ack_side, max_message).empty());
    return 0;
}
