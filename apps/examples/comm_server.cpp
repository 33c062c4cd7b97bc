// msgpass-comm-server: a BMI-style server through the communicator (msgpass::comm,
// docs/communicator.md): a calibration server answers the readout nodes that ask it
// for the constants of their channels, without knowing beforehand who will ask, how
// often or in which order. The server (the one member of the static group `server`
// of network.yaml) posts no receive for anybody: it takes the requests as BMI's
// unexpected messages, whose Message names the source (wait_unexpected, BMI's
// testunexpected with an idle time; test_unexpected is the same without waiting),
// and sends each answer back to that source with the tag the request came with.
// Every other node is a client: it keeps --window requests in flight, each with a
// tag of its own; for each it first posts the receive of the answer into its own
// memory with a user pointer (post_recv), then sends the request with
// post_send_unexpected, and collects the completions with wait_all, matching each
// answer to its request by the user pointer and checking it. At the end a client
// says goodbye (tag 1, the number of answers it got); the server stops once --clients
// clients (default: every other node of the nodes file) said goodbye, each after as
// many answers as it was sent. Start it on every node of apps/examples/server/ with
//   msgpass-run --config server/network.yaml --nodes server/nodes.yaml -- msgpass-comm-server
// (msgpass-run --technology tcp, udp or auto runs it over another technology).
// Clients in no nodes file (BMI's peers found at run time, docs/communicator.md): a
// process started with --lookup tcp://HOST:PORT (or udp://HOST:PORT) and --config
// alone (no nodes file, no node id) is a client of the server listening there, which
// takes it when its network file sets tcp.max_clients (udp.max_clients); the server
// then names the clients by the
// run-time ids it gave them (2147483648 and up), and waits for --clients of them:
//   msgpass-comm-server --config net.yaml --nodes nodes.yaml --node-id 1 --clients 2 --set tcp.max_clients=2 &
//   msgpass-comm-server --config net.yaml --lookup tcp://localhost:7000 &   (twice)
// Such a client learns the id the server calls it by from its first answer. Options: --requests N per client (default
// 20), --window W (default 4), --clients C,
// --timeout S: seconds of silence before a wait gives up (default 10). Every wait has
// that timeout. Exit status: 0 every client got every answer right; 1 a timeout, a
// wrong or missing answer, a malformed request; 2 a setup error.
#include <msgpass/comm.hpp>
#include <msgpass/msgpass.hpp>

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using msgpass::NodeId;
namespace comm = msgpass::comm;

