// A validated GenerateJob request with every default applied. Immutable once
// built; shared by the job's shards. The rows are not in it: they are the
// job's dataset, in the job store.
#ifndef SDG_SERVER_JOBS_JOB_SPEC_H_
#define SDG_SERVER_JOBS_JOB_SPEC_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sdg/v1/generation.pb.h"
#include "server/pipeline/pipeline_spec.h"
#include "server/pipeline/prompt_template.h"
#include "server/store/dataset.h"

namespace sdg {

struct JobSpec {
  std::string job_id;
  // The job's tenant ("" when authentication is off), for its metrics: the
  // Job sets it from its record.
  std::string tenant;
  // output_column, n and backend filled in: block.backend() names a backend
  // this server has, which the shard runner resolves. A pipeline's job has
  // only the backend of its first LLM step here (for logs and GetJob).
  v1::Block block;
  PromptTemplate prompt_template;
  // Set when the job runs a pipeline instead of the block.
  std::optional<PipelineSpec> pipeline;
  // Set when the job runs an OpenAI batch instead of the block: its rows
  // are the input file's lines (batch_line.h). `block` then only names the
  // job ("openai-batch") and the default backend, for logs and GetJob.
  std::optional<v1::OpenAIBatch> openai_batch;
  int batch_size = 0;
  int num_workers = 0;
  v1::ErrorPolicy error_policy = v1::ERROR_POLICY_CONTINUE;
  std::optional<absl::Duration> timeout;
  v1::ResultColumns result_columns = v1::RESULT_COLUMNS_ALL;
  // A row whose prompt renders longer fails (--max_prompt_bytes), and so do
  // the rows of a shard past its budget (--max_shard_prompt_bytes).
  size_t max_prompt_bytes = 0;
  size_t max_shard_prompt_bytes = 0;
  // The job's prompt tokens, counted at 4 bytes a token of its rendered
  // prompts (a pipeline's first LLM step's) when the server limits a
  // tenant's enqueued tokens (--tenant_max_enqueued_tokens); else 0. Set by
  // the service once the dataset is stored, and again when it resumes.
  int64_t enqueued_tokens = 0;
};

struct ValidationLimits {
  int max_batch_size = 4096;
  int max_num_workers = 1024;
  int max_samples_per_row = 128;
  int max_pipeline_steps = 64;
  // num_workers == 0 means min(32, cpus + 4), as Python's ThreadPoolExecutor.
  int default_num_workers = 8;
  size_t max_prompt_bytes = 1 << 20;
  size_t max_shard_prompt_bytes = 64 << 20;
  // How long an OpenAI batch runs before it expires (its completion_window,
  // "24h", is this long on this server).
  absl::Duration batch_completion_window = absl::Hours(24);
};

// Identifying strings (block.name, block.model, block.output_column) and
// each stop sequence are at most this long; a block has at most
// kMaxStopSequences of them.
inline constexpr size_t kMaxNameBytes = 256;
inline constexpr int kMaxStopSequences = 32;

// min(32, CPUs + 4).
int DefaultNumWorkers();

// The backends this server has, by name; the first serves blocks that name
// none.
using BackendNames = std::vector<std::string>;

// Checks everything but the dataset that can be checked before any backend
// request. Errors are INVALID_ARGUMENT with the field's path and the
// reason, e.g. `block.model: must name the model to ask`.
absl::StatusOr<JobSpec> ValidateRequest(const v1::GenerateJobRequest& request,
                                        const BackendNames& backends,
                                        const ValidationLimits& limits);

// The dataset's side: not empty, and every row has the template's columns,
// e.g. `block.prompt_template: column "question" is missing from row 3`.
// `source` names the request's dataset field.
absl::Status ValidateDataset(const JobSpec& spec, const DatasetInfo& dataset,
                             absl::string_view source);

// The request names exactly one dataset: rows (`inline_rows` of them; the
// service keeps them apart from the request), dataset_id or dataset_path.
absl::Status ValidateDatasetSource(const v1::GenerateJobRequest& request,
                                   int64_t inline_rows);

// The request's dataset field: "rows", "dataset_id" or "dataset_path".
absl::string_view DatasetSource(const v1::GenerateJobRequest& request);

// Job and dataset ids name files: at most 128 letters, digits, '-', '_' or
// '.', not starting with '.'.
bool IsValidId(absl::string_view id);

// A job id made by the server: 16 hex digits.
std::string NewJobId();

}  // namespace sdg

#endif  // SDG_SERVER_JOBS_JOB_SPEC_H_
