#include "server/backend/server_detector.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
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
  EXPECT_EQ(traits.total_slots, 4);
}

TEST(DetectServerTest, OtherServersGetOneRequestPerRow) {
  ServerTraits traits =
      DetectServer(Reply(200, R"({"data":[{"id":"gpt","owned_by":"openai"}]})"),
                   Reply(404, "not found"));
  EXPECT_EQ(traits.kind, ServerKind::kOpenAiCompatible);
  EXPECT_FALSE(traits.accepts_prompt_lists);
  EXPECT_EQ(DetectServer(Reply(500, "{}"), Reply(404, "")).kind,
            ServerKind::kOpenAiCompatible);
}

TEST(DetectServerTest, ARefusedApiKeyIsUnknownSayingSoSoItIsAskedAgain) {
  for (long code : {401, 403}) {
    ServerTraits traits = DetectServer(Reply(code, "{}"), Reply(404, ""));
    EXPECT_EQ(traits.kind, ServerKind::kUnknown);
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
  std::unique_ptr<HttpClient> http_ = *HttpClient::Create({});
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

TEST_F(ServerDetectorTest, NoEndpointAnsweringIsUnknownAndAskedAgainWhenDue) {
  ServerDetector detector(
      {.base_urls = {DeadUrl(), DeadUrl()}, .retry_interval = absl::Hours(1)},
      *http_);
  TraitsWaiter first;
  detector.Start(first.Callback());
  ServerTraits traits = first.Await();
  EXPECT_EQ(traits.kind, ServerKind::kUnknown);
  EXPECT_NE(traits.error, "");

  // Not due for an hour: nothing is asked, nothing is reported.
  TraitsWaiter early;
  detector.RetryIfDue(early.Callback());
  EXPECT_EQ(early.calls(), 0);
}

TEST_F(ServerDetectorTest, AServerThatWasDownIsAskedAgain) {
  ServerDetector detector(
      {.base_urls = {DeadUrl()}, .retry_interval = absl::ZeroDuration()},
      *http_);
  TraitsWaiter first;
  detector.Start(first.Callback());
  EXPECT_EQ(first.Await().kind, ServerKind::kUnknown);

  TraitsWaiter again;
  detector.RetryIfDue(again.Callback());
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
