#include "server/api/wire.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include "absl/strings/str_cat.h"

namespace sdg {

absl::Status DecodeRequest(const grpc::ByteBuffer& bytes,
                           google::protobuf::Message& message) {
  message.Clear();
  if (!bytes.Valid() || bytes.Length() == 0) return absl::OkStatus();
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok() && message.ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", message.GetDescriptor()->name(),
      " could not be decoded: the bytes are not a valid ",
      message.GetDescriptor()->full_name(),
      " (is a string field not UTF-8, or are Struct values nested deeper "
      "than 100 levels?)"));
}

grpc::ByteBuffer EncodeMessage(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // What gRPC's generated code does for a typed message.
  (void)grpc::GenericSerialize<grpc::ProtoBufferWriter,
                               google::protobuf::Message>(message, &buffer,
                                                          &own_buffer);
  return buffer;
}

}  // namespace sdg
