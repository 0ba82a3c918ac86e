#include "server/service/job_service.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/logging.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "sdg/v1/block_defaults.h"
#include "server/jobs/batch_line.h"
#include "server/scheduling/job_estimator.h"
#include "server/service/storage_quota.h"

namespace sdg {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;

// Counts no tokens: a job's enqueued tokens are its prompts at 4 bytes a
// token, with no backend asked on the admission path.
class PromptBytesOnly final : public PromptCounter {
 public:
  absl::StatusOr<ServerShape> Shape(const v1::Block&) override {
    return ServerShape{};
  }
  absl::StatusOr<std::vector<int64_t>> CountTokens(
      const v1::Block&, const std::vector<std::string>&) override {
    return absl::InternalError("PromptBytesOnly counts no tokens");
  }
};

using ShardFn =
    absl::FunctionRef<absl::Status(std::vector<google::protobuf::Struct>)>;

// `dataset`'s rows in order, `shard_rows` at a time.
absl::Status ReadShardsOf(const Dataset& dataset, int64_t shard_rows,
                          ShardFn on_shard) {
  for (int64_t first = 0; first < dataset.row_count(); first += shard_rows) {
    SDG_ASSIGN_OR_RETURN(
        std::vector<google::protobuf::Struct> rows,
        dataset.ReadRows(first,
                         std::min(shard_rows, dataset.row_count() - first)));
    SDG_RETURN_IF_ERROR(on_shard(std::move(rows)));
  }
  return absl::OkStatus();
}

// JobSpec::enqueued_tokens of a job whose dataset is `dataset`: an OpenAI
// batch's lines at 4 bytes a token, another job's rendered prompts.
absl::StatusOr<int64_t> EnqueuedTokens(const JobSpec& spec,
                                       const Dataset& dataset) {
  if (spec.openai_batch.has_value()) {
    int64_t bytes = 0;
    SDG_RETURN_IF_ERROR(ReadFileLines(
        dataset, 0, dataset.row_count(), [&bytes](absl::string_view line) {
          bytes += static_cast<int64_t>(line.size());
          return absl::OkStatus();
        }));
    return (bytes + 3) / 4;
  }
  PromptBytesOnly counter;
  JobEstimator estimator(spec, counter);
  SDG_RETURN_IF_ERROR(
      ReadShardsOf(dataset, spec.batch_size,
                   [&estimator](std::vector<google::protobuf::Struct> rows) {
                     return estimator.AddShard(std::move(rows));
                   }));
  return estimator.Finish().prompt_tokens();
}

}  // namespace

JobService::JobService(const Options& options, BackendNames backends,
                       Scheduler& scheduler, JobStore& store, Metrics& metrics)
    : options_(options),
      backends_(std::move(backends)),
      scheduler_(scheduler),
      store_(store),
      metrics_(metrics),
      data_root_(
          {.root = options.data_root, .shared = options.data_root_shared}),
      registry_(options.job_retention, store, [this](JobRecord record) {
        return Rebuild(std::move(record)).job;
      }) {}

