// Whether a failed backend attempt is tried again, and after how long. Pure:
// no clock, no I/O; the randomness comes from the caller, so tests can pin it.
// The rules follow openai-python: connection errors, timeouts, 408, 409, 429
// and 5xx are retried with capped exponential backoff and full jitter, and a
// server's Retry-After / retry-after-ms wins (up to a cap).
#ifndef SDG_SERVER_BACKEND_RETRY_POLICY_H_
#define SDG_SERVER_BACKEND_RETRY_POLICY_H_

#include <optional>
#include <string>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "server/http/http_transport.h"

namespace sdg {

class RetryPolicy {
 public:
  struct Options {
    int max_attempts = 3;  // attempts per call, the first one included
    absl::Duration initial_backoff = absl::Milliseconds(500);
    absl::Duration max_backoff = absl::Seconds(8);
    absl::Duration max_retry_after = absl::Seconds(120);
  };

  explicit RetryPolicy(const Options& options) : options_(options) {}

  // Whether this outcome is worth another attempt at all: a transport
  // failure (refused, reset, timed out) or HTTP 408, 409, 429, 5xx. A 2xx,
  // another 4xx, a cancelled request and a local setup error are not.
  static bool IsRetryable(const HttpResponse& response);

  // Whether a call that has made `attempts` attempts, the last ending in
  // `response`, may make another.
  bool ShouldRetry(const HttpResponse& response, int attempts) const;

  // How long to wait before attempt `attempts + 1`: the server's Retry-After
  // (capped at max_retry_after) if it sent one, else uniform in
  // [0, min(max_backoff, initial_backoff * 2^(attempts-1))].
  absl::Duration Backoff(int attempts, const HttpResponse& response,
                         absl::BitGenRef random) const;

  // The label for how an attempt ended (metrics, logs): the HTTP status, or
  // timeout, cancelled, connect_error.
  static std::string OutcomeLabel(const HttpResponse& response);

  const Options& options() const { return options_; }

 private:
  const Options options_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_RETRY_POLICY_H_
