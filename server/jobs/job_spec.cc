#include "server/jobs/job_spec.h"

#include <algorithm>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "sdg/v1/block_defaults.h"

namespace sdg {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
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

absl::Status ValidateDatasetSource(const v1::GenerateJobRequest& request) {
  const int sources = (request.rows_size() > 0 ? 1 : 0) +
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
  for (const std::string& column : spec.prompt_template.columns()) {
    if (std::optional<int64_t> row = dataset.FirstRowMissing(column)) {
      return Invalid(
          "block.prompt_template",
          absl::StrCat("column \"", column, "\" is missing from row ", *row));
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
  if (block.prompt_template().empty()) {
    return Invalid("block.prompt_template", "must not be empty");
  }
  absl::StatusOr<PromptTemplate> prompt_template =
      PromptTemplate::Parse(block.prompt_template());
  if (!prompt_template.ok()) {
    return Invalid("block.prompt_template", prompt_template.status().message());
  }
  if (block.model().empty()) {
    return Invalid("block.model",
                   "must name the model to ask (see the backend's /v1/models)");
  }
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

  const std::string backend_name = block.backend().empty() && !backends.empty()
                                       ? backends.front()
                                       : block.backend();
  if (std::find(backends.begin(), backends.end(), backend_name) ==
      backends.end()) {
    std::vector<std::string> names = backends;
    std::sort(names.begin(), names.end());
    return Invalid(
        "block.backend",
        absl::StrCat("unknown backend \"", backend_name,
                     "\"; this server has: ",
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
  return spec;
}

}  // namespace sdg
