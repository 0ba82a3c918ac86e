// Blocking HTTP requests for tests: GETs (scraping /metrics, reading
// llmsim's /stats), and any request with its status (the Batch API).
#ifndef SDG_TESTS_TESTING_HTTP_GET_H_
#define SDG_TESTS_TESTING_HTTP_GET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sdg::testing {

// The body of a 200 reply; an error for anything else.
absl::StatusOr<std::string> HttpGet(const std::string& url);

struct HttpReply {
  long status = 0;
  std::string body;
};
// `method` on `url` with `body`, each of `headers` ("Name: value") sent;
// `ca_file` (PEM) is the CA a TLS server is checked against. An error only
// when no reply came.
absl::StatusOr<HttpReply> HttpRequest(
    const std::string& method, const std::string& url,
    const std::string& body = "", const std::vector<std::string>& headers = {},
    const std::string& ca_file = "");

// The value of the sample `name_with_labels` (e.g.
// `sdg_rows_total{outcome="succeeded"}`) in a Prometheus text scrape, or -1.
double MetricValue(const std::string& scrape,
                   const std::string& name_with_labels);

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_HTTP_GET_H_
