#include "server/jobs/job_spec.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/quote.h"
#include "sdg/v1/block_defaults.h"

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
absl::Status CheckSampling(const v1::Block& block) {
  if (block.has_temperature() &&
      !(std::isfinite(block.temperature()) && block.temperature() >= 0)) {
    return Invalid("block.temperature",
                   absl::StrCat("must be a finite number >= 0, got ",
                                block.temperature()));
  }
  if (block.has_top_p() && !(block.top_p() > 0 && block.top_p() <= 1)) {
    return Invalid("block.top_p",
                   absl::StrCat("must be in (0, 1], got ", block.top_p()));
  }
  if (block.stop_size() > kMaxStopSequences) {
    return Invalid("block.stop",
                   absl::StrCat("at most ", kMaxStopSequences,
                                " sequences, got ", block.stop_size()));
  }
  for (int i = 0; i < block.stop_size(); ++i) {
    if (absl::Status s = CheckSize(absl::StrCat("block.stop[", i, "]"),
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

  const v1::Block& block = request.block();
  for (const auto& [field, value] :
       {std::pair{"block.name", &block.name()},
        std::pair{"block.model", &block.model()},
        std::pair{"block.output_column", &block.output_column()}}) {
    if (absl::Status s = CheckSize(field, *value, kMaxNameBytes); !s.ok()) {
      return s;
    }
  }
  if (block.prompt_template().empty()) {
    return Invalid("block.prompt_template", "must not be empty");
  }
  if (block.prompt_template().size() + block.system_prompt().size() >
      limits.max_prompt_bytes) {
    return Invalid("block.prompt_template",
                   absl::StrCat("with the system_prompt, longer than ",
                                limits.max_prompt_bytes,
                                " bytes (the server's --max_prompt_bytes)"));
  }
  if (block.api() != v1::API_COMPLETIONS && block.api() != v1::API_CHAT) {
    return Invalid("block.api", absl::StrCat("unknown value ", block.api()));
  }
  absl::StatusOr<PromptTemplate> prompt_template =
      PromptTemplate::Parse(block.prompt_template());
  if (!prompt_template.ok()) {
    return Invalid("block.prompt_template", prompt_template.status().message());
  }
  if (absl::Status s = CheckSampling(block); !s.ok()) return s;
  if (block.max_tokens() < 0) {
    return Invalid(
        "block.max_tokens",
        absl::StrCat("must not be negative, got ", block.max_tokens()));
  }
  if (absl::Status s =
          CheckRange("block.n", block.n(), limits.max_samples_per_row);
      !s.ok()) {
    return s;
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

  const std::string backend_name = block.backend().empty() && !backends.empty()
                                       ? backends.front()
                                       : block.backend();
  if (std::find(backends.begin(), backends.end(), backend_name) ==
      backends.end()) {
    std::vector<std::string> names = backends;
    std::sort(names.begin(), names.end());
    return Invalid(
        "block.backend",
        absl::StrCat("unknown backend ", Quoted(backend_name),
                     "; this server has: ",
                     names.empty() ? "none" : absl::StrJoin(names, ", ")));
  }

  spec.block = block;
  spec.block.set_backend(backend_name);
  spec.block.set_output_column(v1::OutputColumnOf(block));
  spec.block.set_n(v1::SamplesPerRowOf(block));
  spec.prompt_template = *std::move(prompt_template);
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
