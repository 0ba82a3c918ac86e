#include "server/backend/backend.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "server/backend/openai_protocol.h"

namespace sdg {
namespace {

const char* BatchingName(bool batching) { return batching ? "on" : "off"; }

ConcurrencyLimit InitialLimit(const BackendOptions& options) {
  return options.in_flight_mode == InFlightMode::kAdaptive
             ? ConcurrencyLimit::MakeAdaptive(options.adaptive)
             : ConcurrencyLimit::Fixed(options.max_in_flight);
}

ServerDetector::Options DetectorOptions(const BackendOptions& options,
                                        const EndpointPool& pool) {
  ServerDetector::Options detector;
  detector.base_urls = options.base_urls;
  for (int i = 0; i < pool.size(); ++i) {
    detector.display_urls.push_back(pool.display_url(i));
  }
  detector.headers = options.api_key.AuthorizationHeaders();
  detector.timeout = options.detect_timeout;
  return detector;
}

}  // namespace

Backend::Backend(BackendOptions options, HttpTransport& http, Metrics& metrics)
    : options_(std::move(options)),
      http_(http),
      metrics_(metrics.ForBackend(options_.name,
                                  static_cast<int>(options_.base_urls.size()))),
      retry_policy_(options_.retry),
      auth_headers_(options_.api_key.AuthorizationHeaders()),
      pool_(options_.base_urls, InitialLimit(options_), options_.pool),
      outage_(options_.outage),
      detector_(DetectorOptions(options_, pool_), http) {
  {
    absl::MutexLock lock(&mu_);
    ReportLimit();
    if (options_.rate_limits.any()) {
      const absl::Time now = options_.budget_clock();
      budget_ = std::make_unique<RateBudget>(options_.rate_limits, now);
      ReportBudget(now);
    }
    if (!NeedsDetection()) {
      traits_known_ = true;
      batching_ = options_.batching == BatchingMode::kOn;
      return;
    }
  }
  StartDetection();
}

Backend::~Backend() {
  absl::flat_hash_map<uint64_t, TimerService::TimerId> timers;
  TimerService::TimerId probe_timer;
  TimerService::TimerId detect_timer;
  TimerService::TimerId budget_timer;
  {
    absl::MutexLock lock(&mu_);
    // A call left here would never complete: fail loudly in debug builds.
    assert(calls_.empty());
    // From here no timer is armed (a detection reply may still come until
    // detector_ goes), so the ids taken below are all there will be.
    destroying_ = true;
    timers.swap(cooldown_timers_);
    probe_timer = std::exchange(probe_timer_, 0);
    detect_timer = std::exchange(detect_timer_, 0);
    budget_timer = std::exchange(budget_timer_, 0);
  }
  // Outside mu_: CancelTimer waits for a running callback, which takes it.
  for (const auto& [key, timer] : timers) http_.timers().CancelTimer(timer);
  if (probe_timer != 0) http_.timers().CancelTimer(probe_timer);
  if (detect_timer != 0) http_.timers().CancelTimer(detect_timer);
  if (budget_timer != 0) http_.timers().CancelTimer(budget_timer);
  // A detection timer that had already cleared its id (so CancelTimer
  // did not wait for it) may still be starting the detector, a member
  // about to be destroyed.
  absl::MutexLock lock(&mu_);
  auto started = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return detections_starting_ == 0;
  };
  mu_.Await(absl::Condition(&started));
}

std::vector<std::string> Backend::models() const {
  absl::MutexLock lock(&mu_);
  return models_;
}

bool Backend::ServesModel(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  return std::find(models_.begin(), models_.end(), model) != models_.end();
}

bool Backend::down() const {
  absl::MutexLock lock(&mu_);
  return outage_.down();
}

bool Backend::NeedsDetection() const {
  return options_.batching == BatchingMode::kAuto ||
         options_.in_flight_mode == InFlightMode::kAuto;
}

void Backend::StartDetection() { detector_.Start(OnDetected()); }

