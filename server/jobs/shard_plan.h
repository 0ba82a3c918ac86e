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
