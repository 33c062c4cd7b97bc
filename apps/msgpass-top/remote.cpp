// msgpass-top across hosts (remote.hpp): the text form of pages and its HTTP fetch
// (Boost.Beast, with a deadline on every step).
#include "remote.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <charconv>
#include <cstdio>
#include <sstream>

namespace msgpass::top {

namespace {

constexpr const char* magic = "msgpass-pages 1";

// Percent-encodes what would break a line or a field: '%', spaces, control bytes.
std::string encode(const std::string& s) {
    std::string out;
    for (const unsigned char c : s) {
        if (c == '%' || c <= ' ' || c == 0x7f) {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", c);
            out += hex;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out.empty() ? "%" : out; // "%" alone: the empty string
}

bool decode(const std::string& s, std::string& out) {
    out.clear();
    if (s == "%") return true;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        if (i + 2 >= s.size()) return false;
        unsigned value = 0;
        const auto [end, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
        if (ec != std::errc() || end != s.data() + i + 3) return false;
        out += static_cast<char>(value);
        i += 2;
    }
    return true;
}

template <class T>
bool number(const std::string& word, T& out) {
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), out);
    return ec == std::errc() && end == word.data() + word.size();
}

const char* owner_word(kit::PageView::Owner owner) {
    switch (owner) {
    case kit::PageView::Owner::running:
        return "running";
    case kit::PageView::Owner::closing:
        return "closing";
    case kit::PageView::Owner::idle:
        return "idle";
    case kit::PageView::Owner::dead:
        return "dead";
    }
    return "dead";
}

} // namespace

std::string encode_pages(const std::vector<kit::PageView>& pages) {
    std::ostringstream o;
    o << magic << "\n";
    for (const auto& p : pages) {
        o << "page " << p.node << ' ' << p.pid << ' ' << (p.torn ? "torn" : owner_word(p.owner)) << ' ' << p.interval_ms
          << ' ' << p.publishes << ' ' << p.heartbeat_age_ns << ' ' << p.taken_ns << ' ' << encode(p.partition) << ' '
          << encode(p.name) << ' ' << encode(p.technology) << ' ' << encode(p.host) << "\n";
        o << "groups";
        for (const auto& g : p.groups)
            o << ' ' << encode(g);
        o << "\n";
        for (const auto& peer : p.peers) {
            const NodeStats& s = peer.stats;
            o << "peer " << peer.id << ' ' << s.messages_sent << ' ' << s.bytes_sent << ' ' << s.messages_received
              << ' ' << s.bytes_received << ' ' << s.sends_queued << ' ' << s.queue_depth << ' ' << s.retries << ' '
              << s.errors << ' ' << peer.losses << ' ' << (peer.lost ? 1 : 0) << ' ' << encode(peer.last_error) << "\n";
        }
        o << "end\n";
    }
    return o.str();
}

std::optional<std::vector<kit::PageView>> decode_pages(const std::string& text, std::string& error) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != magic) {
        error = "not a msgpass-top page list (first line '" + line.substr(0, 40) + "')";
        return std::nullopt;
    }
    std::vector<kit::PageView> pages;
    std::optional<kit::PageView> page;
    std::size_t line_no = 1;
    const auto bad = [&](const std::string& what) {
        error = "line " + std::to_string(line_no) + ": " + what;
        return std::nullopt;
    };
    while (std::getline(in, line)) {
        ++line_no;
        std::istringstream words(line);
        std::vector<std::string> w;
        for (std::string x; words >> x;)
            w.push_back(x);
        if (w.empty()) return bad("an empty line");
        if (w[0] == "page") {
            if (page) return bad("a page inside a page");
            if (w.size() != 12) return bad("a page line of " + std::to_string(w.size()) + " fields, not 12");
            kit::PageView p;
            long pid = 0;
            if (!number(w[1], p.node) || !number(w[2], pid) || !number(w[4], p.interval_ms) ||
                !number(w[5], p.publishes) || !number(w[6], p.heartbeat_age_ns) || !number(w[7], p.taken_ns))
                return bad("a page line with a field that is not a number");
            p.pid = static_cast<pid_t>(pid);
            if (w[3] == "running") {
                p.owner = kit::PageView::Owner::running;
            } else if (w[3] == "closing") {
                p.owner = kit::PageView::Owner::closing;
            } else if (w[3] == "idle") {
                p.owner = kit::PageView::Owner::idle;
            } else if (w[3] == "dead") {
                p.owner = kit::PageView::Owner::dead;
            } else if (w[3] == "torn") { // dead while writing it (PageView::torn)
                p.owner = kit::PageView::Owner::dead;
                p.torn = true;
            } else {
                return bad("an unknown owner state '" + w[3] + "'");
            }
            if (!decode(w[8], p.partition) || !decode(w[9], p.name) || !decode(w[10], p.technology) ||
                !decode(w[11], p.host))
                return bad("a badly encoded string");
            page = std::move(p);
        } else if (w[0] == "groups") {
            if (!page) return bad("groups outside a page");
            for (std::size_t i = 1; i < w.size(); ++i) {
                std::string g;
                if (!decode(w[i], g)) return bad("a badly encoded group");
                page->groups.push_back(std::move(g));
            }
        } else if (w[0] == "peer") {
            if (!page) return bad("a peer outside a page");
            if (w.size() != 13) return bad("a peer line of " + std::to_string(w.size()) + " fields, not 13");
            kit::PeerView v;
            NodeStats& s = v.stats;
            int lost = 0;
            if (!number(w[1], v.id) || !number(w[2], s.messages_sent) || !number(w[3], s.bytes_sent) ||
                !number(w[4], s.messages_received) || !number(w[5], s.bytes_received) ||
                !number(w[6], s.sends_queued) || !number(w[7], s.queue_depth) || !number(w[8], s.retries) ||
                !number(w[9], s.errors) || !number(w[10], v.losses) || !number(w[11], lost) || lost < 0 || lost > 1)
                return bad("a peer line with a field that is not a number");
            v.lost = lost == 1;
            if (!decode(w[12], v.last_error)) return bad("a badly encoded last error");
            page->peers.push_back(std::move(v));
        } else if (w[0] == "end") {
            if (!page) return bad("an end outside a page");
            pages.push_back(std::move(*page));
            page.reset();
        } else {
            return bad("an unknown line '" + w[0] + "'");
        }
    }
    if (page) return bad("the last page has no end");
    return pages;
}

