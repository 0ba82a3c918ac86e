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

// 502, 503 or 504: no server ready behind the URL yet.
bool IsNotReady(const HttpResponse& response) {
  return response.transport.ok() &&
         (response.http_code == 502 || response.http_code == 503 ||
          response.http_code == 504);
}

// The server's own message from an OpenAI-style error body, else the body's
// first bytes.
std::string ErrorMessage(const HttpResponse& response) {
  nlohmann::json json = nlohmann::json::parse(response.body, nullptr, false);
  if (json.is_object() && json.contains("error") && json["error"].is_object() &&
      json["error"].contains("message") &&
      json["error"]["message"].is_string()) {
    return json["error"]["message"].get<std::string>();
  }
  return response.body.substr(0, 200);
}

}  // namespace

std::string ServerRoot(absl::string_view base_url) {
  absl::string_view root = base_url;
  if (absl::EndsWith(root, "/v1")) root.remove_suffix(3);
  return std::string(root);
}

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
  if (IsNotReady(models)) {
    // llama.cpp answers 503 ("Loading model") to everything while it loads;
    // a proxy in front of a server that is not there answers 502 or 504.
    traits.error = absl::StrCat("HTTP ", models.http_code,
                                " from /v1/models: ", ErrorMessage(models),
                                " (the server is not ready)");
    return traits;
  }
  if (IsHttpReply(models, 200)) {
    traits.kind = ServerKind::kOpenAiCompatible;
    nlohmann::json json = nlohmann::json::parse(models.body, nullptr, false);
    if (json.is_object() && json.contains("data") && json["data"].is_array()) {
      for (const nlohmann::json& model : json["data"]) {
        if (!model.is_object()) continue;
        if (model.contains("id") && model["id"].is_string()) {
          traits.models.push_back(model["id"].get<std::string>());
        }
        const std::string owned_by = model.value("owned_by", "");
        if (owned_by == "vllm") traits.kind = ServerKind::kVllm;
        if (owned_by == "llamacpp") traits.kind = ServerKind::kLlamaCpp;
      }
    }
  } else if (IsHttpReply(models, 401) || IsHttpReply(models, 403)) {
    // A wrong API key: the server is there but will not say what it is. Its
    // calls go out and fail with the server's own words; sdgd says why at
    // start.
    traits.kind = ServerKind::kOpenAiCompatible;
    traits.error =
        absl::StrCat("HTTP ", models.http_code,
                     " from /v1/models: the server refused the API key (see "
                     "--backend_api_key_file or SDG_BACKEND_API_KEY_<NAME>)");
  } else if (models.transport.ok() || props.transport.ok()) {
    traits.kind =
        ServerKind::kOpenAiCompatible;  // it answered, if not usefully
  } else {
    traits.error = std::string(models.transport.message());
    return traits;
  }
  if (IsHttpReply(props, 200)) {
    nlohmann::json json = nlohmann::json::parse(props.body, nullptr, false);
    if (json.is_object() && json.contains("total_slots") &&
        json["total_slots"].is_number_integer() &&
        json["total_slots"].get<int>() > 0) {
      traits.kind = ServerKind::kLlamaCpp;
      traits.total_slots = json["total_slots"].get<int>();
    }
  }
  traits.accepts_prompt_lists = traits.kind == ServerKind::kVllm;
  traits.one_choice_per_request = traits.kind == ServerKind::kLlamaCpp;
  return traits;
}

ServerDetector::ServerDetector(Options options, HttpTransport& http)
    : options_(std::move(options)), http_(http) {}

ServerDetector::~ServerDetector() {
  absl::MutexLock lock(&mu_);
  destroying_ = true;
  if (request_ != 0) http_.Cancel(request_);
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
  errors_.clear();
  AskLocked(0, /*is_models=*/true);
}

void ServerDetector::AskLocked(int endpoint, bool is_models) {
  const std::string& base = options_.base_urls[endpoint];
  HttpRequest request;
  request.url = is_models ? absl::StrCat(base, "/models")
                          : absl::StrCat(ServerRoot(base), "/props");
  request.timeout = options_.timeout;
  request.headers = options_.headers;
  ++outstanding_;
  // The id is recorded before the callback can take mu_.
  request_ = http_.Start(std::move(request),
                         [this, endpoint, is_models](HttpResponse response) {
                           OnReply(endpoint, is_models, std::move(response));
                         });
}

void ServerDetector::OnReply(int endpoint, bool is_models,
                             HttpResponse response) {
  Done done;
  ServerTraits traits;
  {
    absl::MutexLock lock(&mu_);
    request_ = 0;
    if (destroying_) {
      // The destructor waits for this callback; nothing more is asked.
    } else if (is_models && response.transport.ok() && !IsNotReady(response)) {
      // /props next, on the connection /v1/models used: a server with few
      // HTTP threads is never asked on two connections at once.
      models_ = std::move(response);
      AskLocked(endpoint, /*is_models=*/false);
    } else {
      // An endpoint that is not there, or not ready, is not asked for
      // /props.
      traits = is_models ? DetectServer(response, response)
                         : DetectServer(*models_, response);
      models_.reset();
      if (traits.kind == ServerKind::kUnknown) {
        const std::string& url =
            endpoint < static_cast<int>(options_.display_urls.size())
                ? options_.display_urls[endpoint]
                : options_.base_urls[endpoint];
        absl::StrAppend(&errors_, errors_.empty() ? "" : "; ", url, " (",
                        traits.error, ")");
        traits.error = errors_;
      }
      const bool more =
          endpoint + 1 < static_cast<int>(options_.base_urls.size());
      if (traits.kind == ServerKind::kUnknown && more) {
        AskLocked(endpoint + 1, /*is_models=*/true);
      } else {
        running_ = false;
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
