#include "server/jobs/job.h"

#include <algorithm>
#include <iterator>

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

JobTally::ShardState* JobTally::StateOf(int64_t shard) {
  if (shard < 0) return nullptr;
  if (shard >= Job::kStageStride) return &later_shard_state_[shard];
  // A resumed pipeline's first stage is as long as its plan; an index past
  // any a job could have is a damaged log's, and ignored.
  if (shard >= static_cast<int64_t>(shard_state_.size())) return nullptr;
  return &shard_state_[shard];
}

bool JobTally::committed(int64_t shard) const {
  if (shard >= Job::kStageStride) {
    auto found = later_shard_state_.find(shard);
    return found != later_shard_state_.end() &&
           found->second != ShardState::kNotCommitted;
  }
  return shard >= 0 && shard < static_cast<int64_t>(shard_state_.size()) &&
         shard_state_[shard] != ShardState::kNotCommitted;
}

void JobTally::AddSteps(
    const google::protobuf::RepeatedPtrField<v1::StepCounts>& steps) {
  for (const v1::StepCounts& step : steps) {
    auto known = std::find_if(
        steps_.begin(), steps_.end(),
        [&](const v1::StepCounts& s) { return s.step() == step.step(); });
    if (known == steps_.end()) {
      steps_.push_back(step);
      continue;
    }
    known->set_rows_in(known->rows_in() + step.rows_in());
    known->set_rows_out(known->rows_out() + step.rows_out());
    known->set_rows_failed(known->rows_failed() + step.rows_failed());
  }
}

std::vector<v1::ResultRow> JobTally::TakeStageRows(int64_t first, int64_t end) {
  std::vector<v1::ResultRow> rows;
  auto begin = stage_rows_.lower_bound(first);
  auto stop = stage_rows_.lower_bound(end);
  for (auto it = begin; it != stop; ++it) {
    std::move(it->second.begin(), it->second.end(), std::back_inserter(rows));
  }
  stage_rows_.erase(begin, stop);
  return rows;
}

bool JobTally::CommitSucceeded(int64_t shard) {
  ShardState* state = StateOf(shard);
  if (state == nullptr) return false;
  if (*state == ShardState::kNotCommitted) {
    *state = ShardState::kSucceeded;
    ++committed_count_;
    ++shards_succeeded_;
  }
  return true;
}

void JobTally::Add(const v1::JobEvent& event) {
  last_sequence_ = event.sequence();
  switch (event.event_case()) {
    case v1::JobEvent::kStarted:
      started_ = true;
      break;
    case v1::JobEvent::kShardResult: {
      if (!CommitSucceeded(event.shard_result().shard_index())) break;
      // A block's row counts once (sample 0); a pipeline's rows all do.
      for (const v1::ResultRow& row : event.shard_result().rows()) {
        if (row.sample_index() == 0) ++rows_succeeded_;
      }
      AddSteps(event.shard_result().steps());
      break;
    }
    case v1::JobEvent::kStageRows: {
      if (!CommitSucceeded(event.stage_rows().shard_index())) break;
      std::vector<v1::ResultRow>& rows =
          stage_rows_[event.stage_rows().shard_index()];
      rows.insert(rows.end(), event.stage_rows().rows().begin(),
                  event.stage_rows().rows().end());
      AddSteps(event.stage_rows().steps());
      break;
    }
    case v1::JobEvent::kShardError: {
      ShardState* state = StateOf(event.shard_error().shard_index());
      if (state == nullptr) break;
      if (*state == ShardState::kNotCommitted) ++committed_count_;
      if (*state == ShardState::kSucceeded) --shards_succeeded_;
      if (*state != ShardState::kFailed) ++shards_failed_;
      *state = ShardState::kFailed;
      rows_failed_ += event.shard_error().row_count();
      break;
    }
    case v1::JobEvent::kFinished:
      finished_ = event.finished();
      break;
    default:
      break;
  }
}

