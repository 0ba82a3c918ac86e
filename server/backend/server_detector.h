// What kind of server a backend is, asked of the server itself (GET
// /v1/models, then llama.cpp's GET /props at the server's root, one after the
// other on one connection), never found by sending a trial batch that could
// crash it. The answer decides batching (vLLM takes prompt lists), the
// in-flight cap (llama.cpp's slot count), whether a row's samples need one
// request each (llama.cpp refuses n > 1) and the default model.
#ifndef SDG_SERVER_BACKEND_SERVER_DETECTOR_H_
#define SDG_SERVER_BACKEND_SERVER_DETECTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/http_transport.h"

namespace sdg {

enum class ServerKind {
  kUnknown,           // no endpoint answered, or none was ready (503)
  kVllm,              // /v1/models says owned_by "vllm"
  kLlamaCpp,          // /props reports total_slots, or owned_by "llamacpp"
  kOpenAiCompatible,  // answered, but as neither of the above
};
// "unknown", "vllm", "llama.cpp", "openai-compatible": for logs.
absl::string_view ServerKindName(ServerKind kind);

// The server's root, where llama.cpp serves /props and vLLM and llama.cpp
// serve /tokenize: the base URL without /v1.
std::string ServerRoot(absl::string_view base_url);

struct ServerTraits {
  ServerKind kind = ServerKind::kUnknown;
  bool accepts_prompt_lists = false;  // vLLM
  // llama.cpp answers any n other than 1 with HTTP 500 ("Only one completion
  // choice is allowed").
  bool one_choice_per_request = false;
  std::optional<int> total_slots;  // llama.cpp
  // The model ids /v1/models lists (llama.cpp: its one model, the -m path).
  std::vector<std::string> models;
  // kUnknown: why no endpoint gave an answer; otherwise a warning for the
  // log (a refused API key), or empty.
  std::string error;
};

// What one endpoint's two replies say.
ServerTraits DetectServer(const HttpResponse& models,
                          const HttpResponse& props);

class ServerDetector {
 public:
  struct Options {
    // OpenAI base URLs (ending in /v1), asked in order until one answers.
    std::vector<std::string> base_urls;
    // The same without passwords, for errors (default: base_urls).
    std::vector<std::string> display_urls = {};
    // Sent with each request (the API key's Authorization header).
    std::vector<std::string> headers = {};
    absl::Duration timeout = absl::Seconds(10);
  };
  // Runs on the HTTP event loop thread, with no lock of the detector held.
  using Done = absl::AnyInvocable<void(const ServerTraits&)>;

  ServerDetector(Options options, HttpTransport& http);
  // Aborts a detection in progress and waits for its callbacks to return;
  // its `done` is not called.
  ~ServerDetector();

  ServerDetector(const ServerDetector&) = delete;
  ServerDetector& operator=(const ServerDetector&) = delete;

  // Asks the endpoints in turn, from the first, until one answers; then
  // calls `done` once with what it said (kUnknown if none answered). Does
  // nothing while a detection is running; when to ask again is the
  // caller's (Backend's) decision.
  void Start(Done done);

 private:
  // Sends GET /v1/models (is_models) or GET /props to `endpoint`.
  void AskLocked(int endpoint, bool is_models)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnReply(int endpoint, bool is_models, HttpResponse response);

  const Options options_;
  HttpTransport& http_;

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
  Done done_ ABSL_GUARDED_BY(mu_);
  // Callbacks not yet returned; the destructor waits for zero.
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // The request in flight (0: none).
  HttpTransport::RequestId request_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<HttpResponse> models_ ABSL_GUARDED_BY(mu_);
  // Why each endpoint asked so far gave no answer: "URL (error); ...".
  std::string errors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_SERVER_DETECTOR_H_