absl::StatusOr<std::shared_ptr<Job>> JobService::Admit(
    const Caller& caller, const v1::GenerateJobRequest& request,
    absl::Span<const absl::string_view> rows) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      return absl::UnavailableError(
          "server is shutting down; retry against another replica");
    }
  }
  const std::string digest = RequestDigest(request, rows);
  if (!request.job_id().empty()) {
    // Ids are one namespace for every tenant; only the tenant that made a
    // job attaches to it by sending the same request again.
    if (absl::StatusOr<std::shared_ptr<Job>> existing = registry_.Find(
            request.job_id(), Caller{.tenant = "", .admin = true});
        existing.ok()) {
      if ((*existing)->tenant() == caller.tenant &&
          (*existing)->request_digest() == digest) {
        return existing;
      }
      return JobIdTaken(request.job_id());
    }
  }
  absl::StatusOr<JobSpec> spec =
      ValidateRequest(request, backends_, options_.limits);
  absl::Status valid =
      spec.ok()
          ? ValidateDatasetSource(request, static_cast<int64_t>(rows.size()))
          : spec.status();
  if (valid.ok()) valid = ChooseModels(*spec);
  if (!valid.ok()) {
    Log(LogLevel::kInfo, "job rejected",
        {{"job_id", CutShort(request.job_id())},
         {"tenant", caller.tenant},
         {"error", std::string(valid.message())}});
    return valid;
  }
  const std::string job_id = spec->job_id;
  {
    absl::MutexLock lock(&mu_);
    if (!admitting_.insert(job_id).second) {
      return absl::AbortedError(
          absl::StrCat("job_id: a request for job ", Quoted(job_id),
                       " is being admitted right now; retry to attach to it"));
    }
  }
  absl::StatusOr<std::shared_ptr<Job>> job =
      AdmitNew(caller, request, rows, digest, *std::move(spec));
  absl::MutexLock lock(&mu_);
  admitting_.erase(job_id);
  return job;
}

absl::StatusOr<v1::JobEstimate> JobService::Estimate(
    const Caller& caller, const v1::GenerateJobRequest& request) {
  if (options_.prompt_counter == nullptr) {
    return absl::UnimplementedError("this server does not estimate jobs");
  }
  SDG_ASSIGN_OR_RETURN(JobSpec spec,
                       ValidateRequest(request, backends_, options_.limits));
  if (spec.openai_batch.has_value()) {
    return absl::InvalidArgumentError(
        "openai_batch: EstimateJob estimates blocks and pipelines");
  }
  SDG_RETURN_IF_ERROR(ValidateDatasetSource(request, request.rows_size()));
  SDG_RETURN_IF_ERROR(ChooseModels(spec));
  JobEstimator estimator(spec, *options_.prompt_counter);
  SDG_ASSIGN_OR_RETURN(
      DatasetInfo info,
      ReadShards(caller, request, spec,
                 [&estimator](std::vector<google::protobuf::Struct> rows) {
                   return estimator.AddShard(std::move(rows));
                 }));
  SDG_RETURN_IF_ERROR(ValidateDataset(spec, info, DatasetSource(request)));
  return estimator.Finish();
}

absl::StatusOr<DatasetInfo> JobService::ReadShards(
    const Caller& caller, const v1::GenerateJobRequest& request,
    const JobSpec& spec,
    absl::FunctionRef<absl::Status(std::vector<google::protobuf::Struct>)>
        on_shard) {
  const size_t shard_rows = static_cast<size_t>(spec.batch_size);
  if (!request.dataset_id().empty()) {
    SDG_ASSIGN_OR_RETURN(StoredDataset upload,
                         store_.FindUpload(request.dataset_id()));
    // Another tenant's upload is as absent as one never made.
    if (!caller.Owns(upload.tenant)) return NoSuchUpload(request.dataset_id());
    SDG_RETURN_IF_ERROR(
        ValidateDataset(spec, upload.info, DatasetSource(request)));
    SDG_ASSIGN_OR_RETURN(std::shared_ptr<Dataset> dataset,
                         store_.OpenUpload(request.dataset_id()));
    SDG_RETURN_IF_ERROR(ReadShardsOf(*dataset, spec.batch_size, on_shard));
    return upload.info;
  }
  DatasetInfo info;
  std::vector<google::protobuf::Struct> shard;
  auto add = [&](google::protobuf::Struct row) -> absl::Status {
    info.Add(row);
    shard.push_back(std::move(row));
    if (shard.size() < shard_rows) return absl::OkStatus();
    return on_shard(std::exchange(shard, {}));
  };
  if (!request.dataset_path().empty()) {
    SDG_ASSIGN_OR_RETURN(std::string path,
                         data_root_.Resolve(request.dataset_path(), caller));
    SDG_RETURN_IF_ERROR(ReadJsonLinesFile(path, add));
  } else {
    for (const google::protobuf::Struct& row : request.rows()) {
      SDG_RETURN_IF_ERROR(add(row));
    }
  }
  if (!shard.empty()) SDG_RETURN_IF_ERROR(on_shard(std::move(shard)));
  return info;
}

