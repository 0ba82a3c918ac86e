// A validated pipeline: InstructLab SDG's blocks as steps, each compiled
// once (prompt templates, output parsers, filters), and the stages the
// steps fall into. A stage ends at a step with drop_duplicates, which needs
// every row of the step (a barrier); within a stage, a shard's rows pass
// through all the steps as soon as they are ready.
#ifndef SDG_SERVER_JOBS_PIPELINE_SPEC_H_
#define SDG_SERVER_JOBS_PIPELINE_SPEC_H_

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "sdg/v1/generation.pb.h"
#include "server/pipeline/column_steps.h"
#include "server/pipeline/output_parser.h"
#include "server/pipeline/prompt_template.h"

namespace sdg {

struct LlmStepSpec {
  // Backend resolved, n resolved (scaled_n included).
  v1::Block block;
  PromptTemplate prompt_template;
  OutputParser parser;
  std::optional<int64_t> num_samples;
};

struct FlattenStepSpec {
  std::vector<std::string> var_columns;
  std::string value_name;
  std::string var_name;
};

struct CombineStepSpec {
  std::vector<std::string> columns;
  std::string output_column;
  std::string separator;
};

struct DuplicateStepSpec {
  ColumnMap columns;
};

struct RenameStepSpec {
  ColumnMap columns;
};

struct StepSpec {
  std::string name;
  int index = 0;  // in the pipeline
  std::variant<LlmStepSpec, ValueFilter, DuplicateStepSpec, RenameStepSpec,
               CombineStepSpec, FlattenStepSpec>
      kind;
  std::vector<std::string> drop_columns;
  std::vector<std::string> drop_duplicates;

  const LlmStepSpec* llm() const { return std::get_if<LlmStepSpec>(&kind); }
};

// Steps [first_step, end_step) of the pipeline. Every stage but the last
// ends with a step that has drop_duplicates; the last may end with one too,
// and is then followed by an empty stage that only delivers its rows.
struct StageSpec {
  int first_step = 0;
  int end_step = 0;
};

struct PipelineSpec {
  std::vector<StepSpec> steps;
  std::vector<StageSpec> stages;

  bool IsLastStage(int stage) const {
    return stage + 1 == static_cast<int>(stages.size());
  }
  // The step whose drop_duplicates ends `stage` (not the last stage).
  const StepSpec& BarrierStep(int stage) const {
    return steps[stages[stage].end_step - 1];
  }
};

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_PIPELINE_SPEC_H_
