// Every Prometheus metric sdgd exports, built once and passed by reference.
// Names follow DESIGN.md: prefix sdg_, base units, counters end in _total,
// no job-id labels.
#ifndef SDG_SERVER_OBSERVABILITY_METRICS_H_
#define SDG_SERVER_OBSERVABILITY_METRICS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace sdg {

class Metrics {
 public:
  Metrics();

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The registry to expose (or to serialize in tests).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The current scrape in Prometheus' text format.
  std::string Serialize() const;

  // Jobs. `state` is the lower-case final state: succeeded, failed, cancelled.
  void JobStarted();
  // `ran` is false for a job cancelled while queued. `tenant` is "" when
  // authentication is off (then the series has no tenant label).
  void JobFinished(const std::string& tenant, absl::string_view state,
                   bool ran);
  // An OpenAI batch (a job of the Batch API) ended: `state` is the
  // batch's, completed, failed, expired or cancelled.
  void BatchFinished(absl::string_view state);
  void JobsQueued(double count);
  void ShardsQueued(double delta);
  void WorkerBusy(double delta);
  // The worker pool's size (--max_workers).
  void Workers(double count);
  // A job's dispatch paused because its caller reads events too slowly.
  void JobResumed();
  // `outcome` is succeeded or failed.
  void ShardFinished(absl::string_view outcome, absl::Duration elapsed);
  void RowsFinished(absl::string_view outcome, int64_t count);
  // A pipeline step's rows in one shard. `step` is its index in the
  // pipeline (at most 64 steps), not its name, which callers choose: the
  // label's values stay few.
  void StepRows(int step, int64_t in, int64_t out, int64_t failed);

  // 0 while the job store cannot commit events (jobs paused, commits
  // retried), else 1.
  void StoreUp(bool up);
  // 1 once this sdgd runs jobs; 0 before, and while it waits as a standby
  // for another replica's lease (PostgreSQL store).
  void ReplicaActive(bool active);
  // The replicas sharing the PostgreSQL store that its heartbeat table
  // shows alive (this one included), as this replica last counted them.
  void ReplicasLive(int active, int standby);

  // Authentication: a call refused (missing, malformed, unknown_token), and
  // the tokens file re-read after a change.
  void AuthFailed(absl::string_view reason);
  void TokensFileReloaded(bool ok);

  // Backends: the series of one backend, created (at zero) and looked up
  // once, so that a request touches no label maps but for its status code.
  class BackendSeries {
   public:
    // `code` is the HTTP status, or a transport error name (connect_error,
    // timeout, cancelled).
    void Request(const std::string& code, absl::Duration elapsed);
    void InFlight(double delta) { in_flight_.Increment(delta); }
    // Summed over the backend's endpoints.
    void ConcurrencyLimit(double limit) { concurrency_limit_.Set(limit); }
    void EndpointsEjected(double delta) { endpoints_ejected_.Increment(delta); }
    // 0 while the backend is down (every endpoint failing), else 1.
    void Up(bool up) { up_.Set(up ? 1 : 0); }
    void Retry(const std::string& reason);
    // --backend_rate_limit: calls wait for the budget (1) or not (0); a
    // wait that ended; what is left of `budget` (requests, tokens, ...).
    void RateLimited(bool waiting) { rate_limited_.Set(waiting ? 1 : 0); }
    void RateLimitWaitEnded(absl::Duration waited);
    void BudgetAvailable(const std::string& budget, double available);

   private:
    friend class Metrics;
    BackendSeries(Metrics& metrics, const std::string& backend);

    const std::string backend_;
    prometheus::Family<prometheus::Counter>& requests_total_;
    prometheus::Family<prometheus::Counter>& retries_total_;
    prometheus::Histogram& request_duration_seconds_;
    prometheus::Gauge& in_flight_;
    prometheus::Gauge& concurrency_limit_;
    prometheus::Gauge& endpoints_ejected_;
    prometheus::Gauge& up_;
    prometheus::Gauge& rate_limited_;
    prometheus::Counter& rate_limit_wait_seconds_;
    prometheus::Family<prometheus::Gauge>& budget_available_;
  };
  BackendSeries ForBackend(const std::string& backend, int endpoints);
  // The tokens a backend's replies reported for a job of `tenant` ("" when
  // authentication is off: then the series has no tenant label).
  void BackendTokens(const std::string& backend, const std::string& tenant,
                     int64_t prompt_tokens, int64_t generation_tokens);
  // The prompt tokens `tenant`'s queued and running jobs hold
  // (--tenant_max_enqueued_tokens); no tenant label when it is "".
  void TenantEnqueuedTokens(const std::string& tenant, int64_t tokens);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge& jobs_active_;
  prometheus::Gauge& jobs_queued_;
  prometheus::Family<prometheus::Counter>& jobs_total_;
  prometheus::Family<prometheus::Counter>& shards_total_;
  prometheus::Family<prometheus::Counter>& rows_total_;
  prometheus::Gauge& shards_queued_;
  prometheus::Gauge& workers_busy_;
  prometheus::Gauge& workers_;
  prometheus::Counter& jobs_resumed_total_;
  prometheus::Family<prometheus::Counter>& batches_total_;
  prometheus::Histogram& shard_duration_seconds_;
  prometheus::Family<prometheus::Counter>& backend_requests_total_;
  prometheus::Family<prometheus::Histogram>& backend_request_duration_seconds_;
  prometheus::Family<prometheus::Gauge>& backend_in_flight_;
  prometheus::Family<prometheus::Gauge>& backend_concurrency_limit_;
  prometheus::Family<prometheus::Gauge>& backend_endpoints_;
  prometheus::Family<prometheus::Gauge>& backend_endpoints_ejected_;
  prometheus::Family<prometheus::Gauge>& backend_up_;
  prometheus::Family<prometheus::Gauge>& backend_rate_limited_;
  prometheus::Family<prometheus::Counter>&
      backend_rate_limit_wait_seconds_total_;
  prometheus::Family<prometheus::Gauge>& backend_budget_available_;
  prometheus::Family<prometheus::Counter>& backend_retries_total_;
  prometheus::Family<prometheus::Counter>& prompt_tokens_total_;
  prometheus::Family<prometheus::Counter>& generation_tokens_total_;
  prometheus::Family<prometheus::Counter>& step_rows_total_;
  prometheus::Family<prometheus::Gauge>& tenant_enqueued_tokens_;
  prometheus::Gauge& store_up_;
  prometheus::Gauge& replica_active_;
  prometheus::Family<prometheus::Gauge>& replicas_live_;
  prometheus::Gauge& replicas_live_active_;
  prometheus::Gauge& replicas_live_standby_;
  prometheus::Family<prometheus::Counter>& auth_failures_total_;
  prometheus::Family<prometheus::Counter>& tokens_file_reloads_total_;
};

}  // namespace sdg

#endif  // SDG_SERVER_OBSERVABILITY_METRICS_H_
