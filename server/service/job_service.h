// The job lifecycle, the one owner of it: admits a request as a stored job
// (its dataset written, its record added) and hands it to the scheduler;
// restores the stored jobs at start and resumes the unfinished ones; finds,
// describes, lists, cancels and deletes a caller's jobs; removes expired
// jobs and uploads on a timer (RemoveExpired); drains for shutdown. It
// knows no gRPC: server/api decodes calls into it and encodes its answers.
// Admission, uploads, deletion and retention block on the store: callers
// run them off gRPC's reaction threads.
#ifndef SDG_SERVER_SERVICE_JOB_SERVICE_H_
#define SDG_SERVER_SERVICE_JOB_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "sdg/v1/generation.pb.h"
#include "server/jobs/job.h"
#include "server/jobs/job_spec.h"
#include "server/observability/metrics.h"
#include "server/scheduling/prompt_counter.h"
#include "server/scheduling/scheduler.h"
#include "server/service/caller.h"
#include "server/service/data_root.h"
#include "server/service/dataset_upload.h"
#include "server/service/job_registry.h"
#include "server/store/job_store.h"

namespace sdg {

class JobService {
 public:
  struct Options {
    ValidationLimits limits;
    absl::Duration job_retention = absl::Hours(24 * 7);
    // Where dataset_path may point; empty refuses dataset_path. With tenants,
    // each reads its own folder under it, and `data_root_shared` (a folder
    // under it) if set (data_root.h).
    std::string data_root;
    std::string data_root_shared;
    // Bytes one tenant may hold in the store: its uploads, its jobs'
    // datasets and results (0: no quota).
    int64_t tenant_storage_quota_bytes = 0;
    // The largest upload (0: no limit).
    int64_t max_upload_bytes = 0;
    // The models a backend lists (/v1/models), for a block that names none.
    std::function<std::vector<std::string>(const std::string& backend)>
        backend_models;
    // Whether a backend is down (its calls wait for it).
    std::function<bool(const std::string& backend)> backend_down;
    // Counts prompts for Estimate (outlives the service); without one,
    // Estimate is UNIMPLEMENTED.
    PromptCounter* prompt_counter = nullptr;
  };

  // `backends`: the names of the server's backends, the default first.
  JobService(const Options& options, BackendNames backends,
             Scheduler& scheduler, JobStore& store, Metrics& metrics);

  // Lists the store's jobs and resumes those that were QUEUED or RUNNING.
  // Returns how many were resumed.
  absl::StatusOr<int> ResumeStoredJobs();

  // The job `request` asks for: a new one, stored and handed to the
  // scheduler, or the caller's job that the same request made before
  // (idempotent submit). `rows`: the inline rows, each serialized as sent
  // (the request's own `rows` are then empty). Blocks on the store.
  absl::StatusOr<std::shared_ptr<Job>> Admit(
      const Caller& caller, const v1::GenerateJobRequest& request,
      absl::Span<const absl::string_view> rows);

  // What the job `request` describes would take (job_estimator.h): the
  // request validated as Admit validates it and its rows read a shard at a
  // time, storing nothing and sending nothing to a model. Blocks on the
  // store and on the backends' tokenizers.
  absl::StatusOr<v1::JobEstimate> Estimate(
      const Caller& caller, const v1::GenerateJobRequest& request);

  // The caller's job; NOT_FOUND naming the id, also for another tenant's.
  // These four may read the store (an ended job is read back from it):
  // with StoreReads::kRefused they answer only from memory, else
  // StoreReadRefused (job_registry.h).
  absl::StatusOr<std::shared_ptr<Job>> Find(
      const Caller& caller, const std::string& job_id,
      StoreReads reads = StoreReads::kAllowed);
  // The job as a client sees it: its snapshot, and whether its backend is
  // down while it runs.
  v1::Job Describe(const Job& job) const;
  absl::StatusOr<v1::Job> Get(const Caller& caller, const std::string& job_id,
                              StoreReads reads = StoreReads::kAllowed);
  absl::StatusOr<v1::Job> Cancel(const Caller& caller,
                                 const std::string& job_id,
                                 StoreReads reads = StoreReads::kAllowed);
  absl::StatusOr<v1::ListJobsResponse> List(
      const Caller& caller, const v1::ListJobsRequest& request,
      StoreReads reads = StoreReads::kAllowed);
  // Removes a finished job and its stored results; FAILED_PRECONDITION for
  // one that has not finished. Blocks on the store.
  absl::Status Delete(const Caller& caller, const std::string& job_id);

