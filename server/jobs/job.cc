#include "server/jobs/job.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "server/jobs/shard_events.h"

namespace sdg {
namespace {

constexpr absl::Duration kProgressInterval = absl::Seconds(1);

void SetTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  if (time == absl::InfinitePast()) return;
  *out = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      absl::ToUnixNanos(time));
}

// "shard 3"; "stage 1 shard 3" for a pipeline's later stage, whose rows are
// counted within the stage's input.
std::string ShardName(const ShardSpec& shard) {
  if (shard.stage == 0) return absl::StrCat("shard ", shard.index);
  return absl::StrCat("stage ", shard.stage, " shard ", shard.index);
}

JobSpec WithTenant(JobSpec spec, const std::string& tenant) {
  spec.tenant = tenant;
  return spec;
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
    case v1::JOB_STATE_SUSPENDED:
      return "suspended";
    default:
      return "unspecified";
  }
}

ShardPlan Job::SeedPlan(const JobSpec& spec, const Dataset* dataset) {
  return ShardPlan(dataset != nullptr ? dataset->row_count() : 0,
                   spec.batch_size);
}

absl::StatusOr<std::shared_ptr<Job>> Job::Create(
    JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
    JobStore& store, Metrics& metrics) {
  const int64_t shard_count = SeedPlan(spec, dataset.get()).shard_count();
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<EventLog> log,
                       store.OpenJobLog(record.job_id, [](const LogEvent&) {}));
  auto job = std::make_shared<Job>(
      ConstructionKey(), std::move(spec), std::move(record), std::move(dataset),
      log, JobTally(shard_count), store, store, metrics);
  job->SuspendOnCommitError();
  return job;
}

absl::StatusOr<std::shared_ptr<Job>> Job::Restore(
    JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
    JobStore& store, Metrics& metrics) {
  JobTally tally(SeedPlan(spec, dataset.get()).shard_count());
  std::shared_ptr<EventLog> log;
  if (record.unfinished()) {
    SDG_ASSIGN_OR_RETURN(
        log, store.OpenJobLog(record.job_id,
                              [&tally](const LogEvent& e) { tally.Add(e); }));
    if (!tally.finished().has_value()) {
      ++record.resumed;
      metrics.JobResumed();
    }
  } else {
    log = store.OpenFinishedJobLog(record.job_id);
  }
  auto job = std::make_shared<Job>(
      ConstructionKey(), std::move(spec), std::move(record), std::move(dataset),
      std::move(log), std::move(tally), store, store, metrics);
  if (!job->IsFinished()) job->SuspendOnCommitError();
  return job;
}

void Job::SuspendOnCommitError() {
  std::weak_ptr<Job> weak = weak_from_this();
  log()->SetOnCommitError([weak](absl::Status error) {
    if (std::shared_ptr<Job> job = weak.lock()) job->Suspend(std::move(error));
  });
}

Job::Job(ConstructionKey, JobSpec spec, JobRecord record,
         std::shared_ptr<Dataset> dataset, std::shared_ptr<EventLog> log,
         JobTally tally, JobRecordStore& records, JobLogStore& logs,
         Metrics& metrics)
    : spec_(WithTenant(std::move(spec), record.tenant)),
      plan_(SeedPlan(spec_, dataset.get())),
      request_digest_(record.request_digest),
      tenant_(record.tenant),
      records_(records),
      logs_(logs),
      metrics_(metrics),
      state_(std::move(record), absl::Now()),
      tally_(std::move(tally)),
      source_(spec_, plan_, tally_) {
  // A record repaired from the log is saved once the lock is released.
  bool repaired = false;
  {
    absl::MutexLock lock(&mu_);
    dataset_ = std::move(dataset);
    log_ = std::move(log);
    // A crash may have come between committing `finished` and saving it.
    repaired =
        state_.RepairFromLog(tally_.finished(), TotalsLocked(), absl::Now());
    if (!state_.record().unfinished()) {
      // Ended before this process started (a repaired record is in the
      // store once it is saved below; it stays in memory until then).
      ended_ = true;
      stored_ended_ = !repaired;
      dataset_.reset();
    }
  }
  if (repaired) SaveRecord();
}

void Job::Suspend(absl::Status reason) {
  suspending_ = true;
  token_.Cancel(std::move(reason));
}

int64_t Job::shard_count() const {
  absl::MutexLock lock(&mu_);
  return source_.shards_cut();
}

