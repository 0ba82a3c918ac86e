// A job's life as the scheduler and the service drive it, on a real SQLite
// store in a temp folder: Job::Create admits it, MarkRunning, ReportShard
// and MarkFinished run it, and Job::Restore finds it again after the store
// is closed and reopened, as sdgd does when it starts.
#include "server/jobs/job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store/sqlite_job_store.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_jobs.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;

class JobTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  // Closes the store (if open) and opens it again over the same folder.
  void Reopen() {
    store_.reset();
    auto store = SqliteJobStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  static JobSpec Spec(int batch_size) {
    JobSpec spec;
    spec.job_id = "job";
    spec.batch_size = batch_size;
    spec.num_workers = 1;
    return spec;
  }

  // A job over `rows` rows, admitted as the service admits one: its
  // dataset and record stored first.
  std::shared_ptr<Job> CreateJob(int64_t rows, int batch_size) {
    JobSpec spec = Spec(batch_size);
    auto builder = store_->NewJobDataset(spec.job_id);
    EXPECT_TRUE(builder.ok()) << builder.status();
    for (int64_t i = 0; i < rows; ++i) {
      google::protobuf::Struct row;
      (*row.mutable_fields())["q"].set_string_value(absl::StrCat("q", i));
      EXPECT_TRUE((*builder)->Add(row).ok());
    }
    auto dataset = (*builder)->Finish();
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    JobRecord record;
    record.job_id = spec.job_id;
    record.request.set_batch_size(batch_size);
    EXPECT_TRUE(store_->AddJob(record).ok());
    record.version = 1;  // as AddJob stored it
    auto job = Job::Create(std::move(spec), std::move(record),
                           *std::move(dataset), *store_, metrics_);
    EXPECT_TRUE(job.ok()) << job.status();
    return *std::move(job);
  }

  // The job as the reopened store holds it, restored as sdgd restores it.
  std::shared_ptr<Job> RestoreJob(int batch_size) {
    auto records = store_->LoadJobs();
    EXPECT_TRUE(records.ok()) << records.status();
    EXPECT_EQ(records->size(), 1u);
    JobRecord record = records->at(0);
    auto dataset = store_->OpenJobDataset(record.job_id);
    auto job = Job::Restore(Spec(batch_size), std::move(record),
                            dataset.ok() ? *std::move(dataset) : nullptr,
                            *store_, metrics_);
    EXPECT_TRUE(job.ok()) << job.status();
    return *std::move(job);
  }

  v1::JobState StoredState() {
    auto records = store_->LoadJobs();
    EXPECT_TRUE(records.ok()) << records.status();
    return records->empty() ? v1::JOB_STATE_UNSPECIFIED : records->at(0).state;
  }

  // Runs the next shard: every row gives one answer.
  static ShardSpec RunNextShard(Job& job) {
    const ShardSpec shard = job.StartNextShard();
    ShardOutcome outcome;
    for (int64_t i = 0; i < shard.row_count; ++i) {
      v1::ResultRow& row = outcome.rows.emplace_back();
      row.set_row_index(shard.first_row + i);
      (*row.mutable_columns()->mutable_fields())["a"].set_string_value("yes");
    }
    job.ReportShard(shard, std::move(outcome), absl::ZeroDuration());
    return shard;
  }

  // The cases of the job's events, without progress events (they come as
  // time passes).
  static std::vector<LogEvent::EventCase> EventCases(const Job& job) {
    std::vector<LogEvent::EventCase> cases;
    for (const LogEvent& event : testing::EventsOf(job)) {
      if (event.has_progress()) continue;
      cases.push_back(event.event_case());
    }
    return cases;
  }

  const std::string dir_ = testing::MakeTempDir() + "/state";
  Metrics metrics_;
  std::unique_ptr<SqliteJobStore> store_;
};

