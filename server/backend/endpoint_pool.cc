#include "server/backend/endpoint_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/http/url.h"

namespace sdg {
namespace {

bool IsOverload(const HttpResponse& response) {
  return response.transport.code() == absl::StatusCode::kDeadlineExceeded ||
         (response.transport.ok() &&
          (response.http_code == 429 || response.http_code == 503));
}

}  // namespace

EndpointPool::EndpointPool(const std::vector<std::string>& base_urls,
                           const ConcurrencyLimit& limit,
                           const Options& options)
    : options_(options) {
  for (const std::string& url : base_urls) {
    endpoints_.push_back(Endpoint{.base_url = url,
                                  .display_url = RedactUrlPassword(url),
                                  .limit = limit});
  }
}

int EndpointPool::Acquire(int avoid, absl::Time now) {
  int best = kNoneFree;
  const size_t count = endpoints_.size();
  for (size_t i = 0; i < count; ++i) {
    const int index = static_cast<int>((next_ + i) % count);
    const Endpoint& endpoint = endpoints_[index];
    if (endpoint.ejected && now < endpoint.ejected_until) continue;
    // An ejected endpoint past its cool-down gets one trial request.
    const int room =
        (endpoint.ejected ? 1 : endpoint.limit.limit()) - endpoint.in_flight;
    if (room <= 0) continue;
    if (best == kNoneFree || (best == avoid && index != avoid) ||
        (index != avoid && endpoint.in_flight < endpoints_[best].in_flight)) {
      best = index;
    }
  }
  if (best == kNoneFree) return kNoneFree;
  next_ = (best + 1) % count;
  ++endpoints_[best].in_flight;
  return best;
}

EndpointPool::Change EndpointPool::Release(int index,
                                           const HttpResponse& response,
                                           absl::Time now) {
  Endpoint& endpoint = endpoints_[index];
  --endpoint.in_flight;
  // A cancelled attempt says nothing about the server.
  if (response.transport.code() == absl::StatusCode::kCancelled) {
    return Change::kNone;
  }
  if (IsOverload(response)) {
    endpoint.limit.OnOverload(now);
  } else if (response.transport.ok() && response.http_code < 500) {
    endpoint.limit.OnSuccess(response.elapsed, now);
  }
  if (IsOutageSign(response)) {
    ++endpoint.consecutive_outage_signs;
  } else {
    endpoint.consecutive_outage_signs = 0;
  }
  Change change = Change::kNone;
  const bool failed = !response.transport.ok() || response.http_code >= 500;
  if (failed) {
    RecordFailure(endpoint, response, now, change);
  } else {
    endpoint.consecutive_failures = 0;
    if (endpoint.ejected) {
      endpoint.ejected = false;
      change = Change::kReturned;
    }
  }
  return change;
}

void EndpointPool::RecordFailure(Endpoint& endpoint,
                                 const HttpResponse& response, absl::Time now,
                                 Change& change) {
  endpoint.last_error = response.transport.ok()
                            ? absl::StrCat("HTTP ", response.http_code)
                            : std::string(response.transport.message());
  ++endpoint.consecutive_failures;
  const auto in_rotation =
      std::count_if(endpoints_.begin(), endpoints_.end(),
                    [](const Endpoint& e) { return !e.ejected; });
  // A failed trial request sends an ejected endpoint back for another
  // cool-down; otherwise the last endpoint in rotation stays.
  if (endpoint.ejected ||
      (endpoint.consecutive_failures >= options_.eject_after_failures &&
       in_rotation > 1)) {
    if (!endpoint.ejected) change = Change::kEjected;
    endpoint.ejected = true;
    endpoint.ejected_until = now + options_.eject_cooldown;
  }
}

void EndpointPool::SetFixedLimit(int limit) {
  for (Endpoint& endpoint : endpoints_) {
    endpoint.limit = ConcurrencyLimit::Fixed(limit);
  }
}

int EndpointPool::TotalLimit() const {
  int total = 0;
  for (const Endpoint& endpoint : endpoints_) total += endpoint.limit.limit();
  return total;
}

bool EndpointPool::EveryEndpointFailing() const {
  return endpoints_.size() > 1 &&
         std::all_of(endpoints_.begin(), endpoints_.end(),
                     [](const Endpoint& endpoint) {
                       return endpoint.consecutive_failures > 0;
                     });
}

bool EndpointPool::IsOutageSign(const HttpResponse& response) {
  if (!response.transport.ok()) {
    return response.transport.code() != absl::StatusCode::kCancelled;
  }
  return response.http_code == 502 || response.http_code == 503 ||
         response.http_code == 504;
}

bool EndpointPool::EveryEndpointDown(int failures) const {
  return std::all_of(endpoints_.begin(), endpoints_.end(),
                     [failures](const Endpoint& endpoint) {
                       return endpoint.consecutive_outage_signs >= failures;
                     });
}

std::string EndpointPool::FailureSummary() const {
  std::vector<std::string> parts;
  for (const Endpoint& endpoint : endpoints_) {
    parts.push_back(absl::StrCat(endpoint.display_url,
                                 endpoint.ejected ? " (ejected, " : " (",
                                 endpoint.last_error, ")"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace sdg
