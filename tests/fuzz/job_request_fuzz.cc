// A GenerateJob request from any bytes, through what sdgd does before a job
// exists: its own decoder (rows kept serialized, split across two slices at
// a point the input chooses), then validation of the block or pipeline.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>

#include "server/api/wire.h"
#include "server/jobs/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  const size_t length = size - 1;
  const size_t cut = data[0] % (length + 1);
  grpc::Slice slices[] = {grpc::Slice(bytes, cut),
                          grpc::Slice(bytes + cut, length - cut)};
  grpc::ByteBuffer buffer(slices, 2);
  sdg::DecodedJobRequest decoded;
  if (!sdg::DecodeGenerateJobRequest(buffer, decoded).ok()) return 0;
  static const sdg::BackendNames backends = {"default", "other"};
  static const sdg::ValidationLimits limits;
  absl::StatusOr<sdg::JobSpec> spec =
      sdg::ValidateRequest(decoded.fields, backends, limits);
  if (spec.ok()) {
    (void)sdg::ValidateDatasetSource(decoded.fields,
                                     static_cast<int64_t>(decoded.rows.size()));
  }
  return 0;
}