int64_t Job::shards_to_run() const {
  absl::MutexLock lock(&mu_);
  return source_.shards_to_run();
}

bool Job::HasShardToStart() const {
  absl::MutexLock lock(&mu_);
  return source_.HasShardToStart();
}

ShardSpec Job::StartNextShard() {
  absl::MutexLock lock(&mu_);
  return source_.Next();
}

absl::StatusOr<ShardInput> Job::ReadInput(const ShardSpec& shard) const {
  if (!is_pipeline()) {
    SDG_ASSIGN_OR_RETURN(BlockInput rows, ReadRows(shard));
    return rows;
  }
  SDG_ASSIGN_OR_RETURN(std::vector<PipelineRow> rows, ReadStageRows(shard));
  return StageInput{shard.stage, std::move(rows)};
}

absl::StatusOr<std::vector<PipelineRow>> Job::ReadStageRows(
    const ShardSpec& shard) const {
  if (shard.stage == 0) {
    absl::StatusOr<std::vector<google::protobuf::Struct>> seeds =
        ReadRows(shard);
    if (!seeds.ok()) return seeds.status();
    return SeedRows(shard.first_row, *std::move(seeds));
  }
  absl::MutexLock lock(&mu_);
  return source_.StageRows(shard);
}

absl::StatusOr<std::vector<google::protobuf::Struct>> Job::ReadRows(
    const ShardSpec& shard) const {
  std::shared_ptr<Dataset> dataset;
  {
    absl::MutexLock lock(&mu_);
    dataset = dataset_;
  }
  if (dataset == nullptr) {
    return absl::FailedPreconditionError("the job has ended");
  }
  return dataset->ReadRows(shard.first_row, shard.row_count);
}

std::shared_ptr<EventLog> Job::log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

void Job::AppendLocked(LogEvent event) {
  std::vector<LogEvent> group;
  group.push_back(std::move(event));
  AppendGroupLocked(std::move(group));
}

uint64_t Job::AppendGroupLocked(std::vector<LogEvent> group) {
  for (LogEvent& event : group) event.set_job_id(spec_.job_id);
  const uint64_t last = log_->AppendGroup(absl::MakeSpan(group));
  for (const LogEvent& event : group) tally_.Add(event);
  return last;
}

bool Job::SaveRecord() {
  absl::MutexLock saving(&save_mu_);
  JobRecord record;
  {
    absl::MutexLock lock(&mu_);
    // A suspended job's stored state stays QUEUED or RUNNING: it resumes
    // when sdgd starts again.
    if (state_.suspended()) return false;
    record = state_.record();
  }
  if (absl::Status saved = records_.UpdateJob(record); !saved.ok()) {
    Log(LogLevel::kError, "job store: cannot save the job's state",
        {{"job_id", spec_.job_id}, {"error", std::string(saved.message())}});
    return false;
  }
  absl::MutexLock lock(&mu_);
  state_.Saved(record.version + 1);
  return true;
}

void Job::MarkRunning() {
  absl::MutexLock lock(&mu_);
  run_start_ = absl::Now();
  state_.Run(run_start_);
  last_progress_ = run_start_;
  rows_at_run_start_ = tally_.rows_succeeded();
  completion_tokens_at_run_start_ = tally_.usage().completion_tokens();
  metrics_.JobStarted();
  if (tally_.started()) {
    Log(LogLevel::kInfo, "job resumed",
        {{"job_id", spec_.job_id},
         {"resumed", state_.record().resumed},
         {"shards_done", tally_.committed_shards()},
         {"shards_to_run", source_.shards_to_run()}});
    return;
  }
  LogEvent event;
  v1::JobStarted* started = event.mutable_started();
  started->set_total_rows(plan_.total_rows());
  started->set_total_shards(plan_.shard_count());
  started->set_batch_size(spec_.batch_size);
  started->set_num_workers(spec_.num_workers);
  AppendLocked(std::move(event));
  Log(LogLevel::kInfo, "job started",
      {{"job_id", spec_.job_id},
       {"tenant", tenant_},
       {"block", spec_.block.name()},
       {"backend", spec_.block.backend()},
       {"rows", plan_.total_rows()},
       {"shards", plan_.shard_count()},
       {"batch_size", spec_.batch_size},
       {"num_workers", spec_.num_workers}});
}

