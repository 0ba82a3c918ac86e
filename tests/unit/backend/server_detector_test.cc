#include "server/backend/server_detector.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/http/event_loop.h"
#include "server/http/http_client.h"
#include "tests/testing/free_port.h"
#include "tests/testing/sim_thread.h"

namespace sdg {
namespace {

HttpResponse Reply(long code, std::string body) {
  HttpResponse response;
  response.http_code = code;
  response.body = std::move(body);
  return response;
}

HttpResponse Unreachable() {
  HttpResponse response;
  response.transport = absl::UnavailableError("connection refused");
  return response;
}

TEST(DetectServerTest, VllmAcceptsPromptLists) {
  ServerTraits traits =
      DetectServer(Reply(200, R"({"data":[{"id":"m","owned_by":"vllm"}]})"),
                   Reply(404, R"({"detail":"Not Found"})"));
  EXPECT_EQ(traits.kind, ServerKind::kVllm);
  EXPECT_TRUE(traits.accepts_prompt_lists);
  EXPECT_FALSE(traits.total_slots.has_value());
}

TEST(DetectServerTest, LlamaCppReportsItsSlots) {
  ServerTraits traits =
      DetectServer(Reply(200, R"({"data":[{"id":"m","owned_by":"llamacpp"}]})"),
                   Reply(200, R"({"total_slots":4,"model_path":"m.gguf"})"));
  EXPECT_EQ(traits.kind, ServerKind::kLlamaCpp);
  EXPECT_FALSE(traits.accepts_prompt_lists);
  EXPECT_TRUE(traits.one_choice_per_request);
  EXPECT_EQ(traits.total_slots, 4);
}

TEST(DetectServerTest, LlamaCppsOneModelIsRecordedAlongWithItsSlots) {
  ServerTraits traits = DetectServer(
      Reply(
          200,
          R"({"data":[{"id":"/models/granite.gguf","owned_by":"llamacpp"}]})"),
      Reply(200, R"({"total_slots":2})"));
  EXPECT_EQ(traits.kind, ServerKind::kLlamaCpp);
  EXPECT_EQ(traits.models, std::vector<std::string>{"/models/granite.gguf"});
}

TEST(DetectServerTest, OwnedByLlamaCppIsLlamaCppWithoutProps) {
  ServerTraits traits =
      DetectServer(Reply(200, R"({"data":[{"id":"m","owned_by":"llamacpp"}]})"),
                   Reply(404, ""));
  EXPECT_EQ(traits.kind, ServerKind::kLlamaCpp);
  EXPECT_TRUE(traits.one_choice_per_request);
  EXPECT_FALSE(traits.total_slots.has_value());
}

TEST(DetectServerTest, AServerStillLoadingItsModelIsNotReady) {
  const std::string loading =
      R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})";
  ServerTraits traits = DetectServer(Reply(503, loading), Reply(503, loading));
  EXPECT_EQ(traits.kind, ServerKind::kUnknown);
  EXPECT_EQ(traits.error,
            "HTTP 503 from /v1/models: Loading model (the server is not "
            "ready)");
  for (long code : {502, 504}) {
    EXPECT_EQ(DetectServer(Reply(code, "bad gateway"), Reply(404, "")).kind,
              ServerKind::kUnknown);
  }
}

TEST(DetectServerTest, OtherServersGetOneRequestPerRow) {
  ServerTraits traits =
      DetectServer(Reply(200, R"({"data":[{"id":"gpt","owned_by":"openai"}]})"),
                   Reply(404, "not found"));
  EXPECT_EQ(traits.kind, ServerKind::kOpenAiCompatible);
  EXPECT_FALSE(traits.accepts_prompt_lists);
  EXPECT_FALSE(traits.one_choice_per_request);
  EXPECT_EQ(traits.models, std::vector<std::string>{"gpt"});
  EXPECT_EQ(DetectServer(Reply(500, "{}"), Reply(404, "")).kind,
            ServerKind::kOpenAiCompatible);
}

// The server is there: its calls go out and fail with its own words, rather
// than wait for a detection that a wrong key never passes.
TEST(DetectServerTest, ARefusedApiKeyIsAnAnswerWithAWarning) {
  for (long code : {401, 403}) {
    ServerTraits traits = DetectServer(Reply(code, "{}"), Reply(404, ""));
    EXPECT_EQ(traits.kind, ServerKind::kOpenAiCompatible);
    EXPECT_EQ(traits.error,
              "HTTP " + std::to_string(code) +
                  " from /v1/models: the server refused the API key (see "
                  "--backend_api_key_file or SDG_BACKEND_API_KEY_<NAME>)");
  }
}

