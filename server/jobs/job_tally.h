// The counts a job's events add up to. A resumed job starts from the tally
// of its stored events; a shard is committed exactly when its result or
// error event is.
#ifndef SDG_SERVER_JOBS_JOB_TALLY_H_
#define SDG_SERVER_JOBS_JOB_TALLY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/shard_plan.h"
#include "server/store/log_event.h"

namespace sdg {

// A job's counts, from its events: rows succeeded (those with sample 0 in a
// shard_result) and failed (shard_error ranges); shards committed, and
// failed when any of their rows failed; the tokens of the committed shards
// (each shard's first event carries them).
class JobTally {
 public:
  // `shard_count`: the shards known before the log is read (a pipeline's
  // later stages add more).
  explicit JobTally(int64_t shard_count)
      : shard_state_(shard_count, ShardState::kNotCommitted) {}
  void Add(const LogEvent& event);

  // Pipelines: the rows that shards [first, end) of a stage carried to its
  // barrier (stage_rows events), handed over once.
  std::vector<v1::ResultRow> TakeStageRows(ShardId first, ShardId end);
  // Pipelines: rows in, out and failed per step, in the pipeline's order.
  const std::vector<v1::StepCounts>& steps() const { return steps_; }

  bool started() const { return started_; }
  const std::optional<v1::JobFinished>& finished() const { return finished_; }
  bool committed(ShardId shard) const;
  int64_t committed_shards() const { return committed_count_; }
  uint64_t last_sequence() const { return last_sequence_; }
  int64_t rows_succeeded() const { return rows_succeeded_; }
  int64_t rows_failed() const { return rows_failed_; }
  int64_t shards_succeeded() const { return shards_succeeded_; }
  int64_t shards_failed() const { return shards_failed_; }
  const v1::TokenUsage& usage() const { return usage_; }

 private:
  enum class ShardState : uint8_t { kNotCommitted, kSucceeded, kFailed };
  // Returns the shard's state, or null if `shard` cannot be one of the
  // job's.
  ShardState* StateOf(ShardId shard);
  void AddSteps(
      const google::protobuf::RepeatedPtrField<v1::StepCounts>& steps);
  // A result (or a pipeline's barrier rows) commits the shard, succeeded
  // unless an error already failed it; false if `shard` cannot be one.
  bool CommitSucceeded(ShardId shard);

  // The first stage's shards, and a pipeline's later ones.
  std::vector<ShardState> shard_state_;
  absl::flat_hash_map<ShardId, ShardState> later_shard_state_;
  std::map<ShardId, std::vector<v1::ResultRow>> stage_rows_;
  std::vector<v1::StepCounts> steps_;
  int64_t committed_count_ = 0;
  bool started_ = false;
  std::optional<v1::JobFinished> finished_;
  uint64_t last_sequence_ = 0;
  int64_t rows_succeeded_ = 0;
  int64_t rows_failed_ = 0;
  int64_t shards_succeeded_ = 0;
  int64_t shards_failed_ = 0;
  v1::TokenUsage usage_;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_TALLY_H_
