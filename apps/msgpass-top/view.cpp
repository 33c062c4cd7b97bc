// The rows msgpass-top shows (view.hpp): pages read, rates from two samples, totals
// per group, and their JSON and text forms.
#include "view.hpp"

#include "remote.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace msgpass::top {

Sample take_sample(const Source& source) {
    Sample sample;
    std::error_code error;
    for (const auto& name : kit::find_stats_pages(source.user, source.partition, error)) {
        std::string problem;
        if (auto page = kit::read_stats_page(name, problem)) {
            const auto id = page->node;
            sample.pages.emplace(id, std::move(*page));
        } else if (!problem.empty()) {
            sample.problems.push_back(problem);
        }
    }
    if (error) sample.problems.push_back("/dev/shm: " + error.message());
    // Other hosts' nodes, as their msgpass-top --serve reads them; a node id this host
    // has a page of keeps this host's.
    for (const auto& remote : source.remotes) {
        std::string problem;
        auto pages = fetch_pages(remote, source.partition, std::chrono::seconds(2), problem);
        if (!pages) {
            sample.problems.push_back(problem);
            continue;
        }
        for (auto& page : *pages) {
            const auto id = page.node;
            sample.pages.emplace(id, std::move(page));
        }
    }
    return sample;
}

namespace {

Rates rates_between(const NodeStats& before, const NodeStats& after, double seconds) {
    Rates r;
    if (seconds <= 0) return r;
    const auto delta = [](std::uint64_t a, std::uint64_t b) { return b >= a ? static_cast<double>(b - a) : 0.0; };
    r.msgs_in = delta(before.messages_received, after.messages_received) / seconds;
    r.msgs_out = delta(before.messages_sent, after.messages_sent) / seconds;
    r.mb_in = delta(before.bytes_received, after.bytes_received) / seconds / 1e6;
    r.mb_out = delta(before.bytes_sent, after.bytes_sent) / seconds / 1e6;
    return r;
}

void add(NodeStats& to, const NodeStats& s) {
    to.messages_sent += s.messages_sent;
    to.bytes_sent += s.bytes_sent;
    to.messages_received += s.messages_received;
    to.bytes_received += s.bytes_received;
    to.sends_queued += s.sends_queued;
    to.queue_depth += s.queue_depth;
    to.retries += s.retries;
    to.errors += s.errors;
}

void add(Rates& to, const Rates& r) {
    to.msgs_in += r.msgs_in;
    to.msgs_out += r.msgs_out;
    to.mb_in += r.mb_in;
    to.mb_out += r.mb_out;
}

std::string escape(const std::string& text) {
    std::string out;
    for (const unsigned char c : text) {
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    return out;
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v);
    return buf;
}

void counters_json(std::ostringstream& o, const NodeStats& s) {
    o << "\"messages_in\":" << s.messages_received << ",\"messages_out\":" << s.messages_sent
      << ",\"bytes_in\":" << s.bytes_received << ",\"bytes_out\":" << s.bytes_sent
      << ",\"queue_depth\":" << s.queue_depth << ",\"sends_queued\":" << s.sends_queued << ",\"retries\":" << s.retries
      << ",\"errors\":" << s.errors;
}

void rates_json(std::ostringstream& o, const std::optional<Rates>& r) {
    if (!r) {
        o << "\"msgs_in_per_s\":null,\"msgs_out_per_s\":null,\"mb_in_per_s\":null,\"mb_out_per_s\":null";
        return;
    }
    o << "\"msgs_in_per_s\":" << number(r->msgs_in) << ",\"msgs_out_per_s\":" << number(r->msgs_out)
      << ",\"mb_in_per_s\":" << number(r->mb_in) << ",\"mb_out_per_s\":" << number(r->mb_out);
}

} // namespace

