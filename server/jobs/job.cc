#include "server/jobs/job.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "google/protobuf/util/time_util.h"

namespace sdg {
namespace {

constexpr absl::Duration kProgressInterval = absl::Seconds(1);

void SetTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  if (time == absl::InfinitePast()) return;
  *out = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      absl::ToUnixNanos(time));
}

}  // namespace

absl::string_view StateLabel(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return "queued";
    case v1::JOB_STATE_RUNNING:
      return "running";
    case v1::JOB_STATE_SUCCEEDED:
      return "succeeded";
    case v1::JOB_STATE_FAILED:
      return "failed";
    case v1::JOB_STATE_CANCELLED:
      return "cancelled";
    default:
      return "unspecified";
  }
}

Job::Job(JobSpec spec, std::shared_ptr<JobSink> sink, Metrics& metrics)
    : spec_(std::move(spec)),
      plan_(static_cast<int64_t>(spec_.rows.size()), spec_.batch_size),
      sink_(std::move(sink)),
      metrics_(metrics) {
  absl::MutexLock lock(&mu_);
  create_time_ = absl::Now();
}

void Job::EmitLocked(v1::JobEvent event) {
  event.set_job_id(spec_.job_id);
  sink_->Emit(std::move(event));
}

void Job::MarkRunning() {
  absl::MutexLock lock(&mu_);
  state_ = v1::JOB_STATE_RUNNING;
  start_time_ = absl::Now();
  last_progress_ = start_time_;
  metrics_.JobStarted();
  v1::JobEvent event;
  v1::JobStarted* started = event.mutable_started();
  started->set_total_rows(plan_.total_rows());
  started->set_total_shards(plan_.shard_count());
  started->set_batch_size(spec_.batch_size);
  started->set_num_workers(spec_.num_workers);
  EmitLocked(std::move(event));
  Log(LogLevel::kInfo, "job started",
      {{"job_id", spec_.job_id},
       {"block", spec_.block.name()},
       {"backend", spec_.block.backend()},
       {"rows", plan_.total_rows()},
       {"shards", plan_.shard_count()},
       {"batch_size", spec_.batch_size},
       {"num_workers", spec_.num_workers}});
}

void Job::ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                      absl::Duration elapsed) {
  const bool failed = !outcome.status.ok();
  const bool fail_fast = failed &&
                         spec_.error_policy == v1::ERROR_POLICY_FAIL_FAST &&
                         !token_.IsCancelled();
  metrics_.ShardFinished(failed ? "failed" : "succeeded", elapsed);
  metrics_.RowsFinished(failed ? "failed" : "succeeded", shard.row_count);
  const absl::Status status = outcome.status;
  {
    absl::MutexLock lock(&mu_);
    if (failed) {
      CountAndEmitFailureLocked(shard, outcome);
    } else {
      CountAndEmitResultLocked(shard, std::move(outcome));
    }
    EmitProgressIfDueLocked();
  }
  if (fail_fast) {
    Cancel(absl::AbortedError(
        absl::StrCat("shard ", shard.index, " (rows ", shard.first_row, "-",
                     shard.first_row + shard.row_count - 1,
                     ") failed and error_policy is ERROR_POLICY_FAIL_FAST: ",
                     status.message())));
  }
}

void Job::CountAndEmitFailureLocked(const ShardSpec& shard,
                                    const ShardOutcome& outcome) {
  ++shards_failed_;
  rows_failed_ += shard.row_count;
  v1::JobEvent event;
  v1::ShardError* error = event.mutable_shard_error();
  error->set_shard_index(shard.index);
  error->set_first_row(shard.first_row);
  error->set_row_count(shard.row_count);
  error->set_code(static_cast<int>(outcome.status.code()));
  error->set_message(std::string(outcome.status.message()));
  error->set_attempts(outcome.attempts);
  EmitLocked(std::move(event));
  if (outcome.status.code() != absl::StatusCode::kCancelled) {
    Log(LogLevel::kWarning, "shard failed",
        {{"job_id", spec_.job_id},
         {"shard", shard.index},
         {"backend", spec_.block.backend()},
         {"code", absl::StatusCodeToString(outcome.status.code())},
         {"attempts", outcome.attempts},
         {"error", std::string(outcome.status.message())}});
  }
}

