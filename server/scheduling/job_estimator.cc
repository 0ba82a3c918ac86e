#include "server/scheduling/job_estimator.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "google/protobuf/util/time_util.h"
#include "server/pipeline/output_parser.h"
#include "server/pipeline/pipeline_rows.h"

namespace sdg {
namespace {

// A token per 4 bytes, where the backend serves no tokenizer: the rule of
// thumb for English text with OpenAI's tokenizers.
int64_t TokensFromBytes(int64_t bytes) { return (bytes + 3) / 4; }

}  // namespace

JobEstimator::JobEstimator(const JobSpec& spec, PromptCounter& counter,
                           int64_t tokenized_prompts)
    : spec_(spec), counter_(counter), tokenized_prompts_(tokenized_prompts) {
  if (!spec.pipeline.has_value()) {
    counted_.emplace(spec.block, 0);
    AddStep(spec.block, 0, spec.block.name(), /*counted=*/true);
    return;
  }
  for (const StepSpec& step : spec.pipeline->steps) {
    const LlmStepSpec* llm = step.llm();
    if (llm == nullptr) continue;
    const bool first = !counted_.has_value();
    if (first) {
      first_llm_step_ = step.index;
      counted_.emplace(llm->block, estimate_.steps_size());
    }
    AddStep(llm->block, step.index, step.name, /*counted=*/first);
  }
}

void JobEstimator::AddStep(const v1::Block& block, int step_index,
                           const std::string& step_name, bool counted) {
  v1::StepEstimate& step = *estimate_.add_steps();
  step.set_step_index(step_index);
  step.set_step_name(step_name);
  step.set_backend(block.backend());
  step.set_model(block.model());
  step.set_samples_per_row(block.n());
  // A step not counted has no rows, requests or bounds to state.
  step.set_rows_exact(counted);
  step.set_completion_tokens_bounded(counted && block.max_tokens() > 0);
  step.set_prompt_tokens_counting(counted ? v1::TOKEN_COUNTING_TOKENIZER
                                          : v1::TOKEN_COUNTING_UNKNOWN);
}

absl::Status JobEstimator::AddShard(
    std::vector<google::protobuf::Struct> rows) {
  estimate_.set_rows(estimate_.rows() + static_cast<int64_t>(rows.size()));
  if (!counted_.has_value()) return absl::OkStatus();  // no LLM step
  std::vector<std::string> prompts;
  prompts.reserve(rows.size());
  if (!spec_.pipeline.has_value()) {
    for (const google::protobuf::Struct& row : rows) {
      // A row that does not render fails in the run, sending nothing.
      absl::StatusOr<std::string> prompt =
          spec_.prompt_template.Render(row, spec_.max_prompt_bytes);
      if (prompt.ok()) prompts.push_back(*std::move(prompt));
    }
    return CountPrompts(prompts);
  }
  // The steps before the first LLM step, as a stage shard runs them.
  const int64_t first_row =
      estimate_.rows() - static_cast<int64_t>(rows.size());
  std::vector<PipelineRow> step_rows = SeedRows(first_row, std::move(rows));
  const PipelineSpec& pipeline = *spec_.pipeline;
  for (int s = 0; s < first_llm_step_; ++s) {
    const StepSpec& step = pipeline.steps[s];
    step_rows = ApplyColumnStep(step, std::move(step_rows)).rows;
    if (!step.drop_duplicates.empty()) {
      // Duplicates are dropped across the whole dataset, which a shard at a
      // time cannot see: the rows counted are the most the step may get.
      estimate_.mutable_steps(counted_->index)->set_rows_exact(false);
    }
  }
  const LlmStepSpec& llm = *pipeline.steps[first_llm_step_].llm();
  PrepareLlmRows(llm, step_rows);
  for (const PipelineRow& row : step_rows) {
    absl::StatusOr<std::string> prompt =
        llm.prompt_template.Render(row.columns(), spec_.max_prompt_bytes);
    // LLMBlock strips the rendered prompt.
    if (prompt.ok()) prompts.emplace_back(PythonStrip(*prompt));
  }
  return CountPrompts(prompts);
}

absl::Status JobEstimator::CountPrompts(
    const std::vector<std::string>& prompts) {
  CountedStep& counted = *counted_;
  const v1::Block& block = *counted.block;
  v1::StepEstimate& step = *estimate_.mutable_steps(counted.index);
  if (prompts.empty()) return absl::OkStatus();
  if (!counted.shape.has_value()) {
    absl::StatusOr<PromptCounter::ServerShape> shape = counter_.Shape(block);
    if (!shape.ok()) return shape.status();
    counted.shape = *shape;
  }
  const PromptCounter::ServerShape& shape = *counted.shape;
  const bool chat = block.api() == v1::API_CHAT;
  const int64_t count = static_cast<int64_t>(prompts.size());
  // Each request carries its prompt: a prompt sent once per sample counts
  // once per sample in the replies' usage.
  const int64_t sends_per_prompt = shape.one_choice_per_request ? block.n() : 1;
  step.set_rows(step.rows() + count);
  if (!chat && shape.batching && count > 1) {
    step.set_requests(step.requests() + 1);
  } else {
    step.set_requests(step.requests() + count * sends_per_prompt);
  }
  step.set_max_completion_tokens(step.max_completion_tokens() +
                                 int64_t{block.max_tokens()} * block.n() *
                                     count);

  // A chat prompt's bytes include the system prompt's; a prompt sent once
  // per sample counts once per sample.
  const int64_t system_bytes =
      chat ? static_cast<int64_t>(block.system_prompt().size()) : 0;
  auto bytes_of = [&](const std::string& prompt) {
    return (static_cast<int64_t>(prompt.size()) + system_bytes) *
           sends_per_prompt;
  };
  if (!shape.tokenizer) {
    for (const std::string& prompt : prompts) {
      counted.other_bytes += bytes_of(prompt);
    }
    return absl::OkStatus();
  }
  // The prompts the tokenizer counts: every `stride`-th, the stride
  // doubling after each tokenized_prompts_ of them, so that the sample
  // spans the whole dataset (a sorted one too) and stays small.
  std::vector<std::string> sample;
  std::vector<int64_t> sample_strides;
  for (const std::string& prompt : prompts) {
    if (counted.seen++ % counted.stride != 0) {
      counted.other_bytes += bytes_of(prompt);
      continue;
    }
    sample.push_back(prompt);
    sample_strides.push_back(counted.stride);
    if (++counted.sampled_at_stride == tokenized_prompts_) {
      counted.stride *= 2;
      counted.sampled_at_stride = 0;
    }
  }
  if (sample.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<int64_t>> tokens =
      counter_.CountTokens(block, sample);
  if (!tokens.ok()) return tokens.status();
  for (size_t i = 0; i < sample.size(); ++i) {
    const int64_t prompt_tokens = (*tokens)[i] * sends_per_prompt;
    counted.tokenized_tokens += prompt_tokens;
    // Each stands for `stride` prompts in the tokens per byte.
    counted.weighted_tokens += prompt_tokens * sample_strides[i];
    counted.weighted_bytes += bytes_of(sample[i]) * sample_strides[i];
  }
  step.set_tokenized_prompts(step.tokenized_prompts() +
                             static_cast<int64_t>(sample.size()));
  return absl::OkStatus();
}

void JobEstimator::SetDurations(const PromptCounter::ServerShape& shape) {
  const ThroughputMeter::Pace& pace = shape.pace;
  estimate_.set_measured_requests(pace.requests);
  const double busy_s = absl::ToDoubleSeconds(pace.busy);
  if (pace.requests < kMinMeasuredRequests || busy_s <= 0) return;
  const double at_request_pace = static_cast<double>(estimate_.requests()) *
                                 busy_s / static_cast<double>(pace.requests);
  double at_token_pace = at_request_pace;
  if (estimate_.completion_tokens_bounded() && pace.completion_tokens > 0) {
    at_token_pace = static_cast<double>(estimate_.max_completion_tokens()) *
                    busy_s / static_cast<double>(pace.completion_tokens);
  }
  auto set = [](google::protobuf::Duration& out, double seconds) {
    out = google::protobuf::util::TimeUtil::NanosecondsToDuration(
        absl::ToInt64Nanoseconds(absl::Seconds(seconds)));
  };
  set(*estimate_.mutable_min_duration(),
      std::min(at_request_pace, at_token_pace));
  set(*estimate_.mutable_max_duration(),
      std::max(at_request_pace, at_token_pace));
}

v1::JobEstimate JobEstimator::Finish() {
  if (counted_.has_value()) {
    const CountedStep& counted = *counted_;
    v1::StepEstimate& step = *estimate_.mutable_steps(counted.index);
    int64_t tokens = counted.tokenized_tokens;
    if (counted.other_bytes == 0) {
      // Every prompt went through the tokenizer (or there were none).
    } else if (counted.weighted_bytes > 0) {
      step.set_prompt_tokens_counting(v1::TOKEN_COUNTING_SAMPLED);
      tokens += std::llround(static_cast<double>(counted.other_bytes) *
                             static_cast<double>(counted.weighted_tokens) /
                             static_cast<double>(counted.weighted_bytes));
    } else {
      step.set_prompt_tokens_counting(v1::TOKEN_COUNTING_BYTES);
      tokens += TokensFromBytes(counted.other_bytes);
    }
    step.set_prompt_tokens(tokens);
    estimate_.set_requests(step.requests());
    estimate_.set_prompt_tokens(step.prompt_tokens());
    estimate_.set_max_completion_tokens(step.max_completion_tokens());
  }
  // Over the steps counted, as the sums are: a pipeline's later LLM steps
  // are not (complete is false).
  bool complete = true;
  bool bounded = true;
  for (const v1::StepEstimate& step : estimate_.steps()) {
    if (step.prompt_tokens_counting() == v1::TOKEN_COUNTING_UNKNOWN) {
      complete = false;
    } else {
      bounded = bounded && step.completion_tokens_bounded();
    }
  }
  estimate_.set_complete(complete);
  estimate_.set_completion_tokens_bounded(bounded);
  if (counted_.has_value() && counted_->shape.has_value()) {
    SetDurations(*counted_->shape);
  }
  return std::move(estimate_);
}

}  // namespace sdg