std::vector<LogEvent> Job::ShardEventsOf(const ShardSpec& shard,
                                         ShardOutcome outcome) const {
  if (!outcome.status.ok()) {
    std::string step;
    if (is_pipeline()) {
      const StageSpec& range = spec_.pipeline->stages[shard.stage];
      if (range.first_step < range.end_step) {
        step = spec_.pipeline->steps[range.first_step].name;
      }
    }
    return {WholeShardErrorEvent(shard, outcome.status, outcome.attempts, step,
                                 outcome.usage)};
  }
  if (is_pipeline()) {
    return StageShardEvents(shard, *spec_.pipeline, std::move(outcome));
  }
  return BlockShardEvents(shard, std::move(outcome));
}

bool Job::ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                      absl::Duration elapsed,
                      std::function<void()> on_counted) {
  const bool shard_failed = !outcome.status.ok();
  if (shard_failed && suspending_) {
    // Stopped by the suspension: not committed, so it runs again.
    return true;
  }
  const int64_t rows_failed =
      shard_failed ? shard.row_count
                   : static_cast<int64_t>(outcome.failed_rows.size() +
                                          outcome.failed_steps.size());
  const bool failed = rows_failed > 0;
  // The first failure among the shard's rows, for fail-fast and the log.
  absl::Status first_error = outcome.status;
  int first_attempts = outcome.attempts;
  if (!shard_failed && !outcome.failed_rows.empty()) {
    first_error = outcome.failed_rows.front().status;
    first_attempts = outcome.failed_rows.front().attempts;
  } else if (!shard_failed && !outcome.failed_steps.empty()) {
    first_error = outcome.failed_steps.front().status;
    first_attempts = outcome.failed_steps.front().attempts;
  }
  const bool fail_fast = failed &&
                         spec_.error_policy == v1::ERROR_POLICY_FAIL_FAST &&
                         !token_.IsCancelled();
  metrics_.ShardFinished(failed ? "failed" : "succeeded", elapsed);
  // A pipeline's rows that succeeded are its output rows.
  metrics_.RowsFinished(
      "succeeded",
      is_pipeline()
          ? (shard_failed ? 0 : static_cast<int64_t>(outcome.rows.size()))
          : shard.row_count - rows_failed);
  metrics_.RowsFinished("failed", rows_failed);
  if (failed && first_error.code() != absl::StatusCode::kCancelled) {
    Log(LogLevel::kWarning, "shard failed",
        {{"job_id", spec_.job_id},
         {"stage", shard.stage},
         {"shard", shard.index},
         {"rows_failed", rows_failed},
         {"backend", spec_.block.backend()},
         {"code", absl::StatusCodeToString(first_error.code())},
         {"attempts", first_attempts},
         {"error", std::string(first_error.message())}});
  }

  std::vector<LogEvent> group = ShardEventsOf(shard, std::move(outcome));
  if (group.empty()) {
    // A shard with nothing to say still commits (a runner with no rows).
    v1::ShardResult* empty = group.emplace_back().mutable_shard_result();
    empty->set_shard_index(shard.index);
    empty->set_stage(shard.stage);
  }
  std::shared_ptr<EventLog> log;
  uint64_t last_sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    // Rows for a barrier wait in their stage's pending rows too.
    for (const LogEvent& event : group) {
      if (event.has_stage_rows()) {
        source_.AddBarrierRows(shard, event.stage_rows().rows());
      }
    }
    last_sequence = AppendGroupLocked(std::move(group));
    if (!is_pipeline()) source_.Committed(shard);
    AppendProgressIfDueLocked();
    log = log_;
  }
  bool counted = true;
  if (is_pipeline()) {
    // A later stage starts only from rows on disk: released before their
    // commit, a crash would lose them after the next stage had asked the
    // backend about them, and a resumed job would ask again for both. No
    // thread waits for the commit: the log's notification counts the
    // shard (or the end of the log, when committing failed).
    counted = !log->NotifyAfter(
        last_sequence - 1,
        [job = shared_from_this(), shard, on_counted = std::move(on_counted)] {
          job->CountCommittedShard(shard);
          if (on_counted) on_counted();
        });
    if (counted) CountCommittedShard(shard);
  }
  // Outside the lock: waits only when the disk is far behind.
  log->AwaitRoom();
  if (fail_fast) {
    Cancel(absl::AbortedError(
        absl::StrCat(ShardName(shard), " (rows ", shard.first_row, "-",
                     shard.first_row + shard.row_count - 1,
                     ") failed and error_policy is ERROR_POLICY_FAIL_FAST: ",
                     first_error.message())));
  }
  return counted;
}

