// msgpass-top --serve (serve.hpp): the OpenMetrics rendering of the pages and a
// small sequential HTTP server (one scrape at a time; a client that sends nothing
// for 5 s is dropped, so it cannot hold the others off for long).
#include "serve.hpp"

#include "remote.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/socket.h>
#include <sys/time.h>

#include <iostream>
#include <sstream>

namespace msgpass::top {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

std::string label(const std::string& value) {
    std::string out;
    for (const char c : value) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

struct Family {
    const char* name;
    const char* type;
    const char* help;
};

} // namespace

std::vector<kit::PageView> read_pages(const Source& source) {
    std::vector<kit::PageView> pages;
    std::error_code error;
    for (const auto& name : kit::find_stats_pages(source.user, source.partition, error)) {
        std::string problem;
        if (auto page = kit::read_stats_page(name, problem)) pages.push_back(std::move(*page));
    }
    return pages;
}

std::string openmetrics(const std::vector<kit::PageView>& pages) {
    std::ostringstream o;
    const auto node_labels = [](const kit::PageView& page) {
        return "partition=\"" + label(page.partition) + "\",node=\"" + std::to_string(page.node) + "\",name=\"" +
               label(page.name) + "\",technology=\"" + label(page.technology) + "\"";
    };
    o << "# TYPE msgpass_node_up gauge\n"
         "# HELP msgpass_node_up 1 while the node's process publishes, 0 once it is dead, idle or closing\n";
    for (const auto& page : pages)
        o << "msgpass_node_up{" << node_labels(page) << "} " << (page.owner == kit::PageView::Owner::running ? 1 : 0)
          << "\n";
    const Family families[] = {
        {"msgpass_messages_sent", "counter", "messages handed to the peer"},
        {"msgpass_bytes_sent", "counter", "bytes of the messages handed to the peer"},
        {"msgpass_messages_received", "counter", "messages received from the peer"},
        {"msgpass_bytes_received", "counter", "bytes of the messages received from the peer"},
        {"msgpass_sends_queued", "counter", "sends that had to wait in the send queue"},
        {"msgpass_retries", "counter", "transfers repeated after an error"},
        {"msgpass_errors", "counter", "errors raised for the peer"},
        {"msgpass_peer_losses", "counter", "losses of the peer"},
        {"msgpass_queue_depth", "gauge", "messages in the send queue to the peer now"},
        {"msgpass_peer_lost", "gauge", "1 while the peer is lost"},
    };
    for (std::size_t f = 0; f < std::size(families); ++f) {
        const auto& family = families[f];
        o << "# TYPE " << family.name << ' ' << family.type << "\n# HELP " << family.name << ' ' << family.help << "\n";
        for (const auto& page : pages) {
            // A dead node's last numbers are not shown as if they were current.
            if (page.owner == kit::PageView::Owner::dead) continue;
            for (const auto& peer : page.peers) {
                const NodeStats& s = peer.stats;
                const std::uint64_t values[] = {
                    s.messages_sent, s.bytes_sent, s.messages_received, s.bytes_received, s.sends_queued,
                    s.retries,       s.errors,     peer.losses,         s.queue_depth,    peer.lost ? 1u : 0u};
                o << family.name << (family.type[0] == 'c' ? "_total" : "") << '{' << node_labels(page) << ",peer=\""
                  << peer.id << "\"} " << values[f] << "\n";
            }
        }
    }
    o << "# EOF\n";
    return o.str();
}

int serve(const Source& source, const std::string& address, unsigned short port) {
    net::io_context io;
    net::ip::tcp::acceptor acceptor(io);
    boost::system::error_code error;
    const auto ip = net::ip::make_address(address, error);
    if (error) {
        std::cerr << "msgpass-top: --serve: '" << address << "' is not an IP address\n";
        return 2;
    }
    const net::ip::tcp::endpoint endpoint(ip, port);
    acceptor.open(endpoint.protocol(), error);
    if (!error) acceptor.set_option(net::socket_base::reuse_address(true), error);
    if (!error) acceptor.bind(endpoint, error);
    if (!error) acceptor.listen(net::socket_base::max_listen_connections, error);
    if (error) {
        std::cerr << "msgpass-top: cannot serve metrics on " << address << ":" << port << ": " << error.message()
                  << "\n";
        return 1;
    }
    std::cout << "serving http://" << address << ":" << acceptor.local_endpoint().port() << "/metrics" << std::endl;
    for (;;) {
        net::ip::tcp::socket socket(io);
        acceptor.accept(socket, error);
        if (error) continue;
        const timeval timeout{5, 0};
        ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        beast::flat_buffer buffer;
        http::request<http::string_body> request;
        http::read(socket, buffer, request, error);
        if (error) continue;
        http::response<http::string_body> response;
        response.version(request.version());
        response.keep_alive(false);
        response.set(http::field::server, "msgpass-top");
        if (request.method() != http::verb::get) {
            response.result(http::status::method_not_allowed);
            response.body() = "only GET\n";
        } else if (request.target().starts_with("/pages")) {
            // Another host's msgpass-top --remote (remote.hpp): the pages themselves,
            // of ?partition=NAME when given (and within what --partition serves).
            const std::string target(request.target());
            const auto query = target.find("?partition=");
            std::vector<kit::PageView> pages;
            if (query == std::string::npos) {
                pages = read_pages(source);
            } else if (const std::string wanted = target.substr(query + 11);
                       source.partition.empty() || wanted == source.partition) {
                Source asked = source;
                asked.partition = wanted;
                pages = read_pages(asked);
            }
            response.result(http::status::ok);
            response.set(http::field::content_type, "text/plain; charset=utf-8");
            response.body() = encode_pages(pages);
        } else if (request.target() != "/metrics" && request.target() != "/") {
            response.result(http::status::not_found);
            response.body() = "the metrics are at /metrics\n";
        } else {
            response.result(http::status::ok);
            response.set(http::field::content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
            response.body() = openmetrics(read_pages(source));
        }
        response.prepare_payload();
        http::write(socket, response, error);
        socket.shutdown(net::ip::tcp::socket::shutdown_both, error);
    }
}

} // namespace msgpass::top
