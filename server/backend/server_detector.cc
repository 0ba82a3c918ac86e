#include "server/backend/server_detector.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sdg {
namespace {

bool IsHttpReply(const HttpResponse& response, long code) {
  return response.transport.ok() && response.http_code == code;
}

// The server's root, where llama.cpp serves /props: the base URL without /v1.
std::string ServerRoot(absl::string_view base_url) {
  absl::string_view root = base_url;
  if (absl::EndsWith(root, "/v1")) root.remove_suffix(3);
  return std::string(root);
}

}  // namespace

absl::string_view ServerKindName(ServerKind kind) {
  switch (kind) {
    case ServerKind::kVllm:
      return "vllm";
    case ServerKind::kLlamaCpp:
      return "llama.cpp";
    case ServerKind::kOpenAiCompatible:
      return "openai-compatible";
    case ServerKind::kUnknown:
      break;
  }
  return "unknown";
}

ServerTraits DetectServer(const HttpResponse& models,
                          const HttpResponse& props) {
  ServerTraits traits;
  if (IsHttpReply(props, 200)) {
    nlohmann::json json = nlohmann::json::parse(props.body, nullptr, false);
    if (json.is_object() && json.contains("total_slots") &&
        json["total_slots"].is_number_integer() &&
        json["total_slots"].get<int>() > 0) {
      traits.kind = ServerKind::kLlamaCpp;
      traits.total_slots = json["total_slots"].get<int>();
      return traits;
    }
  }
  if (IsHttpReply(models, 200)) {
    traits.kind = ServerKind::kOpenAiCompatible;
    nlohmann::json json = nlohmann::json::parse(models.body, nullptr, false);
    if (json.is_object() && json.contains("data") && json["data"].is_array()) {
      for (const nlohmann::json& model : json["data"]) {
        if (model.is_object() && model.contains("id") &&
            model["id"].is_string()) {
          traits.models.push_back(model["id"].get<std::string>());
        }
        if (model.is_object() && model.value("owned_by", "") == "vllm") {
          traits.kind = ServerKind::kVllm;
          traits.accepts_prompt_lists = true;
        }
      }
    }
    return traits;
  }
  if (IsHttpReply(models, 401) || IsHttpReply(models, 403)) {
    // A wrong API key: the server is there but will not say what it is.
    // Detection is asked again later (RetryIfDue), as for a server down.
    traits.error =
        absl::StrCat("HTTP ", models.http_code,
                     " from /v1/models: the server refused the API key (see "
                     "--backend_api_key_file or SDG_BACKEND_API_KEY_<NAME>)");
  } else if (models.transport.ok() || props.transport.ok()) {
    traits.kind =
        ServerKind::kOpenAiCompatible;  // it answered, if not usefully
  } else {
    traits.error = std::string(models.transport.message());
  }
  return traits;
}

ServerDetector::ServerDetector(Options options, HttpClient& http)
    : options_(std::move(options)), http_(http) {}

ServerDetector::~ServerDetector() {
  absl::MutexLock lock(&mu_);
  destroying_ = true;
  for (HttpClient::RequestId id : requests_) http_.Cancel(id);
  auto returned = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outstanding_ == 0;
  };
  mu_.Await(absl::Condition(&returned));
}

void ServerDetector::Start(Done done) {
  absl::MutexLock lock(&mu_);
  if (running_ || destroying_ || options_.base_urls.empty()) return;
  running_ = true;
  done_ = std::move(done);
  AskEndpointLocked(0);
}

void ServerDetector::RetryIfDue(Done done) {
  {
    absl::MutexLock lock(&mu_);
    if (!last_failure_.has_value() ||
        absl::Now() - *last_failure_ < options_.retry_interval) {
      return;
    }
  }
  Start(std::move(done));
}

void ServerDetector::AskEndpointLocked(int endpoint) {
  models_.reset();
  props_.reset();
  requests_.clear();
  const std::string& base = options_.base_urls[endpoint];
  for (bool is_models : {true, false}) {
    HttpRequest request;
    request.url = is_models ? absl::StrCat(base, "/models")
                            : absl::StrCat(ServerRoot(base), "/props");
    request.timeout = options_.timeout;
    request.headers = options_.headers;
    ++outstanding_;
    // The id is recorded before the callback can take mu_.
    requests_.push_back(http_.Start(
        std::move(request), [this, endpoint, is_models](HttpResponse response) {
          OnReply(endpoint, is_models, std::move(response));
        }));
  }
}

void ServerDetector::OnReply(int endpoint, bool is_models,
                             HttpResponse response) {
  Done done;
  ServerTraits traits;
  {
    absl::MutexLock lock(&mu_);
    (is_models ? models_ : props_) = std::move(response);
    if (!destroying_ && models_.has_value() && props_.has_value()) {
      traits = DetectServer(*models_, *props_);
      const bool more =
          endpoint + 1 < static_cast<int>(options_.base_urls.size());
      if (traits.kind == ServerKind::kUnknown && more) {
        AskEndpointLocked(endpoint + 1);
      } else {
        running_ = false;
        last_failure_ = traits.kind == ServerKind::kUnknown
                            ? std::optional<absl::Time>(absl::Now())
                            : std::nullopt;
        done = std::move(done_);
      }
    }
  }
  if (done) done(traits);
  // Counted down only now, so that the destructor also waits for `done`.
  absl::MutexLock lock(&mu_);
  --outstanding_;
}

}  // namespace sdg
