// The server side of an UploadDataset call: checks each JSON line as it
// arrives and writes the rows to the job store; a bad line, an upload past
// its size limit or its tenant's quota (or a client that goes away) stores
// nothing.
#ifndef SDG_SERVER_API_DATASET_UPLOAD_H_
#define SDG_SERVER_API_DATASET_UPLOAD_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "base/sha256.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/dataset.h"
#include "server/store/job_store.h"

namespace sdg {

class DatasetUploadReactor final
    : public grpc::ServerReadReactor<v1::DatasetChunk> {
 public:
  // Answers into `response`, which outlives the call. Only allocates (and
  // so starts the first read), and is the one place that does:
  // ThreadSanitizer's suppressions name this frame for gRPC filling
  // `chunk_` on its own thread after a handoff inside libgrpc (see
  // tests/tsan/suppressions.txt), as for JobStreamReactor::Allocate.
  // What an upload may take, checked against the bytes received as they
  // arrive.
  struct Limits {
    int64_t max_upload_bytes = 0;  // 0: no limit
    int64_t quota_bytes = 0;       // the tenant's quota; 0: none
    StorageUsage usage;            // what the tenant held at the start
  };
  // The upload belongs to `tenant`: only its jobs can name it.
  static DatasetUploadReactor* Start(JobStore& store, std::string tenant,
                                     const Limits& limits,
                                     v1::Dataset* response);
  // Ends the call with `status` at once, reading nothing (a caller that is
  // not authenticated).
  static DatasetUploadReactor* Refuse(JobStore& store,
                                      const absl::Status& status);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  DatasetUploadReactor(JobStore& store, std::string tenant,
                       const Limits& limits, v1::Dataset* response);
  // Takes one chunk; an error ends the upload.
  absl::Status Take(const v1::DatasetChunk& chunk);
  // The client has sent everything.
  absl::Status Complete();
  void End(const absl::Status& status);

  JobStore& store_;
  const std::string tenant_;
  const Limits limits_;
  v1::Dataset* const response_;
  // Only touched by OnReadDone, which gRPC never runs twice at once.
  v1::DatasetChunk chunk_;
  std::string dataset_id_;
  int64_t bytes_received_ = 0;
  std::unique_ptr<DatasetBuilder> builder_;
  JsonLinesDecoder decoder_;
  Sha256 sha256_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_DATASET_UPLOAD_H_
