// One upload of a JSON-lines dataset into the store, as the UploadDataset
// call streams it: each chunk is checked and its rows written as it
// arrives; a bad line, an upload past its size limit or its tenant's quota,
// or an upload dropped before Complete stores nothing. Blocks on the store
// (it writes files): its caller runs it off gRPC's reaction threads.
#ifndef SDG_SERVER_SERVICE_DATASET_UPLOAD_H_
#define SDG_SERVER_SERVICE_DATASET_UPLOAD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/sha256.h"
#include "sdg/v1/generation.pb.h"
#include "server/store/dataset.h"
#include "server/store/job_store.h"

namespace sdg {

class DatasetUpload {
 public:
  // What an upload may take, checked against the bytes received as they
  // arrive.
  struct Limits {
    int64_t max_upload_bytes = 0;  // 0: no limit
    int64_t quota_bytes = 0;       // the tenant's quota; 0: none
    StorageUsage usage;            // what the tenant held at the start
  };
  // The upload belongs to `tenant`: only its jobs can name it.
  DatasetUpload(DatasetStore& store, std::string tenant, const Limits& limits);
  // Discards what was written unless Complete succeeded.
  ~DatasetUpload();
  DatasetUpload(const DatasetUpload&) = delete;
  DatasetUpload& operator=(const DatasetUpload&) = delete;

  // Takes one chunk; after an error the upload is over (drop it).
  absl::Status Take(const v1::DatasetChunk& chunk);
  // The client has sent everything: the dataset as UploadDataset answers.
  absl::StatusOr<v1::Dataset> Complete();
  // The dataset id, once the first chunk has named or made it.
  const std::string& dataset_id() const { return dataset_id_; }

 private:
  DatasetStore& store_;
  const std::string tenant_;
  const Limits limits_;
  std::string dataset_id_;
  int64_t bytes_received_ = 0;
  std::unique_ptr<DatasetBuilder> builder_;
  JsonLinesDecoder decoder_;
  Sha256 sha256_;
  bool saved_ = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_DATASET_UPLOAD_H_
