// What a caller of HTTP needs (Backend): start a request, cancel it, and
// timers that run on the same thread as the requests' callbacks. In sdgd
// it is an HttpClient on its EventLoop; a unit test puts a fake in its
// place and answers requests and fires timers itself.
#ifndef SDG_SERVER_HTTP_HTTP_TRANSPORT_H_
#define SDG_SERVER_HTTP_HTTP_TRANSPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/timer_service.h"

namespace sdg {

struct HttpRequest {
  std::string url;
  // Sent as a POST with Content-Type: application/json when set; a GET
  // otherwise.
  std::optional<std::string> json_body;
  // Extra "Name: value" header lines.
  std::vector<std::string> headers;
  // Replaces Options::request_timeout for this request when set.
  std::optional<absl::Duration> timeout;
  // At most this many connections kept open to the URL's scheme, host and
  // port: while more are open (a cap that was lowered), this request's
  // connection is closed after it instead of going back to the pool. New
  // connections are opened only when every open one is busy, so a caller
  // that keeps at most N requests in flight opens at most N.
  std::optional<int> max_connections;
};

struct HttpResponse {
  // OK when an HTTP reply arrived, whatever its status code. Otherwise
  // UNAVAILABLE (connection failed or reset), DEADLINE_EXCEEDED (timeout) or
  // CANCELLED.
  absl::Status transport;
  long http_code = 0;
  std::string body;
  // From Retry-After (seconds) or retry-after-ms, when the reply had one.
  std::optional<absl::Duration> retry_after;
  // A hosted API's x-ratelimit-remaining-{requests,tokens} and
  // x-ratelimit-reset-{requests,tokens} (OpenAI's: "1s", "6m0s", "20ms"),
  // when the reply had them.
  struct RateLimitHeaders {
    std::optional<int64_t> remaining_requests;
    std::optional<int64_t> remaining_tokens;
    std::optional<absl::Duration> reset_requests;
    std::optional<absl::Duration> reset_tokens;
  };
  RateLimitHeaders rate_limit;
  // From the start of the transfer to its end.
  absl::Duration elapsed;
};

class HttpTransport {
 public:
  using RequestId = uint64_t;
  // Runs on the transport's thread: it must be quick and must not block.
  using DoneCallback = absl::AnyInvocable<void(HttpResponse)>;

  virtual ~HttpTransport() = default;

  // Never blocks on the network; `done` runs once, with the reply or why
  // there is none.
  virtual RequestId Start(HttpRequest request, DoneCallback done) = 0;
  // Aborts the request: its callback runs with CANCELLED unless it already
  // completed. Unknown or finished ids are ignored.
  virtual void Cancel(RequestId id) = 0;
  // Timers whose callbacks run on the same thread as the requests' (retry
  // backoff, an endpoint's return).
  virtual TimerService& timers() = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_HTTP_HTTP_TRANSPORT_H_
