// Which shards a job runs and in what order, driven through ShardSource
// alone: no store, no lock, no job. A block's shards are its plan's; a
// pipeline's later stages are cut from the rows its barriers release, in
// output order and deduplicated; a resumed job skips what its tally counts.
#include "server/jobs/shard_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/test_pipelines.h"

namespace sdg {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

using testing::Flattened;

google::protobuf::RepeatedPtrField<PipelineRow> Rows(
    std::vector<PipelineRow> rows) {
  return {rows.begin(), rows.end()};
}

std::vector<std::string> Values(const std::vector<PipelineRow>& rows) {
  std::vector<std::string> values;
  for (const PipelineRow& row : rows) {
    values.push_back(row.columns().fields().at("v").string_value());
  }
  return values;
}

JobSpec BlockSpec(int batch_size) {
  JobSpec spec;
  spec.job_id = "block";
  spec.batch_size = batch_size;
  return spec;
}

// The flatten-then-rename pipeline (test_pipelines.h).
JobSpec PipelineSpecWithBarrier(int batch_size) {
  return testing::PipelineJobSpec(testing::kFlattenThenRename, "staged",
                                  batch_size);
}

// `shard` ran and carried `rows` to its barrier; its events are committed.
void Commit(ShardSource& source, const ShardSpec& shard,
            std::vector<PipelineRow> rows) {
  source.AddBarrierRows(shard, Rows(std::move(rows)));
  source.Committed(shard);
  source.Release();
}

std::vector<int64_t> Indices(ShardSource& source) {
  std::vector<int64_t> indices;
  while (source.HasShardToStart()) indices.push_back(source.Next().index);
  return indices;
}

TEST(ShardSourceTest, ABlockRunsItsPlansShardsInOrderWithAShortLastOne) {
  const JobSpec spec = BlockSpec(2);
  const ShardPlan plan(5, 2);
  JobTally tally(plan.shard_count());
  ShardSource source(spec, plan, tally);

  EXPECT_EQ(source.shards_to_run(), 3);
  EXPECT_EQ(source.shards_cut(), 3);
  ShardSpec first = source.Next();
  ShardSpec second = source.Next();
  ShardSpec last = source.Next();
  EXPECT_FALSE(source.HasShardToStart());
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(second.first_row, 2);
  EXPECT_EQ(second.row_count, 2);
  EXPECT_EQ(last.index, 2);
  EXPECT_EQ(last.first_row, 4);
  EXPECT_EQ(last.row_count, 1);
}

TEST(ShardSourceTest, AResumedBlockSkipsTheShardsItsTallyCounts) {
  const JobSpec spec = BlockSpec(1);
  const ShardPlan plan(4, 1);
  JobTally tally(plan.shard_count());
  for (int64_t committed : {0, 2}) {
    LogEvent event;
    event.mutable_shard_result()->set_shard_index(committed);
    tally.Add(event);
  }
  ShardSource source(spec, plan, tally);

  EXPECT_EQ(source.shards_to_run(), 2);
  EXPECT_EQ(source.shards_cut(), 4);
  EXPECT_THAT(Indices(source), ElementsAre(1, 3));
}

// Seed 0's first-column row comes before anything seed 1 can make, so it
// goes on at once; its second-column row waits for seed 1, whose own
// first-column duplicate of it comes first in output order and is kept.
TEST(ShardSourceTest, BarrierRowsGoOnInOutputOrderOnceNothingCanPrecedeThem) {
  const JobSpec spec = PipelineSpecWithBarrier(1);
  const ShardPlan plan(2, 1);
  JobTally tally(plan.shard_count());
  ShardSource source(spec, plan, tally);
  const ShardSpec seed0 = source.Next();
  const ShardSpec seed1 = source.Next();
  EXPECT_FALSE(source.HasShardToStart());

  Commit(source, seed0, {Flattened(0, 0, "a0"), Flattened(0, 1, "same")});
  ASSERT_TRUE(source.HasShardToStart());
  const ShardSpec first = source.Next();
  EXPECT_EQ(first.stage, 1);
  EXPECT_EQ(first.index, 0);
  EXPECT_THAT(Values(source.StageRows(first)), ElementsAre("a0"));
  EXPECT_FALSE(source.HasShardToStart());

  Commit(source, seed1, {Flattened(1, 0, "same"), Flattened(1, 1, "b1")});
  std::vector<std::string> released;
  while (source.HasShardToStart()) {
    const ShardSpec shard = source.Next();
    EXPECT_EQ(shard.stage, 1);
    for (const std::string& value : Values(source.StageRows(shard))) {
      released.push_back(value);
    }
  }
  // Keys (0,1) "same" from seed 1, then (1,0) "same" from seed 0 dropped.
  EXPECT_THAT(released, ElementsAre("same", "b1"));
  EXPECT_EQ(source.shards_cut(), 2 + 3);
  EXPECT_EQ(source.shards_to_run(), 2 + 3);
}

TEST(ShardSourceTest, AStagesShortLastShardWaitsUntilItsInputIsComplete) {
  const JobSpec spec = PipelineSpecWithBarrier(2);
  const ShardPlan plan(4, 2);
  JobTally tally(plan.shard_count());
  ShardSource source(spec, plan, tally);
  const ShardSpec seeds01 = source.Next();
  const ShardSpec seeds23 = source.Next();

  Commit(source, seeds01, {Flattened(0, 0, "x0")});
  // One row released, fewer than batch_size, and more may follow.
  EXPECT_FALSE(source.HasShardToStart());

  // The last seed shard's rows were all filtered out: the input is complete.
  Commit(source, seeds23, {});
  ASSERT_TRUE(source.HasShardToStart());
  const ShardSpec short_shard = source.Next();
  EXPECT_EQ(short_shard.stage, 1);
  EXPECT_EQ(short_shard.index, 0);
  EXPECT_EQ(short_shard.first_row, 0);
  EXPECT_EQ(short_shard.row_count, 1);
  EXPECT_THAT(Values(source.StageRows(short_shard)), ElementsAre("x0"));
  EXPECT_FALSE(source.HasShardToStart());
}

// Seed 0's shard committed before a restart: its barrier rows come from the
// tally (its stage_rows event), go on into stage 1 at once, and its later
// stage's shard runs before the seed shard still to run.
TEST(ShardSourceTest, AResumedPipelineTakesItsBarrierRowsFromTheTally) {
  const JobSpec spec = PipelineSpecWithBarrier(1);
  const ShardPlan plan(2, 1);
  JobTally tally(plan.shard_count());
  LogEvent event;
  event.mutable_stage_rows()->set_shard_index(0);
  *event.mutable_stage_rows()->add_rows() = Flattened(0, 0, "a0");
  tally.Add(event);
  ShardSource source(spec, plan, tally);

  ASSERT_TRUE(source.HasShardToStart());
  const ShardSpec later = source.Next();
  EXPECT_EQ(later.stage, 1);
  EXPECT_EQ(later.index, 0);
  EXPECT_THAT(Values(source.StageRows(later)), ElementsAre("a0"));
  EXPECT_THAT(Indices(source), ElementsAre(1));
  // The rows were handed over once.
  EXPECT_THAT(tally.TakeStageRows({0, 0}, {0, plan.shard_count()}), IsEmpty());
}

// A later stage's shard is named by its stage and index; a log written
// before that packed them into shard_index (stage * 2^40 + index), and a
// job resumed from it must find the same shards committed.
TEST(JobTallyTest, ShardsAreNamedByStageAndIndexAndByAnOlderLogsPacking) {
  JobTally tally(/*shard_count=*/2);
  LogEvent named;
  named.mutable_shard_result()->set_stage(1);
  named.mutable_shard_result()->set_shard_index(3);
  tally.Add(named);
  LogEvent packed;
  packed.mutable_shard_error()->set_shard_index((int64_t{1} << 40) + 4);
  packed.mutable_shard_error()->set_row_count(1);
  tally.Add(packed);

  EXPECT_TRUE(tally.committed({1, 3}));
  EXPECT_TRUE(tally.committed({1, 4}));
  EXPECT_FALSE(tally.committed({0, 3}));
  EXPECT_FALSE(tally.committed({1, 0}));
  EXPECT_EQ(tally.committed_shards(), 2);
  EXPECT_EQ(tally.shards_succeeded(), 1);
  EXPECT_EQ(tally.shards_failed(), 1);
}

// A job's tokens are its committed shards', from each shard's first event;
// a pipeline's are also counted per step. Replaying the log (a resumed
// job) gives the same totals.
TEST(JobTallyTest, TokensAddUpFromEachShardsFirstEventAndPerStep) {
  auto usage = [](int64_t prompt, int64_t completion) {
    v1::TokenUsage tokens;
    tokens.set_prompt_tokens(prompt);
    tokens.set_completion_tokens(completion);
    return tokens;
  };
  std::vector<LogEvent> log(4);
  // Stage 0, shard 0: barrier rows with the step "ask"'s tokens.
  log[0].mutable_stage_rows()->set_shard_index(0);
  *log[0].mutable_stage_rows()->mutable_usage() = usage(10, 20);
  v1::StepCounts* ask = log[0].mutable_stage_rows()->add_steps();
  ask->set_step("ask");
  *ask->mutable_usage() = usage(10, 20);
  // Stage 0, shard 1: only failures, tokens in the first.
  log[1].mutable_shard_error()->set_shard_index(1);
  log[1].mutable_shard_error()->set_row_count(2);
  *log[1].mutable_shard_error()->mutable_usage() = usage(3, 0);
  // Stage 1, shard 0: results in two events, tokens in the first.
  log[2].mutable_shard_result()->set_stage(1);
  *log[2].mutable_shard_result()->mutable_usage() = usage(100, 200);
  v1::StepCounts* judge = log[2].mutable_shard_result()->add_steps();
  judge->set_step("judge");
  *judge->mutable_usage() = usage(100, 200);
  log[3].mutable_shard_result()->set_stage(1);

  JobTally tally(/*shard_count=*/2);
  for (const LogEvent& event : log) tally.Add(event);
  EXPECT_EQ(tally.usage().prompt_tokens(), 113);
  EXPECT_EQ(tally.usage().completion_tokens(), 220);
  ASSERT_EQ(tally.steps().size(), 2u);
  EXPECT_EQ(tally.steps()[0].usage().completion_tokens(), 20);
  EXPECT_EQ(tally.steps()[1].usage().prompt_tokens(), 100);

  JobTally replayed(/*shard_count=*/2);
  for (const LogEvent& event : log) replayed.Add(event);
  EXPECT_EQ(replayed.usage().SerializeAsString(),
            tally.usage().SerializeAsString());
}

}  // namespace
}  // namespace sdg