absl::Status JobService::ChooseModels(JobSpec& spec) const {
  // A batch's lines name their models (checked with the lines).
  if (spec.openai_batch.has_value()) return absl::OkStatus();
  if (!spec.pipeline.has_value()) {
    return ChooseModel("block.model", spec.block);
  }
  for (StepSpec& step : spec.pipeline->steps) {
    if (auto* llm = std::get_if<LlmStepSpec>(&step.kind); llm != nullptr) {
      if (absl::Status s =
              ChooseModel(absl::StrCat("pipeline.steps[", step.index, "] (",
                                       Quoted(step.name), ").llm.block.model"),
                          llm->block);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status JobService::ChooseModel(absl::string_view field,
                                     v1::Block& block) const {
  if (!block.model().empty()) return absl::OkStatus();
  const std::string& backend = block.backend();
  std::vector<std::string> models = options_.backend_models
                                        ? options_.backend_models(backend)
                                        : std::vector<std::string>();
  if (models.size() == 1) {
    block.set_model(models.front());
    return absl::OkStatus();
  }
  if (models.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": empty, and backend ", Quoted(backend),
        " has not listed its models (/v1/models); name the model"));
  }
  std::vector<std::string> quoted;
  quoted.reserve(models.size());
  for (const std::string& model : models) quoted.push_back(Quoted(model));
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": empty, and backend ", Quoted(backend), " lists ", models.size(),
      " models; name one of: ", absl::StrJoin(quoted, ", ")));
}

absl::StatusOr<std::shared_ptr<Job>> JobService::AdmitNew(
    const Caller& caller, const v1::GenerateJobRequest& request,
    absl::Span<const absl::string_view> rows, const std::string& digest,
    JobSpec spec) {
  const std::string job_id = spec.job_id;
  auto rejected = [&](LogLevel level, absl::Status why) {
    Log(level, "job rejected",
        {{"job_id", job_id},
         {"tenant", caller.tenant},
         {"error", std::string(why.message())}});
    return why;
  };
  if (absl::StatusOr<StorageUsage> usage = UsageWithinQuota(caller);
      !usage.ok()) {
    return rejected(LogLevel::kInfo, usage.status());
  }
  // Until the scheduler has the job, a refusal takes back, in reverse
  // order, what admission stored.
  absl::Cleanup discard_dataset = [&] { store_.DiscardJobDataset(job_id); };
  absl::StatusOr<std::shared_ptr<Dataset>> dataset =
      StoreDataset(caller, request, rows, spec);
  if (!dataset.ok()) return rejected(LogLevel::kInfo, dataset.status());
  if (scheduler_.limits_enqueued_tokens()) {
    absl::StatusOr<int64_t> tokens = EnqueuedTokens(spec, **dataset);
    if (!tokens.ok()) return rejected(LogLevel::kWarning, tokens.status());
    spec.enqueued_tokens = *tokens;
  }
  JobRecord record;
  record.job_id = job_id;
  record.tenant = caller.tenant;
  record.request = request;  // without rows: they are the dataset now
  record.request.set_job_id(job_id);
  record.request_digest = digest;
  record.create_time = absl::Now();
  if (spec.openai_batch.has_value()) {
    absl::StatusOr<std::optional<v1::JobFinished>> invalid =
        CheckBatchLines(spec, **dataset);
    if (!invalid.ok()) return rejected(LogLevel::kWarning, invalid.status());
    record.request.mutable_openai_batch()->set_model(
        spec.openai_batch->model());
    if (invalid->has_value()) {
      SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                           AddFailedBatch(std::move(spec), std::move(record),
                                          **std::move(invalid), *dataset));
      std::move(discard_dataset).Cancel();
      return job;
    }
  }
  // As run: a resumed job asks the model chosen now.
  if (spec.openai_batch.has_value()) {
    // Its lines name their models.
  } else if (spec.pipeline.has_value()) {
    for (const StepSpec& step : spec.pipeline->steps) {
      if (const LlmStepSpec* llm = step.llm(); llm != nullptr) {
        record.request.mutable_pipeline()
            ->mutable_steps(step.index)
            ->mutable_llm()
            ->mutable_block()
            ->set_model(llm->block.model());
      }
    }
  } else {
    record.request.mutable_block()->set_model(spec.block.model());
  }
  SDG_RETURN_IF_ERROR(store_.AddJob(record));
  record.version = 1;  // as AddJob stored it
  // From here on, removing the job removes its dataset too.
  std::move(discard_dataset).Cancel();
  absl::Cleanup remove_job = [&] { (void)store_.RemoveJob(job_id); };
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       Job::Create(std::move(spec), std::move(record),
                                   *std::move(dataset), store_, metrics_));
  SDG_RETURN_IF_ERROR(registry_.Add(job));
  absl::Cleanup unregister = [&] { registry_.Remove(job_id); };
  if (absl::Status submitted = scheduler_.Submit(job); !submitted.ok()) {
    return rejected(LogLevel::kWarning, submitted);
  }
  std::move(unregister).Cancel();
  std::move(remove_job).Cancel();
  return job;
}