void Job::CountCommittedShard(const ShardSpec& shard) {
  absl::MutexLock lock(&mu_);
  source_.Committed(shard);
  if (!token_.IsCancelled()) source_.Release();
}

void Job::AppendProgressIfDueLocked() {
  const absl::Time now = absl::Now();
  if (now - last_progress_ < kProgressInterval) return;
  last_progress_ = now;
  const double seconds = absl::ToDoubleSeconds(now - run_start_);
  LogEvent event;
  v1::JobProgress* progress = event.mutable_progress();
  progress->set_rows_done(tally_.rows_succeeded());
  progress->set_rows_failed(tally_.rows_failed());
  progress->set_rows_per_second((tally_.rows_succeeded() - rows_at_run_start_) /
                                seconds);
  progress->set_tokens_per_second(
      static_cast<double>(tally_.usage().completion_tokens() -
                          completion_tokens_at_run_start_) /
      seconds);
  for (const v1::StepCounts& step : tally_.steps())
    *progress->add_steps() = step;
  *progress->mutable_usage() = tally_.usage();
  AppendLocked(std::move(event));
}

void Job::EndSuspendedLocked(const absl::Status& stop_reason) {
  // The stored state stays QUEUED or RUNNING: it resumes on restart.
  state_.Suspend(stop_reason.message());
  metrics_.JobFinished(tenant_, StateLabel(v1::JOB_STATE_SUSPENDED), true);
  Log(LogLevel::kInfo, "job suspended",
      {{"job_id", spec_.job_id},
       {"tenant", tenant_},
       {"shards_done", tally_.committed_shards()},
       {"reason", std::string(stop_reason.message())}});
  log_->End(absl::UnavailableError(absl::StrCat(
      "the job was suspended (", stop_reason.message(),
      "); it resumes when sdgd starts again: watch it again with the "
      "last sequence you received")));
}

void Job::EndFinishedLocked(const absl::Status& stop_reason) {
  const JobKind kind = spec_.openai_batch.has_value() ? JobKind::kOpenAiBatch
                       : is_pipeline()                ? JobKind::kPipeline
                                                      : JobKind::kBlock;
  const JobEnd end = EndOf(stop_reason, tally_, kind, plan_.total_rows(),
                           source_.shards_cut());
  if (spec_.openai_batch.has_value()) {
    metrics_.BatchFinished(
        end.state == v1::JOB_STATE_SUCCEEDED   ? "completed"
        : end.state == v1::JOB_STATE_CANCELLED ? "cancelled"
        : stop_reason.code() == absl::StatusCode::kDeadlineExceeded ? "expired"
                                                                    : "failed");
  }
  const bool ran = run_start_ != absl::InfinitePast();
  const absl::Time end_time = absl::Now();
  metrics_.JobFinished(tenant_, StateLabel(end.state), ran);
  const absl::Time start_time = state_.record().start_time;
  const double elapsed_seconds =
      start_time != absl::InfinitePast()
          ? absl::ToDoubleSeconds(end_time - start_time)
          : 0.0;
  v1::JobFinished finished;
  finished.set_state(end.state);
  finished.set_rows_succeeded(tally_.rows_succeeded());
  finished.set_rows_failed(tally_.rows_failed());
  finished.set_shards_succeeded(tally_.shards_succeeded());
  finished.set_shards_failed(tally_.shards_failed());
  finished.set_elapsed_seconds(elapsed_seconds);
  finished.set_reason(end.reason);
  for (const v1::StepCounts& step : tally_.steps()) {
    *finished.add_steps() = step;
  }
  *finished.mutable_usage() = tally_.usage();
  LogEvent event;
  *event.mutable_finished() = finished;
  AppendLocked(std::move(event));
  log_->End(absl::OkStatus());
  state_.Finish(finished, TotalsLocked(), end_time);
  Log(LogLevel::kInfo, "job finished",
      {{"job_id", spec_.job_id},
       {"tenant", tenant_},
       {"state", StateLabel(end.state)},
       {"rows_succeeded", tally_.rows_succeeded()},
       {"rows_failed", tally_.rows_failed()},
       {"prompt_tokens", tally_.usage().prompt_tokens()},
       {"completion_tokens", tally_.usage().completion_tokens()},
       {"elapsed_s", elapsed_seconds},
       {"reason", end.reason}});
}

