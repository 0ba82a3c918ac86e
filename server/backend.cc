#include "server/backend.h"

#include <algorithm>
#include <cassert>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/openai_protocol.h"

namespace sdg {
namespace {

bool IsValidName(absl::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '_' || c == '-';
  });
}

bool IsRetryableHttpCode(long code) {
  return code == 408 || code == 409 || code == 429 || code >= 500;
}

bool IsHttpReply(const HttpResponse& response, long code) {
  return response.transport.ok() && response.http_code == code;
}

// The server's root, where llama.cpp serves /props: the base URL without /v1.
std::string ServerRoot(absl::string_view base_url) {
  absl::string_view root = base_url;
  if (absl::EndsWith(root, "/v1")) root.remove_suffix(3);
  return std::string(root);
}

const char* BatchingName(bool batching) { return batching ? "on" : "off"; }

// The metrics label for how an attempt ended.
std::string OutcomeLabel(const HttpResponse& response) {
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

// "Authorization: Bearer KEY", or nothing without a key.
std::vector<std::string> AuthHeaders(const std::string& api_key) {
  if (api_key.empty()) return {};
  return {absl::StrCat("Authorization: Bearer ", api_key)};
}

}  // namespace

absl::StatusOr<BackendOptions> ParseBackendFlag(absl::string_view flag) {
  std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(flag, absl::MaxSplits('=', 1));
  if (!IsValidName(parts.first) || parts.second.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backend \"", flag,
        "\": expected NAME=URL[,URL...] with NAME made of letters, digits, "
        "'_' and '-', e.g. vllm=http://127.0.0.1:8000/v1"));
  }
  BackendOptions options;
  options.name = std::string(parts.first);
  for (absl::string_view url : absl::StrSplit(parts.second, ',')) {
    while (absl::EndsWith(url, "/")) url.remove_suffix(1);
    if (!absl::StartsWith(url, "http://") &&
        !absl::StartsWith(url, "https://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--backend ", options.name, ": \"", url,
                       "\" is not an http:// or https:// URL"));
    }
    options.base_urls.emplace_back(url);
  }
  return options;
}

ServerTraits DetectServer(const HttpResponse& models,
                          const HttpResponse& props) {
  ServerTraits traits;
  if (IsHttpReply(props, 200)) {
    nlohmann::json json = nlohmann::json::parse(props.body, nullptr, false);
    if (json.is_object() && json.contains("total_slots") &&
        json["total_slots"].is_number_integer() &&
        json["total_slots"].get<int>() > 0) {
      traits.kind = "llama.cpp";
      traits.total_slots = json["total_slots"].get<int>();
      return traits;
    }
  }
  if (IsHttpReply(models, 200)) {
    traits.kind = "openai-compatible";
    nlohmann::json json = nlohmann::json::parse(models.body, nullptr, false);
    if (json.is_object() && json.contains("data") && json["data"].is_array()) {
      for (const nlohmann::json& model : json["data"]) {
        if (model.is_object() && model.value("owned_by", "") == "vllm") {
          traits.kind = "vllm";
          traits.accepts_prompt_lists = true;
        }
      }
    }
    return traits;
  }
  if (models.transport.ok() || props.transport.ok()) {
    traits.kind = "openai-compatible";  // it answered, if not usefully
  }
  return traits;
}

Backend::Backend(BackendOptions options, HttpClient& http, Metrics& metrics)
    : options_(std::move(options)),
      http_(http),
      metrics_(metrics.ForBackend(options_.name,
                                  static_cast<int>(options_.base_urls.size()))),
      auth_headers_(AuthHeaders(options_.api_key)) {
  absl::MutexLock lock(&mu_);
  for (const std::string& url : options_.base_urls) {
    Endpoint endpoint{
        .base_url = url,
        .limit = options_.in_flight_mode == InFlightMode::kAdaptive
                     ? ConcurrencyLimit::MakeAdaptive(options_.adaptive)
                     : ConcurrencyLimit::Fixed(options_.max_in_flight)};
    endpoints_.push_back(std::move(endpoint));
  }
  ReportLimit();
  if (NeedsDetection()) {
    StartDetection();
  } else {
    traits_known_ = true;
    batching_ = options_.batching == BatchingMode::kOn;
  }
}

Backend::~Backend() {
  absl::MutexLock lock(&mu_);
  destroying_ = true;
  for (HttpClient::RequestId id : detect_requests_) http_.Cancel(id);
  mu_.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; },
      &detect_outstanding_));
  // Jobs end before backends are destroyed; a call left here would never
  // complete, so fail loudly in debug builds.
  assert(calls_.empty());
}