absl::StatusOr<std::optional<v1::JobFinished>> JobService::CheckBatchLines(
    JobSpec& spec, const Dataset& dataset) const {
  // A model is served when a backend lists it, or when one lists none (it
  // has not answered /v1/models yet, or has no such list): that backend
  // then answers the line, with its 404 if it does not serve it.
  auto model_served = [this](const std::string& model) {
    for (const std::string& backend : backends_) {
      const std::vector<std::string> models =
          options_.backend_models ? options_.backend_models(backend)
                                  : std::vector<std::string>();
      if (models.empty() ||
          std::find(models.begin(), models.end(), model) != models.end()) {
        return true;
      }
    }
    return false;
  };
  BatchFileValidator validator(
      spec.openai_batch->endpoint(), model_served,
      {options_.limits.max_samples_per_row, options_.limits.max_prompt_bytes});
  SDG_RETURN_IF_ERROR(ReadFileLines(dataset, 0, dataset.row_count(),
                                    [&validator](absl::string_view line) {
                                      validator.Add(line);
                                      return absl::OkStatus();
                                    }));
  spec.openai_batch->set_model(validator.model());
  if (validator.error_count() == 0) return std::nullopt;
  v1::JobFinished finished;
  finished.set_state(v1::JOB_STATE_FAILED);
  finished.set_reason(absl::StrCat(
      "the input file has ", validator.error_count(), " invalid line",
      validator.error_count() == 1 ? "" : "s", " of ", validator.lines(),
      "; the first is line ", validator.errors().front().line(), ": ",
      validator.errors().front().message()));
  for (const v1::BatchLineError& error : validator.errors()) {
    *finished.add_line_errors() = error;
  }
  return finished;
}

absl::StatusOr<std::shared_ptr<Job>> JobService::AddFailedBatch(
    JobSpec spec, JobRecord record, v1::JobFinished finished,
    std::shared_ptr<Dataset> dataset) {
  record.state = v1::JOB_STATE_FAILED;
  record.end_time = record.create_time;
  record.reason = finished.reason();
  record.total_rows = dataset->row_count();
  record.finished = std::move(finished);
  // AddJob stores the request and state; UpdateJob the rest.
  SDG_RETURN_IF_ERROR(store_.AddJob(record));
  record.version = 1;
  SDG_RETURN_IF_ERROR(store_.UpdateJob(record));
  ++record.version;
  metrics_.BatchFinished("failed");
  Log(LogLevel::kInfo, "batch failed validation",
      {{"job_id", record.job_id},
       {"tenant", record.tenant},
       {"error", record.reason}});
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       Job::Restore(std::move(spec), std::move(record),
                                    std::move(dataset), store_, metrics_));
  SDG_RETURN_IF_ERROR(registry_.Add(job));
  return job;
}

