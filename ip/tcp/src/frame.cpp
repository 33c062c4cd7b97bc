// The frame codec of tcp (see frame.hpp): the text of a fault.
#include <msgpass/tcp/frame.hpp>

namespace msgpass::tcp {

std::string describe_fault(const FrameHeader& h, Frame fault, std::uint64_t max_message_size) {
    if (fault == Frame::too_long) {
        return "a frame of " + std::to_string(h.length) + " bytes, above max_message_size (" +
               std::to_string(max_message_size) + ")";
    }
    return "a frame of unknown type " + std::to_string(h.type);
}

} // namespace msgpass::tcp