ServerDetector::Done Backend::OnDetected() {
  return [this](const ServerTraits& traits) {
    Completions completions;
    {
      absl::MutexLock lock(&mu_);
      if (traits.kind == ServerKind::kUnknown) {
        OnDetectionFailed(traits.error);
      } else {
        ApplyTraits(traits);
        EndOutage();
        outage_.DetectionAnswered();
      }
      Dispatch(completions);
    }
    RunCompletions(completions);
  };
}

void Backend::ApplyTraits(const ServerTraits& traits) {
  traits_known_ = true;
  server_kind_ = traits.kind;
  models_ = traits.models;
  one_choice_per_request_ = traits.one_choice_per_request;
  if (!traits.error.empty()) {
    Log(LogLevel::kWarning, "backend detection incomplete",
        {{"backend", options_.name},
         {"error", options_.api_key.Redact(traits.error)}});
  }
  batching_ =
      options_.batching == BatchingMode::kOn ||
      (options_.batching == BatchingMode::kAuto && traits.accepts_prompt_lists);
  if (options_.in_flight_mode == InFlightMode::kAuto) {
    pool_.SetFixedLimit(traits.total_slots.value_or(options_.max_in_flight));
    ReportLimit();
  }
  Log(LogLevel::kInfo, "backend detected",
      {{"backend", options_.name},
       {"server", std::string(ServerKindName(traits.kind))},
       {"batching", BatchingName(batching_)},
       {"one_choice_per_request", one_choice_per_request_},
       {"models", static_cast<int64_t>(models_.size())},
       {"max_in_flight_per_endpoint", pool_.first_limit().limit()},
       {"adaptive", pool_.first_limit().adaptive()}});
}

void Backend::OnDetectionFailed(const std::string& error) {
  detect_error_ = options_.api_key.Redact(error);
  const absl::Time now = absl::Now();
  const absl::Duration next_detection = outage_.DetectionFailed();
  if (!outage_.enabled()) {
    // No waiting (--backend_outage_limit=0): calls go out under the defaults
    // until detection answers.
    if (!traits_known_) {
      traits_known_ = true;
      batching_ = options_.batching == BatchingMode::kOn;
      Log(LogLevel::kWarning,
          "backend detection failed; using defaults (no batching) until it "
          "answers",
          {{"backend", options_.name}, {"error", detect_error_}});
    }
  } else if (outage_.GoDown(now)) {
    traits_known_ = false;
    metrics_.Up(false);
    Log(LogLevel::kWarning, "backend down",
        {{"backend", options_.name},
         {"detection", detect_error_},
         {"waiting_calls", static_cast<int64_t>(calls_.size())},
         {"outage_limit_s", absl::ToDoubleSeconds(options_.outage.limit)}});
  } else {
    traits_known_ = false;
    Log(LogLevel::kInfo, "backend still down",
        {{"backend", options_.name},
         {"detection", detect_error_},
         {"down_s", absl::ToDoubleSeconds(now - outage_.down_since())},
         {"next_detection_s", absl::ToDoubleSeconds(next_detection)}});
  }
  ScheduleDetection(now + next_detection);
}

void Backend::ScheduleDetection(absl::Time at) {
  if (!traits_known_ && outage_.down()) {
    // Also wake at the outage limit, when the waiting calls fail.
    at = std::min(at, outage_.limit_at());
  }
  // One at a time, as ScheduleProbe; none once the destructor has taken
  // the timers to cancel.
  if (detect_timer_ != 0 || destroying_) return;
  // The id is recorded before the callback can take mu_.
  detect_timer_ =
      http_.timers().RunAfter(std::max(at - absl::Now(), absl::ZeroDuration()),
                              [this] { OnDetectionTimer(); });
}

void Backend::OnDetectionTimer() {
  Completions completions;
  bool ask;
  {
    absl::MutexLock lock(&mu_);
    detect_timer_ = 0;
    Dispatch(completions);
    ask = (!traits_known_ || server_kind_ == ServerKind::kUnknown) &&
          !destroying_;
    // With the id cleared, the destructor waits for this instead.
    if (ask) ++detections_starting_;
  }
  RunCompletions(completions);
  if (!ask) return;
  StartDetection();
  absl::MutexLock lock(&mu_);
  --detections_starting_;
}

