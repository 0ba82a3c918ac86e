// sdg.v1.GenerationService on gRPC's callback API: validates requests,
// stores jobs and their datasets, hands them to the scheduler and streams
// their committed events back; on start, resumes the jobs the store holds.
// Every method first asks the Authenticator who calls: a job and an upload
// belong to the tenant that made them.
#ifndef SDG_SERVER_API_GENERATION_SERVICE_H_
#define SDG_SERVER_API_GENERATION_SERVICE_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/api/authenticator.h"
#include "server/api/data_root.h"
#include "server/api/job_registry.h"
#include "server/api/wire.h"
#include "server/jobs/job_spec.h"
#include "server/observability/metrics.h"
#include "server/scheduling/scheduler.h"
#include "server/store/job_store.h"

namespace sdg {

// The methods whose requests arrive as bytes (wire.h): every one but
// UploadDataset, whose chunks are bytes already.
using GenerationServiceBase =
    v1::GenerationService::WithRawCallbackMethod_GenerateJob<
        v1::GenerationService::WithRawCallbackMethod_CreateJob<
            v1::GenerationService::WithRawCallbackMethod_WatchJob<
                v1::GenerationService::WithRawCallbackMethod_CancelJob<
                    v1::GenerationService::WithRawCallbackMethod_GetJob<
                        v1::GenerationService::WithRawCallbackMethod_ListJobs<
                            v1::GenerationService::
                                WithRawCallbackMethod_DeleteJob<
                                    v1::GenerationService::
                                        CallbackService>>>>>>>;

class GenerationService final : public GenerationServiceBase {
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
  };

  // `backends`: the names of the server's backends, the default first.
  GenerationService(const Options& options, BackendNames backends,
                    Authenticator& authenticator, Scheduler& scheduler,
                    JobStore& store, Metrics& metrics);

  // Lists the store's jobs and resumes those that were QUEUED or RUNNING.
  // Returns how many were resumed.
  absl::StatusOr<int> ResumeStoredJobs();

  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateJob(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<v1::DatasetChunk>* UploadDataset(
      grpc::CallbackServerContext* context, v1::Dataset* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStorageUsage(
      grpc::CallbackServerContext* context,
      const v1::GetStorageUsageRequest* request,
      v1::StorageUsage* response) override;

  // Removes finished jobs and uploads past the retention from the registry
  // and the store. Blocks on the store: the server runs it on a thread of
  // its own, every RetentionPeriod().
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
  // A job for a request: a new one, or the existing job the same request
  // made before (idempotent submit).
  absl::StatusOr<std::shared_ptr<Job>> Admit(const Caller& caller,
                                             const DecodedJobRequest& request);
  // The call's caller, from its authorization metadata.
  absl::StatusOr<Caller> Identify(const grpc::CallbackServerContext& context);
  // A block (or a pipeline's LLM step) with no model gets its backend's one
  // model, or the error, naming `field`, lists what the backend has.
  absl::Status ChooseModels(JobSpec& spec) const;
  absl::Status ChooseModel(absl::string_view field, v1::Block& block) const;
  absl::StatusOr<std::shared_ptr<Job>> AdmitNew(
      const Caller& caller, const DecodedJobRequest& request,
      const std::string& digest, JobSpec spec);
  // Writes (or links) the request's dataset into the store for the job.
  absl::StatusOr<std::shared_ptr<Dataset>> StoreDataset(
      const Caller& caller, const DecodedJobRequest& request,
      const JobSpec& spec);
  // What `caller`'s tenant holds, or RESOURCE_EXHAUSTED when that is its
  // storage quota or more. Reads the store only when there is a quota.
  absl::StatusOr<StorageUsage> UsageWithinQuota(const Caller& caller) const;
  // Removes uploads older than the retention.
  void PruneUploads();
  // A stored job as a Job; unfinished ones are resumed.
  absl::Status Restore(JobRecord record);

  // The methods on decoded requests.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StartGenerateJob(
      grpc::CallbackServerContext* context, const Caller& caller,
      const DecodedJobRequest& request);
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StartWatchJob(
      const Caller& caller, const v1::WatchJobRequest& request);
  absl::Status ListJobsPage(const Caller& caller,
                            const v1::ListJobsRequest& request,
                            v1::ListJobsResponse& response);
  absl::Status DeleteFinishedJob(const Caller& caller,
                                 const v1::DeleteJobRequest& request);
  // The job as a client sees it: its snapshot, and whether its backend is
  // down while it runs.
  v1::Job Describe(const Job& job) const;
  // Finds the caller's job (NOT_FOUND otherwise), applies `action` to it
  // and gives its snapshot.
  absl::Status WithJob(const Caller& caller, const std::string& job_id,
                       v1::Job& response, absl::FunctionRef<void(Job&)> action);

  const Options options_;
  const BackendNames backends_;
  Authenticator& authenticator_;
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

#endif  // SDG_SERVER_API_GENERATION_SERVICE_H_
