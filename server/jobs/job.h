// One generation job: its spec and dataset, its cancellation token, its
// counters and state, and its event log (started, shard results and errors,
// progress, finished), which the store commits before anyone reads it.
#ifndef SDG_SERVER_JOBS_JOB_H_
#define SDG_SERVER_JOBS_JOB_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cancellation_token.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/shard_input.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"
#include "server/store/dataset.h"
#include "server/store/event_log.h"
#include "server/store/job_store.h"

namespace sdg {

// The counts a job's events add up to. A resumed job starts from the tally
// of its stored events; a shard is committed exactly when its result or
// error event is.
// A job's counts, from its events: rows succeeded (those with sample 0 in a
// shard_result) and failed (shard_error ranges); shards committed, and
// failed when any of their rows failed.
class JobTally {
 public:
  // `shard_count`: the shards known before the log is read (a pipeline's
  // later stages add more).
  explicit JobTally(int64_t shard_count)
      : shard_state_(shard_count, ShardState::kNotCommitted) {}
  void Add(const v1::JobEvent& event);

  // Pipelines: the rows that shards [first, end) carried to their barrier
  // (stage_rows events), handed over once.
  std::vector<v1::ResultRow> TakeStageRows(int64_t first, int64_t end);
  // Pipelines: rows in, out and failed per step, in the pipeline's order.
  const std::vector<v1::StepCounts>& steps() const { return steps_; }

  bool started() const { return started_; }
  const std::optional<v1::JobFinished>& finished() const { return finished_; }
  bool committed(int64_t shard) const;
  int64_t committed_shards() const { return committed_count_; }
  uint64_t last_sequence() const { return last_sequence_; }
  int64_t rows_succeeded() const { return rows_succeeded_; }
  int64_t rows_failed() const { return rows_failed_; }
  int64_t shards_succeeded() const { return shards_succeeded_; }
  int64_t shards_failed() const { return shards_failed_; }

 private:
  enum class ShardState : uint8_t { kNotCommitted, kSucceeded, kFailed };
  // Returns the shard's state, or null if `shard` cannot be one of the
  // job's.
  ShardState* StateOf(int64_t shard);
  void AddSteps(
      const google::protobuf::RepeatedPtrField<v1::StepCounts>& steps);
  // A result (or a pipeline's barrier rows) commits the shard, succeeded
  // unless an error already failed it; false if `shard` cannot be one.
  bool CommitSucceeded(int64_t shard);

  // The first stage's shards, and a pipeline's later ones (sparse: their
  // indices start at multiples of Job::kStageStride).
  std::vector<ShardState> shard_state_;
  absl::flat_hash_map<int64_t, ShardState> later_shard_state_;
  std::map<int64_t, std::vector<v1::ResultRow>> stage_rows_;
  std::vector<v1::StepCounts> steps_;
  int64_t committed_count_ = 0;
  bool started_ = false;
  std::optional<v1::JobFinished> finished_;
  uint64_t last_sequence_ = 0;
  int64_t rows_succeeded_ = 0;
  int64_t rows_failed_ = 0;
  int64_t shards_succeeded_ = 0;
  int64_t shards_failed_ = 0;
};

class Job : public std::enable_shared_from_this<Job> {
 public:
  // `tally` counts what `log` already holds (nothing for a new job).
  Job(JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
      std::shared_ptr<EventLog> log, JobTally tally, JobStore& store,
      Metrics& metrics);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return spec_.job_id; }
  const JobSpec& spec() const { return spec_; }
  // The seed dataset's plan: a block's shards, a pipeline's first stage's.
  const ShardPlan& plan() const { return plan_; }
  bool is_pipeline() const { return spec_.pipeline.has_value(); }
  // True if ReportShard waits for the shard's events to be committed (a
  // pipeline's stage releases rows to the next one only from the disk).
  bool ReportWaitsForCommit() const { return is_pipeline(); }
  const std::string& request_digest() const { return request_digest_; }
  // The tenant that created the job ("" when authentication is off).
  const std::string& tenant() const { return tenant_; }
  CancellationToken& token() { return token_; }

  // Stops the job; the first reason wins. CANCELLED reasons end the job
  // CANCELLED, any other code (fail-fast, timeout) ends it FAILED.
  void Cancel(absl::Status reason) { token_.Cancel(std::move(reason)); }
  // Stops the job without ending it: what is committed stays, shards in
  // flight are dropped, and the job runs on from there when sdgd starts
  // again. For shutdown, and when its events cannot be committed.
  void Suspend(absl::Status reason);

