// The endpoints (base URLs) of one backend: which one the next attempt goes
// to, how many attempts each may have in flight, and which are out of
// rotation. The least loaded endpoint with room wins, ties in turn; an
// endpoint failing `eject_after_failures` times in a row (transport errors,
// 5xx) is ejected for `eject_cooldown`, after which one trial request decides
// whether it is back. As in Envoy's outlier detection, the last endpoint in
// rotation is never ejected, so one flaky server is retried, not shut off.
//
// Not thread-safe: its owner (a Backend) holds its lock around every call.
#ifndef SDG_SERVER_BACKEND_ENDPOINT_POOL_H_
#define SDG_SERVER_BACKEND_ENDPOINT_POOL_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/backend/concurrency_limit.h"
#include "server/http/http_transport.h"

namespace sdg {

class EndpointPool {
 public:
  struct Options {
    int eject_after_failures = 5;
    absl::Duration eject_cooldown = absl::Seconds(10);
  };
  // What an attempt's end changed about its endpoint.
  enum class Change { kNone, kEjected, kReturned };
  static constexpr int kNoneFree = -1;

  // Every endpoint starts with its own copy of `limit`.
  EndpointPool(const std::vector<std::string>& base_urls,
               const ConcurrencyLimit& limit, const Options& options);

  int size() const { return static_cast<int>(endpoints_.size()); }
  const std::string& base_url(int endpoint) const {
    return endpoints_[endpoint].base_url;
  }
  // The base URL without its password, if it has one: for logs and errors.
  const std::string& display_url(int endpoint) const {
    return endpoints_[endpoint].display_url;
  }
  const std::string& last_error(int endpoint) const {
    return endpoints_[endpoint].last_error;
  }
  int consecutive_failures(int endpoint) const {
    return endpoints_[endpoint].consecutive_failures;
  }
  const Options& options() const { return options_; }

  // Takes a slot for the next attempt: the endpoint with the fewest in
  // flight among those with room, any other before `avoid` (where the last
  // attempt failed). kNoneFree when every endpoint is full or ejected.
  int Acquire(int avoid, absl::Time now);
  // The attempt on `endpoint` ended with `response` (whose error text is
  // already redacted): frees its slot, feeds its limit, and counts it toward
  // ejection or return.
  Change Release(int endpoint, const HttpResponse& response, absl::Time now);

  // Replaces every endpoint's limit with a fixed one (llama.cpp's slots).
  void SetFixedLimit(int limit);
  // The limits summed over the endpoints (the metric), and the first one's.
  int TotalLimit() const;
  const ConcurrencyLimit& first_limit() const {
    return endpoints_.front().limit;
  }
  // The attempts `endpoint` may have in flight now.
  int limit(int endpoint) const { return endpoints_[endpoint].limit.limit(); }

  // More than one endpoint, each of which failed its last attempt.
  bool EveryEndpointFailing() const;
  // A sign that no server is there: connection refused or reset, a timeout,
  // HTTP 502, 503 or 504 (what a proxy says with nothing behind it).
  static bool IsOutageSign(const HttpResponse& response);
  // Every endpoint's last `failures` attempts (at least) were outage signs.
  bool EveryEndpointDown(int failures) const;
  // "URL (error), URL (ejected, error)": for the error a shard reports.
  std::string FailureSummary() const;

 private:
  struct Endpoint {
    std::string base_url;
    std::string display_url;
    ConcurrencyLimit limit;
    int in_flight = 0;
    int consecutive_failures = 0;
    int consecutive_outage_signs = 0;
    bool ejected = false;
    absl::Time ejected_until = absl::InfinitePast();
    std::string last_error = {};
  };
  void RecordFailure(Endpoint& endpoint, const HttpResponse& response,
                     absl::Time now, Change& change);

  const Options options_;
  std::vector<Endpoint> endpoints_;
  size_t next_ = 0;  // breaks ties in turn
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_ENDPOINT_POOL_H_
