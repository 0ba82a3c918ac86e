#include "server/observability/metrics.h"

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace sdg {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// 5 ms .. 600 s: from a cached reply on loopback to the longest request
// timeout.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
          2.5,   5,    10,    30,   60,  120,  300, 600};
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      jobs_active_(BuildGauge()
                       .Name("sdg_jobs_active")
                       .Help("Jobs running now.")
                       .Register(*registry_)
                       .Add({})),
      jobs_queued_(BuildGauge()
                       .Name("sdg_jobs_queued")
                       .Help("Jobs admitted and waiting for a run slot.")
                       .Register(*registry_)
                       .Add({})),
      jobs_total_(BuildCounter()
                      .Name("sdg_jobs_total")
                      .Help("Jobs that ended, by final state (and tenant, "
                            "when --auth_tokens_file is set).")
                      .Register(*registry_)),
      shards_total_(BuildCounter()
                        .Name("sdg_shards_total")
                        .Help("Shards that ended, by outcome.")
                        .Register(*registry_)),
      rows_total_(BuildCounter()
                      .Name("sdg_rows_total")
                      .Help("Input rows that ended, by outcome.")
                      .Register(*registry_)),
      shards_queued_(BuildGauge()
                         .Name("sdg_shards_queued")
                         .Help("Shards of running jobs not yet started.")
                         .Register(*registry_)
                         .Add({})),
      workers_busy_(BuildGauge()
                        .Name("sdg_workers_busy")
                        .Help("Shards in progress now, at most --max_workers "
                              "(a block's shard holds no thread while its "
                              "requests are in flight).")
                        .Register(*registry_)
                        .Add({})),
      workers_(BuildGauge()
                   .Name("sdg_workers")
                   .Help("Workers in the pool (--max_workers).")
                   .Register(*registry_)
                   .Add({})),
      jobs_resumed_total_(
          BuildCounter()
              .Name("sdg_jobs_resumed_total")
              .Help("Jobs resumed from the job store when sdgd started.")
              .Register(*registry_)
              .Add({})),
      batches_total_(BuildCounter()
                         .Name("sdg_batches_total")
                         .Help("OpenAI batches (the Batch API's jobs, also "
                               "in sdg_jobs_total) that ended, by the "
                               "batch's final state.")
                         .Register(*registry_)),
      shard_duration_seconds_(BuildHistogram()
                                  .Name("sdg_shard_duration_seconds")
                                  .Help("Time from a shard's start to its end.")
                                  .Register(*registry_)
                                  .Add({}, LatencyBuckets())),
      backend_requests_total_(
          BuildCounter()
              .Name("sdg_backend_requests_total")
              .Help("HTTP requests to backends that ended, by HTTP status or "
                    "transport error.")
              .Register(*registry_)),
      backend_request_duration_seconds_(
          BuildHistogram()
              .Name("sdg_backend_request_duration_seconds")
              .Help("Time from sending a backend request to its reply.")
              .Register(*registry_)),
      backend_in_flight_(BuildGauge()
                             .Name("sdg_backend_in_flight")
                             .Help("Backend HTTP requests in flight now.")
                             .Register(*registry_)),
      backend_concurrency_limit_(
          BuildGauge()
              .Name("sdg_backend_concurrency_limit")
              .Help("Most backend HTTP requests allowed in flight at once.")
              .Register(*registry_)),
      backend_endpoints_(BuildGauge()
                             .Name("sdg_backend_endpoints")
                             .Help("Endpoints (URLs) configured per backend.")
                             .Register(*registry_)),
      backend_endpoints_ejected_(
          BuildGauge()
              .Name("sdg_backend_endpoints_ejected")
              .Help("Endpoints taken out of rotation after repeated "
                    "failures, cooling down.")
              .Register(*registry_)),
      backend_up_(BuildGauge()
                      .Name("sdg_backend_up")
                      .Help("1 while the backend answers; 0 while every "
                            "endpoint is failing and its calls wait "
                            "(--backend_outage_limit).")
                      .Register(*registry_)),
      backend_rate_limited_(
          BuildGauge()
              .Name("sdg_backend_rate_limited")
              .Help("1 while the backend's calls wait for its "
                    "--backend_rate_limit budget (rate-limited, not slow).")
              .Register(*registry_)),
      backend_rate_limit_wait_seconds_total_(
          BuildCounter()
              .Name("sdg_backend_rate_limit_wait_seconds_total")
              .Help("Time the backend's calls waited for its "
                    "--backend_rate_limit budget.")
              .Register(*registry_)),
      backend_budget_available_(
          BuildGauge()
              .Name("sdg_backend_budget_available")
              .Help("What is left of each --backend_rate_limit budget "
                    "(requests, tokens, input_tokens, output_tokens); "
                    "negative after a request larger than a second's worth.")
              .Register(*registry_)),
      backend_retries_total_(BuildCounter()
                                 .Name("sdg_backend_retries_total")
                                 .Help("Backend requests retried, by reason.")
                                 .Register(*registry_)),
      prompt_tokens_total_(BuildCounter()
                               .Name("sdg_prompt_tokens_total")
                               .Help("Prompt tokens the backends reported.")
                               .Register(*registry_)),
      generation_tokens_total_(
          BuildCounter()
              .Name("sdg_generation_tokens_total")
              .Help("Generated tokens the backends reported.")
              .Register(*registry_)),
      step_rows_total_(
          BuildCounter()
              .Name("sdg_step_rows_total")
              .Help("Rows into, out of and failed at pipeline steps, by the "
                    "step's position in its pipeline (0 is the first).")
              .Register(*registry_)),
      tenant_enqueued_tokens_(
          BuildGauge()
              .Name("sdg_tenant_enqueued_tokens")
              .Help("Prompt tokens a tenant's queued and running jobs hold, "
                    "with --tenant_max_enqueued_tokens.")
              .Register(*registry_)),
      store_up_(BuildGauge()
                    .Name("sdg_store_up")
                    .Help("1 while the job store commits events; 0 while "
                          "its commits fail and are retried, jobs paused "
                          "(--store_outage_limit).")
                    .Register(*registry_)
                    .Add({})),
      replica_active_(
          BuildGauge()
              .Name("sdg_replica_active")
              .Help("1 while this sdgd runs jobs; 0 while it starts, and "
                    "while it waits as a standby for the replica lease of "
                    "a PostgreSQL store another replica holds.")
              .Register(*registry_)
              .Add({})),
      replicas_live_(
          BuildGauge()
              .Name("sdg_replicas_live")
              .Help("Replicas sharing this sdgd's PostgreSQL store that its "
                    "heartbeat table shows alive, this one included, by "
                    "role (active, standby), as this replica last counted "
                    "them (every third of --replica_lease).")
              .Register(*registry_)),
      replicas_live_active_(replicas_live_.Add({{"role", "active"}})),
      replicas_live_standby_(replicas_live_.Add({{"role", "standby"}})),
      auth_failures_total_(
          BuildCounter()
              .Name("sdg_auth_failures_total")
              .Help("Calls refused UNAUTHENTICATED, by reason: missing, "
                    "malformed, unknown_token.")
              .Register(*registry_)),
      tokens_file_reloads_total_(
          BuildCounter()
              .Name("sdg_auth_tokens_file_reloads_total")
              .Help("Re-reads of --auth_tokens_file after it changed, by "
                    "outcome (ok; error: the tokens read before stay).")
              .Register(*registry_)) {
  // Present from the first scrape, so rate() and alerts see zeros, not gaps.
  for (const char* state : {"succeeded", "failed", "cancelled", "suspended"}) {
    jobs_total_.Add({{"state", state}});
  }
  for (const char* state : {"completed", "failed", "expired", "cancelled"}) {
    batches_total_.Add({{"state", state}});
  }
  for (const char* outcome : {"succeeded", "failed"}) {
    shards_total_.Add({{"outcome", outcome}});
    rows_total_.Add({{"outcome", outcome}});
  }
  for (const char* direction : {"in", "out", "failed"}) {
    step_rows_total_.Add({{"step", "0"}, {"direction", direction}});
  }
  for (const char* reason : {"missing", "malformed", "unknown_token"}) {
    auth_failures_total_.Add({{"reason", reason}});
  }
  for (const char* outcome : {"ok", "error"}) {
    tokens_file_reloads_total_.Add({{"outcome", outcome}});
  }
  store_up_.Set(1);
}

