#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/estimate.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

v1::JobEstimate BlockEstimate() {
  v1::JobEstimate estimate;
  estimate.set_rows(12);
  estimate.set_requests(1);
  estimate.set_prompt_tokens(48);
  estimate.set_max_completion_tokens(60);
  estimate.set_complete(true);
  estimate.set_completion_tokens_bounded(true);
  v1::StepEstimate& step = *estimate.add_steps();
  step.set_step_name("answer");
  step.set_backend("sim");
  step.set_model("m");
  step.set_samples_per_row(1);
  step.set_rows(12);
  step.set_rows_exact(true);
  step.set_requests(1);
  step.set_prompt_tokens(48);
  step.set_prompt_tokens_counting(v1::TOKEN_COUNTING_TOKENIZER);
  step.set_max_completion_tokens(60);
  step.set_completion_tokens_bounded(true);
  return estimate;
}

TEST(EstimateFormatTest, SaysWhatWasCountedAndTheCostRange) {
  std::string text = FormatEstimate(BlockEstimate(),
                                    TokenPrices{.prompt = 1, .completion = 2});
  EXPECT_THAT(text, HasSubstr("estimate: 12 rows, 1 request, 48 prompt "
                              "tokens, at most 60 completion tokens\n"));
  EXPECT_THAT(text, HasSubstr("step 0 \"answer\" (backend \"sim\", model "
                              "\"m\", n 1): 12 rows, 1 request, 48 prompt "
                              "tokens (counted by the backend's tokenizer)"));
  // $48e-6 for the prompts, up to $120e-6 more for the completions.
  EXPECT_THAT(text, HasSubstr("cost at $1/$2 per million tokens: from "
                              "$0.000048 to $0.000168\n"));
}

TEST(EstimateFormatTest, TheTimeRangeIsShownOnceTheBackendIsMeasured) {
  v1::JobEstimate estimate = BlockEstimate();
  estimate.set_measured_requests(4);
  EXPECT_THAT(FormatEstimate(estimate, std::nullopt),
              HasSubstr("time: not known until the backend has answered 10 "
                        "requests (4 so far)\n"));
  estimate.set_measured_requests(250);
  estimate.mutable_min_duration()->set_seconds(95);
  estimate.mutable_min_duration()->set_nanos(600000000);
  estimate.mutable_max_duration()->set_seconds(130);
  estimate.mutable_max_duration()->set_nanos(400000000);
  EXPECT_THAT(FormatEstimate(estimate, std::nullopt),
              HasSubstr("time at the backend's pace over its last 250 "
                        "replies: 1m35s to 2m10s\n"));
  estimate.mutable_min_duration()->set_seconds(1);
  estimate.mutable_min_duration()->set_nanos(250600000);
  EXPECT_THAT(FormatEstimate(estimate, std::nullopt),
              HasSubstr("replies: 1.25s to 2m10s\n"));
}

TEST(EstimateFormatTest, StepsNotKnownBeforeTheRunSaySo) {
  v1::JobEstimate estimate = BlockEstimate();
  estimate.set_complete(false);
  v1::StepEstimate& judge = *estimate.add_steps();
  judge.set_step_index(3);
  judge.set_step_name("judge");
  judge.set_prompt_tokens_counting(v1::TOKEN_COUNTING_UNKNOWN);
  std::string text = FormatEstimate(estimate, std::nullopt);
  EXPECT_THAT(text, HasSubstr("later ones depend on generated text"));
  EXPECT_THAT(text, HasSubstr("step 3 \"judge\""));
  EXPECT_THAT(text, HasSubstr("not known before the run"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("cost")));
}

TEST(EstimateFormatTest, PricesAreInOverOut) {
  absl::StatusOr<TokenPrices> prices = ParsePrices("0.15/0.6");
  ASSERT_TRUE(prices.ok());
  EXPECT_DOUBLE_EQ(prices->prompt, 0.15);
  EXPECT_DOUBLE_EQ(prices->completion, 0.6);
  for (const char* bad : {"0.15", "a/b", "1/2/3", "-1/2"}) {
    absl::Status status = ParsePrices(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("--price must be IN/OUT"));
  }
}

}  // namespace
}  // namespace sdg