bool Backend::UndetectedPastLimit(absl::Time now) const {
  return !traits_known_ && outage_.enabled() && outage_.PastLimit(now);
}

absl::StatusOr<bool> Backend::WaitForBatchingDecision(
    CancellationToken& token) {
  absl::StatusOr<Traits> traits = WaitForTraits(token);
  if (!traits.ok()) return traits.status();
  return traits->batching;
}

absl::StatusOr<Backend::Traits> Backend::WaitForTraits(
    CancellationToken& token) {
  bool cancelled = false;
  // Declared before the lock: its destructor may wait for the callback,
  // which takes mu_.
  CancellationToken::Registration on_cancel = token.OnCancel([&] {
    absl::MutexLock lock(&mu_);
    cancelled = true;
  });
  absl::MutexLock lock(&mu_);
  // The detection timer takes mu_ at the outage limit, so the condition is
  // looked at again then.
  auto decided = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return traits_known_ || cancelled || UndetectedPastLimit(absl::Now());
  };
  mu_.Await(absl::Condition(&decided));
  if (traits_known_) {
    return Traits{.kind = server_kind_,
                  .batching = batching_,
                  .one_choice_per_request = one_choice_per_request_};
  }
  if (cancelled) return absl::CancelledError("cancelled");
  return OutageError();
}

Backend::CallId Backend::Post(absl::string_view path, std::string json_body,
                              Done done, int samples) {
  Call call;
  call.path = std::string(path);
  call.body = std::move(json_body);
  call.done = std::move(done);
  call.samples = samples;
  // Parsed before the lock is taken: posts do not wait on each other's.
  if (options_.rate_limits.limits_tokens()) {
    call.cost = EstimateRequestTokens(call.body);
  }
  return Enqueue(std::move(call));
}

Backend::CallId Backend::PostToServerRoot(absl::string_view path,
                                          std::string json_body, Done done) {
  Call call;
  call.path = std::string(path);
  call.body = std::move(json_body);
  call.done = std::move(done);
  call.at_server_root = true;
  return Enqueue(std::move(call));
}

Backend::CallId Backend::Enqueue(Call call) {
  Completions completions;
  CallId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    calls_.emplace(id, std::move(call));
    queued_.push_back(id);
    Dispatch(completions);
  }
  RunCompletions(completions);
  return id;
}

ThroughputMeter::Pace Backend::MeasuredPace() const {
  absl::MutexLock lock(&mu_);
  return pace_.Measure();
}

void Backend::Cancel(CallId id) {
  Completions completions;
  TimerService::TimerId backoff = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    Call& call = it->second;
    call.cancelled = true;
    if (call.request != 0) {
      // Its response (CANCELLED) completes the call and frees the slot.
      http_.Cancel(call.request);
    } else {
      // Queued or waiting out a backoff: holds no slot, ends here.
      if (auto queued = std::find(queued_.begin(), queued_.end(), id);
          queued != queued_.end()) {
        queued_.erase(queued);
      }
      backoff = call.backoff;
      Finish(id, {absl::CancelledError("request cancelled"), "", call.attempts},
             completions);
    }
  }
  // Outside mu_: CancelTimer waits for a running callback, which takes it.
  if (backoff != 0) http_.timers().CancelTimer(backoff);
  RunCompletions(completions);
}

void Backend::Dispatch(Completions& out) {
  const absl::Time now = absl::Now();
  if (!traits_known_) {
    // Nothing goes out before the server has said what it is; past the
    // outage limit, the waiting calls fail.
    if (UndetectedPastLimit(now)) FailQueued(OutageError(), 0, out);
    return;
  }
  if (outage_.down()) {
    DispatchWhileDown(out);
    return;
  }
  while (!queued_.empty()) {
    const CallId id = queued_.front();
    if (RefuseSamples(id, out)) continue;
    Call& call = calls_.at(id);
    if (!BudgetAllows(call)) return;
    const int endpoint = pool_.Acquire(call.last_failed_endpoint, now);
    if (endpoint == EndpointPool::kNoneFree) return;
    queued_.pop_front();
    SpendBudget(call);
    Send(id, endpoint);
  }
}

