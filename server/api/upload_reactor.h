// The server side of an UploadDataset call: hands each chunk to the
// service's DatasetUpload as it arrives and answers with the stored
// dataset; a refused chunk (or a client that goes away) ends the call and
// the upload stores nothing.
#ifndef SDG_SERVER_API_UPLOAD_REACTOR_H_
#define SDG_SERVER_API_UPLOAD_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "sdg/v1/generation.pb.h"
#include "server/service/dataset_upload.h"

namespace sdg {

class DatasetUploadReactor final
    : public grpc::ServerReadReactor<v1::DatasetChunk> {
 public:
  // Answers into `response`, which outlives the call. Only allocates (and
  // so starts the first read), and is the one place that does:
  // ThreadSanitizer's suppressions name this frame for gRPC filling
  // `chunk_` on its own thread after a handoff inside libgrpc (see
  // tests/tsan/suppressions.txt), as for JobStreamReactor::Allocate.
  static DatasetUploadReactor* Start(std::unique_ptr<DatasetUpload> upload,
                                     v1::Dataset* response);
  // Ends the call with `status` at once, reading nothing (a caller that is
  // not authenticated, or a tenant at its quota).
  static DatasetUploadReactor* Refuse(const absl::Status& status);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  DatasetUploadReactor(std::unique_ptr<DatasetUpload> upload,
                       v1::Dataset* response);
  // The client has sent everything.
  absl::Status Complete();
  void End(const absl::Status& status);

  std::unique_ptr<DatasetUpload> upload_;
  v1::Dataset* const response_;
  // Only touched by OnReadDone, which gRPC never runs twice at once.
  v1::DatasetChunk chunk_;
};

}  // namespace sdg

#endif  // SDG_SERVER_API_UPLOAD_REACTOR_H_
