// The server side of an UploadDataset call: hands each chunk to the
// service's DatasetUpload as it arrives and answers with the stored
// dataset; a refused chunk ends the call and the upload stores nothing,
// and so does a call the client cancels (or that breaks) before its end.
// The upload writes files, so its work runs on an Executor, never in a
// reaction: one read is in flight at a time, and the next starts once the
// executor has taken the chunk.
#ifndef SDG_SERVER_API_UPLOAD_REACTOR_H_
#define SDG_SERVER_API_UPLOAD_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "base/executor.h"
#include "sdg/v1/generation.pb.h"
#include "server/service/dataset_upload.h"

namespace sdg {

class DatasetUploadReactor final
    : public grpc::ServerReadReactor<v1::DatasetChunk> {
 public:
  using Prepare =
      absl::AnyInvocable<absl::StatusOr<std::unique_ptr<DatasetUpload>>() &&>;
  // Runs `prepare` on `blocking` (it may read the store), then reads the
  // chunks into the upload it made, answering into `response`, which
  // outlives the call; an error from `prepare` ends the call, reading
  // nothing. Only allocates, and is the one place that does:
  // ThreadSanitizer's suppressions name this frame for gRPC touching the
  // reactor on its own threads after a handoff inside libgrpc (see
  // tests/tsan/suppressions.txt), as for JobStreamReactor::Allocate.
  static DatasetUploadReactor* Start(Executor& blocking,
                                     grpc::CallbackServerContext& context,
                                     Prepare prepare, v1::Dataset* response);
  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  DatasetUploadReactor(Executor& blocking, grpc::CallbackServerContext& context,
                       v1::Dataset* response);
  // On the executor: takes the chunk just read (or, once the client has
  // sent everything, completes the upload), then reads on or ends.
  void Step(bool ok);
  // Starts the next read into a chunk of its own (NewChunk).
  void ReadNext();
  // Every read gets a new chunk, and Step frees each one it took: gRPC
  // parses on its own thread after a handoff inside libgrpc that
  // ThreadSanitizer cannot see, so parsing into a chunk this executor has
  // just read (as one reused chunk did) looks like a race to it (seen:
  // DurableJobsTest.UploadedDatasetRunsAndABadLineIsNamed, 3 of 4 parallel
  // runs of 40). The suppressions name this frame, which only constructs.
  static std::unique_ptr<v1::DatasetChunk> NewChunk();
  // The client has sent everything.
  absl::Status Complete();
  void End(const absl::Status& status);

  Executor& blocking_;
  grpc::CallbackServerContext& context_;
  v1::Dataset* const response_;
  // Set on the executor before the first read; then touched only by Step,
  // which runs once per read, after it.
  std::unique_ptr<DatasetUpload> upload_;
  // The chunk gRPC is reading into; set by ReadNext, taken by Step.
  std::unique_ptr<v1::DatasetChunk> reading_;
  // Steps run in turn on executor threads, each after the read the one
  // before it started, and OnDone runs on a gRPC thread after the Finish
  // that End called: orders gRPC keeps inside libgrpc, where
  // ThreadSanitizer cannot see them (seen: reading_ written by one Step and
  // read by the next, 3 of 4 parallel runs of 100; reading_ emptied by the
  // last Step and destroyed by OnDone's delete, 1 TSan run in about 30).
  // ReadNext and End add to this with release before handing the call to
  // gRPC, and Step and OnDone load it with acquire, which makes those
  // orders visible; the count itself is never used.
  std::atomic<int> handoffs_{0};
};

}  // namespace sdg

#endif  // SDG_SERVER_API_UPLOAD_REACTOR_H_
