#include "server/jobs/shard_plan.h"

#include <gtest/gtest.h>

namespace sdg {
namespace {

TEST(ShardPlanTest, LastShardHoldsTheRemainder) {
  ShardPlan plan(100, 8);
  EXPECT_EQ(plan.shard_count(), 13);
  ShardSpec first = plan.Shard(0);
  EXPECT_EQ(first.first_row, 0);
  EXPECT_EQ(first.row_count, 8);
  ShardSpec last = plan.Shard(12);
  EXPECT_EQ(last.index, 12);
  EXPECT_EQ(last.first_row, 96);
  EXPECT_EQ(last.row_count, 4);
}

TEST(ShardPlanTest, ExactMultipleHasNoShortShard) {
  ShardPlan plan(16, 8);
  EXPECT_EQ(plan.shard_count(), 2);
  EXPECT_EQ(plan.Shard(1).row_count, 8);
}

TEST(ShardPlanTest, BatchSizeOneGivesOneShardPerRow) {
  ShardPlan plan(5, 1);
  ASSERT_EQ(plan.shard_count(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(plan.Shard(i).first_row, i);
    EXPECT_EQ(plan.Shard(i).row_count, 1);
  }
}

TEST(ShardPlanTest, BatchLargerThanDatasetGivesOneShard) {
  ShardPlan plan(3, 8);
  ASSERT_EQ(plan.shard_count(), 1);
  EXPECT_EQ(plan.Shard(0).row_count, 3);
}

TEST(ShardPlanTest, ShardsCoverEveryRowOnce) {
  ShardPlan plan(1001, 7);
  int64_t next = 0;
  for (int64_t i = 0; i < plan.shard_count(); ++i) {
    ShardSpec shard = plan.Shard(i);
    EXPECT_EQ(shard.first_row, next);
    next += shard.row_count;
  }
  EXPECT_EQ(next, 1001);
}

}  // namespace
}  // namespace sdg
