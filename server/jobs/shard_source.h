// Which shards a job runs, and in what order. A block's are its plan's. A
// pipeline's are its first stage's, then each later stage's as its rows
// become known: a stage's input is the rows of the stage before that passed
// its drop_duplicates, released in output order as soon as no row before
// them can still come, and cut into shards of batch_size. Shards committed
// before a restart (those the tally counts) are skipped, and the rows they
// carried to a barrier are taken from the tally instead.
//
// Pure: no lock, no I/O. The job calls it under its own lock, beside the
// tally its log feeds.
#ifndef SDG_SERVER_JOBS_SHARD_SOURCE_H_
#define SDG_SERVER_JOBS_SHARD_SOURCE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "server/jobs/job_spec.h"
#include "server/jobs/job_tally.h"
#include "server/jobs/shard_plan.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg {

class ShardSource {
 public:
  // `spec` and `tally` outlive the source; `plan` cuts the job's dataset
  // (a pipeline's seed rows).
  ShardSource(const JobSpec& spec, const ShardPlan& plan, JobTally& tally);

  ShardSource(const ShardSource&) = delete;
  ShardSource& operator=(const ShardSource&) = delete;

  bool HasShardToStart() const;
  // The next shard to run; only when HasShardToStart(). A pipeline's later
  // stages come first: their rows are nearest to the output (the first
  // rows come early) and they free what the barriers hold.
  ShardSpec Next();
  // Shards to run in this process so far (a pipeline's grow).
  int64_t shards_to_run() const { return shards_to_run_; }
  // Shards cut so far, committed or not.
  int64_t shards_cut() const { return shards_cut_; }

  // The input of a later stage's shard (shard.stage > 0).
  std::vector<PipelineRow> StageRows(const ShardSpec& shard) const;

  // Rows `shard` carried to its stage's barrier; they wait there until no
  // uncommitted shard can precede them (Release).
  void AddBarrierRows(
      const ShardSpec& shard,
      const google::protobuf::RepeatedPtrField<PipelineRow>& rows);
  // `shard`'s events are committed: it no longer holds back the rows after
  // it.
  void Committed(const ShardSpec& shard);
  // Releases every barrier row that no uncommitted shard can precede into
  // the next stage (deduplicated, in order) and cuts the shards that makes.
  void Release();

 private:
  // A block's job has one stage; a pipeline's has one per barrier, plus one.
  struct Stage {
    // Flatten steps in the stage: each puts a column index before the keys.
    int flattens = 0;
    // Later stages: their input rows, in output order, as released so far.
    std::vector<PipelineRow> rows;
    bool input_complete = false;
    int64_t shards_cut = 0;
    // Cut shards (local indices) not committed yet.
    std::set<int64_t> uncommitted;
    // Rows that reached the stage's barrier, waiting to be released into
    // the next stage, by order key; and the drop_duplicates keys released.
    std::multimap<std::vector<int64_t>, PipelineRow> pending;
    std::optional<DuplicateFilter> released;  // stages with a barrier
  };

  // Cuts stage `stage`'s new shards from its rows (a short last shard only
  // once its input is complete).
  void CutShards(int stage);
  // The least order key a row stage `stage` has not yet delivered to its
  // barrier could have, or nullopt when the stage has delivered every row.
  std::optional<std::vector<int64_t>> OutputBound(int stage) const;
  ShardSpec ShardOf(int stage, int64_t local) const;
  void AddPending(int stage, PipelineRow row);
  // Moves the first stage's cursor past shards committed before this
  // process ran the job.
  void SkipCommittedFirstStageShards();

  const JobSpec& spec_;
  const ShardPlan plan_;
  JobTally& tally_;
  std::vector<Stage> stages_;
  // The next first-stage shard to start (past those committed before), and
  // the later stages' cut shards not started yet.
  int64_t next_first_stage_shard_ = 0;
  std::deque<ShardId> ready_;
  int64_t shards_to_run_ = 0;
  int64_t shards_cut_ = 0;
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_SHARD_SOURCE_H_
