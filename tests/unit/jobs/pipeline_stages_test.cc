// How a pipeline job releases rows from a drop_duplicates barrier into its
// next stage: in output order, as soon as no uncommitted shard can produce
// a row before them, and cut into shards. Driven through the Job's own
// interface, shard by shard, with the rows a runner would have produced.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/jobs/job.h"
#include "server/store/memory_job_store.h"
#include "tests/testing/test_jobs.h"
#include "tests/testing/test_pipelines.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;

using testing::Flattened;

class PipelineStagesTest : public ::testing::Test {
 protected:
  // Seeds, one per shard, through a flatten of two columns whose
  // drop_duplicates ends the first stage; a rename is the second.
  std::shared_ptr<Job> MakeJob(int seeds) {
    std::shared_ptr<Job> job = testing::MakeTestJob(
        testing::PipelineJobSpec(testing::kFlattenThenRename, "staged", 1),
        seeds, store_, metrics_);
    job->MarkRunning();
    return job;
  }
  static void Report(Job& job, const ShardSpec& shard,
                     std::vector<PipelineRow> rows) {
    ShardOutcome outcome;
    outcome.rows = std::move(rows);
    job.ReportShard(shard, std::move(outcome), absl::ZeroDuration());
  }
  std::vector<std::string> Values(Job& job, const ShardSpec& shard) {
    std::vector<std::string> values;
    absl::StatusOr<std::vector<PipelineRow>> rows = job.ReadStageRows(shard);
    EXPECT_TRUE(rows.ok()) << rows.status();
    for (const PipelineRow& row : *rows) {
      values.push_back(row.columns().fields().at("v").string_value());
    }
    return values;
  }

  Metrics metrics_;
  MemoryJobStore store_;
};

// Seed 0's first-column row comes before anything seed 1 can make, so it
// goes on at once; its second-column row waits for seed 1's first.
TEST_F(PipelineStagesTest, RowsNoUncommittedShardCanPrecedeGoOnAtOnce) {
  std::shared_ptr<Job> job = MakeJob(2);
  ShardSpec seed0 = job->StartNextShard();
  ShardSpec seed1 = job->StartNextShard();
  EXPECT_FALSE(job->HasShardToStart());

  Report(*job, seed0, {Flattened(0, 0, "a0"), Flattened(0, 1, "same")});
  ASSERT_TRUE(job->HasShardToStart());
  ShardSpec next = job->StartNextShard();
  EXPECT_EQ(next.stage, 1);
  EXPECT_THAT(Values(*job, next), ElementsAre("a0"));
  EXPECT_FALSE(job->HasShardToStart());

  // Seed 1's first column repeats seed 0's second: melt puts seed 1's
  // first, so it is the one kept.
  Report(*job, seed1, {Flattened(1, 0, "same"), Flattened(1, 1, "b1")});
  std::vector<std::string> rest;
  std::vector<int64_t> seeds;
  while (job->HasShardToStart()) {
    absl::StatusOr<std::vector<PipelineRow>> rows =
        job->ReadStageRows(job->StartNextShard());
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (const PipelineRow& row : *rows) {
      rest.push_back(row.columns().fields().at("v").string_value());
      seeds.push_back(row.row_index());
    }
  }
  EXPECT_THAT(rest, ElementsAre("same", "b1"));
  EXPECT_THAT(seeds, ElementsAre(1, 1));
  EXPECT_EQ(job->shards_to_run(), 2 + 3);
}

// Shards that finish out of order release nothing past the one still out.
TEST_F(PipelineStagesTest, ALaterShardWaitsForAnEarlierOne) {
  std::shared_ptr<Job> job = MakeJob(3);
  ShardSpec seed0 = job->StartNextShard();
  ShardSpec seed1 = job->StartNextShard();
  ShardSpec seed2 = job->StartNextShard();
  Report(*job, seed2, {Flattened(2, 0, "a2"), Flattened(2, 1, "b2")});
  Report(*job, seed1, {Flattened(1, 0, "a1"), Flattened(1, 1, "b1")});
  EXPECT_FALSE(job->HasShardToStart());
  Report(*job, seed0, {Flattened(0, 0, "a0"), Flattened(0, 1, "b0")});
  std::vector<std::string> released;
  while (job->HasShardToStart()) {
    for (const std::string& v : Values(*job, job->StartNextShard())) {
      released.push_back(v);
    }
  }
  EXPECT_THAT(released, ElementsAre("a0", "a1", "a2", "b0", "b1", "b2"));
}

}  // namespace
}  // namespace sdg
