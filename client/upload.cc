#include "client/upload.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"
#include "client/grpc_status.h"

namespace sdg {

absl::StatusOr<v1::Dataset> UploadDatasetFile(
    v1::GenerationService::StubInterface& stub, const std::string& path,
    const std::string& dataset_id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  constexpr size_t kChunkBytes = 1 << 20;
  grpc::ClientContext context;
  v1::Dataset dataset;
  auto writer = stub.UploadDataset(&context, &dataset);
  Sha256 sha256;
  int64_t bytes = 0;
  v1::DatasetChunk chunk;
  chunk.set_dataset_id(dataset_id);
  std::string buffer(kChunkBytes, '\0');
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    chunk.set_data(buffer.data(), got);
    sha256.Update(chunk.data());
    bytes += static_cast<int64_t>(got);
    // A failed write means the server ended the call: Finish says why.
    if (!writer->Write(chunk)) break;
    chunk.clear_dataset_id();
  }
  if (in.bad()) {
    context.TryCancel();
    return absl::DataLossError(absl::StrCat("error reading ", path));
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (dataset.bytes() != bytes || dataset.sha256() != sha256.HexDigest()) {
    return absl::DataLossError(absl::StrCat(
        "sdgd stored ", dataset.bytes(), " bytes with SHA-256 ",
        dataset.sha256(), " but ", bytes, " bytes were sent from ", path));
  }
  return dataset;
}

}  // namespace sdg