std::string Metrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void Metrics::JobStarted() { jobs_active_.Increment(); }

void Metrics::JobFinished(const std::string& tenant, absl::string_view state,
                          bool ran) {
  if (ran) jobs_active_.Decrement();
  // Tenants are the tokens file's: their number is the operator's.
  if (tenant.empty()) {
    jobs_total_.Add({{"state", std::string(state)}}).Increment();
  } else {
    jobs_total_.Add({{"tenant", tenant}, {"state", std::string(state)}})
        .Increment();
  }
}

void Metrics::BatchFinished(absl::string_view state) {
  batches_total_.Add({{"state", std::string(state)}}).Increment();
}

void Metrics::StoreUp(bool up) { store_up_.Set(up ? 1 : 0); }

void Metrics::ReplicaActive(bool active) {
  replica_active_.Set(active ? 1 : 0);
}

void Metrics::ReplicasLive(int active, int standby) {
  replicas_live_active_.Set(active);
  replicas_live_standby_.Set(standby);
}

void Metrics::AuthFailed(absl::string_view reason) {
  auth_failures_total_.Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::TokensFileReloaded(bool ok) {
  tokens_file_reloads_total_.Add({{"outcome", ok ? "ok" : "error"}})
      .Increment();
}

void Metrics::JobsQueued(double count) { jobs_queued_.Set(count); }

void Metrics::ShardsQueued(double delta) { shards_queued_.Increment(delta); }

void Metrics::WorkerBusy(double delta) { workers_busy_.Increment(delta); }

void Metrics::Workers(double count) { workers_.Set(count); }

void Metrics::JobResumed() { jobs_resumed_total_.Increment(); }

void Metrics::ShardFinished(absl::string_view outcome, absl::Duration elapsed) {
  shards_total_.Add({{"outcome", std::string(outcome)}}).Increment();
  shard_duration_seconds_.Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::RowsFinished(absl::string_view outcome, int64_t count) {
  rows_total_.Add({{"outcome", std::string(outcome)}})
      .Increment(static_cast<double>(count));
}

void Metrics::StepRows(int step, int64_t in, int64_t out, int64_t failed) {
  const std::string index = std::to_string(step);
  for (const auto& [direction, count] :
       {std::pair{"in", in}, std::pair{"out", out},
        std::pair{"failed", failed}}) {
    step_rows_total_.Add({{"step", index}, {"direction", direction}})
        .Increment(static_cast<double>(count));
  }
}

Metrics::BackendSeries Metrics::ForBackend(const std::string& backend,
                                           int endpoints) {
  backend_endpoints_.Add({{"backend", backend}}).Set(endpoints);
  // The labels panels and alerts query, at zero until their first event.
  backend_requests_total_.Add({{"backend", backend}, {"code", "200"}});
  for (const char* reason :
       {"connect_error", "timeout", "429", "500", "502", "503", "504"}) {
    backend_retries_total_.Add({{"backend", backend}, {"reason", reason}});
  }
  prompt_tokens_total_.Add({{"backend", backend}});
  generation_tokens_total_.Add({{"backend", backend}});
  return BackendSeries(*this, backend);
}

Metrics::BackendSeries::BackendSeries(Metrics& metrics,
                                      const std::string& backend)
    : backend_(backend),
      requests_total_(metrics.backend_requests_total_),
      retries_total_(metrics.backend_retries_total_),
      request_duration_seconds_(metrics.backend_request_duration_seconds_.Add(
          {{"backend", backend}}, LatencyBuckets())),
      in_flight_(metrics.backend_in_flight_.Add({{"backend", backend}})),
      concurrency_limit_(
          metrics.backend_concurrency_limit_.Add({{"backend", backend}})),
      endpoints_ejected_(
          metrics.backend_endpoints_ejected_.Add({{"backend", backend}})),
      up_(metrics.backend_up_.Add({{"backend", backend}})),
      rate_limited_(metrics.backend_rate_limited_.Add({{"backend", backend}})),
      rate_limit_wait_seconds_(
          metrics.backend_rate_limit_wait_seconds_total_.Add(
              {{"backend", backend}})),
      budget_available_(metrics.backend_budget_available_) {
  up_.Set(1);
}

void Metrics::BackendSeries::RateLimitWaitEnded(absl::Duration waited) {
  rate_limit_wait_seconds_.Increment(absl::ToDoubleSeconds(waited));
}

void Metrics::BackendSeries::BudgetAvailable(const std::string& budget,
                                             double available) {
  budget_available_.Add({{"backend", backend_}, {"budget", budget}})
      .Set(available);
}

void Metrics::BackendSeries::Request(const std::string& code,
                                     absl::Duration elapsed) {
  requests_total_.Add({{"backend", backend_}, {"code", code}}).Increment();
  request_duration_seconds_.Observe(absl::ToDoubleSeconds(elapsed));
}

void Metrics::BackendSeries::Retry(const std::string& reason) {
  retries_total_.Add({{"backend", backend_}, {"reason", reason}}).Increment();
}

void Metrics::BackendTokens(const std::string& backend,
                            const std::string& tenant, int64_t prompt_tokens,
                            int64_t generation_tokens) {
  // Tenants are the tokens file's, as for sdg_jobs_total.
  const prometheus::Labels labels =
      tenant.empty()
          ? prometheus::Labels{{"backend", backend}}
          : prometheus::Labels{{"backend", backend}, {"tenant", tenant}};
  prompt_tokens_total_.Add(labels).Increment(
      static_cast<double>(prompt_tokens));
  generation_tokens_total_.Add(labels).Increment(
      static_cast<double>(generation_tokens));
}

void Metrics::TenantEnqueuedTokens(const std::string& tenant, int64_t tokens) {
  // Tenants are the tokens file's, as for sdg_jobs_total.
  tenant_enqueued_tokens_
      .Add(tenant.empty() ? prometheus::Labels{}
                          : prometheus::Labels{{"tenant", tenant}})
      .Set(static_cast<double>(tokens));
}

}  // namespace sdg
