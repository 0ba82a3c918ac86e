// Messages as bytes on the wire. GenerationService takes its requests as
// bytes (gRPC's raw callback methods) so that one that does not decode is
// answered INVALID_ARGUMENT saying why, and writes its events as bytes.
#ifndef SDG_SERVER_API_WIRE_H_
#define SDG_SERVER_API_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace sdg {

// Parses `bytes` into `message`: INVALID_ARGUMENT naming the message type if
// they are not one (a string that is not UTF-8, Struct values nested deeper
// than protobuf's limit of 100, truncated or foreign bytes).
absl::Status DecodeRequest(const grpc::ByteBuffer& bytes,
                           google::protobuf::Message& message);

// `message` serialized into slices, without a copy into one string first.
grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message);

}  // namespace sdg

#endif  // SDG_SERVER_API_WIRE_H_
