// sdg.v1.GenerationService on gRPC's callback API: validates requests, makes
// jobs, hands them to the scheduler and streams their events back.
#ifndef SDG_SERVER_API_GENERATION_SERVICE_H_
#define SDG_SERVER_API_GENERATION_SERVICE_H_

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/api/job_registry.h"
#include "server/jobs/job_spec.h"
#include "server/observability/metrics.h"
#include "server/scheduling/scheduler.h"

namespace sdg {

class GenerationService final : public v1::GenerationService::CallbackService {
 public:
  struct Options {
    ValidationLimits limits;
    absl::Duration job_retention = absl::Hours(1);
  };

  // `backends`: the names of the server's backends, the default first.
  GenerationService(const Options& options, BackendNames backends,
                    Scheduler& scheduler, Metrics& metrics);

  grpc::ServerWriteReactor<v1::JobEvent>* GenerateJob(
      grpc::CallbackServerContext* context,
      const v1::GenerateJobRequest* request) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request,
                                   v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;

  // Shutdown, in order: refuse new jobs (UNAVAILABLE), let running ones end
  // until a deadline, cancel the rest.
  void StartDraining();
  // True if every job has finished by `deadline`.
  bool AwaitJobsFinished(absl::Time deadline);
  void CancelAllJobs(const absl::Status& reason);

 private:
  const Options options_;
  // Validates, registers and submits a job whose events go to `sink`.
  absl::StatusOr<std::shared_ptr<Job>> Admit(
      const v1::GenerateJobRequest& request, std::shared_ptr<JobSink> sink);

  // Finds the job (NOT_FOUND otherwise), applies `action` to it and answers
  // with its snapshot.
  grpc::ServerUnaryReactor* AnswerWithJob(grpc::CallbackServerContext* context,
                                          const std::string& job_id,
                                          v1::Job* response,
                                          absl::FunctionRef<void(Job&)> action);

  const BackendNames backends_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  JobRegistry registry_;

  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_GENERATION_SERVICE_H_
