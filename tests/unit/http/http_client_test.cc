// The text of a failed connection, the connections kept open per server,
// and what a client leaving its loop does to requests in flight; transfers
// are covered against llmsim by the backend and integration tests.
#include "server/http/http_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "tests/testing/eventually.h"
#include "tests/testing/sim_thread.h"

namespace sdg {
namespace {

TEST(ReadHeaderLineTest, ReadsRetryAfterAndAHostedApisRateLimitHeaders) {
  HttpResponse response;
  for (const char* line :
       {"Retry-After: 3\r\n", "x-ratelimit-limit-requests: 500\r\n",
        "x-ratelimit-remaining-requests: 0\r\n",
        "X-RateLimit-Remaining-Tokens: 1234\r\n",
        "x-ratelimit-reset-requests: 1.5s\r\n",
        "x-ratelimit-reset-tokens: 6m0s\r\n", "HTTP/1.1 429 Too Many\r\n",
        "x-ratelimit-reset-requests-bad: soon\r\n"}) {
    ReadHeaderLine(line, response);
  }
  EXPECT_EQ(response.retry_after, absl::Seconds(3));
  EXPECT_EQ(response.rate_limit.remaining_requests, 0);
  EXPECT_EQ(response.rate_limit.remaining_tokens, 1234);
  EXPECT_EQ(response.rate_limit.reset_requests, absl::Milliseconds(1500));
  EXPECT_EQ(response.rate_limit.reset_tokens, absl::Minutes(6));

  HttpResponse unreadable;
  ReadHeaderLine("x-ratelimit-reset-tokens: soon\r\n", unreadable);
  ReadHeaderLine("x-ratelimit-remaining-tokens: many\r\n", unreadable);
  EXPECT_FALSE(unreadable.rate_limit.reset_tokens.has_value());
  EXPECT_FALSE(unreadable.rate_limit.remaining_tokens.has_value());
}

// Against llmsim --rpm: its replies carry the headers, through curl.
TEST(ReadHeaderLineTest, LlmsimsRateLimitHeadersArriveThroughTheClient) {
  llmsim::SimServer::Options options;
  // A bucket of 2 requests, refilled by one a minute: the third is
  // refused however slowly the three are sent.
  options.rpm = 1;
  options.rate_window_s = 120;
  testing::SimThread sim(options);
  std::unique_ptr<EventLoop> loop = *EventLoop::Create();
  std::unique_ptr<HttpClient> http = *HttpClient::Create({}, *loop);
  std::vector<HttpResponse> responses;
  for (int i = 0; i < 3; ++i) {
    absl::Notification done;
    HttpRequest request;
    request.url = sim.url() + "/completions";
    request.json_body = R"({"model":"m","prompt":"q"})";
    http->Start(std::move(request), [&](HttpResponse reply) {
      responses.push_back(std::move(reply));
      done.Notify();
    });
    done.WaitForNotification();
  }
  EXPECT_EQ(responses[0].http_code, 200);
  EXPECT_EQ(responses[0].rate_limit.remaining_requests, 1);
  EXPECT_EQ(responses[1].rate_limit.remaining_requests, 0);
  EXPECT_EQ(responses[2].http_code, 429);
  ASSERT_TRUE(responses[2].rate_limit.reset_requests.has_value());
  EXPECT_GT(*responses[2].rate_limit.reset_requests, absl::ZeroDuration());
}

TEST(HttpClientErrorsTest, AFailedConnectionReadsTheSameEveryTime) {
  // curl says "... port 1 after N ms: ..."; N varies from one attempt to the
  // next, and rows that failed alike must carry one message.
  std::unique_ptr<EventLoop> loop = *EventLoop::Create();
  std::unique_ptr<HttpClient> http = *HttpClient::Create({}, *loop);
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::Notification done;
    HttpResponse response;
    HttpRequest request;
    request.url = "http://127.0.0.1:1/v1/models";
    http->Start(std::move(request), [&](HttpResponse reply) {
      response = std::move(reply);
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_EQ(response.transport.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(std::string(response.transport.message()),
              "Failed to connect to 127.0.0.1 port 1: Couldn't connect to "
              "server (http://127.0.0.1:1/v1/models)");
  }
}

// Sends `count` completions requests at once, each allowed `max_connections`,
// and waits for their replies.
void SendAndWait(HttpClient& http, const std::string& base_url, int count,
                 std::optional<int> max_connections) {
  absl::Mutex mu;
  int left = count;
  for (int i = 0; i < count; ++i) {
    HttpRequest request;
    request.url = base_url + "/completions";
    request.json_body = R"({"model":"m","prompt":"hi"})";
    request.max_connections = max_connections;
    http.Start(std::move(request), [&](HttpResponse response) {
      EXPECT_EQ(response.http_code, 200) << response.transport;
      absl::MutexLock lock(&mu);
      --left;
    });
  }
  absl::MutexLock lock(&mu);
  mu.Await(absl::Condition(
      +[](int* left) { return *left == 0; }, &left));
}

TEST(HttpClientConnectionsTest, ALoweredCapClosesTheConnectionsAboveIt) {
  testing::SimThread sim(testing::WithLatency(absl::Milliseconds(50)));
  std::unique_ptr<EventLoop> loop = *EventLoop::Create();
  std::unique_ptr<HttpClient> http = *HttpClient::Create({}, *loop);
  SendAndWait(*http, sim.url(), 4, 4);  // four busy at once: four opened
  EXPECT_EQ(sim.Stats()["max_connections_open"], 4);
  EXPECT_EQ(sim.Stats()["connections_open"], 4);  // idle, kept alive

  // Now one at a time under a cap of one: each request past the cap closes
  // the connection it used, until one is left, which is kept.
  for (int i = 0; i < 5; ++i) SendAndWait(*http, sim.url(), 1, 1);
  EXPECT_TRUE(testing::Eventually([&] {
    return sim.Stats()["connections_open"] == 1;
  })) << sim.Stats().dump();
  EXPECT_EQ(sim.Stats()["max_connections_open"], 4);
}

TEST(HttpClientConnectionsTest, RequestsInFlightUnderACapOpenNoMoreThanIt) {
  testing::SimThread sim(testing::WithLatency(absl::Milliseconds(20)));
  std::unique_ptr<EventLoop> loop = *EventLoop::Create();
  std::unique_ptr<HttpClient> http = *HttpClient::Create({}, *loop);
  for (int round = 0; round < 5; ++round) {
    SendAndWait(*http, sim.url(), 2, 2);
  }
  EXPECT_EQ(sim.Stats()["max_connections_open"], 2);
}

TEST(HttpClientShutdownTest, DestroyingTheClientCancelsRequestsInFlight) {
  // llmsim answers after an hour: the request is in flight when the client
  // goes, and its callback runs with CANCELLED before the destructor
  // returns. The loop runs on, for its timers' other users.
  testing::SimThread sim(testing::WithLatency(absl::Hours(1)));
  std::unique_ptr<EventLoop> loop = *EventLoop::Create();
  std::unique_ptr<HttpClient> http = *HttpClient::Create({}, *loop);
  HttpResponse response;
  HttpRequest request;
  request.url = sim.url() + "/completions";
  request.json_body = R"({"model":"m","prompt":"hi"})";
  http->Start(std::move(request),
              [&](HttpResponse reply) { response = std::move(reply); });
  ASSERT_TRUE(testing::Eventually([&] {
    return sim.Stats()["in_flight"] == 1;
  })) << sim.Stats().dump();
  http.reset();
  EXPECT_EQ(response.transport.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(response.transport.message(), "HTTP client is shutting down");

  absl::Notification ran;
  loop->RunAfter(absl::ZeroDuration(), [&] { ran.Notify(); });
  ran.WaitForNotification();
}

}  // namespace
}  // namespace sdg
