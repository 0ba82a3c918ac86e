// A backend configured on the server (--backend NAME=URL[,URL...]): calls
// queue inside sdgd until an endpoint has room (EndpointPool), failed
// attempts are retried after a backoff timer on the event loop (RetryPolicy),
// and what the server can do is asked of it (ServerDetector), never guessed.
// Post and Cancel never block; a call completes through its callback.
// WaitForBatchingDecision is the one call that blocks, a worker, until the
// server's kind is known.
//
// Detection: until the server has said what it is, calls wait in the queue
// and nothing is sent, so a server that starts after sdgd (Kubernetes,
// compose) is never sent more than its slots. A detection that finds no
// server ready (no answer, or llama.cpp's 503 while it loads its model) is
// an outage, asked again after 0.25 s, doubling to 5 s. Detection runs again
// each time the backend comes back up, holding the calls posted meanwhile.
//
// Outages (their state is an OutageDetector): when every endpoint has
// failed `outage.failures` attempts in a row with a sign of a server that
// is not there (connection refused or reset, timeout, HTTP 502/503/504),
// the backend is down. Its calls then
// wait in the queue without spending attempts, and one call at a time
// probes it, with a backoff; the first answer from a live server brings it
// back up. Only after `outage.limit` do the waiting calls fail (UNAVAILABLE,
// naming the endpoints and their last errors).
//
// Rate limits (--backend_rate_limit, rate_budget.h): a hosted API's
// requests and tokens a minute. Every attempt, retries included, waits in
// the queue until the budget allows it as well as an endpoint's in-flight
// cap; the calls behind it wait in order, and a timer wakes the dispatch
// when the budget has refilled. Tokens are reserved from the request's body
// (EstimateRequestTokens) and settled with its reply's usage. Without a
// configured budget, a reply whose x-ratelimit-remaining-requests (or
// -tokens) is 0 holds the calls until its x-ratelimit-reset-* passes.
//
// Samples: a server that takes one choice per request (llama.cpp, or one
// that has answered "Only one completion choice is allowed") gets no call
// for more than one sample: such a call completes at once with
// `one_choice_per_request` set and its body returned, for the caller to
// send as one request per sample (sample_fanout.h).
#ifndef SDG_SERVER_BACKEND_BACKEND_H_
#define SDG_SERVER_BACKEND_BACKEND_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cancellation_token.h"
#include "server/backend/api_key.h"
#include "server/backend/concurrency_limit.h"
#include "server/backend/endpoint_pool.h"
#include "server/backend/outage_detector.h"
#include "server/backend/rate_budget.h"
#include "server/backend/retry_policy.h"
#include "server/backend/server_detector.h"
#include "server/backend/throughput_meter.h"
#include "server/http/http_transport.h"
#include "server/observability/metrics.h"

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
  RetryPolicy::Options retry;
  EndpointPool::Options pool;
  absl::Duration detect_timeout = absl::Seconds(10);
  ApiKey api_key;
  OutageDetector::Options outage;
  // None set: no budget.
  RateLimits rate_limits;
  // The clock of the rate limits (a test's may stand still or jump).
  std::function<absl::Time()> budget_clock = [] { return absl::Now(); };
};

struct BackendReply {
  // OK for a 2xx reply; otherwise why the last attempt failed.
  absl::Status status;
  std::string body;
  int attempts = 0;
  // The HTTP status of the last attempt's reply (0: no reply came).
  int http_status = 0;
  // The server takes one choice per request and the call asked for more:
  // nothing was generated, `status` says so and `body` is the request's
  // body, to be sent again as one request per sample.
  bool one_choice_per_request = false;
};

class Backend {
 public:
  using CallId = uint64_t;
  // Runs on the HTTP event loop thread: quick, never blocking.
  using Done = absl::AnyInvocable<void(BackendReply)>;

  // Starts detecting the server when batching or the in-flight limit is
  // kAuto; calls queue until the first detection ends.
  Backend(BackendOptions options, HttpTransport& http, Metrics& metrics);
  // Every call must have completed (jobs end before backends go).
  ~Backend();

  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& name() const { return options_.name; }

