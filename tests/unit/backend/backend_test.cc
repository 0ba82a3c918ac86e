// Backend through a fake transport: the test answers each request and
// fires each timer itself, so retries, Retry-After and cancellation are
// seen step by step, with no server and no clock.
#include "server/backend/backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/testing/manual_timers.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Requests wait until the test answers them, oldest first; timers wait
// until it fires them. Callbacks run on the test's thread.
class FakeTransport final : public HttpTransport {
 public:
  RequestId Start(HttpRequest request, DoneCallback done) override {
    absl::MutexLock lock(&mu_);
    const RequestId id = next_id_++;
    pending_.push_back({id, std::move(request), std::move(done)});
    return id;
  }
  void Cancel(RequestId id) override {
    absl::MutexLock lock(&mu_);
    cancelled_.push_back(id);
  }
  TimerService& timers() override { return timers_; }

  size_t pending() {
    absl::MutexLock lock(&mu_);
    return pending_.size();
  }
  std::vector<RequestId> cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  // The oldest request still waiting.
  HttpRequest Oldest() {
    absl::MutexLock lock(&mu_);
    return pending_.front().request;
  }
  RequestId OldestId() {
    absl::MutexLock lock(&mu_);
    return pending_.front().id;
  }
  // Ends the oldest request with `response`.
  void Answer(HttpResponse response) {
    Pending answered;
    {
      absl::MutexLock lock(&mu_);
      answered = std::move(pending_.front());
      pending_.pop_front();
    }
    answered.done(std::move(response));
  }

  testing::ManualTimers timers_;

 private:
  struct Pending {
    RequestId id = 0;
    HttpRequest request;
    DoneCallback done;
  };
  absl::Mutex mu_;
  RequestId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> cancelled_ ABSL_GUARDED_BY(mu_);
};

HttpResponse Reply(long code, std::string body = "{}") {
  HttpResponse response;
  response.http_code = code;
  response.body = std::move(body);
  return response;
}

class BackendTest : public ::testing::Test {
 protected:
  BackendTest() {
    BackendOptions options;
    options.name = "fake";
    options.base_urls = {"http://model.test/v1"};
    // Neither kAuto: no detection requests before the calls.
    options.batching = BatchingMode::kOn;
    options.in_flight_mode = InFlightMode::kFixed;
    options.max_in_flight = 4;
    options.retry.max_attempts = 3;
    backend_.emplace(std::move(options), transport_, metrics_);
  }
  ~BackendTest() override { backend_.reset(); }

  // Posts a call whose reply lands in `reply_`.
  Backend::CallId Post() {
    return backend_->Post("/completions", R"({"prompt":"q"})",
                          [this](BackendReply reply) { reply_ = reply; });
  }

  Metrics metrics_;
  FakeTransport transport_;
  std::optional<Backend> backend_;
  std::optional<BackendReply> reply_;
};

TEST_F(BackendTest, ACallIsPostedToTheEndpointWithItsBody) {
  Post();
  ASSERT_EQ(transport_.pending(), 1u);
  const HttpRequest sent = transport_.Oldest();
  EXPECT_EQ(sent.url, "http://model.test/v1/completions");
  EXPECT_EQ(sent.json_body, R"({"prompt":"q"})");
  EXPECT_EQ(sent.max_connections, 4);
  transport_.Answer(Reply(200, R"({"choices":[]})"));
  ASSERT_TRUE(reply_.has_value());
  EXPECT_TRUE(reply_->status.ok()) << reply_->status;
  EXPECT_EQ(reply_->body, R"({"choices":[]})");
  EXPECT_EQ(reply_->attempts, 1);
}

// A 429 with Retry-After: nothing reaches the caller, the next attempt
// waits for a timer of exactly the server's delay, and its answer does.
TEST_F(BackendTest, AThrottledAttemptIsSentAgainAfterTheServersRetryAfter) {
  Post();
  HttpResponse throttled = Reply(429);
  throttled.retry_after = absl::Seconds(2);
  transport_.Answer(std::move(throttled));
  EXPECT_FALSE(reply_.has_value());
  EXPECT_EQ(transport_.pending(), 0u);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), ElementsAre(absl::Seconds(2)));

  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 1u);
  EXPECT_EQ(transport_.Oldest().json_body, R"({"prompt":"q"})");
  transport_.Answer(Reply(200, R"({"choices":[]})"));
  ASSERT_TRUE(reply_.has_value());
  EXPECT_TRUE(reply_->status.ok()) << reply_->status;
  EXPECT_EQ(reply_->attempts, 2);
}

// The last of max_attempts ends the call with the last attempt's reason.
TEST_F(BackendTest, AttemptsStopAtTheLimitWithTheLastFailure) {
  Post();
  for (int attempt = 1; attempt <= 3; ++attempt) {
    ASSERT_EQ(transport_.pending(), 1u) << "attempt " << attempt;
    transport_.Answer(Reply(429, R"({"error":"slow down"})"));
    transport_.timers_.FireAll();
  }
  ASSERT_TRUE(reply_.has_value());
  EXPECT_EQ(reply_->attempts, 3);
  EXPECT_EQ(reply_->status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reply_->status.message(),
            R"(backend returned HTTP 429: {"error":"slow down"})");
  EXPECT_EQ(transport_.pending(), 0u);
}

TEST_F(BackendTest, ARequestTheServerRefusesIsNotSentAgain) {
  Post();
  transport_.Answer(Reply(400, R"({"error":"bad prompt"})"));
  ASSERT_TRUE(reply_.has_value());
  EXPECT_EQ(reply_->attempts, 1);
  EXPECT_EQ(reply_->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reply_->status.message(),
            R"(backend returned HTTP 400: {"error":"bad prompt"})");
  EXPECT_THAT(transport_.timers_.ArmedDelays(), IsEmpty());
  EXPECT_EQ(transport_.pending(), 0u);
}

// Cancel reaches the request in flight; its CANCELLED end completes the
// call once, and nothing is retried.
TEST_F(BackendTest, ACancelledCallCancelsItsRequestAndIsNotRetried) {
  const Backend::CallId call = Post();
  const HttpTransport::RequestId request = transport_.OldestId();
  backend_->Cancel(call);
  EXPECT_THAT(transport_.cancelled(), ElementsAre(request));
  HttpResponse cancelled;
  cancelled.transport = absl::CancelledError("request cancelled");
  transport_.Answer(std::move(cancelled));
  ASSERT_TRUE(reply_.has_value());
  EXPECT_EQ(reply_->status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), IsEmpty());
  EXPECT_EQ(transport_.pending(), 0u);
}

}  // namespace
}  // namespace sdg
