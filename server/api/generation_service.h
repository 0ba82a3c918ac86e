// sdg.v1.GenerationService on gRPC's callback API, the glue between gRPC and
// the JobService: every method asks the Authenticator who calls, decodes
// the request, asks the JobService and encodes its answer; the streaming
// methods send a job's committed events from its log.
#ifndef SDG_SERVER_API_GENERATION_SERVICE_H_
#define SDG_SERVER_API_GENERATION_SERVICE_H_

#include <string>

#include "base/executor.h"
#include "sdg/v1/generation.grpc.pb.h"
#include "server/api/authenticator.h"
#include "server/api/job_stream.h"
#include "server/api/wire.h"
#include "server/service/job_service.h"

namespace sdg {

// The methods whose requests arrive as bytes (wire.h): every one but
// UploadDataset, whose chunks are bytes already, and GetStorageUsage, whose
// request is empty.
using GenerationServiceBase =
    v1::GenerationService::WithRawCallbackMethod_EstimateJob<
        v1::GenerationService::WithRawCallbackMethod_GenerateJob<
            v1::GenerationService::WithRawCallbackMethod_CreateJob<
                v1::GenerationService::WithRawCallbackMethod_WatchJob<
                    v1::GenerationService::WithRawCallbackMethod_CancelJob<
                        v1::GenerationService::WithRawCallbackMethod_GetJob<
                            v1::GenerationService::
                                WithRawCallbackMethod_ListJobs<
                                    v1::GenerationService::
                                        WithRawCallbackMethod_DeleteJob<
                                            v1::GenerationService::
                                                CallbackService>>>>>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  // Work that may block on the store (admission, deletion, uploads, storage
  // usage, estimates, and reading an ended job back from it) runs on
  // `blocking`, never
  // on gRPC's reaction threads; the call is finished from there. Reads of
  // jobs in memory are answered on the reaction.
  GenerationService(Authenticator& authenticator, JobService& jobs,
                    Executor& blocking);

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
  grpc::ServerUnaryReactor* EstimateJob(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

 private:
  // The call's caller, from its authorization metadata.
  absl::StatusOr<Caller> Identify(const grpc::CallbackServerContext& context);
  // On the executor: admits the job and starts `reactor`'s stream of its
  // events, or fails the call.
  void StartGenerateJob(JobStreamReactor& reactor, absl::Time deadline,
                        const Caller& caller, const DecodedJobRequest& request);
  // WatchJob's reader of the caller's job's events after the sequence it
  // names (StoreReadRefused if that needs the store and `reads` refuses).
  absl::StatusOr<std::unique_ptr<EventLog::Reader>> ReadEvents(
      const Caller& caller, const v1::WatchJobRequest& request,
      StoreReads reads);

  Authenticator& authenticator_;
  JobService& jobs_;
  Executor& blocking_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_GENERATION_SERVICE_H_
