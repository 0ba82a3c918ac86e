// A backend configured on the server (--backend NAME=URL[,URL...]): which of
// its endpoints a request goes to, how many may be in flight at each, how
// failures are retried, and what the server can do (detected, not guessed).
// Calls never block: each completes through a callback.
#ifndef SDG_SERVER_BACKEND_H_
#define SDG_SERVER_BACKEND_H_

#include <cstdint>
#include <deque>
#include <optional>
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
#include "server/cancellation_token.h"
#include "server/concurrency_limit.h"
#include "server/http_client.h"
#include "server/metrics.h"

namespace sdg {

enum class BatchingMode { kAuto, kOn, kOff };
enum class InFlightMode {
  kAuto,      // llama.cpp's slot count when /props says, else max_in_flight
  kFixed,     // max_in_flight
  kAdaptive,  // an AIMD limit (concurrency_limit.h)
};

struct BackendOptions {
  std::string name;
  // OpenAI base URLs, each ending in /v1 (no trailing slash).
  std::vector<std::string> base_urls;
  // kOn: a shard's prompts go as one /completions request (vLLM).
  BatchingMode batching = BatchingMode::kAuto;
  // Requests in flight per endpoint.
  InFlightMode in_flight_mode = InFlightMode::kAuto;
  int max_in_flight = 256;
  ConcurrencyLimit::Adaptive adaptive;
  int max_attempts = 3;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(8);
  absl::Duration max_retry_after = absl::Seconds(120);
  // An endpoint failing this many times in a row (connection errors,
  // timeouts, 5xx) gets no requests for `eject_cooldown`; then one trial
  // request decides whether it is back. The last endpoint in rotation is
  // never ejected.
  int eject_after_failures = 5;
  absl::Duration eject_cooldown = absl::Seconds(10);
  absl::Duration detect_timeout = absl::Seconds(10);
  // Sent as "Authorization: Bearer ..."; never logged or reported.
  std::string api_key;
};

// Parses "NAME=URL[,URL...]". Names are [A-Za-z0-9_-]+; URLs are http(s) and
// lose a trailing slash.
absl::StatusOr<BackendOptions> ParseBackendFlag(absl::string_view flag);

// What a server says about itself, from GET /v1/models and GET /props (at
// the server's root, llama.cpp's), never from a trial batch.
struct ServerTraits {
  // "vllm", "llama.cpp", "openai-compatible", or "unknown" when the server
  // did not answer.
  std::string kind = "unknown";
  bool accepts_prompt_lists = false;  // vLLM
  std::optional<int> total_slots;     // llama.cpp
};
ServerTraits DetectServer(const HttpResponse& models,
                          const HttpResponse& props);

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

  // Starts detecting the server's traits when batching or the in-flight
  // limit is kAuto; calls wait for the first answer.
  Backend(BackendOptions options, HttpClient& http, Metrics& metrics);
  ~Backend();

  const std::string& name() const { return options_.name; }

  // Whether to send a shard's prompts as one request. Blocks until the first
  // detection ends; nullopt if `token` fires first.
  std::optional<bool> AwaitBatching(CancellationToken& token);

  // POSTs `json_body` to an endpoint's base URL + `path`; retries what is
  // worth retrying.
  CallId Post(absl::string_view path, std::string json_body, Done done);
  // The call completes with CANCELLED unless it already completed.
  void Cancel(CallId id);

 private:
  struct Endpoint {
    std::string base_url;
    ConcurrencyLimit limit;
    int in_flight = 0;
    int consecutive_failures = 0;
    bool ejected = false;
    absl::Time ejected_until = absl::InfinitePast();
    std::string last_error = {};
  };
  struct Call {
    std::string path;
    std::string body;
    Done done;
    int attempts = 0;
    // The HTTP request in flight or the backoff timer; 0 while queued.
    HttpClient::RequestId pending = 0;
    int endpoint = -1;  // of the attempt in flight
    int last_failed_endpoint = -1;
    bool cancelled = false;
  };
  using Completions = std::vector<std::pair<Done, BackendReply>>;

  static constexpr int kNoEndpointFree = -1;

  // Batching or the in-flight limit is kAuto.
  bool NeedsDetection() const;
  void StartDetection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDetectReply(int endpoint, bool is_models, HttpResponse response);
  void ApplyTraits(const ServerTraits& traits)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Sends queued calls while an endpoint has room.
  void Dispatch(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int PickEndpoint(int avoid, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(CallId id, int endpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResponse(CallId id, HttpResponse response);
  void RecordEndpointOutcome(Endpoint& endpoint, const HttpResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed attempt: a backoff timer, or the end of the call.
  void RetryOrFinish(CallId id, absl::Status status, bool retryable,
                     std::optional<absl::Duration> retry_after,
                     const std::string& reason, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBackoffDone(CallId id, HttpResponse timer);
  absl::Duration Backoff(int attempts,
                         std::optional<absl::Duration> retry_after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(CallId id, BackendReply reply, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pool whose every endpoint failed its last request.
  bool EveryEndpointFailing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string EveryEndpointFailingMessage() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportLimit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The API key never leaves sdgd, even when a backend echoes it.
  absl::Status Redact(const absl::Status& status) const;
  static void RunCompletions(Completions& completions);

  const BackendOptions options_;
  HttpClient& http_;
  Metrics::BackendSeries metrics_;
  // "Authorization: Bearer ..." when there is a key; sent with every request.
  const std::vector<std::string> auth_headers_;

  mutable absl::Mutex mu_;
  std::vector<Endpoint> endpoints_ ABSL_GUARDED_BY(mu_);
  size_t next_endpoint_ ABSL_GUARDED_BY(mu_) = 0;  // breaks ties in turn
  CallId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<CallId, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<CallId> queued_ ABSL_GUARDED_BY(mu_);
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);

  // Detection: calls wait until `traits_known_`.
  bool traits_known_ ABSL_GUARDED_BY(mu_) = false;
  bool batching_ ABSL_GUARDED_BY(mu_) = false;
  ServerTraits traits_ ABSL_GUARDED_BY(mu_);
  int detect_endpoint_ ABSL_GUARDED_BY(mu_) = 0;
  // Of the current detection, to cancel them on destruction.
  std::vector<HttpClient::RequestId> detect_requests_ ABSL_GUARDED_BY(mu_);
  int detect_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<HttpResponse> detect_models_ ABSL_GUARDED_BY(mu_);
  std::optional<HttpResponse> detect_props_ ABSL_GUARDED_BY(mu_);
  absl::Time last_detect_failure_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_H_
