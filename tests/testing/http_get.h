// A blocking HTTP GET for tests (scraping /metrics, reading llmsim's /stats).
#ifndef SDG_TESTS_TESTING_HTTP_GET_H_
#define SDG_TESTS_TESTING_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace sdg::testing {

// The body of a 200 reply; an error for anything else.
absl::StatusOr<std::string> HttpGet(const std::string& url);

// The value of the sample `name_with_labels` (e.g.
// `sdg_rows_total{outcome="succeeded"}`) in a Prometheus text scrape, or -1.
double MetricValue(const std::string& scrape,
                   const std::string& name_with_labels);

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_HTTP_GET_H_
