// One generation job: its spec, its cancellation token, its counters and
// state, and the ordered stream of its events (started, shard results and
// errors, progress, finished).
#ifndef SDG_SERVER_JOBS_JOB_H_
#define SDG_SERVER_JOBS_JOB_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/cancellation_token.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_sink.h"
#include "server/jobs/job_spec.h"
#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"
#include "server/observability/metrics.h"

namespace sdg {

class Job : public std::enable_shared_from_this<Job> {
 public:
  Job(JobSpec spec, std::shared_ptr<JobSink> sink, Metrics& metrics);

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& id() const { return spec_.job_id; }
  const JobSpec& spec() const { return spec_; }
  const ShardPlan& plan() const { return plan_; }
  CancellationToken& token() { return token_; }

  // Stops the job; the first reason wins. CANCELLED reasons end the job
  // CANCELLED, any other code (fail-fast, timeout) ends it FAILED.
  void Cancel(absl::Status reason) { token_.Cancel(std::move(reason)); }

  // Called by the scheduler, in this order: MarkRunning once, ReportShard per
  // shard that ran, MarkFinished once. (The scheduler also runs the job's
  // timeout, spec().timeout, from MarkRunning on.)
  void MarkRunning();
  void ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                   absl::Duration elapsed);
  void MarkFinished();

  // Backpressure from the job's consumer, see JobSink::HasRoom.
  bool StreamHasRoom() const { return sink_->HasRoom(); }
  void SetOnStreamRoom(std::function<void()> callback) {
    sink_->SetOnRoom(std::move(callback));
  }

  v1::Job Snapshot() const;
  bool IsFinished() const;
  // Blocks until MarkFinished has run or `deadline` passes; true if finished.
  bool AwaitFinished(absl::Time deadline) const;
  absl::Time end_time() const;

 private:
  void EmitLocked(v1::JobEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The steps of ReportShard.
  void CountAndEmitFailureLocked(const ShardSpec& shard,
                                 const ShardOutcome& outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountAndEmitResultLocked(const ShardSpec& shard, ShardOutcome outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitProgressIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSpec spec_;
  const ShardPlan plan_;
  const std::shared_ptr<JobSink> sink_;
  Metrics& metrics_;
  CancellationToken token_;

  mutable absl::Mutex mu_;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::JOB_STATE_QUEUED;
  int64_t rows_succeeded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rows_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shards_succeeded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shards_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_generated_ ABSL_GUARDED_BY(mu_) = 0;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  absl::Time create_time_ ABSL_GUARDED_BY(mu_);
  absl::Time start_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time end_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// "succeeded", "failed" or "cancelled", for metrics and logs.
absl::string_view StateLabel(v1::JobState state);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_H_
