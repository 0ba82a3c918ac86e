// A backend's API key, and the one place that keeps it out of what sdgd
// shows: it leaves the process only in the Authorization header, and any
// text a backend sends back is redacted before it reaches a log, an event,
// an error or a metric.
#ifndef SDG_SERVER_BACKEND_API_KEY_H_
#define SDG_SERVER_BACKEND_API_KEY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sdg {

class ApiKey {
 public:
  ApiKey() = default;  // no key
  explicit ApiKey(std::string secret) : secret_(std::move(secret)) {}

  bool empty() const { return secret_.empty(); }
  // For the flag parser's tests only; never log it.
  const std::string& secret() const { return secret_; }

  // {"Authorization: Bearer KEY"}, or nothing without a key.
  std::vector<std::string> AuthorizationHeaders() const;

  // `text` with every occurrence of the key replaced by "[redacted API key]".
  std::string Redact(absl::string_view text) const;
  absl::Status Redact(const absl::Status& status) const;

 private:
  std::string secret_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_API_KEY_H_
