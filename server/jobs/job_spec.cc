#include "server/jobs/job_spec.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "sdg/v1/block_defaults.h"
#include "server/jobs/batch_line.h"

namespace sdg {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

absl::Status CheckSize(absl::string_view field, absl::string_view value,
                       size_t max) {
  if (value.size() > max) {
    return Invalid(field,
                   absl::StrCat("at most ", max, " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

// Temperature and top_p: a number JSON can carry (NaN and infinities are
// sent as null) within the range the OpenAI API gives.
absl::Status CheckSampling(absl::string_view prefix, const v1::Block& block) {
  if (block.has_temperature() &&
      !(std::isfinite(block.temperature()) && block.temperature() >= 0)) {
    return Invalid(absl::StrCat(prefix, "temperature"),
                   absl::StrCat("must be a finite number >= 0, got ",
                                block.temperature()));
  }
  if (block.has_top_p() && !(block.top_p() > 0 && block.top_p() <= 1)) {
    return Invalid(absl::StrCat(prefix, "top_p"),
                   absl::StrCat("must be in (0, 1], got ", block.top_p()));
  }
  if (block.stop_size() > kMaxStopSequences) {
    return Invalid(absl::StrCat(prefix, "stop"),
                   absl::StrCat("at most ", kMaxStopSequences,
                                " sequences, got ", block.stop_size()));
  }
  for (int i = 0; i < block.stop_size(); ++i) {
    if (absl::Status s = CheckSize(absl::StrCat(prefix, "stop[", i, "]"),
                                   block.stop(i), kMaxNameBytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t max) {
  if (value < 0 || value > max) {
    return Invalid(
        field, absl::StrCat("must be between 0 and ", max, ", got ", value));
  }
  return absl::OkStatus();
}

// A block's fields but its prompt (a job's block, or a pipeline LLM step's),
// with the backend and n filled in. Fields are named from `prefix`.
absl::StatusOr<v1::Block> CheckBlock(absl::string_view prefix,
                                     const v1::Block& block,
                                     const BackendNames& backends,
                                     const ValidationLimits& limits) {
  for (const auto& [field, value] :
       {std::pair{"name", &block.name()}, std::pair{"model", &block.model()},
        std::pair{"output_column", &block.output_column()}}) {
    if (absl::Status s =
            CheckSize(absl::StrCat(prefix, field), *value, kMaxNameBytes);
        !s.ok()) {
      return s;
    }
  }
  if (block.api() != v1::API_COMPLETIONS && block.api() != v1::API_CHAT) {
    return Invalid(absl::StrCat(prefix, "api"),
                   absl::StrCat("unknown value ", block.api()));
  }
  if (absl::Status s = CheckSampling(prefix, block); !s.ok()) return s;
  if (block.max_tokens() < 0) {
    return Invalid(
        absl::StrCat(prefix, "max_tokens"),
        absl::StrCat("must not be negative, got ", block.max_tokens()));
  }
  if (absl::Status s = CheckRange(absl::StrCat(prefix, "n"), block.n(),
                                  limits.max_samples_per_row);
      !s.ok()) {
    return s;
  }
  const std::string backend_name = block.backend().empty() && !backends.empty()
                                       ? backends.front()
                                       : block.backend();
  if (std::find(backends.begin(), backends.end(), backend_name) ==
      backends.end()) {
    std::vector<std::string> names = backends;
    std::sort(names.begin(), names.end());
    return Invalid(
        absl::StrCat(prefix, "backend"),
        absl::StrCat("unknown backend ", Quoted(backend_name),
                     "; this server has: ",
                     names.empty() ? "none" : absl::StrJoin(names, ", ")));
  }
  v1::Block checked = block;
  checked.set_backend(backend_name);
  checked.set_n(v1::SamplesPerRowOf(block));
  return checked;
}

absl::Status CheckColumnNames(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<std::string>& names,
    bool may_be_empty) {
  if (names.empty() && !may_be_empty) {
    return Invalid(field, "must name at least one column");
  }
  for (int i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      return Invalid(absl::StrCat(field, "[", i, "]"), "must not be empty");
    }
    if (absl::Status s = CheckSize(absl::StrCat(field, "[", i, "]"), names[i],
                                   kMaxNameBytes);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ColumnMap> CheckColumnMap(absl::string_view field,
                                         const v1::ColumnMapStep& step) {
  if (step.columns_map().empty()) {
    return Invalid(field, "must map at least one column");
  }
  ColumnMap columns;
  for (int i = 0; i < step.columns_map_size(); ++i) {
    const v1::ColumnPair& pair = step.columns_map(i);
    if (pair.from().empty() || pair.to().empty()) {
      return Invalid(absl::StrCat(field, "[", i, "]"),
                     "needs both `from` and `to`");
    }
    for (const std::string* name : {&pair.from(), &pair.to()}) {
      if (absl::Status s =
              CheckSize(absl::StrCat(field, "[", i, "]"), *name, kMaxNameBytes);
          !s.ok()) {
        return s;
      }
    }
    columns.emplace_back(pair.from(), pair.to());
  }
  return columns;
}

// LLMBlock's prompt: the template, or the parts joined as LLMBlock's
// "{system}\n{introduction}\n{principles}\n{examples}\n{generation}".
std::string PromptText(const v1::LlmStep& llm) {
  if (!llm.block().prompt_template().empty()) {
    return llm.block().prompt_template();
  }
  const v1::PromptParts& parts = llm.prompt();
  return absl::StrJoin(
      {parts.system(), parts.introduction(), parts.principles(),
       parts.examples(), parts.generation()},
      "\n");
}

absl::StatusOr<LlmStepSpec> CheckLlmStep(const std::string& prefix,
                                         const v1::LlmStep& llm,
                                         const v1::GenerateJobRequest& request,
                                         const BackendNames& backends,
                                         const ValidationLimits& limits) {
  absl::StatusOr<v1::Block> checked_block =
      CheckBlock(absl::StrCat(prefix, "block."), llm.block(), backends, limits);
  if (!checked_block.ok()) return checked_block.status();
  struct {
    v1::Block block;
  } spec{*std::move(checked_block)};
  if (llm.scaled_n()) {
    const int n = request.num_instructions_to_generate();
    if (n <= 0 || n > limits.max_samples_per_row) {
      return Invalid(
          "num_instructions_to_generate",
          absl::StrCat("must be between 1 and ", limits.max_samples_per_row,
                       " for ", prefix, "scaled_n, got ", n));
    }
    spec.block.set_n(n);
  }
  const std::string text = PromptText(llm);
  if (PythonStrip(text).empty()) {
    return Invalid(absl::StrCat(prefix, "prompt"),
                   "give block.prompt_template or the prompt's parts");
  }
  if (text.size() + spec.block.system_prompt().size() >
      limits.max_prompt_bytes) {
    return Invalid(absl::StrCat(prefix, "prompt"),
                   absl::StrCat("longer than ", limits.max_prompt_bytes,
                                " bytes (the server's --max_prompt_bytes)"));
  }
  absl::StatusOr<PromptTemplate> prompt_template = PromptTemplate::Parse(text);
  if (!prompt_template.ok()) {
    return Invalid(absl::StrCat(prefix, "prompt"),
                   prompt_template.status().message());
  }
  if (absl::Status s = CheckColumnNames(absl::StrCat(prefix, "output_columns"),
                                        llm.output_columns(), false);
      !s.ok()) {
    return s;
  }
  std::vector<std::string> columns(llm.output_columns().begin(),
                                   llm.output_columns().end());
  absl::StatusOr<OutputParser> parser = absl::InternalError("unset");
  switch (llm.parser_case()) {
    case v1::LlmStep::kTags:
      parser = OutputParser::Tags(
          columns,
          {llm.tags().start_tags().begin(), llm.tags().start_tags().end()},
          {llm.tags().end_tags().begin(), llm.tags().end_tags().end()});
      break;
    case v1::LlmStep::kPattern:
      parser = OutputParser::Pattern(columns, llm.pattern().pattern(),
                                     {llm.pattern().cleanup_tags().begin(),
                                      llm.pattern().cleanup_tags().end()});
      break;
    default:
      parser = OutputParser::Tags(columns, {""}, {""});
      break;
  }
  if (!parser.ok()) {
    return Invalid(absl::StrCat(prefix, llm.has_pattern() ? "pattern" : "tags"),
                   parser.status().message());
  }
  std::optional<int64_t> num_samples;
  if (llm.has_num_samples()) num_samples = llm.num_samples();
  return LlmStepSpec{std::move(spec.block), *std::move(prompt_template),
                     *std::move(parser), num_samples};
}

absl::StatusOr<ValueFilter> CheckFilterStep(const std::string& prefix,
                                            const v1::FilterByValueStep& step) {
  if (step.column().empty()) {
    return Invalid(absl::StrCat(prefix, "column"), "must name a column");
  }
  if (step.values().empty()) {
    return Invalid(absl::StrCat(prefix, "values"),
                   "must hold at least one value");
  }
  absl::StatusOr<FilterOperation> operation =
      ParseFilterOperation(step.operation());
  if (!operation.ok()) {
    return Invalid(absl::StrCat(prefix, "operation"),
                   operation.status().message());
  }
  absl::StatusOr<ConvertType> convert = ParseConvertType(step.convert_dtype());
  if (!convert.ok()) {
    return Invalid(absl::StrCat(prefix, "convert_dtype"),
                   convert.status().message());
  }
  std::optional<google::protobuf::Value> default_value;
  if (step.has_default_value()) default_value = step.default_value();
  absl::StatusOr<ValueFilter> filter = ValueFilter::Create(
      step.column(), {step.values().begin(), step.values().end()}, *operation,
      *convert, default_value);
  if (!filter.ok()) {
    return Invalid(absl::StrCat(prefix, "values"), filter.status().message());
  }
  return filter;
}

absl::StatusOr<StepSpec> CheckStep(int index, const v1::PipelineStep& step,
                                   const v1::GenerateJobRequest& request,
                                   const BackendNames& backends,
                                   const ValidationLimits& limits) {
  const std::string field = absl::StrCat("pipeline.steps[", index, "]");
  const std::string name =
      step.name().empty() ? absl::StrCat("step_", index) : step.name();
  if (absl::Status s =
          CheckSize(absl::StrCat(field, ".name"), name, kMaxNameBytes);
      !s.ok()) {
    return s;
  }
  const std::string prefix = absl::StrCat(field, " (", Quoted(name), ").");
  std::optional<decltype(StepSpec::kind)> kind;
  switch (step.kind_case()) {
    case v1::PipelineStep::kLlm: {
      absl::StatusOr<LlmStepSpec> llm = CheckLlmStep(
          absl::StrCat(prefix, "llm."), step.llm(), request, backends, limits);
      if (!llm.ok()) return llm.status();
      kind = *std::move(llm);
      break;
    }
    case v1::PipelineStep::kFilterByValue: {
      absl::StatusOr<ValueFilter> filter = CheckFilterStep(
          absl::StrCat(prefix, "filter_by_value."), step.filter_by_value());
      if (!filter.ok()) return filter.status();
      kind = *std::move(filter);
      break;
    }
    case v1::PipelineStep::kDuplicateColumns: {
      absl::StatusOr<ColumnMap> columns =
          CheckColumnMap(absl::StrCat(prefix, "duplicate_columns.columns_map"),
                         step.duplicate_columns());
      if (!columns.ok()) return columns.status();
      kind = DuplicateStepSpec{*std::move(columns)};
      break;
    }
    case v1::PipelineStep::kRenameColumns: {
      absl::StatusOr<ColumnMap> columns =
          CheckColumnMap(absl::StrCat(prefix, "rename_columns.columns_map"),
                         step.rename_columns());
      if (!columns.ok()) return columns.status();
      kind = RenameStepSpec{*std::move(columns)};
      break;
    }
    case v1::PipelineStep::kCombineColumns: {
      const v1::CombineColumnsStep& combine = step.combine_columns();
      if (absl::Status s =
              CheckColumnNames(absl::StrCat(prefix, "combine_columns.columns"),
                               combine.columns(), false);
          !s.ok()) {
        return s;
      }
      if (combine.output_column().empty()) {
        return Invalid(absl::StrCat(prefix, "combine_columns.output_column"),
                       "must name a column");
      }
      kind = CombineStepSpec{
          {combine.columns().begin(), combine.columns().end()},
          combine.output_column(),
          combine.has_separator() ? combine.separator() : "\n\n"};
      break;
    }
    case v1::PipelineStep::kFlattenColumns: {
      const v1::FlattenColumnsStep& flatten = step.flatten_columns();
      if (absl::Status s = CheckColumnNames(
              absl::StrCat(prefix, "flatten_columns.var_columns"),
              flatten.var_columns(), false);
          !s.ok()) {
        return s;
      }
      if (flatten.value_name().empty() || flatten.var_name().empty()) {
        return Invalid(absl::StrCat(prefix, "flatten_columns"),
                       "needs value_name and var_name");
      }
      kind = FlattenStepSpec{
          {flatten.var_columns().begin(), flatten.var_columns().end()},
          flatten.value_name(),
          flatten.var_name()};
      break;
    }
    default:
      return Invalid(field,
                     "must be one of llm, filter_by_value, duplicate_columns, "
                     "rename_columns, combine_columns, flatten_columns");
  }
  if (absl::Status s = CheckColumnNames(absl::StrCat(prefix, "drop_columns"),
                                        step.drop_columns(), true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckColumnNames(absl::StrCat(prefix, "drop_duplicates"),
                                        step.drop_duplicates(), true);
      !s.ok()) {
    return s;
  }
  return StepSpec{
      name,
      index,
      *std::move(kind),
      {step.drop_columns().begin(), step.drop_columns().end()},
      {step.drop_duplicates().begin(), step.drop_duplicates().end()}};
}

// The request's pipeline, or nullopt for a job of one block.
absl::StatusOr<std::optional<PipelineSpec>> ValidatePipeline(
    const v1::GenerateJobRequest& request, const BackendNames& backends,
    const ValidationLimits& limits) {
  if (!request.has_pipeline()) return std::nullopt;
  if (request.has_block()) {
    return Invalid("pipeline", "give either block or pipeline, not both");
  }
  const auto& steps = request.pipeline().steps();
  if (steps.empty()) return Invalid("pipeline.steps", "must not be empty");
  if (steps.size() > limits.max_pipeline_steps) {
    return Invalid("pipeline.steps",
                   absl::StrCat("at most ", limits.max_pipeline_steps,
                                " steps, got ", steps.size()));
  }
  PipelineSpec pipeline;
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < steps.size(); ++i) {
    absl::StatusOr<StepSpec> step =
        CheckStep(i, steps[i], request, backends, limits);
    if (!step.ok()) return step.status();
    if (!names.insert(step->name).second) {
      return Invalid(
          absl::StrCat("pipeline.steps[", i, "].name"),
          absl::StrCat(Quoted(step->name), " names an earlier step too"));
    }
    pipeline.steps.push_back(*std::move(step));
  }
  StageSpec stage;
  for (const StepSpec& step : pipeline.steps) {
    if (step.drop_duplicates.empty()) continue;
    stage.end_step = step.index + 1;
    pipeline.stages.push_back(stage);
    stage.first_step = stage.end_step;
  }
  // The last stage: the steps after the last barrier, or none (its rows are
  // delivered as they are).
  stage.end_step = static_cast<int>(pipeline.steps.size());
  pipeline.stages.push_back(stage);
  return pipeline;
}

}  // namespace

bool IsValidId(absl::string_view id) {
  return id.size() <= 128 && (id.empty() || id.front() != '.') &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
         });
}

absl::string_view DatasetSource(const v1::GenerateJobRequest& request) {
  if (!request.dataset_id().empty()) return "dataset_id";
  if (!request.dataset_path().empty()) return "dataset_path";
  return "rows";
}

absl::Status ValidateDatasetSource(const v1::GenerateJobRequest& request,
                                   int64_t inline_rows) {
  const int sources = (inline_rows > 0 ? 1 : 0) +
                      (request.dataset_id().empty() ? 0 : 1) +
                      (request.dataset_path().empty() ? 0 : 1);
  if (sources == 0) {
    return Invalid("rows",
                   "the dataset is empty (send rows, or name a "
                   "dataset_id or a dataset_path)");
  }
  if (sources > 1) {
    return Invalid(DatasetSource(request),
                   "give exactly one of rows, dataset_id and dataset_path");
  }
  return absl::OkStatus();
}

absl::Status ValidateDataset(const JobSpec& spec, const DatasetInfo& dataset,
                             absl::string_view source) {
  if (dataset.rows == 0) return Invalid(source, "the dataset is empty");
  // A batch's lines are checked as they are read (batch_line.h).
  if (spec.openai_batch.has_value()) return absl::OkStatus();
  // A pipeline's steps make and drop columns; a row without a column a step
  // needs fails at that step, with its own error.
  if (spec.pipeline.has_value()) return absl::OkStatus();
  if (dataset.columns.contains(spec.block.output_column())) {
    return Invalid("block.output_column",
                   absl::StrCat(Quoted(spec.block.output_column()),
                                " is a column of the dataset and would be "
                                "overwritten; choose another name"));
  }
  for (const std::string& column : spec.prompt_template.columns()) {
    if (std::optional<int64_t> row = dataset.FirstRowMissing(column)) {
      return Invalid("block.prompt_template",
                     absl::StrCat("column ", Quoted(column),
                                  " is missing from row ", *row));
    }
  }
  return absl::OkStatus();
}

int DefaultNumWorkers() {
  int cpus =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::min(32, cpus + 4);
}

std::string NewJobId() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* bitgen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(*bitgen));
}

namespace {

// An OpenAI batch's job: its endpoint and window; its lines are checked
// against them when the batch is admitted (batch_line.h).
absl::Status ValidateBatch(const v1::GenerateJobRequest& request,
                           const BackendNames& backends, JobSpec& spec) {
  const v1::OpenAIBatch& batch = request.openai_batch();
  if (request.has_block() || request.has_pipeline()) {
    return Invalid("openai_batch",
                   "give a block, a pipeline or a batch, not two");
  }
  if (request.dataset_id().empty()) {
    return Invalid("openai_batch",
                   "a batch's lines are an uploaded file: set dataset_id");
  }
  if (!IsBatchEndpoint(batch.endpoint())) {
    return Invalid("openai_batch.endpoint",
                   absl::StrCat(Quoted(batch.endpoint()),
                                " is not one of /v1/chat/completions, "
                                "/v1/completions and /v1/embeddings"));
  }
  if (batch.completion_window() != "24h") {
    return Invalid("openai_batch.completion_window",
                   absl::StrCat(Quoted(batch.completion_window()),
                                " is not supported; use \"24h\""));
  }
  if (batch.output_expires_after_seconds() < 0) {
    return Invalid("openai_batch.output_expires_after_seconds",
                   "must not be negative");
  }
  spec.openai_batch = batch;
  spec.block.set_name("openai-batch");
  spec.block.set_backend(backends.empty() ? "" : backends.front());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ValidateRequest(const v1::GenerateJobRequest& request,
                                        const BackendNames& backends,
                                        const ValidationLimits& limits) {
  JobSpec spec;
  if (!IsValidId(request.job_id())) {
    return Invalid("job_id",
                   "use at most 128 letters, digits, '-', '_' or '.', not "
                   "starting with '.'");
  }

  spec.job_id = request.job_id().empty() ? NewJobId() : request.job_id();

  if (request.has_openai_batch()) {
    SDG_RETURN_IF_ERROR(ValidateBatch(request, backends, spec));
  } else if (absl::StatusOr<std::optional<PipelineSpec>> pipeline =
                 ValidatePipeline(request, backends, limits);
             !pipeline.ok()) {
    return pipeline.status();
  } else if (pipeline->has_value()) {
    spec.pipeline = *std::move(*pipeline);
    // For logs and GetJob: the backend of the first LLM step.
    for (const StepSpec& step : spec.pipeline->steps) {
      if (const LlmStepSpec* llm = step.llm(); llm != nullptr) {
        spec.block.set_backend(llm->block.backend());
        break;
      }
    }
  } else {
    absl::StatusOr<v1::Block> block =
        CheckBlock("block.", request.block(), backends, limits);
    if (!block.ok()) return block.status();
    const std::string& text = request.block().prompt_template();
    if (text.empty()) {
      return Invalid("block.prompt_template", "must not be empty");
    }
    if (text.size() + block->system_prompt().size() > limits.max_prompt_bytes) {
      return Invalid("block.prompt_template",
                     absl::StrCat("with the system_prompt, longer than ",
                                  limits.max_prompt_bytes,
                                  " bytes (the server's --max_prompt_bytes)"));
    }
    absl::StatusOr<PromptTemplate> prompt_template =
        PromptTemplate::Parse(text);
    if (!prompt_template.ok()) {
      return Invalid("block.prompt_template",
                     prompt_template.status().message());
    }
    spec.block = *std::move(block);
    spec.block.set_output_column(v1::OutputColumnOf(request.block()));
    spec.prompt_template = *std::move(prompt_template);
  }
  if (absl::Status s =
          CheckRange("batch_size", request.batch_size(), limits.max_batch_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange("num_workers", request.num_workers(),
                                  limits.max_num_workers);
      !s.ok()) {
    return s;
  }
  if (spec.openai_batch.has_value()) {
    // The completion window: a batch still running after it expires.
    spec.timeout = limits.batch_completion_window;
  }
  if (request.has_timeout()) {
    const auto& timeout = request.timeout();
    if (timeout.seconds() < 0 || timeout.nanos() < 0 ||
        (timeout.seconds() == 0 && timeout.nanos() == 0)) {
      return Invalid("timeout", "must be positive when set");
    }
    spec.timeout =
        absl::Seconds(timeout.seconds()) + absl::Nanoseconds(timeout.nanos());
  }
  if (request.error_policy() != v1::ERROR_POLICY_CONTINUE &&
      request.error_policy() != v1::ERROR_POLICY_FAIL_FAST) {
    return Invalid("error_policy",
                   absl::StrCat("unknown value ", request.error_policy()));
  }

  if (!v1::ResultColumns_IsValid(request.result_columns())) {
    return Invalid("result_columns",
                   absl::StrCat("unknown value ", request.result_columns()));
  }

  spec.batch_size =
      request.batch_size() > 0 ? request.batch_size() : v1::kDefaultBatchSize;
  spec.num_workers = request.num_workers() > 0 ? request.num_workers()
                                               : limits.default_num_workers;
  spec.error_policy = request.error_policy();
  spec.result_columns = request.result_columns();
  spec.max_prompt_bytes = limits.max_prompt_bytes;
  spec.max_shard_prompt_bytes = limits.max_shard_prompt_bytes;
  return spec;
}

}  // namespace sdg
