// One file uploaded through the Batch API (POST /v1/files): its bytes split
// into lines as they arrive, each stored as it was sent (batch_line.h's
// LineRow), so that a batch names a bad line by its number and the file
// downloads byte for byte. A file past its size or line limit, or its
// tenant's quota, or dropped before Complete, stores nothing. Blocks on
// the store (it writes files): its caller runs it off the HTTP loop.
#ifndef SDG_SERVER_SERVICE_FILE_UPLOAD_H_
#define SDG_SERVER_SERVICE_FILE_UPLOAD_H_

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/sha256.h"
#include "server/service/dataset_upload.h"
#include "server/store/dataset.h"
#include "server/store/job_store.h"

namespace sdg {

// A Batch API file's lines and bytes, counted as it is written.
struct FileCount {
  int64_t lines = 0;
  int64_t bytes = 0;
  Sha256 sha256;  // of its bytes
};
// Finishes `builder` (the file's rows) and saves the file: `record` names
// it (id, filename, purpose, tenant, expiry), `count` sizes it. Returns
// the record as stored.
absl::StatusOr<StoredDataset> SaveBatchFile(DatasetStore& store,
                                            DatasetBuilder& builder,
                                            StoredDataset record,
                                            FileCount& count);

class FileUpload {
 public:
  struct Limits {
    // The size and quota limits of any upload (max_upload_bytes is the
    // file's size limit here).
    DatasetUpload::Limits upload;
    int64_t max_lines = 0;  // 0: no limit
    // The flags that set them, for errors.
    std::string bytes_flag;
    std::string lines_flag;
  };
  FileUpload(DatasetStore& store, std::string file_id, std::string tenant,
             std::string filename, std::string purpose, Limits limits);
  // Discards what was written unless Complete succeeded.
  ~FileUpload();
  FileUpload(const FileUpload&) = delete;
  FileUpload& operator=(const FileUpload&) = delete;

  // The next bytes of the file; after an error the upload is over.
  absl::Status Take(absl::string_view data);
  // The file as stored: the last line (with or without a newline) taken.
  absl::StatusOr<StoredDataset> Complete();

 private:
  absl::Status AddLine(absl::string_view line);

  DatasetStore& store_;
  const std::string file_id_;
  const std::string tenant_;
  const std::string filename_;
  const std::string purpose_;
  const Limits limits_;
  std::unique_ptr<DatasetBuilder> builder_;
  std::string partial_;           // a line not yet ended
  google::protobuf::Struct row_;  // reused from line to line
  FileCount count_;
  bool saved_ = false;
};

}  // namespace sdg

#endif  // SDG_SERVER_SERVICE_FILE_UPLOAD_H_