bool Backend::NeedsDetection() const {
  return options_.batching == BatchingMode::kAuto ||
         options_.in_flight_mode == InFlightMode::kAuto;
}

void Backend::StartDetection() {
  detect_models_.reset();
  detect_props_.reset();
  detect_requests_.clear();
  const int endpoint = detect_endpoint_;
  const std::string& base = endpoints_[endpoint].base_url;
  for (bool is_models : {true, false}) {
    HttpRequest request;
    request.url = is_models ? absl::StrCat(base, "/models")
                            : absl::StrCat(ServerRoot(base), "/props");
    request.timeout = options_.detect_timeout;
    request.headers = auth_headers_;
    // The id is recorded before the callback can take mu_.
    HttpClient::RequestId id = http_.Start(
        std::move(request), [this, endpoint, is_models](HttpResponse response) {
          OnDetectReply(endpoint, is_models, std::move(response));
        });
    detect_requests_.push_back(id);
    ++detect_outstanding_;
  }
}

void Backend::OnDetectReply(int endpoint, bool is_models,
                            HttpResponse response) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    --detect_outstanding_;
    if (destroying_) return;
    (is_models ? detect_models_ : detect_props_) = std::move(response);
    if (!detect_models_.has_value() || !detect_props_.has_value()) return;

    ServerTraits traits = DetectServer(*detect_models_, *detect_props_);
    if (traits.kind == "unknown" &&
        endpoint + 1 < static_cast<int>(endpoints_.size())) {
      detect_endpoint_ = endpoint + 1;  // ask the next endpoint
      StartDetection();
      return;
    }
    detect_endpoint_ = 0;
    if (traits.kind == "unknown") {
      last_detect_failure_ = absl::Now();
      Log(LogLevel::kWarning,
          "backend did not answer /v1/models or /props; using defaults until "
          "it does",
          {{"backend", options_.name},
           {"error", std::string(detect_models_->transport.message())}});
    }
    ApplyTraits(traits);
    Dispatch(completions);
  }
  RunCompletions(completions);
}

void Backend::ApplyTraits(const ServerTraits& traits) {
  traits_ = traits;
  traits_known_ = true;
  batching_ =
      options_.batching == BatchingMode::kOn ||
      (options_.batching == BatchingMode::kAuto && traits.accepts_prompt_lists);
  if (options_.in_flight_mode == InFlightMode::kAuto) {
    int limit = traits.total_slots.value_or(options_.max_in_flight);
    for (Endpoint& endpoint : endpoints_) {
      endpoint.limit = ConcurrencyLimit::Fixed(limit);
    }
    ReportLimit();
  }
  if (traits.kind != "unknown") {
    Log(LogLevel::kInfo, "backend detected",
        {{"backend", options_.name},
         {"server", traits.kind},
         {"batching", BatchingName(batching_)},
         {"max_in_flight_per_endpoint", endpoints_.front().limit.limit()},
         {"adaptive", endpoints_.front().limit.adaptive()}});
  }
}

std::optional<bool> Backend::AwaitBatching(CancellationToken& token) {
  bool cancelled = false;
  // Declared before the lock: its destructor may wait for the callback,
  // which takes mu_.
  CancellationToken::Registration on_cancel = token.OnCancel([&] {
    absl::MutexLock lock(&mu_);
    cancelled = true;
  });
  struct Ready {
    Backend* backend;
    bool* cancelled;
  } ready{this, &cancelled};
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Ready* ready) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return ready->backend->traits_known_ || *ready->cancelled;
      },
      &ready));
  if (!traits_known_) return std::nullopt;
  return batching_;
}

Backend::CallId Backend::Post(absl::string_view path, std::string json_body,
                              Done done) {
  Completions completions;
  CallId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    Call call;
    call.path = std::string(path);
    call.body = std::move(json_body);
    call.done = std::move(done);
    calls_.emplace(id, std::move(call));
    queued_.push_back(id);
    // A server that was down when sdgd started is asked again, now and then.
    if (NeedsDetection() && traits_.kind == "unknown" && traits_known_ &&
        detect_outstanding_ == 0 &&
        absl::Now() - last_detect_failure_ > absl::Seconds(10)) {
      StartDetection();
    }
    Dispatch(completions);
  }
  RunCompletions(completions);
  return id;
}

void Backend::Cancel(CallId id) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    it->second.cancelled = true;
    if (auto queued = std::find(queued_.begin(), queued_.end(), id);
        queued != queued_.end()) {
      queued_.erase(queued);  // never sent: holds no slot
      Finish(
          id,
          {absl::CancelledError("request cancelled"), "", it->second.attempts},
          completions);
    } else {
      // Its callback completes the call with CANCELLED.
      http_.Cancel(it->second.pending);
    }
  }
  RunCompletions(completions);
}

