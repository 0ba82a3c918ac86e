// Messages as bytes on the wire. GenerationService takes its requests as
// bytes (gRPC's raw callback methods) so that one that does not decode is
// answered INVALID_ARGUMENT saying why, and writes its events as bytes.
#ifndef SDG_SERVER_API_WIRE_H_
#define SDG_SERVER_API_WIRE_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <deque>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "sdg/v1/generation.pb.h"

namespace sdg {

// Parses `bytes` into `message`: INVALID_ARGUMENT naming the message type if
// they are not one (a string that is not UTF-8, Struct values nested deeper
// than protobuf's limit of 100, truncated or foreign bytes).
absl::Status DecodeRequest(const grpc::ByteBuffer& bytes,
                           google::protobuf::Message& message);

// A GenerateJobRequest as sdgd decodes it: its inline rows stay where they
// arrived (each a serialized google.protobuf.Struct, pointed into the
// request's bytes) until they are written to the job's dataset, instead of
// becoming protobuf maps of about 1 KB a row.
struct DecodedJobRequest {
  v1::GenerateJobRequest fields;  // everything but `rows`
  grpc::ByteBuffer bytes;         // the request (its slices shared, not copied)
  // Each row, in `bytes`, or in `spanning` when it spans two slices.
  std::vector<absl::string_view> rows;
  std::deque<std::string> spanning;
};
absl::Status DecodeGenerateJobRequest(const grpc::ByteBuffer& bytes,
                                      DecodedJobRequest& request);

// `message` serialized into slices, without a copy into one string first.
grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message);

}  // namespace sdg

#endif  // SDG_SERVER_API_WIRE_H_