  // For the scheduler. A block's shards are its plan's. A pipeline's are
  // its first stage's, then each later stage's as its rows become known:
  // a stage's input is the rows of the stage before that passed its
  // drop_duplicates, released in output order as soon as no row before
  // them can still come, and cut into shards of batch_size. Shards
  // committed before a restart are skipped.
  bool HasShardToStart() const;
  // The next shard to run; only when HasShardToStart().
  ShardSpec StartNextShard();
  // Shards to run in this process so far (a pipeline's grow).
  int64_t shards_to_run() const;
  // Shards cut so far, committed or not.
  int64_t shard_count() const;
  // What `shard` runs on: a block's rows read from the dataset, or a
  // pipeline stage's input (ReadStageRows).
  absl::StatusOr<ShardInput> ReadInput(const ShardSpec& shard) const;
  // The rows of `shard`, read from the dataset.
  absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      const ShardSpec& shard) const;
  // Pipelines: the stage `shard` belongs to, and its input rows (seed rows
  // for the first stage).
  static int StageOf(const ShardSpec& shard) {
    return static_cast<int>(shard.index / kStageStride);
  }
  absl::StatusOr<std::vector<PipelineRow>> ReadStageRows(
      const ShardSpec& shard) const;
  // A later stage's shard s has index stage * kStageStride + s, so that a
  // shard's index does not depend on when the stages before it released
  // their rows.
  static constexpr int64_t kStageStride = int64_t{1} << 40;

  // In this order: MarkRunning once, ReportShard per shard that ran,
  // MarkFinished once. (The scheduler also runs the job's timeout,
  // spec().timeout, from MarkRunning on.) MarkRunning does no I/O (the
  // scheduler calls it under its lock, so that `started` is the first
  // event): the caller saves the record after, outside its locks
  // (SaveRecord). MarkFinished saves the record itself.
  void MarkRunning();
  void ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                   absl::Duration elapsed);
  void MarkFinished();

  // Writes the record to the store. One job's writes run one at a time, each
  // of the record as it is when its turn comes, so an older record never
  // overwrites a newer one. Holds none of the locks the scheduler or a
  // reader of the job takes while the store writes.
  void SaveRecord() ABSL_LOCKS_EXCLUDED(save_mu_, mu_);

  // The job's events, for watchers.
  std::shared_ptr<EventLog> log() const;
  v1::Job Snapshot() const;
  // True once the job has ended or was suspended.
  bool IsFinished() const;
  // Blocks until MarkFinished has run or `deadline` passes; true if finished.
  bool AwaitFinished(absl::Time deadline) const;
  absl::Time end_time() const;
  // Snapshot().state(), without building the snapshot.
  v1::JobState state() const;

 private:
  // MarkFinished's two ends, under mu_: a suspended job's (its log ends
  // with UNAVAILABLE, its record stays unfinished), and a finished job's
  // (its `finished` event, state and reason).
  void EndSuspendedLocked(const absl::Status& stop_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndFinishedLocked(const absl::Status& stop_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state a job ends in, and why (empty when it succeeded).
  std::pair<v1::JobState, std::string> EndStateLocked(
      const absl::Status& stop_reason) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendLocked(v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shard's events, committed together.
  void AppendGroupLocked(std::vector<v1::JobEvent> group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendProgressIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The events `outcome` is committed as (shard_events.h); needs no lock.
  std::vector<v1::JobEvent> ShardEventsOf(const ShardSpec& shard,
                                          ShardOutcome outcome) const;
  // Releases every pending row that no uncommitted shard can precede into
  // the next stage (deduplicated, in order) and cuts the shards that makes.
  void AdvanceStagesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cuts stage `stage`'s new shards from its rows (a short last shard only
  // once its input is complete).
  void CutShardsLocked(int stage) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least order key a row stage `stage` has not yet delivered to its
  // barrier could have, or nullopt when the stage has delivered every row.
  std::optional<std::vector<int64_t>> OutputBoundLocked(int stage) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardSpec ShardOfLocked(int stage, int64_t local) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A row that reached stage `stage`'s barrier, to wait for its release.
  void AddPendingLocked(int stage, PipelineRow row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the first stage's cursor past shards committed before this
  // process ran the job.
  void SkipCommittedFirstStageShardsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSpec spec_;
  const ShardPlan plan_;
  const std::string request_digest_;
  const std::string tenant_;
  JobStore& store_;
  Metrics& metrics_;
  CancellationToken token_;
  std::atomic<bool> suspending_ = false;

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

  // Held while the store writes the record (SaveRecord); taken before mu_.
  absl::Mutex save_mu_;

  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(save_mu_);
  std::vector<Stage> stages_ ABSL_GUARDED_BY(mu_);
  // The next first-stage shard to start (past those committed before), and
  // the later stages' cut shards not started yet.
  int64_t next_first_stage_shard_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<int64_t> ready_ ABSL_GUARDED_BY(mu_);
  int64_t shards_to_run_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shards_cut_ ABSL_GUARDED_BY(mu_) = 0;
  JobRecord record_ ABSL_GUARDED_BY(mu_);
  // Released when the job ends.
  std::shared_ptr<Dataset> dataset_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<EventLog> log_ ABSL_GUARDED_BY(mu_);
  JobTally tally_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  int64_t tokens_generated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rows_at_run_start_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time run_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// "succeeded", "failed" or "cancelled", for metrics and logs.
absl::string_view StateLabel(v1::JobState state);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_H_
