// `UploadDataset` from a JSON-lines file, streamed in chunks; the server's
// SHA-256 is checked against the bytes sent.
#ifndef SDG_CLIENT_UPLOAD_H_
#define SDG_CLIENT_UPLOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "sdg/v1/generation.grpc.pb.h"

namespace sdg {

// `dataset_id` may be empty (the server makes one). Server errors come back
// as they are, e.g. INVALID_ARGUMENT "line 3: not a JSON object (...)".
absl::StatusOr<v1::Dataset> UploadDatasetFile(
    v1::GenerationService::StubInterface& stub, const std::string& path,
    const std::string& dataset_id);

}  // namespace sdg

#endif  // SDG_CLIENT_UPLOAD_H_
