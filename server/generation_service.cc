#include "server/generation_service.h"

#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/job_stream.h"
#include "server/status_util.h"

namespace sdg {

GenerationService::GenerationService(const Options& options,
                                     BackendSet backends, Scheduler& scheduler,
                                     Metrics& metrics)
    : options_(options),
      backends_(std::move(backends)),
      scheduler_(scheduler),
      metrics_(metrics),
      registry_(options.job_retention) {}

grpc::ServerWriteReactor<v1::JobEvent>* GenerationService::GenerateJob(
    grpc::CallbackServerContext* context,
    const v1::GenerateJobRequest* request) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      return JobStreamReactor::Reject(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          "server is shutting down; retry against another replica"));
    }
  }
  absl::StatusOr<JobSpec> spec =
      ValidateRequest(*request, backends_, options_.limits);
  if (!spec.ok()) {
    Log(LogLevel::kInfo, "job rejected",
        {{"job_id", request->job_id()},
         {"error", std::string(spec.status().message())}});
    return JobStreamReactor::Reject(ToGrpcStatus(spec.status()));
  }

  // The reactor's cancel callback may fire before the job exists. The call
  // also ends that way when its deadline passes: the server's deadline is
  // counted from the request's arrival, so the client's own cancel at its
  // deadline can come a little earlier; kDeadlineSlack covers that.
  constexpr absl::Duration kDeadlineSlack = absl::Seconds(1);
  auto job_slot = std::make_shared<std::weak_ptr<Job>>();
  absl::Time deadline = absl::FromChrono(context->deadline());
  JobStreamReactor* reactor = JobStreamReactor::Create([job_slot, deadline] {
    std::shared_ptr<Job> job = job_slot->lock();
    if (job == nullptr) return;
    if (absl::Now() + kDeadlineSlack >= deadline) {
      job->Cancel(absl::DeadlineExceededError(
          "the GenerateJob call's deadline passed"));
    } else {
      job->Cancel(
          absl::CancelledError("the client cancelled the GenerateJob call"));
    }
  });
  auto job = std::make_shared<Job>(*std::move(spec), reactor->sink(), metrics_);
  if (absl::Status added = registry_.Add(job); !added.ok()) {
    // This reactor was never handed to gRPC and its job never ran.
    delete reactor;
    return JobStreamReactor::Reject(ToGrpcStatus(added));
  }
  *job_slot = job;
  if (absl::Status admitted = scheduler_.Submit(job); !admitted.ok()) {
    registry_.Remove(job->id());
    delete reactor;
    Log(LogLevel::kWarning, "job rejected",
        {{"job_id", job->id()}, {"error", std::string(admitted.message())}});
    return JobStreamReactor::Reject(ToGrpcStatus(admitted));
  }
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::CancelJob(
    grpc::CallbackServerContext* context, const v1::CancelJobRequest* request,
    v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::shared_ptr<Job>> job = registry_.Find(request->job_id());
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  (*job)->Cancel(absl::CancelledError("cancelled by CancelJob"));
  *response = (*job)->Snapshot();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetJob(
    grpc::CallbackServerContext* context, const v1::GetJobRequest* request,
    v1::Job* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::shared_ptr<Job>> job = registry_.Find(request->job_id());
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  *response = (*job)->Snapshot();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::ListJobs(
    grpc::CallbackServerContext* context, const v1::ListJobsRequest* request,
    v1::ListJobsResponse* response) {
  for (const std::shared_ptr<Job>& job : registry_.List()) {
    *response->add_jobs() = job->Snapshot();
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void GenerationService::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool GenerationService::AwaitJobsFinished(absl::Time deadline) {
  for (const std::shared_ptr<Job>& job : registry_.Unfinished()) {
    if (!job->AwaitFinished(deadline)) return false;
  }
  return true;
}

void GenerationService::CancelAllJobs(const absl::Status& reason) {
  for (const std::shared_ptr<Job>& job : registry_.Unfinished()) {
    job->Cancel(reason);
  }
}

}  // namespace sdg
