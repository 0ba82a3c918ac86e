#include "server/jobs/shard_plan.h"

#include <algorithm>

namespace sdg {

ShardPlan::ShardPlan(int64_t total_rows, int64_t batch_size)
    : total_rows_(total_rows),
      batch_size_(batch_size),
      shard_count_((total_rows + batch_size - 1) / batch_size) {}

ShardSpec ShardPlan::Shard(int64_t index) const {
  int64_t first = index * batch_size_;
  return {index, first, std::min(batch_size_, total_rows_ - first)};
}

}  // namespace sdg
