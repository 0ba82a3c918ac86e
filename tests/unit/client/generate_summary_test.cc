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

TEST(FormatSummaryTest, AFinishedJobShowsItsOwnElapsedTime) {
  GenerateSummary summary = Summary();
  summary.finished.set_state(v1::JOB_STATE_SUCCEEDED);
  summary.finished.set_elapsed_seconds(3.25);
  EXPECT_EQ(FormatSummary(summary, "out.jsonl"),
            "job j JOB_STATE_SUCCEEDED: 10/10 rows generated -> out.jsonl "
            "(10 lines), 0 failed, 3.25 s");
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
