// One generation job: its spec and dataset, its cancellation token, its
// counters and state, and its event log (started, shard results and errors,
// progress, finished), which the store commits before anyone reads it.
#ifndef SDG_SERVER_JOBS_JOB_H_
#define SDG_SERVER_JOBS_JOB_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cancellation_token.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/job_state.h"
#include "server/jobs/job_tally.h"
#include "server/jobs/shard_input.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/jobs/shard_source.h"
#include "server/observability/metrics.h"
#include "server/store/dataset.h"
#include "server/store/event_log.h"
#include "server/store/job_store.h"
#include "server/store/log_event.h"

namespace sdg {

// True for the record of an ended job that describes it alone (its final
// counts and totals saved with its final state).
bool DescribedByRecord(const JobRecord& record);
// The job as a client sees it, from its spec and its record: an ended
// job's whole description when DescribedByRecord (Job::Snapshot adds what a
// job in memory counts).
v1::Job DescribeStored(const JobSpec& spec, const JobRecord& record);

class Job : public std::enable_shared_from_this<Job> {
 public:
  // A job admitted now. `record` is in `store` already; the job's log is
  // opened there, empty, and a commit that fails suspends the job.
  static absl::StatusOr<std::shared_ptr<Job>> Create(
      JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
      JobStore& store, Metrics& metrics);
  // A job `store` holds, as a process finds it when it starts. An
  // unfinished job's log is read into its tally, and counts as resumed
  // unless the log says it ended; a finished job's log is only opened for
  // reading. `dataset` is null where the store no longer holds it.
  static absl::StatusOr<std::shared_ptr<Job>> Restore(
      JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
      JobStore& store, Metrics& metrics);

  // Only Create and Restore make a Job (std::make_shared needs the
  // constructor public). `tally` counts what `log` already holds.
  class ConstructionKey {
    friend class Job;
    ConstructionKey() = default;
  };
  Job(ConstructionKey, JobSpec spec, JobRecord record,
      std::shared_ptr<Dataset> dataset, std::shared_ptr<EventLog> log,
      JobTally tally, JobRecordStore& records, JobLogStore& logs,
      Metrics& metrics);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return spec_.job_id; }
  const JobSpec& spec() const { return spec_; }
  // The seed dataset's plan: a block's shards, a pipeline's first stage's.
  const ShardPlan& plan() const { return plan_; }
  bool is_pipeline() const { return spec_.pipeline.has_value(); }
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

  // For the scheduler: the job's ShardSource (shard_source.h), under the
  // job's lock.
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
  // Pipelines: the input rows of `shard`'s stage (seed rows for the first
  // stage).
  absl::StatusOr<std::vector<PipelineRow>> ReadStageRows(
      const ShardSpec& shard) const;

  // In this order: MarkRunning once, ReportShard per shard that ran,
  // MarkFinished once. (The scheduler also runs the job's timeout,
  // spec().timeout, from MarkRunning on.) MarkRunning does no I/O (the
  // scheduler calls it under its lock, so that `started` is the first
  // event): the caller saves the record after, outside its locks
  // (SaveRecord). MarkFinished saves the record itself.
  void MarkRunning();
  //
  // ReportShard appends the shard's events and counts the shard: its place
  // in the job's progress is taken, and a pipeline's barrier releases what
  // it no longer holds back. A block's shard counts at once. A pipeline's
  // counts once its events are committed (a later stage starts only from
  // rows on disk); no thread waits for that. Returns true if the shard
  // counted before ReportShard returned; otherwise `on_counted` runs once
  // it has, on the thread that saw the commit (it must not block).
  bool ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                   absl::Duration elapsed,
                   std::function<void()> on_counted = nullptr);
  void MarkFinished();

  // Writes the record to the store. One job's writes run one at a time, each
  // of the record as it is when its turn comes, so an older record never
  // overwrites a newer one. Holds none of the locks the scheduler or a
  // reader of the job takes while the store writes. Returns false (and
  // logs why) if the store refused it, or for a suspended job, whose stored
  // state stays unfinished.
  bool SaveRecord() ABSL_LOCKS_EXCLUDED(save_mu_, mu_);

  // The job's events, for watchers.
  std::shared_ptr<EventLog> log() const;
  v1::Job Snapshot() const;
  // True once the job has ended or was suspended.
  bool IsFinished() const;
  // True once the job has ended and its final record is in the store: from
  // then on the store alone describes it (a job restored ended is, too).
  bool IsStoredEnded() const;
  // Blocks until MarkFinished has run or `deadline` passes; true if finished.
  bool AwaitFinished(absl::Time deadline) const;
  absl::Time end_time() const;
  // Snapshot().state(), without building the snapshot.
  v1::JobState state() const;

 private:
  // The seed dataset's shards (none without a dataset: a finished job's).
  static ShardPlan SeedPlan(const JobSpec& spec, const Dataset* dataset);
  // A failed commit of the job's log suspends the job (Suspend).
  void SuspendOnCommitError();
  // MarkFinished's two ends, under mu_: a suspended job's (its log ends
  // with UNAVAILABLE, its record stays unfinished), and a finished job's
  // (its `finished` event, state and reason).
  void EndSuspendedLocked(const absl::Status& stop_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndFinishedLocked(const absl::Status& stop_reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What describes the job once it has ended, besides its final event.
  JobState::Totals TotalsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendLocked(LogEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shard's events, committed together.
  // Returns the last event's sequence.
  uint64_t AppendGroupLocked(std::vector<LogEvent> group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pipeline's shard whose events are committed: the rows it holds back
  // at its stage's barrier go on (unless the job is stopping).
  void CountCommittedShard(const ShardSpec& shard) ABSL_LOCKS_EXCLUDED(mu_);
  void AppendProgressIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The events `outcome` is committed as (shard_events.h); needs no lock.
  std::vector<LogEvent> ShardEventsOf(const ShardSpec& shard,
                                      ShardOutcome outcome) const;

  const JobSpec spec_;
  const ShardPlan plan_;
  const std::string request_digest_;
  const std::string tenant_;
  // Where the job saves its record (SaveRecord), and where its log is
  // opened again for reading once it has ended.
  JobRecordStore& records_;
  JobLogStore& logs_;
  Metrics& metrics_;
  CancellationToken token_;
  std::atomic<bool> suspending_ = false;

  // Held while the store writes the record (SaveRecord); taken before mu_.
  absl::Mutex save_mu_;

  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(save_mu_);
  JobState state_ ABSL_GUARDED_BY(mu_);
  // Released when the job ends.
  std::shared_ptr<Dataset> dataset_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<EventLog> log_ ABSL_GUARDED_BY(mu_);
  JobTally tally_ ABSL_GUARDED_BY(mu_);
  ShardSource source_ ABSL_GUARDED_BY(mu_);  // reads tally_
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stored_ended_ ABSL_GUARDED_BY(mu_) = false;  // IsStoredEnded
  // The tally's counts when the job started running here: the rates count
  // from them.
  int64_t rows_at_run_start_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completion_tokens_at_run_start_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time run_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// "succeeded", "failed" or "cancelled", for metrics and logs.
absl::string_view StateLabel(v1::JobState state);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_H_