  // Whether to send a shard's prompts as one request. Blocks the calling
  // worker until the server's kind is known; the token's reason if it
  // fires first, UNAVAILABLE once the backend has not answered detection
  // for longer than outage.limit.
  absl::StatusOr<bool> WaitForBatchingDecision(CancellationToken& token);
  // What detection found, waited for as WaitForBatchingDecision waits. A
  // backend whose batching and in-flight limit are both set by flags is
  // never asked: its kind is kUnknown.
  struct Traits {
    ServerKind kind = ServerKind::kUnknown;
    bool batching = false;
    bool one_choice_per_request = false;
  };
  absl::StatusOr<Traits> WaitForTraits(CancellationToken& token);

  // POSTs `json_body` to an endpoint's base URL + `path`; retries what is
  // worth retrying. `samples` is the body's n (choices per prompt).
  CallId Post(absl::string_view path, std::string json_body, Done done,
              int samples = 1);
  // Whether its /v1/models listed `model` at the last detection.
  bool ServesModel(const std::string& model) const;
  // POSTs `json_body` to `path` at the server's root (the base URL without
  // /v1), where vLLM and llama.cpp serve /tokenize: within the in-flight
  // cap, retried as Post is, but outside the rate budget (it generates
  // nothing).
  CallId PostToServerRoot(absl::string_view path, std::string json_body,
                          Done done);
  // The call completes with CANCELLED unless it already completed.
  void Cancel(CallId id);

  // The pace of its last replies (throughput_meter.h).
  ThroughputMeter::Pace MeasuredPace() const;

  // Whether the backend is down (see above); for tests.
  bool down() const;
  // The models its /v1/models listed at the last detection (none before).
  std::vector<std::string> models() const;

 private:
  struct Call {
    std::string path;
    std::string body;
    Done done;
    int attempts = 0;
    HttpTransport::RequestId request = 0;    // the attempt in flight, if any
    TimerService::TimerId backoff = 0;       // the backoff timer, if waiting
    int endpoint = EndpointPool::kNoneFree;  // of the attempt in flight
    int last_failed_endpoint = EndpointPool::kNoneFree;
    int samples = 1;
    bool cancelled = false;
    // PostToServerRoot's: at the server's root, outside the rate budget.
    bool at_server_root = false;
    // With a token budget: what the body may cost, and what the attempt in
    // flight reserved.
    TokenCost cost;
    bool reserved = false;
  };
  // Callbacks collected under mu_ and run after it is released.
  using Completions = std::vector<std::pair<Done, BackendReply>>;