struct Settings {
    std::uint32_t requests = 20;
    std::uint32_t window = 4;
    std::optional<std::uint32_t> clients;
    std::chrono::milliseconds timeout{10'000};
    std::string lookup; // a client in no nodes file: the server's address
};

Settings parse_settings(const std::vector<std::string>& args) {
    namespace po = boost::program_options;
    Settings s;
    double timeout_s = 10.0;
    std::uint32_t clients = 0;
    po::options_description desc("msgpass-comm-server options");
    desc.add_options()("requests", po::value(&s.requests), "requests per client (default 20)")(
        "window", po::value(&s.window), "requests in flight per client (default 4)")(
        "clients", po::value(&clients), "clients the server waits for (default: every other node)")(
        "timeout", po::value(&timeout_s), "seconds a wait may last before it gives up (default 10)")(
        "lookup", po::value(&s.lookup),
        "tcp://HOST:PORT or udp://HOST:PORT: a client in no nodes file, of the server there");
    po::variables_map vm;
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
    if (s.requests == 0 || s.requests > 100000) throw msgpass::UsageError("--requests: expected 1 to 100000");
    if (s.window == 0 || s.window > 1000) throw msgpass::UsageError("--window: expected 1 to 1000");
    if (!(timeout_s > 0 && timeout_s < 3600)) throw msgpass::UsageError("--timeout: expected 0 < seconds < 3600");
    if (vm.count("clients") != 0) s.clients = clients;
    s.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    return s;
}

// The tags. A request's tag is the one its answer comes back with: tag_first_request
// and up, one per request of a client, so each answer finds the receive posted for it.
constexpr comm::Tag tag_goodbye = 1;
constexpr comm::Tag tag_first_request = 100;

// Wire formats, copied in and out, so no alignment is assumed.
struct Request {
    std::uint32_t channel;
};
struct Answer {
    std::uint32_t channel;
    std::uint32_t client; // whom the server answered
    double gain;
    double pedestal;
};

// The constants the server looks up for a channel (here a formula the clients can
// check), and the channel a client asks for with its n-th request.
Answer calibration(std::uint32_t channel, NodeId client) {
    return {channel, client, 1.0 + channel * 1e-3, 20.0 + channel % 17};
}
std::uint32_t channel_of(NodeId client, std::uint32_t n) {
    return client * 1000 + n * 7;
}

double seconds(std::chrono::milliseconds d) {
    return static_cast<double>(d.count()) / 1000.0;
}

template <class T>
std::optional<T> payload_as(const msgpass::Buffer& buffer) {
    T value{};
    if (buffer.size() != sizeof value) return std::nullopt;
    buffer.copy_to(std::as_writable_bytes(std::span(&value, 1)));
    return value;
}

// What the server learns about a client from its messages.
struct Client {
    std::uint32_t answered = 0;
    bool said_goodbye = false;
};

int run_server(comm::Communicator& comm, std::size_t expected, const Settings& s) {
    std::map<NodeId, Client> clients; // filled by the requests: nobody is known beforehand
    std::size_t goodbyes = 0;
    std::uint32_t answered = 0, malformed = 0;
    while (goodbyes < expected) {
        auto messages = comm.wait_unexpected(64, s.timeout); // oldest first, each with its source and tag
        if (messages.empty()) {
            std::fprintf(stderr,
                         "msgpass-comm-server: server: no request within %gs; %zu of %zu clients said goodbye\n",
                         seconds(s.timeout), goodbyes, expected);
            return 1;
        }
        for (const auto& m : messages) {
            auto& client = clients[m.source]; // a client we had not known: met here
            if (m.tag == tag_goodbye) {
                const auto got = payload_as<std::uint32_t>(*m.buffer);
                if (!got || client.said_goodbye || *got != client.answered) {
                    std::fprintf(stderr,
                                 "msgpass-comm-server: server: a wrong goodbye of node %u (after %u answers, %s)\n",
                                 m.source, client.answered, client.said_goodbye ? "its second" : "a wrong count");
                    ++malformed;
                }
                if (!client.said_goodbye) ++goodbyes;
                client.said_goodbye = true;
                continue;
            }
            const auto request = payload_as<Request>(*m.buffer);
            if (m.tag < tag_first_request || !request) {
                std::fprintf(stderr, "msgpass-comm-server: server: malformed request of node %u: tag %d, %zu bytes\n",
                             m.source, m.tag, m.buffer->size());
                ++malformed;
                continue;
            }
            const Answer answer = calibration(request->channel, m.source);
            // Back to whoever asked, with the request's tag; returns once the node took it.
            // A client that went away costs the server its answer, not its life.
            try {
                comm.send(m.source, m.tag, std::as_bytes(std::span(&answer, 1)));
            } catch (const msgpass::PeerLost& e) {
                std::fprintf(stderr, "msgpass-comm-server: server: node %u left before its answer: %s\n", m.source,
                             e.what());
                continue;
            }
            ++client.answered;
            ++answered;
        }
    }
    if (!comm.flush(s.timeout)) {
        std::fprintf(stderr, "msgpass-comm-server: server: answers still queued after %gs\n", seconds(s.timeout));
        return 1;
    }
    std::string who;
    for (const auto& [id, client] : clients)
        who += (who.empty() ? "" : ", ") + std::to_string(id);
    std::printf("answered %u requests of %zu clients it had not known (nodes %s), %u malformed\n", answered,
                clients.size(), who.c_str(), malformed);
    return malformed == 0 ? 0 : 1;
}

// A request in flight: the place of its answer, reached through the user pointer.
struct Pending {
    std::uint32_t channel = 0;
    comm::Tag tag = 0;
    Answer answer{};
};

// Whether a completion is right: a send that went, or the expected answer.
// self: this client's node id; for a client in no nodes file, no_node until the
// first answer names the id the server gave it (then every answer must name it).
bool check(const comm::Completion& done, NodeId& self, NodeId server) {
    if (done.status != comm::Status::success) {
        std::fprintf(stderr, "msgpass-comm-server: client %u: a %s with tag %d failed: %s %s\n", self,
                     done.is_send ? "request" : "receive", done.tag, comm::to_string(done.status), done.error.c_str());
        return false;
    }
    if (done.is_send) return true;
    const auto& p = *static_cast<const Pending*>(done.user);
    if (self == msgpass::no_node && p.answer.client >= msgpass::first_runtime_id) self = p.answer.client;
    const Answer want = calibration(p.channel, self);
    const bool ok = done.source == server && done.tag == p.tag && done.bytes == sizeof(Answer) &&
                    p.answer.channel == want.channel && p.answer.client == want.client && p.answer.gain == want.gain &&
                    p.answer.pedestal == want.pedestal;
    if (!ok)
        std::fprintf(stderr,
                     "msgpass-comm-server: client %u: wrong answer to channel %u (tag %d): from %u, tag %d, %zu "
                     "bytes, channel %u, client %u, gain %.17g, pedestal %.17g; expected from %u, %zu bytes, "
                     "client %u, gain %.17g, pedestal %.17g\n",
                     self, p.channel, p.tag, done.source, done.tag, done.bytes, p.answer.channel, p.answer.client,
                     p.answer.gain, p.answer.pedestal, server, sizeof(Answer), want.client, want.gain, want.pedestal);
    return ok;
}

int run_client(comm::Communicator& comm, NodeId server, const std::string& name, const Settings& s) {
    NodeId self = comm.self_id();
    std::vector<Pending> window(s.window);
    std::uint32_t answers = 0;
    for (std::uint32_t first = 0; first < s.requests; first += s.window) {
        const std::uint32_t count = std::min(s.window, s.requests - first);
        std::vector<comm::RequestId> ids;
        std::vector<comm::Completion> done;
        std::size_t answers_posted = 0;
        auto keep = [&](comm::Posted posted) {
            if (posted.done)
                done.push_back(std::move(*posted.done)); // completed by the post itself
            else
                ids.push_back(posted.id);
        };
        for (std::uint32_t k = 0; k < count; ++k) {
            auto& p = window[k];
            p = Pending{channel_of(self, first + k), tag_first_request + static_cast<comm::Tag>(first + k), {}};
            // The answer's place first, then the question: the answer never waits unexpected.
            auto answer = comm.post_recv(server, p.tag, std::as_writable_bytes(std::span(&p.answer, 1)), &p);
            if (!answer.done) ++answers_posted;
            keep(std::move(answer));
            const Request request{p.channel};
            keep(comm.post_send_unexpected(server, p.tag, std::as_bytes(std::span(&request, 1)))); // copies it
        }
        auto completed = comm.wait_all(ids, s.timeout);
        if (completed.size() < ids.size()) {
            const auto answered_now = static_cast<std::size_t>(std::count_if(
                completed.begin(), completed.end(), [](const comm::Completion& c) { return !c.is_send; }));
            const std::size_t missing_answers = answers_posted - answered_now;
            std::fprintf(stderr,
                         "msgpass-comm-server: client %u: %zu answers to requests %u..%u did not come from server %u "
                         "within %gs (%zu of the requests not handed over yet)\n",
                         self, missing_answers, first, first + count - 1, server, seconds(s.timeout),
                         ids.size() - completed.size() - missing_answers);
            return 1;
        }
        done.insert(done.end(), std::make_move_iterator(completed.begin()), std::make_move_iterator(completed.end()));
        for (const auto& d : done) {
            if (!check(d, self, server)) return 1;
            if (!d.is_send) ++answers;
        }
    }
    const std::uint32_t goodbye = answers;
    auto bye = comm.post_send_unexpected(server, tag_goodbye, std::as_bytes(std::span(&goodbye, 1)));
    auto bye_done = bye.done ? std::move(bye.done) : comm.wait(bye.id, s.timeout);
    if (!bye_done || !check(*bye_done, self, server) || !comm.flush(s.timeout)) {
        std::fprintf(stderr, "msgpass-comm-server: client %u: the goodbye did not reach the server within %gs\n", self,
                     seconds(s.timeout));
        return 1;
    }
    std::printf("%s: %u answers of server %u right\n", name.c_str(), answers, server);
    return 0;
}

} // namespace

