// What running one shard gave: its result rows, or why it failed. Made by the
// shard runner (scheduling), reported to the Job.
#ifndef SDG_SERVER_JOBS_SHARD_OUTCOME_H_
#define SDG_SERVER_JOBS_SHARD_OUTCOME_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sdg/v1/generation.pb.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg {

// Adds `more`'s tokens to `total`.
inline void AddUsage(const v1::TokenUsage& more, v1::TokenUsage& total) {
  total.set_prompt_tokens(total.prompt_tokens() + more.prompt_tokens());
  total.set_completion_tokens(total.completion_tokens() +
                              more.completion_tokens());
}

// A row of the shard that has no result, and why.
struct RowFailure {
  int64_t row_index = 0;  // in the dataset
  absl::Status status;
  // HTTP attempts of the request that failed (0: none was sent).
  int attempts = 0;
  // The HTTP status of its last reply (0: none came).
  int http_status = 0;
};

struct ShardOutcome {
  // OK unless the shard as a whole has no outcome: the job was stopped (its
  // own reason) or the shard's rows could not be read. Then `rows` and
  // `failed_rows` are empty.
  absl::Status status;
  int attempts = 0;
  // The samples of the rows that were generated, n per row, in
  // (row_index, sample_index) order.
  std::vector<v1::ResultRow> rows;
  // The rows that were not, in row order: each of the shard's rows is in
  // `rows` or here.
  std::vector<RowFailure> failed_rows;
  // The tokens the shard's replies reported (a pipeline's: its LLM steps',
  // each also in its `steps` counts).
  v1::TokenUsage usage;
  // Pipelines: `rows` are the rows that came out of the shard's stage (its
  // last step, or the barrier), and these the rows that failed at a step,
  // and each step's counts.
  std::vector<PipelineRowFailure> failed_steps;
  std::vector<v1::StepCounts> steps;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_OUTCOME_H_