absl::StatusOr<std::shared_ptr<Dataset>> JobService::StoreDataset(
    const Caller& caller, const v1::GenerateJobRequest& request,
    absl::Span<const absl::string_view> rows, const JobSpec& spec) {
  const absl::string_view source = DatasetSource(request);
  if (!request.dataset_id().empty()) {
    SDG_ASSIGN_OR_RETURN(StoredDataset upload,
                         store_.FindUpload(request.dataset_id()));
    // Another tenant's upload is as absent as one never made.
    if (!caller.Owns(upload.tenant)) return NoSuchUpload(request.dataset_id());
    SDG_RETURN_IF_ERROR(ValidateDataset(spec, upload.info, source));
    return store_.UseUploadedDataset(request.dataset_id(), spec.job_id);
  }
  SDG_ASSIGN_OR_RETURN(std::unique_ptr<DatasetBuilder> builder,
                       store_.NewJobDataset(spec.job_id));
  if (!request.dataset_path().empty()) {
    SDG_ASSIGN_OR_RETURN(std::string path,
                         data_root_.Resolve(request.dataset_path(), caller));
    SDG_RETURN_IF_ERROR(ImportJsonLinesFile(path, *builder));
  } else {
    for (size_t i = 0; i < rows.size(); ++i) {
      if (absl::Status s = builder->AddSerialized(rows[i]); !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("rows[", i, "]: ", s.message()));
      }
    }
  }
  SDG_RETURN_IF_ERROR(ValidateDataset(spec, builder->info(), source));
  return builder->Finish();
}

absl::StatusOr<StorageUsage> JobService::UsageWithinQuota(
    const Caller& caller) const {
  const int64_t quota = options_.tenant_storage_quota_bytes;
  if (quota <= 0) return StorageUsage{};
  absl::StatusOr<StorageUsage> usage = store_.TenantUsage(caller.tenant);
  if (usage.ok() && usage->total() >= quota) {
    return StorageQuotaError(caller.tenant, *usage, quota);
  }
  return usage;
}

absl::StatusOr<int> JobService::ResumeStoredJobs() {
  absl::StatusOr<std::vector<JobRecord>> records = store_.LoadJobs();
  if (!records.ok()) return records.status();
  int resumed = 0;
  for (JobRecord& record : *records) {
    const bool unfinished = record.unfinished();
    const std::string job_id = record.job_id;
    // An ended job is only listed: its Job is built when it is read.
    absl::Status s =
        unfinished ? Resume(std::move(record)) : registry_.AddEnded(record);
    if (!s.ok()) {
      Log(LogLevel::kError, "job store: cannot load a job",
          {{"job_id", job_id}, {"error", std::string(s.message())}});
      continue;
    }
    if (unfinished) ++resumed;
  }
  return resumed;
}

JobSpec JobService::StoredSpec(const JobRecord& record,
                               absl::Status* invalid) const {
  absl::StatusOr<JobSpec> validated =
      ValidateRequest(record.request, backends_, options_.limits);
  if (invalid != nullptr) *invalid = validated.status();
  if (validated.ok()) return *std::move(validated);
  // Enough of a spec to list the job, or to fail it.
  JobSpec spec;
  spec.job_id = record.job_id;
  spec.block = record.request.block();
  spec.batch_size = record.request.batch_size() > 0
                        ? record.request.batch_size()
                        : v1::kDefaultBatchSize;
  spec.num_workers = 1;
  return spec;
}