bool Backend::BudgetAllows(const Call& call) {
  if (call.at_server_root ||
      (budget_ == nullptr && server_hold_until_ == absl::InfinitePast())) {
    return true;
  }
  const absl::Time now = options_.budget_clock();
  if (server_hold_until_ <= now) server_hold_until_ = absl::InfinitePast();
  absl::Time ready = server_hold_until_;
  if (budget_ != nullptr) {
    ready = std::max(ready, budget_->ReadyAt(call.cost, now));
  }
  if (ready <= now) {
    if (budget_wait_since_ != absl::InfinitePast()) {
      metrics_.RateLimitWaitEnded(now - budget_wait_since_);
      metrics_.RateLimited(false);
      budget_wait_since_ = absl::InfinitePast();
    }
    return true;
  }
  if (budget_wait_since_ == absl::InfinitePast()) {
    budget_wait_since_ = now;
    metrics_.RateLimited(true);
  }
  // One timer at a time (it cannot be cancelled under mu_): a pending one
  // runs Dispatch, which arms the next if the budget is still short. The
  // id is recorded before the callback can take mu_.
  if (budget_timer_ == 0 && !destroying_) {
    budget_timer_ = http_.timers().RunAfter(
        ready - now, [this] { OnDispatchTimer(&Backend::budget_timer_); });
  }
  return false;
}

void Backend::FollowServerLimits(const HttpResponse& response) {
  const HttpResponse::RateLimitHeaders& limits = response.rate_limit;
  const absl::Time now = options_.budget_clock();
  absl::Time until = absl::InfinitePast();
  if (limits.remaining_requests == 0 && limits.reset_requests.has_value()) {
    until = std::max(until, now + *limits.reset_requests);
  }
  if (limits.remaining_tokens == 0 && limits.reset_tokens.has_value()) {
    until = std::max(until, now + *limits.reset_tokens);
  }
  if (until <= now || until <= server_hold_until_) return;
  server_hold_until_ = until;
  Log(LogLevel::kDebug, "backend says its rate limit is used up; waiting",
      {{"backend", options_.name},
       {"wait_s", absl::ToDoubleSeconds(until - now)}});
}

void Backend::SpendBudget(Call& call) {
  if (budget_ == nullptr || call.at_server_root) return;
  const absl::Time now = options_.budget_clock();
  budget_->Take(call.cost, now);
  call.reserved = true;
  ReportBudget(now);
}

void Backend::SettleBudget(Call& call, bool succeeded,
                           const std::optional<TokenCost>& usage) {
  if (budget_ == nullptr || !std::exchange(call.reserved, false)) return;
  if (!options_.rate_limits.limits_tokens()) return;
  const absl::Time now = options_.budget_clock();
  // A reply without usage is taken to have used what was reserved; an
  // attempt that failed used nothing.
  const TokenCost used = succeeded ? usage.value_or(call.cost) : TokenCost{};
  budget_->Settle(call.cost, used, now);
  ReportBudget(now);
}

void Backend::ReportBudget(absl::Time now) {
  const RateBudget::Available available = budget_->available(now);
  for (const auto& [name, value] :
       {std::pair{"requests", available.requests},
        std::pair{"tokens", available.tokens},
        std::pair{"input_tokens", available.input_tokens},
        std::pair{"output_tokens", available.output_tokens}}) {
    if (value.has_value()) metrics_.BudgetAvailable(name, *value);
  }
}

void Backend::OnDispatchTimer(TimerService::TimerId Backend::*timer) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    this->*timer = 0;
    Dispatch(completions);
  }
  RunCompletions(completions);
}

bool Backend::RefuseSamples(CallId id, Completions& out) {
  if (!one_choice_per_request_ || calls_.at(id).samples <= 1) return false;
  queued_.erase(std::find(queued_.begin(), queued_.end(), id));
  HandBackForOneChoice(id,
                       absl::FailedPreconditionError(absl::StrCat(
                           "backend \"", options_.name,
                           "\" takes one choice per request; send one "
                           "request per sample")),
                       out);
  return true;
}

