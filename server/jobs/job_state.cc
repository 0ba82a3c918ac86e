#include "server/jobs/job_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sdg {

JobEnd EndOf(const absl::Status& stop_reason, const JobTally& tally,
             JobKind kind, int64_t total_rows, int64_t total_shards) {
  if (!stop_reason.ok()) {
    return {stop_reason.code() == absl::StatusCode::kCancelled
                ? v1::JOB_STATE_CANCELLED
                : v1::JOB_STATE_FAILED,
            std::string(stop_reason.message())};
  }
  if (tally.shards_failed() == 0 || kind == JobKind::kOpenAiBatch) {
    return {v1::JOB_STATE_SUCCEEDED, ""};
  }
  const std::string shards =
      absl::StrCat(" (in ", tally.shards_failed(), " of ", total_shards,
                   " shards); see the shard_error events");
  if (kind == JobKind::kPipeline) {
    return {v1::JOB_STATE_FAILED,
            absl::StrCat(tally.rows_failed(), " rows failed at their steps",
                         shards)};
  }
  return {v1::JOB_STATE_FAILED,
          absl::StrCat(tally.rows_failed(), " of ", total_rows, " rows failed",
                       shards)};
}

JobState::JobState(JobRecord record, absl::Time now)
    : record_(std::move(record)) {
  if (record_.create_time == absl::InfinitePast()) record_.create_time = now;
}

bool JobState::RepairFromLog(const std::optional<v1::JobFinished>& logged,
                             const Totals& totals, absl::Time now) {
  if (!logged.has_value() ||
      record_.finished.state() != v1::JOB_STATE_UNSPECIFIED) {
    return false;
  }
  const absl::Time end =
      record_.end_time == absl::InfinitePast() ? now : record_.end_time;
  Finish(*logged, totals, end);
  return true;
}

void JobState::Run(absl::Time now) {
  record_.state = v1::JOB_STATE_RUNNING;
  if (record_.start_time == absl::InfinitePast()) record_.start_time = now;
}

void JobState::Suspend(absl::string_view reason) {
  record_.state = v1::JOB_STATE_SUSPENDED;
  record_.reason = std::string(reason);
}

void JobState::Finish(const v1::JobFinished& finished, const Totals& totals,
                      absl::Time end) {
  record_.state = finished.state();
  record_.reason = finished.reason();
  record_.finished = finished;
  record_.end_time = end;
  record_.total_rows = totals.total_rows;
  record_.total_shards = totals.total_shards;
  record_.last_sequence = totals.last_sequence;
}

void JobState::FinishNotCommitted(absl::string_view reason) {
  Suspend(reason);
  record_.end_time = absl::InfinitePast();
}

}  // namespace sdg
