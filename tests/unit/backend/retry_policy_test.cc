#include "server/backend/retry_policy.h"

#include <gtest/gtest.h>

#include <random>

namespace sdg {
namespace {

HttpResponse Http(long code) {
  HttpResponse response;
  response.http_code = code;
  return response;
}

HttpResponse Transport(absl::Status status) {
  HttpResponse response;
  response.transport = std::move(status);
  return response;
}

TEST(RetryPolicyTest, RetriesTransportFailuresAndTheStatusesOpenAiRetries) {
  for (long code : {408, 409, 429, 500, 502, 503, 504}) {
    EXPECT_TRUE(RetryPolicy::IsRetryable(Http(code))) << code;
  }
  EXPECT_TRUE(RetryPolicy::IsRetryable(
      Transport(absl::UnavailableError("connection refused"))));
  EXPECT_TRUE(
      RetryPolicy::IsRetryable(Transport(absl::DeadlineExceededError("t"))));
}

TEST(RetryPolicyTest, DoesNotRetrySuccessOtherClientErrorsOrCancellation) {
  for (long code : {200, 400, 401, 403, 404, 422}) {
    EXPECT_FALSE(RetryPolicy::IsRetryable(Http(code))) << code;
  }
  EXPECT_FALSE(RetryPolicy::IsRetryable(Transport(absl::CancelledError("c"))));
  EXPECT_FALSE(
      RetryPolicy::IsRetryable(Transport(absl::InternalError("setopt"))));
}

TEST(RetryPolicyTest, TheAttemptBudgetCountsTheFirstAttempt) {
  RetryPolicy policy({.max_attempts = 3});
  EXPECT_TRUE(policy.ShouldRetry(Http(503), 1));
  EXPECT_TRUE(policy.ShouldRetry(Http(503), 2));
  EXPECT_FALSE(policy.ShouldRetry(Http(503), 3));
  EXPECT_FALSE(policy.ShouldRetry(Http(400), 1));
  EXPECT_FALSE(RetryPolicy({.max_attempts = 1}).ShouldRetry(Http(503), 1));
}

TEST(RetryPolicyTest, FullJitterStaysWithinTheDoublingCeiling) {
  RetryPolicy policy({.initial_backoff = absl::Milliseconds(500),
                      .max_backoff = absl::Seconds(8)});
  std::mt19937_64 random(7);
  // attempts -> ceiling: 0.5 s, 1 s, 2 s, 4 s, then capped at 8 s.
  const absl::Duration ceilings[] = {absl::Milliseconds(500), absl::Seconds(1),
                                     absl::Seconds(2),        absl::Seconds(4),
                                     absl::Seconds(8),        absl::Seconds(8)};
  for (int attempts = 1; attempts <= 6; ++attempts) {
    absl::Duration lowest = absl::InfiniteDuration();
    absl::Duration highest = absl::ZeroDuration();
    for (int i = 0; i < 2000; ++i) {
      absl::Duration delay = policy.Backoff(attempts, Http(503), random);
      lowest = std::min(lowest, delay);
      highest = std::max(highest, delay);
    }
    const absl::Duration ceiling = ceilings[attempts - 1];
    EXPECT_GE(lowest, absl::ZeroDuration());
    EXPECT_LE(highest, ceiling) << "attempts " << attempts;
    // Spread over the whole range, not bunched near one end.
    EXPECT_LT(lowest, ceiling / 20) << "attempts " << attempts;
    EXPECT_GT(highest, ceiling * 19 / 20) << "attempts " << attempts;
  }
}

TEST(RetryPolicyTest, AManyAttemptCallNeverOverflowsTheCeiling) {
  RetryPolicy policy({.initial_backoff = absl::Milliseconds(500),
                      .max_backoff = absl::Seconds(8)});
  std::mt19937_64 random(1);
  for (int i = 0; i < 100; ++i) {
    EXPECT_LE(policy.Backoff(1000, Http(503), random), absl::Seconds(8));
  }
}

TEST(RetryPolicyTest, RetryAfterWinsUpToItsCap) {
  RetryPolicy policy(
      {.max_backoff = absl::Seconds(8), .max_retry_after = absl::Seconds(120)});
  std::mt19937_64 random(1);
  HttpResponse told = Http(429);
  told.retry_after = absl::Seconds(30);  // longer than max_backoff: honoured
  EXPECT_EQ(policy.Backoff(1, told, random), absl::Seconds(30));
  told.retry_after = absl::Hours(1);
  EXPECT_EQ(policy.Backoff(1, told, random), absl::Seconds(120));
  told.retry_after = absl::ZeroDuration();
  EXPECT_EQ(policy.Backoff(1, told, random), absl::ZeroDuration());
}

TEST(RetryPolicyTest, OutcomeLabelsNameTheStatusOrTheTransportFailure) {
  EXPECT_EQ(RetryPolicy::OutcomeLabel(Http(503)), "503");
  EXPECT_EQ(
      RetryPolicy::OutcomeLabel(Transport(absl::DeadlineExceededError(""))),
      "timeout");
  EXPECT_EQ(RetryPolicy::OutcomeLabel(Transport(absl::CancelledError(""))),
            "cancelled");
  EXPECT_EQ(RetryPolicy::OutcomeLabel(Transport(absl::UnavailableError(""))),
            "connect_error");
}

}  // namespace
}  // namespace sdg