TEST(DetectServerTest, NoAnswerIsUnknownWithTheReason) {
  ServerTraits traits = DetectServer(Unreachable(), Unreachable());
  EXPECT_EQ(traits.kind, ServerKind::kUnknown);
  EXPECT_EQ(traits.error, "connection refused");
}

// Collects the traits ServerDetector reports (on the HTTP loop thread).
class TraitsWaiter {
 public:
  ServerDetector::Done Callback() {
    return [this](const ServerTraits& traits) {
      absl::MutexLock lock(&mu_);
      traits_ = traits;
      ++calls_;
    };
  }
  ServerTraits Await() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::optional<ServerTraits>* traits) {
          return traits->has_value();
        },
        &traits_));
    return *traits_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::optional<ServerTraits> traits_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

std::string DeadUrl() {
  return "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort()) +
         "/v1";
}

class ServerDetectorTest : public ::testing::Test {
 protected:
  std::unique_ptr<EventLoop> loop_ = *EventLoop::Create();
  std::unique_ptr<HttpClient> http_ = *HttpClient::Create({}, *loop_);
};

TEST_F(ServerDetectorTest, AsksTheNextEndpointWhenOneDoesNotAnswer) {
  testing::SimThread sim;
  ServerDetector detector({.base_urls = {DeadUrl(), sim.url()}}, *http_);
  TraitsWaiter waiter;
  detector.Start(waiter.Callback());
  ServerTraits traits = waiter.Await();
  EXPECT_EQ(traits.kind, ServerKind::kVllm);
  EXPECT_TRUE(traits.accepts_prompt_lists);
  EXPECT_EQ(sim.Stats()["discovery_requests"], 2);  // /v1/models and /props
}

// llama.cpp holds an HTTP thread per open connection: detection asks its two
// questions one after the other, on one connection.
TEST_F(ServerDetectorTest, AsksOnOneConnectionAtATime) {
  llmsim::SimServer::Options options;
  options.mode = llmsim::Mode::kLlamaCpp;
  options.slots = 3;
  testing::SimThread sim(options);
  ServerDetector detector({.base_urls = {sim.url()}}, *http_);
  TraitsWaiter waiter;
  detector.Start(waiter.Callback());
  ServerTraits traits = waiter.Await();
  EXPECT_EQ(traits.kind, ServerKind::kLlamaCpp);
  EXPECT_EQ(traits.total_slots, 3);
  EXPECT_EQ(traits.models, std::vector<std::string>{"m"});
  nlohmann::json stats = sim.Stats();
  EXPECT_EQ(stats["discovery_requests"], 2);
  EXPECT_EQ(stats["max_connections_open"], 1);
}

TEST_F(ServerDetectorTest, NoEndpointAnsweringIsUnknownWithTheReason) {
  ServerDetector detector({.base_urls = {DeadUrl(), DeadUrl()}}, *http_);
  TraitsWaiter first;
  detector.Start(first.Callback());
  ServerTraits traits = first.Await();
  EXPECT_EQ(traits.kind, ServerKind::kUnknown);
  EXPECT_NE(traits.error, "");
  EXPECT_EQ(first.calls(), 1);
}

TEST_F(ServerDetectorTest, ALoadingLlamaCppIsNotReadyAndMayBeAskedAgain) {
  llmsim::SimServer::Options options;
  options.mode = llmsim::Mode::kLlamaCpp;
  options.loading_ms = 60'000;  // longer than the test
  testing::SimThread loading(options);
  ServerDetector detector({.base_urls = {loading.url()}}, *http_);
  TraitsWaiter first;
  detector.Start(first.Callback());
  ServerTraits traits = first.Await();
  EXPECT_EQ(traits.kind, ServerKind::kUnknown);
  EXPECT_EQ(traits.error, loading.url() +
                              " (HTTP 503 from /v1/models: Loading model (the "
                              "server is not ready))");
  // /props is not asked of a server that is not ready.
  EXPECT_EQ(loading.Stats()["discovery_requests"], 1);

  // A detector may be started again once a detection has ended.
  TraitsWaiter again;
  detector.Start(again.Callback());
  EXPECT_EQ(again.Await().kind, ServerKind::kUnknown);
  EXPECT_EQ(again.calls(), 1);
}

TEST_F(ServerDetectorTest, DestroyingMidDetectionAbortsItWithoutReporting) {
  // A server that accepts connections (the kernel's backlog) and never
  // answers: the detection is still running when the detector goes.
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(
      bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
      0);
  ASSERT_EQ(listen(listener, 8), 0);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const std::string url =
      "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/v1";

  TraitsWaiter waiter;
  {
    ServerDetector detector({.base_urls = {url}}, *http_);
    detector.Start(waiter.Callback());
  }  // returns once both requests are aborted and their callbacks are done
  EXPECT_EQ(waiter.calls(), 0);
  close(listener);
}

}  // namespace
}  // namespace sdg
