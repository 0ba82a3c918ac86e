#include "server/jobs/job_tally.h"

#include <algorithm>
#include <iterator>

#include "server/jobs/shard_outcome.h"
#include "server/jobs/shard_plan.h"

namespace sdg {

namespace {

template <typename Shard>
ShardId IdOf(const Shard& shard) {
  return LoggedShardId(shard.stage(), shard.shard_index());
}

}  // namespace

JobTally::ShardState* JobTally::StateOf(ShardId shard) {
  if (shard.stage < 0 || shard.index < 0) return nullptr;
  if (shard.stage > 0) return &later_shard_state_[shard];
  // A resumed pipeline's first stage is as long as its plan; an index past
  // any a job could have is a damaged log's, and ignored.
  if (shard.index >= static_cast<int64_t>(shard_state_.size())) return nullptr;
  return &shard_state_[shard.index];
}

bool JobTally::committed(ShardId shard) const {
  if (shard.stage > 0) {
    auto found = later_shard_state_.find(shard);
    return found != later_shard_state_.end() &&
           found->second != ShardState::kNotCommitted;
  }
  return shard.stage == 0 && shard.index >= 0 &&
         shard.index < static_cast<int64_t>(shard_state_.size()) &&
         shard_state_[shard.index] != ShardState::kNotCommitted;
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
    if (step.has_usage()) AddUsage(step.usage(), *known->mutable_usage());
  }
}

std::vector<v1::ResultRow> JobTally::TakeStageRows(ShardId first, ShardId end) {
  std::vector<v1::ResultRow> rows;
  auto begin = stage_rows_.lower_bound(first);
  auto stop = stage_rows_.lower_bound(end);
  for (auto it = begin; it != stop; ++it) {
    std::move(it->second.begin(), it->second.end(), std::back_inserter(rows));
  }
  stage_rows_.erase(begin, stop);
  return rows;
}

bool JobTally::CommitSucceeded(ShardId shard) {
  ShardState* state = StateOf(shard);
  if (state == nullptr) return false;
  if (*state == ShardState::kNotCommitted) {
    *state = ShardState::kSucceeded;
    ++committed_count_;
    ++shards_succeeded_;
  }
  return true;
}

void JobTally::Add(const LogEvent& event) {
  last_sequence_ = event.sequence();
  switch (event.event_case()) {
    case LogEvent::kStarted:
      started_ = true;
      break;
    case LogEvent::kShardResult: {
      if (!CommitSucceeded(IdOf(event.shard_result()))) break;
      // A block's row counts once (sample 0); a pipeline's rows all do.
      for (const v1::ResultRow& row : event.shard_result().rows()) {
        if (row.sample_index() == 0) ++rows_succeeded_;
      }
      AddSteps(event.shard_result().steps());
      AddUsage(event.shard_result().usage(), usage_);
      break;
    }
    case LogEvent::kStageRows: {
      const ShardId shard = IdOf(event.stage_rows());
      if (!CommitSucceeded(shard)) break;
      std::vector<v1::ResultRow>& rows = stage_rows_[shard];
      rows.insert(rows.end(), event.stage_rows().rows().begin(),
                  event.stage_rows().rows().end());
      AddSteps(event.stage_rows().steps());
      AddUsage(event.stage_rows().usage(), usage_);
      break;
    }
    case LogEvent::kShardError: {
      ShardState* state = StateOf(IdOf(event.shard_error()));
      if (state == nullptr) break;
      if (*state == ShardState::kNotCommitted) ++committed_count_;
      if (*state == ShardState::kSucceeded) --shards_succeeded_;
      if (*state != ShardState::kFailed) ++shards_failed_;
      *state = ShardState::kFailed;
      rows_failed_ += event.shard_error().row_count();
      AddUsage(event.shard_error().usage(), usage_);
      break;
    }
    case LogEvent::kFinished:
      finished_ = event.finished();
      break;
    default:
      break;
  }
}

}  // namespace sdg
