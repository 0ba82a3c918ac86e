// What running one shard gave: its result rows, or why it failed. Made by the
// shard runner (scheduling), reported to the Job.
#ifndef SDG_SERVER_JOBS_SHARD_OUTCOME_H_
#define SDG_SERVER_JOBS_SHARD_OUTCOME_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

struct ShardOutcome {
  // OK, or why the shard failed (the job's own reason when it was stopped).
  absl::Status status;
  // HTTP attempts of the request that failed.
  int attempts = 0;
  // row_count * n rows, in (row_index, sample_index) order, when OK.
  std::vector<v1::ResultRow> rows;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_OUTCOME_H_