  // What the caller's tenant holds in the store (UNIMPLEMENTED for a store
  // that keeps nothing on disk), and its quota (0: none).
  absl::StatusOr<StorageUsage> Usage(const Caller& caller);
  int64_t storage_quota_bytes() const {
    return options_.tenant_storage_quota_bytes;
  }
  // What an upload of the caller's tenant may take, or RESOURCE_EXHAUSTED
  // when the tenant is at its quota already. Reads the store.
  absl::StatusOr<DatasetUpload::Limits> UploadLimits(const Caller& caller);
  // An upload for the caller's tenant, or RESOURCE_EXHAUSTED when the tenant
  // is at its quota already.
  absl::StatusOr<std::unique_ptr<DatasetUpload>> StartUpload(
      const Caller& caller);

  // Removes finished jobs and uploads past the retention from the registry
  // and the store, and (durable store) lets go of the ended jobs' state in
  // memory: they are read from the store when asked for. Blocks on the
  // store: the server runs it on a thread of its own, every
  // RetentionPeriod().
  void RemoveExpired();
  // How often RemoveExpired runs: a tenth of the retention, from a second
  // to a minute, so a job outlives its retention by at most that.
  absl::Duration RetentionPeriod() const;

  // Shutdown, in order: refuse new jobs (UNAVAILABLE), let running ones end
  // until a deadline, then suspend or cancel the rest.
  void StartDraining();
  // True if every job has finished (or was suspended) by `deadline`.
  bool AwaitJobsFinished(absl::Time deadline);
  void CancelAllJobs(const absl::Status& reason);
  void SuspendAllJobs(const absl::Status& reason);

 private:
  // A block (or a pipeline's LLM step) with no model gets its backend's one
  // model, or the error, naming `field`, lists what the backend has.
  absl::Status ChooseModels(JobSpec& spec) const;
  absl::Status ChooseModel(absl::string_view field, v1::Block& block) const;
  absl::StatusOr<std::shared_ptr<Job>> AdmitNew(
      const Caller& caller, const v1::GenerateJobRequest& request,
      absl::Span<const absl::string_view> rows, const std::string& digest,
      JobSpec spec);
  // Estimate's rows, a shard (batch_size rows) at a time, from the
  // request's dataset; the dataset's info once all are read.
  absl::StatusOr<DatasetInfo> ReadShards(
      const Caller& caller, const v1::GenerateJobRequest& request,
      const JobSpec& spec,
      absl::FunctionRef<absl::Status(std::vector<google::protobuf::Struct>)>
          on_shard);
  // An OpenAI batch's lines, each checked (batch_line.h): the job's end
  // when any fails (its line_errors name them), else nullopt. Sets the
  // spec's openai_batch.model to the model every line names.
  absl::StatusOr<std::optional<v1::JobFinished>> CheckBatchLines(
      JobSpec& spec, const Dataset& dataset) const;
  // A batch whose lines failed validation: stored and listed as FAILED,
  // never run.
  absl::StatusOr<std::shared_ptr<Job>> AddFailedBatch(
      JobSpec spec, JobRecord record, v1::JobFinished finished,
      std::shared_ptr<Dataset> dataset);
  // Writes (or links) the request's dataset into the store for the job.
  absl::StatusOr<std::shared_ptr<Dataset>> StoreDataset(
      const Caller& caller, const v1::GenerateJobRequest& request,
      absl::Span<const absl::string_view> rows, const JobSpec& spec);
  // What `caller`'s tenant holds, or RESOURCE_EXHAUSTED when that is its
  // storage quota or more. Reads the store only when there is a quota.
  absl::StatusOr<StorageUsage> UsageWithinQuota(const Caller& caller) const;
  // Removes uploads older than the retention.
  void PruneUploads();
  // A stored job as a Job, and why this server could not run it (its
  // request no longer validates here), if it could not.
  struct Rebuilt {
    absl::StatusOr<std::shared_ptr<Job>> job;
    absl::Status invalid;
  };
  Rebuilt Rebuild(JobRecord record);
  // A stored job's spec, as its request validates on this server; if it
  // does not (`invalid` says why), enough of one to list the job.
  JobSpec StoredSpec(const JobRecord& record, absl::Status* invalid) const;
  // An unfinished stored job, listed and handed to the scheduler.
  absl::Status Resume(JobRecord record);

  const Options options_;
  const BackendNames backends_;
  Scheduler& scheduler_;
  JobStore& store_;
  Metrics& metrics_;
  const DataRoot data_root_;
  JobRegistry registry_;

  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // Ids whose admission is in progress: a second request for one waits its
  // turn by retrying (ABORTED).
  absl::flat_hash_set<std::string> admitting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_JOB_SERVICE_H_
