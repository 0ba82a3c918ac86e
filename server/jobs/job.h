// One generation job: its spec and dataset, its cancellation token, its
// counters and state, and its event log (started, shard results and errors,
// progress, finished), which the store commits before anyone reads it.
#ifndef SDG_SERVER_JOBS_JOB_H_
#define SDG_SERVER_JOBS_JOB_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cancellation_token.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/dataset.h"
#include "server/jobs/event_log.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/job_store.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"

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
  bool committed(int64_t shard) const {
    return shard >= 0 && shard < static_cast<int64_t>(shard_state_.size()) &&
           shard_state_[shard] != ShardState::kNotCommitted;
  }
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

  std::vector<ShardState> shard_state_;
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
  const std::string& request_digest() const { return request_digest_; }
  CancellationToken& token() { return token_; }

  // Stops the job; the first reason wins. CANCELLED reasons end the job
  // CANCELLED, any other code (fail-fast, timeout) ends it FAILED.
  void Cancel(absl::Status reason) { token_.Cancel(std::move(reason)); }
  // Stops the job without ending it: what is committed stays, shards in
  // flight are dropped, and the job runs on from there when sdgd starts
  // again. For shutdown, and when its events cannot be committed.
  void Suspend(absl::Status reason);

  // For the scheduler. A block's shards are its plan's. A pipeline's are
  // its first stage's, then each later stage's once the stage before has
  // ended and its barrier's rows are known: shard_count() and
  // shards_to_run() grow then, and shard indices run on across stages.
  // Shards committed before a restart are skipped: NextShardToRun(i) is the
  // first shard >= i still to run (or shard_count()).
  int64_t shard_count() const;
  ShardSpec Shard(int64_t index) const;
  int64_t NextShardToRun(int64_t from) const;
  int64_t shards_to_run() const;
  // The rows of `shard`, read from the dataset.
  absl::StatusOr<std::vector<google::protobuf::Struct>> ReadRows(
      const ShardSpec& shard) const;
  // Pipelines: the stage `shard` belongs to, and its input rows (seed rows
  // for the first stage).
  int StageOf(const ShardSpec& shard) const;
  absl::StatusOr<std::vector<PipelineRow>> ReadStageRows(
      const ShardSpec& shard) const;
  // In this order: MarkRunning once, ReportShard per shard that ran,
  // MarkFinished once. (The scheduler also runs the job's timeout,
  // spec().timeout, from MarkRunning on.)
  void MarkRunning();
  void ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                   absl::Duration elapsed);
  void MarkFinished();

  // The job's events, for watchers.
  std::shared_ptr<EventLog> log() const;
  v1::Job Snapshot() const;
  // True once the job has ended or was suspended.
  bool IsFinished() const;
  // Blocks until MarkFinished has run or `deadline` passes; true if finished.
  bool AwaitFinished(absl::Time deadline) const;
  absl::Time end_time() const;

 private:
  void AppendLocked(v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shard's events, committed together.
  void AppendGroupLocked(std::vector<v1::JobEvent> group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendProgressIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveRecordLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pipeline shard's events: its output (results, or the rows for its
  // barrier, which are kept for the stage's end too) and its failed rows.
  std::vector<v1::JobEvent> PipelineEventsLocked(const ShardSpec& shard,
                                                 ShardOutcome outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the stage after the last one built, from its barrier's rows, as
  // long as the last stage has every shard committed and is not the
  // pipeline's last.
  void BuildStagesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int StageIndexLocked(int64_t shard) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSpec spec_;
  const ShardPlan plan_;
  const std::string request_digest_;
  JobStore& store_;
  Metrics& metrics_;
  CancellationToken token_;
  std::atomic<bool> suspending_ = false;

  // A block's job has one stage; a pipeline's has one per barrier, plus one.
  struct Stage {
    int64_t first_shard = 0;
    ShardPlan plan;
    // Later stages: their input rows, in output order (the first stage
    // reads the dataset).
    std::shared_ptr<const std::vector<PipelineRow>> rows;
  };

  mutable absl::Mutex mu_;
  // The stages built so far; a later one is added when the one before ends.
  std::vector<Stage> stages_ ABSL_GUARDED_BY(mu_);
  // Shards committed before this process ran the job.
  std::vector<bool> committed_at_start_ ABSL_GUARDED_BY(mu_);
  int64_t shards_to_run_ ABSL_GUARDED_BY(mu_) = 0;
  // The last stage's shards not yet committed, and the rows they carried
  // to its barrier so far.
  int64_t stage_uncommitted_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<PipelineRow> barrier_rows_ ABSL_GUARDED_BY(mu_);
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
