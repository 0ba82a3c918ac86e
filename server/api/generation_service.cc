#include "server/api/generation_service.h"

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "server/api/job_stream.h"
#include "server/api/status_util.h"
#include "server/api/upload_reactor.h"
#include "server/api/wire.h"

namespace sdg {
namespace {

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A unary method on raw bytes from a known caller that reads jobs: decodes
// the request and runs `handle` on the reaction without reading the store;
// if it needs the store (StoreReadRefused), runs it again on `blocking`.
// Answers with its status and, if OK, its response.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* AnswerReading(Executor& blocking,
                                        grpc::CallbackServerContext* context,
                                        absl::StatusOr<Caller> caller,
                                        const grpc::ByteBuffer& raw_request,
                                        grpc::ByteBuffer* raw_response,
                                        Handle handle) {
  if (!caller.ok()) return Answer(context, caller.status());
  Request request;
  if (absl::Status s = DecodeRequest(raw_request, request); !s.ok()) {
    return Answer(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto answer = [reactor, raw_response](absl::StatusOr<Response> response) {
    if (response.ok()) *raw_response = EncodeMessage(*response);
    reactor->Finish(ToGrpcStatus(response.status()));
  };
  absl::StatusOr<Response> from_memory =
      handle(*caller, request, StoreReads::kRefused);
  if (!IsStoreReadRefused(from_memory.status())) {
    answer(std::move(from_memory));
    return reactor;
  }
  blocking.Post([answer, caller = *std::move(caller),
                 request = std::move(request),
                 handle = std::move(handle)]() mutable {
    answer(handle(caller, request, StoreReads::kAllowed));
  });
  return reactor;
}

}  // namespace

GenerationService::GenerationService(Authenticator& authenticator,
                                     JobService& jobs, Executor& blocking)
    : authenticator_(authenticator), jobs_(jobs), blocking_(blocking) {}

absl::StatusOr<Caller> GenerationService::Identify(
    const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return authenticator_.Authenticate(std::nullopt);
  return authenticator_.Authenticate(
      absl::string_view(it->second.data(), it->second.size()));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::GenerateJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) {
    return JobStreamReactor::Reject(ToGrpcStatus(caller.status()));
  }
  auto decoded = std::make_unique<DecodedJobRequest>();
  if (absl::Status s = DecodeGenerateJobRequest(*request, *decoded); !s.ok()) {
    return JobStreamReactor::Reject(ToGrpcStatus(s));
  }
  JobStreamReactor* reactor = JobStreamReactor::CreatePending();
  const absl::Time deadline = absl::FromChrono(context->deadline());
  blocking_.Post([this, reactor, deadline, caller = *std::move(caller),
                  decoded = std::move(decoded)] {
    StartGenerateJob(*reactor, deadline, caller, *decoded);
  });
  return reactor;
}

void GenerationService::StartGenerateJob(JobStreamReactor& reactor,
                                         absl::Time deadline,
                                         const Caller& caller,
                                         const DecodedJobRequest& decoded) {
  absl::StatusOr<std::shared_ptr<Job>> job =
      jobs_.Admit(caller, decoded.fields, decoded.rows);
  if (!job.ok()) return reactor.Fail(ToGrpcStatus(job.status()));
  absl::StatusOr<std::unique_ptr<EventLog::Reader>> reader =
      (*job)->log()->Read(0);
  if (!reader.ok()) return reactor.Fail(ToGrpcStatus(reader.status()));
  if (decoded.fields.detach())
    return reactor.Begin(*std::move(reader), nullptr);
  // The call also ends this way when its deadline passes: the server's
  // deadline is counted from the request's arrival, so the client's own
  // cancel at its deadline can come a little earlier; kDeadlineSlack covers
  // that.
  static constexpr absl::Duration kDeadlineSlack = absl::Seconds(1);
  std::weak_ptr<Job> weak = *job;
  reactor.Begin(*std::move(reader), [weak, deadline] {
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

grpc::ServerUnaryReactor* GenerationService::CreateJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) return Answer(context, caller.status());
  auto decoded = std::make_unique<DecodedJobRequest>();
  if (absl::Status s = DecodeGenerateJobRequest(*request, *decoded); !s.ok()) {
    return Answer(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  blocking_.Post([this, reactor, response, caller = *std::move(caller),
                  decoded = std::move(decoded)] {
    absl::StatusOr<std::shared_ptr<Job>> admitted =
        jobs_.Admit(caller, decoded->fields, decoded->rows);
    if (admitted.ok()) *response = EncodeMessage(jobs_.Describe(**admitted));
    reactor->Finish(ToGrpcStatus(admitted.status()));
  });
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::WatchJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) {
    return JobStreamReactor::Reject(ToGrpcStatus(caller.status()));
  }
  v1::WatchJobRequest decoded;
  if (absl::Status s = DecodeRequest(*request, decoded); !s.ok()) {
    return JobStreamReactor::Reject(ToGrpcStatus(s));
  }
  absl::StatusOr<std::unique_ptr<EventLog::Reader>> reader =
      ReadEvents(*caller, decoded, StoreReads::kRefused);
  if (!IsStoreReadRefused(reader.status())) {
    if (!reader.ok()) {
      return JobStreamReactor::Reject(ToGrpcStatus(reader.status()));
    }
    return JobStreamReactor::Create(*std::move(reader), nullptr);
  }
  // An ended job read back from the store.
  JobStreamReactor* reactor = JobStreamReactor::CreatePending();
  blocking_.Post([this, reactor, caller = *std::move(caller),
                  decoded = std::move(decoded)] {
    absl::StatusOr<std::unique_ptr<EventLog::Reader>> reader =
        ReadEvents(caller, decoded, StoreReads::kAllowed);
    if (!reader.ok()) return reactor->Fail(ToGrpcStatus(reader.status()));
    reactor->Begin(*std::move(reader), nullptr);
  });
  return reactor;
}

absl::StatusOr<std::unique_ptr<EventLog::Reader>> GenerationService::ReadEvents(
    const Caller& caller, const v1::WatchJobRequest& request,
    StoreReads reads) {
  SDG_ASSIGN_OR_RETURN(std::shared_ptr<Job> job,
                       jobs_.Find(caller, request.job_id(), reads));
  return job->log()->Read(request.after_sequence());
}

grpc::ServerReadReactor<v1::DatasetChunk>* GenerationService::UploadDataset(
    grpc::CallbackServerContext* context, v1::Dataset* response) {
  return DatasetUploadReactor::Start(
      blocking_, *context,
      [this, caller = Identify(*context)]()
          -> absl::StatusOr<std::unique_ptr<DatasetUpload>> {
        if (!caller.ok()) return caller.status();
        return jobs_.StartUpload(*caller);
      },
      response);
}

grpc::ServerUnaryReactor* GenerationService::CancelJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return AnswerReading<v1::CancelJobRequest, v1::Job>(
      blocking_, context, Identify(*context), *request, response,
      [this](const Caller& caller, const v1::CancelJobRequest& request,
             StoreReads reads) {
        return jobs_.Cancel(caller, request.job_id(), reads);
      });
}

grpc::ServerUnaryReactor* GenerationService::GetStorageUsage(
    grpc::CallbackServerContext* context, const v1::GetStorageUsageRequest*,
    v1::StorageUsage* response) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) return Answer(context, caller.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The usage is counted from the store's files.
  blocking_.Post([this, reactor, response, caller = *std::move(caller)] {
    absl::StatusOr<StorageUsage> usage = jobs_.Usage(caller);
    if (usage.ok()) {
      response->set_tenant(caller.tenant);
      response->set_upload_bytes(usage->upload_bytes);
      response->set_dataset_bytes(usage->dataset_bytes);
      response->set_result_bytes(usage->result_bytes);
      response->set_total_bytes(usage->total());
      response->set_quota_bytes(jobs_.storage_quota_bytes());
    }
    reactor->Finish(ToGrpcStatus(usage.status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::EstimateJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) return Answer(context, caller.status());
  v1::GenerateJobRequest decoded;
  if (absl::Status s = DecodeRequest(*request, decoded); !s.ok()) {
    return Answer(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // It reads the dataset from the store and asks the backends' tokenizers.
  blocking_.Post([this, reactor, response, caller = *std::move(caller),
                  decoded = std::move(decoded)] {
    absl::StatusOr<v1::JobEstimate> estimate = jobs_.Estimate(caller, decoded);
    const absl::Status status = estimate.status();
    if (status.ok()) *response = EncodeMessage(*estimate);
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::GetJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return AnswerReading<v1::GetJobRequest, v1::Job>(
      blocking_, context, Identify(*context), *request, response,
      [this](const Caller& caller, const v1::GetJobRequest& request,
             StoreReads reads) {
        return jobs_.Get(caller, request.job_id(), reads);
      });
}

grpc::ServerUnaryReactor* GenerationService::ListJobs(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return AnswerReading<v1::ListJobsRequest, v1::ListJobsResponse>(
      blocking_, context, Identify(*context), *request, response,
      [this](const Caller& caller, const v1::ListJobsRequest& request,
             StoreReads reads) { return jobs_.List(caller, request, reads); });
}

grpc::ServerUnaryReactor* GenerationService::DeleteJob(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller = Identify(*context);
  if (!caller.ok()) return Answer(context, caller.status());
  v1::DeleteJobRequest decoded;
  if (absl::Status s = DecodeRequest(*request, decoded); !s.ok()) {
    return Answer(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Removing a job's files and record blocks on the store.
  blocking_.Post([this, reactor, response, caller = *std::move(caller),
                  job_id = decoded.job_id()] {
    absl::Status deleted = jobs_.Delete(caller, job_id);
    if (deleted.ok()) *response = EncodeMessage(google::protobuf::Empty());
    reactor->Finish(ToGrpcStatus(deleted));
  });
  return reactor;
}

}  // namespace sdg