Job::Job(JobSpec spec, JobRecord record, std::shared_ptr<Dataset> dataset,
         std::shared_ptr<EventLog> log, JobTally tally, JobStore& store,
         Metrics& metrics)
    : spec_(std::move(spec)),
      plan_(dataset != nullptr ? dataset->row_count() : 0, spec_.batch_size),
      request_digest_(record.request_digest),
      tenant_(record.tenant),
      store_(store),
      metrics_(metrics),
      tally_(std::move(tally)) {
  // A record repaired from the log is saved once the lock is released.
  bool repaired = false;
  {
    absl::MutexLock lock(&mu_);
    const int stage_count =
        is_pipeline() ? static_cast<int>(spec_.pipeline->stages.size()) : 1;
    stages_.resize(stage_count);
    Stage& first = stages_[0];
    first.input_complete = true;
    first.shards_cut = plan_.shard_count();
    shards_cut_ = plan_.shard_count();
    for (int64_t i = 0; i < plan_.shard_count(); ++i) {
      if (tally_.committed(i)) continue;
      ++shards_to_run_;
      first.uncommitted.insert(i);
    }
    SkipCommittedFirstStageShardsLocked();
    if (is_pipeline()) {
      for (int s = 0; s < stage_count; ++s) {
        const StageSpec& range = spec_.pipeline->stages[s];
        for (int i = range.first_step; i < range.end_step; ++i) {
          if (std::holds_alternative<FlattenStepSpec>(
                  spec_.pipeline->steps[i].kind)) {
            ++stages_[s].flattens;
          }
        }
      }
      for (int s = 0; s + 1 < stage_count; ++s) {
        stages_[s].released.emplace(spec_.pipeline->BarrierStep(s));
      }
      for (PipelineRow& row : tally_.TakeStageRows(0, plan_.shard_count())) {
        AddPendingLocked(0, std::move(row));
      }
      // A resumed pipeline releases and cuts what its log had reached.
      AdvanceStagesLocked();
    }
    record_ = std::move(record);
    dataset_ = std::move(dataset);
    log_ = std::move(log);
    if (record_.create_time == absl::InfinitePast()) {
      record_.create_time = absl::Now();
    }
    if (const auto& finished = tally_.finished();
        finished.has_value() && record_.finished.state() == 0) {
      // A crash came between committing `finished` and saving the state.
      record_.state = finished->state();
      record_.reason = finished->reason();
      record_.finished = *finished;
      if (record_.end_time == absl::InfinitePast())
        record_.end_time = absl::Now();
      repaired = true;
    }
    if (record_.state != v1::JOB_STATE_QUEUED &&
        record_.state != v1::JOB_STATE_RUNNING) {
      // Ended before this process started.
      ended_ = true;
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
  return shards_cut_;
}

int64_t Job::shards_to_run() const {
  absl::MutexLock lock(&mu_);
  return shards_to_run_;
}

void Job::SkipCommittedFirstStageShardsLocked() {
  // Shards at or past the cursor were committed only before this process.
  while (next_first_stage_shard_ < plan_.shard_count() &&
         tally_.committed(next_first_stage_shard_)) {
    ++next_first_stage_shard_;
  }
}

bool Job::HasShardToStart() const {
  absl::MutexLock lock(&mu_);
  return next_first_stage_shard_ < plan_.shard_count() || !ready_.empty();
}

ShardSpec Job::StartNextShard() {
  absl::MutexLock lock(&mu_);
  // Later stages' shards first: their rows are nearest to the output (the
  // first rows come early) and they free what the barriers hold.
  if (!ready_.empty()) {
    const int64_t index = ready_.front();
    ready_.pop_front();
    return ShardOfLocked(static_cast<int>(index / kStageStride),
                         index % kStageStride);
  }
  ShardSpec shard = ShardOfLocked(0, next_first_stage_shard_++);
  SkipCommittedFirstStageShardsLocked();
  return shard;
}

void Job::AddPendingLocked(int stage, PipelineRow row) {
  std::vector<int64_t> key(row.order_key().begin(), row.order_key().end());
  stages_[stage].pending.emplace(std::move(key), std::move(row));
}

ShardSpec Job::ShardOfLocked(int stage, int64_t local) const {
  if (stage == 0) return plan_.Shard(local);
  const int64_t rows = static_cast<int64_t>(stages_[stage].rows.size());
  const int64_t first = local * spec_.batch_size;
  return ShardSpec{stage * kStageStride + local, first,
                   std::min<int64_t>(spec_.batch_size, rows - first)};
}

absl::StatusOr<ShardInput> Job::ReadInput(const ShardSpec& shard) const {
  if (!is_pipeline()) {
    SDG_ASSIGN_OR_RETURN(BlockInput rows, ReadRows(shard));
    return rows;
  }
  SDG_ASSIGN_OR_RETURN(std::vector<PipelineRow> rows, ReadStageRows(shard));
  return StageInput{StageOf(shard), std::move(rows)};
}

absl::StatusOr<std::vector<PipelineRow>> Job::ReadStageRows(
    const ShardSpec& shard) const {
  const int stage = StageOf(shard);
  if (stage == 0) {
    absl::StatusOr<std::vector<google::protobuf::Struct>> seeds =
        ReadRows(shard);
    if (!seeds.ok()) return seeds.status();
    return SeedRows(shard.first_row, *std::move(seeds));
  }
  absl::MutexLock lock(&mu_);
  const std::vector<PipelineRow>& rows = stages_[stage].rows;
  return std::vector<PipelineRow>(
      rows.begin() + shard.first_row,
      rows.begin() + shard.first_row + shard.row_count);
}

std::optional<std::vector<int64_t>> Job::OutputBoundLocked(int stage) const {
  const Stage& state = stages_[stage];
  // The least key of a row the stage may still take in.
  std::optional<std::vector<int64_t>> input;
  auto lower = [&input](std::vector<int64_t> key) {
    if (!input.has_value() || key < *input) input = std::move(key);
  };
  if (!state.uncommitted.empty()) {
    const int64_t first = *state.uncommitted.begin() * spec_.batch_size;
    if (stage == 0) {
      lower({first});
    } else {
      const auto& key = state.rows[first].order_key();
      lower({key.begin(), key.end()});
    }
  }
  const int64_t cut_rows = state.shards_cut * spec_.batch_size;
  if (stage > 0 && cut_rows < static_cast<int64_t>(state.rows.size())) {
    const auto& key = state.rows[cut_rows].order_key();
    lower({key.begin(), key.end()});
  }
  if (!state.input_complete) {
    std::optional<std::vector<int64_t>> before = OutputBoundLocked(stage - 1);
    if (before.has_value()) lower(*std::move(before));
  }
  if (!input.has_value()) return std::nullopt;
  // Its rows' keys begin with it, after a column index per flatten step.
  std::vector<int64_t> bound(state.flattens, 0);
  bound.insert(bound.end(), input->begin(), input->end());
  return bound;
}

void Job::AdvanceStagesLocked() {
  const PipelineSpec& pipeline = *spec_.pipeline;
  for (int stage = 0; stage + 1 < static_cast<int>(stages_.size()); ++stage) {
    Stage& from = stages_[stage];
    Stage& to = stages_[stage + 1];
    const std::optional<std::vector<int64_t>> bound = OutputBoundLocked(stage);
    const StepSpec& barrier = pipeline.BarrierStep(stage);
    auto end = bound.has_value() ? from.pending.lower_bound(*bound)
                                 : from.pending.end();
    // Released in output order, so the first of equal rows is kept.
    for (auto it = from.pending.begin(); it != end; ++it) {
      if (from.released->Keep(it->second)) {
        to.rows.push_back(std::move(it->second));
      }
    }
    from.pending.erase(from.pending.begin(), end);
    if (!bound.has_value() && !to.input_complete) {
      to.input_complete = true;
      Log(LogLevel::kInfo, "pipeline stage input complete",
          {{"job_id", spec_.job_id},
           {"stage", stage + 1},
           {"after_step", barrier.name},
           {"rows", static_cast<int64_t>(to.rows.size())}});
    }
    CutShardsLocked(stage + 1);
  }
}

void Job::CutShardsLocked(int stage) {
  Stage& state = stages_[stage];
  const int64_t rows = static_cast<int64_t>(state.rows.size());
  while (true) {
    const int64_t first = state.shards_cut * spec_.batch_size;
    const int64_t left = rows - first;
    if (left <= 0 || (left < spec_.batch_size && !state.input_complete)) break;
    const int64_t local = state.shards_cut++;
    const int64_t index = stage * kStageStride + local;
    ++shards_cut_;
    if (!tally_.committed(index)) {
      state.uncommitted.insert(local);
      ready_.push_back(index);
      ++shards_to_run_;
      continue;
    }
    // Committed before a restart: what it carried to its barrier is in the
    // log.
    for (PipelineRow& row : tally_.TakeStageRows(index, index + 1)) {
      AddPendingLocked(stage, std::move(row));
    }
  }
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

void Job::AppendLocked(v1::JobEvent event) {
  std::vector<v1::JobEvent> group;
  group.push_back(std::move(event));
  AppendGroupLocked(std::move(group));
}

void Job::AppendGroupLocked(std::vector<v1::JobEvent> group) {
  for (v1::JobEvent& event : group) event.set_job_id(spec_.job_id);
  log_->AppendGroup(absl::MakeSpan(group));
  for (const v1::JobEvent& event : group) tally_.Add(event);
}

void Job::SaveRecord() {
  absl::MutexLock saving(&save_mu_);
  JobRecord record;
  {
    absl::MutexLock lock(&mu_);
    // A suspended job's stored state stays QUEUED or RUNNING: it resumes
    // when sdgd starts again.
    if (record_.state == v1::JOB_STATE_SUSPENDED) return;
    record = record_;
  }
  if (absl::Status saved = store_.UpdateJob(record); !saved.ok()) {
    Log(LogLevel::kError, "job store: cannot save the job's state",
        {{"job_id", spec_.job_id}, {"error", std::string(saved.message())}});
  }
}

void Job::MarkRunning() {
  absl::MutexLock lock(&mu_);
  record_.state = v1::JOB_STATE_RUNNING;
  run_start_ = absl::Now();
  if (record_.start_time == absl::InfinitePast())
    record_.start_time = run_start_;
  last_progress_ = run_start_;
  rows_at_run_start_ = tally_.rows_succeeded();
  metrics_.JobStarted();
  if (tally_.started()) {
    Log(LogLevel::kInfo, "job resumed",
        {{"job_id", spec_.job_id},
         {"resumed", record_.resumed},
         {"shards_done", tally_.committed_shards()},
         {"shards_to_run", shards_to_run_}});
    return;
  }
  v1::JobEvent event;
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

std::vector<v1::JobEvent> Job::ShardEventsOf(const ShardSpec& shard,
                                             ShardOutcome outcome) const {
  if (!outcome.status.ok()) {
    std::string step;
    if (is_pipeline()) {
      const StageSpec& range = spec_.pipeline->stages[StageOf(shard)];
      if (range.first_step < range.end_step) {
        step = spec_.pipeline->steps[range.first_step].name;
      }
    }
    return {
        WholeShardErrorEvent(shard, outcome.status, outcome.attempts, step)};
  }
  if (is_pipeline()) {
    return StageShardEvents(shard, *spec_.pipeline, StageOf(shard),
                            std::move(outcome));
  }
  return BlockShardEvents(shard, std::move(outcome));
}

void Job::ReportShard(const ShardSpec& shard, ShardOutcome outcome,
                      absl::Duration elapsed) {
  const bool shard_failed = !outcome.status.ok();
  if (shard_failed && suspending_) {
    // Stopped by the suspension: not committed, so it runs again.
    return;
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
         {"shard", shard.index},
         {"rows_failed", rows_failed},
         {"backend", spec_.block.backend()},
         {"code", absl::StatusCodeToString(first_error.code())},
         {"attempts", first_attempts},
         {"error", std::string(first_error.message())}});
  }

  const int64_t completion_tokens = outcome.completion_tokens;
  std::vector<v1::JobEvent> group = ShardEventsOf(shard, std::move(outcome));
  if (group.empty()) {
    // A shard with nothing to say still commits (a runner with no rows).
    group.emplace_back().mutable_shard_result()->set_shard_index(shard.index);
  }
  std::shared_ptr<EventLog> log;
  {
    absl::MutexLock lock(&mu_);
    tokens_generated_ += completion_tokens;
    // Rows for a barrier wait in their stage's pending rows too.
    for (const v1::JobEvent& event : group) {
      if (!event.has_stage_rows()) continue;
      for (const PipelineRow& row : event.stage_rows().rows()) {
        AddPendingLocked(StageOf(shard), row);
      }
    }
    AppendGroupLocked(std::move(group));
    if (!is_pipeline()) {
      stages_[StageOf(shard)].uncommitted.erase(shard.index % kStageStride);
    }
    AppendProgressIfDueLocked();
    log = log_;
  }
  if (is_pipeline()) {
    // A later stage starts only from rows on disk: released before their
    // commit, a crash would lose them after the next stage had asked the
    // backend about them, and a resumed job would ask again for both.
    log->AwaitCommitted();
    absl::MutexLock lock(&mu_);
    stages_[StageOf(shard)].uncommitted.erase(shard.index % kStageStride);
    if (!token_.IsCancelled()) AdvanceStagesLocked();
  }
  // Outside the lock: waits only when the disk is far behind.
  log->AwaitRoom();
  if (fail_fast) {
    Cancel(absl::AbortedError(
        absl::StrCat("shard ", shard.index, " (rows ", shard.first_row, "-",
                     shard.first_row + shard.row_count - 1,
                     ") failed and error_policy is ERROR_POLICY_FAIL_FAST: ",
                     first_error.message())));
  }
}

void Job::AppendProgressIfDueLocked() {
  const absl::Time now = absl::Now();
  if (now - last_progress_ < kProgressInterval) return;
  last_progress_ = now;
  const double seconds = absl::ToDoubleSeconds(now - run_start_);
  v1::JobEvent event;
  v1::JobProgress* progress = event.mutable_progress();
  progress->set_rows_done(tally_.rows_succeeded());
  progress->set_rows_failed(tally_.rows_failed());
  progress->set_rows_per_second((tally_.rows_succeeded() - rows_at_run_start_) /
                                seconds);
  progress->set_tokens_per_second(tokens_generated_ / seconds);
  for (const v1::StepCounts& step : tally_.steps())
    *progress->add_steps() = step;
  AppendLocked(std::move(event));
}

void Job::EndSuspendedLocked(const absl::Status& stop_reason) {
  record_.reason = std::string(stop_reason.message());
  metrics_.JobFinished(tenant_, StateLabel(v1::JOB_STATE_SUSPENDED), true);
  Log(LogLevel::kInfo, "job suspended",
      {{"job_id", spec_.job_id},
       {"tenant", tenant_},
       {"shards_done", tally_.committed_shards()},
       {"reason", record_.reason}});
  // The stored state stays QUEUED or RUNNING: it resumes on restart.
  record_.state = v1::JOB_STATE_SUSPENDED;
  log_->End(absl::UnavailableError(absl::StrCat(
      "the job was suspended (", stop_reason.message(),
      "); it resumes when sdgd starts again: watch it again with the "
      "last sequence you received")));
}

std::pair<v1::JobState, std::string> Job::EndStateLocked(
    const absl::Status& stop_reason) const {
  if (!stop_reason.ok()) {
    return {stop_reason.code() == absl::StatusCode::kCancelled
                ? v1::JOB_STATE_CANCELLED
                : v1::JOB_STATE_FAILED,
            std::string(stop_reason.message())};
  }
  if (tally_.shards_failed() > 0 && is_pipeline()) {
    return {
        v1::JOB_STATE_FAILED,
        absl::StrCat(tally_.rows_failed(), " rows failed at their steps (in ",
                     tally_.shards_failed(), " of ", shards_cut_,
                     " shards); see the shard_error events")};
  }
  if (tally_.shards_failed() > 0) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat(tally_.rows_failed(), " of ", plan_.total_rows(),
                         " rows failed (in ", tally_.shards_failed(), " of ",
                         plan_.shard_count(),
                         " shards); see the shard_error events")};
  }
  return {v1::JOB_STATE_SUCCEEDED, ""};
}

