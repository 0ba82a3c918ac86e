// How a dataset of N rows is cut into shards of batch_size rows. Computed on
// demand, so a plan costs no memory whatever the dataset's size.
#ifndef SDG_SERVER_JOBS_SHARD_PLAN_H_
#define SDG_SERVER_JOBS_SHARD_PLAN_H_

#include <compare>
#include <cstdint>
#include <utility>

namespace sdg {

// A shard is named by its stage and its index within the stage: a block's
// job has one stage, its plan's shards 0, 1, ...; a pipeline's later stages
// are cut as the stage before releases its rows, each numbered from 0, so a
// shard's name does not depend on when that happened.
struct ShardId {
  int stage = 0;
  int64_t index = 0;

  friend auto operator<=>(const ShardId&, const ShardId&) = default;
  template <typename H>
  friend H AbslHashValue(H hash, const ShardId& id) {
    return H::combine(std::move(hash), id.stage, id.index);
  }
};

// Logs written before shards were named by stage packed a later stage's
// shard s as stage * 2^40 + s in shard_index, with no stage field.
ShardId LoggedShardId(int stage, int64_t index);

struct ShardSpec {
  int stage = 0;
  int64_t index = 0;
  // Within the stage's input: the dataset for stage 0.
  int64_t first_row = 0;
  int64_t row_count = 0;

  ShardId id() const { return {stage, index}; }
};

class ShardPlan {
 public:
  // batch_size must be positive.
  ShardPlan(int64_t total_rows, int64_t batch_size);

  int64_t total_rows() const { return total_rows_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t shard_count() const { return shard_count_; }
  // Every shard holds batch_size rows except possibly the last.
  ShardSpec Shard(int64_t index) const;

 private:
  int64_t total_rows_;
  int64_t batch_size_;
  int64_t shard_count_;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_PLAN_H_
