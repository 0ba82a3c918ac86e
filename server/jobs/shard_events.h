// The events a shard's outcome is committed as: built outside any lock,
// from the shard and its outcome alone. A block's shard gives shard_result
// events and one shard_error per run of failed rows; a pipeline's gives its
// output rows (shard_result for the last stage, the log-only stage_rows
// before a barrier, the first event carrying the step counts) and one
// shard_error per row that failed at a step. Rows are split between events
// so that none passes max_event_bytes (a client's receive limit is 4 MiB by
// default); a row larger than that goes alone.
#ifndef SDG_SERVER_JOBS_SHARD_EVENTS_H_
#define SDG_SERVER_JOBS_SHARD_EVENTS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/pipeline/pipeline_spec.h"
#include "server/store/log_event.h"

namespace sdg {

inline constexpr size_t kMaxResultEventBytes = size_t{1} << 20;

// Every function here puts the shard's tokens (ShardOutcome::usage) in its
// first event.

// A shard that has no outcome (the job was stopped, its rows could not be
// read): one shard_error for all its rows. `step`: for a pipeline's shard,
// its stage's first step ("" for a block). `usage`: what its requests
// used before it stopped.
LogEvent WholeShardErrorEvent(const ShardSpec& shard,
                              const absl::Status& status, int attempts,
                              absl::string_view step,
                              const v1::TokenUsage& usage = {});

// A block's shard: its rows in shard_result events, then a shard_error for
// each run of consecutive failed rows with the same error and attempts.
std::vector<LogEvent> BlockShardEvents(
    const ShardSpec& shard, ShardOutcome outcome,
    size_t max_event_bytes = kMaxResultEventBytes);

// A shard of a pipeline's stage: its output rows, then its failed rows in
// output order, each naming its step.
std::vector<LogEvent> StageShardEvents(
    const ShardSpec& shard, const PipelineSpec& pipeline, ShardOutcome outcome,
    size_t max_event_bytes = kMaxResultEventBytes);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_EVENTS_H_