// A client in no nodes file: the network file (--config, --set) alone, the server
// found at --lookup. A server not listening yet is asked again until --timeout.
int run_lookup_client(int argc, char** argv) {
    namespace po = boost::program_options;
    std::string network = "network.yaml";
    std::vector<std::string> sets;
    po::options_description desc("msgpass-comm-server client options");
    desc.add_options()("config", po::value(&network))("set", po::value(&sets));
    po::variables_map vm;
    const auto parsed = po::command_line_parser(argc, argv).options(desc).allow_unregistered().run();
    po::store(parsed, vm);
    po::notify(vm);
    const auto settings = parse_settings(po::collect_unrecognized(parsed.options, po::include_positional));
    const auto configuration = msgpass::config::load_network(network, sets);
    auto factory = msgpass::NodeFactory::create_client(configuration);
    comm::Communicator comm(*factory, configuration, comm::Limits::from(configuration));
    const auto deadline = std::chrono::steady_clock::now() + settings.timeout;
    NodeId server = 0;
    for (;;) {
        try {
            server = comm.lookup(settings.lookup);
            break;
        } catch (const msgpass::UsageError&) {
            throw;
        } catch (const msgpass::Error& e) {
            // Refused by the server: say why. Not reachable (yet): ask again (tcp: the
            // connection refused; udp: no welcome within peer_timeout).
            const std::string what = e.what();
            if ((what.find(": connect:") == std::string::npos && what.find("no welcome") == std::string::npos) ||
                std::chrono::steady_clock::now() >= deadline)
                throw;
            std::this_thread::sleep_for(100ms);
        }
    }
    return run_client(comm, server, "client of " + settings.lookup, settings);
}