JobService::Rebuilt JobService::Rebuild(JobRecord record) {
  Rebuilt rebuilt;
  JobSpec spec = StoredSpec(record, &rebuilt.invalid);
  // An ended job's record describes it (its totals), unless it was saved
  // before they were kept: then its dataset counts its rows.
  std::shared_ptr<Dataset> dataset;
  if (!DescribedByRecord(record)) {
    absl::StatusOr<std::shared_ptr<Dataset>> opened =
        store_.OpenJobDataset(record.job_id);
    if (opened.ok()) {
      dataset = *std::move(opened);
    } else if (record.unfinished()) {
      rebuilt.job = opened.status();
      return rebuilt;
    }
  }
  // A resumed job holds its share of its tenant's enqueued tokens again.
  if (record.unfinished() && dataset != nullptr && rebuilt.invalid.ok() &&
      scheduler_.limits_enqueued_tokens()) {
    absl::StatusOr<int64_t> tokens = EnqueuedTokens(spec, *dataset);
    if (!tokens.ok()) {
      rebuilt.job = tokens.status();
      return rebuilt;
    }
    spec.enqueued_tokens = *tokens;
  }
  rebuilt.job = Job::Restore(std::move(spec), std::move(record),
                             std::move(dataset), store_, metrics_);
  return rebuilt;
}

absl::Status JobService::Resume(JobRecord record) {
  Rebuilt rebuilt = Rebuild(std::move(record));
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job, std::move(rebuilt.job));
  if (absl::Status added = registry_.Add(job); !added.ok()) return added;
  // Its log may say it ended (a crash before its record was saved).
  if (job->IsFinished()) return absl::OkStatus();

  if (!rebuilt.invalid.ok()) {
    job->Cancel(absl::FailedPreconditionError(absl::StrCat(
        "cannot resume the job on this server: ", rebuilt.invalid.message())));
  }
  Log(LogLevel::kInfo, "job resuming",
      {{"job_id", job->id()},
       {"resumed", job->Snapshot().resumed()},
       {"shards_to_run", job->shards_to_run()}});
  // Resumed jobs are admitted past the queue limit: they were admitted once.
  if (absl::Status submitted =
          scheduler_.Submit(job, Scheduler::Admission::kResumed);
      !submitted.ok()) {
    job->Suspend(submitted);
    return submitted;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Job>> JobService::Find(const Caller& caller,
                                                      const std::string& job_id,
                                                      StoreReads reads) {
  return registry_.Find(job_id, caller, reads);
}

absl::StatusOr<v1::Job> JobService::Get(const Caller& caller,
                                        const std::string& job_id,
                                        StoreReads reads) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       registry_.Find(job_id, caller, reads));
  return Describe(*job);
}

absl::StatusOr<v1::Job> JobService::Cancel(const Caller& caller,
                                           const std::string& job_id,
                                           StoreReads reads) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       registry_.Find(job_id, caller, reads));
  Log(LogLevel::kInfo, "job cancel requested",
      {{"job_id", job_id}, {"by_tenant", caller.tenant}});
  job->Cancel(absl::CancelledError("cancelled by CancelJob"));
  return Describe(*job);
}

absl::StatusOr<StorageUsage> JobService::Usage(const Caller& caller) {
  return store_.TenantUsage(caller.tenant);
}

absl::StatusOr<DatasetUpload::Limits> JobService::UploadLimits(
    const Caller& caller) {
  DatasetUpload::Limits limits;
  SDG_ASSIGN_OR_RETURN(limits.usage, UsageWithinQuota(caller));
  limits.max_upload_bytes = options_.max_upload_bytes;
  limits.quota_bytes = options_.tenant_storage_quota_bytes;
  return limits;
}

absl::StatusOr<std::unique_ptr<DatasetUpload>> JobService::StartUpload(
    const Caller& caller) {
  SDG_ASSIGN_OR_RETURN(DatasetUpload::Limits limits, UploadLimits(caller));
  return std::make_unique<DatasetUpload>(store_, caller.tenant, limits);
}