TEST_F(JobTest, ACreatedJobIsQueuedThenRunsToSucceeded) {
  std::shared_ptr<Job> job = CreateJob(3, 2);
  EXPECT_EQ(job->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job->shards_to_run(), 2);

  job->MarkRunning();
  job->SaveRecord();
  EXPECT_EQ(job->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(StoredState(), v1::JOB_STATE_RUNNING);
  RunNextShard(*job);
  RunNextShard(*job);
  EXPECT_FALSE(job->HasShardToStart());
  job->MarkFinished();

  EXPECT_TRUE(job->IsFinished());
  const v1::Job snapshot = job->Snapshot();
  EXPECT_EQ(snapshot.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(snapshot.rows_succeeded(), 3);
  EXPECT_EQ(snapshot.shards_succeeded(), 2);
  EXPECT_EQ(StoredState(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(EventCases(*job),
              ElementsAre(LogEvent::kStarted, LogEvent::kShardResult,
                          LogEvent::kShardResult, LogEvent::kFinished));
}

// Each save lands over the one before (the store's version goes 1, 2, 3),
// a restored job saves over the version it was loaded at, and a job whose
// record another writer saved meanwhile leaves that record as it is.
TEST_F(JobTest, AJobSavesOverItsOwnVersionAndNeverOverAnotherWriters) {
  {
    std::shared_ptr<Job> job = CreateJob(1, 1);
    job->MarkRunning();
    EXPECT_TRUE(job->SaveRecord());
    EXPECT_EQ(store_->LoadJob("job")->version, 2);
  }
  Reopen();
  std::shared_ptr<Job> job = RestoreJob(1);
  EXPECT_TRUE(job->SaveRecord());
  EXPECT_EQ(store_->LoadJob("job")->version, 3);

  JobRecord other = *store_->LoadJob("job");
  other.state = v1::JOB_STATE_CANCELLED;
  other.reason = "saved by another writer";
  ASSERT_TRUE(store_->UpdateJob(other).ok());
  job->MarkRunning();
  EXPECT_FALSE(job->SaveRecord());
  const JobRecord stored = *store_->LoadJob("job");
  EXPECT_EQ(stored.version, 4);
  EXPECT_EQ(stored.state, v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(stored.reason, "saved by another writer");
}

TEST_F(JobTest, ACancelledJobEndsCancelledWithItsReason) {
  std::shared_ptr<Job> job = CreateJob(2, 1);
  job->MarkRunning();
  RunNextShard(*job);
  job->Cancel(absl::CancelledError("cancelled by alice"));
  job->MarkFinished();

  const v1::Job snapshot = job->Snapshot();
  EXPECT_EQ(snapshot.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(snapshot.reason(), "cancelled by alice");
  EXPECT_EQ(snapshot.rows_succeeded(), 1);
  const std::vector<LogEvent> events = testing::EventsOf(*job);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finished().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(StoredState(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobTest, ARestoredJobRunsOnlyTheShardsItsLogDoesNotHold) {
  {
    std::shared_ptr<Job> job = CreateJob(3, 1);
    job->MarkRunning();
    job->SaveRecord();
    RunNextShard(*job);
    job->log()->AwaitCommitted();
    // The process stops here: shards 1 and 2 never ran.
  }
  Reopen();
  std::shared_ptr<Job> job = RestoreJob(1);

  EXPECT_FALSE(job->IsFinished());
  const v1::Job snapshot = job->Snapshot();
  EXPECT_EQ(snapshot.resumed(), 1);
  EXPECT_EQ(snapshot.rows_succeeded(), 1);
  EXPECT_EQ(job->shards_to_run(), 2);
  EXPECT_EQ(RunNextShard(*job).index, 1);
  EXPECT_EQ(RunNextShard(*job).index, 2);
  EXPECT_FALSE(job->HasShardToStart());
  job->MarkFinished();
  EXPECT_EQ(job->Snapshot().rows_succeeded(), 3);
  EXPECT_EQ(StoredState(), v1::JOB_STATE_SUCCEEDED);
}

// The process stopped after the log committed `finished` and before the
// record was saved: the log is the truth, and the record is repaired.
TEST_F(JobTest, AJobWhoseLogEndedBeforeItsRecordWasSavedIsRepaired) {
  {
    std::shared_ptr<Job> job = CreateJob(1, 1);
    job->MarkRunning();
    RunNextShard(*job);
    job->MarkFinished();
    JobRecord stale = store_->LoadJobs()->at(0);
    stale.state = v1::JOB_STATE_RUNNING;
    stale.end_time = absl::InfinitePast();
    stale.finished.Clear();
    ASSERT_TRUE(store_->UpdateJob(stale).ok());
  }
  Reopen();
  std::shared_ptr<Job> job = RestoreJob(1);

  EXPECT_TRUE(job->IsFinished());
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  // It ended before the restart: it did not resume.
  EXPECT_EQ(job->Snapshot().resumed(), 0);
  EXPECT_EQ(StoredState(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace sdg
