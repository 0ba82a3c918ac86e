// EstimateJob's counting: a job's rows, shard by shard, rendered into the
// prompts the run would send, and counted as the run's backend would count
// them, with nothing sent to a model. A block's job is counted whole. A
// pipeline's first LLM step is counted from its seed rows (the steps before
// it need no backend); the steps after it prompt with text the run
// generates, so their counts are not known before the run and the estimate
// says so (JobEstimate.complete false).
//
// Memory stays flat however large the dataset: rows come a shard at a time
// and only sums are kept. A step's first kTokenizedPrompts prompts are
// counted by the backend's tokenizer; past them, a sample that spans the
// dataset (every 2nd prompt for the next kTokenizedPrompts, then every 4th,
// ...), and the rest at the tokens per byte of that sample, each sampled
// prompt weighted by the prompts it stands for.
#ifndef SDG_SERVER_SCHEDULING_JOB_ESTIMATOR_H_
#define SDG_SERVER_SCHEDULING_JOB_ESTIMATOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job_spec.h"
#include "server/scheduling/prompt_counter.h"

namespace sdg {

class JobEstimator {
 public:
  static constexpr int64_t kTokenizedPrompts = 10000;
  // Replies a backend's pace needs before it gives a time range.
  static constexpr int64_t kMinMeasuredRequests = 10;

  // `spec` (validated, models chosen) and `counter` outlive the estimator.
  // `tokenized_prompts`: how many of a step's prompts the tokenizer counts
  // before it samples, and at each stride of the sample.
  JobEstimator(const JobSpec& spec, PromptCounter& counter,
               int64_t tokenized_prompts = kTokenizedPrompts);

  // The dataset's next shard: spec.batch_size rows (fewer at the end), in
  // order.
  absl::Status AddShard(std::vector<google::protobuf::Struct> rows);
  v1::JobEstimate Finish();

 private:
  // The step whose prompts are counted: the block, or the pipeline's first
  // LLM step.
  struct CountedStep {
    CountedStep(const v1::Block& block, int index)
        : block(&block), index(index) {}
    const v1::Block* block;
    int index;  // in estimate_.steps()
    std::optional<PromptCounter::ServerShape> shape;
    // The sample: every stride-th prompt (of `seen`), the stride doubling
    // after tokenized_prompts_ of them at it.
    int64_t seen = 0;
    int64_t stride = 1;
    int64_t sampled_at_stride = 0;
    // The tokens of the prompts tokenized; their tokens and bytes, each
    // weighted by its stride, for the tokens per byte of the rest.
    int64_t tokenized_tokens = 0;
    int64_t weighted_tokens = 0;
    int64_t weighted_bytes = 0;
    int64_t other_bytes = 0;  // prompts not tokenized
  };

  // `counted`: the step whose prompts AddShard counts.
  void AddStep(const v1::Block& block, int step_index,
               const std::string& step_name, bool counted);
  // Counts one shard's prompts for the counted step.
  absl::Status CountPrompts(const std::vector<std::string>& prompts);
  // The time range at the counted step's backend's measured pace.
  void SetDurations(const PromptCounter::ServerShape& shape);

  const JobSpec& spec_;
  PromptCounter& counter_;
  const int64_t tokenized_prompts_;
  v1::JobEstimate estimate_;
  std::optional<CountedStep> counted_;
  // Pipelines: the steps before the counted one, which need no backend.
  int first_llm_step_ = -1;
};

}  // namespace sdg

#endif  // SDG_SERVER_SCHEDULING_JOB_ESTIMATOR_H_
