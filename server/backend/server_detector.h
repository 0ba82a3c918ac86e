// What kind of server a backend is, asked of the server itself (GET
// /v1/models, and llama.cpp's GET /props at the server's root), never found by
// sending a trial batch that could crash it. The answer decides batching
// (vLLM takes prompt lists) and the in-flight cap (llama.cpp's slot count).
#ifndef SDG_SERVER_BACKEND_SERVER_DETECTOR_H_
#define SDG_SERVER_BACKEND_SERVER_DETECTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/http_client.h"

namespace sdg {

enum class ServerKind {
  kUnknown,           // no endpoint answered
  kVllm,              // /v1/models says owned_by "vllm"
  kLlamaCpp,          // /props reports total_slots
  kOpenAiCompatible,  // answered, but as neither of the above
};
// "unknown", "vllm", "llama.cpp", "openai-compatible": for logs.
absl::string_view ServerKindName(ServerKind kind);

struct ServerTraits {
  ServerKind kind = ServerKind::kUnknown;
  bool accepts_prompt_lists = false;  // vLLM
  std::optional<int> total_slots;     // llama.cpp
  // The model ids /v1/models lists.
  std::vector<std::string> models;
  // kUnknown: why the endpoint did not answer (for the warning in the log).
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
    // Sent with each request (the API key's Authorization header).
    std::vector<std::string> headers = {};
    absl::Duration timeout = absl::Seconds(10);
    // After a detection where no endpoint answered, RetryIfDue asks again
    // no sooner than this.
    absl::Duration retry_interval = absl::Seconds(10);
  };
  // Runs on the HTTP event loop thread, with no lock of the detector held.
  using Done = absl::AnyInvocable<void(const ServerTraits&)>;

  ServerDetector(Options options, HttpClient& http);
  // Aborts a detection in progress and waits for its callbacks to return;
  // its `done` is not called.
  ~ServerDetector();

  ServerDetector(const ServerDetector&) = delete;
  ServerDetector& operator=(const ServerDetector&) = delete;

  // Asks the endpoints in turn, from the first, until one answers; then
  // calls `done` once with what it said (kUnknown if none answered). Does
  // nothing while a detection is running.
  void Start(Done done);
  // Start, but only if the last detection found nothing and ended at least
  // retry_interval ago: a server that was down when sdgd started is asked
  // again now and then.
  void RetryIfDue(Done done);

 private:
  void AskEndpointLocked(int endpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnReply(int endpoint, bool is_models, HttpResponse response);

  const Options options_;
  HttpClient& http_;

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
  Done done_ ABSL_GUARDED_BY(mu_);
  // Callbacks not yet returned; the destructor waits for zero.
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<HttpClient::RequestId> requests_ ABSL_GUARDED_BY(mu_);
  std::optional<HttpResponse> models_ ABSL_GUARDED_BY(mu_);
  std::optional<HttpResponse> props_ ABSL_GUARDED_BY(mu_);
  // When a detection last ended with no answer.
  std::optional<absl::Time> last_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_BACKEND_SERVER_DETECTOR_H_