std::optional<std::vector<kit::PageView>> fetch_pages(const std::string& remote, const std::string& partition,
                                                      std::chrono::milliseconds timeout, std::string& error) {
    namespace beast = boost::beast;
    namespace http = beast::http;
    namespace net = boost::asio;
    const auto colon = remote.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == remote.size()) {
        error = remote + ": expected HOST:PORT";
        return std::nullopt;
    }
    const std::string host = remote.substr(0, colon);
    const std::string port = remote.substr(colon + 1);
    // Asynchronous steps, so that the stream's deadline holds for each of them (a
    // synchronous call on a beast::tcp_stream would ignore it); io.run() returns when
    // the last step ended or failed.
    net::io_context io;
    beast::tcp_stream stream(io);
    net::ip::tcp::resolver resolver(io);
    http::request<http::empty_body> request(http::verb::get, "/pages?partition=" + partition, 11);
    request.set(http::field::host, host);
    request.set(http::field::user_agent, "msgpass-top");
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    beast::error_code failure;
    const char* step = "resolve";
    const auto fail = [&](const char* what, beast::error_code ec) {
        step = what;
        failure = ec;
    };
    stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](beast::error_code ec, net::ip::tcp::resolver::results_type results) {
        if (ec) return fail("resolve", ec);
        stream.async_connect(results, [&](beast::error_code ec, const net::ip::tcp::endpoint&) {
            if (ec) return fail("connect", ec);
            http::async_write(stream, request, [&](beast::error_code ec, std::size_t) {
                if (ec) return fail("send the request", ec);
                http::async_read(stream, buffer, parser, [&](beast::error_code ec, std::size_t) {
                    if (ec) return fail("read the answer", ec);
                    step = nullptr;
                });
            });
        });
    });
    try {
        io.run();
        if (step != nullptr) {
            error = remote + ": cannot " + std::string(step) + ": " +
                    (failure ? failure.message() : std::string("no answer"));
            return std::nullopt;
        }
        const auto& response = parser.get();
        if (response.result() != http::status::ok) {
            error = remote + ": HTTP " + std::to_string(response.result_int()) + " for /pages";
            return std::nullopt;
        }
        std::string problem;
        auto pages = decode_pages(response.body(), problem);
        if (!pages) error = remote + ": " + problem;
        return pages;
    } catch (const std::exception& e) {
        error = remote + ": " + e.what();
        return std::nullopt;
    }
}

} // namespace msgpass::top