std::vector<Row> make_rows(const Source& source, const Sample* earlier, const Sample& later) {
    std::vector<Row> rows;
    std::set<std::uint32_t> seen;
    for (const auto& [id, page] : later.pages) {
        seen.insert(id);
        Row row;
        row.id = id;
        row.name = page.name;
        row.technology = page.technology;
        row.host = page.host;
        row.pid = page.pid;
        row.groups = page.groups;
        const kit::PageView* before = nullptr;
        if (earlier != nullptr) {
            if (auto it = earlier->pages.find(id); it != earlier->pages.end() && it->second.pid == page.pid)
                before = &it->second;
        }
        const double seconds = before ? static_cast<double>(page.taken_ns - before->taken_ns) / 1e9 : 0;
        const bool running = page.owner == kit::PageView::Owner::running;
        Rates sum;
        for (const auto& peer : page.peers) {
            PeerRow p;
            p.id = peer.id;
            p.stats = peer.stats;
            p.losses = peer.losses;
            p.lost = peer.lost;
            p.last_error = peer.last_error;
            if (before != nullptr) {
                const auto match = std::find_if(before->peers.begin(), before->peers.end(),
                                                [&](const kit::PeerView& v) { return v.id == peer.id; });
                p.rates = rates_between(match != before->peers.end() ? match->stats : NodeStats{}, peer.stats, seconds);
            }
            add(row.total, peer.stats);
            add(sum, p.rates);
            row.losses += peer.losses;
            if (peer.lost) ++row.peers_lost;
            if (!peer.last_error.empty()) row.last_error = peer.last_error;
            row.peers.push_back(std::move(p));
        }
        if (running && before != nullptr) row.rates = sum;
        row.torn = page.owner == kit::PageView::Owner::dead && page.torn;
        if (!running) {
            row.state = kit::owner_text(page.owner);
        } else {
            row.state = row.peers_lost > 0 ? "peer lost" : "running";
        }
        rows.push_back(std::move(row));
    }
    for (const auto& expected : source.expected) {
        if (seen.contains(expected.id)) continue;
        Row row;
        row.id = expected.id;
        row.name = expected.name;
        row.host = expected.host;
        row.technology = source.technology;
        row.groups = expected.groups;
        row.state = "absent";
        rows.push_back(std::move(row));
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.id < b.id; });
    return rows;
}

std::vector<GroupTotal> group_totals(const std::vector<Row>& rows) {
    std::map<std::string, GroupTotal> groups;
    for (const auto& row : rows) {
        for (const auto& g : row.groups) {
            auto& total = groups[g];
            total.group = g;
            ++total.nodes;
            if (row.rates) add(total.rates, *row.rates);
            add(total.total, row.total);
            total.losses += row.losses;
            total.peers_lost += row.peers_lost;
        }
    }
    std::vector<GroupTotal> out;
    for (auto& [name, total] : groups)
        out.push_back(std::move(total));
    return out;
}

std::string json(const std::string& partition, const Row& row) {
    std::ostringstream o;
    o << "{\"partition\":\"" << escape(partition) << "\",\"id\":" << row.id << ",\"name\":\"" << escape(row.name)
      << "\",\"technology\":\"" << escape(row.technology) << "\",\"host\":\"" << escape(row.host)
      << "\",\"pid\":" << row.pid << ",\"state\":\"" << row.state << "\",\"torn\":" << (row.torn ? "true" : "false")
      << ",\"groups\":[";
    for (std::size_t i = 0; i < row.groups.size(); ++i)
        o << (i ? "," : "") << '"' << escape(row.groups[i]) << '"';
    o << "],";
    rates_json(o, row.rates);
    o << ',';
    counters_json(o, row.total);
    o << ",\"losses\":" << row.losses << ",\"peers_lost\":" << row.peers_lost << ",\"last_error\":\""
      << escape(row.last_error) << "\",\"peers\":[";
    for (std::size_t i = 0; i < row.peers.size(); ++i) {
        const auto& p = row.peers[i];
        o << (i ? "," : "") << "{\"id\":" << p.id << ',';
        rates_json(o, row.rates ? std::optional<Rates>(p.rates) : std::nullopt);
        o << ',';
        counters_json(o, p.stats);
        o << ",\"losses\":" << p.losses << ",\"lost\":" << (p.lost ? "true" : "false") << ",\"last_error\":\""
          << escape(p.last_error) << "\"}";
    }
    o << "]}";
    return o.str();
}

