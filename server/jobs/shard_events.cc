#include "server/jobs/shard_events.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"

namespace sdg {
namespace {

using EventRows = google::protobuf::RepeatedPtrField<v1::ResultRow>;

// Moves `rows` into events: into `current` (null: none yet) while they fit,
// into a new one from `new_event` when the next row would take the current
// past `max_bytes`.
void SplitRows(std::vector<v1::ResultRow> rows, size_t max_bytes,
               EventRows* current, absl::FunctionRef<EventRows*()> new_event) {
  size_t bytes = 0;
  for (v1::ResultRow& row : rows) {
    const size_t size = row.ByteSizeLong();
    if (current == nullptr || (bytes + size > max_bytes && !current->empty())) {
      current = new_event();
      bytes = 0;
    }
    bytes += size;
    *current->Add() = std::move(row);
  }
}

// A shard_error for rows [first_row, first_row + row_count).
LogEvent ShardErrorEvent(const ShardSpec& shard, int64_t first_row,
                         int64_t row_count, const absl::Status& status,
                         int attempts) {
  LogEvent event;
  v1::ShardError* error = event.mutable_shard_error();
  error->set_shard_index(shard.index);
  error->set_stage(shard.stage);
  error->set_first_row(first_row);
  error->set_row_count(row_count);
  error->set_code(static_cast<int>(status.code()));
  error->set_message(std::string(status.message()));
  error->set_attempts(attempts);
  return event;
}

// The shard's tokens go into its first event (none when it used none).
void SetShardUsage(const v1::TokenUsage& usage, std::vector<LogEvent>& group) {
  if (group.empty() ||
      (usage.prompt_tokens() == 0 && usage.completion_tokens() == 0)) {
    return;
  }
  LogEvent& first = group.front();
  switch (first.event_case()) {
    case LogEvent::kShardResult:
      *first.mutable_shard_result()->mutable_usage() = usage;
      break;
    case LogEvent::kShardError:
      *first.mutable_shard_error()->mutable_usage() = usage;
      break;
    case LogEvent::kStageRows:
      *first.mutable_stage_rows()->mutable_usage() = usage;
      break;
    default:
      break;
  }
}

}  // namespace

LogEvent WholeShardErrorEvent(const ShardSpec& shard,
                              const absl::Status& status, int attempts,
                              absl::string_view step,
                              const v1::TokenUsage& usage) {
  std::vector<LogEvent> group;
  group.push_back(ShardErrorEvent(shard, shard.first_row, shard.row_count,
                                  status, attempts));
  if (!step.empty()) {
    group.front().mutable_shard_error()->set_step(std::string(step));
  }
  SetShardUsage(usage, group);
  return std::move(group.front());
}

std::vector<LogEvent> BlockShardEvents(const ShardSpec& shard,
                                       ShardOutcome outcome,
                                       size_t max_event_bytes) {
  std::vector<LogEvent> group;
  SplitRows(std::move(outcome.rows), max_event_bytes, nullptr, [&] {
    v1::ShardResult* result = group.emplace_back().mutable_shard_result();
    result->set_shard_index(shard.index);
    result->set_stage(shard.stage);
    return result->mutable_rows();
  });
  const std::vector<RowFailure>& failed = outcome.failed_rows;
  for (size_t i = 0; i < failed.size();) {
    size_t end = i + 1;
    while (end < failed.size() &&
           failed[end].row_index == failed[end - 1].row_index + 1 &&
           failed[end].status == failed[i].status &&
           failed[end].attempts == failed[i].attempts &&
           failed[end].http_status == failed[i].http_status) {
      ++end;
    }
    group.push_back(ShardErrorEvent(shard, failed[i].row_index,
                                    static_cast<int64_t>(end - i),
                                    failed[i].status, failed[i].attempts));
    group.back().mutable_shard_error()->set_http_status(failed[i].http_status);
    i = end;
  }
  SetShardUsage(outcome.usage, group);
  return group;
}

std::vector<LogEvent> StageShardEvents(const ShardSpec& shard,
                                       const PipelineSpec& pipeline,
                                       ShardOutcome outcome,
                                       size_t max_event_bytes) {
  const bool results = pipeline.IsLastStage(shard.stage);
  std::vector<LogEvent> group;
  auto new_event = [&]() -> EventRows* {
    LogEvent& event = group.emplace_back();
    if (results) {
      event.mutable_shard_result()->set_shard_index(shard.index);
      event.mutable_shard_result()->set_stage(shard.stage);
      return event.mutable_shard_result()->mutable_rows();
    }
    event.mutable_stage_rows()->set_shard_index(shard.index);
    event.mutable_stage_rows()->set_stage(shard.stage);
    return event.mutable_stage_rows()->mutable_rows();
  };
  EventRows* first = new_event();
  auto* steps = results ? group.back().mutable_shard_result()->mutable_steps()
                        : group.back().mutable_stage_rows()->mutable_steps();
  for (v1::StepCounts& step : outcome.steps) *steps->Add() = std::move(step);
  SplitRows(std::move(outcome.rows), max_event_bytes, first, new_event);

  std::vector<PipelineRowFailure>& failures = outcome.failed_steps;
  std::stable_sort(
      failures.begin(), failures.end(),
      [](const PipelineRowFailure& a, const PipelineRowFailure& b) {
        return a.order_key < b.order_key;
      });
  for (const PipelineRowFailure& failure : failures) {
    LogEvent& event = group.emplace_back(ShardErrorEvent(
        shard, failure.row_index, 1, failure.status, failure.attempts));
    v1::ShardError* error = event.mutable_shard_error();
    error->set_step(pipeline.steps[failure.step].name);
    for (int64_t k : failure.order_key) error->add_order_key(k);
  }
  SetShardUsage(outcome.usage, group);
  return group;
}

}  // namespace sdg