void Backend::HandBackForOneChoice(CallId id, absl::Status why,
                                   Completions& out) {
  Call& call = calls_.at(id);
  BackendReply reply;
  reply.status = std::move(why);
  reply.body = std::move(call.body);
  reply.attempts = call.attempts;
  reply.one_choice_per_request = true;
  Finish(id, std::move(reply), out);
}

void Backend::FailQueued(const absl::Status& error, size_t keep,
                         Completions& out) {
  while (queued_.size() > keep) {
    const CallId id = queued_.back();
    queued_.pop_back();
    Finish(id, {error, "", calls_.at(id).attempts}, out);
  }
}

void Backend::Send(CallId id, int endpoint) {
  Call& call = calls_.at(id);
  ++call.attempts;
  call.endpoint = endpoint;
  metrics_.InFlight(1);

  HttpRequest request;
  request.url =
      absl::StrCat(call.at_server_root ? ServerRoot(pool_.base_url(endpoint))
                                       : pool_.base_url(endpoint),
                   call.path);
  request.json_body = call.body;
  request.headers = auth_headers_;
  // No more connections than requests the endpoint may serve: llama.cpp
  // holds an HTTP thread for each open connection.
  request.max_connections = pool_.limit(endpoint);
  // The id is recorded before the callback can take mu_.
  call.request =
      http_.Start(std::move(request), [this, id](HttpResponse response) {
        OnResponse(id, std::move(response));
      });
}

void Backend::OnResponse(CallId id, HttpResponse response) {
  metrics_.Request(RetryPolicy::OutcomeLabel(response), response.elapsed);
  response.transport = options_.api_key.Redact(response.transport);
  const bool succeeded = response.transport.ok() && response.http_code >= 200 &&
                         response.http_code < 300;
  // For a token budget and the measured pace, read before the lock is
  // taken: the budget settles with the whole usage, the pace needs only
  // the completion tokens, found without parsing the body.
  std::optional<TokenCost> usage;
  int64_t completion_tokens = 0;
  if (succeeded && options_.rate_limits.limits_tokens()) {
    usage = ReplyUsage(response.body);
    if (usage.has_value()) completion_tokens = usage->output;
  } else if (succeeded) {
    completion_tokens = ReplyCompletionTokens(response.body);
  }
  const absl::Time now = absl::Now();
  Completions completions;
  bool redetect = false;
  {
    absl::MutexLock lock(&mu_);
    Call& call = calls_.at(id);
    call.request = 0;
    metrics_.InFlight(-1);
    if (succeeded && !call.at_server_root) {
      pace_.Add(now - response.elapsed, now, completion_tokens);
    }
    FollowServerLimits(response);
    SettleBudget(call, succeeded, usage);
    const int limit_before = pool_.TotalLimit();
    OnEndpointChange(call.endpoint,
                     pool_.Release(call.endpoint, response, now));
    if (pool_.TotalLimit() != limit_before) ReportLimit();

    const bool was_probe = id == probe_;
    if (was_probe) probe_ = 0;
    const bool outage_sign = EndpointPool::IsOutageSign(response);
    if (!outage_sign && !call.cancelled && EndOutage() && NeedsDetection()) {
      // Back up: the server may have been restarted as something else (other
      // slots, another model). Calls posted meanwhile wait for the answer.
      traits_known_ = false;
      redetect = true;
    }
    if (call.cancelled) {
      Finish(id, {absl::CancelledError("request cancelled"), "", call.attempts},
             completions);
    } else if (succeeded) {
      Finish(id,
             {absl::OkStatus(), std::move(response.body), call.attempts,
              static_cast<int>(response.http_code)},
             completions);
    } else if (call.samples > 1 && response.transport.ok() &&
               IsChoiceCountRefusal(response.http_code, response.body)) {
      if (!one_choice_per_request_) {
        one_choice_per_request_ = true;
        Log(LogLevel::kInfo,
            "backend takes one choice per request; samples go as one "
            "request each",
            {{"backend", options_.name}, {"http_code", response.http_code}});
      }
      HandBackForOneChoice(
          id, StatusFromHttpError(response.http_code, response.body),
          completions);
    } else if (outage_sign &&
               WaitOutOutage(id, response, was_probe, completions)) {
      // Queued again, its attempt not counted.
    } else {
      call.last_failed_endpoint = call.endpoint;
      RetryOrFinish(id, response, completions);
    }
    Dispatch(completions);  // a slot is free
  }
  RunCompletions(completions);
  if (redetect) StartDetection();
}