std::string table(const std::vector<Row>& rows, bool with_peers) {
    std::ostringstream o;
    char line[512];
    std::snprintf(line, sizeof line, "%4s %-14s %-5s %-9s %10s %10s %8s %8s %7s %7s %6s %5s %s\n", "ID", "NAME", "TECH",
                  "STATE", "MSG/S IN", "MSG/S OUT", "MB/S IN", "MB/S OUT", "QUEUE", "RETRY", "LOSSES", "LOST",
                  "LAST ERROR");
    o << line;
    const auto rate = [](const std::optional<Rates>& r, double Rates::*field, const char* fmt) {
        char buf[32];
        if (!r) return std::string("-");
        std::snprintf(buf, sizeof buf, fmt, (*r).*field);
        return std::string(buf);
    };
    for (const auto& row : rows) {
        std::snprintf(line, sizeof line, "%4u %-14.14s %-5.5s %-9s %10s %10s %8s %8s %7llu %7llu %6llu %5llu %s\n",
                      row.id, row.name.c_str(), row.technology.c_str(), (row.state + (row.torn ? "*" : "")).c_str(),
                      rate(row.rates, &Rates::msgs_in, "%.0f").c_str(),
                      rate(row.rates, &Rates::msgs_out, "%.0f").c_str(), rate(row.rates, &Rates::mb_in, "%.2f").c_str(),
                      rate(row.rates, &Rates::mb_out, "%.2f").c_str(),
                      static_cast<unsigned long long>(row.total.queue_depth),
                      static_cast<unsigned long long>(row.total.retries), static_cast<unsigned long long>(row.losses),
                      static_cast<unsigned long long>(row.peers_lost), row.last_error.c_str());
        o << line;
        if (!with_peers) continue;
        for (const auto& p : row.peers) {
            const std::optional<Rates> r = row.rates ? std::optional<Rates>(p.rates) : std::nullopt;
            std::snprintf(line, sizeof line, "     -> %-11u %-5s %-9s %10s %10s %8s %8s %7llu %7llu %6llu %5s %s\n",
                          p.id, "", p.lost ? "lost" : "", rate(r, &Rates::msgs_in, "%.0f").c_str(),
                          rate(r, &Rates::msgs_out, "%.0f").c_str(), rate(r, &Rates::mb_in, "%.2f").c_str(),
                          rate(r, &Rates::mb_out, "%.2f").c_str(), static_cast<unsigned long long>(p.stats.queue_depth),
                          static_cast<unsigned long long>(p.stats.retries), static_cast<unsigned long long>(p.losses),
                          "", p.last_error.c_str());
            o << line;
        }
    }
    if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.torn; }))
        o << "* died while writing its page: each number is that snapshot's or the one before\n";
    for (const auto& g : group_totals(rows)) {
        std::snprintf(line, sizeof line, "%4s %-14.14s %-5s %-9zu %10.0f %10.0f %8.2f %8.2f %7llu %7llu %6llu %5llu\n",
                      "", ("group " + g.group).c_str(), "", g.nodes, g.rates.msgs_in, g.rates.msgs_out, g.rates.mb_in,
                      g.rates.mb_out, static_cast<unsigned long long>(g.total.queue_depth),
                      static_cast<unsigned long long>(g.total.retries), static_cast<unsigned long long>(g.losses),
                      static_cast<unsigned long long>(g.peers_lost));
        o << line;
    }
    return o.str();
}

} // namespace msgpass::top
