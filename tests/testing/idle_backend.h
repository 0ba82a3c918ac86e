// A Backend that points nowhere, for tests that need a JobSpec (which names
// its backend) but send no request.
#ifndef SDG_TESTS_TESTING_IDLE_BACKEND_H_
#define SDG_TESTS_TESTING_IDLE_BACKEND_H_

#include <memory>

#include "server/backend.h"
#include "server/http_client.h"
#include "server/metrics.h"

namespace sdg::testing {

class IdleBackend {
 public:
  explicit IdleBackend(Metrics& metrics)
      : http_(*HttpClient::Create({})), backend_(Options(), *http_, metrics) {}

  Backend* get() { return &backend_; }

 private:
  static BackendOptions Options() {
    BackendOptions options;
    options.name = "idle";
    options.base_urls = {"http://127.0.0.1:1/v1"};
    return options;
  }

  std::unique_ptr<HttpClient> http_;
  Backend backend_;
};

}  // namespace sdg::testing

#endif  // SDG_TESTS_TESTING_IDLE_BACKEND_H_
