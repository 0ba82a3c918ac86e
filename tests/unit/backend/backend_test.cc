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
#include "tests/testing/http_get.h"
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

// A backend with --backend_rate_limit, its budget on a clock the test
// moves by hand.
class RateLimitedBackendTest : public ::testing::Test {
 protected:
  void Create(RateLimits limits) {
    BackendOptions options;
    options.name = "hosted";
    options.base_urls = {"http://api.test/v1"};
    options.batching = BatchingMode::kOff;
    options.in_flight_mode = InFlightMode::kFixed;
    options.max_in_flight = 16;
    options.retry.max_attempts = 3;
    options.rate_limits = limits;
    options.budget_clock = [this] {
      absl::MutexLock lock(&clock_mu_);
      return now_;
    };
    backend_.emplace(std::move(options), transport_, metrics_);
  }
  ~RateLimitedBackendTest() override { backend_.reset(); }

  void Post(std::string body = R"({"prompt":"q"})") {
    backend_->Post("/completions", std::move(body),
                   [this](BackendReply reply) { replies_.push_back(reply); });
  }
  void Advance(absl::Duration by) {
    absl::MutexLock lock(&clock_mu_);
    now_ += by;
  }
  double Metric(const std::string& series) {
    return testing::MetricValue(metrics_.Serialize(), series);
  }

  absl::Mutex clock_mu_;
  absl::Time now_ ABSL_GUARDED_BY(clock_mu_) = absl::FromUnixSeconds(1000);
  Metrics metrics_;
  FakeTransport transport_;
  std::optional<Backend> backend_;
  std::vector<BackendReply> replies_;
};

// 60 requests a minute: one goes, the others wait in order for the budget
// (the backend says it is rate-limited); a timer armed for the refill
// sends the next when it fires, not before.
TEST_F(RateLimitedBackendTest, CallsWaitForTheRequestsBudgetAndGoInOrder) {
  Create(RateLimits{.requests = 60});
  Post(R"({"prompt":"first"})");
  Post(R"({"prompt":"second"})");
  Post(R"({"prompt":"third"})");
  ASSERT_EQ(transport_.pending(), 1u);
  EXPECT_EQ(transport_.Oldest().json_body, R"({"prompt":"first"})");
  EXPECT_THAT(transport_.timers_.ArmedDelays(), ElementsAre(absl::Seconds(1)));
  EXPECT_EQ(Metric(R"(sdg_backend_rate_limited{backend="hosted"})"), 1);

  // Woken early (no time passed): nothing more goes, the timer is armed
  // again.
  transport_.timers_.FireAll();
  EXPECT_EQ(transport_.pending(), 1u);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), ElementsAre(absl::Seconds(1)));

  Advance(absl::Seconds(1));
  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 2u);
  transport_.Answer(Reply(200));
  EXPECT_EQ(transport_.Oldest().json_body, R"({"prompt":"second"})");
  Advance(absl::Seconds(1));
  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 2u);
  transport_.Answer(Reply(200));
  transport_.Answer(Reply(200));
  EXPECT_EQ(replies_.size(), 3u);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), IsEmpty());
  // Two waits of one second each, over.
  EXPECT_EQ(Metric(R"(sdg_backend_rate_limited{backend="hosted"})"), 0);
  EXPECT_EQ(
      Metric(R"(sdg_backend_rate_limit_wait_seconds_total{backend="hosted"})"),
      2);
}

// A retry is a request too: a 429 retried after its backoff waits for the
// budget like any call.
TEST_F(RateLimitedBackendTest, ARetryWaitsForTheBudgetToo) {
  Create(RateLimits{.requests = 60});
  Post();
  transport_.Answer(Reply(429));
  // The backoff timer; when it fires the budget has no request left.
  ASSERT_EQ(transport_.timers_.ArmedDelays().size(), 1u);
  transport_.timers_.FireAll();
  EXPECT_EQ(transport_.pending(), 0u);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), ElementsAre(absl::Seconds(1)));
  Advance(absl::Seconds(1));
  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 1u);
  transport_.Answer(Reply(200));
  ASSERT_EQ(replies_.size(), 1u);
  EXPECT_EQ(replies_[0].attempts, 2);
}

// Tokens: the body's estimate and its max_tokens are reserved before it is
// sent, and the reply's usage settles them; a failed attempt gives its
// tokens back.
TEST_F(RateLimitedBackendTest, TokensAreReservedFromTheBodyAndSettledByUsage) {
  Create(RateLimits{.tokens = 6000});                            // 100 a second
  const std::string body = R"({"prompt":"q","max_tokens":40})";  // 31 bytes
  Post(body);
  ASSERT_EQ(transport_.pending(), 1u);
  const std::string available =
      R"(sdg_backend_budget_available{backend="hosted",budget="tokens"})";
  EXPECT_EQ(Metric(available), 100 - 8 - 40);
  transport_.Answer(Reply(
      200,
      R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":12}})"));
  EXPECT_EQ(Metric(available), 100 - 1 - 12);

  Post(body);
  EXPECT_EQ(Metric(available), 100 - 1 - 12 - 8 - 40);
  transport_.Answer(Reply(500));  // a failed attempt used nothing
  EXPECT_EQ(Metric(available), 100 - 1 - 12);
  // Its retry reserves again.
  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 1u);
  EXPECT_EQ(Metric(available), 100 - 1 - 12 - 8 - 40);
  transport_.Answer(Reply(200, "{}"));  // no usage: taken as reserved
  EXPECT_EQ(Metric(available), 100 - 1 - 12 - 8 - 40);
  EXPECT_EQ(replies_.size(), 2u);
}

// No budget configured: a reply saying the API's requests are used up
// (x-ratelimit-remaining-requests 0) holds the calls until its reset.
TEST_F(RateLimitedBackendTest, AServerSayingItsLimitIsUsedUpHoldsTheCalls) {
  Create(RateLimits{});
  Post();
  Post();
  ASSERT_EQ(transport_.pending(), 2u);
  HttpResponse used_up = Reply(200);
  used_up.rate_limit.remaining_requests = 0;
  used_up.rate_limit.reset_requests = absl::Seconds(2);
  transport_.Answer(used_up);
  transport_.Answer(Reply(200));
  Post();
  EXPECT_EQ(transport_.pending(), 0u);
  EXPECT_THAT(transport_.timers_.ArmedDelays(), ElementsAre(absl::Seconds(2)));
  Advance(absl::Seconds(2));
  transport_.timers_.FireAll();
  ASSERT_EQ(transport_.pending(), 1u);
  transport_.Answer(Reply(200));
  EXPECT_EQ(replies_.size(), 3u);
}

}  // namespace
}  // namespace sdg
