// A backend configured on the server (--backend NAME=URL[,URL...]): where its
// requests go, how many may be in flight at once, and how failures are
// retried. Calls never block: each completes through a callback.
#ifndef SDG_SERVER_BACKEND_H_
#define SDG_SERVER_BACKEND_H_

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http_client.h"
#include "server/metrics.h"

namespace sdg {

struct BackendOptions {
  std::string name;
  // OpenAI base URLs, each ending in /v1 (no trailing slash).
  std::vector<std::string> base_urls;
  int max_in_flight = 256;
  // One prompt list per /completions request (vLLM); otherwise one request
  // per row.
  bool batching = false;
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(8);
  absl::Duration max_retry_after = absl::Seconds(120);
  // Sent as "Authorization: Bearer ..."; never logged or reported.
  std::string api_key;
};

// Parses "NAME=URL[,URL...]". Names are [A-Za-z0-9_-]+; URLs are http(s) and
// lose a trailing slash.
absl::StatusOr<BackendOptions> ParseBackendFlag(absl::string_view flag);

struct BackendReply {
  // OK for a 2xx reply; otherwise why the last attempt failed.
  absl::Status status;
  std::string body;
  int attempts = 0;
};

class Backend {
 public:
  using CallId = uint64_t;
  // Runs on the HTTP event loop thread: quick, never blocking.
  using Done = absl::AnyInvocable<void(BackendReply)>;

  Backend(BackendOptions options, HttpClient& http, Metrics& metrics);
  ~Backend();

  const std::string& name() const { return options_.name; }
  bool batching() const { return options_.batching; }
  const BackendOptions& options() const { return options_; }

  // POSTs `json_body` to base URL + `path`; retries what is worth retrying.
  CallId Post(absl::string_view path, std::string json_body, Done done);
  // The call completes with CANCELLED unless it already completed.
  void Cancel(CallId id);

 private:
  struct Call {
    std::string path;
    std::string body;
    Done done;
    int attempts = 0;
    HttpClient::RequestId http_id = 0;  // 0 while not sent
    bool cancelled = false;
  };

  void StartAttempt(CallId id, absl::Duration delay);
  void OnResponse(CallId id, HttpResponse response);
  // Ends the call, frees its slot and starts the next waiting call.
  void FinishCall(CallId id, BackendReply reply);
  absl::Duration Backoff(int attempts, const HttpResponse& response);

  const BackendOptions options_;
  HttpClient& http_;
  Metrics& metrics_;

  absl::Mutex mu_;
  CallId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<CallId, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<CallId> waiting_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_endpoint_ ABSL_GUARDED_BY(mu_) = 0;
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_H_