  // Batching or the in-flight limit is kAuto.
  bool NeedsDetection() const;
  // Asks the server what it is (nothing happens while a detection runs).
  void StartDetection() ABSL_LOCKS_EXCLUDED(mu_);
  ServerDetector::Done OnDetected();
  void ApplyTraits(const ServerTraits& traits)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No endpoint gave an answer: the backend is down until one does, and
  // detection is asked again after a backoff.
  void OnDetectionFailed(const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleDetection(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDetectionTimer();
  // Whether the calls waiting for detection have waited past outage.limit.
  bool UndetectedPastLimit(absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes a call for several samples at once when the server takes one
  // choice per request; true if it did.
  bool RefuseSamples(CallId id, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the call with its body, to be sent again one sample a request.
  void HandBackForOneChoice(CallId id, absl::Status why, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails queued calls, the newest first, until `keep` are left.
  void FailQueued(const absl::Status& error, size_t keep, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Sends queued calls while an endpoint has room (and the budget allows).
  void Dispatch(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a budget: whether the call may go now; if not, the dispatch waits
  // for the budget (a timer wakes it).
  bool BudgetAllows(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attempt going out spends the budget; the attempt that ended settles
  // what it reserved with what its reply says it used.
  void SpendBudget(Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `usage`: the reply's, read for a token budget.
  void SettleBudget(Call& call, bool succeeded,
                    const std::optional<TokenCost>& usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportBudget(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A timer that wakes the dispatch (the probe's, the budget's) fired:
  // clears it (its id, `timer`) and dispatches.
  void OnDispatchTimer(TimerService::TimerId Backend::*timer);
  // A reply's x-ratelimit-* headers saying a limit is used up hold every
  // call until its reset, with or without --backend_rate_limit.
  void FollowServerLimits(const HttpResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(CallId id, int endpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnResponse(CallId id, HttpResponse response);
  void OnEndpointChange(int endpoint, EndpointPool::Change change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a failed attempt: a backoff timer, or the end of the call.
  void RetryOrFinish(CallId id, const HttpResponse& response, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBackoffDone(CallId id);
  // An ejected endpoint's cool-down ended: it may take its trial request.
  void OnCooldownDone(uint64_t key);
  void Finish(CallId id, BackendReply reply, Completions& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportLimit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Outages. An attempt ended in a sign of a server that is not there:
  // true if the call now waits for the backend instead of spending the
  // attempt, or failed because the outage passed its limit.
  bool WaitOutOutage(CallId id, const HttpResponse& response, bool was_probe,
                     Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The backend answered: it is up. True if it was down.
  bool EndOutage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While down, in place of the usual dispatch: fails the queued calls
  // once the outage passed its limit, and sends one probe when it is due.
  void DispatchWhileDown(Completions& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleProbe(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutageError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunCompletions(Completions& completions);

  const BackendOptions options_;
  HttpTransport& http_;
  Metrics::BackendSeries metrics_;
  const RetryPolicy retry_policy_;
  // Sent with every request: the API key's Authorization header, if any.
  const std::vector<std::string> auth_headers_;

  mutable absl::Mutex mu_;
  EndpointPool pool_ ABSL_GUARDED_BY(mu_);
  // Queues `call` and dispatches; Post and PostToServerRoot.
  CallId Enqueue(Call call) ABSL_LOCKS_EXCLUDED(mu_);

  CallId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<CallId, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<CallId> queued_ ABSL_GUARDED_BY(mu_);
  absl::BitGen random_ ABSL_GUARDED_BY(mu_);
  // Cool-down timers by a key of ours, known before the timer exists.
  absl::flat_hash_map<uint64_t, TimerService::TimerId> cooldown_timers_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_cooldown_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls wait while this is false: detection has not answered yet, or is
  // asked again after an outage.
  bool traits_known_ ABSL_GUARDED_BY(mu_) = false;
  bool batching_ ABSL_GUARDED_BY(mu_) = false;
  bool one_choice_per_request_ ABSL_GUARDED_BY(mu_) = false;
  ServerKind server_kind_ ABSL_GUARDED_BY(mu_) = ServerKind::kUnknown;
  std::vector<std::string> models_ ABSL_GUARDED_BY(mu_);
  // Detection asked again: its timer, the last failure's text.
  TimerService::TimerId detect_timer_ ABSL_GUARDED_BY(mu_) = 0;
  std::string detect_error_ ABSL_GUARDED_BY(mu_);
  // Detection timers past clearing their id and still starting the
  // detector; the destructor waits for none, and once it has begun
  // (destroying_) no timer starts one.
  int detections_starting_ ABSL_GUARDED_BY(mu_) = 0;
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
  // Down or up, and when to probe or detect again.
  OutageDetector outage_ ABSL_GUARDED_BY(mu_);
  CallId probe_ ABSL_GUARDED_BY(mu_) = 0;  // the call probing, if any
  TimerService::TimerId probe_timer_ ABSL_GUARDED_BY(mu_) = 0;
  // --backend_rate_limit; null without one. While the dispatch waits for
  // it: since when, and the timer that wakes it.
  std::unique_ptr<RateBudget> budget_ ABSL_GUARDED_BY(mu_);
  // Until when the server's own x-ratelimit headers hold the calls.
  absl::Time server_hold_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time budget_wait_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  ThroughputMeter pace_ ABSL_GUARDED_BY(mu_);
  TimerService::TimerId budget_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Last: destroyed first, waiting for its callbacks, which use the above.
  ServerDetector detector_;
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_BACKEND_H_
