// The requests and tokens a minute a hosted API allows: parsed from
// --backend_rate_limit, and paced so that a second's worth goes at most at
// once, with time passed in.
#include "server/backend/rate_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

TEST(ParseRateLimitsTest, ReadsEachLimit) {
  absl::StatusOr<RateLimits> limits =
      ParseRateLimits("rpm:600,tpm:90000,itpm:60000,otpm:30000");
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->requests, 600);
  EXPECT_EQ(limits->tokens, 90000);
  EXPECT_EQ(limits->input_tokens, 60000);
  EXPECT_EQ(limits->output_tokens, 30000);
  EXPECT_TRUE(limits->limits_tokens());
  EXPECT_FALSE(ParseRateLimits("rpm:10")->limits_tokens());
}

TEST(ParseRateLimitsTest, ABadPartIsNamedWithTheReason) {
  EXPECT_THAT(ParseRateLimits("rps:5").status().message(),
              HasSubstr("\"rps:5\": expected rpm:N, tpm:N, itpm:N or otpm:N"));
  EXPECT_THAT(
      ParseRateLimits("rpm:0").status().message(),
      HasSubstr("\"rpm:0\": the limit must be a positive whole number"));
  EXPECT_THAT(ParseRateLimits("rpm:ten").status().message(),
              HasSubstr("positive whole number"));
  EXPECT_THAT(ParseRateLimits("rpm:1,rpm:2").status().message(),
              HasSubstr("\"rpm\" is given twice"));
}

// 120 a minute: two a second, at most a second's worth (two) at once, then
// one every half second.
TEST(RateBudgetTest, RequestsGoOutEvenlyAfterASecondsWorth) {
  RateBudget budget(RateLimits{.requests = 120}, kStart);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(budget.ReadyAt({}, kStart), kStart);
    budget.Take({}, kStart);
  }
  EXPECT_EQ(budget.ReadyAt({}, kStart), kStart + absl::Milliseconds(500));
  const absl::Time later = kStart + absl::Milliseconds(500);
  EXPECT_EQ(budget.ReadyAt({}, later), later);
  budget.Take({}, later);
  EXPECT_EQ(budget.ReadyAt({}, later), later + absl::Milliseconds(500));
  // Idle for a minute: still only a second's worth at once.
  const absl::Time idle = kStart + absl::Minutes(1);
  budget.Take({}, idle);
  budget.Take({}, idle);
  EXPECT_GT(budget.ReadyAt({}, idle), idle);
}

// A request larger than a second's worth of tokens goes when the bucket is
// full; the bucket goes negative and the next one waits for the refill.
TEST(RateBudgetTest, ALargeRequestGoesWhenFullAndTheNextWaitsItOut) {
  RateBudget budget(RateLimits{.tokens = 6000}, kStart);  // 100 a second
  const TokenCost large{.input = 50, .output = 250};
  ASSERT_EQ(budget.ReadyAt(large, kStart), kStart);
  budget.Take(large, kStart);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).tokens, -200);
  // 200 to make up, then a full bucket (100) for the next large one.
  EXPECT_EQ(budget.ReadyAt(large, kStart), kStart + absl::Seconds(3));
  // A small one needs only its own 10 back above zero.
  EXPECT_EQ(budget.ReadyAt({.input = 10}, kStart), kStart + absl::Seconds(2.1));
}

// Tokens reserved and not used come back when the reply says what was
// used; used beyond the reservation are taken. Requests are not given back.
TEST(RateBudgetTest, AReplysUsageSettlesWhatWasReserved) {
  RateBudget budget(
      RateLimits{.requests = 60, .tokens = 6000, .output_tokens = 3000},
      kStart);
  const TokenCost reserved{.input = 20, .output = 40};
  budget.Take(reserved, kStart);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).tokens, 40);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).output_tokens, 10);
  budget.Settle(reserved, {.input = 5, .output = 25}, kStart);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).tokens, 70);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).output_tokens, 25);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).requests, 0);
  EXPECT_FALSE(budget.available(kStart).input_tokens.has_value());
  // A reply that used more than reserved takes the rest.
  budget.Settle({.input = 0, .output = 0}, {.input = 0, .output = 90}, kStart);
  EXPECT_DOUBLE_EQ(*budget.available(kStart).tokens, -20);
}

}  // namespace
}  // namespace sdg
