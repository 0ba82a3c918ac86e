#include "server/jobs/shard_source.h"

#include <algorithm>
#include <utility>

#include "base/logging.h"

namespace sdg {

ShardSource::ShardSource(const JobSpec& spec, const ShardPlan& plan,
                         JobTally& tally)
    : spec_(spec), plan_(plan), tally_(tally) {
  const int stage_count = spec_.pipeline.has_value()
                              ? static_cast<int>(spec_.pipeline->stages.size())
                              : 1;
  stages_.resize(stage_count);
  Stage& first = stages_[0];
  first.input_complete = true;
  first.shards_cut = plan_.shard_count();
  shards_cut_ = plan_.shard_count();
  for (int64_t i = 0; i < plan_.shard_count(); ++i) {
    if (tally_.committed({0, i})) continue;
    ++shards_to_run_;
    first.uncommitted.insert(i);
  }
  SkipCommittedFirstStageShards();
  if (!spec_.pipeline.has_value()) return;
  const PipelineSpec& pipeline = *spec_.pipeline;
  for (int s = 0; s < stage_count; ++s) {
    const StageSpec& range = pipeline.stages[s];
    for (int i = range.first_step; i < range.end_step; ++i) {
      if (std::holds_alternative<FlattenStepSpec>(pipeline.steps[i].kind)) {
        ++stages_[s].flattens;
      }
    }
  }
  for (int s = 0; s + 1 < stage_count; ++s) {
    stages_[s].released.emplace(pipeline.BarrierStep(s));
  }
  for (PipelineRow& row :
       tally_.TakeStageRows({0, 0}, {0, plan_.shard_count()})) {
    AddPending(0, std::move(row));
  }
  // A resumed pipeline releases and cuts what its log had reached.
  Release();
}

void ShardSource::SkipCommittedFirstStageShards() {
  // Shards at or past the cursor were committed only before this process.
  while (next_first_stage_shard_ < plan_.shard_count() &&
         tally_.committed({0, next_first_stage_shard_})) {
    ++next_first_stage_shard_;
  }
}

bool ShardSource::HasShardToStart() const {
  return next_first_stage_shard_ < plan_.shard_count() || !ready_.empty();
}

ShardSpec ShardSource::Next() {
  if (!ready_.empty()) {
    const ShardId id = ready_.front();
    ready_.pop_front();
    return ShardOf(id.stage, id.index);
  }
  ShardSpec shard = ShardOf(0, next_first_stage_shard_++);
  SkipCommittedFirstStageShards();
  return shard;
}

void ShardSource::AddPending(int stage, PipelineRow row) {
  std::vector<int64_t> key(row.order_key().begin(), row.order_key().end());
  stages_[stage].pending.emplace(std::move(key), std::move(row));
}

void ShardSource::AddBarrierRows(
    const ShardSpec& shard,
    const google::protobuf::RepeatedPtrField<PipelineRow>& rows) {
  for (const PipelineRow& row : rows) AddPending(shard.stage, row);
}

void ShardSource::Committed(const ShardSpec& shard) {
  stages_[shard.stage].uncommitted.erase(shard.index);
}

ShardSpec ShardSource::ShardOf(int stage, int64_t local) const {
  if (stage == 0) return plan_.Shard(local);
  const int64_t rows = static_cast<int64_t>(stages_[stage].rows.size());
  const int64_t first = local * spec_.batch_size;
  return ShardSpec{
      .stage = stage,
      .index = local,
      .first_row = first,
      .row_count = std::min<int64_t>(spec_.batch_size, rows - first)};
}

std::vector<PipelineRow> ShardSource::StageRows(const ShardSpec& shard) const {
  const std::vector<PipelineRow>& rows = stages_[shard.stage].rows;
  return std::vector<PipelineRow>(
      rows.begin() + shard.first_row,
      rows.begin() + shard.first_row + shard.row_count);
}

std::optional<std::vector<int64_t>> ShardSource::OutputBound(int stage) const {
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
    std::optional<std::vector<int64_t>> before = OutputBound(stage - 1);
    if (before.has_value()) lower(*std::move(before));
  }
  if (!input.has_value()) return std::nullopt;
  // Its rows' keys begin with it, after a column index per flatten step.
  std::vector<int64_t> bound(state.flattens, 0);
  bound.insert(bound.end(), input->begin(), input->end());
  return bound;
}

void ShardSource::Release() {
  for (int stage = 0; stage + 1 < static_cast<int>(stages_.size()); ++stage) {
    Stage& from = stages_[stage];
    Stage& to = stages_[stage + 1];
    const std::optional<std::vector<int64_t>> bound = OutputBound(stage);
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
           {"after_step", spec_.pipeline->BarrierStep(stage).name},
           {"rows", static_cast<int64_t>(to.rows.size())}});
    }
    CutShards(stage + 1);
  }
}

void ShardSource::CutShards(int stage) {
  Stage& state = stages_[stage];
  const int64_t rows = static_cast<int64_t>(state.rows.size());
  while (true) {
    const int64_t first = state.shards_cut * spec_.batch_size;
    const int64_t left = rows - first;
    if (left <= 0 || (left < spec_.batch_size && !state.input_complete)) break;
    const int64_t local = state.shards_cut++;
    const ShardId id{stage, local};
    ++shards_cut_;
    if (!tally_.committed(id)) {
      state.uncommitted.insert(local);
      ready_.push_back(id);
      ++shards_to_run_;
      continue;
    }
    // Committed before a restart: what it carried to its barrier is in the
    // log.
    for (PipelineRow& row : tally_.TakeStageRows(id, {stage, local + 1})) {
      AddPending(stage, std::move(row));
    }
  }
}

}  // namespace sdg