void Job::CountAndEmitResultLocked(const ShardSpec& shard,
                                   ShardOutcome outcome) {
  ++shards_succeeded_;
  rows_succeeded_ += shard.row_count;
  tokens_generated_ += outcome.completion_tokens;
  v1::JobEvent event;
  v1::ShardResult* result = event.mutable_shard_result();
  result->set_shard_index(shard.index);
  result->mutable_rows()->Reserve(static_cast<int>(outcome.rows.size()));
  for (v1::ResultRow& row : outcome.rows) *result->add_rows() = std::move(row);
  EmitLocked(std::move(event));
}

void Job::EmitProgressIfDueLocked() {
  const absl::Time now = absl::Now();
  if (now - last_progress_ < kProgressInterval) return;
  last_progress_ = now;
  const double seconds = absl::ToDoubleSeconds(now - start_time_);
  v1::JobEvent event;
  v1::JobProgress* progress = event.mutable_progress();
  progress->set_rows_done(rows_succeeded_);
  progress->set_rows_failed(rows_failed_);
  progress->set_rows_per_second(rows_succeeded_ / seconds);
  progress->set_tokens_per_second(tokens_generated_ / seconds);
  EmitLocked(std::move(event));
}

void Job::MarkFinished() {
  // Why the job was stopped early, if it was: cancelled (CANCELLED), failed
  // fast (ABORTED) or out of time (DEADLINE_EXCEEDED).
  const absl::Status stop_reason = token_.reason();
  absl::MutexLock lock(&mu_);
  if (!stop_reason.ok()) {
    state_ = stop_reason.code() == absl::StatusCode::kCancelled
                 ? v1::JOB_STATE_CANCELLED
                 : v1::JOB_STATE_FAILED;
    reason_ = std::string(stop_reason.message());
  } else if (shards_failed_ > 0) {
    state_ = v1::JOB_STATE_FAILED;
    reason_ = absl::StrCat(shards_failed_, " of ", plan_.shard_count(),
                           " shards failed; see the shard_error events");
  } else {
    state_ = v1::JOB_STATE_SUCCEEDED;
  }
  bool ran = start_time_ != absl::InfinitePast();
  end_time_ = absl::Now();
  metrics_.JobFinished(StateLabel(state_), ran);

  const double elapsed_seconds =
      ran ? absl::ToDoubleSeconds(end_time_ - start_time_) : 0.0;
  v1::JobEvent event;
  v1::JobFinished* finished = event.mutable_finished();
  finished->set_state(state_);
  finished->set_rows_succeeded(rows_succeeded_);
  finished->set_rows_failed(rows_failed_);
  finished->set_shards_succeeded(shards_succeeded_);
  finished->set_shards_failed(shards_failed_);
  finished->set_elapsed_seconds(elapsed_seconds);
  finished->set_reason(reason_);
  // The sink owns the event from here (and drops it if the client is gone).
  EmitLocked(std::move(event));
  sink_->Close();
  Log(LogLevel::kInfo, "job finished",
      {{"job_id", spec_.job_id},
       {"state", StateLabel(state_)},
       {"rows_succeeded", rows_succeeded_},
       {"rows_failed", rows_failed_},
       {"elapsed_s", elapsed_seconds},
       {"reason", reason_}});
}

v1::Job Job::Snapshot() const {
  absl::MutexLock lock(&mu_);
  v1::Job job;
  job.set_job_id(spec_.job_id);
  job.set_state(state_);
  job.set_block_name(spec_.block.name());
  job.set_backend(spec_.block.backend());
  job.set_total_rows(plan_.total_rows());
  job.set_total_shards(plan_.shard_count());
  job.set_rows_succeeded(rows_succeeded_);
  job.set_rows_failed(rows_failed_);
  job.set_shards_succeeded(shards_succeeded_);
  job.set_shards_failed(shards_failed_);
  SetTimestamp(create_time_, job.mutable_create_time());
  SetTimestamp(start_time_, job.mutable_start_time());
  SetTimestamp(end_time_, job.mutable_end_time());
  job.set_reason(reason_);
  return job;
}

bool Job::IsFinished() const {
  absl::MutexLock lock(&mu_);
  return end_time_ != absl::InfinitePast();
}

bool Job::AwaitFinished(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return end_time_ != absl::InfinitePast();
  };
  return mu_.AwaitWithDeadline(absl::Condition(&finished), deadline);
}

absl::Time Job::end_time() const {
  absl::MutexLock lock(&mu_);
  return end_time_;
}

}  // namespace sdg