void Backend::Dispatch(Completions& out) {
  if (!traits_known_) return;  // the first detection is still running
  const absl::Time now = absl::Now();
  while (!queued_.empty()) {
    CallId id = queued_.front();
    int endpoint = PickEndpoint(calls_.at(id).last_failed_endpoint, now);
    if (endpoint == kNoEndpointFree) return;
    queued_.pop_front();
    Send(id, endpoint);
  }
}

int Backend::PickEndpoint(int avoid, absl::Time now) {
  int best = -1;
  const size_t count = endpoints_.size();
  for (size_t i = 0; i < count; ++i) {
    int index = static_cast<int>((next_endpoint_ + i) % count);
    const Endpoint& endpoint = endpoints_[index];
    if (endpoint.ejected && now < endpoint.ejected_until) continue;
    // An ejected endpoint past its cool-down gets one trial request.
    int room =
        (endpoint.ejected ? 1 : endpoint.limit.limit()) - endpoint.in_flight;
    if (room <= 0) continue;
    if (best < 0 || (best == avoid && index != avoid) ||
        (index != avoid && endpoint.in_flight < endpoints_[best].in_flight)) {
      best = index;
    }
  }
  if (best < 0) return kNoEndpointFree;
  next_endpoint_ = (best + 1) % count;
  return best;
}

void Backend::Send(CallId id, int endpoint_index) {
  Call& call = calls_.at(id);
  Endpoint& endpoint = endpoints_[endpoint_index];
  ++call.attempts;
  call.endpoint = endpoint_index;
  ++endpoint.in_flight;
  metrics_.InFlight(1);

  HttpRequest request;
  request.url = absl::StrCat(endpoint.base_url, call.path);
  request.json_body = call.body;
  request.headers = auth_headers_;
  // The id is recorded before the callback can take mu_.
  call.pending =
      http_.Start(std::move(request), [this, id](HttpResponse response) {
        OnResponse(id, std::move(response));
      });
}

void Backend::OnResponse(CallId id, HttpResponse response) {
  const std::string outcome = OutcomeLabel(response);
  metrics_.Request(outcome, response.elapsed);
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    Call& call = calls_.at(id);
    Endpoint& endpoint = endpoints_[call.endpoint];
    --endpoint.in_flight;
    metrics_.InFlight(-1);
    RecordEndpointOutcome(endpoint, response);

    const bool transport_ok = response.transport.ok();
    if (call.cancelled) {
      Finish(id, {absl::CancelledError("request cancelled"), "", call.attempts},
             completions);
    } else if (transport_ok && response.http_code >= 200 &&
               response.http_code < 300) {
      Finish(id, {absl::OkStatus(), std::move(response.body), call.attempts},
             completions);
    } else {
      call.last_failed_endpoint = call.endpoint;
      absl::Status status =
          transport_ok ? StatusFromHttpError(response.http_code, response.body)
                       : response.transport;
      bool retryable =
          transport_ok
              ? IsRetryableHttpCode(response.http_code)
              : response.transport.code() != absl::StatusCode::kInternal &&
                    response.transport.code() != absl::StatusCode::kCancelled;
      RetryOrFinish(id, std::move(status), retryable, response.retry_after,
                    outcome, completions);
    }
    Dispatch(completions);  // a slot is free
  }
  RunCompletions(completions);
}

void Backend::RecordEndpointOutcome(Endpoint& endpoint,
                                    const HttpResponse& response) {
  const absl::Time now = absl::Now();
  const absl::StatusCode transport = response.transport.code();
  if (transport == absl::StatusCode::kCancelled) return;  // says nothing
  const int limit_before = endpoint.limit.limit();
  if (transport == absl::StatusCode::kDeadlineExceeded ||
      IsHttpReply(response, 429) || IsHttpReply(response, 503)) {
    endpoint.limit.OnOverload(now);
  } else if (response.transport.ok() && response.http_code < 500) {
    endpoint.limit.OnSuccess(response.elapsed, now);
  }
  if (endpoint.limit.limit() != limit_before) ReportLimit();

  const bool failed = !response.transport.ok() || response.http_code >= 500;
  if (!failed) {
    endpoint.consecutive_failures = 0;
    if (endpoint.ejected) {
      endpoint.ejected = false;
      metrics_.EndpointsEjected(-1);
      Log(LogLevel::kInfo, "endpoint back in service",
          {{"backend", options_.name}, {"endpoint", endpoint.base_url}});
    }
    return;
  }
  endpoint.last_error = response.transport.ok()
                            ? absl::StrCat("HTTP ", response.http_code)
                            : std::string(Redact(response.transport).message());
  ++endpoint.consecutive_failures;
  const int in_rotation = static_cast<int>(
      std::count_if(endpoints_.begin(), endpoints_.end(),
                    [](const Endpoint& e) { return !e.ejected; }));
  // As Envoy's outlier detection: the last endpoint in rotation stays, so
  // one flaky server is retried rather than shut off.
  if (endpoint.ejected ||
      (endpoint.consecutive_failures >= options_.eject_after_failures &&
       in_rotation > 1)) {
    if (!endpoint.ejected) {
      metrics_.EndpointsEjected(1);
    }
    endpoint.ejected = true;
    endpoint.ejected_until = now + options_.eject_cooldown;
    Log(LogLevel::kWarning, "endpoint ejected",
        {{"backend", options_.name},
         {"endpoint", endpoint.base_url},
         {"consecutive_failures", endpoint.consecutive_failures},
         {"last_error", endpoint.last_error},
         {"cooldown_s", absl::ToDoubleSeconds(options_.eject_cooldown)}});
  }
}