int main(int argc, char** argv) try {
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--lookup" || std::string(argv[i]).rfind("--lookup=", 0) == 0)
            return run_lookup_client(argc, argv);
    const auto options = msgpass::options(argc, argv); // --config --nodes --node-id --set
    const auto settings = parse_settings(options.rest);
    const auto& configuration = options.configuration;
    const auto& servers = configuration.group("server");
    if (servers.size() != 1) {
        std::fprintf(stderr, "msgpass-comm-server: group server must have one member, it has %zu\n", servers.size());
        return 2;
    }
    const NodeId server = servers.front();
    auto factory = msgpass::NodeFactory::create(options);
    const NodeId self = factory->self_id();
    const auto limits = comm::Limits::from(configuration);
    if (self == server) {
        // A communicator over every node of the nodes file, to answer whoever asks.
        comm::Communicator comm(*factory, configuration, limits);
        return run_server(comm, settings.clients.value_or(configuration.nodes.size() - 1), settings);
    }
    comm::Communicator comm(*factory, std::vector<NodeId>{server}, limits); // a client knows its server only
    return run_client(comm, server, configuration.node(self).name, settings);
} catch (const std::exception& e) {
    std::fprintf(stderr, "msgpass-comm-server: %s\n", e.what());
    return 2;
}
