// msgpass-top across hosts: the pages of another host's nodes, as that host's
// msgpass-top --serve reads them, fetched over HTTP (GET /pages) and shown beside
// this host's. The pages travel as text, one field a line (encode_pages), so that
// the rows, rates and totals of view.hpp are made from them as from local ones.
//
// Why a query to each host's msgpass-top and not over the partition's own tcp: the
// nodes keep no thread of their own for statistics (a page costs a store per call,
// docs/operations.md, "Cost of publishing"), so nothing inside a node could answer a
// query between its calls; msgpass-top --serve, one per host, already reads every
// page of its host, and is where Prometheus scrapes too.
#pragma once

#include <msgpass/kit/stats_page.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace msgpass::top {

// The text form of pages (GET /pages): "msgpass-pages 1", then per page its fields
// and peers, each on a line, strings percent-encoded.
[[nodiscard]] std::string encode_pages(const std::vector<kit::PageView>& pages);
// The pages of encode_pages' text; nullopt with error set on anything malformed (a
// remote is not trusted to send what it should).
[[nodiscard]] std::optional<std::vector<kit::PageView>> decode_pages(const std::string& text, std::string& error);

// GET http://HOST:PORT/pages?partition=NAME, within timeout; nullopt with error set
// (naming the remote) when it cannot be had.
[[nodiscard]] std::optional<std::vector<kit::PageView>> fetch_pages(const std::string& remote,
                                                                    const std::string& partition,
                                                                    std::chrono::milliseconds timeout,
                                                                    std::string& error);

} // namespace msgpass::top
