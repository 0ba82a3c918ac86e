#include "server/backend/retry_policy.h"

#include <algorithm>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"

namespace sdg {

bool RetryPolicy::IsRetryable(const HttpResponse& response) {
  switch (response.transport.code()) {
    case absl::StatusCode::kOk: {
      const long code = response.http_code;
      return code == 408 || code == 409 || code == 429 || code >= 500;
    }
    case absl::StatusCode::kCancelled:  // the caller gave up
    case absl::StatusCode::kInternal:   // our own setup failed
      return false;
    default:  // refused, reset, timed out
      return true;
  }
}

bool RetryPolicy::ShouldRetry(const HttpResponse& response,
                              int attempts) const {
  return attempts < options_.max_attempts && IsRetryable(response);
}

absl::Duration RetryPolicy::Backoff(int attempts, const HttpResponse& response,
                                    absl::BitGenRef random) const {
  if (response.retry_after.has_value()) {
    return std::min(*response.retry_after, options_.max_retry_after);
  }
  const absl::Duration ceiling = std::min(
      options_.max_backoff,
      options_.initial_backoff * (1 << std::clamp(attempts - 1, 0, 16)));
  return absl::Seconds(absl::Uniform<double>(absl::IntervalClosed, random, 0.0,
                                             absl::ToDoubleSeconds(ceiling)));
}

std::string RetryPolicy::OutcomeLabel(const HttpResponse& response) {
  switch (response.transport.code()) {
    case absl::StatusCode::kOk:
      return absl::StrCat(response.http_code);
    case absl::StatusCode::kDeadlineExceeded:
      return "timeout";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    default:
      return "connect_error";
  }
}

}  // namespace sdg