void Job::MarkFinished() {
  // Why the job was stopped early, if it was: cancelled (CANCELLED), failed
  // fast (ABORTED), out of time (DEADLINE_EXCEEDED) or suspended.
  const absl::Status stop_reason = token_.reason();
  std::shared_ptr<EventLog> log;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    log = log_;
    if (suspending_) {
      EndSuspendedLocked(stop_reason);
    } else {
      EndFinishedLocked(stop_reason);
    }
  }
  // The final state is saved once the `finished` event is committed: a
  // crash in between resumes the job, which then finishes from its log.
  log->AwaitCommitted();
  const absl::Status commit_error = log->commit_error();
  {
    absl::MutexLock lock(&mu_);
    dataset_.reset();
    if (!commit_error.ok() && !state_.suspended()) {
      // `finished` did not reach the disk: the stored job stays unfinished
      // and finishes from its log when sdgd starts again.
      state_.FinishNotCommitted(commit_error.message());
    }
    if (state_.suspended()) return;
  }
  const bool saved = SaveRecord();
  // A finished job holds no open file; readers open their own.
  std::shared_ptr<EventLog> finished_log =
      logs_.OpenFinishedJobLog(spec_.job_id);
  absl::MutexLock lock(&mu_);
  log_ = std::move(finished_log);
  stored_ended_ = saved;
}

JobState::Totals Job::TotalsLocked() const {
  return {plan_.total_rows(), source_.shards_cut(), tally_.last_sequence()};
}

bool DescribedByRecord(const JobRecord& record) {
  return record.finished.state() != v1::JOB_STATE_UNSPECIFIED &&
         record.last_sequence != 0;
}

v1::Job DescribeStored(const JobSpec& spec, const JobRecord& record) {
  v1::Job job;
  job.set_job_id(spec.job_id);
  job.set_tenant(record.tenant);
  job.set_state(record.state);
  job.set_block_name(spec.block.name());
  job.set_backend(spec.block.backend());
  *job.mutable_block() = spec.block;
  job.set_total_rows(record.total_rows);
  job.set_total_shards(record.total_shards);
  job.set_rows_succeeded(record.finished.rows_succeeded());
  job.set_rows_failed(record.finished.rows_failed());
  job.set_shards_succeeded(record.finished.shards_succeeded());
  job.set_shards_failed(record.finished.shards_failed());
  if (record.finished.has_usage()) {
    *job.mutable_usage() = record.finished.usage();
  }
  SetTimestamp(record.create_time, job.mutable_create_time());
  SetTimestamp(record.start_time, job.mutable_start_time());
  SetTimestamp(record.end_time, job.mutable_end_time());
  job.set_reason(record.reason);
  job.set_resumed(record.resumed);
  job.set_last_sequence(record.last_sequence);
  if (spec.pipeline.has_value()) {
    job.set_pipeline_steps(static_cast<int32_t>(spec.pipeline->steps.size()));
  }
  if (spec.openai_batch.has_value()) {
    *job.mutable_openai_batch() = *spec.openai_batch;
  }
  return job;
}

v1::Job Job::Snapshot() const {
  absl::MutexLock lock(&mu_);
  const JobRecord& record = state_.record();
  v1::Job job = DescribeStored(spec_, record);
  // Until a job ends its counts are in its tally. A job that ended before
  // this process started has its final counts in its record, and its
  // totals too unless the record was saved before they were kept.
  if (record.finished.state() == v1::JOB_STATE_UNSPECIFIED) {
    job.set_rows_succeeded(tally_.rows_succeeded());
    job.set_rows_failed(tally_.rows_failed());
    job.set_shards_succeeded(tally_.shards_succeeded());
    job.set_shards_failed(tally_.shards_failed());
    *job.mutable_usage() = tally_.usage();
  }
  if (!DescribedByRecord(record)) {
    job.set_total_rows(plan_.total_rows());
    job.set_total_shards(source_.shards_cut());
    job.set_last_sequence(tally_.last_sequence());
  }
  return job;
}

bool Job::IsStoredEnded() const {
  absl::MutexLock lock(&mu_);
  return stored_ended_;
}

bool Job::IsFinished() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

bool Job::AwaitFinished(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  auto finished = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return ended_; };
  return mu_.AwaitWithDeadline(absl::Condition(&finished), deadline);
}

absl::Time Job::end_time() const {
  absl::MutexLock lock(&mu_);
  return state_.record().end_time;
}

v1::JobState Job::state() const {
  absl::MutexLock lock(&mu_);
  return state_.state();
}

}  // namespace sdg
