#include "server/backend.h"

#include <algorithm>
#include <cassert>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

Backend::Backend(BackendOptions options, HttpClient& http, Metrics& metrics)
    : options_(std::move(options)), http_(http), metrics_(metrics) {
  metrics_.BackendConcurrencyLimit(options_.name, options_.max_in_flight);
}

Backend::~Backend() {
  // Jobs end before backends are destroyed; a call left here would never
  // complete, so fail loudly in debug builds.
  absl::MutexLock lock(&mu_);
  assert(calls_.empty());
}

Backend::CallId Backend::Post(absl::string_view path, std::string json_body,
                              Done done) {
  CallId id;
  bool start_now;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    calls_.emplace(
        id, Call{std::string(path), std::move(json_body), std::move(done)});
    start_now = in_flight_ < options_.max_in_flight;
    if (start_now) {
      ++in_flight_;
    } else {
      waiting_.push_back(id);
    }
  }
  if (start_now) {
    metrics_.BackendInFlight(options_.name, 1);
    StartAttempt(id, absl::ZeroDuration());
  }
  return id;
}

void Backend::Cancel(CallId id) {
  Done done;
  HttpClient::RequestId http_id = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    auto waiting = std::find(waiting_.begin(), waiting_.end(), id);
    if (waiting != waiting_.end()) {
      // Never sent: it holds no slot.
      waiting_.erase(waiting);
      done = std::move(it->second.done);
      calls_.erase(it);
    } else {
      it->second.cancelled = true;
      http_id = it->second.http_id;
    }
  }
  if (done) {
    done(BackendReply{absl::CancelledError("request cancelled"), "", 0});
  } else if (http_id != 0) {
    http_.Cancel(http_id);
  }
  // With http_id still 0 the attempt is being started right now;
  // StartAttempt sees `cancelled` and cancels it.
}

void Backend::StartAttempt(CallId id, absl::Duration delay) {
  HttpRequest request;
  {
    absl::MutexLock lock(&mu_);
    Call& call = calls_.at(id);
    ++call.attempts;
    const std::string& base =
        options_.base_urls[next_endpoint_++ % options_.base_urls.size()];
    request.url = absl::StrCat(base, call.path);
    request.json_body = call.body;
    request.start_delay = delay;
    call.http_id = 0;
  }
  if (!options_.api_key.empty()) {
    request.headers.push_back(
        absl::StrCat("Authorization: Bearer ", options_.api_key));
  }
  HttpClient::RequestId http_id =
      http_.Start(std::move(request), [this, id](HttpResponse response) {
        OnResponse(id, std::move(response));
      });
  bool cancel_now = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;  // already completed
    it->second.http_id = http_id;
    cancel_now = it->second.cancelled;
  }
  if (cancel_now) http_.Cancel(http_id);
}

absl::Duration Backend::Backoff(int attempts, const HttpResponse& response) {
  if (response.retry_after.has_value()) {
    return std::min(*response.retry_after, options_.max_retry_after);
  }
  // Full jitter: uniform in [0, min(cap, initial * 2^(attempts-1))].
  absl::Duration ceiling =
      std::min(options_.max_backoff,
               options_.initial_backoff * (1 << std::min(attempts - 1, 16)));
  absl::MutexLock lock(&mu_);
  return absl::Seconds(
      absl::Uniform<double>(random_, 0.0, absl::ToDoubleSeconds(ceiling)));
}

void Backend::OnResponse(CallId id, HttpResponse response) {
  std::string outcome = OutcomeLabel(response);
  metrics_.BackendRequest(options_.name, outcome, response.elapsed);

  BackendReply reply;
  bool retry = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    const Call& call = it->second;
    reply.attempts = call.attempts;
    bool transport_ok = response.transport.ok();
    bool success =
        transport_ok && response.http_code >= 200 && response.http_code < 300;
    bool retryable =
        transport_ok
            ? IsRetryableHttpCode(response.http_code)
            : response.transport.code() != absl::StatusCode::kCancelled &&
                  response.transport.code() != absl::StatusCode::kInternal;
    retry = !success && retryable && !call.cancelled &&
            call.attempts < options_.max_attempts;
    if (success) {
      reply.body = std::move(response.body);
    } else if (call.cancelled) {
      reply.status = absl::CancelledError("request cancelled");
    } else if (transport_ok) {
      reply.status = StatusFromHttpError(response.http_code, response.body);
    } else {
      reply.status = response.transport;
    }
  }
  if (retry) {
    metrics_.BackendRetry(options_.name, outcome);
    StartAttempt(id, Backoff(reply.attempts, response));
    return;
  }
  FinishCall(id, std::move(reply));
}

void Backend::FinishCall(CallId id, BackendReply reply) {
  Done done;
  std::optional<CallId> next;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    done = std::move(it->second.done);
    calls_.erase(it);
    if (!waiting_.empty()) {
      next = waiting_.front();  // inherits the freed slot
      waiting_.pop_front();
    } else {
      --in_flight_;
    }
  }
  if (next.has_value()) {
    StartAttempt(*next, absl::ZeroDuration());
  } else {
    metrics_.BackendInFlight(options_.name, -1);
  }
  done(std::move(reply));
}

}  // namespace sdg
