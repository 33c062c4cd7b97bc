// msgpass-top --serve PORT: the counters of the statistics pages in the OpenMetrics
// text format (what Prometheus scrapes), over HTTP (Boost.Beast), labelled by
// partition, node and peer. A scrape reads the pages as msgpass-top does: the nodes
// never wait for it.
#pragma once

#include "view.hpp"

#include <string>
#include <vector>

namespace msgpass::top {

// The OpenMetrics text of the pages (ending with "# EOF").
[[nodiscard]] std::string openmetrics(const std::vector<kit::PageView>& pages);

// The pages of source's partition, or of every partition of its user when its
// partition is empty.
[[nodiscard]] std::vector<kit::PageView> read_pages(const Source& source);

// Serves GET /metrics (and /) on address:port until the process is stopped; prints
// "serving http://<address>:<port>/metrics" on stdout once listening (port 0: the
// port the kernel chose). Returns 1 with a line on stderr when it cannot listen
// (a port in use, say).
int serve(const Source& source, const std::string& address, unsigned short port);

} // namespace msgpass::top