void Backend::RetryOrFinish(CallId id, absl::Status status, bool retryable,
                            std::optional<absl::Duration> retry_after,
                            const std::string& reason, Completions& out) {
  Call& call = calls_.at(id);
  if (!retryable || call.attempts >= options_.max_attempts) {
    if (retryable && EveryEndpointFailing()) {
      status = absl::UnavailableError(absl::StrCat(
          EveryEndpointFailingMessage(), "; last error: ", status.message()));
    }
    Finish(id, {Redact(status), "", call.attempts}, out);
    return;
  }
  metrics_.Retry(reason);
  absl::Duration delay = Backoff(call.attempts, retry_after);
  Log(LogLevel::kDebug, "backend request retried",
      {{"backend", options_.name},
       {"attempt", call.attempts},
       {"reason", reason},
       {"delay_s", absl::ToDoubleSeconds(delay)},
       {"error", std::string(Redact(status).message())}});
  call.pending = http_.Wait(delay, [this, id](HttpResponse timer) {
    OnBackoffDone(id, std::move(timer));
  });
}

void Backend::OnBackoffDone(CallId id, HttpResponse timer) {
  Completions completions;
  {
    absl::MutexLock lock(&mu_);
    Call& call = calls_.at(id);
    if (call.cancelled || !timer.transport.ok()) {
      Finish(id, {absl::CancelledError("request cancelled"), "", call.attempts},
             completions);
    } else {
      call.pending = 0;
      queued_.push_front(id);  // a retry goes ahead of new calls
      Dispatch(completions);
    }
  }
  RunCompletions(completions);
}

absl::Duration Backend::Backoff(int attempts,
                                std::optional<absl::Duration> retry_after) {
  if (retry_after.has_value()) {
    return std::min(*retry_after, options_.max_retry_after);
  }
  // Full jitter: uniform in [0, min(cap, initial * 2^(attempts-1))].
  absl::Duration ceiling =
      std::min(options_.max_backoff,
               options_.initial_backoff * (1 << std::min(attempts - 1, 16)));
  return absl::Seconds(
      absl::Uniform<double>(random_, 0.0, absl::ToDoubleSeconds(ceiling)));
}

void Backend::Finish(CallId id, BackendReply reply, Completions& out) {
  auto it = calls_.find(id);
  out.emplace_back(std::move(it->second.done), std::move(reply));
  calls_.erase(it);
}

void Backend::RunCompletions(Completions& completions) {
  for (auto& [done, reply] : completions) done(std::move(reply));
}

bool Backend::EveryEndpointFailing() const {
  return endpoints_.size() > 1 &&
         std::all_of(endpoints_.begin(), endpoints_.end(),
                     [](const Endpoint& endpoint) {
                       return endpoint.consecutive_failures > 0;
                     });
}

std::string Backend::EveryEndpointFailingMessage() const {
  std::vector<std::string> parts;
  for (const Endpoint& endpoint : endpoints_) {
    parts.push_back(absl::StrCat(endpoint.base_url,
                                 endpoint.ejected ? " (ejected, " : " (",
                                 endpoint.last_error, ")"));
  }
  return absl::StrCat("every endpoint of backend \"", options_.name,
                      "\" is failing: ", absl::StrJoin(parts, ", "));
}

void Backend::ReportLimit() {
  int total = 0;
  for (const Endpoint& endpoint : endpoints_) total += endpoint.limit.limit();
  metrics_.ConcurrencyLimit(total);
}

absl::Status Backend::Redact(const absl::Status& status) const {
  if (options_.api_key.empty() ||
      !absl::StrContains(status.message(), options_.api_key)) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrReplaceAll(status.message(),
                          {{options_.api_key, "[redacted API key]"}}));
}

}  // namespace sdg
