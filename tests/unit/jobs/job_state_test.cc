// A job's record through its transitions, with no store, lock or clock.
#include "server/jobs/job_state.h"

#include <gtest/gtest.h>

#include "server/store/log_event.h"

namespace sdg {
namespace {

const absl::Time kCreated = absl::FromUnixSeconds(1700000000);
const absl::Time kNow = absl::FromUnixSeconds(1700000100);

JobRecord Queued() {
  JobRecord record;
  record.job_id = "j";
  return record;
}

v1::JobFinished Finished(v1::JobState state, const std::string& reason) {
  v1::JobFinished finished;
  finished.set_state(state);
  finished.set_reason(reason);
  finished.set_rows_succeeded(3);
  return finished;
}

TEST(JobStateTest, ANewRecordTakesTheCreateTimeItLacks) {
  EXPECT_EQ(JobState(Queued(), kNow).record().create_time, kNow);
  JobRecord created = Queued();
  created.create_time = kCreated;
  EXPECT_EQ(JobState(created, kNow).record().create_time, kCreated);
}

TEST(JobStateTest, TheFirstRunSetsTheStartTimeAndARunAfterARestartKeepsIt) {
  JobState state(Queued(), kCreated);
  state.Run(kCreated + absl::Seconds(1));
  EXPECT_EQ(state.state(), v1::JOB_STATE_RUNNING);
  state.Run(kNow);
  EXPECT_EQ(state.record().start_time, kCreated + absl::Seconds(1));
}

TEST(JobStateTest, AFinishedJobKeepsItsFinalEventAndTotals) {
  JobState state(Queued(), kCreated);
  state.Run(kCreated);
  state.Finish(Finished(v1::JOB_STATE_FAILED, "2 of 5 rows failed"),
               {.total_rows = 5, .total_shards = 2, .last_sequence = 9}, kNow);
  const JobRecord& record = state.record();
  EXPECT_EQ(record.state, v1::JOB_STATE_FAILED);
  EXPECT_EQ(record.reason, "2 of 5 rows failed");
  EXPECT_EQ(record.finished.rows_succeeded(), 3);
  EXPECT_EQ(record.end_time, kNow);
  EXPECT_EQ(record.total_rows, 5);
  EXPECT_EQ(record.total_shards, 2);
  EXPECT_EQ(record.last_sequence, 9u);
  EXPECT_FALSE(record.unfinished());
  EXPECT_FALSE(state.suspended());
}

// `finished` did not reach the log: the job is suspended, with no end time,
// so that it finishes from its log when sdgd starts again.
TEST(JobStateTest, AFinishThatWasNotCommittedLeavesTheJobSuspended) {
  JobState state(Queued(), kCreated);
  state.Run(kCreated);
  state.Finish(Finished(v1::JOB_STATE_SUCCEEDED, ""), {}, kNow);
  state.FinishNotCommitted("disk full");
  EXPECT_TRUE(state.suspended());
  EXPECT_EQ(state.record().reason, "disk full");
  EXPECT_EQ(state.record().end_time, absl::InfinitePast());
}

TEST(JobStateTest, ARecordSavedBeforeItsLogEndedIsRepairedFromTheLog) {
  JobRecord running = Queued();
  running.state = v1::JOB_STATE_RUNNING;
  JobState state(running, kCreated);
  EXPECT_FALSE(state.RepairFromLog(std::nullopt, {}, kNow));
  EXPECT_EQ(state.state(), v1::JOB_STATE_RUNNING);

  EXPECT_TRUE(state.RepairFromLog(Finished(v1::JOB_STATE_CANCELLED, "asked"),
                                  {.last_sequence = 4}, kNow));
  EXPECT_EQ(state.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(state.record().reason, "asked");
  EXPECT_EQ(state.record().end_time, kNow);
  EXPECT_EQ(state.record().last_sequence, 4u);
  // Once repaired (or saved whole), there is nothing more to repair.
  EXPECT_FALSE(state.RepairFromLog(Finished(v1::JOB_STATE_FAILED, "other"), {},
                                   kNow + absl::Seconds(1)));
  EXPECT_EQ(state.record().reason, "asked");
}

TEST(JobEndTest, AStoppedJobIsCancelledOrFailedForItsReason) {
  JobTally tally(2);
  JobEnd cancelled = EndOf(absl::CancelledError("cancelled by the client"),
                           tally, JobKind::kBlock, 10, 2);
  EXPECT_EQ(cancelled.state, v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled.reason, "cancelled by the client");
  EXPECT_EQ(EndOf(absl::DeadlineExceededError("timeout"), tally,
                  JobKind::kBlock, 10, 2)
                .state,
            v1::JOB_STATE_FAILED);
  JobEnd succeeded = EndOf(absl::OkStatus(), tally, JobKind::kBlock, 10, 2);
  EXPECT_EQ(succeeded.state, v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(succeeded.reason, "");
}

TEST(JobEndTest, FailedShardsFailTheJobCountingRowsOrStepRows) {
  JobTally tally(2);
  LogEvent error;
  error.mutable_shard_error()->set_shard_index(1);
  error.mutable_shard_error()->set_row_count(3);
  tally.Add(error);
  EXPECT_EQ(EndOf(absl::OkStatus(), tally, JobKind::kBlock, 10, 2).reason,
            "3 of 10 rows failed (in 1 of 2 shards); see the shard_error "
            "events");
  EXPECT_EQ(EndOf(absl::OkStatus(), tally, JobKind::kPipeline, 10, 5).reason,
            "3 rows failed at their steps (in 1 of 5 shards); see the "
            "shard_error events");
}

}  // namespace
}  // namespace sdg
