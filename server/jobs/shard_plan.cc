#include "server/jobs/shard_plan.h"

#include <algorithm>

namespace sdg {

ShardPlan::ShardPlan(int64_t total_rows, int64_t batch_size)
    : total_rows_(total_rows),
      batch_size_(batch_size),
      shard_count_((total_rows + batch_size - 1) / batch_size) {}

ShardId LoggedShardId(int stage, int64_t index) {
  constexpr int64_t kPackedStageStride = int64_t{1} << 40;
  if (stage == 0 && index >= kPackedStageStride) {
    return {static_cast<int>(index / kPackedStageStride),
            index % kPackedStageStride};
  }
  return {stage, index};
}

ShardSpec ShardPlan::Shard(int64_t index) const {
  int64_t first = index * batch_size_;
  return {.index = index,
          .first_row = first,
          .row_count = std::min(batch_size_, total_rows_ - first)};
}

}  // namespace sdg