void Job::EndFinishedLocked(const absl::Status& stop_reason) {
  auto [state, reason] = EndStateLocked(stop_reason);
  const bool ran = run_start_ != absl::InfinitePast();
  record_.end_time = absl::Now();
  metrics_.JobFinished(tenant_, StateLabel(state), ran);
  const double elapsed_seconds =
      record_.start_time != absl::InfinitePast()
          ? absl::ToDoubleSeconds(record_.end_time - record_.start_time)
          : 0.0;
  v1::JobFinished finished;
  finished.set_state(state);
  finished.set_rows_succeeded(tally_.rows_succeeded());
  finished.set_rows_failed(tally_.rows_failed());
  finished.set_shards_succeeded(tally_.shards_succeeded());
  finished.set_shards_failed(tally_.shards_failed());
  finished.set_elapsed_seconds(elapsed_seconds);
  finished.set_reason(reason);
  for (const v1::StepCounts& step : tally_.steps()) {
    *finished.add_steps() = step;
  }
  v1::JobEvent event;
  *event.mutable_finished() = finished;
  AppendLocked(std::move(event));
  log_->End(absl::OkStatus());
  record_.state = state;
  record_.reason = reason;
  record_.finished = finished;
  Log(LogLevel::kInfo, "job finished",
      {{"job_id", spec_.job_id},
       {"tenant", tenant_},
       {"state", StateLabel(state)},
       {"rows_succeeded", tally_.rows_succeeded()},
       {"rows_failed", tally_.rows_failed()},
       {"elapsed_s", elapsed_seconds},
       {"reason", reason}});
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
    if (!commit_error.ok() && record_.state != v1::JOB_STATE_SUSPENDED) {
      // `finished` did not reach the disk: the stored job stays unfinished
      // and finishes from its log when sdgd starts again.
      record_.state = v1::JOB_STATE_SUSPENDED;
      record_.reason = std::string(commit_error.message());
      record_.end_time = absl::InfinitePast();
    }
    if (record_.state == v1::JOB_STATE_SUSPENDED) return;
  }
  SaveRecord();
  // A finished job holds no open file; readers open their own.
  std::shared_ptr<EventLog> finished_log =
      store_.OpenFinishedJobLog(spec_.job_id);
  absl::MutexLock lock(&mu_);
  log_ = std::move(finished_log);
}