void Backend::OnEndpointChange(int endpoint, EndpointPool::Change change) {
  switch (change) {
    case EndpointPool::Change::kNone:
      return;
    case EndpointPool::Change::kReturned:
      metrics_.EndpointsEjected(-1);
      Log(LogLevel::kInfo, "endpoint back in service",
          {{"backend", options_.name},
           {"endpoint", pool_.display_url(endpoint)}});
      return;
    case EndpointPool::Change::kEjected: {
      metrics_.EndpointsEjected(1);
      const absl::Duration cooldown = pool_.options().eject_cooldown;
      Log(LogLevel::kWarning, "endpoint ejected",
          {{"backend", options_.name},
           {"endpoint", pool_.display_url(endpoint)},
           {"consecutive_failures", pool_.consecutive_failures(endpoint)},
           {"last_error", pool_.last_error(endpoint)},
           {"cooldown_s", absl::ToDoubleSeconds(cooldown)}});
      // Queued calls may go to it once the cool-down ends, even if no other
      // request completes meanwhile to trigger a dispatch.
      const uint64_t key = next_cooldown_++;
      if (destroying_) return;
      cooldown_timers_[key] = http_.timers().RunAfter(
          cooldown, [this, key] { OnCooldownDone(key); });
      return;
    }
  }
}

void Backend::OnCooldownDone(uint64_t key) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    cooldown_timers_.erase(key);
    Dispatch(completions);
  }
  RunCompletions(completions);
}

void Backend::RetryOrFinish(CallId id, const HttpResponse& response,
                            Completions& out) {
  Call& call = calls_.at(id);
  absl::Status status =
      response.transport.ok()
          ? StatusFromHttpError(response.http_code, response.body)
          : response.transport;
  status = options_.api_key.Redact(status);
  if (!retry_policy_.ShouldRetry(response, call.attempts)) {
    if (RetryPolicy::IsRetryable(response) && pool_.EveryEndpointFailing()) {
      status = absl::UnavailableError(absl::StrCat(
          "every endpoint of backend \"", options_.name, "\" is failing: ",
          pool_.FailureSummary(), "; last error: ", status.message()));
    }
    Finish(id,
           {std::move(status), "", call.attempts,
            response.transport.ok() ? static_cast<int>(response.http_code) : 0},
           out);
    return;
  }
  const std::string reason = RetryPolicy::OutcomeLabel(response);
  metrics_.Retry(reason);
  const absl::Duration delay =
      retry_policy_.Backoff(call.attempts, response, random_);
  Log(LogLevel::kDebug, "backend request retried",
      {{"backend", options_.name},
       {"attempt", call.attempts},
       {"reason", reason},
       {"delay_s", absl::ToDoubleSeconds(delay)},
       {"error", std::string(status.message())}});
  // The id is recorded before the callback can take mu_.
  call.backoff =
      http_.timers().RunAfter(delay, [this, id] { OnBackoffDone(id); });
}

void Backend::OnBackoffDone(CallId id) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;  // cancelled meanwhile
    it->second.backoff = 0;
    queued_.push_front(id);  // a retry goes ahead of new calls
    Dispatch(completions);
  }
  RunCompletions(completions);
}

void Backend::Finish(CallId id, BackendReply reply, Completions& out) {
  auto it = calls_.find(id);
  out.emplace_back(std::move(it->second.done), std::move(reply));
  calls_.erase(it);
}

void Backend::RunCompletions(Completions& completions) {
  for (auto& [done, reply] : completions) done(std::move(reply));
}

void Backend::ReportLimit() { metrics_.ConcurrencyLimit(pool_.TotalLimit()); }

