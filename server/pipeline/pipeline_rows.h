// A pipeline's rows between its steps, and what the steps that need no
// backend do to them. A row is a v1::ResultRow: its seed row (row_index),
// its columns, its order key and its lineage. The order key is what makes
// the output InstructLab's without running the steps block by block: an
// LLM step appends (sample, match) to each row's key, a flatten step puts
// the var column's index in front (pandas' melt is variable-major), and
// sorting a step's rows by key gives the order the whole dataset would have
// after that step.
#ifndef SDG_SERVER_JOBS_PIPELINE_ROWS_H_
#define SDG_SERVER_JOBS_PIPELINE_ROWS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"
#include "sdg/v1/generation.pb.h"
#include "server/pipeline/pipeline_spec.h"

namespace sdg {

using PipelineRow = v1::ResultRow;

// A row that failed at a step: the step's input row (for its seed row and
// order key; its columns are dropped) and why.
struct PipelineRowFailure {
  int step = 0;
  int64_t row_index = 0;
  std::vector<int64_t> order_key;
  absl::Status status;
  int attempts = 0;
};

struct StepOutput {
  std::vector<PipelineRow> rows;
  std::vector<PipelineRowFailure> failed;
};

// The seed rows of a shard: row_index first_row + i, order key {row_index}.
std::vector<PipelineRow> SeedRows(int64_t first_row,
                                  std::vector<google::protobuf::Struct> rows);

// Row a comes before row b in the job's output.
bool OrderKeyLess(const PipelineRow& a, const PipelineRow& b);

PipelineRowFailure FailureOf(const StepSpec& step, const PipelineRow& row,
                             absl::Status status, int attempts = 0);

// A step that is not an LLM step, then its drop_columns.
StepOutput ApplyColumnStep(const StepSpec& step, std::vector<PipelineRow> rows);

// An LLM step's rows before their prompts: InstructLab's num_samples column
// added where a row lacks it.
void PrepareLlmRows(const LlmStepSpec& llm, std::vector<PipelineRow>& rows);

// An LLM step's output from its generations, then its drop_columns: every
// match of every sample of rows[i] (texts[i], n of them, or why the row has
// none) is a row, in place.
StepOutput ExpandGenerations(
    const StepSpec& step, std::vector<PipelineRow> rows,
    std::vector<absl::StatusOr<std::vector<std::string>>> texts,
    const std::vector<int>& attempts);

// drop_duplicates over rows given in output order: keeps a row unless an
// earlier one had the same values in the step's columns. Rows must have the
// columns (TakeRowsWithoutKey fails those that do not, at their shard).
class DuplicateFilter {
 public:
  explicit DuplicateFilter(const StepSpec& step) : step_(&step) {}
  bool Keep(const PipelineRow& row);

 private:
  const StepSpec* step_;
  absl::flat_hash_set<std::string> seen_;
};

// The rows of a barrier step, sorted into output order, with only the first
// of each run of equal drop_duplicates values kept.
std::vector<PipelineRow> DropDuplicates(const StepSpec& step,
                                        std::vector<PipelineRow> rows);

// Splits off the rows that lack one of the barrier step's drop_duplicates
// columns: pandas would fail the whole run, here each such row fails.
std::vector<PipelineRowFailure> TakeRowsWithoutKey(
    const StepSpec& step, std::vector<PipelineRow>& rows);

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_PIPELINE_ROWS_H_
