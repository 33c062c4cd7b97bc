// JSON lines and summaries of msgpass-bench results (see report.hpp).
#include "report.hpp"

#include <msgpass/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace msgpass::bench {

namespace {

double percentile(const std::vector<double>& sorted, double p) {
    // Nearest rank: the smallest sample with at least p of the samples at or below it.
    const auto n = sorted.size();
    auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n)));
    rank = std::clamp<std::size_t>(rank, 1, n);
    return sorted[rank - 1];
}

std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", v);
    return text;
}

std::string quoted(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
            out += esc;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

} // namespace

Latency summarize(std::vector<double>& samples) {
    Latency l;
    if (samples.empty()) return l;
    std::sort(samples.begin(), samples.end());
    l.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
    l.p50 = percentile(samples, 0.50);
    l.p99 = percentile(samples, 0.99);
    l.p999 = percentile(samples, 0.999);
    l.max = samples.back();
    return l;
}

std::string to_json(const Result& r) {
    std::ostringstream o;
    o << "{\"technology\":" << quoted(r.technology) << ",\"pattern\":" << quoted(r.pattern);
    if (r.seconds) {
        o << ",\"seconds\":" << number(*r.seconds);
        if (r.cpu_percent) o << ",\"cpu_percent\":" << number(*r.cpu_percent);
        o << "}";
        return o.str();
    }
    o << ",\"size\":" << r.size << ",\"iterations\":" << r.iterations;
    if (r.members) o << ",\"members\":" << *r.members;
    auto optional = [&](const char* key, const std::optional<double>& v) {
        if (v) o << ",\"" << key << "\":" << number(*v);
    };
    optional("cpu_us_per_msg", r.cpu_us_per_msg);
    optional("process_cpu_us_per_msg", r.process_cpu_us_per_msg);
    optional("rate_per_member", r.rate_per_member);
    optional("start_s", r.start_s);
    optional("shm_kib_per_node", r.shm_kib_per_node);
    optional("shm_objects_per_node", r.shm_objects_per_node);
    optional("rss_kib", r.rss_kib);
    optional("member_rss_kib", r.member_rss_kib);
    optional("member_rss_max_kib", r.member_rss_max_kib);
    optional("fds", r.fds);
    optional("member_fds", r.member_fds);
    optional("member_fds_max", r.member_fds_max);
    optional("lost", r.lost);
    if (r.one_way_us) {
        const auto& l = *r.one_way_us;
        o << ",\"one_way_us\":{\"mean\":" << number(l.mean) << ",\"p50\":" << number(l.p50)
          << ",\"p99\":" << number(l.p99) << ",\"p999\":" << number(l.p999) << ",\"max\":" << number(l.max) << "}";
    }
    o << ",\"msgs_per_s\":" << number(r.msgs_per_s) << ",\"MBps\":" << number(r.MBps) << "}";
    return o.str();
}

std::string size_label(std::uint64_t size) {
    if (size >= config::MiB && size % config::MiB == 0) return std::to_string(size / config::MiB) + "MiB";
    if (size >= config::KiB && size % config::KiB == 0) return std::to_string(size / config::KiB) + "KiB";
    return std::to_string(size);
}

std::vector<std::uint64_t> parse_sizes(const std::string& list) {
    std::vector<std::uint64_t> sizes;
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        const auto size = config::parse_size(item);
        if (!size || *size == 0) throw std::invalid_argument("bad size '" + item + "' in --sizes");
        sizes.push_back(*size);
    }
    if (sizes.empty()) throw std::invalid_argument("--sizes is empty");
    return sizes;
}

} // namespace msgpass::bench