bool Backend::WaitOutOutage(CallId id, const HttpResponse& response,
                            bool was_probe, Completions& out) {
  if (!outage_.enabled()) return false;
  const absl::Time now = absl::Now();
  if (!outage_.down()) {
    if (!pool_.EveryEndpointDown(options_.outage.failures)) return false;
    outage_.GoDown(now);
    metrics_.Up(false);
    Log(LogLevel::kWarning, "backend down",
        {{"backend", options_.name},
         {"endpoints", pool_.FailureSummary()},
         {"waiting_calls", static_cast<int64_t>(calls_.size())},
         {"outage_limit_s", absl::ToDoubleSeconds(options_.outage.limit)}});
  } else if (outage_.PastLimit(now)) {
    // Past the limit, a call still probing fails without more attempts.
    Finish(id, {OutageError(), "", calls_.at(id).attempts}, out);
    return true;
  } else if (was_probe) {
    // The probe failed: the next one waits longer.
    outage_.ProbeFailed(now);
    Log(LogLevel::kInfo, "backend still down",
        {{"backend", options_.name},
         {"probes_failed", outage_.probes_failed()},
         {"down_s", absl::ToDoubleSeconds(now - outage_.down_since())},
         {"next_probe_s", absl::ToDoubleSeconds(outage_.probe_interval())},
         {"endpoints", pool_.FailureSummary()}});
  }
  // Sent again later: a retry, but not one of the call's attempts.
  metrics_.Retry(RetryPolicy::OutcomeLabel(response));
  Call& call = calls_.at(id);
  --call.attempts;
  queued_.push_front(id);
  ScheduleProbe(outage_.next_probe());
  return true;
}

bool Backend::EndOutage() {
  if (!outage_.down()) return false;
  Log(LogLevel::kInfo, "backend up",
      {{"backend", options_.name},
       {"down_s", absl::ToDoubleSeconds(absl::Now() - outage_.down_since())}});
  outage_.ComeUp();
  metrics_.Up(true);
  return true;
}

void Backend::DispatchWhileDown(Completions& out) {
  const absl::Time now = absl::Now();
  if (outage_.PastLimit(now)) {
    // Every waiting call fails; new ones probe one at a time until the
    // backend answers.
    FailQueued(OutageError(), probe_ != 0 ? 0 : 1, out);
  }
  while (!queued_.empty() && RefuseSamples(queued_.front(), out)) {
  }
  if (probe_ != 0 || queued_.empty()) return;
  if (!outage_.ProbeDue(now)) {
    ScheduleProbe(outage_.next_probe());
    return;
  }
  const CallId id = queued_.front();
  Call& call = calls_.at(id);
  if (!BudgetAllows(call)) return;
  const int endpoint = pool_.Acquire(call.last_failed_endpoint, now);
  if (endpoint == EndpointPool::kNoneFree) return;
  queued_.pop_front();
  probe_ = id;
  SpendBudget(call);
  Send(id, endpoint);
}

void Backend::ScheduleProbe(absl::Time at) {
  // One timer at a time (it cannot be cancelled under mu_): a pending one
  // runs Dispatch, which schedules the next if nothing is due yet. None
  // once the destructor has taken the timers to cancel.
  if (probe_timer_ != 0 || destroying_) return;
  // The id is recorded before the callback can take mu_.
  probe_timer_ = http_.timers().RunAfter(
      std::max(at - absl::Now(), absl::ZeroDuration()),
      [this] { OnDispatchTimer(&Backend::probe_timer_); });
}

absl::Status Backend::OutageError() const {
  return absl::UnavailableError(absl::StrCat(
      "backend \"", options_.name, "\" has been down for ",
      absl::FormatDuration(absl::Trunc(absl::Now() - outage_.down_since(),
                                       absl::Milliseconds(100))),
      ", past --backend_outage_limit (",
      absl::FormatDuration(options_.outage.limit), "): ",
      traits_known_ ? pool_.FailureSummary()
                    : absl::StrCat("no endpoint answered detection (GET "
                                   "/v1/models): ",
                                   detect_error_)));
}

}  // namespace sdg
