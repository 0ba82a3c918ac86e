// The events a shard's outcome is committed as: rows split between events
// at the size limit and never inside a row, failed rows as runs, a
// pipeline's output as results or barrier rows with its step counts first,
// its failures in output order naming their steps.
#include "server/jobs/shard_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sdg {
namespace {

using ::testing::ElementsAre;

v1::ResultRow Row(int64_t index, size_t text_bytes) {
  v1::ResultRow row;
  row.set_row_index(index);
  (*row.mutable_columns()->mutable_fields())["text"].set_string_value(
      std::string(text_bytes, 'x'));
  return row;
}

// The row indices of each event's rows (results or stage rows), and "E"
// for a shard_error.
std::vector<std::string> Shape(const std::vector<LogEvent>& group) {
  std::vector<std::string> shape;
  for (const LogEvent& event : group) {
    const auto* rows = event.has_shard_result() ? &event.shard_result().rows()
                       : event.has_stage_rows() ? &event.stage_rows().rows()
                                                : nullptr;
    if (rows == nullptr) {
      shape.push_back("E");
      continue;
    }
    std::string indices;
    for (const v1::ResultRow& row : *rows) {
      indices += std::to_string(row.row_index());
    }
    shape.push_back(indices);
  }
  return shape;
}

TEST(BlockShardEventsTest, RowsAreSplitAtTheLimitBetweenRows) {
  const size_t row_bytes = Row(9, 100).ByteSizeLong();  // the largest
  ShardOutcome outcome;
  for (int i = 0; i < 5; ++i) outcome.rows.push_back(Row(i, 100));
  // Two rows fit in an event, the third does not.
  std::vector<LogEvent> group =
      BlockShardEvents(ShardSpec{.index = 3, .first_row = 0, .row_count = 5},
                       std::move(outcome), 2 * row_bytes + 1);
  EXPECT_THAT(Shape(group), ElementsAre("01", "23", "4"));
  for (const LogEvent& event : group) {
    EXPECT_EQ(event.shard_result().shard_index(), 3);
  }
}

TEST(BlockShardEventsTest, ARowLargerThanTheLimitGoesAlone) {
  ShardOutcome outcome;
  outcome.rows.push_back(Row(0, 10));
  outcome.rows.push_back(Row(1, 5000));
  outcome.rows.push_back(Row(2, 10));
  std::vector<LogEvent> group =
      BlockShardEvents(ShardSpec{.index = 0, .first_row = 0, .row_count = 3},
                       std::move(outcome), 1000);
  EXPECT_THAT(Shape(group), ElementsAre("0", "1", "2"));
}

TEST(BlockShardEventsTest, FailedRowsAreRunsOfTheSameError) {
  ShardOutcome outcome;
  outcome.rows.push_back(Row(0, 10));
  const absl::Status busy = absl::UnavailableError("busy");
  const absl::Status bad = absl::InvalidArgumentError("bad");
  outcome.failed_rows = {{1, busy, 3}, {2, busy, 3}, {3, bad, 1}, {5, bad, 1}};
  std::vector<LogEvent> group =
      BlockShardEvents(ShardSpec{.index = 0, .first_row = 0, .row_count = 6},
                       std::move(outcome));
  ASSERT_THAT(Shape(group), ElementsAre("0", "E", "E", "E"));
  // Rows 1-2 together; 3 and 5 apart (4 succeeded between them).
  EXPECT_EQ(group[1].shard_error().first_row(), 1);
  EXPECT_EQ(group[1].shard_error().row_count(), 2);
  EXPECT_EQ(group[1].shard_error().attempts(), 3);
  EXPECT_EQ(group[1].shard_error().message(), "busy");
  EXPECT_EQ(group[2].shard_error().first_row(), 3);
  EXPECT_EQ(group[2].shard_error().row_count(), 1);
  EXPECT_EQ(group[3].shard_error().first_row(), 5);
}

TEST(BlockShardEventsTest, AShardWithNothingGivesNoEvent) {
  EXPECT_TRUE(
      BlockShardEvents(ShardSpec{.index = 0, .first_row = 0, .row_count = 0},
                       ShardOutcome{})
          .empty());
}

TEST(WholeShardErrorEventTest, CoversEveryRowAndNamesTheStep) {
  LogEvent event = WholeShardErrorEvent(
      ShardSpec{.index = 7, .first_row = 40, .row_count = 8},
      absl::CancelledError("stopped"), 2, "ask");
  EXPECT_EQ(event.shard_error().shard_index(), 7);
  EXPECT_EQ(event.shard_error().first_row(), 40);
  EXPECT_EQ(event.shard_error().row_count(), 8);
  EXPECT_EQ(event.shard_error().code(),
            static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(event.shard_error().step(), "ask");
}

v1::TokenUsage Usage(int64_t prompt, int64_t completion) {
  v1::TokenUsage usage;
  usage.set_prompt_tokens(prompt);
  usage.set_completion_tokens(completion);
  return usage;
}

// A shard's tokens ride in its first event only, so that a tally counts
// them once however many events the shard is split into.
TEST(BlockShardEventsTest, TheShardsTokensAreInItsFirstEventOnly) {
  const size_t row_bytes = Row(9, 100).ByteSizeLong();
  ShardOutcome outcome;
  for (int i = 0; i < 3; ++i) outcome.rows.push_back(Row(i, 100));
  outcome.failed_rows = {{3, absl::UnavailableError("busy"), 3}};
  outcome.usage = Usage(12, 34);
  std::vector<LogEvent> group =
      BlockShardEvents(ShardSpec{.index = 0, .first_row = 0, .row_count = 4},
                       std::move(outcome), row_bytes + 1);
  ASSERT_THAT(Shape(group), ElementsAre("0", "1", "2", "E"));
  EXPECT_EQ(group[0].shard_result().usage().prompt_tokens(), 12);
  EXPECT_EQ(group[0].shard_result().usage().completion_tokens(), 34);
  EXPECT_FALSE(group[1].shard_result().has_usage());
  EXPECT_FALSE(group[2].shard_result().has_usage());
  EXPECT_FALSE(group[3].shard_error().has_usage());
}

// A shard whose every row failed has its tokens in its first shard_error
// (a reply whose rows could not be used still used tokens).
TEST(BlockShardEventsTest, AShardWithOnlyErrorsCarriesItsTokensInTheFirst) {
  ShardOutcome outcome;
  outcome.failed_rows = {{0, absl::InternalError("no choices"), 1},
                         {1, absl::UnavailableError("busy"), 3}};
  outcome.usage = Usage(5, 0);
  std::vector<LogEvent> group =
      BlockShardEvents(ShardSpec{.index = 0, .first_row = 0, .row_count = 2},
                       std::move(outcome));
  ASSERT_THAT(Shape(group), ElementsAre("E", "E"));
  EXPECT_EQ(group[0].shard_error().usage().prompt_tokens(), 5);
  EXPECT_FALSE(group[1].shard_error().has_usage());
}

TEST(WholeShardErrorEventTest, KeepsTheTokensUsedBeforeTheShardStopped) {
  LogEvent event = WholeShardErrorEvent(
      ShardSpec{.index = 1, .first_row = 8, .row_count = 8},
      absl::CancelledError("stopped"), 1, "ask", Usage(40, 60));
  EXPECT_EQ(event.shard_error().usage().prompt_tokens(), 40);
  EXPECT_EQ(event.shard_error().usage().completion_tokens(), 60);
  EXPECT_FALSE(WholeShardErrorEvent(ShardSpec{.index = 1, .row_count = 8},
                                    absl::CancelledError("stopped"), 0, "")
                   .shard_error()
                   .has_usage());
}

class StageShardEventsTest : public ::testing::Test {
 protected:
  // Two stages: steps "a" and "b" in the first, "c" in the second.
  StageShardEventsTest() {
    int index = 0;
    for (const char* name : {"a", "b", "c"}) {
      pipeline_.steps.push_back(StepSpec{.name = name,
                                         .index = index++,
                                         .kind = RenameStepSpec{},
                                         .drop_columns = {},
                                         .drop_duplicates = {}});
    }
    pipeline_.stages = {StageSpec{0, 2}, StageSpec{2, 3}};
  }
  static ShardOutcome Outcome(int rows) {
    ShardOutcome outcome;
    for (int i = 0; i < rows; ++i) outcome.rows.push_back(Row(i, 100));
    outcome.steps.emplace_back().set_step("a");
    outcome.steps.emplace_back().set_step("b");
    return outcome;
  }
  PipelineSpec pipeline_;
};

TEST_F(StageShardEventsTest, BeforeABarrierTheRowsAreStageRows) {
  const size_t row_bytes = Row(9, 100).ByteSizeLong();  // the largest
  std::vector<LogEvent> group = StageShardEvents(
      ShardSpec{.stage = 0, .index = 1, .first_row = 0, .row_count = 3},
      pipeline_, Outcome(3), row_bytes + 1);
  ASSERT_THAT(Shape(group), ElementsAre("0", "1", "2"));
  for (const LogEvent& event : group) {
    EXPECT_TRUE(event.has_stage_rows());
    EXPECT_EQ(event.stage_rows().shard_index(), 1);
  }
  // The step counts ride in the first event only.
  EXPECT_EQ(group[0].stage_rows().steps_size(), 2);
  EXPECT_EQ(group[1].stage_rows().steps_size(), 0);
}

TEST_F(StageShardEventsTest, TheTokensRideWithTheStepCountsInTheFirstEvent) {
  const size_t row_bytes = Row(9, 100).ByteSizeLong();
  ShardOutcome outcome = Outcome(2);
  *outcome.steps[1].mutable_usage() = Usage(7, 9);
  outcome.usage = Usage(7, 9);
  std::vector<LogEvent> group = StageShardEvents(
      ShardSpec{.stage = 0, .index = 0, .first_row = 0, .row_count = 2},
      pipeline_, std::move(outcome), row_bytes + 1);
  ASSERT_THAT(Shape(group), ElementsAre("0", "1"));
  EXPECT_EQ(group[0].stage_rows().usage().completion_tokens(), 9);
  EXPECT_EQ(group[0].stage_rows().steps(1).usage().prompt_tokens(), 7);
  EXPECT_FALSE(group[1].stage_rows().has_usage());
}

TEST_F(StageShardEventsTest, TheLastStageGivesResultsEvenWithNoRows) {
  std::vector<LogEvent> group = StageShardEvents(
      ShardSpec{.stage = 1, .index = 0, .first_row = 0, .row_count = 1},
      pipeline_, Outcome(0));
  ASSERT_EQ(group.size(), 1u);
  EXPECT_TRUE(group[0].has_shard_result());
  EXPECT_EQ(group[0].shard_result().steps_size(), 2);
}

TEST_F(StageShardEventsTest, FailuresFollowInOutputOrderNamingTheirStep) {
  ShardOutcome outcome = Outcome(1);
  outcome.failed_steps.push_back(
      PipelineRowFailure{1, 4, {2, 1}, absl::InternalError("late"), 1});
  outcome.failed_steps.push_back(
      PipelineRowFailure{0, 3, {0, 5}, absl::InternalError("early"), 2});
  std::vector<LogEvent> group = StageShardEvents(
      ShardSpec{.stage = 1, .index = 0, .first_row = 0, .row_count = 5},
      pipeline_, std::move(outcome));
  ASSERT_THAT(Shape(group), ElementsAre("0", "E", "E"));
  EXPECT_EQ(group[1].shard_error().step(), "a");
  EXPECT_EQ(group[1].shard_error().first_row(), 3);
  EXPECT_THAT(group[1].shard_error().order_key(), ElementsAre(0, 5));
  EXPECT_EQ(group[2].shard_error().step(), "b");
  EXPECT_EQ(group[2].shard_error().message(), "late");
}

}  // namespace
}  // namespace sdg
