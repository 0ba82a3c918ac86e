// The line sdgctl generate ends with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/generate.h"

namespace sdg {
namespace {

using ::testing::HasSubstr;

GenerateSummary Summary() {
  GenerateSummary summary;
  summary.job_id = "j";
  summary.total_rows = 10;
  summary.lines_written = 10;
  summary.client_elapsed_seconds = 7.5;
  return summary;
}

TEST(FormatSummaryTest, AFinishedJobShowsItsOwnElapsedTimeRatesAndTokens) {
  GenerateSummary summary = Summary();
  summary.finished.set_state(v1::JOB_STATE_SUCCEEDED);
  summary.finished.set_rows_succeeded(10);
  summary.finished.set_elapsed_seconds(0.25);
  summary.finished.mutable_usage()->set_prompt_tokens(120);
  summary.finished.mutable_usage()->set_completion_tokens(300);
  // A job shorter than a second still shows its rates, over its whole run.
  EXPECT_EQ(FormatSummary(summary, "out.jsonl"),
            "job j JOB_STATE_SUCCEEDED: 10/10 rows generated -> out.jsonl "
            "(10 lines), 0 failed, 0.25 s (40.0 rows/s, 1200 tokens/s), "
            "tokens: 120 prompt + 300 completion");
}

TEST(FormatSummaryTest, ACallThatEndedAbnormallyShowsTheTimeItRan) {
  GenerateSummary summary = Summary();
  summary.call_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  summary.rows_failed = 10;
  summary.errors_path = "out.jsonl.errors.jsonl";
  EXPECT_THAT(FormatSummary(summary, "out.jsonl"),
              HasSubstr("call ended: gone: 0/10 rows generated"));
  EXPECT_THAT(FormatSummary(summary, "out.jsonl"), HasSubstr(", 7.50 s"));
}

}  // namespace
}  // namespace sdg