void JobService::RemoveExpired() {
  if (const int removed = registry_.RemoveExpired(absl::Now()); removed > 0) {
    Log(LogLevel::kInfo, "expired jobs removed", {{"jobs", removed}});
  }
  // What the store keeps of an ended job is read again when asked for; the
  // memory store keeps the Job's parts anyway.
  if (store_.durable()) registry_.ForgetEndedJobs();
  PruneUploads();
}

absl::Duration JobService::RetentionPeriod() const {
  return std::clamp(options_.job_retention / 10, absl::Seconds(1),
                    absl::Minutes(1));
}

void JobService::PruneUploads() {
  absl::StatusOr<int> pruned =
      store_.PruneUploads(absl::Now() - options_.job_retention);
  if (!pruned.ok()) {
    Log(LogLevel::kWarning, "job store: cannot remove expired uploads",
        {{"error", std::string(pruned.status().message())}});
  } else if (*pruned > 0) {
    Log(LogLevel::kInfo, "expired uploads removed", {{"uploads", *pruned}});
  }
}

v1::Job JobService::Describe(const Job& job) const {
  v1::Job described = job.Snapshot();
  if (described.state() == v1::JOB_STATE_RUNNING && options_.backend_down) {
    described.set_backend_down(options_.backend_down(described.backend()));
  }
  return described;
}

absl::StatusOr<v1::ListJobsResponse> JobService::List(
    const Caller& caller, const v1::ListJobsRequest& request,
    StoreReads reads) {
  if (request.page_size() < 0 || request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be between 0 and ", kMaxPageSize,
                     ", got ", request.page_size()));
  }
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: unknown value ", request.state()));
  }
  absl::StatusOr<JobRegistry::Page> page = registry_.ListPage(
      caller, request.page_token(),
      request.page_size() == 0 ? kDefaultPageSize : request.page_size(),
      request.state(), reads);
  if (!page.ok()) return page.status();
  v1::ListJobsResponse response;
  for (JobRegistry::Listed& listed : page->jobs) {
    if (listed.job != nullptr) {
      *response.add_jobs() = Describe(*listed.job);
    } else if (DescribedByRecord(listed.ended)) {
      *response.add_jobs() = DescribeStored(
          StoredSpec(listed.ended, /*invalid=*/nullptr), listed.ended);
    } else {
      // Saved before an ended job's totals were kept: its Job counts them.
      SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                           Rebuild(std::move(listed.ended)).job);
      *response.add_jobs() = Describe(*job);
    }
  }
  response.set_next_page_token(page->next_page_token);
  return response;
}

absl::Status JobService::Delete(const Caller& caller,
                                const std::string& job_id) {
  absl::StatusOr<std::shared_ptr<Job>> job = registry_.Find(job_id, caller);
  if (!job.ok()) return job.status();
  if (!(*job)->IsFinished() ||
      (*job)->Snapshot().state() == v1::JOB_STATE_SUSPENDED) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", Quoted(job_id),
                     " has not finished; cancel it (CancelJob) first"));
  }
  registry_.Remove(job_id);
  absl::Status removed = store_.RemoveJob(job_id);
  Log(LogLevel::kInfo, "job deleted",
      {{"job_id", job_id}, {"by_tenant", caller.tenant}});
  return removed;
}

void JobService::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool JobService::AwaitJobsFinished(absl::Time deadline) {
  for (const std::shared_ptr<Job>& job : registry_.Unfinished()) {
    if (!job->AwaitFinished(deadline)) return false;
  }
  return true;
}

void JobService::CancelAllJobs(const absl::Status& reason) {
  for (const std::shared_ptr<Job>& job : registry_.Unfinished()) {
    job->Cancel(reason);
  }
}

void JobService::SuspendAllJobs(const absl::Status& reason) {
  for (const std::shared_ptr<Job>& job : registry_.Unfinished()) {
    job->Suspend(reason);
  }
}

}  // namespace sdg
