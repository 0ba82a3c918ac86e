#include "server/api/generation_service.h"

#include "absl/time/clock.h"
#include "base/logging.h"
#include "server/api/job_stream.h"
#include "server/api/status_util.h"

namespace sdg {

GenerationService::GenerationService(const Options& options,
                                     BackendNames backends,
                                     Scheduler& scheduler, Metrics& metrics)
    : options_(options),
      backends_(std::move(backends)),
      scheduler_(scheduler),
      metrics_(metrics),
      registry_(options.job_retention) {}

absl::StatusOr<std::shared_ptr<Job>> GenerationService::Admit(
    const v1::GenerateJobRequest& request, std::shared_ptr<JobSink> sink) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      return absl::UnavailableError(
          "server is shutting down; retry against another replica");
    }
  }
  absl::StatusOr<JobSpec> spec =
      ValidateRequest(request, backends_, options_.limits);
  if (!spec.ok()) {
    Log(LogLevel::kInfo, "job rejected",
        {{"job_id", request.job_id()},
         {"error", std::string(spec.status().message())}});
    return spec.status();
  }
  auto job = std::make_shared<Job>(*std::move(spec), std::move(sink), metrics_);
  if (absl::Status added = registry_.Add(job); !added.ok()) return added;
  if (absl::Status admitted = scheduler_.Submit(job); !admitted.ok()) {
    registry_.Remove(job->id());
    Log(LogLevel::kWarning, "job rejected",
        {{"job_id", job->id()}, {"error", std::string(admitted.message())}});
    return admitted;
  }
  return job;
}

grpc::ServerWriteReactor<v1::JobEvent>* GenerationService::GenerateJob(
    grpc::CallbackServerContext* context,
    const v1::GenerateJobRequest* request) {
  // The sink holds the job's first events (`started`) until the reactor,
  // made only for an admitted job, attaches to it.
  auto sink = std::make_shared<StreamSink>();
  absl::StatusOr<std::shared_ptr<Job>> job = Admit(*request, sink);
  if (!job.ok()) return JobStreamReactor::Reject(ToGrpcStatus(job.status()));

  // The call also ends this way when its deadline passes: the server's
  // deadline is counted from the request's arrival, so the client's own
  // cancel at its deadline can come a little earlier; kDeadlineSlack covers
  // that.
  constexpr absl::Duration kDeadlineSlack = absl::Seconds(1);
  const absl::Time deadline = absl::FromChrono(context->deadline());
  std::weak_ptr<Job> weak = *job;
  return JobStreamReactor::Create(std::move(sink), [weak, deadline] {
    std::shared_ptr<Job> job = weak.lock();
    if (job == nullptr) return;
    if (absl::Now() + kDeadlineSlack >= deadline) {
      job->Cancel(absl::DeadlineExceededError(
          "the GenerateJob call's deadline passed"));
    } else {
      job->Cancel(
          absl::CancelledError("the client cancelled the GenerateJob call"));
    }
  });
}

grpc::ServerUnaryReactor* GenerationService::AnswerWithJob(
    grpc::CallbackServerContext* context, const std::string& job_id,
    v1::Job* response, absl::FunctionRef<void(Job&)> action) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::shared_ptr<Job>> job = registry_.Find(job_id);
  if (!job.ok()) {
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }
  action(**job);
  *response = (*job)->Snapshot();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::CancelJob(
    grpc::CallbackServerContext* context, const v1::CancelJobRequest* request,
    v1::Job* response) {
  return AnswerWithJob(context, request->job_id(), response, [](Job& job) {
    job.Cancel(absl::CancelledError("cancelled by CancelJob"));
  });
}

grpc::ServerUnaryReactor* GenerationService::GetJob(
    grpc::CallbackServerContext* context, const v1::GetJobRequest* request,
    v1::Job* response) {
  return AnswerWithJob(context, request->job_id(), response, [](Job&) {});
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