v1::Job Job::Snapshot() const {
  absl::MutexLock lock(&mu_);
  v1::Job job;
  job.set_job_id(spec_.job_id);
  job.set_tenant(tenant_);
  job.set_state(record_.state);
  job.set_block_name(spec_.block.name());
  job.set_backend(spec_.block.backend());
  *job.mutable_block() = spec_.block;
  job.set_total_rows(plan_.total_rows());
  job.set_total_shards(shards_cut_);
  // A job that ended before this process started has its final counts in
  // its record, not in a tally.
  const bool final = record_.finished.state() != v1::JOB_STATE_UNSPECIFIED;
  job.set_rows_succeeded(final ? record_.finished.rows_succeeded()
                               : tally_.rows_succeeded());
  job.set_rows_failed(final ? record_.finished.rows_failed()
                            : tally_.rows_failed());
  job.set_shards_succeeded(final ? record_.finished.shards_succeeded()
                                 : tally_.shards_succeeded());
  job.set_shards_failed(final ? record_.finished.shards_failed()
                              : tally_.shards_failed());
  SetTimestamp(record_.create_time, job.mutable_create_time());
  SetTimestamp(record_.start_time, job.mutable_start_time());
  SetTimestamp(record_.end_time, job.mutable_end_time());
  job.set_reason(record_.reason);
  job.set_resumed(record_.resumed);
  job.set_last_sequence(tally_.last_sequence());
  if (is_pipeline()) {
    job.set_pipeline_steps(static_cast<int32_t>(spec_.pipeline->steps.size()));
  }
  return job;
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
  return record_.end_time;
}

v1::JobState Job::state() const {
  absl::MutexLock lock(&mu_);
  return record_.state;
}

}  // namespace sdg
