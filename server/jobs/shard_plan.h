// How a dataset of N rows is cut into shards of batch_size rows. Computed on
// demand, so a plan costs no memory whatever the dataset's size.
#ifndef SDG_SERVER_JOBS_SHARD_PLAN_H_
#define SDG_SERVER_JOBS_SHARD_PLAN_H_

#include <cstdint>

namespace sdg {

struct ShardSpec {
  int64_t index = 0;
  int64_t first_row = 0;
  int64_t row_count = 0;
};

// A pipeline's shards: its first stage's are its plan's (0, 1, ...); a later
// stage's shard s has index stage * kStageStride + s, so that a shard's
// index does not depend on when the stages before it released their rows.
inline constexpr int64_t kStageStride = int64_t{1} << 40;
inline int StageOf(const ShardSpec& shard) {
  return static_cast<int>(shard.index / kStageStride);
}

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
