// Address strings of peers found at run time (msgpass/address.hpp).
#include <msgpass/address.hpp>

#include <charconv>

namespace msgpass {

namespace {

[[noreturn]] void bad(std::string_view text, const std::string& why) {
    throw UsageError("address '" + std::string(text) + "': " + why +
                     " (expected tcp://host:port, an IPv6 host in brackets: tcp://[::1]:7000)");
}

} // namespace

PeerAddress parse_address(std::string_view text) {
    const auto scheme_end = text.find("://");
    if (scheme_end == std::string_view::npos) bad(text, "no technology:// in front");
    PeerAddress a;
    a.technology = std::string(text.substr(0, scheme_end));
    if (a.technology == "sci") {
        bad(text, "sci has no address string: its peers are the processes of one host, named by their node id in "
                  "the nodes file");
    }
    if (a.technology != "tcp" && a.technology != "udp") bad(text, "unknown technology '" + a.technology + "'");
    std::string_view rest = text.substr(scheme_end + 3);
    std::string_view host;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string_view::npos) bad(text, "'[' without ']'");
        host = rest.substr(1, close - 1);
        rest = rest.substr(close + 1);
        if (rest.empty() || rest.front() != ':') bad(text, "no :port after the host");
    } else {
        const auto colon = rest.rfind(':');
        if (colon == std::string_view::npos) bad(text, "no :port after the host");
        host = rest.substr(0, colon);
        if (host.find(':') != std::string_view::npos) bad(text, "an IPv6 host must be in brackets");
        rest = rest.substr(colon);
    }
    if (host.empty()) bad(text, "no host");
    if (host.find_first_of(" \t\r\n/[]") != std::string_view::npos) bad(text, "a host with a space, '/' or bracket");
    const std::string_view digits = rest.substr(1);
    unsigned port = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (digits.empty() || error != std::errc{} || end != digits.data() + digits.size()) {
        bad(text, "the port '" + std::string(digits) + "' is not a number");
    }
    if (port == 0 || port > 65535) bad(text, "port " + std::to_string(port) + " is not from 1 to 65535");
    a.host = std::string(host);
    a.port = static_cast<std::uint16_t>(port);
    return a;
}

std::string to_string(const PeerAddress& address) {
    const bool v6 = address.host.find(':') != std::string::npos;
    return address.technology + "://" + (v6 ? "[" + address.host + "]" : address.host) + ":" +
           std::to_string(address.port);
}

} // namespace msgpass
